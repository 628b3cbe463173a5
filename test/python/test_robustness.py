"""Robustness of the compiler (issue 11): models that once aborted the process, raised raw MLIR
errors or returned wrong answers now give a clean `OnnxcError` naming the node, or the right answer.

Models that aborted run in a child process, so that a regression shows up as a failed test (exit
code -6, SIGABRT) instead of killing pytest.
"""

from __future__ import annotations

import re
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
from onnxc.targets.cpu.runtime_checks import RuntimeCheckError

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


# --- dynamic dims: broadcasting decided at run time -------------------------------------------------


def _binary_model(op: str, sa: list[int | str], sb: list[int | str]) -> onnx.ModelProto:
    return _model([h.make_node(op, ["a", "b"], ["y"])], [_f("a", sa), _f("b", sb)], ["y"])


def _check_against_reference(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    want = ReferenceEvaluator(m).run(None, feeds)
    got = onnxc.compile(m).run(feeds)
    for w, name in zip(want, [o.name for o in m.graph.output]):
        assert got[name].shape == w.shape, (name, got[name].shape, w.shape)
        np.testing.assert_allclose(got[name], w, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize(
    "op, sa, sb, fa, fb",
    [
        ("Add", [2, 3], ["n", "m"], (2, 3), (1, 3)),  # dynamic vs static 3: dynamic is 1 at run time
        ("Add", ["a", "b"], ["c", "d"], (1, 3), (2, 1)),  # dynamic vs dynamic, 1 on either side
        ("Sub", ["a", "b"], ["c", "d"], (2, 3), (2, 3)),  # dynamic vs dynamic, equal (the fast version)
        ("Mul", ["a", 1], [3], (2, 1), (3,)),  # static 1 vs static 3 with a dynamic batch
        ("Div", ["a", "b", "c"], ["d"], (2, 4, 1), (5,)),  # shorter rank, dynamic 1 at run time
    ],
)
def test_dynamic_broadcast_matches_reference(op: str, sa: list[int | str], sb: list[int | str], fa: tuple[int, ...], fb: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    feeds = {"a": rng.standard_normal(fa).astype(np.float32), "b": rng.uniform(1, 2, fb).astype(np.float32)}
    _check_against_reference(_binary_model(op, sa, sb), feeds)


def _attention(symbolic: bool, mask_shape: list[int]) -> onnx.ModelProto:
    def vi(n: str, shape: list[int]) -> onnx.ValueInfoProto:
        return _f(n, [f"{n}{i}" for i in range(len(shape))] if symbolic else shape)

    nodes = [
        h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        h.make_node("MatMul", ["q", "kt"], ["s"]),
        h.make_node("Add", ["s", "mask"], ["sm"]),
        h.make_node("Softmax", ["sm"], ["p"], axis=-1),
        h.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    qkv = [vi(n, [2, 3, 4, 8]) for n in ("q", "k", "v")]
    return _model(nodes, qkv + [vi("mask", mask_shape)], ["y"])


def _attention_feeds(mask_shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal((2, 3, 4, 8)).astype(np.float32) for n in ("q", "k", "v")}
    feeds["mask"] = rng.standard_normal(mask_shape).astype(np.float32)
    return feeds


def test_attention_with_symbolic_dims_matches_static_and_reference() -> None:
    """Issue 11: with every dim a dim_param, the (2,1,4,4) mask broadcast against the (2,3,4,4)
    scores as if its head dim were 3, reading past it: wrong values."""
    feeds = _attention_feeds((2, 1, 4, 4))
    static = onnxc.compile(_attention(False, [2, 1, 4, 4])).run(feeds)["y"]
    _check_against_reference(_attention(True, [2, 1, 4, 4]), feeds)
    symbolic = onnxc.compile(_attention(True, [2, 1, 4, 4])).run(feeds)["y"]
    np.testing.assert_allclose(symbolic, static, rtol=1e-5, atol=1e-6)


def test_matmul_dynamic_batch_broadcast_matches_reference() -> None:
    m = _model([h.make_node("MatMul", ["a", "b"], ["y"])], [_f("a", ["p", "q", 4, 5]), _f("b", ["r", "s", 5, 8])], ["y"])
    rng = np.random.default_rng(3)
    feeds = {"a": rng.standard_normal((2, 1, 4, 5)).astype(np.float32), "b": rng.standard_normal((1, 3, 5, 8)).astype(np.float32)}
    _check_against_reference(m, feeds)
    # One compiled model at other sizes: no broadcast, either side broadcast, both sides.
    compiled = onnxc.compile(m)
    for sa, sb in (((2, 3, 4, 5), (2, 3, 5, 8)), ((1, 3, 4, 5), (2, 1, 5, 8)), ((1, 1, 4, 5), (2, 3, 5, 8)), ((2, 3, 4, 5), (1, 1, 5, 8))):
        feeds = {"a": rng.standard_normal(sa).astype(np.float32), "b": rng.standard_normal(sb).astype(np.float32)}
        (want,) = ReferenceEvaluator(m).run(None, feeds)
        (got,) = compiled(**feeds)
        assert got.shape == want.shape, (sa, sb, got.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _op_names(module: object) -> list[str]:
    names: list[str] = []

    def visit(op: object) -> object:
        names.append(op.name)  # type: ignore[attr-defined]
        from mlir import ir

        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)  # type: ignore[attr-defined]
    return names


def test_runtime_broadcast_only_where_ambiguous() -> None:
    """Static shapes and a dynamic dim against static 1s keep the plain generic (affine reads); a
    dynamic dim against another dynamic dim is read at run-time indices (tensor.extract)."""
    from onnxc.compiler import lower

    plain = _op_names(lower(_binary_model("Add", ["n", 3], [1, 3]), "linalg"))
    assert "tensor.extract" not in plain and plain.count("linalg.generic") == 1
    runtime = _op_names(lower(_binary_model("Add", ["n", 3], ["m", 3]), "linalg"))
    assert "tensor.extract" in runtime and runtime.count("linalg.generic") == 1


# --- inputs that contradict the declared type --------------------------------------------------------


def test_input_of_wrong_rank_is_refused() -> None:
    c = onnxc.compile(_model([h.make_node("Relu", ["a"], ["y"])], [_f("a", [3])], ["y"]))
    with pytest.raises(OnnxcError, match="rank 1"):
        c(np.zeros((1, 3), np.float32))


def test_scalar_input_fed_as_one_element_vector_is_refused() -> None:
    """Issue 11: a one-element array fed for a rank-0 input was reshaped to a scalar. ONNX makes the
    rank part of the input's type, and onnxruntime, which accepts it, then computes with the fed
    rank (Identity returns (1,)): no answer is right for both, so it is an error naming the input,
    its declared shape and the fed shape."""
    c = onnxc.compile(_model([h.make_node("Identity", ["a"], ["y"])], [_f("a", [])], ["y"]))
    with pytest.raises(OnnxcError, match=r"input 'a' must have rank 0 \(a: float32 \[\]\), got shape \(1,\)"):
        c(np.zeros((1,), np.float32))
    (y,) = c(np.float32(2.5))  # the declared spelling still runs
    assert y.shape == () and y == 2.5


def test_operand_of_higher_rank_than_result_is_refused_not_aborted(tmp_path: Path) -> None:
    """Found by the compile fuzzer: RMSNormalization with a scale of rank 5 on a rank-4 input built an
    affine map with a loop the nest does not have (AffineMap::get asserts: SIGABRT)."""
    m = _model(
        [h.make_node("RMSNormalization", ["x", "w"], ["y"], axis=0, name="rms")],
        [_f("x", [2, 3, 4, 5]), _f("w", [1, 2, 3, 4, 5])],
        ["y"],
        opset=23,
    )
    r = _compile_in_child(m, tmp_path)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "cannot broadcast to a result of rank 4" in r.stderr


def test_rnn_weight_of_wrong_rank_is_refused_not_aborted(tmp_path: Path) -> None:
    """Found by the compile fuzzer: RNN with a rank-2 W aborted in ShapedType::isDynamicDim."""
    m = _model(
        [h.make_node("RNN", ["x", "w", "r"], ["y"], hidden_size=4, name="rnn")],
        [_f("x", [2, 3, 2]), _f("w", [4, 2]), _f("r", [1, 4, 4])],
        ["y"],
    )
    r = _compile_in_child(m, tmp_path)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    # The opset named is the module's after onnx-upgrade-ops (RNN-22), not the model's 18.
    assert "Node 'rnn' (RNN, domain ai.onnx, opset " in r.stderr and "input 'W' has rank 2; RNN needs rank 3" in r.stderr


# --- declared shapes that contradict what the ops compute ---------------------------------------------


def test_declared_static_dims_of_a_dynamic_model_give_way_to_inferred_ones() -> None:
    """Issue 11: with an input `[n, 3]`, an output declared `[5, 3]` (and an intermediate declared
    `[5, 3]` in value_info) was trusted: the code was compiled for 5 rows and returned (5, 3) for
    any n. The inferred dim (n) wins: the result has the computed shape, as onnx.reference's."""
    nodes = [h.make_node("Add", ["a", "b"], ["t"]), h.make_node("Relu", ["t"], ["u"]), h.make_node("MatMul", ["u", "w"], ["y"])]
    g = h.make_graph(
        nodes, "g", [_f("a", ["n", 3]), _f("b", ["n", 3]), _f("w", [3, None])], [_f("y", [5, 4])],
        value_info=[_f("t", [5, 3]), _f("u", [5, 3])],
    )  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    compiled = onnxc.compile(m)
    rng = np.random.default_rng(5)
    for n, k in ((2, 4), (5, 4), (7, 2)):
        feeds = {"a": rng.standard_normal((n, 3)).astype(np.float32), "b": rng.standard_normal((n, 3)).astype(np.float32),
                 "w": rng.standard_normal((3, k)).astype(np.float32)}  # fmt: skip
        (want,) = ReferenceEvaluator(m).run(None, feeds)
        (got,) = compiled(**feeds)
        assert got.shape == want.shape == (n, k)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_declared_static_dims_of_a_static_model_that_contradict_the_op_are_refused() -> None:
    g = h.make_graph([h.make_node("Add", ["a", "b"], ["y"], name="add")], "g", [_f("a", [2, 3]), _f("b", [1, 3])], [_f("y", [3, 2])])
    with pytest.raises(OnnxcError, match=r"node 'add': lowering produced tensor<2x3xf32> for result 0 declared tensor<3x2xf32>"):
        onnxc.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))


def test_declared_shape_contradicting_run_time_data_is_not_trusted() -> None:
    """A declared static result shape that depends on run-time data (the Reshape target is an
    input) is checked at run time: a target that contradicts it is an error naming the node."""
    g = h.make_graph(
        [h.make_node("Reshape", ["a", "s"], ["y"], name="r1")], "g",
        [_f("a", [2, 3]), h.make_tensor_value_info("s", T.INT64, [2])], [_f("y", [2, 3])],
    )  # fmt: skip
    compiled = onnxc.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(RuntimeCheckError, match=r"Reshape node 'r1': result 0 has the run-time shape \(3, 2\), the model declares \(2, 3\)"):
        compiled(a, np.array([3, 2]))
    (got,) = compiled(a, np.array([2, -1]))  # the status is reset: a valid call afterwards is right
    np.testing.assert_array_equal(got, a)


def _run_time_check_model(op: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A one-node model whose index/shape input is fed at run time, and valid feeds for it."""
    i64 = T.INT64
    if op == "Expand":
        node = h.make_node("Expand", ["x", "s"], ["y"], name="n1")
        ins, feeds = [_f("x", [2, 1]), h.make_tensor_value_info("s", i64, [2])], {"x": np.array([[1.0], [2.0]], np.float32), "s": np.array([2, 3])}
        return h.make_model(h.make_graph([node], "g", ins, [_f("y", [2, 3])]), opset_imports=[h.make_opsetid("", 18)]), feeds
    if op == "Range":
        node = h.make_node("Range", ["a", "b", "c"], ["y"], name="n1")
        ins = [h.make_tensor_value_info(n, i64, []) for n in "abc"]
        outs = [h.make_tensor_value_info("y", i64, [4])]
        return h.make_model(h.make_graph([node], "g", ins, outs), opset_imports=[h.make_opsetid("", 18)]), {"a": np.array(0), "b": np.array(4), "c": np.array(1)}
    rng = np.random.default_rng(3)
    d = rng.standard_normal((3, 4)).astype(np.float32)
    if op == "Gather":
        node, ins, feeds = h.make_node("Gather", ["d", "i"], ["y"], axis=1, name="n1"), [_f("d", [3, 4]), h.make_tensor_value_info("i", i64, [2])], {"d": d, "i": np.array([3, -4])}
    elif op == "GatherElements":
        node, ins, feeds = h.make_node("GatherElements", ["d", "i"], ["y"], axis=0, name="n1"), [_f("d", [3, 4]), h.make_tensor_value_info("i", i64, [2, 4])], {"d": d, "i": np.array([[0, 1, 2, -3], [2, 2, 0, 1]])}
    elif op == "GatherND":
        node, ins, feeds = h.make_node("GatherND", ["d", "i"], ["y"], name="n1"), [_f("d", [3, 4]), h.make_tensor_value_info("i", i64, [2, 2])], {"d": d, "i": np.array([[2, 3], [-3, -4]])}
    elif op == "ScatterElements":
        node = h.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, name="n1")
        ins = [_f("d", [3, 4]), h.make_tensor_value_info("i", i64, [1, 2]), _f("u", [1, 2])]
        feeds = {"d": d, "i": np.array([[3, -4]]), "u": np.ones((1, 2), np.float32)}
    else:  # ScatterND
        node = h.make_node("ScatterND", ["d", "i", "u"], ["y"], name="n1")
        ins = [_f("d", [3, 4]), h.make_tensor_value_info("i", i64, [1, 2]), _f("u", [1])]
        feeds = {"d": d, "i": np.array([[2, -4]]), "u": np.ones(1, np.float32)}
    return h.make_model(h.make_graph([node], "g", ins, [_f("y", None)]), opset_imports=[h.make_opsetid("", 18)]), feeds


# op -> (the input to make invalid, its invalid value, what the error says)
_INVALID_AT_RUN_TIME = {
    "Gather": ("i", np.array([1, 4]), r"Gather node 'n1': index 4 is out of range for axis 1 of the data's shape \(3, 4\)"),
    "GatherElements": ("i", np.array([[0, 1, 2, 3], [2, 2, 0, 1]]), r"GatherElements node 'n1': index 3 is out of range for axis 0"),
    "GatherND": ("i", np.array([[2, 3], [3, 0]]), r"GatherND node 'n1': index 3 is out of range for axes 0..1"),
    "ScatterElements": ("i", np.array([[1, -5]]), r"ScatterElements node 'n1': index -5 is out of range for axis 1"),
    "ScatterND": ("i", np.array([[0, 4]]), r"ScatterND node 'n1': index 4 is out of range for axes 0..1"),
    "Expand": ("s", np.array([3, 3]), r"Expand node 'n1': the input of shape \(2, 1\) cannot be expanded to the run-time shape \(3, 3\)"),
    "Range": ("b", np.array(5), r"Range node 'n1': result 0 has the run-time shape \(5,\), the model declares \(4,\)"),
}


@pytest.mark.parametrize("op", sorted(_INVALID_AT_RUN_TIME))
def test_invalid_run_time_data_is_a_clear_error(op: str) -> None:
    """Indices out of range and shapes that contradict the model, fed at run time: onnx.reference
    refuses them, and so does the compiled code (a RuntimeCheckError naming node, op type and the
    offending values), where it used to answer with clamped indices or a trusted shape. Valid
    feeds before and after give the reference's answer (the status is reset between calls)."""
    m, feeds = _run_time_check_model(op)
    compiled = onnxc.compile(m)
    want = ReferenceEvaluator(m).run(None, feeds)
    for _ in range(2):
        for got, w in zip(compiled(**feeds), want):
            np.testing.assert_allclose(got, w, rtol=1e-6)
        name, value, message = _INVALID_AT_RUN_TIME[op]
        if op not in ("GatherElements", "Range"):  # onnx.reference checks neither (the spec: an error;
            with pytest.raises(Exception):  # Range's result contradicts the declared (4,))
                ReferenceEvaluator(m).run(None, {**feeds, name: value})
        with pytest.raises(RuntimeCheckError, match=message):
            compiled(**{**feeds, name: value})


def test_contradicted_shape_assumption_leaves_before_unsafe_code(tmp_path: Path) -> None:
    """Squeeze of a symbolic dim (assumed 1) fed 3: the code after the contradicted assumption copied
    12 elements into a buffer of 4 (heap corruption: 'corrupted size vs. prev_size', SIGABRT). The
    check leaves the function at once: a clear error, then valid calls work. In a child."""
    g = h.make_graph([h.make_node("Squeeze", ["x", "ax"], ["y"], name="sq")], "g", [_f("x", ["n", 4])], [_f("y", None)],
                     initializer=[h.make_tensor("ax", T.INT64, [1], [0])])  # fmt: skip
    path = tmp_path / "m.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]), str(path))
    code = textwrap.dedent(
        f"""
        import numpy as np, onnxc
        from onnxc.targets.cpu.runtime_checks import RuntimeCheckError
        c = onnxc.compile({str(path)!r})
        for _ in range(20):
            try:
                c(np.ones((3, 4), np.float32))
                raise SystemExit("no error")
            except RuntimeCheckError as exc:
                assert "Squeeze node 'sq'" in str(exc), exc
            (y,) = c(np.arange(4, dtype=np.float32).reshape(1, 4))
            assert (y == np.arange(4)).all()
        print("done")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "done" in r.stdout, (r.returncode, r.stderr[-2000:])


def test_range_delta_zero_and_negative_reshape_dims(tmp_path: Path) -> None:
    """Range with a run-time delta of 0 divided by it (SIGFPE killed the process), a constant one
    raised ZeroDivisionError while compiling; a Reshape target [-2, -3] (product 6, like the
    input's) gave numpy a negative size. Now: a compile-time refusal, run-time errors. In a child."""
    r = h.make_node("Range", ["a", "b", "c"], ["y"], name="rg")
    ints = [h.make_tensor_value_info(n, T.INT64, []) for n in "abc"]
    g = h.make_graph([r], "g", ints, [h.make_tensor_value_info("y", T.INT64, None)])
    path = tmp_path / "range.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]), str(path))
    code = textwrap.dedent(
        f"""
        import numpy as np, onnxc
        from onnxc.targets.cpu.runtime_checks import RuntimeCheckError
        c = onnxc.compile({str(path)!r})
        try:
            c(np.array(0), np.array(4), np.array(0))
        except RuntimeCheckError as exc:
            print("refused:", exc)
        print(c(np.array(0), np.array(4), np.array(2))[0].tolist())
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "Range node 'rg': the run-time delta is 0" in out.stdout and "[0, 2]" in out.stdout, (out.returncode, out.stderr[-2000:])
    consts = [h.make_node("Constant", [], [n], value=h.make_tensor(n, T.INT64, [], [v])) for n, v in zip("abc", (0, 4, 0))]
    with pytest.raises(OnnxcError, match="delta is 0"):
        onnxc.compile(h.make_model(h.make_graph(consts + [r], "g", [], [h.make_tensor_value_info("y", T.INT64, None)]), opset_imports=[h.make_opsetid("", 18)]))
    g = h.make_graph([h.make_node("Reshape", ["a", "s"], ["y"], name="r1")], "g", [_f("a", [2, 3]), h.make_tensor_value_info("s", T.INT64, [2])], [_f("y", None)])
    c = onnxc.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))
    with pytest.raises(RuntimeCheckError, match=r"Reshape node 'r1': the run-time target shape \(-2, -3\) has a dim below -1"):
        c(np.zeros((2, 3), np.float32), np.array([-2, -3]))
    assert c(np.zeros((2, 3), np.float32), np.array([-1, 2]))[0].shape == (3, 2)


def test_concurrent_calls_get_their_own_status() -> None:
    """Two Python threads call one compiled function at once, one with invalid indices, one with
    valid ones: the status is one per compiled module, so the calls are serialized, and each
    gets its own outcome (never the other's error, never a result with an error pending)."""
    import threading

    # Large enough that the native calls of the two threads overlap (ctypes releases the GIL).
    g = h.make_graph([h.make_node("Gather", ["d", "i"], ["y"], axis=0, name="n1")], "g",
                     [_f("d", [64, 1024]), _i64("i", [1024])], [_f("y", None)])  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    rng = np.random.default_rng(5)
    feeds = {"d": rng.standard_normal((64, 1024)).astype(np.float32), "i": rng.integers(-64, 64, 1024)}
    bad = feeds["i"].copy()
    bad[-1] = 99
    compiled = onnxc.compile(m, threads=1)
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    outcomes: dict[str, list[str]] = {"good": [], "bad": []}

    def run(kind: str) -> None:
        for _ in range(300):
            try:
                (got,) = compiled(feeds["d"], feeds["i"] if kind == "good" else bad)
                outcomes[kind].append("ok" if np.allclose(got, want) else "wrong")
            except RuntimeCheckError as exc:
                outcomes[kind].append("error 99" if "index 99 is out of range" in str(exc) else f"other: {exc}")

    threads = [threading.Thread(target=run, args=(k,)) for k in ("good", "bad")]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: the calls interleave at every step
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert outcomes == {"good": ["ok"] * 300, "bad": ["error 99"] * 300}


def _aot_entry_returns_the_status(lib_path: Path, d: np.ndarray) -> None:
    """The library's C entry `int64_t onnxc_run(void **descs)` returns the failed check's id (0 when
    none), `onnxc_status()` has its values, `onnxc_runtime_checks` describes it: a C caller needs
    no Python to see the error."""
    import ctypes
    import json

    from onnxc.targets.cpu.abi import _descriptor_for, _descriptor_type

    lib = ctypes.CDLL(str(lib_path))
    lib.onnxc_run.restype = ctypes.c_int64
    lib.onnxc_status.restype = ctypes.POINTER(ctypes.c_int64)
    lib.onnxc_free.argtypes = [ctypes.c_void_p]
    checks = json.loads(ctypes.string_at(ctypes.cast(lib.onnxc_runtime_checks, ctypes.c_void_p).value).decode())
    for idx, want in ((np.array([4, 0]), 1), (np.array([1, -4]), 0)):
        res, dd, di = _descriptor_type(2)(), _descriptor_for(d), _descriptor_for(idx)
        descs = (ctypes.c_void_p * 3)(*[ctypes.addressof(x) for x in (res, dd, di)])
        assert lib.onnxc_run(descs) == want
        status = lib.onnxc_status()
        if want:
            assert checks[want - 1]["op"] == "Gather" and checks[want - 1]["node"] == "n1" and status[1] == 4
            assert status[15] == 1  # the code left early: the result descriptor is not valid
        else:
            assert status[0] == 0 and status[15] == 0
            lib.onnxc_free(res.allocated)


def _i64(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, T.INT64, shape)


_ONES = np.ones((2, 3), np.float32)
# case -> (node, inputs, output types, valid feeds, the input made invalid, its value, the error)
_INVALID_SIZES = {
    "ConstantOfShape": (h.make_node("ConstantOfShape", ["s"], ["y"], name="n"), [_i64("s", [2])], [T.FLOAT],
                        {"s": np.array([2, 3])}, "s", np.array([-2, -3]), r"size computed from the run-time data is negative: \(-2, -3\)"),
    "Tile": (h.make_node("Tile", ["x", "r"], ["y"], name="n"), [_f("x", [2, 3]), _i64("r", [2])], [T.FLOAT],
             {"x": _ONES, "r": np.array([1, 2])}, "r", np.array([-1, 2]), r"size computed from the run-time data is negative: \(-2, 6\)"),
    "Expand": (h.make_node("Expand", ["x", "s"], ["y"], name="n"), [_f("x", [1]), _i64("s", [2])], [T.FLOAT],
               {"x": np.ones(1, np.float32), "s": np.array([2, 3])}, "s", np.array([-2, -3]), r"negative: \(-2, -3\)"),
    "Pad": (h.make_node("Pad", ["x", "p"], ["y"], name="n"), [_f("x", [2, 3]), _i64("p", [4])], [T.FLOAT],
            {"x": _ONES, "p": np.array([0, 1, 1, 0])}, "p", np.array([-5, 0, -5, 0]), r"negative: \(-8, 3\)"),
    "TopK": (h.make_node("TopK", ["x", "k"], ["v", "i"], name="n"), [_f("x", [2, 3]), _i64("k", [1])], [T.FLOAT, T.INT64],
             {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "k": np.array([2])}, "k", np.array([7]), r"the run-time k = 7 is out of range for axis 1 of size 3"),
    "Split": (h.make_node("Split", ["x", "s"], ["a", "b"], name="n"), [_f("x", [6]), _i64("s", [2])], [T.FLOAT, T.FLOAT],
              {"x": np.arange(6, dtype=np.float32), "s": np.array([2, 4])}, "s", np.array([5, 5]), r"the run-time split sizes \(5, 5\) do not add up to dim 0 of size 6"),
    "Slice": (h.make_node("Slice", ["x", "b", "e", "a", "k"], ["y"], name="n"), [_f("x", [6])] + [_i64(n, [1]) for n in "beak"], [T.FLOAT],
              {"x": np.arange(6, dtype=np.float32), "b": np.array([0]), "e": np.array([6]), "a": np.array([0]), "k": np.array([2])}, "k", np.array([0]), r"a run-time step is 0"),
    "CumSum": (h.make_node("CumSum", ["x", "a"], ["y"], name="n"), [_f("x", [2, 3]), _i64("a", [])], [T.FLOAT],
               {"x": _ONES, "a": np.array(1)}, "a", np.array(5), r"the run-time axis 5 is out of range for rank 2"),
    # Indices into other tensors: RoiAlign's batch indices and ArrayFeatureExtractor's read outside
    # their data (SIGSEGV), MaxUnpool's and Compress's condition were skipped or cut.
    "RoiAlign": (h.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2, name="n"),
                 [_f("x", [2, 1, 4, 4]), _f("r", [1, 4]), _i64("b", [1])], [T.FLOAT],
                 {"x": np.arange(32, dtype=np.float32).reshape(2, 1, 4, 4), "r": np.array([[0, 0, 2, 2]], np.float32), "b": np.array([1])},
                 "b", np.array([10**9]), r"index 1000000000 is out of range for axis 0"),
    "ArrayFeatureExtractor": (h.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml", name="n"),
                              [_f("x", [2, 3]), _i64("i", [2])], [T.FLOAT],
                              {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.array([2, -1])}, "i", np.array([0, 3]),
                              r"index 3 is out of range for axis 1 of the data's shape \(2, 3\)"),
    "MaxUnpool": (h.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="n"),
                  [_f("x", [1, 1, 2, 2]), _i64("i", [1, 1, 2, 2])], [T.FLOAT],
                  {"x": np.ones((1, 1, 2, 2), np.float32), "i": np.array([[[[0, 3], [9, 15]]]])}, "i", np.array([[[[0, 3], [16, 15]]]]),
                  r"index 16 is out of range for axis 0"),
    "Compress": (h.make_node("Compress", ["x", "c"], ["y"], axis=0, name="n"), [_f("x", [3]), h.make_tensor_value_info("c", T.BOOL, ["k"])], [T.FLOAT],
                 {"x": np.arange(3, dtype=np.float32), "c": np.array([True, False, True])}, "c", np.ones(5, bool),
                 r"the condition has 5 entries, axis 0 only 3"),
}


@pytest.mark.parametrize("case", sorted(_INVALID_SIZES))
def test_invalid_run_time_sizes_are_clear_errors(case: str) -> None:
    """Sizes, k, split sizes, steps and axes fed at run time: invalid ones gave numpy a negative dim
    (a raw ValueError), read past the input (TopK's k, Split's sizes), divided by zero (Slice's
    step: SIGFPE; the division now takes 1 in its place) or picked another axis (CumSum); now a
    RuntimeCheckError naming node and values. Valid feeds match onnx.reference, before and after."""
    node, ins, out_types, feeds, name, bad, message = _INVALID_SIZES[case]
    outs = [h.make_tensor_value_info(o, t, None) for o, t in zip(node.output, out_types)]
    opsets = [h.make_opsetid("", 18)] + ([h.make_opsetid("ai.onnx.ml", 3)] if node.domain else [])
    m = h.make_model(h.make_graph([node], "g", ins, outs), opset_imports=opsets)
    compiled = onnxc.compile(m)
    want = ReferenceEvaluator(m).run(None, feeds)
    for _ in range(2):
        for got, w in zip(compiled(**feeds), want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
        with pytest.raises(RuntimeCheckError, match=f"{case} node 'n': .*" + message):
            compiled(**{**feeds, name: bad})


def test_run_time_checks_with_threads_and_aot(tmp_path: Path) -> None:
    """threads=2 code (OpenMP) and an AOT library report the same run-time errors, and reset."""
    from onnxc.compiler import lower
    from onnxc.targets.cpu.aot import compile_aot, load_library

    m, feeds = _run_time_check_model("Gather")
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    aot = tmp_path / "g.so"
    compile_aot(lower(m, "linalg"), aot)
    _aot_entry_returns_the_status(aot, feeds["d"])
    for f in (onnxc.compile(m, threads=2), load_library(aot)):  # both take (d, i) positionally
        for _ in range(2):
            with pytest.raises(RuntimeCheckError, match=r"Gather node 'n1': index 4 is out of range"):
                f(feeds["d"], np.array([4, 0]))
            np.testing.assert_allclose(f(feeds["d"], feeds["i"])[0], want, rtol=1e-6)


# --- where onnx.reference itself is wrong (the compile fuzzer's second opinion) ------------------------


def _ort(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    m2.ir_version = min(m2.ir_version, 10)
    return ort.InferenceSession(m2.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("opset", [9, 13, 15])
def test_batch_normalization_old_opsets_is_inference(opset: int) -> None:
    """BatchNormalization-9..13 with one output is inference: (x - mean) / sqrt(var + eps) * s + b.
    onnx.reference applies the momentum default to batch statistics there (a reference bug the
    fuzzer reported as onnxc's); onnxc matches the formula and onnxruntime at every opset."""
    m = _model([h.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"], epsilon=1e-2)],
               [_f("x", [2, 3, 4, 5])] + [_f(n, [3]) for n in ("s", "b", "mean", "var")], ["y"], opset=opset)  # fmt: skip
    rng = np.random.default_rng(6)
    feeds = {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32), "s": rng.standard_normal(3).astype(np.float32),
             "b": rng.standard_normal(3).astype(np.float32), "mean": rng.standard_normal(3).astype(np.float32),
             "var": rng.uniform(0.5, 2, 3).astype(np.float32)}  # fmt: skip
    c = (1, 3, 1, 1)
    want = (feeds["x"] - feeds["mean"].reshape(c)) / np.sqrt(feeds["var"].reshape(c) + 1e-2) * feeds["s"].reshape(c) + feeds["b"].reshape(c)
    (got,) = onnxc.compile(m)(**feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, _ort(m, feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("ignore_index", [0, 1, -1])
def test_loss_ignore_index_matches_onnxruntime(op: str, ignore_index: int) -> None:
    """The fuzzer's ignore_index=0 'wrong answers': the target holds -1, out of range once
    ignore_index is not -1 (undefined by the spec); onnx.reference then indexes class -1 (the last),
    onnxruntime and onnxc do not. In-range targets match onnx.reference; all match onnxruntime."""
    m = _model([h.make_node(op, ["x", "t", "w"], ["loss"], ignore_index=ignore_index, reduction="mean")],
               [_f("x", [3, 5, 6]), h.make_tensor_value_info("t", T.INT64, [3, 6]), _f("w", [5])], ["loss"], opset=18)  # fmt: skip
    rng = np.random.default_rng(7)
    t = rng.integers(0, 5, (3, 6)).astype(np.int64)
    t[0, 0] = ignore_index
    feeds = {"x": rng.standard_normal((3, 5, 6)).astype(np.float32), "t": t, "w": rng.uniform(0.2, 1, 5).astype(np.float32)}
    (got,) = onnxc.compile(m)(**feeds)
    np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got, _ort(m, feeds)[0], rtol=1e-4, atol=1e-6)
    t2 = t.copy()
    t2[1, 1] = -1 if ignore_index != -1 else 4  # out of range (or the ignored class itself)
    feeds["t"] = t2
    (got,) = onnxc.compile(m)(**feeds)
    np.testing.assert_allclose(got, _ort(m, feeds)[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("zero_point", [np.int16(256), np.uint16(32767), np.int8(3), np.uint8(128)])
def test_quantize_linear_float16_saturates_infinities(zero_point: np.generic) -> None:
    """QuantizeLinear of a float16 x with +-inf: the spec saturates to the type's range. onnx.reference
    casts inf to int32 (undefined in numpy: -32768 for +inf), which the fuzzer reported as onnxc's
    wrong answer; finite values match onnx.reference."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(type(zero_point)))
    m = h.make_model(
        h.make_graph(
            [h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g",
            [h.make_tensor_value_info("x", T.FLOAT16, [8]), h.make_tensor_value_info("s", T.FLOAT16, []), h.make_tensor_value_info("z", elem, [])],
            [h.make_tensor_value_info("y", elem, [8])],
        ),
        opset_imports=[h.make_opsetid("", 21)],
    )  # fmt: skip
    x = np.array([0, -514, 3, -2.9, 3.1, 65504, np.inf, -np.inf], np.float16)
    feeds = {"x": x, "s": np.array(2.0, np.float16), "z": np.asarray(zero_point)}
    (got,) = onnxc.compile(m)(**feeds)
    info = np.iinfo(np.dtype(type(zero_point)))
    want = np.clip(np.rint(x.astype(np.float64) / 2.0) + int(zero_point), info.min, info.max).astype(info.dtype)
    np.testing.assert_array_equal(got, want)
    with np.errstate(invalid="ignore"):  # the reference's cast of inf to int32 (the part not compared)
        finite = ReferenceEvaluator(m).run(None, feeds)[0][:6]
    np.testing.assert_array_equal(got[:6], finite)


def test_reshape_to_a_run_time_shape_of_another_size_does_not_corrupt_memory(tmp_path: Path) -> None:
    """Found by the compile fuzzer: Reshape of a (6, 4) input to a run-time shape [2, 0, 4, 1] (32
    elements: 0 copies the input's dim 4) made a view past the input's buffer and the process died
    (heap corruption). Run in a child: it must exit normally, each call raising a run-time error
    naming the shapes (onnx.reference raises too), and a valid call afterwards must be right."""
    g = h.make_graph([h.make_node("Reshape", ["a", "s"], ["y"])], "g", [_f("a", [6, 4]), h.make_tensor_value_info("s", T.INT64, [4])], [_f("y", None)])
    path = tmp_path / "m.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]), str(path))
    code = textwrap.dedent(
        f"""
        import numpy as np, onnxc
        c = onnxc.compile({str(path)!r})
        from onnxc.targets.cpu.runtime_checks import RuntimeCheckError
        for _ in range(20):
            try:
                c(np.ones((6, 4), np.float32), np.array([2, 0, 4, 1]))
                raise SystemExit("no error")
            except RuntimeCheckError as exc:
                assert "the run-time target shape (2, 0, 4, 1) has 32 elements, the input 24" in str(exc), exc
        (y,) = c(np.arange(24, dtype=np.float32).reshape(6, 4), np.array([3, 0, -1, 1]))
        assert y.shape == (3, 4, 2, 1) and (y.reshape(-1) == np.arange(24)).all()
        print("done")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "done" in r.stdout, (r.returncode, r.stderr[-2000:])


# --- resource limits ---------------------------------------------------------------------------------------


def test_compile_time_limit_gives_a_clear_error() -> None:
    from onnxc.transforms.deadline import CompileTimeLimitError

    m = _model([h.make_node("Relu", ["a"], ["b"]), h.make_node("Tanh", ["b"], ["y"])], [_f("a", [4, 8])], ["y"])
    with pytest.raises(CompileTimeLimitError, match=r"ran past its time limit of 1e-09 s \(stopped before "):
        onnxc.compile(m, time_limit_s=1e-9, cache_dir=False)
    (y,) = onnxc.compile(m, time_limit_s=600, cache_dir=False)(np.full((4, 8), -1, np.float32))
    np.testing.assert_array_equal(y, np.zeros((4, 8), np.float32))
    for bad in (0, -1.0, float("nan"), "10"):
        with pytest.raises(OnnxcError, match="time_limit_s must be a positive number"):
            onnxc.compile(m, time_limit_s=bad, cache_dir=False)  # type: ignore[arg-type]


def test_time_limit_is_checked_before_every_onnxc_pass() -> None:
    """Inside a pipeline, the pass about to start is named (the driver's check)."""
    import time

    from onnxc.compiler import lower
    from onnxc.transforms.deadline import CompileTimeLimitError, time_limit

    m = _model([h.make_node("Relu", ["a"], ["y"])], [_f("a", [4])], ["y"])
    with pytest.raises(CompileTimeLimitError, match=r"stopped before pass '"):
        with time_limit(1e-6):
            time.sleep(0.01)
            lower(m, "linalg")


@pytest.mark.parametrize(
    "node, opset",
    [
        (h.make_node("Attention", ["q", "q", "q"], ["y"], is_causal=7, name="att"), 23),  # expanded before the pass ran
        (h.make_node("Attention", ["q", "q", "q"], ["y", "", "", "qk"], qk_matmul_output_mode=-1, name="att"), 23),
        (h.make_node("ReduceSum", ["q"], ["y"], keepdims=2, name="att"), 18),
    ],
)
def test_flag_and_choice_attributes_are_checked_on_the_model(node: onnx.NodeProto, opset: int) -> None:
    """Found by the compile fuzzer: Attention is_causal=7 (and qk_matmul_output_mode=-1, and
    BlackmanWindow periodic=-1) reached onnx.reference and onnxc as different models, because ops
    with a function body are expanded before onnx-validate-attributes sees their attributes."""
    outs = [o for o in node.output if o]
    m = _model([node], [_f("q", [1, 2, 3, 4])], outs, opset=opset)
    with pytest.raises(OnnxcError) as info:
        onnxc.compile(m)
    text = str(info.value)
    assert "'att'" in text and "is not one of 0, 1" in text, text


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_mode(mode: str) -> None:
    """SpaceToDepth-28's mode was ignored (CRD returned the DCR order: a silent wrong answer)."""
    m = _model([h.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2, mode=mode)], [_f("x", [1, 3, 4, 6])], ["y"], opset=28)
    feeds = {"x": np.arange(72, dtype=np.float32).reshape(1, 3, 4, 6)}
    _check_against_reference(m, feeds)


@pytest.mark.parametrize("threads", [1, 2])
def test_allocation_failure_at_run_time_is_a_clear_error(tmp_path: Path, threads: int) -> None:
    """An Expand to a run-time shape of 4e14 bytes: malloc fails, the code leaves early and the call
    raises (it died with SIGSEGV storing into NULL); a valid call afterwards works. In a child."""
    g = h.make_graph([h.make_node("Expand", ["x", "s"], ["y"], name="e1")], "g", [_f("x", [1]), h.make_tensor_value_info("s", T.INT64, [3])], [_f("y", None)])
    path = tmp_path / "m.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]), str(path))
    code = textwrap.dedent(
        f"""
        import sys, numpy as np, onnxc
        from onnxc.errors import OnnxcError
        c = onnxc.compile({str(path)!r}, threads={threads})
        for _ in range(2):
            try:
                c(np.ones(1, np.float32), np.array([1000000, 100000, 1000]))
            except OnnxcError as exc:
                print("refused:", exc)
            (y,) = c(np.full(1, 2, np.float32), np.array([2, 1, 3]))
            assert y.shape == (2, 1, 3) and (y == 2).all()
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.count("refused:") == 2, (r.returncode, r.stderr[-2000:])
    assert "Expand node 'e1': could not allocate 400000000000000 bytes" in r.stdout, r.stdout


@pytest.mark.parametrize("axis", [0, 1, -2])
def test_dft_17_axis_attribute_survives_the_upgrade(axis: int) -> None:
    """Found by the compile fuzzer: upgrading DFT-17's axis attribute to DFT-20's input turned
    axis=0 into 1 (`int(axis or 1)`): a transform along another axis, a silent wrong answer."""
    m = _model([h.make_node("DFT", ["x"], ["y"], axis=axis)], [_f("x", [2, 3, 1])], ["y"], opset=19)
    _check_against_reference(m, {"x": np.arange(6, dtype=np.float32).reshape(2, 3, 1)})


def test_out_of_range_indices_stay_in_bounds(tmp_path: Path) -> None:
    """Found by the compile fuzzer: ScatterElements with indices out of range (invalid input: onnx.reference
    raises) wrote past its buffer and the process aborted (heap corruption); Gather read past its data.
    Run in a child: it must exit normally, each call a run-time error naming the index (the code after
    the check stays memory-safe), and valid (negative) indices still give the reference's answer."""
    nodes = [h.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=0), h.make_node("Gather", ["d", "j"], ["g"], axis=1),
             h.make_node("GatherND", ["d", "k"], ["n"])]  # fmt: skip
    ins = [_f("d", [2, 5]), h.make_tensor_value_info("i", T.INT64, [1, 2]), _f("u", [1, 2]), h.make_tensor_value_info("j", T.INT64, [3]),
           h.make_tensor_value_info("k", T.INT64, [2, 2])]  # fmt: skip
    m = _model(nodes, ins, ["s", "g", "n"])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    code = textwrap.dedent(
        f"""
        import numpy as np, onnxc
        c = onnxc.compile({str(path)!r})
        d, u = np.ones((2, 5), np.float32), np.ones((1, 2), np.float32)
        from onnxc.targets.cpu.runtime_checks import RuntimeCheckError
        for big in (7, -9, 10**9, -(10**12)):
            try:
                c(d=d, i=np.array([[big, 1]]), u=u, j=np.array([big, 0, -1]), k=np.array([[big, 0], [1, big]]))
                raise SystemExit("no error")
            except RuntimeCheckError as exc:
                assert f"index {{big}} is out of range" in str(exc), exc
        print("done")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "done" in r.stdout, (r.returncode, r.stderr[-2000:])
    rng = np.random.default_rng(8)
    feeds = {"d": rng.standard_normal((2, 5)).astype(np.float32), "i": np.array([[-1, 1]]), "u": np.ones((1, 2), np.float32),
             "j": np.array([-5, 4, -1]), "k": np.array([[-2, 4], [1, -5]])}  # fmt: skip
    _check_against_reference(m, feeds)


def test_unsqueeze_declared_as_its_input_type_is_refused() -> None:
    """Found by the compile fuzzer: an input reshaped to rank 4 whose Unsqueeze (run-time axes) kept the
    declared rank-4 output was removed as a no-op (equal types) and returned the input: (1, 3, 4, 5)
    where the model computes (1, 1, 3, 4, 5). Unsqueeze always adds dims: the lowering refuses it."""
    g = h.make_graph(
        [h.make_node("Unsqueeze", ["x", "axes"], ["y"], name="un")], "g",
        [_f("x", [1, 3, 4, 5]), h.make_tensor_value_info("axes", T.INT64, [1])], [_f("y", [1, 3, 4, 5])],
    )  # fmt: skip
    with pytest.raises(OnnxcError, match=r"node 'un': lowering produced tensor<.*> for result 0 declared tensor<1x3x4x5xf32>"):
        onnxc.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))


def test_scalar_inputs_of_other_ranks_are_refused() -> None:
    """DFT's axis and Range's bounds are scalars by the spec; a [1]-shaped axis was read as its element
    (the compile fuzzer: onnx.reference refuses such a DFT and onnxruntime computes another answer)."""
    m = _model([h.make_node("DFT", ["x", "", "axis"], ["y"], name="dft")], [_f("x", [1, 4, 1]), h.make_tensor_value_info("axis", T.INT64, [1])], ["y"], opset=20)
    with pytest.raises(OnnxcError, match="input 'axis' has rank 1; DFT needs rank 0"):
        onnxc.compile(m)


def test_range_bounds_of_one_element_are_read_as_scalars() -> None:
    """onnx's own AffineGrid function body gives Range a [1]-shaped limit: accepted and read as
    its element (as onnx.reference does); a longer bound is still refused."""
    def model(n: int) -> onnx.ModelProto:
        ins = [h.make_tensor_value_info("start", T.INT64, []), h.make_tensor_value_info("limit", T.INT64, [n]), h.make_tensor_value_info("delta", T.INT64, [])]
        g = h.make_graph([h.make_node("Range", ["start", "limit", "delta"], ["y"], name="r")], "g", ins, [h.make_tensor_value_info("y", T.INT64, None)])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])

    (y,) = onnxc.compile(model(1))(np.array(2, np.int64), np.array([7], np.int64), np.array(2, np.int64))
    np.testing.assert_array_equal(y, [2, 4, 6])
    with pytest.raises(OnnxcError, match="input 'limit' has rank 1; Range needs rank 0"):
        onnxc.compile(model(2))


def test_unsqueeze_with_run_time_axes_is_one_reshape() -> None:
    """Unsqueeze with run-time axes compiled one branch per choice of the axes (C(rank + k, k) nested
    scf.if: 24 s of bufferization for rank 3 and 3 axes, exponential beyond; a compile-fuzzer timeout).
    Now one reshape to a run-time shape: every valid choice matches onnx.reference, and invalid
    (repeated, out-of-range) axes stay memory-safe."""
    import itertools

    from onnxc.compiler import lower

    g = h.make_graph([h.make_node("Unsqueeze", ["x", "axes"], ["y"])], "g", [_f("x", [2, "n", 3]), h.make_tensor_value_info("axes", T.INT64, [3])], [_f("y", None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    assert "scf.if" not in _op_names(lower(m, "linalg"))
    c = onnxc.compile(m)
    x = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    for axes in list(itertools.combinations(range(6), 3))[::3] + [(-1, 0, 2), (5, -6, 3)]:
        a = np.array(axes)
        (want,) = ReferenceEvaluator(m).run(None, {"x": x, "axes": a})
        (got,) = c(x, a)
        assert got.shape == want.shape and np.array_equal(got, want), (axes, got.shape, want.shape)
    for bad in ([0, 0, 1], [9, 0, 1], [-99, 1, 2]):
        (got,) = c(x, np.array(bad))
        assert got.size == x.size


@pytest.mark.xfail(
    strict=True,
    reason="targets/cpu (the lead's): 'internal error: module does not verify after i1 widening' for Unique "
    "sorted=0 of a 1-element input (found by the fuzzer's attribute mutation of test_unique_length_1)",
)
def test_unique_unsorted_of_one_element() -> None:
    node = h.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=0)
    outs = [h.make_tensor_value_info(n, T.INT64, None) for n in ("y", "i", "inv", "c")]
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", T.INT64, [1])], outs), opset_imports=[h.make_opsetid("", 11)])
    _check_against_reference(m, {"x": np.array([7], np.int64)})


def test_squeeze_with_run_time_axes_is_one_reshape() -> None:
    """Squeeze with run-time axes: one reshape to a run-time shape (no branch per choice of the dims);
    every valid choice matches onnx.reference, invalid axes stay memory-safe."""
    import itertools

    from onnxc.compiler import lower

    g = h.make_graph([h.make_node("Squeeze", ["x", "axes"], ["y"])], "g", [_f("x", [1, 4, "n", 5, 1]), h.make_tensor_value_info("axes", T.INT64, [2])], [_f("y", None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    assert "scf.if" not in _op_names(lower(m, "linalg"))
    c = onnxc.compile(m)
    x = np.arange(20, dtype=np.float32).reshape(1, 4, 1, 5, 1)
    for axes in itertools.permutations([0, 2, 4, -1, -3, -5], 2):
        if len({a % 5 for a in axes}) < 2:
            continue
        a = np.array(axes)
        (want,) = ReferenceEvaluator(m).run(None, {"x": x, "axes": a})
        (got,) = c(x, a)
        assert got.shape == want.shape and np.array_equal(got, want), (axes, got.shape, want.shape)
    for bad in ([0, 0], [1, 2], [99, 0]):
        (got,) = c(x, np.array(bad))
        assert got.size == x.size


def test_lp_normalization_p_is_1_or_2() -> None:
    m = _model([h.make_node("LpNormalization", ["x"], ["y"], p=5, name="lp")], [_f("x", [2, 2])], ["y"])
    with pytest.raises(OnnxcError, match=r"'lp'.*attribute 'p' = 5 is not one of 1, 2"):
        onnxc.compile(m)


def _tensor_scatter(mode: str, cache: list[int | str], update: list[int | str], indices: list[int | str]) -> onnx.ModelProto:
    node = h.make_node("TensorScatter", ["c", "u", "w"], ["y"], mode=mode, axis=-2, name="ts")
    inputs = [_f("c", cache), _f("u", update), h.make_tensor_value_info("w", T.INT64, indices)]
    return _model([node], inputs, ["y"], opset=24)


@pytest.mark.parametrize("symbolic", [False, True])
def test_tensor_scatter_write_indices_are_checked(symbolic: bool) -> None:
    """TensorScatter's write indices: linear mode refuses an index past max_sequence_length -
    sequence_length (onnx.reference fails with an IndexError) or below 0 (the reference wraps it
    numpy's way; the spec has no such index), where they used to be answered with the cache
    rows left unchanged. Valid indices, and any index in circular mode (taken modulo the cache
    length), match onnx.reference, with static and symbolic dims."""
    c_shape, u_shape, w_shape = ([2, 5, 3], [2, 2, 3], [2]) if not symbolic else (["b", "s", 3], ["b", "n", 3], ["b"])
    rng = np.random.default_rng(0)
    c = rng.standard_normal((2, 5, 3)).astype(np.float32)
    u = rng.standard_normal((2, 2, 3)).astype(np.float32)
    linear = onnxc.compile(_tensor_scatter("linear", c_shape, u_shape, w_shape))
    for w in ([0, 3], [3, 1]):
        feeds = {"c": c, "u": u, "w": np.array(w, np.int64)}
        want = ReferenceEvaluator(_tensor_scatter("linear", c_shape, u_shape, w_shape)).run(None, feeds)[0]
        np.testing.assert_array_equal(linear.run(feeds)["y"], want)
    for w, bad in (([0, 4], 4), ([-1, 0], -1)):
        with pytest.raises(RuntimeCheckError, match=rf"TensorScatter node 'ts': write index {bad} is outside \[0, 3\]"):
            linear.run({"c": c, "u": u, "w": np.array(w, np.int64)})
    circular = onnxc.compile(_tensor_scatter("circular", c_shape, u_shape, w_shape))
    for w in ([4, -1], [-7, 9]):
        feeds = {"c": c, "u": u, "w": np.array(w, np.int64)}
        want = ReferenceEvaluator(_tensor_scatter("circular", c_shape, u_shape, w_shape)).run(None, feeds)[0]
        np.testing.assert_array_equal(circular.run(feeds)["y"], want)


def test_tensor_scatter_run_time_shapes_must_fit() -> None:
    """With symbolic dims the shapes are only known at run time: an update longer than the cache,
    an update of another batch or feature size, or write_indices of another length than the batch
    made the gather read past the update or the indices; now each is a run-time error."""
    m = _tensor_scatter("circular", ["b", "s", "f"], ["b2", "n", "f2"], ["k"])
    compiled = onnxc.compile(m)
    c = np.zeros((2, 5, 3), np.float32)
    w = np.zeros(2, np.int64)
    bad = {"longer update": ({"u": np.ones((2, 6, 3), np.float32)}, r"the update's shape \(2, 6, 3\) does not fit the past cache's shape \(2, 5, 3\)"),
           "other features": ({"u": np.ones((2, 2, 4), np.float32)}, r"the update's shape \(2, 2, 4\) does not fit"),
           "other batch": ({"u": np.ones((3, 2, 3), np.float32)}, r"the update's shape \(3, 2, 3\) does not fit"),
           "short indices": ({"u": np.ones((2, 2, 3), np.float32), "w": np.zeros(1, np.int64)}, r"write_indices has 1 entries, the batch 2")}  # fmt: skip
    for feeds, message in bad.values():
        with pytest.raises(RuntimeCheckError, match=message):
            compiled.run({"c": c, "w": w, **feeds})
    ok = {"c": c, "u": np.ones((2, 2, 3), np.float32), "w": np.array([4, 1], np.int64)}
    np.testing.assert_array_equal(compiled.run(ok)["y"], ReferenceEvaluator(m).run(None, ok)[0])


def test_tensor_scatter_write_indices_of_another_rank_are_refused() -> None:
    with pytest.raises(OnnxcError, match="write_indices must be a 1-D tensor"):
        onnxc.compile(_tensor_scatter("linear", [2, 5, 3], [2, 2, 3], [2, 1]))
    with pytest.raises(OnnxcError, match="write_indices has 3 entries, the batch 2"):
        onnxc.compile(_tensor_scatter("linear", [2, 5, 3], [2, 2, 3], [3]))


def test_check_inside_a_loop_leaves_after_the_loop() -> None:
    """A run-time check nested in a loop records its failure; the function then leaves right
    after the loop (`prepare_failure_exits`), so the code after it never runs on a contradicted
    assumption (it used to run on). The check in the function's body keeps its own exit."""
    import json

    from mlir import ir

    from onnxc.targets.cpu.runtime_checks import prepare_failure_exits
    from onnxc.transforms.lowering.runtime_checks import describe

    desc = lambda i: json.dumps(json.dumps({"id": i, **describe("n", "Gather", "index out of range", [])}))  # noqa: E731
    text = f"""
    memref.global "private" @__onnxc_status : memref<16xi64> = dense<0>
    func.func @f(%n: index, %bad: i1, %m: memref<4xf32>) {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %one = arith.constant 1 : i64
      %f = arith.constant 1.0 : f32
      %s = memref.get_global @__onnxc_status : memref<16xi64>
      scf.for %i = %c0 to %n step %c1 {{
        scf.if %bad {{
          memref.store %one, %s[%c0] : memref<16xi64>
        }} {{onnxc.runtime_check = {desc(1)}}}
        memref.store %f, %m[%i] : memref<4xf32>
      }}
      memref.store %f, %m[%c0] : memref<4xf32>
      scf.if %bad {{
        memref.store %one, %s[%c0] : memref<16xi64>
      }} {{onnxc.runtime_check = {desc(2)}}}
      return
    }}"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert prepare_failure_exits(module) == 2
        module.operation.verify()
        fn = module.body.operations[1]
        blocks = list(fn.regions[0].blocks)
        first = [op.operation.name for op in blocks[0].operations]
        # The loop is followed by the test of status word 0 and a branch to an exit block.
        assert first[first.index("scf.for") + 1 :][-1] == "cf.cond_br" and "memref.load" in first[first.index("scf.for") :], first
        exits = [b for b in blocks if [op.operation.name for op in b.operations][-1] == "func.return"]
        assert len(exits) == 3  # the loop's exit, the body check's exit, the normal end


def test_check_inside_a_loop_body_is_reported() -> None:
    """End to end: a Gather with an out-of-range index inside a Loop body is a RuntimeCheckError
    naming the node, and valid indices match onnx.reference."""
    body = h.make_graph(
        [h.make_node("Gather", ["x", "i"], ["g"], name="inner", axis=0), h.make_node("Add", ["acc", "g"], ["acc_out"]),
         h.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []), _f("acc", [3])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), _f("acc_out", [3])],
    )  # fmt: skip
    # A condition input given (onnx.reference runs no iteration without one; onnxruntime and onnxc run n).
    loop = h.make_node("Loop", ["n", "c", "a0"], ["y"], body=body, name="loop")
    m = _model([loop], [h.make_tensor_value_info("n", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []), _f("a0", [3]),
                        _f("x", [4, 3]), h.make_tensor_value_info("i", T.INT64, [])], ["y"], opset=18)  # fmt: skip
    compiled = onnxc.compile(m)
    feeds = {"n": np.array(3, np.int64), "c": np.array(True), "a0": np.zeros(3, np.float32), "x": np.arange(12, dtype=np.float32).reshape(4, 3)}
    good = {**feeds, "i": np.array(2, np.int64)}
    np.testing.assert_allclose(compiled.run(good)["y"], ReferenceEvaluator(m).run(None, good)[0])
    with pytest.raises(RuntimeCheckError, match="Gather node 'inner': index 7 is out of range"):
        compiled.run({**feeds, "i": np.array(7, np.int64)})
    np.testing.assert_allclose(compiled.run(good)["y"], ReferenceEvaluator(m).run(None, good)[0])


def test_exit_after_a_failed_check_frees_the_live_buffers() -> None:
    """An exit after a failed check frees the body's buffers allocated before it and freed or
    returned after it (they leaked on every failed call); not those freed before it (a double
    free), and nothing when no buffer is live."""
    import json

    from mlir import ir

    from onnxc.targets.cpu.runtime_checks import prepare_failure_exits
    from onnxc.transforms.lowering.runtime_checks import describe

    desc = json.dumps(json.dumps({"id": 1, **describe("n", "Gather", "index out of range", [])}))
    text = f"""
    memref.global "private" @__onnxc_status : memref<16xi64> = dense<0>
    func.func @f(%bad: i1) -> memref<4xf32> {{
      %c0 = arith.constant 0 : index
      %one = arith.constant 1 : i64
      %s = memref.get_global @__onnxc_status : memref<16xi64>
      %early = memref.alloc() : memref<8xf32>
      memref.dealloc %early : memref<8xf32>
      %tmp = memref.alloc() : memref<4xf32>
      %res = memref.alloc() : memref<4xf32>
      scf.if %bad {{
        memref.store %one, %s[%c0] : memref<16xi64>
      }} {{onnxc.runtime_check = {desc}}}
      %late = memref.alloc() : memref<2xf32>
      memref.dealloc %late : memref<2xf32>
      memref.dealloc %tmp : memref<4xf32>
      return %res : memref<4xf32>
    }}"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert prepare_failure_exits(module) == 1
        module.operation.verify()
        fn = module.body.operations[1]
        exit_block = next(b for b in fn.regions[0].blocks if any(o.operation.name == "ub.poison" for o in b.operations))
        freed = [o.operation.operands[0] for o in exit_block.operations if o.operation.name == "memref.dealloc"]
        # %tmp and %res (memref<4xf32>), two different buffers; not %early (8) nor %late (2).
        assert [ir.MemRefType(v.type).shape for v in freed] == [[4], [4]] and freed[0] != freed[1], freed


def test_failed_calls_free_their_buffers_and_the_model_still_answers() -> None:
    """Many calls that fail a check (each exit frees the buffers live there: a double free would
    abort) and then a valid call: the right answer."""
    g = h.make_graph([h.make_node("Relu", ["x"], ["r"]), h.make_node("Gather", ["r", "i"], ["y"], name="g1", axis=0),
                      h.make_node("Neg", ["r"], ["z"])], "g",
                     [_f("x", [4, 3]), h.make_tensor_value_info("i", T.INT64, [2])], [_f("y", None), _f("z", None)])  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    compiled = onnxc.compile(m, threads=1)
    x = np.arange(-6, 6, dtype=np.float32).reshape(4, 3)
    for _ in range(200):
        with pytest.raises(RuntimeCheckError, match="Gather node 'g1': index 9 is out of range"):
            compiled.run({"x": x, "i": np.array([1, 9], np.int64)})
    feeds = {"x": x, "i": np.array([3, -4], np.int64)}
    got = compiled.run(feeds)
    for name, want in zip(("y", "z"), ReferenceEvaluator(m).run(None, feeds)):
        np.testing.assert_array_equal(got[name], want)


@pytest.mark.parametrize(("op", "to", "src", "declared", "message"), [
    ("Cast", T.INT64, T.FLOAT, T.FLOAT16, "attribute 'to' = INT64, but the graph declares its output 'y' as FLOAT16"),
    ("BitCast", T.INT64, T.FLOAT, T.INT32, "attribute 'to' = INT64, but the graph declares its output 'y' as INT32"),
    ("BitCast", 0, T.INT32, T.FLOAT, "attribute 'to' = 0 is not an element type BitCast can produce"),
    ("Cast", 0, T.INT32, T.FLOAT, "attribute 'to' = 0 is not an element type Cast can produce"),
    ("BitCast", 99, T.INT32, T.FLOAT, "attribute 'to' = 99 is not an element type"),
])  # fmt: skip
def test_cast_target_type_contradicting_the_declared_output_is_refused(op: str, to: int, src: int, declared: int, message: str) -> None:
    """Found by the compile fuzzer (Cast/BitCast `to` mutated): the result was typed from the
    graph's declaration, so `Cast(to=INT64)` declared FLOAT16 answered a float16 cast and
    `BitCast(to=0)` a reinterpretation as the declared type, where onnx.reference refuses."""
    g = h.make_graph([h.make_node(op, ["x"], ["y"], to=to)], "g", [h.make_tensor_value_info("x", src, [3])],
                     [h.make_tensor_value_info("y", declared, [3])])  # fmt: skip
    with pytest.raises(OnnxcError, match=message):
        onnxc.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 26)]))


def test_cast_with_a_consistent_or_no_declared_type_compiles() -> None:
    for nodes in ([h.make_node("Cast", ["x"], ["y"], to=T.INT64)],  # declared: the graph output
                  [h.make_node("Cast", ["x"], ["c"], to=T.INT64), h.make_node("Neg", ["c"], ["y"])]):  # not declared
        g = h.make_graph(nodes, "g", [_f("x", [3])], [h.make_tensor_value_info("y", T.INT64, None)])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
        x = np.array([1.5, -2.0, 3.25], np.float32)
        got = onnxc.compile(m).run({"x": x})["y"]
        assert got.dtype == np.int64 and got.tolist() == ReferenceEvaluator(m).run(None, {"x": x})[0].tolist()


@pytest.mark.parametrize(("shapes", "message"), [
    ({"V": [12, 24]}, r"V has rank 2; Attention takes 3-D or 4-D Q, K, V"),
    ({"V": [1, 2, 6, 24]}, r"Q, K and V must have the same rank \(Q 3-D, K 3-D, V 4-D\)"),
    ({"M": [72]}, r"attn_mask's last dim 72 is longer than the total sequence length 6"),
])  # fmt: skip
def test_attention_inputs_of_another_rank_are_refused(shapes: dict[str, list[int]], message: str) -> None:
    """Found by the compile fuzzer (rank mutations of the Attention node tests): the expanded
    function body read a 2-D or 4-D V beside 3-D Q/K as if 3-D, and cropped a mask longer than
    the keys; onnx.reference and onnxruntime refuse both. The valid model still matches."""
    dims = {"Q": [2, 4, 24], "K": [2, 6, 24], "V": [2, 6, 24], "M": [4, 6], **shapes}
    node = h.make_node("Attention", ["Q", "K", "V", "M"], ["Y"], q_num_heads=3, kv_num_heads=3, name="att")
    m = _model([node], [_f(n, d) for n, d in dims.items()], ["Y"], opset=23)
    with pytest.raises(OnnxcError, match=message):
        onnxc.compile(m)


def test_attention_with_valid_shapes_still_matches() -> None:
    node = h.make_node("Attention", ["Q", "K", "V", "M"], ["Y"], q_num_heads=3, kv_num_heads=3, name="att")
    dims = {"Q": [2, 4, 24], "K": [2, 6, 24], "V": [2, 6, 24], "M": [4, 5]}  # a shorter mask: padded with -inf
    m = _model([node], [_f(n, d) for n, d in dims.items()], ["Y"], opset=24)
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(d).astype(np.float32) for n, d in dims.items()}
    np.testing.assert_allclose(onnxc.compile(m).run(feeds)["Y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("mask_type", [T.INT8, T.INT32, T.UINT8, T.INT64])
def test_attention_with_an_integer_mask_is_refused(mask_type: int) -> None:
    """Found by the compile fuzzer (seed 412 case 97651, the mask's type mutated to INT8): the spec
    gives meaning to boolean and float masks only; the function body adds an integer mask to the
    scores while onnxruntime reads it as boolean, so onnxc answered what onnxruntime does not.
    Refused with the node named; boolean and float masks still compile (the test above)."""
    node = h.make_node("Attention", ["Q", "K", "V", "M"], ["Y"], q_num_heads=3, kv_num_heads=3, name="att")
    ins = [_f("Q", [2, 4, 24]), _f("K", [2, 6, 24]), _f("V", [2, 6, 24]), h.make_tensor_value_info("M", mask_type, [4, 6])]
    m = _model([node], ins, ["Y"], opset=23)
    with pytest.raises(OnnxcError, match=r"Node 'att' \(Attention, domain ai.onnx, opset \d+\): attn_mask of integer type u?i\d+ has no meaning the spec defines"):
        onnxc.compile(m)
    bool_mask = _model([node], ins[:3] + [h.make_tensor_value_info("M", T.BOOL, [4, 6])], ["Y"], opset=23)
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal(d).astype(np.float32) for n, d in (("Q", [2, 4, 24]), ("K", [2, 6, 24]), ("V", [2, 6, 24]))}
    feeds["M"] = rng.random((4, 6)) < 0.7
    feeds["M"][:, 0] = True  # every query sees one key at least (an all-False row is NaN in both)
    np.testing.assert_allclose(onnxc.compile(bool_mask).run(feeds)["Y"], ReferenceEvaluator(bool_mask).run(None, feeds)[0], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize(("op", "n"), [("Add", 2), ("Min", 3), ("Sum", 3), ("Mul", 2)])
def test_dynamic_dims_that_do_not_broadcast_are_a_run_time_error(op: str, n: int) -> None:
    """Found by the compile fuzzer (test_min_example fed a (4,) operand, dims symbolic): dynamic
    sizes that do not broadcast were read at a size every input has and answered (Add of (3,) and
    (4,) returned 3 sums); onnx.reference refuses them. Sizes 1 and equal sizes still broadcast."""
    names = [f"x{i}" for i in range(n)]
    g = h.make_graph([h.make_node(op, names, ["y"], name="b")], "g", [_f(x, [f"d{i}", 2]) for i, x in enumerate(names)], [_f("y", None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    compiled = onnxc.compile(m)
    bad = {x: np.ones((3, 2), np.float32) for x in names}
    bad[names[-1]] = np.ones((4, 2), np.float32)
    with pytest.raises(RuntimeCheckError, match=rf"{op} node 'b': operand dims \((3, )+4\) do not broadcast to dim 0 of the result \(each must be 1 or 3\)"):
        compiled.run(bad)
    rng = np.random.default_rng(2)
    for sizes in ([3] * n, [1] + [3] * (n - 1), [3] * (n - 1) + [1], [1] * n):
        feeds = {x: rng.standard_normal((s, 2)).astype(np.float32) for x, s in zip(names, sizes)}
        np.testing.assert_allclose(compiled.run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-6)


def test_gather_nd_negative_batch_dims_is_refused_not_aborted(tmp_path: Path) -> None:
    """Found by the long compile-fuzz run: GatherND batch_dims = -2 crashed onnx's own shape
    inference (SIGSEGV) inside the importer; the validator refuses it first."""
    g = h.make_graph([h.make_node("GatherND", ["d", "i"], ["y"], batch_dims=-2)], "g",
                     [h.make_tensor_value_info("d", T.INT32, [2, 2, 2]), h.make_tensor_value_info("i", T.INT64, [2, 1])],
                     [h.make_tensor_value_info("y", T.INT32, None)])  # fmt: skip
    proc = _compile_in_child(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]), tmp_path)
    assert proc.returncode == 1 and "attribute 'batch_dims' = -2 must not be negative" in proc.stderr, (proc.returncode, proc.stderr[-500:])


@pytest.mark.parametrize(("op", "sa", "sb"), [("MatMul", (3, 5), (9, 3)), ("MatMul", (3, 9), (5, 3)), ("Gemm", (3, 5), (9, 3)),
                                               ("MatMul", (2, 3, 4), (2, 5, 3))])  # fmt: skip
def test_dynamic_contraction_sizes_that_differ_are_a_run_time_error(op: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    """Found by the long compile-fuzz run (Gemm fed a B of another height, dims symbolic): the
    product looped over one operand's size and read the other at it, answering a (3, 3) result
    (reading past the shorter operand the other way round). Valid sizes still match."""
    g = h.make_graph([h.make_node(op, ["a", "b"], ["y"], name="mm")], "g",
                     [_f("a", [f"a{i}" for i in range(len(sa))]), _f("b", [f"b{i}" for i in range(len(sb))])], [_f("y", None)])  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    compiled = onnxc.compile(m)
    ka, kb = sa[-1], sb[-2]
    with pytest.raises(RuntimeCheckError, match=rf"{op} node 'mm': the contraction sizes {ka} and {kb} differ"):
        compiled.run({"a": np.ones(sa, np.float32), "b": np.ones(sb, np.float32)})
    rng = np.random.default_rng(3)
    feeds = {"a": rng.standard_normal(sa).astype(np.float32), "b": rng.standard_normal(sb[:-2] + (ka, sb[-1])).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-4, atol=1e-5)


def test_gemm_bias_of_a_dynamic_shape_that_does_not_broadcast_is_a_run_time_error() -> None:
    """Gemm's C with symbolic dims read against the product's shape: a size neither 1 nor the
    product's was read clamped and answered; now a run-time error. 1 and equal sizes still work."""
    g = h.make_graph([h.make_node("Gemm", ["a", "b", "c"], ["y"], name="gm")], "g", [_f("a", [3, 4]), _f("b", [4, 5]), _f("c", ["c0", "c1"])], [_f("y", None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    compiled = onnxc.compile(m)
    a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    with pytest.raises(RuntimeCheckError, match=r"Gemm node 'gm': operand dims \(2,\) do not broadcast to dim 0 of the result \(each must be 1 or 3\)"):
        compiled.run({"a": a, "b": b, "c": np.ones((2, 5), np.float32)})
    for shape in ((1, 5), (3, 1), (3, 5), (1, 1)):
        feeds = {"a": a, "b": b, "c": np.arange(np.prod(shape), dtype=np.float32).reshape(shape)}
        np.testing.assert_allclose(compiled.run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0])


def test_concat_of_dynamic_dims_that_differ_outside_the_axis_is_a_run_time_error() -> None:
    """Found by the long compile-fuzz run (an Attention's past and new keys with another head
    count): Concat took the first input's dims outside the axis, and a larger one in another input
    was inserted past the result (heap corruption, a crash in the next compile). Now a run-time
    error before anything is written; equal dims still concatenate."""
    g = h.make_graph([h.make_node("Concat", ["a", "b"], ["y"], axis=1, name="cat")], "g", [_f("a", ["a0", "a1"]), _f("b", ["b0", "b1"])], [_f("y", None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    compiled = onnxc.compile(m)
    with pytest.raises(RuntimeCheckError, match=r"Concat node 'cat': input 1 of the run-time shape \(5, 2\) does not match input 0's \(3, 4\) outside axis 1"):
        compiled.run({"a": np.ones((3, 4), np.float32), "b": np.ones((5, 2), np.float32)})
    feeds = {"a": np.ones((3, 4), np.float32), "b": np.arange(6, dtype=np.float32).reshape(3, 2)}
    np.testing.assert_array_equal(compiled.run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0])


@pytest.mark.parametrize(("q_heads", "kv_heads", "message"), [(3, 6, r"q_num_heads \(3\) must be a multiple of kv_num_heads \(6\)"),
                                                              (3, 0, "q_num_heads and kv_num_heads must be positive")])  # fmt: skip
def test_attention_heads_that_do_not_group_are_refused(q_heads: int, kv_heads: int, message: str, tmp_path: Path) -> None:
    """Found by the long compile-fuzz run: kv_num_heads mutated from 3 to 6 (q_num_heads 3) with
    symbolic dims: the body's grouped-query reshape had 0 groups and its code wrote past a buffer
    (the next compile in the process crashed). Refused before any IR (in a child process)."""
    dims = {"Q": ["b", "q", "h"], "K": ["b", "k", "h"], "V": ["b", "k", "h"]}
    node = h.make_node("Attention", ["Q", "K", "V"], ["Y"], q_num_heads=q_heads, kv_num_heads=kv_heads, name="att")
    proc = _compile_in_child(_model([node], [_f(n, d) for n, d in dims.items()], ["Y"], opset=23), tmp_path)
    assert proc.returncode == 1 and re.search(message, proc.stderr), (proc.returncode, proc.stderr[-500:])


def test_roi_align_rois_shorter_than_the_batch_indices_is_a_run_time_error() -> None:
    """Found by the long compile-fuzz run (test_roialign_mode_max, symbolic dims, rois fed with 2
    rows for 3 batch indices): the loop over the batch indices read rois rows past its end and
    answered. Now a run-time error; the node test's own feeds still match."""
    import random

    from onnxc.tools import fuzz_compile as fz

    (m, feeds), = [(m, f) for n, m, f in fz.base_cases() if n == "test_roialign_mode_max"]
    symbolic, feeds, _ = fz.mutate(random.Random(0), m, feeds, "symbolic")  # type: ignore[misc]
    compiled = onnxc.compile(symbolic)
    with pytest.raises(RuntimeCheckError, match=r"RoiAlign node '.*': rois of the run-time shape \(2, 4\) does not hold one row of 4 per batch index \(3\)"):
        compiled.run({**feeds, "rois": feeds["rois"][:2]})
    np.testing.assert_allclose(compiled.run(feeds)["Y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("op", ["GatherElements", "ScatterElements"])
def test_element_indices_larger_than_the_data_are_refused(op: str) -> None:
    """Found by the long compile-fuzz run (SoftmaxCrossEntropyLoss with labels of more rows than
    the scores, dims symbolic: its body's GatherElements answered): the loop over the indices'
    shape read (GatherElements) or wrote (ScatterElements) the data past its end off the axis.
    Dynamic dims: a run-time error; static ones: refused at compile time; indices that fit
    still match onnx.reference."""
    def model(dshape: list[int | str], ishape: list[int | str]) -> onnx.ModelProto:
        ins = [_f("d", dshape), h.make_tensor_value_info("i", T.INT64, ishape)] + ([_f("u", ishape)] if op == "ScatterElements" else [])
        node = h.make_node(op, [v.name for v in ins], ["y"], axis=1, name="n")
        return _model([node], ins, ["y"])

    m = model(["d0", "d1"], ["i0", "i1"])
    compiled = onnxc.compile(m)
    d = np.arange(6, dtype=np.float32).reshape(2, 3)

    def feeds(i: np.ndarray) -> dict[str, np.ndarray]:
        return {"d": d, "i": i, **({"u": np.full(i.shape, 7, np.float32)} if op == "ScatterElements" else {})}

    with pytest.raises(RuntimeCheckError, match=rf"{op} node 'n': the indices of the run-time shape \(3, 2\) does not fit the data's shape \(2, 3\) off axis 1"):
        compiled.run(feeds(np.zeros((3, 2), np.int64)))
    good = feeds(np.array([[2, 0], [1, 1]], np.int64))
    np.testing.assert_array_equal(compiled.run(good)["y"], ReferenceEvaluator(m).run(None, good)[0])
    with pytest.raises(OnnxcError, match=r"the indices dim 0 \(3\) exceeds the data's \(2\)"):
        onnxc.compile(model([2, 3], [3, 2]))


def test_transpose_perm_is_checked_even_when_the_result_type_equals_the_input() -> None:
    """Found by the long compile-fuzz run: Transpose perm = [0, 1] on a rank-3 input whose
    declared result type equals the input's was dropped as a no-op before its perm was checked,
    and answered; now refused on the model."""
    g = h.make_graph([h.make_node("Transpose", ["x"], ["y"], perm=[0, 1])], "g", [_f("x", [2, 3, 4])], [_f("y", [2, 3, 4])])
    with pytest.raises(OnnxcError, match=r"attribute 'perm' = \[0, 1\] is not a permutation of 0..2"):
        onnxc.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))


def test_col2im_non_positive_strides_are_refused() -> None:
    node = h.make_node("Col2Im", ["x", "s", "k"], ["y"], strides=[2, -2])
    g = h.make_graph([node], "g", [_f("x", [1, 5, 5]), h.make_tensor_value_info("s", T.INT64, [2]), h.make_tensor_value_info("k", T.INT64, [2])], [_f("y", None)])
    with pytest.raises(OnnxcError, match=r"attribute 'strides' = \[2, -2\] must hold positive values"):
        onnxc.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))


@pytest.mark.parametrize(("op", "shape", "message"), [
    ("DepthToSpace", (1, 8, 2, 3), r"input dim 1 \(channels\) of run-time size 8 is not a multiple of 9"),
    ("SpaceToDepth", (1, 2, 4, 6), r"input dim 2 \(height\) of run-time size 4 is not a multiple of 3"),
])  # fmt: skip
def test_depth_space_sizes_that_do_not_divide_are_refused(op: str, shape: tuple[int, ...], message: str) -> None:
    """Found by the long compile-fuzz run (DepthToSpace blocksize 3 on 8 channels, dims
    symbolic): the floor quotient dropped the remainder and an empty tensor was answered. A
    run-time error for dynamic dims, refused at compile time for static ones; valid sizes match."""
    m = _model([h.make_node(op, ["x"], ["y"], blocksize=3, name="n")], [_f("x", ["n", "c", "h", "w"])], ["y"])
    compiled = onnxc.compile(m)
    with pytest.raises(RuntimeCheckError, match=message):
        compiled.run({"x": np.ones(shape, np.float32)})
    good = np.arange(1 * 9 * 3 * 6, dtype=np.float32).reshape(1, 9, 3, 6)
    np.testing.assert_array_equal(compiled.run({"x": good})["y"], ReferenceEvaluator(m).run(None, {"x": good})[0])
    with pytest.raises(OnnxcError, match="not divisible by|does not divide"):  # static: onnx-validate-attributes's rule
        onnxc.compile(_model([h.make_node(op, ["x"], ["y"], blocksize=3, name="n")], [_f("x", list(shape))], ["y"]))


def test_einsum_letter_of_two_sizes_is_refused() -> None:
    """Found by the long compile-fuzz run (test_einsum_inner_prod fed a y of 6 for an x of 5, dims
    symbolic): every occurrence of a letter was read at the first one's size, answering a sum of 5
    products (reading past the shorter operand the other way round). Run-time error for dynamic
    dims, refused for static ones; equal sizes still match."""
    def model(sx: list[int | str], sy: list[int | str]) -> onnx.ModelProto:
        return _model([h.make_node("Einsum", ["x", "y"], ["z"], equation="ij,jk->ik", name="e")], [_f("x", sx), _f("y", sy)], ["z"])

    m = model(["a", "b"], ["c", "d"])
    compiled = onnxc.compile(m)
    with pytest.raises(RuntimeCheckError, match=r"Einsum node 'e': the operands' run-time dims \(2, 3, 4, 2\) give a letter of 'ij,jk->ik' two sizes"):
        compiled.run({"x": np.ones((2, 3), np.float32), "y": np.ones((4, 2), np.float32)})
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "y": rng.standard_normal((3, 4)).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)["z"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(OnnxcError, match="letter 'j' has sizes 3 and 4"):
        onnxc.compile(model([2, 3], [4, 2]))


def test_group_normalization_scale_of_another_rank_is_refused() -> None:
    """Found by the long compile-fuzz run: GroupNormalization's scale fed as [1, 4] (rank 2) was
    reshaped by the expanded function body into another grouping and answered differently from
    onnx.reference and onnxruntime (which agree); refused on the model now."""
    node = h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    m = _model([node], [_f("x", [3, 4, 2, 2]), _f("s", [1, 4]), _f("b", [4])], ["y"], opset=21)
    with pytest.raises(OnnxcError, match="input 's' has rank 2; GroupNormalization takes a 1-D tensor there"):
        onnxc.compile(m)


def test_attention_outputs_inferred_with_a_zero_dim_are_not_trusted(tmp_path: Path) -> None:
    """Found by the long compile-fuzz run (qk_matmul_softcap with V's dims symbolic, the rest
    static): onnx's inference gave qk_matmul_output a static last dim of 0; compiled in, it was
    refused (only V[1] symbolic) or aborted the process in the CPU tiling (an MLIR assertion). The
    importer now clears an Attention output's inferred 0 dims when an input has a dynamic dim; the
    model compiles (in a child process) and matches onnx.reference."""
    import random

    from onnxc.tools import fuzz_compile as fz

    (m, feeds), = [(m, f) for n, m, f in fz.base_cases() if n == "test_attention_3d_with_past_and_present_qk_matmul_softcap"]
    model, feeds, _ = fz.mutate(random.Random(0), m, feeds, "symbolic")  # type: ignore[misc]
    for vi in model.graph.input:  # only V symbolic
        for j, d in enumerate(vi.type.tensor_type.shape.dim):
            if vi.name != "V":
                d.dim_value = feeds[vi.name].shape[j]
    proc = _compile_in_child(model, tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-800:])
    got = onnxc.compile(model).run(feeds)
    for vi, want in zip(model.graph.output, ReferenceEvaluator(m).run(None, feeds)):
        np.testing.assert_allclose(got[vi.name], want, rtol=1e-3, atol=1e-5)


def test_col2im_input_of_another_block_count_is_refused() -> None:
    """Found by the long compile-fuzz run (test_col2im_strides with strides [1, 2]): the gather
    read the input up to the block count of the new strides, past an input of fewer blocks, and
    answered; now a run-time error (image and block shapes are inputs). The node test matches."""
    from onnxc.tools import fuzz_compile as fz

    (m, feeds), = [(m, f) for n, m, f in fz.base_cases() if n == "test_col2im_strides"]
    np.testing.assert_allclose(onnxc.compile(m).run(feeds)["output"], ReferenceEvaluator(m).run(None, feeds)[0])
    bad = onnx.ModelProto()
    bad.CopyFrom(m)
    next(a for a in bad.graph.node[0].attribute if a.name == "strides").ints[:] = [1, 2]
    with pytest.raises(RuntimeCheckError, match=r"Col2Im node '.*': the input of dims \(9, 4\) does not hold a multiple of 9 rows of 6 blocks"):
        onnxc.compile(bad).run(feeds)


def test_eyelike_dtype_that_is_no_type_is_refused() -> None:
    """Found by the long compile-fuzz run: EyeLike dtype = -1 was answered (as the declared type);
    onnx.reference refuses it."""
    g = h.make_graph([h.make_node("EyeLike", ["x"], ["y"], dtype=-1)], "g", [_f("x", [3, 4])], [_f("y", [3, 4])])
    with pytest.raises(OnnxcError, match="attribute 'dtype' = -1 is not an element type EyeLike can produce"):
        onnxc.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))


def test_rnn_weights_that_do_not_fit_hidden_size_are_refused() -> None:
    """Found by the long compile-fuzz run (RNN hidden_size 7 with W and R of 4 rows, some dims
    symbolic): the loops read the weights at the attribute's size and answered a (2, 1, 7) state.
    Dynamic dims: a run-time error; static ones: refused; fitting weights still match."""
    def model(hidden: int, wd: list[int | str], rd: list[int | str]) -> onnx.ModelProto:
        node = h.make_node("RNN", ["x", "w", "r"], ["", "y_h"], hidden_size=hidden, name="rnn")
        return _model([node], [_f("x", [2, 1, 3]), _f("w", wd), _f("r", rd)], ["y_h"])

    m = model(4, [1, "g", "i"], [1, "g2", "hh"])
    compiled = onnxc.compile(m)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 1, 3)).astype(np.float32)
    with pytest.raises(RuntimeCheckError, match=r"RNN node 'rnn': the run-time weight shapes .* do not fit hidden_size 4"):
        compiled.run({"x": x, "w": np.ones((1, 7, 3), np.float32), "r": np.ones((1, 7, 7), np.float32)})
    feeds = {"x": x, "w": rng.standard_normal((1, 4, 3)).astype(np.float32), "r": rng.standard_normal((1, 4, 4)).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)["y_h"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(OnnxcError, match="input 1 dim 1 is 4, 7 expected"):
        onnxc.compile(model(7, [1, 4, 3], [1, 4, 4]))


def test_tfidf_ngram_counts_out_of_order_are_refused() -> None:
    """Found by the long compile-fuzz run: TfIdfVectorizer ngram_counts = [4, -4] sliced the pool
    from its end and counted n-grams the model does not have (answered)."""
    node = h.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0,
                       ngram_counts=[4, -4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])  # fmt: skip
    m = _model([node], [h.make_tensor_value_info("x", T.INT32, [12])], ["y"], opset=9)
    with pytest.raises(OnnxcError, match=r"ngram_counts \[4, -4\] must start at 0 and rise within the pool of 10"):
        onnxc.compile(m)


def test_convtranspose_output_padding_of_a_stride_is_refused() -> None:
    """Fuzz seed 302 case 21216: ConvTranspose with output_padding [1, 2] and strides [3, 2] (an
    output padding as large as the stride) was answered, differently from onnx.reference;
    onnxruntime refuses it. Refused; [1, 1] still matches the reference."""
    def model(opad: list[int]) -> onnx.ModelProto:
        node = h.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[3, 2], output_shape=[10, 8], kernel_shape=[3, 3], output_padding=opad)
        return _model([node], [_f("x", [1, 1, 3, 3]), _f("w", [1, 2, 3, 3])], ["y"])

    with pytest.raises(OnnxcError, match=r"output_padding \[1, 2\] must be within \[0, max\(stride, dilation\)\)"):
        onnxc.compile(model([1, 2]))
    feeds = {"x": np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3), "w": np.ones((1, 2, 3, 3), np.float32)}
    m = model([1, 1])
    np.testing.assert_allclose(onnxc.compile(m).run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-5)


def test_tfidf_duplicate_ngrams_are_refused() -> None:
    """Fuzz seed 302 case 5377: a pool listing the unigram 5 twice (two output columns) was
    answered with symbolic dims, counted in another column than onnx.reference's; onnxruntime
    refuses such a pool ("Duplicate ngram detected"). Refused, with static dims as well."""
    node = h.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=5,
                       ngram_counts=[0, 4], ngram_indexes=list(range(7)), pool_int64s=[5, 8, 5, 4, 6, 3, 7, 7, 6, 6])  # fmt: skip
    for dims in ([2, 6], ["a", "b"]):
        m = _model([node], [h.make_tensor_value_info("x", T.INT32, dims)], ["y"], opset=9)
        with pytest.raises(OnnxcError, match=r"pool_int64s lists the 1-gram \[5\] twice"):
            onnxc.compile(m)


def test_instance_normalization_scale_of_another_length_is_refused() -> None:
    """Found by the long compile-fuzz run: InstanceNormalization of 1 channel with a scale of 2
    read the scale at its first entry and answered ((2, 1, 3); the reference broadcast to (2, 2,
    3)). Static lengths: refused; dynamic ones: a run-time error; the right length matches."""
    def model(bias: list[int | str]) -> onnx.ModelProto:
        return _model([h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="inorm")], [_f("x", [2, "c", 3]), _f("s", ["k"]), _f("b", bias)], ["y"])

    with pytest.raises(OnnxcError, match="scale has 2 entries, the input 1 channels"):
        onnxc.compile(_model([h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], [_f("x", [2, 1, 3]), _f("s", [2]), _f("b", [1])], ["y"]))
    m = model(["k2"])
    compiled = onnxc.compile(m)
    x = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    with pytest.raises(RuntimeCheckError, match=r"InstanceNormalization node 'inorm': input 1 has 2 entries, the input 1 channels"):
        compiled.run({"x": x, "s": np.ones(2, np.float32), "b": np.zeros(1, np.float32)})
    feeds = {"x": x, "s": np.full(1, 2.0, np.float32), "b": np.full(1, 0.5, np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-4, atol=1e-5)


def test_resize_sizes_of_another_length_than_axes_are_refused() -> None:
    """Found by the long compile-fuzz run: Resize axes = [2, 3, 1] with 2 sizes read past the
    sizes input; refused on the model now (its declared length is known)."""
    node = h.make_node("Resize", ["x", "", "", "sizes"], ["y"], axes=[2, 3, 1], mode="nearest")
    m = _model([node], [_f("x", [1, 1, 2, 4]), h.make_tensor_value_info("sizes", T.INT64, [2])], ["y"], opset=19)
    with pytest.raises(OnnxcError, match=r"input 'sizes' has 2 entries for the 3 axes \[2, 3, 1\]"):
        onnxc.compile(m)


def test_split_num_outputs_contradicting_the_outputs_is_refused_not_aborted(tmp_path: Path) -> None:
    """Found by the long compile-fuzz run: Split num_outputs = 2 with 3 outputs aborted the
    process in onnx's shape inference (a std::vector index assertion)."""
    node = h.make_node("Split", ["x"], ["a", "b", "c"], num_outputs=2)
    proc = _compile_in_child(_model([node], [_f("x", [6])], ["a", "b", "c"], opset=18), tmp_path)
    assert proc.returncode == 1 and "attribute 'num_outputs' = 2, but the node has 3 outputs" in proc.stderr, (proc.returncode, proc.stderr[-500:])


def _quantize_model(op: str, out_dtype: int | None, declared: int, zero_point: int | None = None, block: int = 2) -> onnx.ModelProto:
    """A blocked QuantizeLinear/DequantizeLinear of a 3x4 input with a 3x2 scale (`block` = 2 along axis 1)."""
    attrs: dict[str, int] = {"axis": 1, "block_size": block}
    if out_dtype is not None:
        attrs["output_dtype"] = out_dtype
    ins = ["x", "s"] + (["zp"] if zero_point is not None else [])
    x_type = T.FLOAT if op == "QuantizeLinear" else T.INT8
    inputs = [h.make_tensor_value_info("x", x_type, [3, 4]), _f("s", [3, 2])]
    inits = [h.make_tensor("zp", zero_point, [3, 2], [0] * 6)] if zero_point is not None else []
    g = h.make_graph([h.make_node(op, ins, ["y"], name="q", **attrs)], "g", inputs, [h.make_tensor_value_info("y", declared, [3, 4])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)])


@pytest.mark.parametrize(("op", "out_dtype", "declared", "zero_point", "message"), [
    ("QuantizeLinear", 0, T.INT16, None, r"its result is UINT8 \(without 'output_dtype' or a zero point it is UINT8\), but the graph declares its output 'y' as INT16"),
    ("QuantizeLinear", None, T.INT8, T.UINT8, r"its result is UINT8 \(its zero point 'zp' is UINT8 \(no 'output_dtype'\)\), but the graph declares its output 'y' as INT8"),
    ("QuantizeLinear", T.INT16, T.INT16, T.INT8, r"attribute 'output_dtype' = INT16, but the zero point 'zp' is INT8; the two must agree"),
    ("QuantizeLinear", T.INT8, T.INT16, None, r"its result is INT8 \(attribute 'output_dtype' = INT8\), but the graph declares its output 'y' as INT16"),
    ("DequantizeLinear", 0, T.FLOAT16, None, r"its result is FLOAT \(its scale 's' is FLOAT \(no 'output_dtype'\)\), but the graph declares its output 'y' as FLOAT16"),
])  # fmt: skip
def test_quantize_result_type_contradicting_the_declared_output_is_refused(op: str, out_dtype: int | None, declared: int,
                                                                           zero_point: int | None, message: str) -> None:  # fmt: skip
    """Found by the long compile-fuzz run (seed 102 case 38574): a blocked QuantizeLinear with
    `output_dtype` = 0 and no zero point (spec: a uint8 result) declared int16 was quantized to
    int16 (-5 where onnx.reference saturates to 0): the result was typed from the declaration."""
    with pytest.raises(OnnxcError, match=message):
        onnxc.compile(_quantize_model(op, out_dtype, declared, zero_point))


@pytest.mark.parametrize(("out_dtype", "declared", "zero_point"), [(0, T.UINT8, None), (None, T.INT8, T.INT8), (T.INT16, T.INT16, None)])
def test_blocked_quantize_with_a_consistent_type_matches_reference(out_dtype: int | None, declared: int, zero_point: int | None) -> None:
    m = _quantize_model("QuantizeLinear", out_dtype, declared, zero_point)
    feeds = {"x": np.array([[6, -8, -10, 5], [1, 8, 4, 5], [0, 20, 10, 4]], np.float32),
             "s": np.array([[1.5, 2.5], [3.0, 4.9], [5.1, 6.9]], np.float32)}  # fmt: skip
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = onnxc.compile(m).run(feeds)["y"]
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


# Compiles the model file argv[1], runs it on the feeds pickled in argv[2] and compares with
# onnx.reference; prints "match" (an abort shows as a negative exit code).
_RUN_AGAINST_REFERENCE = textwrap.dedent(
    """
    import pickle, sys, warnings
    warnings.simplefilter("ignore")
    import numpy as np, onnx, onnxc
    from onnx.reference import ReferenceEvaluator
    model = onnx.load(sys.argv[1])
    with open(sys.argv[2], "rb") as f:
        feeds = pickle.load(f)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = onnxc.compile(model).run(feeds)
    for w, out in zip(want, model.graph.output):
        assert got[out.name].shape == w.shape, (out.name, got[out.name].shape, w.shape)
        np.testing.assert_allclose(got[out.name], w, rtol=1e-3, atol=1e-7)
    print("match")
    """
)


@pytest.mark.parametrize("case", ["reduce_sum", "softmax", "matmul_k0_relu", "reduce_max_keep"])
def test_static_zero_size_dims_reach_the_cpu_tiling_without_abort(case: str, tmp_path: Path) -> None:
    """An op with a static 0-size dim reached the CPU pipeline's tiling, which gave the empty loop
    a tile (0 for a whole-row reduction, 1 for an mmt4d's K of 0) and MLIR asserted
    (computeAllSliceParameters: SIGABRT; H11's long-run case 6572 hit it through an inferred 0
    dim). Such ops are left to scalar loops that run zero times. In a child process, against
    onnx.reference."""
    x30 = np.zeros((3, 0), np.float32)
    models: dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]] = {
        "reduce_sum": (_model([h.make_node("ReduceSum", ["a"], ["y"], keepdims=0)], [_f("a", [3, 0])], ["y"], opset=11), {"a": x30}),
        "softmax": (_model([h.make_node("Softmax", ["a"], ["y"])], [_f("a", [3, 0])], ["y"]), {"a": x30}),
        # A packed (data-tiled) contraction with K = 0 and a dynamic M, then an elementwise op.
        "matmul_k0_relu": (_model([h.make_node("MatMul", ["a", "b"], ["t"]), h.make_node("Relu", ["t"], ["y"])], [_f("a", ["n", 0]), _f("b", [0, 3])], ["y"]),
                           {"a": np.zeros((2, 0), np.float32), "b": np.zeros((0, 3), np.float32)}),  # fmt: skip
        "reduce_max_keep": (_model([h.make_node("ReduceMax", ["a"], ["y"], axes=[0], keepdims=1)], [_f("a", [0, 5])], ["y"], opset=11),
                            {"a": np.zeros((0, 5), np.float32)}),  # fmt: skip
    }
    model, feeds = models[case]
    onnx.save(model, str(tmp_path / "m.onnx"))
    import pickle

    (tmp_path / "feeds.pkl").write_bytes(pickle.dumps(feeds))
    r = subprocess.run([sys.executable, "-c", _RUN_AGAINST_REFERENCE, str(tmp_path / "m.onnx"), str(tmp_path / "feeds.pkl")],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0 and "match" in r.stdout, (r.returncode, r.stderr[-2000:])


def _blocked_dequantize(xs: list[int | str], ss: list[int | str], axis: int, block: int = 2) -> onnx.ModelProto:
    node = h.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=axis, block_size=block, name="dq")
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.UINT8, xs), _f("s", ss), h.make_tensor_value_info("z", T.UINT8, ss)],
                     [_f("y", None)])  # fmt: skip
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)])


