"""f64 math in Vulkan kernels, rewritten as arith code that SPIR-V can express.

What: `f64_math_to_arith(module)` rewrites the f64 `math` ops of every `gpu.module` that
`convert-math-to-spirv` leaves unconverted (its GLSL.std.450 patterns take 16/32-bit floats
only; the extended instruction set has no 64-bit Exp, Log, Sin or Cos at all) into `arith` ops on
f64 and i64, which convert with the Float64 and Int64 capabilities:

- exact in integer arithmetic: `absf`, `copysign` (sign-bit masks through `arith.bitcast`),
  `trunc`, `floor`, `ceil`, `round` (half away from zero), `roundeven` (half to even): for
  |x| < 2^52 an i64 round trip, above it x is already an integer; NaN and infinities pass through.
- transcendental, within about 2 ulp (the backend suite's f64 DFT and Softmax cases, f64 models):
  - `exp`: x = k ln2 + r (Cody-Waite, ln2 in two parts), exp(r) by its Taylor series to degree
    13 (|r| <= ln2/2: truncation below 1e-17), times 2^k built in two exponent-field steps so
    that subnormal results round once and overflow gives inf.
  - `log`: fdlibm's e_log: x = 2^e m with m in [sqrt(2)/2, sqrt(2)), log(m) from s = f/(2+f)
    and a degree-14 polynomial in s (Lg1..Lg7), subnormals scaled by 2^54 first; log(0) = -inf,
    log(x < 0) = NaN.
  - `sin`, `cos`: x = k pi/2 + r with pi/2 in three parts (fdlibm's pio2_1, pio2_2, pio2_2t:
    k pio2_1 and k pio2_2 are exact for |k| < 2^20), fdlibm's kernels on [-pi/4, pi/4], the
    quadrant k mod 4 choosing sine or cosine and the sign. The reduction is accurate (absolute
    error about 2^-52) for |x| <= 2^20 pi/2 (about 1.6e6); beyond that, where it is not, the
    result is NaN rather than an inaccurate number (DFT's twiddle angles are 2 pi k n / N, far
    below). Infinities and NaN give NaN.

Other f64 math ops (tanh, erf, pow...) stay as they are and the conversion refuses them, naming
the node. Why arith and not a SPIR-V library call: Vulkan has no f64 math library to link, and
arith is target-independent (CUDA's NVVM path has libdevice and never needs this).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith

from onnxc.targets.gpu.mapping import kernel_ops

__all__ = ["F64_MATH", "f64_math_to_arith"]

_F = arith.CmpFPredicate
_I = arith.CmpIPredicate

_LN2_HI = 6.93147180369123816490e-01  # fdlibm: ln2 with its low 32 bits zero (k * ln2_hi exact)
_LN2_LO = 1.90821492927058770002e-10
_PIO2_1 = 1.57079632673412561417e00  # fdlibm: first 33 bits of pi/2
_PIO2_2 = 6.07710050630396597660e-11  # next 33 bits
_PIO2_2T = 2.02226624879595063154e-21  # pi/2 - pio2_1 - pio2_2
_SIN = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
        2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_COS = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
        -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01, 2.222219843214978396e-01,
       1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01)
#: |x| up to which sin/cos reduce accurately: k = round(x 2/pi) < 2^20 keeps k*pio2_1 exact.
_TRIG_LIMIT = 2.0**20 * (math.pi / 2)
_EXP_OVERFLOW = 7.09782712893383973096e02  # above: exp(x) > DBL_MAX
_EXP_UNDERFLOW = -7.45133219101941108420e02  # below: exp(x) < half the smallest subnormal


class _Builder:
    """arith on f64/i64 scalars at the current insertion point: constants and the bit tricks
    every rewrite uses."""

    def __init__(self) -> None:
        self.f64 = ir.F64Type.get()
        self.i64 = ir.IntegerType.get_signless(64)

    def c(self, v: float) -> ir.Value:
        return arith.ConstantOp(self.f64, v).result

    def i(self, v: int) -> ir.Value:
        return arith.ConstantOp(self.i64, v).result

    def bits(self, v: ir.Value) -> ir.Value:
        return arith.bitcast(self.i64, v)

    def from_bits(self, v: ir.Value) -> ir.Value:
        return arith.bitcast(self.f64, v)

    def absf(self, a: ir.Value) -> ir.Value:
        return self.from_bits(arith.andi(self.bits(a), self.i(0x7FFFFFFFFFFFFFFF)))

    def copysign(self, a: ir.Value, b: ir.Value) -> ir.Value:
        magnitude = arith.andi(self.bits(a), self.i(0x7FFFFFFFFFFFFFFF))
        return self.from_bits(arith.ori(magnitude, arith.andi(self.bits(b), self.i(-0x8000000000000000))))

    def fcmp(self, pred: arith.CmpFPredicate, a: ir.Value, b: ir.Value) -> ir.Value:
        return arith.cmpf(pred, a, b)

    def horner(self, x: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
        """c0 + x (c1 + x (c2 + ...)) for coefficients c0, c1, ..."""
        acc = self.c(coefficients[-1])
        for coefficient in reversed(coefficients[:-1]):
            acc = arith.addf(arith.mulf(acc, x), self.c(coefficient))
        return acc

    def round_to_i64(self, t: ir.Value) -> ir.Value:
        """t rounded half away from zero, as i64 (t must be well inside the i64 range)."""
        half = arith.select(self.fcmp(_F.OGE, t, self.c(0.0)), self.c(0.5), self.c(-0.5))
        return arith.fptosi(self.i64, arith.addf(t, half))

    def pow2(self, k: ir.Value) -> ir.Value:
        """2^k for an i64 k in the normal exponent range [-1022, 1023]."""
        return self.from_bits(arith.shli(arith.addi(k, self.i(1023)), self.i(52)))


# --- exact rounding and sign ops ------------------------------------------------------------


def _trunc(b: _Builder, x: ir.Value) -> ir.Value:
    small = b.fcmp(_F.OLT, b.absf(x), b.c(2.0**52))  # false for NaN and for integers already
    t = b.copysign(arith.sitofp(b.f64, arith.fptosi(b.i64, x)), x)  # -0.4 -> -0.0, as C's trunc
    return arith.select(small, t, x)


def _floor(b: _Builder, x: ir.Value) -> ir.Value:
    t = _trunc(b, x)
    return arith.select(b.fcmp(_F.OGT, t, x), arith.subf(t, b.c(1.0)), t)


def _ceil(b: _Builder, x: ir.Value) -> ir.Value:
    t = _trunc(b, x)
    return arith.select(b.fcmp(_F.OLT, t, x), arith.addf(t, b.c(1.0)), t)


def _round(b: _Builder, x: ir.Value) -> ir.Value:
    """Half away from zero."""
    t = _trunc(b, x)
    up = b.fcmp(_F.OGE, b.absf(arith.subf(x, t)), b.c(0.5))
    return b.copysign(arith.select(up, arith.addf(b.absf(t), b.c(1.0)), b.absf(t)), x)


def _roundeven(b: _Builder, x: ir.Value) -> ir.Value:
    """Half to even."""
    small = b.fcmp(_F.OLT, b.absf(x), b.c(2.0**52))
    f = _floor(b, x)
    d = arith.subf(x, f)  # in [0, 1), exact
    odd = arith.cmpi(_I.ne, arith.andi(arith.fptosi(b.i64, f), b.i(1)), b.i(0))
    up = arith.ori(b.fcmp(_F.OGT, d, b.c(0.5)), arith.andi(b.fcmp(_F.OEQ, d, b.c(0.5)), odd))
    return b.copysign(arith.select(small, arith.select(up, arith.addf(f, b.c(1.0)), f), x), x)


# --- transcendental functions ---------------------------------------------------------------


def _exp(b: _Builder, x: ir.Value) -> ir.Value:
    # Clamped so that k stays within [-1076, 1024] (NaN and the out-of-range ends are selected
    # at the end); then exp(x) = 2^k exp(r), |r| <= ln2/2.
    xc = arith.select(b.fcmp(_F.OGT, x, b.c(710.0)), b.c(710.0), x)
    xc = arith.select(b.fcmp(_F.OLT, xc, b.c(-746.0)), b.c(-746.0), xc)
    xc = arith.select(b.fcmp(_F.UNO, x, x), b.c(0.0), xc)
    k = b.round_to_i64(arith.mulf(xc, b.c(1.0 / math.log(2.0))))
    kf = arith.sitofp(b.f64, k)
    r = arith.subf(arith.subf(xc, arith.mulf(kf, b.c(_LN2_HI))), arith.mulf(kf, b.c(_LN2_LO)))
    p = b.horner(r, tuple(1.0 / math.factorial(n) for n in range(14)))
    # 2^k in two factors, each a normal power of two (k1, k2 in [-538, 512]): p 2^k1 is normal,
    # and the second product rounds a subnormal result once or overflows to inf.
    k1 = arith.shrsi(k, b.i(1))
    k2 = arith.subi(k, k1)
    y = arith.mulf(arith.mulf(p, b.pow2(k1)), b.pow2(k2))
    y = arith.select(b.fcmp(_F.OGT, x, b.c(_EXP_OVERFLOW)), b.c(math.inf), y)
    y = arith.select(b.fcmp(_F.OLT, x, b.c(_EXP_UNDERFLOW)), b.c(0.0), y)
    return arith.select(b.fcmp(_F.UNO, x, x), x, y)


def _log(b: _Builder, x: ir.Value) -> ir.Value:
    # Subnormals scaled into the normal range first (their exponent field is 0).
    subnormal = b.fcmp(_F.OLT, x, b.c(2.0**-1022))
    xs = arith.select(subnormal, arith.mulf(x, b.c(2.0**54)), x)
    bits = b.bits(xs)
    e = arith.subi(arith.shrsi(bits, b.i(52)), arith.select(subnormal, b.i(1023 + 54), b.i(1023)))
    mantissa = arith.andi(bits, b.i((1 << 52) - 1))
    # m in [sqrt(2)/2, sqrt(2)): a mantissa at or above sqrt(2)'s takes the exponent of [0.5, 1).
    high = arith.cmpi(_I.sge, mantissa, b.i(0x6A09E667F3BCD))
    m = b.from_bits(arith.ori(mantissa, arith.select(high, b.i(1022 << 52), b.i(1023 << 52))))
    e = arith.select(high, arith.addi(e, b.i(1)), e)
    f = arith.subf(m, b.c(1.0))
    s = arith.divf(f, arith.addf(b.c(2.0), f))
    z = arith.mulf(s, s)
    w = arith.mulf(z, z)
    t1 = arith.mulf(w, b.horner(w, (_LG[1], _LG[3], _LG[5])))
    t2 = arith.mulf(z, b.horner(w, (_LG[0], _LG[2], _LG[4], _LG[6])))
    r = arith.addf(t1, t2)
    hfsq = arith.mulf(b.c(0.5), arith.mulf(f, f))
    dk = arith.sitofp(b.f64, e)
    # dk ln2_hi - ((hfsq - (s (hfsq + R) + dk ln2_lo)) - f), fdlibm's order of rounding
    inner = arith.addf(arith.mulf(s, arith.addf(hfsq, r)), arith.mulf(dk, b.c(_LN2_LO)))
    y = arith.subf(arith.mulf(dk, b.c(_LN2_HI)), arith.subf(arith.subf(hfsq, inner), f))
    y = arith.select(b.fcmp(_F.OEQ, x, b.c(math.inf)), x, y)
    y = arith.select(b.fcmp(_F.OEQ, x, b.c(0.0)), b.c(-math.inf), y)  # -0.0 too
    return arith.select(b.fcmp(_F.ULT, x, b.c(0.0)), b.c(math.nan), y)  # x < 0 or NaN


def _reduce_pio2(b: _Builder, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(r, quadrant k mod 4, in range) with x = k pi/2 + r, |r| <= pi/4 (see the module doc)."""
    in_range = b.fcmp(_F.OLE, b.absf(x), b.c(_TRIG_LIMIT))  # false for NaN and infinities
    xc = arith.select(in_range, x, b.c(0.0))
    k = b.round_to_i64(arith.mulf(xc, b.c(2.0 / math.pi)))
    kf = arith.sitofp(b.f64, k)
    r = arith.subf(xc, arith.mulf(kf, b.c(_PIO2_1)))  # exact: k pio2_1 has at most 53 bits
    r = arith.subf(r, arith.mulf(kf, b.c(_PIO2_2)))
    r = arith.subf(r, arith.mulf(kf, b.c(_PIO2_2T)))
    return r, arith.andi(k, b.i(3)), in_range


