"""Compiled code reuses freed memory from call to call (`abi.keep_freed_memory`).

The generated code mallocs its intermediate buffers and frees them before returning; without
the malloc tuning, glibc handed each large temporary a fresh mmap per call and every call paid
its page faults (BERT-base: 20,000 minor faults, 38 ms of kernel time per call). Counted here in
minor page faults (getrusage), not time, in child processes: once as onnxc sets malloc up, once
with `ONNXC_KEEP_FREED_MEMORY=0`, which shows the model does fault without the setting (so the
first figure is not low by accident).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent(
    """
    import json, resource, numpy as np, onnx, onnxc
    from onnx import TensorProto, helper
    # Two chained MatMuls: the 1024x2048 f32 intermediate (8 MiB) is a temporary of the code.
    rng = np.random.default_rng(0)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [256, 2048], rng.standard_normal((256, 2048)).astype(np.float32).ravel())
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [2048, 16], rng.standard_normal((2048, 16)).astype(np.float32).ravel())
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])],
        "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024, 16])], [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    c = onnxc.compile(m, cache_dir=False)
    x = rng.standard_normal((1024, 256)).astype(np.float32)
    for _ in range(3):
        c(x=x)
    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        c(x=x)
    r1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print(json.dumps({"faults_per_call": (r1 - r0) / 5}))
    """
)


def _faults_per_call(keep: str) -> float:
    env = dict(os.environ, ONNXC_KEEP_FREED_MEMORY=keep)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return float(json.loads(out.stdout.strip().splitlines()[-1])["faults_per_call"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning: Linux only")
def test_calls_do_not_fault_in_their_temporaries() -> None:
    tuned = _faults_per_call("1")
    untuned = _faults_per_call("0")
    # 8 MiB of temporary is 2048 pages of 4 KiB: faulted in again on every call without the
    # setting, reused with it (a few faults remain for Python's own objects).
    assert untuned >= 1500, untuned
    assert tuned <= 100, tuned