def _blocked_feeds(x_shape: tuple[int, ...], s_shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"x": rng.integers(0, 255, x_shape).astype(np.uint8), "s": rng.uniform(0.5, 2.0, s_shape).astype(np.float32),
            "z": rng.integers(0, 20, s_shape).astype(np.uint8)}  # fmt: skip


def test_blocked_scale_that_does_not_fit_the_input_is_refused_or_a_run_time_error() -> None:
    """Found by the compile fuzzer (seed 211: DequantizeLinear blocked, axis mutated to 0, some
    dims symbolic): the scale view read `s[i floordiv 2, j, ...]` at every coordinate of x, past
    a scale of 2 rows for 4 (answered with garbage where onnx.reference refuses). Static: refused
    (it was an MLIR verifier error); dynamic: a run-time error; fitting ones match the reference."""
    with pytest.raises(OnnxcError, match=r"node 'dq': the scale's dim 1 \(2\) differs from the input's \(4\) off axis 0"):
        onnxc.compile(_blocked_dequantize([1, 4, 3, 2], [1, 2, 3, 2], axis=0))
    with pytest.raises(OnnxcError, match=r"the scale's 1 blocks of block_size 2 along axis 1 do not cover the input's 4"):
        onnxc.compile(_blocked_dequantize([1, 4, 3, 2], [1, 1, 3, 2], axis=1))
    m = _blocked_dequantize([1, "a", 3, 2], [1, 2, 3, "b"], axis=0)
    compiled = onnxc.compile(m)
    with pytest.raises(RuntimeCheckError, match=r"DequantizeLinear node 'dq': the blocked scale or zero point of shape \(1, 2, 3, 2\) "
                                                r"does not fit the input's \(1, 4, 3, 2\) \(block_size 2, axis 0\)"):  # fmt: skip
        compiled.run(_blocked_feeds((1, 4, 3, 2), (1, 2, 3, 2)))
    feeds = _blocked_feeds((1, 2, 3, 2), (1, 2, 3, 2))  # fits axis 0 (one block of 2 covers 1)
    np.testing.assert_allclose(compiled.run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-6)