def _sin_cos_kernels(b: _Builder, r: ir.Value) -> tuple[ir.Value, ir.Value]:
    """fdlibm's __kernel_sin and __kernel_cos on [-pi/4, pi/4]."""
    z = arith.mulf(r, r)
    sin = arith.addf(r, arith.mulf(arith.mulf(r, z), b.horner(z, _SIN)))
    # sin(r) = r below 2^-27 (fdlibm's early return), which also keeps sin(-0.0) = -0.0
    sin = arith.select(b.fcmp(_F.OLT, b.absf(r), b.c(2.0**-27)), r, sin)
    cos = arith.addf(arith.subf(b.c(1.0), arith.mulf(b.c(0.5), z)), arith.mulf(arith.mulf(z, z), b.horner(z, _COS)))
    return sin, cos


def _quadrant(b: _Builder, q: ir.Value, values: tuple[ir.Value, ir.Value, ir.Value, ir.Value]) -> ir.Value:
    """values[q] for q in 0..3."""
    lo = arith.select(arith.cmpi(_I.eq, q, b.i(0)), values[0], values[1])
    hi = arith.select(arith.cmpi(_I.eq, q, b.i(2)), values[2], values[3])
    return arith.select(arith.cmpi(_I.slt, q, b.i(2)), lo, hi)


