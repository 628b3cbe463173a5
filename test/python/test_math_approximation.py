"""Accuracy of `onnxc-approximate-math` (transforms/math_approximation.py), end to end on the CPU.

Each case compiles a small model with `onnxc.compile` (the CPU pipeline runs the pass before
vectorization) and compares it with a float64 ground truth: numpy/`math` for the elementary
functions, `onnx.reference.ReferenceEvaluator` on the same model in DOUBLE for the activations
and normalizations. Inputs cover the whole f32 range: random bit patterns (every exponent,
denormals included), dense ranges where the approximations switch branches, and the special
values +-0, +-inf, NaN, the smallest denormal and the largest finite. The bounds asserted are the
ones the pass's docstring claims (ulp of the correctly rounded f32 result; absolute where stated).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.dialect import onnx_context
from onnxc.targets.cpu.jit import compile_module

SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754944e-38, 3.4028235e38, -3.4028235e38,
     1.0, -1.0, 0.5, -0.5, 88.72, 88.7229, 88.73, 89.0, -87.3, -103.2, -103.9, -104.0, -110.0,
     0.625, 0.6249, -0.625, 9.0, 3.74, 3.75, 3.83, 3.84, 0.7071067, 0.7071068, 1.4142135, 2.0, 31.5],
    dtype=np.float32,
)  # fmt: skip


def _wide_inputs(n_bits: int = 200_000, seed: int = 0) -> np.ndarray:
    """Special values, random f32 bit patterns and dense ranges around the branch points."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n_bits, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ranges = [rng.uniform(-20, 20, 50_000), rng.uniform(-1, 1, 50_000), rng.uniform(-110, 100, 50_000)]
    return np.concatenate([SPECIALS, bits, *[r.astype(np.float32) for r in ranges]]).astype(np.float32)


def ulp_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the last place of the f32 result (want rounded to f32).

    Identical non-finite results (NaN and NaN, inf and the same inf) count 0; any other
    non-finite disagreement counts inf. Denormal results use the denormal spacing 2^-149.
    """
    with np.errstate(all="ignore"):
        want32 = want.astype(np.float32)
        spacing = np.maximum(np.spacing(np.abs(want32)).astype(np.float64), 2.0**-149)
        err = np.abs(got.astype(np.float64) - want) / spacing
    same = (np.isnan(got) & np.isnan(want32)) | (np.isinf(got) & (got == want32))
    err[same] = 0.0
    err[np.isnan(err)] = np.inf
    return err


def _model(op: str, elem: int = TensorProto.FLOAT, n: int | None = None, opset: int = 21, **attrs: Any) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", elem, [n])
    y = helper.make_tensor_value_info("y", elem, [n])
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], op, [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    (y,) = onnxc.compile(model)(x)
    return np.asarray(y)


_erf64 = np.frompyfunc(math.erf, 1, 1)

#: ONNX op -> (float64 truth, max ulp). Bounds are the measured maxima rounded up.
ELEMENTARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float]] = {
    "Exp": (np.exp, 1.5),
    "Log": (np.log, 1.5),
    "Tanh": (np.tanh, 2.0),
}


@pytest.mark.parametrize("op", sorted(ELEMENTARY))
def test_elementary_ulp(op: str) -> None:
    """Exp, Log, Tanh over the whole f32 range, specials included, within the claimed ulp."""
    truth, bound = ELEMENTARY[op]
    x = _wide_inputs()
    got = _run(_model(op), x)
    with np.errstate(all="ignore"):
        want = truth(x.astype(np.float64))
    err = ulp_errors(got, want)
    worst = int(np.argmax(err))
    assert err.max() <= bound, f"{op}({x[worst]!r}) = {got[worst]!r}, want {want[worst]!r}: {err.max():.2f} ulp"


def test_odd_functions_keep_signed_zero() -> None:
    """tanh(-0) = erf(-0) = -0 and the limits at +-inf are exact."""
    x = np.array([-0.0, 0.0, np.inf, -np.inf, 50.0, -50.0], dtype=np.float32)
    for op in ("Tanh", "Erf"):
        got = _run(_model(op), x)
        assert np.signbit(got[0]) and not np.signbit(got[1]), op
        np.testing.assert_array_equal(got[2:], np.array([1, -1, 1, -1], np.float32), err_msg=op)


def test_exp_edges() -> None:
    """Overflow to +inf, underflow through the denormals to 0, NaN and -inf as libm gives them."""
    x = np.array([89.0, 88.72, -np.inf, np.nan, -103.2, -104.0, -87.4, 0.0, -0.0], dtype=np.float32)
    got = _run(_model("Exp"), x)
    assert got[0] == np.inf and np.isfinite(got[1])
    assert got[2] == 0.0 and np.isnan(got[3])
    assert got[4] == np.float32(1e-45)  # exp(-103.2) = 1.6e-45 rounds to the smallest denormal
    assert got[5] == 0.0
    assert 0 < got[6] < np.float32(1.1754944e-38)  # a denormal result, not flushed
    assert got[7] == 1.0 and got[8] == 1.0


def test_log_edges() -> None:
    """log of 0, -0, negatives, +inf, NaN and denormals."""
    x = np.array([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 1e-45, 1e-40], dtype=np.float32)
    got = _run(_model("Log"), x)
    assert got[0] == -np.inf and got[1] == -np.inf
    assert np.isnan(got[2]) and np.isnan(got[3]) and np.isnan(got[5])
    assert got[4] == np.inf
    np.testing.assert_allclose(got[6:], np.log(x[6:].astype(np.float64)), rtol=1e-7)


def test_erf() -> None:
    """Erf: within 3e-7 absolute and 6 ulp everywhere (XLA's rational approximation)."""
    x = np.concatenate([SPECIALS, np.linspace(-5, 5, 100_001, dtype=np.float32), np.geomspace(1e-38, 1, 2_000).astype(np.float32)])
    got = _run(_model("Erf"), x)
    want = _erf64(x.astype(np.float64)).astype(np.float64)
    err = ulp_errors(got, want)
    assert err.max() <= 6.0
    finite = np.isfinite(want)
    assert np.max(np.abs(got[finite] - want[finite])) <= 3e-7


def _math_module(op: str) -> tuple[ir.Context, ir.Module]:
    """A one-generic module applying `op` (a math dialect op) to a dynamic 1-D f32 tensor."""
    ctx = onnx_context()
    text = f"""
#m = affine_map<(d0) -> (d0)>
func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {{
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?xf32>
  %o = linalg.generic {{indexing_maps = [#m, #m], iterator_types = ["parallel"]}}
      ins(%a : tensor<?xf32>) outs(%e : tensor<?xf32>) {{
  ^bb0(%x: f32, %y: f32):
    %r = {op} %x : f32
    linalg.yield %r : f32
  }} -> tensor<?xf32>
  return %o : tensor<?xf32>
}}"""
    return ctx, ir.Module.parse(text, ctx)


#: math ops no ONNX op maps to one-to-one (Elu uses expm1, Softplus log1p, Gelu erfc):
#: -> (float64 truth, max ulp).
MATH_ONLY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float]] = {
    "math.expm1": (np.expm1, 2.0),
    "math.log1p": (np.log1p, 3.0),
    "math.log2": (np.log2, 2.0),
    # Gelu's erf form uses erfc (1 + erf cancels for negative x): relative accuracy in the tail.
    "math.erfc": (lambda v: np.frompyfunc(math.erfc, 1, 1)(v).astype(np.float64), 6.0),
}


