"""Elementwise ONNX ops -> one `linalg.generic` each (numpy broadcasting), scalar bodies in
arith/math.

Each op is a small scalar function `(args, ctx) -> value` in a table; one pattern per arity
family builds the generic around it. Integer semantics follow the ONNX element type: unsigned
inputs pick `divui`/`remui`/`cmpi ult`/`maxui`, bool is `i1`. Transcendental functions on f16
and bf16 are computed in f32 (libm has no f16 entry points, and ONNX's reference computes them
in float too) and rounded back.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable

import numpy as np

from mlir import ir
from mlir.dialects import arith, math

from onnxc.transforms.lowering.common import (
    Node,
    accumulator_type,
    bitwidth,
    broadcast_shapes,
    const_scalar,
    convert_element,
    convert_scalar,
    element_supported,
    elementwise,
    filled,
    is_bool,
    is_float,
    is_int,
    is_unsigned,
    lowers,
    shape_of,
    static_shape,
)

F = arith.CmpFPredicate
I = arith.CmpIPredicate


class Scalar:
    """What a scalar body needs: the ONNX element type (signedness) and the node's attributes."""

    def __init__(self, node: Node, elem: ir.Type) -> None:
        self.node = node
        self.onnx_elem = elem
        self.elem = convert_element(elem)
        # Bools compare and take max/min as unsigned bits.
        self.unsigned = is_unsigned(elem) or is_bool(elem)
        self.is_float = is_float(self.elem)

    def c(self, value: float | int) -> ir.Value:
        """A constant of the element type."""
        return const_scalar(value, self.elem)

    def attr(self, name: str, default: object = None) -> object:
        return self.node.attr(name, default)


def _f32_math(fn: Callable[[ir.Value], ir.Value]) -> Callable[[ir.Value, Scalar], ir.Value]:
    """Apply a math function, through f32 for f16/bf16."""

    def build(x: ir.Value, s: Scalar) -> ir.Value:
        if bitwidth(s.elem) < 32:
            f32 = ir.F32Type.get()
            return arith.truncf(s.elem, fn(arith.extf(f32, x)))
        return fn(x)

    return build


def _in_f32(s: Scalar, x: ir.Value) -> tuple[ir.Value, Callable[[ir.Value], ir.Value], Callable[[float], ir.Value]]:
    """(x widened to f32 if narrower, a function narrowing back, a constant maker in that type)."""
    if bitwidth(s.elem) < 32:
        f32 = ir.F32Type.get()
        return arith.extf(f32, x), (lambda v: arith.truncf(s.elem, v)), (lambda c: const_scalar(c, f32))
    return x, (lambda v: v), s.c


def _sigmoid(x: ir.Value, s: Scalar) -> ir.Value:
    # One exp and one division per element; exp(-x) = +inf gives 0 and 0 gives 1, exactly.
    w, back, c = _in_f32(s, x)
    return back(arith.divf(c(1.0), arith.addf(c(1.0), math.exp(arith.negf(w)))))


def _gelu(x: ir.Value, s: Scalar) -> ir.Value:
    w, back, c = _in_f32(s, x)
    if s.attr("approximate", "none") == "tanh":
        # 0.5 x (1 + tanh(u)) = x sigmoid(2u) = x / (1 + exp(-2u)): one exp and one division,
        # and no 1 + tanh(u) cancellation for negative x (the relative error stays small).
        u = arith.mulf(c(pymath.sqrt(2.0 / pymath.pi)), arith.addf(w, arith.mulf(c(0.044715), arith.mulf(w, arith.mulf(w, w)))))
        return back(arith.divf(w, arith.addf(c(1.0), math.exp(arith.mulf(c(-2.0), u)))))
    # 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2): for negative x, 1 + erf cancels (at
    # x = -5 an f32 erf leaves no correct digit of the 1e-6 result); erfc keeps them.
    return back(arith.mulf(arith.mulf(c(0.5), w), math.erfc(arith.mulf(w, c(-1.0 / pymath.sqrt(2.0))))))


def _select_neg(x: ir.Value, s: Scalar, neg: ir.Value, strict: bool = True) -> ir.Value:
    cond = arith.cmpf(F.OLT if strict else F.OLE, x, s.c(0.0))
    return arith.select(cond, neg, x)


