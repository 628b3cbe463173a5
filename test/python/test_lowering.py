"""Numerics of the ONNX -> linalg lowering (`convert-onnx-to-linalg`), end to end on the CPU.

Each case builds a small ONNX model with onnx.helper, imports it, lowers it with the pass, JITs
it with the CPU target and compares with `onnx.reference.ReferenceEvaluator` (rtol 1e-3, as the
ONNX backend tests do); where the reference is wrong or missing (old-opset Softmax, Loop with
outer-scope values) the expected values come from numpy. Unsigned tensors cross the JIT
boundary as their signed views (the lowered signature is signless).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

from onnxc.errors import DiagnosticsError
from onnxc.importers import import_model
from onnxc.targets.cpu import pipeline as cpu_pipeline
from onnxc.targets.cpu.jit import compile_module
from onnxc.transforms.convert_onnx_to_linalg import ConvertOnnxToLinalgPass

RNG = np.random.default_rng(0)
F, I64, I32, U8, B, F16 = TP.FLOAT, TP.INT64, TP.INT32, TP.UINT8, TP.BOOL, TP.FLOAT16
NP_OF = {TP.FLOAT: np.float32, TP.INT64: np.int64, TP.INT32: np.int32, TP.UINT8: np.uint8, TP.BOOL: np.bool_, TP.FLOAT16: np.float16, TP.DOUBLE: np.float64, TP.INT8: np.int8, TP.UINT16: np.uint16}


def _model(op: str, inputs: list[tuple[str, np.ndarray]], n_out: int = 1, inits: dict[str, np.ndarray] | None = None, opset: int = 21, node_inputs: list[str] | None = None, out_types: list[int] | None = None, dims: dict[str, list[Any]] | None = None, **attrs: Any) -> onnx.ModelProto:
    inits = inits or {}
    names = node_inputs if node_inputs is not None else [n for n, _ in inputs] + list(inits)
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    dims = dims or {}
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), dims.get(n, list(a.shape))) for n, a in inputs]
    ovis = [helper.make_tensor_value_info(o, (out_types or [0] * n_out)[i], None) for i, o in enumerate(outs)]
    g = helper.make_graph([node], "g", vis, ovis, initializer=[nh.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return m


BYTE_CODED = ("float8", "float4", "int4", "uint4", "int2", "uint2")


def _byte_coded(dt: np.dtype) -> bool:
    """float8/float4/int4/int2 (ml_dtypes): lowered as the bytes that store them."""
    return str(dt).startswith(BYTE_CODED)


def _signless(a: np.ndarray) -> np.ndarray:
    if _byte_coded(a.dtype):
        return a.view(np.int8)
    return a.view(a.dtype.str.replace("u", "i")) if a.dtype.kind == "u" else a


def _compile(m: onnx.ModelProto) -> Any:
    mod = import_model(m)
    with mod.context:
        ConvertOnnxToLinalgPass().run(mod.operation)
        names: list[str] = []

        def visit(op: Any) -> Any:
            names.append(op.name)
            from mlir import ir as mir

            return mir.WalkResult.ADVANCE

        mod.operation.walk(visit)
        left = [n for n in names if n.split(".")[0] in ("onnx", "onnx_ml", "onnx_training", "onnx_preview") or n == "builtin.unrealized_conversion_cast"]
        assert not left, left
        assert mod.operation.verify()
        return compile_module(mod)


def _run(m: onnx.ModelProto, feeds: list[np.ndarray]) -> list[np.ndarray]:
    f = _compile(m)
    return f(*[_signless(x) for x in feeds])


def _with_output_types(m: onnx.ModelProto, results: list[np.ndarray]) -> onnx.ModelProto:
    """The model with untyped outputs typed from the reference's results (rank unknown)."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    for out, r in zip(m2.graph.output, results):
        if out.type.tensor_type.elem_type == 0:
            out.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.asarray(r).dtype)
    return m2


def check(m: onnx.ModelProto, feeds: list[np.ndarray], expected: list[np.ndarray] | None = None, rtol: float = 1e-3, atol: float = 1e-6) -> None:
    if expected is None:
        names = [i.name for i in m.graph.input]
        expected = ReferenceEvaluator(m).run(None, dict(zip(names, feeds)))
    got = _run(_with_output_types(m, expected), feeds)
    assert len(got) >= len(expected)
    for g, r in zip(got, expected):
        r = np.asarray(r)
        g = g.view(r.dtype) if r.dtype.kind == "u" or _byte_coded(r.dtype) else g
        assert g.shape == r.shape, (g.shape, r.shape)
        if _byte_coded(r.dtype):
            np.testing.assert_array_equal(g.astype(np.float32), r.astype(np.float32))
        elif r.dtype == np.bool_ or r.dtype.kind in "iu":
            np.testing.assert_array_equal(g, r)
        else:
            np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=rtol, atol=atol)


