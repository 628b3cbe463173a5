"""`onnxc bench` run as a subprocess the way users run it: on the shipped sample model with 3
iterations it exits 0 and prints the ISA, the compile time, median/p90 latencies and the
throughput in the documented format; `--compile-stages` lists every stage; bad arguments exit 1
with one message. Timing values are not checked (speed is measured in bench/, never in tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from onnxc.tools.bench import LatencyStats

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "models" / "sample.onnx"
DRIVER = [sys.executable, "-m", "onnxc.tools.driver"]
NUMBER = r"\d+(?:\.\d+)?"


def onnxc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DRIVER, *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_bench_prints_latency_and_throughput() -> None:
    proc = onnxc("bench", str(SAMPLE), "--iterations", "3", "--warmup", "1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(rf"^ISA: .+; threads: \d+; compile: {NUMBER} s$", out, re.M), out
    assert re.search(r"^iterations: 3 \(after 1 warm-up\)$", out, re.M), out
    m = re.search(rf"^latency ms: median ({NUMBER})  p90 ({NUMBER})  mean {NUMBER}  min ({NUMBER})  max ({NUMBER})$", out, re.M)
    assert m, out
    median, p90, low, high = (float(g) for g in m.groups())
    assert low <= median <= p90 <= high
    assert re.search(rf"^throughput: {NUMBER} runs/s$", out, re.M), out
    assert "random inputs" in proc.stderr  # the sample's input was generated, and it says so


def test_compile_stages_lists_every_stage() -> None:
    proc = onnxc("bench", str(SAMPLE), "--compile-stages", "--opt-level", "1")
    assert proc.returncode == 0, proc.stderr
    for stage in ("import", "onnx passes", "to linalg", "to vector", "bufferize", "to LLVM dialect", "LLVM IR O1", "machine code", "total"):
        assert re.search(rf"^  {re.escape(stage)}.* {NUMBER} s", proc.stdout, re.M), (stage, proc.stdout)


def test_compile_stages_use_the_given_threads_and_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--compile-stages` times the compile that `--threads` and `--opt-level` ask for (the
    threads were dropped: the stages always ran with the host's cores)."""
    import argparse

    from onnxc.tools import bench

    seen: list[object] = []
    monkeypatch.setattr(bench, "compile_stages", lambda model, options=None: seen.append(options) or [bench.StageTime("import", 0.1)])
    parser = argparse.ArgumentParser()
    bench.add_subparser(parser.add_subparsers())
    args = parser.parse_args(["bench", str(SAMPLE), "--compile-stages", "--threads", "1", "--opt-level", "1"])
    assert bench.cmd_bench(args) == 0
    (options,) = seen
    assert options.threads == 1 and options.jit_opt_level == 1


def test_profile_names_generated_functions_and_nodes() -> None:
    proc = onnxc("bench", str(SAMPLE), "--iterations", "3", "--warmup", "1", "--profile")
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"^profile: (\d+) generated function\(s\)", proc.stdout, re.M)
    assert m, proc.stdout
    rows = re.findall(rf"^ +({NUMBER}) ms +({NUMBER})%  (\S+): (.+)$", proc.stdout, re.M)
    assert len(rows) == int(m.group(1)) >= 1, proc.stdout
    listed = {n.strip() for _, _, _, nodes in rows for n in nodes.split(",")}
    named = {n.split(" (")[0] for n in listed}
    # node names, never weight names; a part of more than four nodes is printed "a, b, c, d +N
    # more" (the classifier's MatMul, bias and Softmax fuse into one kernel: epilogue.py)
    assert {"conv1", "relu1", "pool1"} <= named, named
    assert {"conv1 (Conv)", "relu1 (Relu)"} <= listed, listed  # each with its op type
    assert not {"conv_w", "fc_w"} & named, named
    assert abs(sum(float(share) for _, share, _, _ in rows) - 100.0) < 1.0


def test_profile_parts_cover_every_node() -> None:
    """The library behind `--profile`: every node of the sample model is named by some part."""
    import numpy as np
    import onnx

    from onnxc.tools.bench import profile

    model = onnx.load(str(SAMPLE))
    inits = {t.name for t in model.graph.initializer}
    arrays = [np.zeros([d.dim_value or 1 for d in i.type.tensor_type.shape.dim], np.float32) for i in model.graph.input if i.name not in inits]
    parts = profile(str(SAMPLE), arrays, 2, 1)
    named = {n for p in parts for n in p.nodes}
    assert {f"{n.name} ({n.op_type})" for n in model.graph.node} <= named, named


def _ir3_model(path: Path) -> None:
    """An IR-3 model (every initializer also a graph input): its weight is filled from a shape
    that is an input with an initializer, as in the ONNX wheel's `light` models."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([64, 64], np.int64), "w_shape")
    fill = numpy_helper.from_array(np.array([0.5], np.float32))
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], name="fill", value=fill),
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["y"], name="relu"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64]), helper.make_tensor_value_info("w_shape", TensorProto.INT64, [2])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], [shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=3), str(path))


def test_profile_times_the_code_the_model_runs(tmp_path: Path) -> None:
    """`--profile` profiles what `onnxc.compile` runs: inputs with an initializer bound as
    constants (the weight fill folded at compile time) unless --input overrides one, and then
    the general code, which fills the weight on every call."""
    import numpy as np

    model = tmp_path / "ir3.onnx"
    _ir3_model(model)
    bound = onnxc("bench", str(model), "--iterations", "2", "--warmup", "1", "--profile")
    assert bound.returncode == 0, bound.stderr
    assert "mm (MatMul)" in bound.stdout and "fill (ConstantOfShape)" not in bound.stdout, bound.stdout
    shape = tmp_path / "shape.npy"
    np.save(shape, np.array([64, 64], np.int64))
    general = onnxc("bench", str(model), "--iterations", "2", "--warmup", "1", "--profile", "--input", f"w_shape={shape}")
    assert general.returncode == 0, general.stderr
    assert "fill (ConstantOfShape)" in general.stdout, general.stdout


def test_bad_iterations_is_one_message() -> None:
    proc = onnxc("bench", str(SAMPLE), "--iterations", "0")
    assert proc.returncode == 1
    assert "--iterations" in proc.stderr and "Traceback" not in proc.stderr


def test_latency_stats() -> None:
    stats = LatencyStats(tuple(float(t) for t in range(1, 11)))  # 1..10 ms
    assert stats.median == 5.5
    assert stats.p90 == 9.0  # nearest rank: the 9th of 10
    assert stats.mean == 5.5
    assert stats.throughput == 1000.0 / 5.5
    assert LatencyStats((4.0,)).p90 == 4.0