@pytest.mark.parametrize("op", sorted(MATH_ONLY))
def test_math_only_ulp(op: str) -> None:
    """expm1, log1p, log2 through the CPU pipeline (which runs the pass) within the claimed ulp."""
    truth, bound = MATH_ONLY[op]
    ctx, module = _math_module(op)
    x = _wide_inputs(seed=1)
    (got,) = compile_module(module)(x)
    with np.errstate(all="ignore"):
        want = truth(x.astype(np.float64))
    err = ulp_errors(got, want)
    worst = int(np.argmax(err))
    assert err.max() <= bound, f"{op}({x[worst]!r}) = {got[worst]!r}, want {want[worst]!r}: {err.max():.2f} ulp"
    # Signed zero: expm1(-0) = log1p(-0) = -0.
    if op in ("math.expm1", "math.log1p"):
        ctx2, module2 = _math_module(op)
        (z,) = compile_module(module2)(np.array([-0.0], np.float32))
        assert z[0] == 0 and np.signbit(z[0])


def _double_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model with every float tensor in DOUBLE (the reference then runs in float64)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    for init in m.graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            arr = onnx.numpy_helper.to_array(init).astype(np.float64)
            init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    return m


def _gelu_erf64(x: np.ndarray) -> np.ndarray:
    """0.5 x erfc(-x / sqrt 2) in float64 (the reference's 1 + erf cancels for negative x)."""
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.tolist()])


def _gelu_tanh64(x: np.ndarray) -> np.ndarray:
    """x / (1 + exp(-2u)) = 0.5 x (1 + tanh(u)) in float64, without the 1 + tanh cancellation."""
    with np.errstate(over="ignore"):
        u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return x / (1.0 + np.exp(-2.0 * u))