def rnd(*shape: int, dtype: Any = np.float32, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(int(lo), int(hi), size=shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


# --- elementwise --------------------------------------------------------------------------------

UNARY_FLOAT = {
    "Abs": {}, "Neg": {}, "Exp": {}, "Log": {"lo": 0.1}, "Sqrt": {"lo": 0.0}, "Tanh": {}, "Sin": {}, "Cos": {}, "Tan": {"lo": -1.0, "hi": 1.0},
    "Asin": {"lo": -0.99, "hi": 0.99}, "Acos": {"lo": -0.99, "hi": 0.99}, "Atan": {}, "Sinh": {}, "Cosh": {}, "Asinh": {},
    "Acosh": {"lo": 1.01, "hi": 4.0}, "Atanh": {"lo": -0.9, "hi": 0.9}, "Erf": {}, "Floor": {}, "Ceil": {}, "Round": {}, "Sign": {},
    "Reciprocal": {"lo": 0.5}, "Relu": {}, "LeakyRelu": {"attrs": {"alpha": 0.2}}, "Elu": {}, "Selu": {}, "Celu": {"attrs": {"alpha": 2.0}},
    "Sigmoid": {}, "HardSigmoid": {}, "HardSwish": {"lo": -5.0, "hi": 5.0}, "Softplus": {}, "Softsign": {}, "Mish": {}, "Gelu": {},
    "ThresholdedRelu": {"attrs": {"alpha": 0.5}}, "Shrink": {"attrs": {"bias": 0.3, "lambd": 0.6}}, "IsNaN": {}, "IsInf": {},
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(UNARY_FLOAT))
def test_unary_float(op: str) -> None:
    spec = UNARY_FLOAT[op]
    x = rnd(2, 5, lo=spec.get("lo", -2.0), hi=spec.get("hi", 2.0))
    if op == "Round":
        x = np.array([[0.5, 1.5, 2.5, -0.5, -1.5], [0.4, 0.6, -2.5, 3.7, -3.2]], np.float32)
    if op in ("IsNaN", "IsInf"):
        x = np.array([[np.nan, np.inf, -np.inf, 0.0, 1.0]], np.float32)
    check(_model(op, [("x", x)], **spec.get("attrs", {})), [x])


def test_gelu_tanh_and_f16_math() -> None:
    x = rnd(3, 4)
    check(_model("Gelu", [("x", x)], approximate="tanh"), [x])
    h = rnd(3, 4, dtype=np.float16)
    check(_model("Exp", [("x", h)]), [h], rtol=2e-3)
    check(_model("Sigmoid", [("x", h)]), [h], rtol=2e-3)


BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("op", BINARY)
def test_binary_float_broadcast(op: str) -> None:
    a, b = rnd(2, 3, 4, lo=0.5), rnd(3, 1, lo=0.5)
    check(_model(op, [("a", a), ("b", b)]), [a, b])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Less", "Greater", "Equal", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Pow"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_binary_int(op: str, dtype: Any) -> None:
    hi = 4 if op == "Pow" else 120
    lo = 0 if np.dtype(dtype).kind == "u" or op == "Pow" else -100
    a = rnd(3, 4, dtype=dtype, lo=lo, hi=hi)
    b = rnd(4, dtype=dtype, lo=1 if op in ("Div", "Mod", "Pow") else lo, hi=hi)
    if op in ("Div", "Mod") and np.dtype(dtype).kind == "i":
        b = np.where(RNG.integers(0, 2, size=b.shape) == 1, -b, b).astype(dtype)  # negative divisors too
        b[b == 0] = 3
    if op == "Pow" and np.dtype(dtype) == np.uint8:
        # No Pow schema allows uint8 (onnxruntime's leniency does): refused at import, naming the
        # node and the constraint, rather than lowered from types the spec rules out.
        from onnxc.errors import OnnxcError

        with pytest.raises(OnnxcError, match="not allowed for T"):
            import_model(_model(op, [("a", a), ("b", b)], out_types=[TP.UINT8]))
        return
    check(_model(op, [("a", a), ("b", b)]), [a, b])


def test_mod_float_and_fmod() -> None:
    a, b = rnd(3, 4, lo=-5, hi=5), rnd(3, 4, lo=0.5, hi=2) * np.where(rnd(3, 4) > 0, 1, -1).astype(np.float32)
    check(_model("Mod", [("a", a), ("b", b)], fmod=1), [a, b])
    c = rnd(3, 4, dtype=np.int32, lo=-20, hi=20)
    d = np.array([3, -3, 5, -7], np.int32)
    check(_model("Mod", [("a", c), ("b", d)], fmod=1), [c, d])


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical(op: str) -> None:
    a, b = rnd(2, 3, dtype=np.bool_), rnd(3, dtype=np.bool_)
    check(_model(op, [("a", a), ("b", b)]), [a, b])


def test_not_bitshift_bitwise_not() -> None:
    a = rnd(2, 3, dtype=np.bool_)
    check(_model("Not", [("a", a)]), [a])
    x = np.array([1, 16, 255, 7], np.uint8)
    s = np.array([1, 2, 3, 8], np.uint8)
    check(_model("BitShift", [("x", x), ("s", s)], direction="RIGHT"), [x, s])
    check(_model("BitShift", [("x", x), ("s", s)], direction="LEFT"), [x, s])
    check(_model("BitwiseNot", [("x", x)]), [x])


def test_unsigned_compare_and_max() -> None:
    a = np.array([200, 3, 128, 0], np.uint8)
    b = np.array([7, 250, 127, 1], np.uint8)
    check(_model("Greater", [("a", a), ("b", b)]), [a, b])
    check(_model("Max", [("a", a), ("b", b)]), [a, b])
    check(_model("Div", [("a", a), ("b", b)]), [a, b])


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic(op: str) -> None:
    a, b, c = rnd(2, 3), rnd(3), rnd(2, 1)
    check(_model(op, [("a", a), ("b", b), ("c", c)]), [a, b, c])


def test_where_clip_prelu() -> None:
    c, x, y = rnd(2, 3, dtype=np.bool_), rnd(2, 3), rnd(3)
    check(_model("Where", [("c", c), ("x", x), ("y", y)]), [c, x, y])
    check(_model("Clip", [("x", x)], inits={"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}), [x])
    check(_model("Clip", [("x", x)], inits={"hi": np.array(0.7, np.float32)}, node_inputs=["x", "", "hi"]), [x])
    check(_model("Clip", [("x", x)], opset=6, min=-0.1, max=0.2), [x])
    xi = rnd(2, 3, dtype=np.int32, lo=-10, hi=10)
    check(_model("Clip", [("x", xi)], inits={"lo": np.array(-3, np.int32), "hi": np.array(4, np.int32)}), [xi])
    s = rnd(3)
    check(_model("PRelu", [("x", x), ("s", s)]), [x, s])


CASTS = [
    (np.float32, TP.INT32), (np.float32, TP.INT64), (np.int32, TP.FLOAT), (np.uint8, TP.FLOAT), (np.float32, TP.UINT8),
    (np.float32, TP.FLOAT16), (np.float16, TP.FLOAT), (np.int64, TP.BOOL), (np.float32, TP.BOOL), (np.bool_, TP.FLOAT),
    (np.int8, TP.INT64), (np.uint8, TP.INT32), (np.int64, TP.INT8), (np.float64, TP.FLOAT), (np.bool_, TP.INT32),
]  # fmt: skip


@pytest.mark.parametrize("src,dst", CASTS, ids=lambda v: str(v))
def test_cast(src: Any, dst: int) -> None:
    lo, hi = (0, 200) if np.dtype(src).kind == "u" or dst == TP.UINT8 else (-100, 100)
    x = rnd(3, 4, dtype=src, lo=lo, hi=hi)
    if np.dtype(src).kind == "f":
        x = np.trunc(x) if dst != TP.BOOL else x
        x[0, 0] = 0
    check(_model("Cast", [("x", x)], to=dst, out_types=[dst]), [x])


def test_castlike_identity_dropout() -> None:
    x, like = rnd(2, 3), np.zeros(1, np.int32)
    check(_model("CastLike", [("x", np.trunc(x * 10)), ("l", like)]), [np.trunc(x * 10), like])
    check(_model("Identity", [("x", x)]), [x])
    check(_model("Dropout", [("x", x)], n_out=2, out_types=[F, B]), [x])


# --- contractions -------------------------------------------------------------------------------

MATMULS = [((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((3,), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)), ((4, 2, 3), (4, 3, 5))]


@pytest.mark.parametrize("sa,sb", MATMULS, ids=str)
def test_matmul(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = rnd(*sa), rnd(*sb)
    check(_model("MatMul", [("a", a), ("b", b)]), [a, b])


def test_matmul_int_f16_dynamic() -> None:
    a, b = rnd(3, 4, dtype=np.int32, lo=-5, hi=5), rnd(4, 2, dtype=np.int32, lo=-5, hi=5)
    check(_model("MatMul", [("a", a), ("b", b)]), [a, b])
    h, k = rnd(3, 8, dtype=np.float16), rnd(8, 2, dtype=np.float16)
    check(_model("MatMul", [("a", h), ("b", k)]), [h, k], rtol=5e-3, atol=5e-3)
    x, y = rnd(2, 5, 3), rnd(2, 3, 4)
    check(_model("MatMul", [("a", x), ("b", y)], dims={"a": ["B", "S", 3], "b": ["B", 3, 4]}), [x, y])


@pytest.mark.parametrize("ta,tb,alpha,beta,cshape", [(0, 0, 1.0, 1.0, (4,)), (1, 1, 0.5, 2.0, (3, 4)), (0, 1, 1.0, 1.0, None), (1, 0, 2.0, 0.0, (1, 4))])
def test_gemm(ta: int, tb: int, alpha: float, beta: float, cshape: tuple[int, ...] | None) -> None:
    a = rnd(*((2, 3) if ta else (3, 2)))
    b = rnd(*((4, 2) if tb else (2, 4)))
    ins = [("a", a), ("b", b)] + ([("c", rnd(*cshape))] if cshape else [])
    check(_model("Gemm", ins, transA=ta, transB=tb, alpha=alpha, beta=beta), [v for _, v in ins])


# --- reductions ---------------------------------------------------------------------------------

REDUCES = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


@pytest.mark.parametrize("op", REDUCES)
def test_reduce(op: str) -> None:
    x = rnd(2, 3, 4, lo=0.1, hi=2.0)
    check(_model(op, [("x", x)], inits={"axes": np.array([0, -1], np.int64)}), [x])
    check(_model(op, [("x", x)], keepdims=0), [x])


def test_reduce_variants() -> None:
    x = rnd(2, 3, 4, lo=0.1)
    check(_model("ReduceSum", [("x", x)], inits={"axes": np.array([], np.int64)}, noop_with_empty_axes=1), [x])
    check(_model("ReduceSumSquare", [("x", x)], inits={"axes": np.array([], np.int64)}, noop_with_empty_axes=1), [x])
    check(_model("ReduceMean", [("x", x)], opset=13, axes=[1], keepdims=0), [x])
    check(_model("ReduceMax", [("x", x)], inits={"axes": np.array([1], np.int64)}, dims={"x": ["N", 3, 4]}), [x])
    xi = rnd(2, 3, dtype=np.int32, lo=-9, hi=9)
    check(_model("ReduceSum", [("x", xi)], inits={"axes": np.array([1], np.int64)}), [xi])
    check(_model("ReduceMin", [("x", xi)], keepdims=0), [xi])


def test_argmax_argmin() -> None:
    x = rnd(3, 4, 5)
    x[0, 1, :] = 1.0  # ties: first (or last) index
    check(_model("ArgMax", [("x", x)], axis=1, out_types=[I64]), [x])
    check(_model("ArgMin", [("x", x)], axis=-1, keepdims=0, out_types=[I64]), [x])
    check(_model("ArgMax", [("x", x)], axis=2, select_last_index=1, out_types=[I64]), [x])
    xi = rnd(3, 4, dtype=np.uint8, lo=0, hi=255)
    check(_model("ArgMax", [("x", xi)], axis=0, out_types=[I64]), [xi])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family(op: str) -> None:
    x = rnd(2, 3, 4)
    check(_model(op, [("x", x)], axis=1), [x])
    check(_model(op, [("x", x)]), [x])


def test_softmax_old_opset_flattens() -> None:
    # Before opset 13 Softmax normalizes over every dim from `axis` on (the reference implements
    # only the new semantics, so numpy gives the expected values).
    x = rnd(2, 3, 4)
    flat = x.reshape(2, 12)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    check(_model("Softmax", [("x", x)], opset=11), [x], [(e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4)])


# --- convolution, pooling, normalization --------------------------------------------------------


@pytest.mark.parametrize(
    "xs,ws,attrs",
    [
        ((2, 4, 7, 7), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
        ((1, 4, 6, 6), (6, 2, 3, 3), {"group": 2, "dilations": [2, 1], "auto_pad": "SAME_UPPER"}),
        ((1, 4, 5, 5), (4, 1, 3, 3), {"group": 4, "pads": [0, 1, 2, 1]}),
        ((2, 3, 9), (5, 3, 2), {"pads": [1, 0], "strides": [2]}),
        ((1, 2, 4, 5, 5), (3, 2, 2, 3, 3), {"auto_pad": "SAME_LOWER"}),
    ],
    ids=["2d", "2d-group", "depthwise", "1d", "3d"],
)
def test_conv(xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any]) -> None:
    x, w, b = rnd(*xs), rnd(*ws), rnd(ws[0])
    check(_model("Conv", [("x", x), ("w", w), ("b", b)], **attrs), [x, w, b])


def test_conv_dynamic_batch() -> None:
    x, w = rnd(3, 2, 5, 5), rnd(4, 2, 3, 3)
    check(_model("Conv", [("x", x), ("w", w)], dims={"x": ["N", 2, 5, 5]}), [x, w])


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2], "auto_pad": "SAME_UPPER"}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        ("LpPool", {"kernel_shape": [2, 2], "p": 2}),
    ],
    ids=str,
)
def test_pool(op: str, attrs: dict[str, Any]) -> None:
    x = rnd(2, 3, 7, 7)
    check(_model(op, [("x", x)], **attrs), [x])


def test_pool_1d_and_global() -> None:
    x = rnd(2, 3, 9)
    check(_model("MaxPool", [("x", x)], kernel_shape=[3], strides=[2]), [x])
    y = rnd(2, 3, 5, 4)
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        check(_model(op, [("x", y)], dims={"x": ["N", 3, 5, 4]}), [y])


def test_normalizations() -> None:
    x = rnd(2, 4, 5, 5)
    s, b, m, v = rnd(4), rnd(4), rnd(4), rnd(4, lo=0.5)
    check(_model("BatchNormalization", [("x", x), ("s", s), ("b", b), ("m", m), ("v", v)], epsilon=1e-3), [x, s, b, m, v])
    check(_model("InstanceNormalization", [("x", x), ("s", s), ("b", b)]), [x, s, b])
    check(_model("GroupNormalization", [("x", x), ("s", s), ("b", b)], num_groups=2), [x, s, b])
    check(_model("MeanVarianceNormalization", [("x", x)]), [x])
    check(_model("LpNormalization", [("x", x)], axis=1), [x])
    y, g, bb = rnd(3, 7, 8), rnd(8), rnd(8)
    check(_model("LayerNormalization", [("x", y), ("g", g), ("b", bb)], dims={"x": ["B", "S", 8]}), [y, g, bb])
    g2 = rnd(7, 8)
    check(_model("LayerNormalization", [("x", y), ("g", g2)], axis=1, n_out=3, out_types=[F, F, F]), [y, g2])


# --- shapes and data movement -------------------------------------------------------------------


def test_reshape_flatten_transpose() -> None:
    x = rnd(2, 3, 4)
    check(_model("Reshape", [("x", x)], inits={"s": np.array([0, -1], np.int64)}), [x])
    check(_model("Reshape", [("x", x), ("s", np.array([4, -1, 3], np.int64))]), [x, np.array([4, -1, 3], np.int64)])
    check(_model("Reshape", [("x", x)], inits={"s": np.array([-1], np.int64)}, dims={"x": ["N", 3, 4]}), [x])
    check(_model("Flatten", [("x", x)], axis=2, dims={"x": ["N", 3, 4]}), [x])
    check(_model("Flatten", [("x", x)], axis=0), [x])
    check(_model("Transpose", [("x", x)], perm=[2, 0, 1]), [x])
    check(_model("Transpose", [("x", x)]), [x])


def test_squeeze_unsqueeze_concat_split() -> None:
    x = rnd(2, 1, 4, 1)
    check(_model("Squeeze", [("x", x)], inits={"a": np.array([1], np.int64)}), [x])
    check(_model("Squeeze", [("x", x)]), [x])
    check(_model("Squeeze", [("x", x)], opset=11, axes=[3]), [x])
    y = rnd(2, 3, 4)
    check(_model("Unsqueeze", [("x", y)], inits={"a": np.array([0, -1], np.int64)}), [y])
    z = rnd(2, 2, 4)
    check(_model("Concat", [("x", y), ("z", z)], axis=1, dims={"x": ["N", 3, 4], "z": ["N", 2, 4]}), [y, z])
    w = rnd(2, 6, 4)
    check(_model("Split", [("x", w)], n_out=2, inits={"s": np.array([2, 4], np.int64)}, axis=1), [w])
    check(_model("Split", [("x", w)], n_out=3, opset=18, axis=1, num_outputs=3), [w])
    u = rnd(7, 2)
    check(_model("Split", [("x", u)], n_out=3, opset=18, num_outputs=3), [u])


def test_slice() -> None:
    x = rnd(5, 6, 4)
    ints = lambda *v: np.array(v, np.int64)  # noqa: E731
    check(_model("Slice", [("x", x)], inits={"st": ints(1, -4), "en": ints(100, -1), "ax": ints(0, 1), "sp": ints(2, 1)}), [x])
    check(_model("Slice", [("x", x)], inits={"st": ints(-1), "en": ints(-100), "ax": ints(1), "sp": ints(-2)}), [x])
    check(_model("Slice", [("x", x)], inits={"st": ints(1), "en": ints(-1), "ax": ints(0)}, dims={"x": ["N", 6, 4]}), [x])
    check(_model("Slice", [("x", x)], opset=9, starts=[0, 1], ends=[2, 3], axes=[1, 2]), [x])


def test_gather_family() -> None:
    x = rnd(5, 6, 4)
    i = np.array([[0, -1], [3, 2]], np.int64)
    check(_model("Gather", [("x", x), ("i", i)], axis=1), [x, i])
    check(_model("Gather", [("x", x), ("i", np.array(3, np.int64))]), [x, np.array(3, np.int64)])
    y = rnd(3, 4)
    j = np.array([[0, -1], [3, 2], [1, 1]], np.int64)
    check(_model("GatherElements", [("x", y), ("j", j)], axis=1), [y, j])


def test_expand_tile_pad() -> None:
    x = rnd(3, 1)
    check(_model("Expand", [("x", x)], inits={"s": np.array([2, 1, 4], np.int64)}), [x])
    t = rnd(2, 3)
    check(_model("Tile", [("x", t)], inits={"r": np.array([2, 3], np.int64)}), [t])
    p = rnd(3, 4)
    for mode in ("constant", "reflect", "edge", "wrap"):
        check(_model("Pad", [("x", p)], inits={"p": np.array([1, 2, 2, 1], np.int64)}, mode=mode), [p])
    # Negative pads crop (the reference's np.pad refuses them: numpy gives the expected values).
    cropped = np.pad(p[1:, :], ((0, 0), (1, 2)), constant_values=1.5)
    check(_model("Pad", [("x", p)], inits={"p": np.array([-1, 1, 0, 2], np.int64), "v": np.array(1.5, np.float32)}), [p], [cropped])


def test_shape_size_constants_range() -> None:
    x = rnd(2, 3, 4)
    check(_model("Shape", [("x", x)], start=1, dims={"x": ["N", 3, 4]}), [x])
    check(_model("Size", [("x", x)], dims={"x": ["N", 3, 4]}), [x])
    s = np.array([2, 3], np.int64)
    check(_model("ConstantOfShape", [("s", s)], value=nh.from_array(np.array([3.5], np.float32))), [s])
    check(_model("ConstantOfShape", [("s", s)], value=nh.from_array(np.array([7], np.int32))), [s])
    check(_model("Range", [("a", np.array(1.0, np.float32)), ("b", np.array(5.5, np.float32)), ("d", np.array(0.5, np.float32))]), [np.array(1.0, np.float32), np.array(5.5, np.float32), np.array(0.5, np.float32)])
    check(_model("Range", [], inits={"a": np.array(3, np.int64), "b": np.array(-7, np.int64), "d": np.array(-3, np.int64)}), [])
    check(_model("Constant", [], value=nh.from_array(np.array([[1, 200]], np.uint8))), [])
    check(_model("Constant", [], value_ints=[1, 2, 3]), [])


# --- control flow -------------------------------------------------------------------------------


def test_if() -> None:
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    x = rnd(3)
    f = _compile(m)
    np.testing.assert_allclose(f(np.array(True), x)[0], x + x)
    np.testing.assert_allclose(f(np.array(False), x)[0], -x)


@pytest.mark.skipif("allow-return-allocs-from-loops" not in cpu_pipeline.BUFFERIZE_PIPELINE, reason="the CPU bufferization pipeline does not allow loops yielding new tensors yet")
def test_loop() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]), helper.make_node("Less", ["acc_out", "lim"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", B, []), helper.make_tensor_value_info("acc_in", F, [])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("acc_out", F, [])],
    )
    node = helper.make_node("Loop", ["M", "", "a0"], ["y"], body=body)
    ins = [helper.make_tensor_value_info(n, t, []) for n, t in (("M", I64), ("a0", F), ("x", F), ("lim", F))]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", F, [])])
    f = _compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    one = np.array(1.0, np.float32)
    assert f(np.array(4, np.int64), np.array(0.0, np.float32), one, np.array(100.0, np.float32))[0] == 4.0  # trip count
    assert f(np.array(50, np.int64), np.array(0.0, np.float32), one, np.array(6.0, np.float32))[0] == 6.0  # condition


# --- the pre-check ------------------------------------------------------------------------------


def test_precheck_reports_every_unsupported_op() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok_relu"),
        # Ops their lowerings' checks refuse: a non-square Det, an STFT signal without its
        # (length, 1|2) layout. (No-lowering ops were the examples until they gained lowerings.)
        helper.make_node("Det", ["sq"], ["b"], name="det"),
        helper.make_node("Reshape", ["a", "shape"], ["c"], name="dyn_reshape"),
        helper.make_node("STFT", ["sig", "step"], ["d"], name="stft"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, [1, 2, 3]),
            helper.make_tensor_value_info("shape", I64, ["K"]),
            helper.make_tensor_value_info("sq", F, [2, 3]),
            helper.make_tensor_value_info("sig", F, [1, 64]),
        ],
        [helper.make_tensor_value_info(n, F, None) for n in ("b", "c", "d")],
        [onnx.numpy_helper.from_array(np.array(16, np.int64), "step")],
    )
    mod = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    with pytest.raises(DiagnosticsError) as info:
        ConvertOnnxToLinalgPass().run(mod.operation)
    msg = str(info.value)
    assert len(info.value.problems) == 3, msg
    assert "Det" in msg and "'det'" in msg and "opset" in msg
    assert "STFT" in msg and "'stft'" in msg
    assert "dyn_reshape" in msg and "static length" in msg
    # Nothing was lowered: the module still holds the ONNX ops.
    assert "onnx.relu" in str(mod)


