"""`onnx-expand-gradient` (transforms/onnx_gradient.py): Gradient (ai.onnx.preview.training) as the
ONNX ops of its reverse-mode derivative.

The expected gradients are central finite differences of the same graph without the Gradient node,
evaluated by `onnx.reference` in float64 (independent of onnxc): d sum(y) / d x, the seed of ones
the backend test and onnxruntime's training use. Refusals (an op without a derivative, a `y`
that is not a graph output, broadcasting with dynamic dims) must be `OnnxcError`s naming the node.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.errors import OnnxcError

_OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 1)]


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, list[int | str]], y: str, xs: list[str], inits: dict[str, np.ndarray] | None = None, grad: bool = True) -> onnx.ModelProto:
    """A float64 graph computing `y` from `inputs`, plus (with `grad`) Gradient(xs, y) outputs."""
    outputs = [helper.make_tensor_value_info(y, TensorProto.DOUBLE, None)]
    nodes = list(nodes)
    if grad:
        names = [f"d_{x}" for x in xs]
        nodes.append(helper.make_node("Gradient", xs, names, domain="ai.onnx.preview.training", name="grad", xs=xs, y=y))
        outputs += [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in names]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, s) for n, s in inputs.items()],
        outputs,
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(graph, opset_imports=_OPSETS, ir_version=8)


def _numeric_grads(model: onnx.ModelProto, feeds: dict[str, np.ndarray], xs: list[str], eps: float = 1e-6) -> list[np.ndarray]:
    """Central differences of sum(y) for each x (onnx.reference, float64)."""
    ref = ReferenceEvaluator(model)

    def total(f: dict[str, np.ndarray]) -> float:
        return float(np.sum(ref.run(None, f)[0]))

    grads = []
    for x in xs:
        g = np.zeros_like(feeds[x])
        for i in np.ndindex(g.shape):
            up, down = dict(feeds), dict(feeds)
            up[x] = feeds[x].copy()
            down[x] = feeds[x].copy()
            up[x][i] += eps
            down[x][i] -= eps
            g[i] = (total(up) - total(down)) / (2 * eps)
        grads.append(g)
    return grads


def _check(nodes: list[onnx.NodeProto], inputs: dict[str, list[int | str]], y: str, xs: list[str], feeds: dict[str, np.ndarray], inits: dict[str, np.ndarray] | None = None) -> None:
    plain = _model(nodes, inputs, y, xs, inits, grad=False)
    with_grad = _model(nodes, inputs, y, xs, inits)
    got = onnxc.compile(with_grad, cache_dir=False).run(feeds)
    np.testing.assert_allclose(got[y], ReferenceEvaluator(plain).run(None, feeds)[0], rtol=1e-9)
    for x, want in zip(xs, _numeric_grads(plain, feeds, xs)):
        assert got[f"d_{x}"].shape == feeds[x].shape, x
        np.testing.assert_allclose(got[f"d_{x}"], want, rtol=1e-5, atol=1e-7, err_msg=x)


def test_elementwise_chain_with_broadcast() -> None:
    """Add (broadcast [3] over [2, 3]), Mul, Sub, Div, Neg, Exp, Log, Sqrt, Tanh, Sigmoid, Relu."""
    rng = np.random.default_rng(0)
    feeds = {"a": rng.uniform(0.5, 2.0, (2, 3)), "b": rng.uniform(0.5, 2.0, (3,))}
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Mul", ["s", "a"], ["p"]),
        helper.make_node("Div", ["p", "b"], ["q"]),
        helper.make_node("Sub", ["q", "b"], ["d"]),
        helper.make_node("Neg", ["d"], ["n"]),
        helper.make_node("Tanh", ["n"], ["t"]),
        helper.make_node("Sigmoid", ["t"], ["sg"]),
        helper.make_node("Sqrt", ["p"], ["r"]),
        helper.make_node("Log", ["r"], ["l"]),
        helper.make_node("Exp", ["l"], ["e"]),
        helper.make_node("Relu", ["d"], ["u"]),
        helper.make_node("Add", ["sg", "e"], ["y0"]),
        helper.make_node("Add", ["y0", "u"], ["y"]),
    ]
    _check(nodes, {"a": [2, 3], "b": [3]}, "y", ["a", "b"], feeds)


def test_matmul_transpose_reshape() -> None:
    """A two-layer perceptron with a constant weight: MatMul (batched against 2-D), Transpose,
    Reshape, Relu; gradients for the input and the trainable weight."""
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 3, 4)), "w": rng.standard_normal((4, 5))}
    inits = {"v": rng.standard_normal((5, 3)), "shape": np.array([2, 9], np.int64)}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("MatMul", ["hr", "v"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1]),
        helper.make_node("Reshape", ["ot", "shape"], ["y"]),
    ]
    _check(nodes, {"x": [2, 3, 4], "w": [4, 5]}, "y", ["x", "w"], feeds, inits)


@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_softmax_reductions(trans_a: int, trans_b: int) -> None:
    """Gemm (each transpose combination, alpha, beta, a broadcast C), LeakyRelu, Softmax over the
    last axis, Pow by a constant, Abs, ReduceMean over one axis, ReduceSum without keepdims."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 3) if trans_a else (3, 4))
    w = rng.standard_normal((5, 4) if trans_b else (4, 5))
    feeds = {"a": a, "w": w, "c": rng.standard_normal((5,))}
    inits = {"two": np.array(2.0), "ax0": np.array([0], np.int64)}
    nodes = [
        helper.make_node("Gemm", ["a", "w", "c"], ["h"], alpha=0.5, beta=2.0, transA=trans_a, transB=trans_b),
        helper.make_node("LeakyRelu", ["h"], ["l"], alpha=0.1),
        helper.make_node("Softmax", ["l"], ["p"], axis=-1),
        helper.make_node("Pow", ["h", "two"], ["sq"]),
        helper.make_node("Abs", ["h"], ["ab"]),
        helper.make_node("Add", ["sq", "ab"], ["s0"]),
        helper.make_node("Mul", ["s0", "p"], ["s1"]),
        helper.make_node("ReduceMean", ["s1"], ["m"], axes=[1], keepdims=1),  # an attribute at opset 17
        helper.make_node("ReduceSum", ["m", "ax0"], ["y"], keepdims=0),
    ]
    _check(nodes, {"a": list(a.shape), "w": list(w.shape), "c": [5]}, "y", ["a", "w", "c"], feeds, inits)