#: Activations: (op, attributes, opset, float64 truth or None for the reference evaluator in
#: DOUBLE, relative tolerance, absolute tolerance).
ACTIVATIONS: list[tuple[str, dict[str, Any], int, Callable[[np.ndarray], np.ndarray] | None, float, float]] = [
    ("Sigmoid", {}, 21, None, 1e-6, 1e-38),
    # Where exp's argument a is computed in f32 (here -x^2/2 from the rounded x/sqrt 2, below
    # -2u, -alpha x), its rounding alone costs |a| 2^-24 relative: up to ~1e-5 for |a| ~ 100.
    ("Gelu", {}, 21, _gelu_erf64, 2e-5, 1e-38),
    # Also: results below 1e-37 may flush to 0 (exp(-2u) overflows first).
    ("Gelu", {"approximate": "tanh"}, 21, _gelu_tanh64, 1e-5, 1e-37),
    ("Softplus", {}, 21, None, 1e-6, 1e-38),
    ("Elu", {"alpha": 0.7}, 21, None, 1e-6, 1e-38),
    ("Selu", {}, 21, None, 1e-6, 1e-38),
    ("Celu", {"alpha": 1.3}, 21, None, 1e-6, 1e-38),
    ("Mish", {}, 21, None, 1e-6, 1e-38),
    ("Swish", {"alpha": 1.5}, 24, None, 4e-6, 1e-38),
    ("HardSigmoid", {}, 21, None, 1e-6, 1e-7),
    ("Erf", {}, 21, None, 1e-6, 3e-7),
]


def _activation_inputs() -> np.ndarray:
    rng = np.random.default_rng(2)
    return np.concatenate(
        [np.array([0.0, -0.0, 1e-45, -1e-40, 1e-20, -1e-20, 30.0, -30.0, 80.0, -80.0], np.float32),
         rng.uniform(-30, 30, 20_000).astype(np.float32), rng.standard_normal(20_000).astype(np.float32)]
    )  # fmt: skip


@pytest.mark.parametrize(
    "op,attrs,opset,truth,rtol,atol", ACTIVATIONS, ids=[f"{a[0]}{'-' + a[1]['approximate'] if 'approximate' in a[1] else ''}" for a in ACTIVATIONS]
)
def test_activation_accuracy(
    op: str, attrs: dict[str, Any], opset: int, truth: Callable[[np.ndarray], np.ndarray] | None, rtol: float, atol: float
) -> None:
    """Activations against a float64 truth, far inside the backend tests' rtol 1e-3."""
    model = _model(op, opset=opset, **attrs)
    x = _activation_inputs()
    got = _run(model, x)
    if truth is None:
        want = ReferenceEvaluator(_double_model(model)).run(None, {"x": x.astype(np.float64)})[0]
    else:
        want = truth(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=op)
    # Special values: NaN stays NaN; +inf gives the function's limit.
    sg = _run(model, np.array([np.nan, np.inf], np.float32))
    assert np.isnan(sg[0])
    assert sg[1] == (1.0 if op in ("Sigmoid", "HardSigmoid", "Erf") else np.inf)


def test_sigmoid_limits() -> None:
    """sigmoid(-inf) = 0, sigmoid(+inf) = 1, and tiny values stay relative-accurate."""
    x = np.array([-np.inf, np.inf, -80.0, -100.0], np.float32)
    got = _run(_model("Sigmoid"), x)
    assert got[0] == 0.0 and got[1] == 1.0
    np.testing.assert_allclose(got[2], 1 / (1 + np.exp(80.0)), rtol=1e-6)
    assert got[3] == 0.0 or abs(got[3] - 1 / (1 + np.exp(100.0))) < 1e-44