# --- index-computing ops, quantization ----------------------------------------------------------


@pytest.mark.parametrize("eq,shapes", [("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]), ("ii->i", [(3, 3)]), ("ij->", [(2, 3)]), ("i,i", [(4,), (4,)]), ("...ij,...jk", [(2, 2, 3), (3, 4)]), ("ij", [(2, 3)])], ids=str)
def test_einsum(eq: str, shapes: list[tuple[int, ...]]) -> None:
    ins = [(f"x{i}", rnd(*s)) for i, s in enumerate(shapes)]
    check(_model("Einsum", ins, equation=eq), [v for _, v in ins])


def test_trilu_eyelike_onehot_cumsum() -> None:
    x = rnd(2, 4, 5)
    check(_model("Trilu", [("x", x)]), [x])
    check(_model("Trilu", [("x", x)], inits={"k": np.array(-1, np.int64)}, upper=0), [x])
    check(_model("EyeLike", [("x", rnd(3, 4))], k=1, dtype=TP.INT32, out_types=[I32]), [rnd(3, 4)])
    idx = np.array([[1, 9], [-1, 0]], np.int64)
    check(_model("OneHot", [("i", idx)], inits={"d": np.array(4, np.int64), "v": np.array([0.5, 2.0], np.float32)}, axis=1), [idx])
    for excl in (0, 1):
        for rev in (0, 1):
            check(_model("CumSum", [("x", x)], inits={"a": np.array(2, np.int64)}, exclusive=excl, reverse=rev), [x])


def test_depth_space_gathernd_reverse_sequence() -> None:
    x = rnd(1, 8, 2, 3)
    check(_model("DepthToSpace", [("x", x)], blocksize=2), [x])
    check(_model("DepthToSpace", [("x", x)], blocksize=2, mode="CRD"), [x])
    y = rnd(1, 2, 4, 6)
    check(_model("SpaceToDepth", [("x", y)], blocksize=2), [y])
    d = rnd(2, 3, 4)
    i = np.array([[[0, 1]], [[1, -1]]], np.int64)
    check(_model("GatherND", [("d", d), ("i", i)]), [d, i])
    j = np.array([[1], [0]], np.int64)
    check(_model("GatherND", [("d", d), ("j", j)], batch_dims=1), [d, j])
    s = rnd(4, 3)
    lens = np.array([4, 1, 2], np.int64)
    check(_model("ReverseSequence", [("s", s), ("l", lens)], time_axis=0, batch_axis=1), [s, lens])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
def test_scatter(reduction: str) -> None:
    d = rnd(3, 4)
    i = np.array([[1, 0, -1], [2, 2, 0]], np.int64)
    u = rnd(2, 3)
    check(_model("ScatterElements", [("d", d), ("i", i), ("u", u)], axis=1, reduction=reduction), [d, i, u])
    e = rnd(4, 2, 3)
    k = np.array([[1], [3], [1]], np.int64)
    v = rnd(3, 2, 3)
    check(_model("ScatterND", [("e", e), ("k", k), ("v", v)], reduction=reduction), [e, k, v])


def test_quantize_dequantize() -> None:
    x = rnd(2, 3, 4, lo=-3, hi=3)
    s, z = np.array(0.02, np.float32), np.array(3, np.uint8)
    check(_model("QuantizeLinear", [("x", x)], inits={"s": s, "z": z}), [x])
    sa, za = np.array([0.01, 0.05, 0.1], np.float32), np.array([-2, 0, 5], np.int8)
    check(_model("QuantizeLinear", [("x", x)], inits={"s": sa, "z": za}, axis=1), [x])
    q = rnd(2, 3, 4, dtype=np.uint8, lo=0, hi=255)
    check(_model("DequantizeLinear", [("q", q)], inits={"s": s, "z": z}), [q])
    qi = rnd(2, 3, 4, dtype=np.int8, lo=-128, hi=127)
    check(_model("DequantizeLinear", [("q", qi)], inits={"s": sa, "z": za}, axis=1), [qi])


def test_rms_norm_lrn_swish() -> None:
    x, s = rnd(2, 3, 4), rnd(4)
    check(_model("RMSNormalization", [("x", x), ("s", s)], opset=23), [x, s])
    s2 = rnd(3, 4)
    check(_model("RMSNormalization", [("x", x), ("s", s2)], axis=1, epsilon=1e-3, opset=23), [x, s2])
    y = rnd(2, 5, 3, 3)
    # The reference's LRN loops over the batch dim instead of the channels: numpy expectations.
    for size, alpha, beta, bias in ((3, 0.01, 0.75, 1.0), (4, 1e-4, 0.5, 2.0)):
        sq = np.zeros_like(y)
        for c in range(y.shape[1]):
            lo, hi = max(0, c - (size - 1) // 2), min(y.shape[1], c + -(-(size - 1) // 2) + 1)
            sq[:, c] = (y[:, lo:hi] ** 2).sum(axis=1)
        want = y / (bias + alpha / size * sq) ** beta
        check(_model("LRN", [("x", y)], size=size, alpha=alpha, beta=beta, bias=bias), [y], [want])
    check(_model("Swish", [("x", x)], alpha=0.7, opset=24), [x])


def test_pad_runtime_pads() -> None:
    p = rnd(3, 4)
    pads = np.array([1, 0, 2, 3], np.int64)
    check(_model("Pad", [("x", p), ("p", pads), ("v", np.array(-1.0, np.float32))]), [p, pads, np.array(-1.0, np.float32)])
    check(_model("Pad", [("x", p), ("p", pads)], mode="edge"), [p, pads])
    neg = np.array([-1, 1, 0, -2], np.int64)
    want = np.pad(p[1:, :-2], ((0, 0), (1, 0)))
    check(_model("Pad", [("x", p), ("p", neg)]), [p, neg], [want])


@pytest.mark.parametrize(
    "xs,ws,attrs",
    [
        ((1, 2, 3, 3), (2, 3, 3, 3), {}),
        ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [3, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 1]}),
        ((1, 3, 5), (3, 2, 3), {"dilations": [2]}),
        ((2, 2, 3, 3), (2, 2, 2, 2), {"strides": [2, 2], "output_shape": [6, 6]}),
        ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ],
    ids=["basic", "strided-padded", "1d-dilated", "output-shape", "same-upper"],
)
def test_conv_transpose(xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any]) -> None:
    x, w, b = rnd(*xs), rnd(*ws), rnd(ws[1] * attrs.get("group", 1))
    check(_model("ConvTranspose", [("x", x), ("w", w), ("b", b)], **attrs), [x, w, b])


def test_conv_transpose_grouped() -> None:
    # The reference's grouped ConvTranspose does not run: a numpy loop gives the expected values.
    x, w = rnd(1, 4, 3, 3), rnd(4, 1, 2, 2)
    want = np.zeros((1, 2, 6, 6), np.float32)
    for g in range(2):
        for c in range(2):
            for i in range(3):
                for j in range(3):
                    want[0, g, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2] += x[0, g * 2 + c, i, j] * w[g * 2 + c, 0]
    check(_model("ConvTranspose", [("x", x), ("w", w)], group=2, strides=[2, 2]), [x, w], [want])


@pytest.mark.parametrize("largest,axis", [(1, -1), (0, 1), (1, 0)])
def test_topk(largest: int, axis: int) -> None:
    x = rnd(3, 5, 4)
    x[0, 1, :] = x[0, 2, :]  # ties along axis 1
    check(_model("TopK", [("x", x)], n_out=2, inits={"k": np.array([2], np.int64)}, out_types=[F, I64], axis=axis, largest=largest), [x])
    xi = rnd(3, 5, dtype=np.int32, lo=-3, hi=3)
    check(_model("TopK", [("x", xi)], n_out=2, inits={"k": np.array([3], np.int64)}, out_types=[I32, I64], largest=largest), [xi])


RESIZES = [
    ("nearest", "half_pixel", "round_prefer_floor", {"scales": [1, 1, 2.0, 1.5]}),
    ("nearest", "asymmetric", "floor", {"scales": [1, 1, 0.6, 0.8]}),
    ("nearest", "align_corners", "round_prefer_ceil", {"sizes": [1, 2, 7, 3]}),
    ("nearest", "asymmetric", "ceil", {"sizes": [1, 2, 8, 8]}),
    ("linear", "half_pixel", None, {"scales": [1, 1, 2.0, 0.5]}),
    ("linear", "align_corners", None, {"sizes": [1, 2, 7, 5]}),
    ("linear", "pytorch_half_pixel", None, {"sizes": [1, 2, 1, 6]}),
    ("linear", "half_pixel_symmetric", None, {"scales": [1, 1, 1.7, 2.3]}),
    ("linear", "tf_crop_and_resize", None, {"sizes": [1, 2, 3, 3], "roi": [0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7]}),
    ("cubic", "half_pixel", None, {"scales": [1, 1, 2.0, 2.0]}),
    ("cubic", "asymmetric", None, {"scales": [1, 1, 0.8, 1.25], "exclude_outside": 1}),
]


@pytest.mark.parametrize("mode,ctm,nearest,params", RESIZES, ids=lambda v: str(v))
def test_resize(mode: str, ctm: str, nearest: str | None, params: dict[str, Any]) -> None:
    x = rnd(1, 2, 4, 5)
    inits: dict[str, np.ndarray] = {"roi": np.array(params.get("roi", []), np.float32)}
    names = ["x", "roi"]
    if "scales" in params:
        inits["scales"] = np.array(params["scales"], np.float32)
        names.append("scales")
    else:
        inits["scales"] = np.array([], np.float32)
        inits["sizes"] = np.array(params["sizes"], np.int64)
        names += ["scales", "sizes"]
    attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": ctm}
    if nearest:
        attrs["nearest_mode"] = nearest
    if "exclude_outside" in params:
        attrs["exclude_outside"] = params["exclude_outside"]
    if ctm == "tf_crop_and_resize":
        attrs["extrapolation_value"] = -3.0
    check(_model("Resize", [("x", x)], inits=inits, node_inputs=names, **attrs), [x])


def test_resize_axes_and_aspect_policy() -> None:
    x = rnd(1, 2, 4, 5)
    check(_model("Resize", [("x", x)], inits={"sizes": np.array([6, 6], np.int64)}, node_inputs=["x", "", "", "sizes"], axes=[2, 3], keep_aspect_ratio_policy="not_larger", mode="linear"), [x])
    check(_model("Resize", [("x", x)], inits={"scales": np.array([2.0], np.float32)}, node_inputs=["x", "", "scales"], axes=[3]), [x])
    xi = rnd(1, 1, 3, 3, dtype=np.uint8, lo=0, hi=255)
    check(_model("Resize", [("x", xi)], inits={"scales": np.array([1, 1, 2, 2], np.float32)}, node_inputs=["x", "", "scales"]), [xi])


def test_bool_reductions_and_compare() -> None:
    b = np.array([[True, False, False], [False, False, False]])
    check(_model("ReduceMax", [("b", b)], inits={"a": np.array([1], np.int64)}, keepdims=0), [b])
    check(_model("ReduceMin", [("b", b)], inits={"a": np.array([1], np.int64)}, keepdims=0), [b])
    c = np.array([[False, True, True], [True, False, True]])
    check(_model("Equal", [("b", b), ("c", c)]), [b, c])


def test_integer_and_qlinear_ops() -> None:
    a = rnd(3, 4, dtype=np.uint8, lo=0, hi=255)
    b = rnd(4, 2, dtype=np.uint8, lo=0, hi=255)
    check(_model("MatMulInteger", [("a", a), ("b", b)], inits={"az": np.array(12, np.uint8), "bz": np.array([3, 250], np.uint8)}, out_types=[I32]), [a, b])
    ai = rnd(2, 3, 4, dtype=np.int8, lo=-128, hi=127)
    bi = rnd(4, 5, dtype=np.int8, lo=-128, hi=127)
    check(_model("MatMulInteger", [("a", ai), ("b", bi)], out_types=[I32]), [ai, bi])
    sc = lambda v: np.array(v, np.float32)  # noqa: E731
    check(_model("QLinearMatMul", [("a", a), ("as", sc(0.02)), ("az", np.array(7, np.uint8)), ("b", b), ("bs", sc(0.03)), ("bz", np.array(100, np.uint8)), ("ys", sc(0.5)), ("yz", np.array(9, np.uint8))]), [a, sc(0.02), np.array(7, np.uint8), b, sc(0.03), np.array(100, np.uint8), sc(0.5), np.array(9, np.uint8)])
    x = rnd(1, 2, 5, 5, dtype=np.uint8, lo=0, hi=255)
    w = rnd(3, 2, 3, 3, dtype=np.uint8, lo=0, hi=255)
    check(_model("ConvInteger", [("x", x), ("w", w)], inits={"xz": np.array(5, np.uint8)}, pads=[1, 1, 1, 1], out_types=[I32]), [x, w])
    wi = rnd(3, 2, 3, 3, dtype=np.int8, lo=-100, hi=100)
    check(
        _model("QLinearConv", [("x", x)], inits={"xs": sc(0.01), "xz": np.array(3, np.uint8), "w": wi, "ws": sc([0.02, 0.01, 0.03]), "wz": np.array([0, 0, 0], np.int8), "ys": sc(0.2), "yz": np.array(4, np.uint8), "bias": np.array([10, -20, 30], np.int32)}),
        [x],
    )
    f = rnd(3, 4, lo=-2, hi=5)
    check(_model("DynamicQuantizeLinear", [("x", f)], n_out=3, out_types=[U8, F, U8]), [f])


LOOPS_BUFFERIZE = pytest.mark.skipif(
    "allow-return-allocs-from-loops" not in cpu_pipeline.BUFFERIZE_PIPELINE,
    reason="the CPU bufferization pipeline does not allow loops yielding new tensors yet",
)


@LOOPS_BUFFERIZE
@pytest.mark.parametrize(
    "kind,attrs,with_bias,with_h0",
    [
        ("RNN", {}, False, False),
        ("RNN", {"direction": "bidirectional", "activations": ["Tanh", "Tanh"]}, True, True),
        ("GRU", {}, True, False),
        ("GRU", {"linear_before_reset": 1, "direction": "reverse"}, True, True),
        ("LSTM", {}, True, False),
        ("LSTM", {"direction": "bidirectional"}, True, True),
        ("LSTM", {"layout": 1}, False, False),
    ],
    ids=str,
)
def test_recurrent(kind: str, attrs: dict[str, Any], with_bias: bool, with_h0: bool) -> None:
    seq, batch, inp, hid = 4, 2, 3, 5
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    nd = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    x = rnd(*((batch, seq, inp) if layout else (seq, batch, inp)), lo=-1, hi=1)
    ins = [("x", x), ("w", rnd(nd, g * hid, inp, lo=-0.5, hi=0.5)), ("r", rnd(nd, g * hid, hid, lo=-0.5, hi=0.5))]
    names = ["x", "w", "r"]
    if with_bias:
        ins.append(("b", rnd(nd, 2 * g * hid, lo=-0.5, hi=0.5)))
        names.append("b")
    if with_h0:
        names += ["", "h0"] if with_bias else ["", "", "h0"]
        ins.append(("h0", rnd(nd, batch, hid)))
    n_out = 3 if kind == "LSTM" else 2
    check(_model(kind, ins, n_out=n_out, node_inputs=names, hidden_size=hid, **attrs), [v for _, v in ins], rtol=1e-3, atol=1e-5)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


@LOOPS_BUFFERIZE
def test_recurrent_clip_and_sequence_lens() -> None:
    # The reference ignores `clip` and `sequence_lens`: numpy loops give the expected values.
    x, w, r, b = rnd(4, 2, 3), rnd(1, 20, 3), rnd(1, 20, 5), rnd(1, 40)
    h, c = np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32)
    ys = []
    for t in range(4):
        gates = np.clip(x[t] @ w[0].T + h @ r[0].T + b[0, :20] + b[0, 20:], -0.5, 0.5)
        i, o, f, cc = (gates[:, k * 5 : (k + 1) * 5] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(cc)
        h = _sigmoid(o) * np.tanh(c)
        ys.append(h)
    want = [np.stack(ys)[:, None], h[None], c[None]]
    check(_model("LSTM", [("x", x), ("w", w), ("r", r), ("b", b)], n_out=3, hidden_size=5, clip=0.5), [x, w, r, b], want, atol=1e-5)
    x, w, r = rnd(4, 3, 2), rnd(1, 5, 2), rnd(1, 5, 5)
    lens = np.array([4, 2, 1], np.int32)
    h = np.zeros((3, 5), np.float32)
    y = np.zeros((4, 1, 3, 5), np.float32)
    for t in range(4):
        hn = np.tanh(x[t] @ w[0].T + h @ r[0].T)
        live = (t < lens)[:, None]
        y[t, 0] = np.where(live, hn, 0)
        h = np.where(live, hn, h)
    check(_model("RNN", [("x", x), ("w", w), ("r", r), ("l", lens)], n_out=2, node_inputs=["x", "w", "r", "", "l"], hidden_size=5), [x, w, r, lens], [y, h[None]], atol=1e-5)


def test_edge_cases_from_the_backend_suite() -> None:
    # BitShift is defined on unsigned types only: the bit patterns of -16 and -1, shifts past the width.
    a = np.array([-16, 7, -1], np.int32).view(np.uint32)
    s = np.array([2, 40, -1], np.int32).view(np.uint32)
    check(_model("BitShift", [("a", a), ("s", s)], direction="RIGHT", opset=26), [a, s])
    check(_model("BitShift", [("a", a), ("s", s)], direction="LEFT", opset=26), [a, s])
    x = np.array([[0.0, 3.0], [0.0, 4.0]], np.float32)
    check(_model("LpNormalization", [("x", x)], axis=0), [x])
    y = rnd(8, 3)
    check(_model("Slice", [("x", y)], inits={"st": np.array([9], np.int64), "en": np.array([12], np.int64)}), [y])
    z = rnd(3, 4)
    for ax in (0, 1, -1):
        check(_model("CumSum", [("z", z), ("a", np.array(ax, np.int32))], exclusive=1), [z, np.array(ax, np.int32)])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceL2", "ReduceLogSumExp"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_runtime_axes(op: str, keepdims: int) -> None:
    x = rnd(2, 3, 4, lo=0.1)
    f = _compile(_with_output_types(_model(op, [("x", x), ("a", np.array([0, 2], np.int64))], keepdims=keepdims), [x]))
    ref = ReferenceEvaluator(_model(op, [("x", x), ("a", np.array([0, 2], np.int64))], keepdims=keepdims))
    for axes in ([0, 2], [-1, 1], [1, 0]):
        a = np.array(axes, np.int64)
        want = ref.run(None, {"x": x, "a": a})[0]
        got = f(x, a)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_unranked_intermediate_values_get_ranks_when_lowered() -> None:
    # An op whose declared result is unranked (shape inference gave up) feeds another op: the
    # lowering knows the rank from the lowered value, and the consumer's check runs then.
    from onnxc.dialect import onnx_context, onnx_op
    from mlir import ir as mir
    from mlir.dialects import func

    ctx = onnx_context()
    with ctx, mir.Location.unknown():
        module = mir.Module.create()
        t = mir.RankedTensorType.get([2, 3], mir.F32Type.get())
        unranked = mir.UnrankedTensorType.get(mir.F32Type.get())
        with mir.InsertionPoint(module.body):
            f = func.FuncOp("main", mir.FunctionType.get([t], [unranked]))
            block = f.add_entry_block()
            with mir.InsertionPoint(block):
                a = onnx_op("Exp", [block.arguments[0]], [unranked]).result
                axes = onnx_op("Constant", [], [mir.RankedTensorType.get([1], mir.IntegerType.get_signless(64))], {"value": np.array([1], np.int64)}).result
                b = onnx_op("ReduceSum", [a, axes], [unranked]).result
                func.ReturnOp([b])
        ConvertOnnxToLinalgPass().run(module.operation)
        assert "tensor<2x1xf32>" in str(module)
        x = rnd(2, 3)
        got = compile_module(module)(x)[0]
    np.testing.assert_allclose(got, np.exp(x).sum(axis=1, keepdims=True), rtol=1e-5)


def test_cumprod_and_bitcast() -> None:
    z = rnd(3, 4, lo=0.5, hi=1.5)
    check(_model("CumProd", [("z", z)], inits={"a": np.array(1, np.int64)}, reverse=1, opset=26), [z])
    check(_model("CumProd", [("z", z), ("a", np.array(0, np.int64))], exclusive=1, opset=26), [z, np.array(0, np.int64)])
    f = rnd(2, 3)
    check(_model("BitCast", [("f", f)], to=TP.INT32, out_types=[I32], opset=26), [f])
    d = rnd(4).astype(np.float64)
    check(_model("BitCast", [("d", d)], to=TP.UINT64, out_types=[TP.UINT64], opset=26), [d])
    b = np.array([True, False, True])
    check(_model("BitCast", [("b", b)], to=TP.UINT8, out_types=[U8], opset=26), [b])


def test_slice_runtime_starts_ends() -> None:
    x = rnd(5, 6, 4)
    m = _model("Slice", [("x", x), ("s", np.array([1, -4], np.int64)), ("e", np.array([4, 100], np.int64))], inits={"ax": np.array([0, 1], np.int64), "st": np.array([2, 1], np.int64)})
    f = _compile(_with_output_types(m, [x]))
    ref = ReferenceEvaluator(m)
    for s, e in (([1, -4], [4, 100]), ([-100, 0], [100, 3]), ([3, 5], [1, 2])):
        sv, ev = np.array(s, np.int64), np.array(e, np.int64)
        want = ref.run(None, {"x": x, "s": sv, "e": ev})[0]
        np.testing.assert_array_equal(f(x, sv, ev)[0], want)
    m2 = _model("Slice", [("x", x), ("s", np.array([-1], np.int64)), ("e", np.array([0], np.int64))], inits={"ax": np.array([1], np.int64), "st": np.array([-2], np.int64)})
    f2 = _compile(_with_output_types(m2, [x]))
    for s, e in (([-1], [0]), ([4], [-100])):
        sv, ev = np.array(s, np.int64), np.array(e, np.int64)
        np.testing.assert_array_equal(f2(x, sv, ev)[0], ReferenceEvaluator(m2).run(None, {"x": x, "s": sv, "e": ev})[0])


def test_split_and_topk_runtime_sizes() -> None:
    x = rnd(2, 7)
    m = _model("Split", [("x", x), ("s", np.array([3, 4], np.int64))], n_out=2, axis=1)
    f = _compile(_with_output_types(m, [x, x]))
    for sz in ([3, 4], [7, 0], [1, 6]):
        sv = np.array(sz, np.int64)
        for g, w in zip(f(x, sv), ReferenceEvaluator(m).run(None, {"x": x, "s": sv})):
            np.testing.assert_array_equal(g, w)
    m2 = _model("TopK", [("x", x), ("k", np.array([2], np.int64))], n_out=2, out_types=[F, I64])
    f2 = _compile(m2)
    for k in (1, 5):
        kv = np.array([k], np.int64)
        for g, w in zip(f2(x, kv), ReferenceEvaluator(m2).run(None, {"x": x, "k": kv})):
            np.testing.assert_array_equal(g, w)


MINI = [TP.FLOAT8E4M3FN, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2, TP.FLOAT8E5M2FNUZ, TP.FLOAT4E2M1]
SPECIAL = np.array([0.0, -0.0, 1e-9, 0.3, -3.5, 5.5, 7.0, 100.0, 1000.0, 1e9, np.inf, -np.inf, np.nan, 0.0078125, 2.5, -0.75], np.float32)


@pytest.mark.parametrize("to", MINI, ids=lambda t: TP.DataType.Name(t))
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_and_from_small_floats(to: int, saturate: int) -> None:
    x = SPECIAL.reshape(4, 4)
    kw = {} if to == TP.FLOAT4E2M1 else {"saturate": saturate}
    kw["opset"] = 23 if to == TP.FLOAT4E2M1 else 21  # Cast allows float4e2m1 from opset 23
    check(_model("Cast", [("x", x)], to=to, out_types=[to], **kw), [x])
    check(_model("Cast", [("x", x.astype(np.float16))], to=to, out_types=[to], **kw), [x.astype(np.float16)])
    y = x.astype(helper.tensor_dtype_to_np_dtype(to))
    check(_model("Cast", [("y", y)], to=TP.FLOAT, out_types=[F], opset=kw["opset"]), [y])
    check(_model("Cast", [("y", y)], to=TP.FLOAT16, out_types=[F16], opset=kw["opset"]), [y])


@pytest.mark.parametrize("to", [TP.INT4, TP.UINT4, TP.INT2, TP.UINT2], ids=lambda t: TP.DataType.Name(t))
def test_cast_small_ints(to: int) -> None:
    opset = 25 if to in (TP.INT2, TP.UINT2) else 21  # Cast allows int2/uint2 from opset 25
    x = np.array([-9.7, -1.5, 0.4, 2.6, 7.9, 17.2], np.float32)
    check(_model("Cast", [("x", x)], to=to, out_types=[to], opset=opset), [x])
    i = np.array([-9, -1, 3, 7, 17, 0], np.int32)
    check(_model("Cast", [("i", i)], to=to, out_types=[to], opset=opset), [i])
    y = i.astype(helper.tensor_dtype_to_np_dtype(to))
    check(_model("Cast", [("y", y)], to=TP.FLOAT, out_types=[F], opset=opset), [y])
    check(_model("Cast", [("y", y)], to=TP.INT8, out_types=[TP.INT8], opset=opset), [y])


def test_quantize_small_types_and_blocks() -> None:
    x = rnd(2, 4, lo=-3, hi=3)
    s = np.array(0.5, np.float32)
    for zp in (np.array(1, helper.tensor_dtype_to_np_dtype(TP.INT4)), np.array(0, helper.tensor_dtype_to_np_dtype(TP.FLOAT8E4M3FN))):
        check(_model("QuantizeLinear", [("x", x), ("s", s), ("z", zp)]), [x, s, zp])
        q = x.astype(zp.dtype)
        check(_model("DequantizeLinear", [("q", q), ("s", s), ("z", zp)]), [q, s, zp])
    sb = np.array([[0.1, 0.2], [0.3, 0.4]], np.float32)
    zb = np.array([[1, 2], [3, 4]], np.uint8)
    check(_model("QuantizeLinear", [("x", x), ("s", sb), ("z", zb)], axis=1, block_size=2), [x, sb, zb])
    qb = rnd(2, 4, dtype=np.uint8, lo=0, hi=255)
    check(_model("DequantizeLinear", [("q", qb), ("s", sb), ("z", zb)], axis=1, block_size=2), [qb, sb, zb])


def test_resize_runtime_scales_sizes_roi() -> None:
    x = rnd(1, 2, 4, 5)
    scales = np.array([1, 1, 1.5, 0.6], np.float32)
    m = _model("Resize", [("x", x), ("roi", np.array([], np.float32)), ("scales", scales)], mode="linear")
    check(m, [x, np.array([], np.float32), scales])
    sizes = np.array([3, 7], np.int64)
    m2 = _model("Resize", [("x", x), ("sizes", sizes)], node_inputs=["x", "", "", "sizes"], axes=[2, 3], mode="cubic", keep_aspect_ratio_policy="not_smaller")
    check(m2, [x, sizes])
    roi = np.array([0.2, 0.1, 0.9, 1.3], np.float32)
    m3 = _model("Resize", [("x", x), ("roi", roi), ("sizes", sizes)], node_inputs=["x", "roi", "", "sizes"], axes=[2, 3], mode="nearest", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1.0)
    check(m3, [x, roi, sizes])


@LOOPS_BUFFERIZE
def test_loop_scan_outputs() -> None:
    # Loop with a carried sum and a scan output collecting it at every iteration.
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", B, []), helper.make_tensor_value_info("acc_in", F, [2])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("acc_out", F, [2]), helper.make_tensor_value_info("scan", F, [2])],
    )
    node = helper.make_node("Loop", ["M", "", "a0"], ["y", "ys"], body=body)
    ins = [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("a0", F, [2]), helper.make_tensor_value_info("x", F, [2])]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", F, [2]), helper.make_tensor_value_info("ys", F, ["N", 2])])
    f = _compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    x = rnd(2)
    y, ys = f(np.array(3, np.int64), np.zeros(2, np.float32), x)
    np.testing.assert_allclose(ys, np.stack([x, 2 * x, 3 * x]), rtol=1e-6)
    np.testing.assert_allclose(y, 3 * x, rtol=1e-6)