def test_independent_x_gets_zeros() -> None:
    feeds = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}
    m = _model([helper.make_node("Mul", ["a", "a"], ["y"])], {"a": [2], "b": [2]}, "y", ["a", "b"])
    got = onnxc.compile(m, cache_dir=False).run(feeds)
    np.testing.assert_array_equal(got["d_a"], 2 * feeds["a"])
    np.testing.assert_array_equal(got["d_b"], np.zeros(2))


def test_op_without_derivative_is_refused_naming_node_and_op() -> None:
    m = _model([helper.make_node("Erf", ["a"], ["y"], name="erf")], {"a": [2, 3]}, "y", ["a"])
    with pytest.raises(OnnxcError, match=r"Gradient node 'grad'.*Erf.*no derivative"):
        onnxc.compile(m, cache_dir=False)


def test_y_not_a_graph_output_is_refused() -> None:
    nodes = [helper.make_node("Mul", ["a", "a"], ["hidden"]), helper.make_node("Neg", ["hidden"], ["y"])]
    m = _model(nodes, {"a": [2]}, "y", ["a"])
    m.graph.node[-1].attribute[-1].s = b"hidden"  # y = an intermediate value
    with pytest.raises(OnnxcError, match=r"Gradient node 'grad': y 'hidden' is not a graph output"):
        onnxc.compile(m, cache_dir=False)


def test_broadcast_with_dynamic_dims_is_refused() -> None:
    """Whether [n] was broadcast over [m, n] is a run-time question when n is symbolic."""
    m = _model([helper.make_node("Add", ["a", "b"], ["y"])], {"a": ["m", "n"], "b": ["k"]}, "y", ["a", "b"])
    with pytest.raises(OnnxcError, match=r"Gradient node 'grad'.*needs static shapes"):
        onnxc.compile(m, cache_dir=False)