def _elu(x: ir.Value, s: Scalar) -> ir.Value:
    # expm1, not exp - 1: exact near 0 where exp(x) - 1 cancels.
    w, back, c = _in_f32(s, x)
    alpha = float(s.attr("alpha", 1.0))
    neg = arith.mulf(c(alpha), math.expm1(w))
    return back(arith.select(arith.cmpf(F.OLT, w, c(0.0)), neg, w))


def _selu(x: ir.Value, s: Scalar) -> ir.Value:
    w, back, c = _in_f32(s, x)
    alpha = float(s.attr("alpha", 1.67326319217681884765625))
    gamma = float(s.attr("gamma", 1.05070102214813232421875))
    neg = arith.mulf(c(gamma * alpha), math.expm1(w))
    return back(arith.select(arith.cmpf(F.OLE, w, c(0.0)), neg, arith.mulf(c(gamma), w)))


def _celu(x: ir.Value, s: Scalar) -> ir.Value:
    w, back, c = _in_f32(s, x)
    alpha = float(s.attr("alpha", 1.0))
    # x / alpha as a multiply by the (constant) reciprocal; at most 1 ulp apart in exp's argument.
    neg = arith.mulf(c(alpha), math.expm1(arith.mulf(w, c(1.0 / alpha))))
    return back(arith.addf(arith.maximumf(c(0.0), w), arith.minimumf(c(0.0), neg)))


def _hard_sigmoid(x: ir.Value, s: Scalar) -> ir.Value:
    alpha = float(s.attr("alpha", 0.2))
    beta = float(s.attr("beta", 0.5))
    y = arith.addf(arith.mulf(s.c(alpha), x), s.c(beta))
    return arith.maximumf(s.c(0.0), arith.minimumf(s.c(1.0), y))


def _hard_swish(x: ir.Value, s: Scalar) -> ir.Value:
    y = arith.addf(arith.mulf(s.c(1.0 / 6.0), x), s.c(0.5))
    return arith.mulf(x, arith.maximumf(s.c(0.0), arith.minimumf(s.c(1.0), y)))