def test_unsqueeze_and_slice_with_runtime_axes() -> None:
    x = rnd(3, 4)
    m = _model("Unsqueeze", [("x", x), ("a", np.array([0, 2], np.int64))])
    f = _compile(_with_output_types(m, [x]))
    for axes in ([0, 2], [-1, 1], [3, 0]):
        a = np.array(axes, np.int64)
        np.testing.assert_array_equal(f(x, a)[0], ReferenceEvaluator(m).run(None, {"x": x, "a": a})[0])
    y = rnd(5, 6)
    feeds = {"y": y, "s": np.array([4, 1], np.int64), "e": np.array([0, 5], np.int64), "ax": np.array([0, -1], np.int64), "st": np.array([-2, 3], np.int64)}
    ms = _model("Slice", list(feeds.items()))
    fs = _compile(_with_output_types(ms, [y]))
    for ax, st in (([0, -1], [-2, 3]), ([1, 0], [1, 1]), ([-1, 0], [-1, -3])):
        feeds["ax"], feeds["st"] = np.array(ax, np.int64), np.array(st, np.int64)
        np.testing.assert_array_equal(fs(*feeds.values())[0], ReferenceEvaluator(ms).run(None, feeds)[0])


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample(mode: str, padding: str) -> None:
    x = rnd(1, 2, 4, 5)
    g = rnd(1, 3, 6, 2, lo=-1.3, hi=1.3)
    for align in (0, 1):
        check(_model("GridSample", [("x", x), ("g", g)], mode=mode, padding_mode=padding, align_corners=align), [x, g], atol=1e-5)