@pytest.mark.parametrize(("xs", "ss", "x_shape", "s_shape"), [
    ([1, "a", 3, 2], ["p", "q", 3, 2], (1, 5, 3, 2), (1, 3, 3, 2)),  # dynamic, a remainder block
    ([1, 4, 3, 2], [1, 3, 3, 2], (1, 4, 3, 2), (1, 3, 3, 2)),  # more blocks than needed: the last is unused
    ([1, 4, 3, 2], [1, 1, 1, 1], (1, 4, 3, 2), (1, 1, 1, 1)),  # one element: per tensor
])  # fmt: skip
def test_blocked_dequantize_that_fits_matches_reference(xs: list[int | str], ss: list[int | str], x_shape: tuple[int, ...], s_shape: tuple[int, ...]) -> None:
    m = _blocked_dequantize(xs, ss, axis=1)
    feeds = _blocked_feeds(x_shape, s_shape)
    np.testing.assert_allclose(onnxc.compile(m).run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-6)


def test_swiglu_inputs_of_different_shapes_are_refused() -> None:
    """Found by the compile fuzzer (seed 211, unverified: both references refuse): the spec's
    SwiGLU takes A and B of identical shapes, but its function body (expanded by the importer)
    is a broadcasting Mul and answered a (1, 2, 4) gate times a (2, 4) value. Identical shapes
    still match onnx.reference."""
    def model(sa: list[int | str], sb: list[int | str]) -> onnx.ModelProto:
        return _model([h.make_node("SwiGLU", ["a", "b"], ["y"], name="sw")], [_f("a", sa), _f("b", sb)], ["y"], opset=28)

    with pytest.raises(OnnxcError, match=r"inputs 'a' \[1, 2, 4\] and 'b' \[\?, \?\] differ; SwiGLU takes A and B of identical shapes"):
        onnxc.compile(model([1, 2, 4], ["n", "m"]))
    with pytest.raises(OnnxcError, match=r"inputs 'a' \[2, 4\] and 'b' \[2, 1\] differ"):
        onnxc.compile(model([2, 4], [2, 1]))
    m = model([2, "n"], [2, "n"])
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((2, 5)).astype(np.float32), "b": rng.standard_normal((2, 5)).astype(np.float32)}
    np.testing.assert_allclose(onnxc.compile(m).run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-5, atol=1e-6)


