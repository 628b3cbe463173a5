"""Models whose ranks depend on the values of small integer inputs are compiled per value.

What: `onnxc.specialize` (hooked into `onnxc.compile` and `StructuredModel`): a model whose
lowering fails because a rank is decided by an input's value (a Squeeze without axes of an Expand
to a run-time shape; an If on that value whose branches yield different ranks) is compiled per
call's values. Each model is compiled once and called with several values, alternating, and
every result is checked against onnx's ReferenceEvaluator, so a specialization reused for other
values (a stale cache entry) would give a result of the wrong rank or values and fail.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.errors import DiagnosticsError
from onnxc.specialize import bindable_inputs, is_value_dependent


def _squeeze_of_expand() -> onnx.ModelProto:
    """y = Squeeze(Expand(x, shape)) + 1: rank 1 when shape[0] == 1, else rank 2."""
    nodes = [
        helper.make_node("Expand", ["x", "shape"], ["e"]),
        helper.make_node("Squeeze", ["e"], ["s"]),
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])),
        helper.make_node("Add", ["s", "one"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "squeeze_of_expand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _if_on_value() -> onnx.ModelProto:
    """y = If(n == 1) then sum(x) * 2 (a scalar) else x * 3 (1-D): the rank follows n's value."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    three = helper.make_tensor("three", TensorProto.FLOAT, [], [3.0])
    then_g = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["x0"], keepdims=0),
            helper.make_node("Constant", [], ["c2"], value=two),
            helper.make_node("Mul", ["x0", "c2"], ["t"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["c3"], value=three), helper.make_node("Mul", ["x", "c3"], ["f"])],
        "else",
        [],
        [helper.make_tensor_value_info("f", TensorProto.FLOAT, [4])],
    )
    nodes = [
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", TensorProto.INT64, [], [1])),
        helper.make_node("Equal", ["n", "one"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(
        nodes,
        "if_on_value",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]), helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _check(model: onnx.ModelProto, feeds_list: list[dict[str, np.ndarray]]) -> None:
    compiled = onnxc.compile(model, "cpu", cache_dir=False)
    ref = ReferenceEvaluator(model)
    for feeds in feeds_list:
        (want,) = ref.run(None, feeds)
        (got,) = compiled(**feeds)
        assert np.shape(got) == np.shape(want), feeds
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_squeeze_rank_follows_the_shape_input() -> None:
    x = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    shapes = [[1, 3], [2, 3], [1, 3], [4, 3], [2, 3]]  # alternating: a stale specialization fails
    _check(_squeeze_of_expand(), [{"x": x, "shape": np.array(s, dtype=np.int64)} for s in shapes])


def test_if_with_branches_of_different_ranks() -> None:
    x = np.array([1.5, -2.0, 0.25, 4.0], dtype=np.float32)
    _check(_if_on_value(), [{"x": x, "n": np.array(v, dtype=np.int64)} for v in (1, 2, 1, 0)])


def test_value_independent_failures_still_fail_at_compile_time() -> None:
    # No input whose value could be bound: the dynamic Squeeze is refused when compiling.
    graph = helper.make_graph(
        [helper.make_node("Squeeze", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    assert bindable_inputs(model) == []
    with pytest.raises(DiagnosticsError, match="Squeeze"):
        onnxc.compile(model, "cpu", cache_dir=False)


def test_classification() -> None:
    assert is_value_dependent(DiagnosticsError("lower:", ["loc: Squeeze node 's': Squeeze without axes of a tensor with dynamic dims"]))
    assert is_value_dependent(DiagnosticsError("lower:", ["If node 'i': the branches yield ranks 0 and 1 for result 0; dynamic ranks are not lowered"]))
    # One problem that no binding removes (an op without a lowering) keeps the compile-time error.
    assert not is_value_dependent(DiagnosticsError("lower:", ["Squeeze ... with dynamic dims", "Foo: no lowering"]))
    assert not is_value_dependent(ValueError("dynamic"))
    assert bindable_inputs(_squeeze_of_expand()) == ["shape"]
    assert bindable_inputs(_if_on_value()) == ["n"]


def test_range_of_one_element_constants() -> None:
    # What the bound AffineGrid function hands Range: one-element 1-D constants (the spec says
    # scalars; the reference reads their element). The range is longer than constant folding's
    # size limit, so the lowering's constant path computes the length.
    def const(name: str, v: float) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.FLOAT, [1], [v]))

    nodes = [
        const("start", 0.5),
        const("limit", 70000.0),
        const("delta", 0.75),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Mul", ["r", "x"], ["m"]),
        helper.make_node("ReduceMax", ["m"], ["y"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "range_1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    _check(model, [{"x": np.array([2.0], dtype=np.float32)}])


def test_bound_inputs_are_checked_like_any_input() -> None:
    # A value of another dtype or shape must not become a constant of the declared type unnoticed.
    compiled = onnxc.compile(_squeeze_of_expand(), "cpu", cache_dir=False)
    x = np.ones(3, dtype=np.float32)
    with pytest.raises(onnxc.compiler.InputError, match="'shape' must have dtype int64"):
        compiled(x=x, shape=np.array([2, 3], dtype=np.int32))
    with pytest.raises(onnxc.compiler.InputError, match="'shape' dim 0 must be 2"):
        compiled(x=x, shape=np.array([1, 2, 3], dtype=np.int64))