def test_grid_sample_3d() -> None:
    x = rnd(1, 1, 3, 4, 5)
    g = rnd(1, 2, 3, 2, 3, lo=-1.2, hi=1.2)
    check(_model("GridSample", [("x", x), ("g", g)], mode="linear", padding_mode="border"), [x, g], atol=1e-5)


def test_affine_grid_and_if_with_unranked_results() -> None:
    theta = rnd(2, 2, 3)
    for align in (0, 1):
        check(_model("AffineGrid", [("t", theta), ("s", np.array([2, 3, 4, 5], np.int64))], align_corners=align), [theta, np.array([2, 3, 4, 5], np.int64)])
    # Branches yielding different static shapes: the result type joins them (dynamic dim).
    then_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then", [], [helper.make_tensor_value_info("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, None)])
    f = _compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    x = rnd(3)
    np.testing.assert_array_equal(f(np.array(True), x)[0], np.concatenate([x, x]))
    np.testing.assert_array_equal(f(np.array(False), x)[0], -x)


def _training_model(op: str, ins: list[tuple[str, np.ndarray]], n_out: int, **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node(op, [n for n, _ in ins], [f"out{i}" for i in range(n_out)], domain="ai.onnx.preview.training", **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in ins]
    outs = [helper.make_tensor_value_info(f"out{i}", F, None) for i in range(n_out)]
    g = helper.make_graph([node], "g", vis, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.preview.training", 1)])


def test_training_optimizers() -> None:
    r, t = np.array(0.1, np.float32), np.array(3, np.int64)
    x, g, v, h = rnd(3, 2), rnd(3, 2), rnd(3, 2), rnd(3, 2, lo=0.1)
    base = [("r", r), ("t", t), ("x", x), ("g", g)]
    check(_training_model("Adagrad", base + [("h", h)], 2, decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.01), [r, t, x, g, h])
    for mode in ("standard", "nesterov"):
        check(_training_model("Momentum", base + [("v", v)], 2, alpha=0.9, beta=0.5, mode=mode, norm_coefficient=0.01), [r, t, x, g, v])
    check(_training_model("Adam", base + [("v", v), ("h", h)], 3, alpha=0.8, beta=0.95, norm_coefficient=0.01, norm_coefficient_post=0.02), [r, t, x, g, v, h])


def test_ml_binarizer_array_feature_extractor() -> None:
    x = rnd(3, 4)
    for op, ins, attrs in (("Binarizer", [("x", x)], {"threshold": 0.3}), ("ArrayFeatureExtractor", [("x", x), ("i", np.array([[3], [0]], np.int64))], {})):
        node = helper.make_node(op, [n for n, _ in ins], ["y"], domain="ai.onnx.ml", **attrs)
        vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in ins]
        g = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("y", F, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 3)])
        check(m, [a for _, a in ins])