def _conv_integer(w_zp_shape: list[int]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    u8 = lambda n, s: h.make_tensor_value_info(n, T.UINT8, s)  # noqa: E731
    node = h.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1], name="ci")
    g = h.make_graph([node], "g", [u8("x", [1, 1, 3, 3]), u8("w", [2, 1, 2, 2]), u8("xz", []), u8("wz", w_zp_shape)],
                     [h.make_tensor_value_info("y", T.INT32, None)])  # fmt: skip
    rng = np.random.default_rng(1)
    feeds = {"x": rng.integers(0, 255, (1, 1, 3, 3)).astype(np.uint8), "w": rng.integers(0, 255, (2, 1, 2, 2)).astype(np.uint8),
             "xz": np.array(3, np.uint8), "wz": rng.integers(0, 9, w_zp_shape).astype(np.uint8)}  # fmt: skip
    return h.make_model(g, opset_imports=[h.make_opsetid("", 10)]), feeds


def test_conv_integer_zero_point_of_rank_2_is_refused() -> None:
    """Found by the compile fuzzer (seed 211 case 8048, unverified: onnx.reference refuses): a
    [1, 2] weight zero point of ConvInteger (the spec: a scalar or one per output channel) was
    broadcast against the kernel's width and answered. Refused; one per channel still matches."""
    with pytest.raises(OnnxcError, match=r"node 'ci': input 3 has shape \[1, 2\]; it must be a scalar or 1-D \(one entry per output channel\)"):
        onnxc.compile(_conv_integer([1, 2])[0])
    m, feeds = _conv_integer([2])
    np.testing.assert_array_equal(onnxc.compile(m).run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0])


