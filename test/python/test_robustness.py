"""Robustness of the compiler (issue 11): models that once aborted the process, raised raw MLIR
errors or returned wrong answers now give a clean `OnnxcError` naming the node, or the right answer.

Models that aborted run in a child process, so that a regression shows up as a failed test (exit
code -6, SIGABRT) instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.errors import OnnxcError

# Compiles the model file given as argv[1]; an OnnxcError is a clean refusal (exit 1, message on
# stderr), any other exception exit 2, an abort a negative exit code.
_CHILD = textwrap.dedent(
    """
    import sys, warnings
    warnings.simplefilter("ignore")
    import onnxc
    from onnxc.errors import OnnxcError
    try:
        onnxc.compile(sys.argv[1])
    except OnnxcError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
    except BaseException as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(2)
    print("compiled")
    """
)


def _compile_in_child(model: onnx.ModelProto, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=300)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[str], opset: int = 18) -> onnx.ModelProto:
    g = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _f(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, T.FLOAT, shape)


def test_concat_axis_out_of_range_is_refused_not_aborted(tmp_path: Path) -> None:
    m = _model([h.make_node("Concat", ["a", "b"], ["y"], axis=5, name="cat")], [_f("a", [2, 3]), _f("b", [2, 3])], ["y"])
    r = _compile_in_child(m, tmp_path)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "Node 'cat' (Concat, domain ai.onnx, opset 18): attribute 'axis' = 5 is out of range [-2, 1]" in r.stderr


def test_transpose_bad_perm_is_refused_not_aborted(tmp_path: Path) -> None:
    m = _model([h.make_node("Transpose", ["a"], ["y"], perm=[0, 0, 1], name="tr")], [_f("a", [2, 3, 4])], ["y"])
    r = _compile_in_child(m, tmp_path)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "Node 'tr' (Transpose" in r.stderr and "'perm' = [0, 0, 1] is not a permutation of 0..2" in r.stderr


def test_every_attribute_problem_is_reported_at_once() -> None:
    m = _model(
        [
            h.make_node("Concat", ["a", "b"], ["c"], axis=-3, name="cat"),
            h.make_node("Transpose", ["x"], ["t"], perm=[1, 2], name="tr"),
            h.make_node("Softmax", ["a"], ["s"], axis=2, name="sm"),
            h.make_node("Flatten", ["x"], ["f"], axis=4, name="fl"),
        ],
        [_f("a", [2, 3]), _f("b", [2, 3]), _f("x", [2, 3, 4])],
        ["c", "t", "s", "f"],
    )
    with pytest.raises(OnnxcError) as info:
        onnxc.compile(m)
    text = str(info.value)
    for who in ("'cat' (Concat", "'tr' (Transpose", "'sm' (Softmax", "'fl' (Flatten"):
        assert who in text, text
    assert "attribute 'axis' = 4 is out of range [-3, 3]" in text  # Flatten's axis may equal the rank


def test_valid_edge_attributes_compile_and_match_reference() -> None:
    """The bounds are inclusive where the spec says so: Flatten axis = rank, Concat axis = -rank."""
    m = _model(
        [h.make_node("Flatten", ["x"], ["f"], axis=3), h.make_node("Concat", ["a", "a"], ["c"], axis=-2)],
        [_f("x", [2, 3, 4]), _f("a", [2, 3])],
        ["f", "c"],
    )
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32), "a": rng.standard_normal((2, 3)).astype(np.float32)}
    got = onnxc.compile(m).run(feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    for g, w in zip((got["f"], got["c"]), want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