def _sin(b: _Builder, x: ir.Value) -> ir.Value:
    r, q, in_range = _reduce_pio2(b, x)
    s, c = _sin_cos_kernels(b, r)
    y = _quadrant(b, q, (s, c, arith.negf(s), arith.negf(c)))
    return arith.select(in_range, y, b.c(math.nan))


def _cos(b: _Builder, x: ir.Value) -> ir.Value:
    r, q, in_range = _reduce_pio2(b, x)
    s, c = _sin_cos_kernels(b, r)
    y = _quadrant(b, q, (c, arith.negf(s), arith.negf(c), s))
    return arith.select(in_range, y, b.c(math.nan))


#: The f64 math ops rewritten, by op name: a function of the builder and the operands.
F64_MATH: dict[str, Callable[..., ir.Value]] = {
    "math.absf": lambda b, x: b.absf(x),
    "math.copysign": lambda b, x, y: b.copysign(x, y),
    "math.trunc": _trunc,
    "math.floor": _floor,
    "math.ceil": _ceil,
    "math.round": _round,
    "math.roundeven": _roundeven,
    "math.exp": _exp,
    "math.log": _log,
    "math.sin": _sin,
    "math.cos": _cos,
}


def f64_math_to_arith(module: ir.Module) -> int:
    """Rewrite the f64 ops of `F64_MATH` in every `gpu.module` of `module` (see the module doc);
    returns how many were rewritten. Runs in the module's context."""
    f64 = ir.F64Type.get()
    found = kernel_ops(module, lambda op: op.name in F64_MATH and len(op.results) == 1 and op.results[0].type == f64)
    for op in found:
        with ir.InsertionPoint(op), op.location:
            result = F64_MATH[op.name](_Builder(), *op.operands)
        op.results[0].replace_all_uses_with(result)
        op.erase()
    return len(found)