def _layer_norm(xs: list[int | str], bias: list[int | str]) -> onnx.ModelProto:
    node = h.make_node("LayerNormalization", ["x", "w", "b"], ["y"], axis=-2, name="ln")
    return _model([node], [_f("x", xs), _f("w", [3, 5]), _f("b", bias)], ["y"], opset=17)


def test_static_operand_dim_that_does_not_broadcast_to_a_dynamic_result_is_caught() -> None:
    """Found by the compile fuzzer (seed 211 case 13978, unverified: onnx.reference refuses): a
    LayerNormalization bias of 15 (or 4) for a last dim of 5, with another dim of x symbolic,
    was read at the loop index (answered, or read past the 4): `broadcast_plan` with a given
    result shape did not check static operand dims. Static misfits are refused naming the node;
    a static dim read for a dynamic result dim is a run-time check; fitting shapes still match."""
    for b in (15, 4):
        with pytest.raises(OnnxcError, match=rf"node 'ln': operand 4 dim 0 \({b}\) does not broadcast to dim 2 of the result \(5\)"):
            onnxc.compile(_layer_norm([2, "a", 5], [b]))
    m = _layer_norm([2, 3, "n"], [5])
    compiled = onnxc.compile(m)
    rng = np.random.default_rng(2)
    with pytest.raises(RuntimeCheckError, match=r"LayerNormalization node 'ln': operand dim 5 does not broadcast to dim 2 of the result \(4\)"):
        compiled.run({"x": rng.standard_normal((2, 3, 4)).astype(np.float32), "w": np.ones((3, 5), np.float32), "b": np.ones(5, np.float32)})
    feeds = {"x": rng.standard_normal((2, 3, 5)).astype(np.float32), "w": rng.standard_normal((3, 5)).astype(np.float32),
             "b": rng.standard_normal(5).astype(np.float32)}  # fmt: skip
    np.testing.assert_allclose(compiled.run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-4, atol=1e-5)