def _softplus(x: ir.Value, s: Scalar) -> ir.Value:
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): one exp that never overflows (large x
    # gives x, not inf) and log1p keeps exp(x) for very negative x (log(1 + tiny) rounds to 0).
    w, back, c = _in_f32(s, x)
    t = math.exp(arith.negf(math.absf(w)))
    return back(arith.addf(arith.maximumf(w, c(0.0)), math.log1p(t)))


def _mish(x: ir.Value, s: Scalar) -> ir.Value:
    # tanh(log(1 + u)) = n / (n + 2) with u = exp(x), n = u (u + 2): one exp, one division, no
    # tanh or log. Past x = 20 the ratio is 1.0f, so x is clamped there before exp (no overflow).
    w, back, c = _in_f32(s, x)
    u = math.exp(arith.minimumf(w, c(20.0)))
    n = arith.mulf(u, arith.addf(u, c(2.0)))
    return back(arith.mulf(w, arith.divf(n, arith.addf(n, c(2.0)))))


def _softsign(x: ir.Value, s: Scalar) -> ir.Value:
    return arith.divf(x, arith.addf(s.c(1.0), math.absf(x)))


def _leaky_relu(x: ir.Value, s: Scalar) -> ir.Value:
    alpha = float(s.attr("alpha", 0.01))
    return _select_neg(x, s, arith.mulf(s.c(alpha), x))


def _thresholded_relu(x: ir.Value, s: Scalar) -> ir.Value:
    alpha = float(s.attr("alpha", 1.0))
    return arith.select(arith.cmpf(F.OGT, x, s.c(alpha)), x, s.c(0.0))


def _relu(x: ir.Value, s: Scalar) -> ir.Value:
    if s.is_float:
        return arith.maximumf(x, s.c(0.0))
    return arith.maxsi(x, s.c(0))


def _abs(x: ir.Value, s: Scalar) -> ir.Value:
    if s.is_float:
        return math.absf(x)
    # max(x, 0 - x), not math.absi: vectorized to an n-D vector (a T5 relative-position bucket,
    # vector<1x8xi64>) math.absi has no LLVM lowering; arith's ops unroll to 1-D. The same
    # result for INT_MIN (both wrap to INT_MIN).
    return x if s.unsigned else arith.maxsi(x, arith.subi(s.c(0), x))


def _neg(x: ir.Value, s: Scalar) -> ir.Value:
    return arith.negf(x) if s.is_float else arith.subi(s.c(0), x)


def _sign(x: ir.Value, s: Scalar) -> ir.Value:
    if s.is_float:
        pos = arith.select(arith.cmpf(F.OGT, x, s.c(0.0)), s.c(1.0), s.c(0.0))
        res = arith.select(arith.cmpf(F.OLT, x, s.c(0.0)), s.c(-1.0), pos)
        # NaN stays NaN (numpy's sign).
        return arith.select(arith.cmpf(F.UNO, x, x), x, res)
    pos = arith.select(arith.cmpi(I.ne if s.unsigned else I.sgt, x, s.c(0)), s.c(1), s.c(0))
    if s.unsigned:
        return pos
    return arith.select(arith.cmpi(I.slt, x, s.c(0)), s.c(-1), pos)


def _reciprocal(x: ir.Value, s: Scalar) -> ir.Value:
    return arith.divf(s.c(1.0), x)


def _shrink(x: ir.Value, s: Scalar) -> ir.Value:
    bias = float(s.attr("bias", 0.0))
    lambd = float(s.attr("lambd", 0.5))
    if s.is_float:
        lo = arith.cmpf(F.OLT, x, s.c(-lambd))
        hi = arith.cmpf(F.OGT, x, s.c(lambd))
        return arith.select(lo, arith.addf(x, s.c(bias)), arith.select(hi, arith.subf(x, s.c(bias)), s.c(0.0)))
    # Integer inputs: compare in f64 (lambd is a float), arithmetic in the integer type.
    f64 = ir.F64Type.get()
    xf = convert_scalar(x, s.onnx_elem, f64)
    lo = arith.cmpf(F.OLT, xf, const_scalar(-lambd, f64))
    hi = arith.cmpf(F.OGT, xf, const_scalar(lambd, f64))
    b = s.c(int(bias))
    return arith.select(lo, arith.addi(x, b), arith.select(hi, arith.subi(x, b), s.c(0)))


def _isnan(x: ir.Value, s: Scalar) -> ir.Value:
    return arith.cmpf(F.UNO, x, x)


def _isinf(x: ir.Value, s: Scalar) -> ir.Value:
    pos = int(s.attr("detect_positive", 1))
    neg = int(s.attr("detect_negative", 1))
    t = arith.cmpf(F.OEQ, x, s.c(float("inf")))
    n = arith.cmpf(F.OEQ, x, s.c(float("-inf")))
    false = const_scalar(0, ir.IntegerType.get_signless(1))
    if pos and neg:
        return arith.ori(t, n)
    if pos:
        return t
    if neg:
        return n
    return false


def _not(x: ir.Value, s: Scalar) -> ir.Value:
    return arith.xori(x, const_scalar(1, s.elem))


def _bitwise_not(x: ir.Value, s: Scalar) -> ir.Value:
    return arith.xori(x, s.c(-1))


def _round(x: ir.Value, s: Scalar) -> ir.Value:
    return math.roundeven(x)


def _swish(x: ir.Value, s: Scalar) -> ir.Value:
    # x sigmoid(alpha x) = x / (1 + exp(-alpha x)): one exp, one division, no multiply.
    w, back, c = _in_f32(s, x)
    alpha = float(s.attr("alpha", 1.0))
    return back(arith.divf(w, arith.addf(c(1.0), math.exp(arith.mulf(c(-alpha), w)))))


UNARY: dict[str, Callable[[ir.Value, Scalar], ir.Value]] = {
    "Swish": _swish,
    "Abs": _abs,
    "Neg": _neg,
    "Exp": _f32_math(math.exp),
    "Log": _f32_math(math.log),
    "Sqrt": _f32_math(math.sqrt),
    "Tanh": _f32_math(math.tanh),
    "Sin": _f32_math(math.sin),
    "Cos": _f32_math(math.cos),
    "Tan": _f32_math(math.tan),
    "Asin": _f32_math(math.asin),
    "Acos": _f32_math(math.acos),
    "Atan": _f32_math(math.atan),
    "Sinh": _f32_math(math.sinh),
    "Cosh": _f32_math(math.cosh),
    "Asinh": _f32_math(math.asinh),
    "Acosh": _f32_math(math.acosh),
    "Atanh": _f32_math(math.atanh),
    "Erf": _f32_math(math.erf),
    "Floor": lambda x, s: math.floor(x),
    "Ceil": lambda x, s: math.ceil(x),
    "Round": _round,
    "Sign": _sign,
    "Reciprocal": _reciprocal,
    "Relu": _relu,
    "LeakyRelu": _leaky_relu,
    "Elu": _elu,
    "Selu": _selu,
    "Celu": _celu,
    "Sigmoid": _sigmoid,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish,
    "Softplus": _softplus,
    "Softsign": _softsign,
    "Mish": _mish,
    "Gelu": _gelu,
    "ThresholdedRelu": _thresholded_relu,
    "Shrink": _shrink,
    "IsNaN": _isnan,
    "IsInf": _isinf,
    "Not": _not,
    "BitwiseNot": _bitwise_not,
}

# Ops whose integer inputs the float-only bodies above cannot take.
_FLOAT_ONLY = {k for k in UNARY if k not in ("Abs", "Neg", "Sign", "Relu", "Shrink", "Not", "BitwiseNot")}


def _check_unary(node: Node) -> str | None:
    if node.op_type in _FLOAT_ONLY and node.op_type not in ("IsNaN", "IsInf") and not is_float(node.in_elem(0)):
        return f"element type {node.in_elem(0)} is not lowered for {node.op_type}"
    if node.op_type in ("IsNaN", "IsInf") and not is_float(node.in_elem(0)):
        return f"element type {node.in_elem(0)} is not lowered for {node.op_type}"
    return None


@lowers(*UNARY, check=_check_unary)
def lower_unary(node: Node) -> list[ir.Value]:
    """Unary elementwise math: one generic with the table's scalar body."""
    s = Scalar(node, node.in_elem(0))
    fn = UNARY[node.op_type]
    out = convert_element(node.out_elem(0))
    return [elementwise([node.input(0)], out, lambda x: fn(x, s))]


# --- binary ---------------------------------------------------------------------------------------


def _arith(fop: Callable, iop: Callable, uop: Callable | None = None) -> Callable[[ir.Value, ir.Value, Scalar], ir.Value]:
    def build(a: ir.Value, b: ir.Value, s: Scalar) -> ir.Value:
        if s.is_float:
            return fop(a, b)
        if s.unsigned and uop is not None:
            return uop(a, b)
        return iop(a, b)

    return build


def _safe_divisor(a: ir.Value, b: ir.Value, s: Scalar) -> tuple[ir.Value, ir.Value, ir.Value | None]:
    """(divisor that cannot trap, "b == 0" flag, "b == -1" flag for signed types).

    Why: x86 integer division traps (SIGFPE kills the process) on a zero divisor and on
    INT_MIN / -1, and vectorized code divides every lane, masked tail lanes included, whose
    divisor is the transfer's padding 0 (Mod on uint32 with dynamic dims died so). The divisor of
    such lanes becomes 1 and the result is selected afterwards: 0 where `b == 0`, as numpy (and
    onnx.reference) give for integer division and remainder by zero."""
    zero, one = s.c(0), s.c(1)
    is_zero = arith.cmpi(I.eq, b, zero)
    safe = arith.select(is_zero, one, b)
    if s.unsigned:
        return safe, is_zero, None
    is_neg_one = arith.cmpi(I.eq, b, s.c(-1))
    return arith.select(is_neg_one, one, safe), is_zero, is_neg_one


def _int_div(a: ir.Value, b: ir.Value, s: Scalar) -> ir.Value:
    """Integer Div without traps (see `_safe_divisor`); x / -1 is -x (wrapping, as in C)."""
    safe, is_zero, is_neg_one = _safe_divisor(a, b, s)
    if is_neg_one is None:
        q = arith.divui(a, safe)
    else:
        q = arith.select(is_neg_one, arith.subi(s.c(0), a), arith.divsi(a, safe))
    return arith.select(is_zero, s.c(0), q)


def _mod(a: ir.Value, b: ir.Value, s: Scalar) -> ir.Value:
    fmod = int(s.attr("fmod", 0))
    if s.is_float:
        w, back, c = _in_f32(s, a)
        wb = arith.extf(ir.F32Type.get(), b) if bitwidth(s.elem) < 32 else b
        r = arith.remf(w, wb)
        if fmod:
            return back(r)
        # numpy mod: the result takes the divisor's sign.
        fix = arith.andi(arith.cmpf(F.ONE, r, c(0.0)), arith.xori(arith.cmpf(F.OLT, r, c(0.0)), arith.cmpf(F.OLT, wb, c(0.0))))
        return back(arith.select(fix, arith.addf(r, wb), r))
    safe, is_zero, _ = _safe_divisor(a, b, s)  # x % -1 is 0 = x % 1: no select needed for it
    zero = s.c(0)
    if s.unsigned:
        return arith.select(is_zero, zero, arith.remui(a, safe))
    r = arith.remsi(a, safe)
    if not fmod:
        fix = arith.andi(arith.cmpi(I.ne, r, zero), arith.xori(arith.cmpi(I.slt, r, zero), arith.cmpi(I.slt, b, zero)))
        r = arith.select(fix, arith.addi(r, b), r)
    return arith.select(is_zero, zero, r)


def _cmp(fp: arith.CmpFPredicate, sp: arith.CmpIPredicate, up: arith.CmpIPredicate) -> Callable[[ir.Value, ir.Value, Scalar], ir.Value]:
    def build(a: ir.Value, b: ir.Value, s: Scalar) -> ir.Value:
        if s.is_float:
            return arith.cmpf(fp, a, b)
        return arith.cmpi(up if s.unsigned else sp, a, b)

    return build


def _bitshift(a: ir.Value, b: ir.Value, s: Scalar) -> ir.Value:
    # Shifts by a negative amount or by the width or more are poison in arith; ONNX (the
    # reference) gives 0, or -1 for a negative signed value shifted right.
    width = bitwidth(s.elem)
    right = s.attr("direction") != "LEFT"
    if right:
        res = arith.shrui(a, b) if s.unsigned else arith.shrsi(a, b)
    else:
        res = arith.shli(a, b)
    in_range = arith.cmpi(I.ult, b, s.c(width))  # unsigned compare: negative shifts are huge
    if right and not s.unsigned:
        fill = arith.select(arith.cmpi(I.slt, a, s.c(0)), s.c(-1), s.c(0))
    else:
        fill = s.c(0)
    return arith.select(in_range, res, fill)


def _max(a: ir.Value, b: ir.Value, s: Scalar) -> ir.Value:
    if s.is_float:
        return arith.maximumf(a, b)
    return arith.maxui(a, b) if s.unsigned else arith.maxsi(a, b)


def _min(a: ir.Value, b: ir.Value, s: Scalar) -> ir.Value:
    if s.is_float:
        return arith.minimumf(a, b)
    return arith.minui(a, b) if s.unsigned else arith.minsi(a, b)


def _prelu(x: ir.Value, slope: ir.Value, s: Scalar) -> ir.Value:
    if s.is_float:
        return arith.select(arith.cmpf(F.OLT, x, s.c(0.0)), arith.mulf(slope, x), x)
    if s.unsigned:
        return x
    return arith.select(arith.cmpi(I.slt, x, s.c(0)), arith.muli(slope, x), x)


BINARY: dict[str, Callable[[ir.Value, ir.Value, Scalar], ir.Value]] = {
    "Add": _arith(arith.addf, arith.addi),
    "Sub": _arith(arith.subf, arith.subi),
    "Mul": _arith(arith.mulf, arith.muli),
    "Div": lambda a, b, s: arith.divf(a, b) if s.is_float else _int_div(a, b, s),
    "Mod": _mod,
    "And": lambda a, b, s: arith.andi(a, b),
    "Or": lambda a, b, s: arith.ori(a, b),
    "Xor": lambda a, b, s: arith.xori(a, b),
    "BitwiseAnd": lambda a, b, s: arith.andi(a, b),
    "BitwiseOr": lambda a, b, s: arith.ori(a, b),
    "BitwiseXor": lambda a, b, s: arith.xori(a, b),
    "BitShift": _bitshift,
    "Equal": _cmp(F.OEQ, I.eq, I.eq),
    "Less": _cmp(F.OLT, I.slt, I.ult),
    "Greater": _cmp(F.OGT, I.sgt, I.ugt),
    "LessOrEqual": _cmp(F.OLE, I.sle, I.ule),
    "GreaterOrEqual": _cmp(F.OGE, I.sge, I.uge),
    "PRelu": _prelu,
}


def _check_binary(node: Node) -> str | None:
    shapes = [static_shape(t) for t in node.onnx_types[:2] if t is not None]
    res = broadcast_shapes(shapes)
    if isinstance(res, str):
        return res
    return None


@lowers(*BINARY, check=_check_binary)
def lower_binary(node: Node) -> list[ir.Value]:
    """Binary elementwise ops with numpy broadcasting."""
    s = Scalar(node, node.in_elem(0))
    fn = BINARY[node.op_type]
    out = convert_element(node.out_elem(0))
    return [elementwise([node.input(0), node.input(1)], out, lambda a, b: fn(a, b, s))]


def _pow(a: ir.Value, b: ir.Value, s: Scalar, exp_elem: ir.Type) -> ir.Value:
    if s.is_float:
        if is_float(exp_elem):
            w, back, c = _in_f32(s, a)
            e = convert_scalar(b, exp_elem, accumulator_type(s.elem))
            return back(math.powf(w, e))
        e = convert_scalar(b, exp_elem, s.elem)
        return math.powf(a, e) if bitwidth(s.elem) >= 32 else _f32_math(lambda w: math.powf(w, arith.extf(ir.F32Type.get(), e)))(a, s)
    if is_float(exp_elem):
        f64 = ir.F64Type.get()
        r = math.powf(convert_scalar(a, s.onnx_elem, f64), convert_scalar(b, exp_elem, f64))
        return convert_scalar(r, f64, s.onnx_elem)
    return math.ipowi(a, convert_scalar(b, exp_elem, s.onnx_elem))


def _constant_exponent(node: Node) -> float | None:
    """The exponent of a float-base Pow when it is one constant value that does not change the
    output shape (a scalar or a splat of rank <= the base's), else None."""
    if not is_float(node.in_elem(0)):
        return None
    c = node.const(1)
    if c is None:
        return None
    arr = np.asarray(c)
    if arr.size == 0 or arr.ndim > len(static_shape(node.onnx_types[0])):
        return None
    flat = arr.reshape(-1)
    if arr.size > 1 and not bool(np.all(flat == flat[0])):
        return None
    if arr.size > 1 and any(d != 1 for d in arr.shape):
        return None  # a splat of size > 1 may broadcast the base: keep the general path
    return float(flat[0])


@lowers("Pow", check=_check_binary)
def lower_pow(node: Node) -> list[ir.Value]:
    """Pow: base and exponent types may differ (float/int); integer powers use `math.ipowi`.

    A constant exponent becomes an `arith.constant` inside the body (not a broadcast input), so
    `onnxc-approximate-math` can expand x^2, x^0.5, x^-1 ... into multiplies and square roots.
    """
    s = Scalar(node, node.in_elem(0))
    e = node.in_elem(1)
    value = _constant_exponent(node)
    if value is not None:
        def body(a: ir.Value) -> ir.Value:
            w, back, _ = _in_f32(s, a)
            return back(math.powf(w, const_scalar(value, w.type)))

        return [elementwise([node.input(0)], s.elem, body, out_shape=shape_of(node.input(0)))]
    return [elementwise([node.input(0), node.input(1)], s.elem, lambda a, b: _pow(a, b, s, e))]


# --- variadic -------------------------------------------------------------------------------------


def _check_variadic(node: Node) -> str | None:
    res = broadcast_shapes([static_shape(t) for t in node.onnx_types if t is not None])
    return res if isinstance(res, str) else None


@lowers("Max", "Min", "Sum", "Mean", check=_check_variadic)
def lower_variadic(node: Node) -> list[ir.Value]:
    """Max/Min/Sum/Mean over any number of broadcast inputs, in one generic."""
    s = Scalar(node, node.in_elem(0))
    ins = [v for v in node.inputs if v is not None]
    combine = {"Max": _max, "Min": _min, "Sum": BINARY["Add"], "Mean": BINARY["Add"]}[node.op_type]

    def body(*xs: ir.Value) -> ir.Value:
        acc = xs[0]
        for x in xs[1:]:
            acc = combine(acc, x, s)
        if node.op_type == "Mean":
            acc = arith.divf(acc, s.c(float(len(xs)))) if s.is_float else arith.divsi(acc, s.c(len(xs)))
        return acc

    return [elementwise(ins, s.elem, body)]


# --- ternary and friends --------------------------------------------------------------------------


@lowers("Where", check=_check_variadic)
def lower_where(node: Node) -> list[ir.Value]:
    """Where(cond, x, y): `arith.select` under three-way broadcasting."""
    out = convert_element(node.out_elem(0))
    return [elementwise([node.input(0), node.input(1), node.input(2)], out, lambda c, x, y: arith.select(c, x, y))]


@lowers("Clip")
def lower_clip(node: Node) -> list[ir.Value]:
    """Clip: bounds from the optional scalar inputs (opset >= 11) or the attributes (opset 6)."""
    s = Scalar(node, node.in_elem(0))
    x = node.input(0)
    ins = [x]
    lo_idx = hi_idx = None
    if node.version >= 11:
        if node.has(1):
            ins.append(node.input(1))
            lo_idx = len(ins) - 1
        if node.has(2):
            ins.append(node.input(2))
            hi_idx = len(ins) - 1
    attr_lo = node.attr("min") if node.version < 11 else None
    attr_hi = node.attr("max") if node.version < 11 else None

    def body(*xs: ir.Value) -> ir.Value:
        v = xs[0]
        lo = xs[lo_idx] if lo_idx is not None else (s.c(attr_lo) if attr_lo is not None else None)
        hi = xs[hi_idx] if hi_idx is not None else (s.c(attr_hi) if attr_hi is not None else None)
        if lo is not None:
            v = _max(v, lo, s)
        if hi is not None:
            v = _min(v, hi, s)
        return v

    return [elementwise(ins, s.elem, body, out_shape=shape_of(x))]


@lowers("Identity")
def lower_identity(node: Node) -> list[ir.Value]:
    """Identity: the input itself."""
    return [node.input(0)]


def _check_dropout(node: Node) -> str | None:
    if node.has(2):
        c = node.const(2)
        if c is None or bool(c.reshape(-1)[0]):
            # Training mode drops nothing only with a ratio of 0 (random masks are not lowered).
            ratio = node.const(1) if node.has(1) else None
            if ratio is None or float(ratio.reshape(-1)[0]) != 0.0:
                return "training_mode must be a constant false (or the ratio a constant 0)"
    return None


@lowers("Dropout", check=_check_dropout)
def lower_dropout(node: Node) -> list[ir.Value | None]:
    """Dropout at inference (training_mode absent or false): output = input, mask all true."""
    x = node.input(0)
    mask = None
    if len(node.op.results) > 1 and not isinstance(node.op.results[1].type, ir.NoneType):
        mask = filled(shape_of(x), ir.IntegerType.get_signless(1), 1)
    return [x, mask]


def _check_cast(node: Node) -> str | None:
    out = node.out_elem(0)
    if not element_supported(out):
        return f"cast to {out} is not lowered"
    return None


@lowers("Cast", "CastLike", check=_check_cast)
def lower_cast(node: Node) -> list[ir.Value]:
    """Cast/CastLike: a per-element conversion keeping the ONNX signedness of both sides."""
    from onnxc.transforms.lowering.minifloat import is_exotic

    src, dst = node.in_elem(0), node.out_elem(0)
    x = node.input(0)
    if src == dst or (convert_element(src) == convert_element(dst) and not is_exotic(src) and not is_exotic(dst)):
        return [x]
    saturate = bool(int(node.attr("saturate", 1)))
    round_mode = str(node.attr("round_mode", "up"))
    return [elementwise([x], convert_element(dst), lambda v: convert_scalar(v, src, dst, saturate, round_mode))]



def _check_bitcast(node: Node) -> str | None:
    src, dst = node.in_elem(0), node.out_elem(0)
    if not element_supported(dst):
        return f"bitcast to {dst} is not lowered"
    # bool is one byte in ONNX: it bitcasts to and from 8-bit types.
    ws = 8 if is_bool(src) else bitwidth(src)
    wd = 8 if is_bool(dst) else bitwidth(dst)
    if ws != wd:
        return f"bitcast between {ws}- and {wd}-bit types"
    return None


@lowers("BitCast", check=_check_bitcast)
def lower_bitcast(node: Node) -> list[ir.Value]:
    """BitCast: `arith.bitcast` per element (bool <-> 8-bit through extui/trunci)."""
    src, dst = convert_element(node.in_elem(0)), convert_element(node.out_elem(0))
    i8 = ir.IntegerType.get_signless(8)

    def body(v: ir.Value) -> ir.Value:
        if is_bool(src):
            v = arith.extui(i8, v)
            return v if dst == i8 else arith.bitcast(dst, v)
        if is_bool(dst):
            if src != i8:
                v = arith.bitcast(i8, v)
            return arith.trunci(dst, v)
        return v if src == dst else arith.bitcast(dst, v)

    return [elementwise([node.input(0)], dst, body)]