def _reduction_model(op: str, shape: list[int], **attrs: Any) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    inputs, inits = ["x"], []
    if op == "LayerNormalization":
        rng = np.random.default_rng(3)
        inits = [
            onnx.numpy_helper.from_array(rng.standard_normal(shape[-1]).astype(np.float32), "scale"),
            onnx.numpy_helper.from_array(rng.standard_normal(shape[-1]).astype(np.float32), "bias"),
        ]
        inputs += ["scale", "bias"]
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], op, [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "LayerNormalization"])
def test_normalizations(op: str) -> None:
    """Softmax/LogSoftmax (max-subtract, exp once, reciprocal scale) and LayerNormalization."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((8, 100)) * 10).astype(np.float32)
    x[1, 3] = 80.0  # one dominant logit: the others underflow to denormals or 0
    x[2, :] += 50.0  # exp(x) alone would overflow; exp(x - max) does not
    model = _reduction_model(op, list(x.shape), axis=-1)
    got = _run(model, x)
    want = ReferenceEvaluator(_double_model(model)).run(None, {"x": x.astype(np.float64)})[0]
    # Softmax: x - max is rounded to f32 before exp (|x - max| up to ~100 here: 1e-5 relative).
    # LayerNormalization: (x - mean) * rstd * scale + bias cancels where the terms nearly meet.
    rtol, atol = {"Softmax": (1e-5, 1e-38), "LogSoftmax": (2e-6, 1e-6), "LayerNormalization": (2e-6, 1e-6)}[op]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_softmax_all_negative_row() -> None:
    """Softmax of a row of equal, very negative logits is uniform (the row max is a masked-tail
    reduction: LLVM 22's masked maximumf neutral value made it -1.4e-45 and the result NaN until
    targets/cpu/masked_reductions.py)."""
    x = np.full((2, 100), -1000.0, np.float32)
    got = _run(_reduction_model("Softmax", [2, 100], axis=-1), x)
    np.testing.assert_allclose(got, np.full_like(x, 0.01), rtol=1e-6)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.5, 0.0, 0.75, -0.75, 2.25, -3.75, 8.0, -8.0, 0.3])
def test_pow_constant_exponent(exponent: float) -> None:
    """Pow with a constant exponent: C99 pow special cases; within 3 + 1.25 |exponent| ulp (one
    rounding per multiply, amplified by the rest of the power); 0.3 stays libm powf."""
    x = np.concatenate([np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -2.0, 1e-40, 1e20], np.float32),
                        np.random.default_rng(5).uniform(-50, 50, 10_000).astype(np.float32)])  # fmt: skip
    xv = helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(x)])
    yv = helper.make_tensor_value_info("y", TensorProto.FLOAT, [len(x)])
    e = onnx.numpy_helper.from_array(np.array(exponent, np.float32), "e")
    graph = helper.make_graph([helper.make_node("Pow", ["x", "e"], ["y"])], "pow", [xv], [yv], initializer=[e])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    got = _run(model, x)
    y = float(np.float32(exponent))  # the exponent the model holds (0.3 is not an f32)
    want = np.array([math.pow(float(v), y) if not _pow_raises(float(v), y) else _pow_special(float(v), y) for v in x])
    err = ulp_errors(got, want)
    bound = 3.0 + 1.25 * abs(exponent)
    assert err.max() <= bound, (exponent, x[int(np.argmax(err))], got[int(np.argmax(err))])
    # Signs of zero results follow C99 too.
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def _pow_raises(x: float, y: float) -> bool:
    try:
        math.pow(x, y)
        return False
    except (ValueError, OverflowError):
        return True


def _pow_special(x: float, y: float) -> float:
    """C99 pow where Python's math.pow raises: a domain error is NaN, a pole or overflow inf."""
    if x < 0 and y != int(y):
        return math.nan
    if x == 0 and y < 0:
        return math.copysign(math.inf, x) if y == int(y) and int(y) % 2 else math.inf
    return math.inf


def test_f16_and_bf16_go_through_f32() -> None:
    """f16 Exp/Tanh are computed in f32 and rounded: within 1 f16 ulp of the float64 truth."""
    x = np.concatenate([np.array([0, -0.0, np.inf, -np.inf, np.nan, 11.0, -17.0, 6e-8], np.float16),
                        np.random.default_rng(6).uniform(-12, 11, 5000).astype(np.float16)])  # fmt: skip
    for op, truth in (("Exp", np.exp), ("Tanh", np.tanh)):
        got = _run(_model(op, TensorProto.FLOAT16), x)
        with np.errstate(all="ignore"):
            want = truth(x.astype(np.float64))
        want16 = want.astype(np.float16)
        both_nan = np.isnan(got) & np.isnan(want16)
        diff = np.abs(got.astype(np.float64) - want)
        spacing = np.maximum(np.spacing(np.abs(want16)).astype(np.float64), 2.0**-24)
        ok = both_nan | (got == want16) | (diff <= spacing)
        assert ok.all(), (op, x[~ok][:5], got[~ok][:5])


def test_lowered_llvm_has_no_libm_calls(tmp_path: Path) -> None:
    """`onnxc compile --emit llvm` of Exp/Tanh/Erf/Log/Sigmoid/Gelu models: no libm math calls,
    and the polynomial's fma is a vector op (the body was vectorized)."""
    for op, attrs in (("Exp", {}), ("Tanh", {}), ("Erf", {}), ("Log", {}), ("Sigmoid", {}), ("Gelu", {}), ("Softmax", {})):
        path = tmp_path / f"{op}.onnx"
        onnx.save(_model(op, n=4096, **attrs), path)
        out = tmp_path / f"{op}.mlir"
        r = subprocess.run(
            [sys.executable, "-m", "onnxc.tools.driver", "compile", str(path), "--emit", "llvm", "-o", str(out)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        text = out.read_text()
        calls = re.findall(r"@(expf?|tanhf?|erff?|logf?|log1pf?|expm1f?|powf?)\b", text)
        assert not calls, (op, calls)
        assert re.search(r"llvm\.intr\.fma\(.*vector<\d+xf32>", text), op