def test_det_of_matrices_square_only_at_run_time() -> None:
    """Found by the compile fuzzer (seed 211 case 13817, unverified: onnx.reference refuses): Det
    of a 6x2 input with every dim symbolic was reshaped to 2x2 matrices and answered. A run-time
    error now; square matrices still match the reference."""
    m = _model([h.make_node("Det", ["x"], ["y"], name="det")], [_f("x", ["b", "m", "n"])], ["y"])
    compiled = onnxc.compile(m)
    with pytest.raises(RuntimeCheckError, match=r"Det node 'det': the matrices are not square \(6x2\)"):
        compiled.run({"x": np.ones((1, 6, 2), np.float32)})
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 3, 3)).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-4, atol=1e-5)


def test_col2im_input_of_rank_2_is_refused_not_aborted(tmp_path: Path) -> None:
    """Found by the compile fuzzer (seed 212 cases 4282 and 4758): Col2Im of a rank-2 input (the
    spec: [N, C * prod(block_shape), L]) aborted the process in ShapedType::isDynamicDim. In a
    child process; a valid Col2Im still matches onnx.reference."""
    def model(shape: list[int]) -> onnx.ModelProto:
        i64 = lambda n: h.make_tensor_value_info(n, T.INT64, [2])  # noqa: E731
        return _model([h.make_node("Col2Im", ["x", "img", "blk"], ["y"], name="c2i")], [_f("x", shape), i64("img"), i64("blk")], ["y"])

    proc = _compile_in_child(model([5, 5]), tmp_path)
    assert proc.returncode == 1 and "input 'input' has rank 2; Col2Im needs rank 3" in proc.stderr, (proc.returncode, proc.stderr[-500:])
    m = model([1, 5, 5])
    feeds = {"x": np.arange(25, dtype=np.float32).reshape(1, 5, 5), "img": np.array([5, 5], np.int64), "blk": np.array([1, 5], np.int64)}
    np.testing.assert_allclose(onnxc.compile(m).run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-6)