@LOOPS_BUFFERIZE
def test_scan() -> None:
    # Running sum over the rows of x, collecting each partial sum (the reference runs forward
    # scans over axis 0 only: numpy gives the reversed, axis-1 one).
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body",
        [helper.make_tensor_value_info("s_in", F, [2]), helper.make_tensor_value_info("x_t", F, [2])],
        [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("y_t", F, [2])],
    )
    s0 = rnd(2)
    for direction, axis in ((0, 0), (1, 1)):
        x = rnd(3, 2) if axis == 0 else rnd(2, 3)
        node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1, scan_input_axes=[axis], scan_input_directions=[direction], scan_output_axes=[0])
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("s0", F, [2]), helper.make_tensor_value_info("x", F, list(x.shape))], [helper.make_tensor_value_info("s", F, [2]), helper.make_tensor_value_info("ys", F, [3, 2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
        if direction == 0:
            check(m, [s0, x])
        else:
            ys = s0 + np.cumsum(x[:, ::-1], axis=1).T
            check(m, [s0, x], [ys[-1], ys])


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_float8_e8m0(round_mode: str, saturate: int) -> None:
    x = np.array([0.0, 1.0, 1.5, 3.0, 0.75, 1e-40, 3e38, 1.7e38, np.inf, np.nan, -2.5, 0.1], np.float32)
    check(_model("Cast", [("x", x)], to=TP.FLOAT8E8M0, out_types=[TP.FLOAT8E8M0], saturate=saturate, round_mode=round_mode, opset=24), [x])
    y = x.astype(helper.tensor_dtype_to_np_dtype(TP.FLOAT8E8M0))
    check(_model("Cast", [("y", y)], to=TP.FLOAT, out_types=[F], opset=24), [y])


def test_batch_norm_training_mode() -> None:
    x = rnd(2, 3, 4, 5)
    s, b, m, v = rnd(3), rnd(3), rnd(3), rnd(3, lo=0.5)
    check(_model("BatchNormalization", [("x", x), ("s", s), ("b", b), ("m", m), ("v", v)], n_out=3, training_mode=1, momentum=0.8, epsilon=1e-3, opset=15), [x, s, b, m, v], atol=1e-5)


def test_reshape_to_rank0() -> None:
    x = rnd(1, 1)
    check(_model("Reshape", [("x", x)], inits={"s": np.array([], np.int64)}, dims={"x": ["A", 1]}), [x])
    check(_model("Reshape", [("x", x)], inits={"s": np.array([], np.int64)}), [x])


@pytest.mark.parametrize("inverse,onesided,length", [(0, 0, None), (0, 1, None), (1, 0, None), (1, 1, None), (0, 0, 6), (0, 1, 12)])
def test_dft(inverse: int, onesided: int, length: int | None) -> None:
    x = rnd(2, 8, 2) if inverse or not onesided else rnd(2, 8, 1)
    inits = {"n": np.array(length, np.int64)} if length else {}
    names = ["x", "n" if length else "", "ax"]
    inits["ax"] = np.array(1, np.int64)
    check(_model("DFT", [("x", x)], inits=inits, node_inputs=names, inverse=inverse, onesided=onesided, opset=20), [x], atol=1e-5)
    # A runtime axis.
    y = rnd(4, 6, 2)
    check(_model("DFT", [("y", y), ("a", np.array(0, np.int64))], node_inputs=["y", "", "a"], inverse=inverse, opset=20), [y, np.array(0, np.int64)], atol=1e-5)


def test_pad_runtime_axes_and_conv_transpose_output_shape() -> None:
    p = rnd(3, 4)
    pads, axes = np.array([1, 2, 0, 1], np.int64), np.array([1, 0], np.int64)
    check(_model("Pad", [("x", p), ("p", pads), ("v", np.array(0.5, np.float32)), ("a", axes)]), [p, pads, np.array(0.5, np.float32), axes])
    x, w = rnd(1, 1, 3, 3), rnd(1, 2, 3, 3)
    check(_model("ConvTranspose", [("x", x), ("w", w)], strides=[3, 2], output_shape=[10, 8]), [x, w])


@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices(storage_order: int) -> None:
    x = rnd(1, 2, 5, 5)
    check(_model("MaxPool", [("x", x)], n_out=2, out_types=[F, I64], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 0, 0], storage_order=storage_order), [x])


def test_col2im() -> None:
    x = rnd(1, 2 * 4, 9)
    img, blk = np.array([4, 4], np.int64), np.array([2, 2], np.int64)
    check(_model("Col2Im", [("x", x)], inits={"i": img, "b": blk}, opset=18), [x])
    y = rnd(1, 3 * 4, 9)
    check(_model("Col2Im", [("y", y), ("i", np.array([5, 4], np.int64)), ("b", blk)], strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2], opset=18), [y, np.array([5, 4], np.int64), blk])


def test_compress() -> None:
    x = rnd(3, 4)
    for axis, cond in ((0, np.array([True, False, True])), (1, np.array([False, True, True])), (None, np.array([True, False, False, True, True]))):
        attrs = {} if axis is None else {"axis": axis}
        check(_model("Compress", [("x", x), ("c", cond)], **attrs), [x, cond])


def test_runtime_tile_squeeze_and_empty_reduce_axes() -> None:
    x = rnd(2, 1, 3, 1)
    reps = np.array([2, 1, 1, 3], np.int64)
    check(_model("Tile", [("x", x), ("r", reps)]), [x, reps])
    m = _model("Squeeze", [("x", x), ("a", np.array([1, 3], np.int64))])
    f = _compile(_with_output_types(m, [x]))
    for axes in ([1, 3], [-1, 1]):
        a = np.array(axes, np.int64)
        np.testing.assert_array_equal(f(x, a)[0], ReferenceEvaluator(m).run(None, {"x": x, "a": a})[0])
    y = rnd(2, 3)
    empty_axes = np.array([], np.int64)
    for noop in (0, 1):
        check(_model("ReduceSum", [("y", y), ("a", empty_axes)], noop_with_empty_axes=noop), [y, empty_axes])