def test_identity_perm_of_another_rank_is_refused() -> None:
    """Found by the compile fuzzer (seed 212 case 3664, unverified: onnx.reference refuses): a
    Transpose with perm [0, 1, 2] on a rank-2 input (output undeclared) was dropped as a no-op and
    answered the input. The identity perm of the right length still compiles."""
    def model(perm: list[int]) -> onnx.ModelProto:
        return _model([h.make_node("Transpose", ["x"], ["y"], perm=perm)], [_f("x", [6, 4])], ["y"])

    with pytest.raises(OnnxcError, match=r"attribute 'perm' = \[0, 1, 2\] is not a permutation of 0..1 \(input 'x' has rank 2\)"):
        onnxc.compile(model([0, 1, 2]))
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    np.testing.assert_array_equal(onnxc.compile(model([0, 1])).run({"x": x})["y"], x)


def _qlinear_conv(x: list[int | str], w: list[int | str], w_scale: list[int | str], bias: bool = False) -> onnx.ModelProto:
    """A QLinearConv (uint8, per-channel weight scale and zero point) with the given input shapes."""
    u8 = lambda n, s: h.make_tensor_value_info(n, T.UINT8, s)  # noqa: E731
    f32 = lambda n, s: h.make_tensor_value_info(n, T.FLOAT, s)  # noqa: E731
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"] + (["b"] if bias else [])
    inputs = [u8("x", x), f32("xs", []), u8("xz", []), u8("w", w), f32("ws", w_scale), u8("wz", w_scale), f32("ys", []), u8("yz", [])]
    if bias:
        inputs.append(h.make_tensor_value_info("b", T.INT32, w_scale))
    g = h.make_graph([h.make_node("QLinearConv", names, ["y"], name="qc")], "g", inputs, [h.make_tensor_value_info("y", T.UINT8, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 10)])


def _qlinear_conv_feeds(x: tuple[int, ...], w: tuple[int, ...], m: int, bias: bool = False, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.integers(0, 256, x).astype(np.uint8), "xs": np.array(0.0037, np.float32), "xz": np.array(132, np.uint8),
             "w": rng.integers(0, 256, w).astype(np.uint8), "ws": (rng.random(m) * 0.002 + 0.001).astype(np.float32),
             "wz": rng.integers(100, 156, m).astype(np.uint8), "ys": np.array(0.0016, np.float32), "yz": np.array(123, np.uint8)}  # fmt: skip
    if bias:
        feeds["b"] = rng.integers(-300, 300, m).astype(np.int32)
    return feeds


def test_value_specialized_model_returns_unsigned_outputs_as_declared() -> None:
    """Found by the compile fuzzer (seed 401 case 7300, a wrong answer): test_qlinearconv with
    w[0], w[3] and w_scale[0] symbolic. A dynamic kernel width is refused by the general compile,
    so the model is compiled per value of its small weight (`onnxc.specialize`, a
    `StructuredModel`), whose results were returned in the compiled code's signless dtype: the
    uint8 output came back as int8 (230 read as -26). Such results, and sequence elements, are now
    viewed as the declared type; the values match onnx.reference."""
    m = _qlinear_conv([1, 1, 7, 7], ["m", 1, 1, "kw"], ["m"])
    feeds = _qlinear_conv_feeds((1, 1, 7, 7), (1, 1, 1, 1), 1)
    got = onnxc.compile(m).run(feeds)["y"]
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    assert got.dtype == np.uint8 and (want > 127).any(), (got.dtype, want.max())
    np.testing.assert_array_equal(got, want)
    # A sequence output (a StructuredModel by its types) of uint8 elements, and a uint8 tensor beside it.
    u8 = lambda n, s: h.make_tensor_value_info(n, T.UINT8, s)  # noqa: E731
    g = h.make_graph([h.make_node("SequenceConstruct", ["x", "x"], ["s"]), h.make_node("Identity", ["x"], ["y"])], "g", [u8("x", [3])],
                     [h.make_tensor_sequence_value_info("s", T.UINT8, None), u8("y", [3])])  # fmt: skip
    x = np.array([1, 200, 255], np.uint8)
    out = onnxc.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 17)])).run({"x": x})
    assert [a.dtype for a in out["s"]] == [np.uint8, np.uint8] and out["y"].dtype == np.uint8
    np.testing.assert_array_equal(out["s"][1], x)
    np.testing.assert_array_equal(out["y"], x)


def test_conv_channel_counts_known_only_at_run_time_are_checked() -> None:
    """Found replaying the compile fuzzer's seed 401 case 7300 family (QLinearConv and ConvInteger
    with x dims symbolic): a dynamic X channel count made the grouped generic an `expand_shape` of
    a dynamic dim into static ones (an MLIR verifier error), and a float Conv answered where
    onnx.reference refuses; a dynamic W output-channel count that does not split into the groups
    also answered. Both are run-time errors naming the node; fitting shapes match onnx.reference
    (QLinearConv with every dim but W's kernel and channels-per-group symbolic, with a bias)."""
    rng = np.random.default_rng(5)
    u8 = lambda n, s: h.make_tensor_value_info(n, T.UINT8, s)  # noqa: E731
    node = h.make_node("ConvInteger", ["x", "w"], ["y"], group=2, name="ci")
    g = h.make_graph([node], "g", [u8("x", [1, "c", 5, 5]), u8("w", [2, 1, 3, 3])], [h.make_tensor_value_info("y", T.INT32, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 10)])
    compiled = onnxc.compile(m)
    w = rng.integers(0, 256, (2, 1, 3, 3)).astype(np.uint8)
    for c in (3, 64):
        with pytest.raises(RuntimeCheckError, match=rf"ConvInteger node 'ci': X has {c} channels, W\[1\] x group 2 asks for 2"):
            compiled.run({"x": rng.integers(0, 256, (1, c, 5, 5)).astype(np.uint8), "w": w})
    feeds = {"x": rng.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8), "w": w}
    np.testing.assert_array_equal(compiled.run(feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0])

    conv = _model([h.make_node("Conv", ["x", "w"], ["y"], group=2, name="cv")], [_f("x", [1, "c", 5, 5]), _f("w", ["m", 2, 3, 3])], ["y"])
    compiled = onnxc.compile(conv)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    with pytest.raises(RuntimeCheckError, match=r"Conv node 'cv': X has 2 channels, W\[1\] x group 2 asks for 4"):
        compiled.run({"x": x[:, :2], "w": np.ones((4, 2, 3, 3), np.float32)})
    with pytest.raises(RuntimeCheckError, match=r"Conv node 'cv': W's 3 output channels do not split into group 2"):
        compiled.run({"x": x, "w": np.ones((3, 2, 3, 3), np.float32)})
    feeds = {"x": x, "w": rng.standard_normal((6, 2, 3, 3)).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)["y"], ReferenceEvaluator(conv).run(None, feeds)[0], rtol=1e-4, atol=1e-5)

    q = _qlinear_conv(["n", "c", "h", "wd"], ["m", 2, 3, 3], ["k"], bias=True)
    feeds = _qlinear_conv_feeds((2, 2, 6, 7), (4, 2, 3, 3), 4, bias=True)
    np.testing.assert_array_equal(onnxc.compile(q).run(feeds)["y"], ReferenceEvaluator(q).run(None, feeds)[0])


def _declared_larger_than_run_time(where: str, big: int) -> onnx.ModelProto:
    """A Slice of a run-time length followed by Neg, with the static size `big` declared for a
    value whose size onnx inference cannot know (the Slice's end is an input): `where` is
    'output' (the Neg's result: the lowering driver's check and cast) or 'if' (an If's result
    whose branch slices: `cast_to_type` in the If lowering)."""
    i64 = lambda n, s: h.make_tensor_value_info(n, T.INT64, s)  # noqa: E731
    if where == "output":
        nodes = [h.make_node("Slice", ["x", "s", "e"], ["y"], name="sl"), h.make_node("Neg", ["y"], ["z"], name="ng")]
        g = h.make_graph(nodes, "g", [_f("x", ["n"]), i64("s", [1]), i64("e", [1])], [_f("z", [big])])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    then = h.make_graph([h.make_node("Slice", ["x", "s", "e"], ["t"]), h.make_node("Neg", ["t"], ["t2"])], "then", [], [_f("t2", ["a"])])
    other = h.make_graph([h.make_node("Neg", ["x"], ["o"])], "else", [], [_f("o", ["b"])])
    nodes = [h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="br"), h.make_node("Neg", ["y"], ["z"])]
    g = h.make_graph(nodes, "g", [_f("x", ["n"]), i64("s", [1]), i64("e", [1]), h.make_tensor_value_info("c", T.BOOL, [])],
                     [_f("z", ["m"])], value_info=[_f("y", [big])])  # fmt: skip
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("where", ["output", "if"])
def test_declared_static_size_larger_than_run_time_is_checked_before_the_producer_runs(where: str, tmp_path: Path) -> None:
    """A value declared [50000000] that is 3 elements at run time (a Slice to an input end): the
    check-then-`tensor.cast` to the declared size was folded by canonicalization into the cast's
    producer (the Neg's linalg.generic, then the Slice's extract_slice), whose loops then read
    50,000,000 elements from a 3-element input before the check could fire (SIGSEGV). The cast is
    now behind an scf.if on the run-time size (`runtime_checks.guarded_cast`): a clear run-time
    error naming the node, and a fitting run matches onnx.reference. In a child process."""
    path, fits = tmp_path / "m.onnx", tmp_path / "fits.onnx"
    onnx.save(_declared_larger_than_run_time(where, 50_000_000), str(path))
    onnx.save(_declared_larger_than_run_time(where, 4), str(fits))
    who = "Neg node 'ng'" if where == "output" else "If node 'br'"
    code = textwrap.dedent(
        f"""
        import numpy as np, onnx, onnxc
        from onnx.reference import ReferenceEvaluator
        from onnxc.targets.cpu.runtime_checks import RuntimeCheckError
        feeds = dict(x=np.arange(6, dtype=np.float32), s=np.array([1]), e=np.array([4]))
        if {where == "if"}:
            feeds["c"] = np.array(True)
        try:
            onnxc.compile({str(path)!r}).run(feeds)
            raise SystemExit("no error")
        except RuntimeCheckError as exc:
            assert {who!r} in str(exc) and "(3,)" in str(exc) and "(50000000,)" in str(exc), exc
        feeds["e"] = np.array([5])  # 4 elements: as declared
        got = onnxc.compile({str(fits)!r}).run(feeds)["z"]
        np.testing.assert_array_equal(got, ReferenceEvaluator(onnx.load({str(fits)!r})).run(None, feeds)[0])
        print("done")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "done" in r.stdout, (r.returncode, r.stderr[-2000:])


def test_reshape_back_to_a_contradicting_declared_shape_is_refused() -> None:
    """Compile fuzzer seed 404 case 6628: LogSoftmax-7 of a [1, 1, 3] input whose result is
    declared [1, 3]. The upgrade to opset 13 is Flatten, LogSoftmax, Reshape to Shape(x); the
    canonicalizer took that Reshape, its result declared like its [1, 3] input, for a no-op and
    the model returned [1, 3] (onnx.reference: [1, 1, 3]). A Reshape/Expand/Squeeze/Flatten is
    forwarded only when it computes its input's own shape; here the lowering refuses."""
    g = h.make_graph([h.make_node("LogSoftmax", ["x"], ["y"], name="ls")], "g", [_f("x", [1, 1, 3])], [_f("y", [1, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 7)])
    m.ir_version = 8
    with pytest.raises(OnnxcError, match=r"lowering produced tensor<1x1x3xf32> for result 0 declared tensor<1x3xf32>"):
        onnxc.compile(m)
    g = h.make_graph([h.make_node("LogSoftmax", ["x"], ["y"], name="ls")], "g", [_f("x", [1, 1, 3])], [_f("y", [1, 1, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 7)])
    m.ir_version = 8
    x = np.array([[[0.5, -1.0, 2.0]]], np.float32)
    np.testing.assert_allclose(onnxc.compile(m).run({"x": x})["y"], ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dims", [[12], ["n"]])
def test_array_feature_extractor_of_a_vector_is_a_row(dims: list[int | str]) -> None:
    """Compile fuzzer seed 404 case 9095: ArrayFeatureExtractor of a 1-D x gives a [1, n] result
    (onnx.reference and onnxruntime); onnxc returned [n]."""
    node = h.make_node("ArrayFeatureExtractor", ["x", "i"], ["z"], domain="ai.onnx.ml", name="afe")
    g = h.make_graph([node], "g", [_f("x", dims), h.make_tensor_value_info("i", T.INT64, [2])], [_f("z", None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("ai.onnx.ml", 3)])
    feeds = {"x": np.arange(12, dtype=np.float32), "i": np.array([5, -1], np.int64)}
    got = onnxc.compile(m).run(feeds)["z"]
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    assert got.shape == want.shape == (1, 2)
    np.testing.assert_array_equal(got, want)


def test_gather_nd_batch_dims_must_match() -> None:
    """GatherND's first batch_dims dims of data and indices must be equal. With symbolic dims,
    indices of batch 1 against data of batch 2 answered from the data's first entry only
    ([[2, 3], [0, 1]]; fuzz seed 406 case 21454); now a run-time error, and a static mismatch
    is refused at compile time. Matching batches still agree with onnx.reference."""
    def model(data: list[int | str], indices: list[int | str]) -> onnx.ModelProto:
        node = h.make_node("GatherND", ["data", "indices"], ["out"], batch_dims=1)
        g = h.make_graph([node], "g", [h.make_tensor_value_info("data", T.INT32, data), h.make_tensor_value_info("indices", T.INT64, indices)],
                         [h.make_tensor_value_info("out", T.INT32, None)])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 13)])

    dyn = model(["a", "b", "c"], ["n", 2, 1])
    compiled = onnxc.compile(dyn)
    data = np.arange(8, dtype=np.int32).reshape(2, 2, 2)
    with pytest.raises(RuntimeCheckError, match=r"batch dim 0 of indices \(1\) differs from the data's \(2\)"):
        compiled.run({"data": data, "indices": np.array([[[1], [0]]], np.int64)})
    feeds = {"data": data, "indices": np.array([[[1], [0]], [[0], [1]]], np.int64)}
    np.testing.assert_array_equal(compiled.run(feeds)["out"], ReferenceEvaluator(dyn).run(None, feeds)[0])
    with pytest.raises(OnnxcError, match=r"batch dim 0 of indices \(1\) differs from the data's \(2\)"):
        onnxc.compile(model([2, 2, 2], [1, 2, 1]))


@pytest.mark.parametrize(("opset", "mode", "ok"), [(17, "cubic", False), (17, "bicubic", True), (20, "bicubic", False), (20, "cubic", True)])
def test_grid_sample_mode_names_follow_the_version(opset: int, mode: str, ok: bool) -> None:
    """GridSample-20 renamed bilinear/bicubic to linear/cubic: a model at opset 17 with 'cubic'
    was answered by onnx.reference as opset 20 and refused by onnxruntime (fuzz seed 407); each
    version's names are now checked on the model, naming the node and the version."""
    node = h.make_node("GridSample", ["x", "g"], ["y"], mode=mode, name="gs")
    m = _model([node], [_f("x", [1, 1, 3, 2]), _f("g", [1, 2, 4, 2])], ["y"], opset)
    if ok:
        onnxc.compile(m)
        return
    with pytest.raises(OnnxcError) as info:
        onnxc.compile(m)
    text = str(info.value)
    assert "'gs'" in text and f"'{mode}' is not one of" in text and f"GridSample-{16 if opset < 20 else 20}" in text, text


def test_resize_inputs_of_run_time_length_are_read() -> None:
    """A tf_crop_and_resize whose roi has a symbolic length ignored the roi and answered the
    uncropped resize (fuzz seed 409 case 30640); sizes of a symbolic length were read as absent
    too. A run-time roi, scales or sizes is now read, its length checked when the model runs."""
    node = h.make_node("Resize", ["X", "roi", "", "sizes"], ["Y"], mode="linear", axes=[2, 3], coordinate_transformation_mode="tf_crop_and_resize")
    g = h.make_graph([node], "g", [_f("X", [1, 1, 4, 4]), _f("roi", ["r"]), h.make_tensor_value_info("sizes", T.INT64, ["s"])],
                     [h.make_tensor_value_info("Y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    compiled = onnxc.compile(m)
    feeds = {"X": np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4), "roi": np.array([0.4, 0.6, 0.6, 0.8], np.float32), "sizes": np.array([3, 3], np.int64)}
    np.testing.assert_allclose(compiled.run(feeds)["Y"], ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeCheckError, match="roi has 2 entries at run time, 4 expected"):
        compiled.run({**feeds, "roi": np.array([0.4, 0.6], np.float32)})
    with pytest.raises(RuntimeCheckError, match="sizes has 3 entries at run time, 2 expected"):
        compiled.run({**feeds, "sizes": np.array([3, 3, 3], np.int64)})


def test_dynamic_operand_dim_against_a_result_dim_of_one_is_checked_at_run_time() -> None:
    """A per-axis DequantizeLinear scale of symbolic length for an input whose axis dim is 1: a
    scale of 3 was read at its first entry and answered (compile fuzzer seed 412 case 59267,
    where onnx.reference broadcast it to 3); a dynamic operand dim read for a result dim of 1 is
    now checked to be 1 at run time (`broadcast_plan`), and a scale of length 1 is still right."""
    x = h.make_tensor_value_info("x", T.INT8, [1, 1, 3, 3, 2])
    s = h.make_tensor_value_info("s", T.FLOAT, ["n"])
    node = h.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1)
    m = h.make_model(h.make_graph([node], "g", [x, s], [h.make_tensor_value_info("y", T.FLOAT, None)]), opset_imports=[h.make_opsetid("", 21)])
    compiled = onnxc.compile(m)
    xv = np.arange(18, dtype=np.int8).reshape(1, 1, 3, 3, 2)
    with pytest.raises(RuntimeCheckError, match="do not broadcast"):
        compiled(x=xv, s=np.array([0.5, 2.0, 4.0], np.float32))
    one = np.array([0.5], np.float32)
    got = compiled(x=xv, s=one)
    got = got["y"] if isinstance(got, dict) else got[0]
    np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, {"x": xv, "s": one})[0])
