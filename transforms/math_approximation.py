"""The `onnxc-approximate-math` pass: math.exp/tanh/erf/log/... as polynomials in arith + math.fma.

Why: LLVM 22.1.8 lowers `math.exp`, `math.tanh`, `math.erf`, `math.log` and friends to one libm
call per element (`convert-math-to-libm`), and after vector unrolling a vectorized softmax or GELU
body becomes a chain of scalar calls: 5-40x slower than onnxruntime. Upstream MLIR's polynomial
approximation patterns are only reachable from a test pass in 22.1.8 and have no transform op, so
onnxc writes the approximations itself, with the pattern-rewrite bindings (`mlir.rewrite`), as
straight-line `arith` + `math.fma` code (`arith.bitcast` and integer shifts for 2^n scaling, and
`arith.select` instead of branches) that the linalg vectorizer turns into SIMD code like any other
elementwise body. The pass is target-independent: its output is pure upstream arith/math.

What is rewritten (f32, scalar or vector; f16/bf16 are computed in f32 and rounded back):

- `math.exp`: Cody-Waite range reduction x = n ln2 + r (n = roundeven(x log2e), the first product
  exact), Cephes' degree-7 minimax polynomial on |r| <= ln2/2, then 2^n as two exponent-field
  multiplies (2^(n>>1) 2^(n-(n>>1))) so that results that overflow become +inf and denormal
  results are rounded once, as libm does. NaN in, NaN out.
- `math.expm1`: the same reduction; expm1(x) = 2^n expm1(r) + (2^n - 1), exact for small x.
- `math.tanh`: x + x^3 P(x^2) for |x| < 0.625 (Cephes), 1 - 2 / (exp(2|x|) + 1) above, sign copied
  (so -0.0 stays -0.0); |x| >= 10 gives +-1 exactly.
- `math.erf`: the odd rational approximation XLA and Eigen use (x P(x^2) / Q(x^2), x clamped to
  +-3.7439...; +-1 from +-3.8325 on, where erf rounds to +-1).
- `math.erfc`: Numerical Recipes' erfcc, t exp(-z^2 + P(t)) with t = 1 / (1 + |z|/2), the exp
  argument carried in two floats (z^2 exact through fma) so the tail stays accurate relative to
  the (tiny) result; 2 - erfc(|z|) for negative z. GELU uses it (1 + erf(x) cancels for x < 0).
- `math.log`, `math.log2`: exponent/mantissa split on the bits (denormals scaled by 2^23 first),
  mantissa in [sqrt(1/2), sqrt(2)), Cephes' degree-9 polynomial; 0 -> -inf, x < 0 -> NaN,
  +inf -> +inf. `math.log1p`: Kahan's log(u) * x / (u - 1) with u = 1 + x.
- `math.powf` whose exponent is a constant multiple of 1/4 up to 8 in magnitude: repeated
  squaring for the integer part (negative exponents through 1/x first, so tiny and huge results
  do not overflow or flush early), sqrt and sqrt(sqrt) for the fraction (x^0.5, LRN's x^0.75);
  -0.0 and -inf follow C99 `pow`. Other exponents stay `math.powf` (libm).

`math.sqrt`/`math.rsqrt` stay (LLVM has instructions); sin/cos are not approximated (an accurate
argument reduction for every float is not cheap: they stay libm calls); f64 stays libm (exact to
0.5 ulp there, and not a hot path of any model onnxc knows).

Accuracy, measured against float64 over random f32 bit patterns (every exponent, denormals
included), dense ranges around the branch points and the special values (the bounds are asserted
in test/python/test_math_approximation.py): exp 1.0 ulp, expm1 1.5, log 0.9, log2 1.3, log1p 2.3,
tanh 1.4, erf 5 ulp and 3e-7 absolute, erfc 5.4 ulp (relative, down to the denormals); constant
powers about 3 + 1.25 |exponent| ulp. +-0, +-inf and NaN give what C99 libm gives.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, math
from mlir.rewrite import RewritePatternSet, walk_and_apply_patterns

from onnxc.transforms.pass_base import ModulePass

__all__ = ["ApproximateMathPass", "approximate_math", "FUNCTIONS", "MAX_INTEGER_POWER"]

F = arith.CmpFPredicate
I = arith.CmpIPredicate

#: The math functions the pass can rewrite (the `functions` option picks among them).
FUNCTIONS: tuple[str, ...] = ("exp", "expm1", "tanh", "erf", "erfc", "log", "log1p", "log2", "powf")

#: Largest magnitude of a constant exponent `math.powf` is expanded for; the error grows with the
#: number of multiplies (about 3 + 1.25 |exponent| ulp, 11.4 measured at -8).
MAX_INTEGER_POWER: int = 8


class _Emitter:
    """Builds f32 (or vector-of-f32) arithmetic at the current insertion point.

    `ty` is the f32 type of the values computed (`f32` or `vector<...xf32>`); integer helpers use
    the i32 type of the same shape. Splat constants are cached per emitter: one op's expansion
    repeats constants such as 1.0 several times, and each arith.constant costs IR and compile time.
    """

    def __init__(self, ty: ir.Type, use_fma: bool) -> None:
        self.ty = ty
        self.use_fma = use_fma
        f32 = ir.F32Type.get()
        i32 = ir.IntegerType.get_signless(32)
        if isinstance(ty, ir.VectorType):
            self.ity: ir.Type = ir.VectorType.get(ty.shape, i32, scalable=ty.scalable_dims)
        else:
            self.ity = i32
        self._f32, self._i32 = f32, i32
        self._consts: dict[tuple[str, float | int], ir.Value] = {}

    # --- constants --------------------------------------------------------------------------

    def f(self, value: float) -> ir.Value:
        """A splat f32 constant of the emitter's shape."""
        key = ("f", value)
        if key not in self._consts:
            attr = ir.FloatAttr.get(self._f32, value)
            if isinstance(self.ty, ir.VectorType):
                attr = ir.DenseElementsAttr.get_splat(self.ty, attr)
            self._consts[key] = arith.constant(self.ty, attr)
        return self._consts[key]

    def i(self, value: int) -> ir.Value:
        """A splat i32 constant of the emitter's shape."""
        key = ("i", value)
        if key not in self._consts:
            attr = ir.IntegerAttr.get(self._i32, value)
            if isinstance(self.ity, ir.VectorType):
                attr = ir.DenseElementsAttr.get_splat(self.ity, attr)
            self._consts[key] = arith.constant(self.ity, attr)
        return self._consts[key]

    # --- arithmetic -------------------------------------------------------------------------

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """a * b + c: `math.fma` (one rounding), or mulf + addf for CPUs without FMA."""
        if self.use_fma:
            return math.fma(a, b, c)
        return arith.addf(arith.mulf(a, b), c)

    def poly(self, x: ir.Value, coeffs: tuple[float, ...]) -> ir.Value:
        """Horner's rule: coeffs[0] x^(k-1) + ... + coeffs[-1], highest degree first."""
        acc = self.f(coeffs[0])
        for c in coeffs[1:]:
            acc = self.fma(acc, x, self.f(c))
        return acc

    def select(self, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        """cond ? a : b, lane by lane (the approximations have no branches)."""
        return arith.select(cond, a, b)

    def clamp(self, x: ir.Value, lo: float, hi: float) -> ir.Value:
        """min(max(x, lo), hi) with NaN -> lo: ordered compares, so the integer conversions that
        follow never see a NaN (`fptosi` of NaN is poison). Callers put NaN back at the end."""
        x = arith.select(arith.cmpf(F.OGT, x, self.f(lo)), x, self.f(lo))
        return arith.select(arith.cmpf(F.OLT, x, self.f(hi)), x, self.f(hi))

    def pow2(self, n: ir.Value) -> ir.Value:
        """2^n for an i32 n in [-126, 127], built in the exponent field."""
        biased = arith.addi(n, self.i(127))
        return arith.bitcast(self.ty, arith.shli(biased, self.i(23)))

    def is_nan(self, x: ir.Value) -> ir.Value:
        """x != x."""
        return arith.cmpf(F.UNO, x, x)


# --- exp ------------------------------------------------------------------------------------

# Cody-Waite split of ln 2: C1 has 9 significant bits, so n * C1 is exact for |n| < 2^15 and
# x - n * C1 is exact (Sterbenz) without FMA; C2 = ln 2 - C1.
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_LOG2E = 1.44269504088896341
# Cephes expf: exp(r) ~ 1 + r + r^2 P(r) on |r| <= ln2 / 2 (degree 7 overall).
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
# exp(x) is +inf for x > 88.7228... and 0 below -103.97 (half the smallest denormal): inputs are
# clamped just outside that range, which keeps n in [-150, 128] and the result exact at the ends.
_EXP_LO = -104.0
_EXP_HI = 88.8


def _reduce_exp(e: _Emitter, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(n as f32, r) with x = n ln2 + r, |r| <= ln2/2 (plus rounding)."""
    n = math.roundeven(arith.mulf(x, e.f(_LOG2E)))
    r = e.fma(n, e.f(-_LN2_HI), x)
    r = e.fma(n, e.f(-_LN2_LO), r)
    return n, r


def _expm1_small(e: _Emitter, r: ir.Value) -> ir.Value:
    """exp(r) - 1 = r + r^2 P(r) for |r| <= ln2/2 (accurate relative to the result)."""
    z = arith.mulf(r, r)
    return e.fma(e.poly(r, _EXP_P), z, r)


def emit_exp(e: _Emitter, x: ir.Value) -> ir.Value:
    """exp(x) for every f32, +-inf and NaN included (see the module docstring)."""
    xc = e.clamp(x, _EXP_LO, _EXP_HI)
    n, r = _reduce_exp(e, xc)
    y = arith.addf(_expm1_small(e, r), e.f(1.0))
    # 2^n in two halves: n in [-150, 128] is outside the normal exponent range at both ends.
    ni = arith.fptosi(e.ity, n)
    n1 = arith.shrsi(ni, e.i(1))
    n2 = arith.subi(ni, n1)
    y = arith.mulf(arith.mulf(y, e.pow2(n1)), e.pow2(n2))
    return e.select(e.is_nan(x), x, y)


def emit_expm1(e: _Emitter, x: ir.Value) -> ir.Value:
    """expm1(x): 2^n expm1(r) + (2^n - 1), as 2 (2^(n-1) expm1(r) + (2^(n-1) - 1/2)).

    The halved form keeps 2^(n-1) representable at n = 128 (x in [88.38, 88.72] has a finite
    result); the final doubling is exact. Below -17.4 the result rounds to -1, so x is clamped at
    -30, far above the exponent range's end.
    """
    xc = e.clamp(x, -30.0, _EXP_HI)
    n, r = _reduce_exp(e, xc)
    p = _expm1_small(e, r)
    half = e.pow2(arith.subi(arith.fptosi(e.ity, n), e.i(1)))
    y = e.fma(p, half, arith.subf(half, e.f(0.5)))
    y = arith.addf(y, y)
    # expm1(+-0) = +-0 (the reduction gives +0 for -0), NaN stays NaN.
    keep = arith.ori(e.is_nan(x), arith.cmpf(F.OEQ, x, e.f(0.0)))
    return e.select(keep, x, y)


# --- tanh -----------------------------------------------------------------------------------

# Cephes tanhf: tanh(x) ~ x + x^3 P(x^2) for |x| < 0.625.
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
_TANH_SMALL = 0.625
# tanh(10) = 1 - 4.1e-9 rounds to 1.0f (tanh(9) = 1 - 3.05e-8 does not: it is nearer 1 - 2^-24);
# larger |x| need no exp, and clamping there keeps exp(2|x|) finite.
_TANH_SATURATE = 10.0


def emit_tanh(e: _Emitter, x: ir.Value) -> ir.Value:
    """tanh(x): polynomial near 0 (relative accuracy), 1 - 2/(exp(2|x|)+1) elsewhere."""
    ax = math.absf(x)
    z = arith.mulf(x, x)
    small = e.fma(arith.mulf(e.poly(z, _TANH_P), z), x, x)
    # exp(2|x|) for 2|x| in [1.25, 20]: no overflow or NaN handling needed.
    t = arith.addf(ax, ax)
    t = arith.select(arith.cmpf(F.OLT, t, e.f(2 * _TANH_SATURATE)), t, e.f(2 * _TANH_SATURATE))
    n, r = _reduce_exp(e, t)
    ex = arith.mulf(arith.addf(_expm1_small(e, r), e.f(1.0)), e.pow2(arith.fptosi(e.ity, n)))
    large = arith.subf(e.f(1.0), arith.divf(e.f(2.0), arith.addf(ex, e.f(1.0))))
    # Unordered compare: NaN takes the polynomial branch, which propagates it. Both branches
    # have the magnitude right; the sign comes from x (the polynomial turns -0 into +0).
    return math.copysign(e.select(arith.cmpf(F.ULT, ax, e.f(_TANH_SMALL)), small, large), x)


# --- erf ------------------------------------------------------------------------------------

# XLA's ErfImpl32 (also Eigen's): erf(x) ~ x P(x^2) / Q(x^2) on |x| <= erfinv(1 - 2^-24).
_ERF_ALPHA = (0.00022905065861350646, 0.0034082910107109506, 0.050955695062380861, 0.18520832239976145, 1.128379143519084)
_ERF_BETA = (
    -1.1791602954361697e-7,
    0.000023547966471313185,
    0.0010179625278914885,
    0.014070470171167667,
    0.11098505178285362,
    0.49746925110067538,
    1.0,
)
# XLA clamps x to +-erfinv(1 - 2^-24) = 3.7439...; the ratio is 0.9999998 there, not 1, so
# beyond erfinv(1 - 2^-25) (where erf rounds to +-1) the sign of x is returned instead.
_ERF_CLAMP = 3.7439211627767994
_ERF_ONE = 3.832506856900711


def emit_erf(e: _Emitter, x: ir.Value) -> ir.Value:
    """erf(x): odd rational approximation; +-1 beyond +-3.8325; NaN and -0.0 pass through."""
    xc = arith.maximumf(arith.minimumf(x, e.f(_ERF_CLAMP)), e.f(-_ERF_CLAMP))
    z = arith.mulf(xc, xc)
    r = arith.divf(arith.mulf(xc, e.poly(z, _ERF_ALPHA)), e.poly(z, _ERF_BETA))
    one = math.copysign(e.f(1.0), x)
    return e.select(arith.cmpf(F.OGE, math.absf(x), e.f(_ERF_ONE)), one, r)


# Numerical Recipes' erfcc (Chebyshev fit): erfc(z) ~ t exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0,
# relative error below 1.2e-7 for every z >= 0; erfc(-z) = 2 - erfc(z).
_ERFC_P = (
    0.17087277,
    -0.82215223,
    1.48851587,
    -1.13520398,
    0.27886807,
    -0.18628806,
    0.09678418,
    0.37409196,
    1.00002368,
    -1.26551223,
)


def emit_erfc(e: _Emitter, x: ir.Value) -> ir.Value:
    """erfc(x), accurate relative to the result in the tail (where 1 - erf(x) cancels)."""
    # erfc(z) < 2^-150 from z = 10.06 on: clamping at 11 keeps z^2 finite (+-inf in, 0 or 2 out);
    # minimumf propagates NaN.
    ax = arith.minimumf(math.absf(x), e.f(11.0))
    t = arith.divf(e.f(1.0), e.fma(ax, e.f(0.5), e.f(1.0)))
    # exp(P(t) - z^2) with the argument carried as hi + lo: rounding it to one f32 (|a| up to
    # ~100) would cost |a| 2^-24 relative error (90 ulp at z = 8). z^2 = sq + sq_lo exactly (fma),
    # P - sq = a + a_lo exactly (TwoSum), and exp(a + lo) = exp(a) (1 + lo) for the tiny lo.
    p = e.poly(t, _ERFC_P)
    sq = arith.mulf(ax, ax)
    sq_lo = e.fma(ax, ax, arith.negf(sq))
    a = arith.subf(p, sq)
    back = arith.subf(a, p)
    a_lo = arith.addf(arith.subf(p, arith.subf(a, back)), arith.subf(arith.negf(sq), back))
    lo = arith.subf(a_lo, sq_lo)
    r = arith.mulf(t, emit_exp(e, a))
    r = e.fma(r, lo, r)
    return e.select(arith.cmpf(F.OLT, x, e.f(0.0)), arith.subf(e.f(2.0), r), r)


# --- log ------------------------------------------------------------------------------------

# Cephes logf: log(1 + f) ~ f - f^2/2 + f^3 P(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1].
_LOG_P = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)
_SQRTHF = 0.707106781186547524
_LOG2EA = 0.44269504088896340736  # log2(e) - 1
_MIN_NORMAL = 2.0**-126


def _log_parts(e: _Emitter, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(k as f32, f, y) with x = 2^k (1 + f), f in [sqrt(1/2)-1, sqrt(2)-1) and log(1+f) = f + y.

    Denormal inputs are scaled by 2^23 first, since their exponent field is 0.
    """
    den = arith.cmpf(F.OLT, x, e.f(_MIN_NORMAL))
    xs = e.select(den, arith.mulf(x, e.f(2.0**23)), x)
    bits = arith.bitcast(e.ity, xs)
    # Exponent of m in [0.5, 1): (bits >> 23) - 126 (x > 0, so no sign bit to mask).
    k = arith.subi(arith.shrui(bits, e.i(23)), e.i(126))
    k = arith.subi(k, e.select(den, e.i(23), e.i(0)))
    m = arith.bitcast(e.ty, arith.ori(arith.andi(bits, e.i(0x007FFFFF)), e.i(0x3F000000)))
    lowm = arith.cmpf(F.OLT, m, e.f(_SQRTHF))
    k = arith.subi(k, e.select(lowm, e.i(1), e.i(0)))
    f = arith.subf(e.select(lowm, arith.addf(m, m), m), e.f(1.0))
    z = arith.mulf(f, f)
    y = arith.mulf(arith.mulf(e.poly(f, _LOG_P), f), z)
    y = e.fma(z, e.f(-0.5), y)
    return arith.sitofp(e.ty, k), f, y


def _log_specials(e: _Emitter, x: ir.Value, y: ir.Value) -> ir.Value:
    """log-family results at the edges: +inf -> +inf, +-0 -> -inf, x < 0 or NaN -> NaN."""
    inf = float("inf")
    y = e.select(arith.cmpf(F.OEQ, x, e.f(inf)), e.f(inf), y)
    y = e.select(arith.cmpf(F.OEQ, x, e.f(0.0)), e.f(-inf), y)
    y = e.select(arith.cmpf(F.OLT, x, e.f(0.0)), e.f(float("nan")), y)
    return e.select(e.is_nan(x), x, y)


def emit_log(e: _Emitter, x: ir.Value) -> ir.Value:
    """Natural log: k ln2 + log(1 + f), ln2 split (Cephes) so k * C1 is exact."""
    k, f, y = _log_parts(e, x)
    y = e.fma(k, e.f(_LN2_LO), y)
    r = arith.addf(f, y)
    r = e.fma(k, e.f(_LN2_HI), r)
    return _log_specials(e, x, r)


def emit_log2(e: _Emitter, x: ir.Value) -> ir.Value:
    """log2: k + (f + y) log2(e), with log2(e) = 1 + LOG2EA so f and y enter exactly (Cephes)."""
    k, f, y = _log_parts(e, x)
    z = arith.mulf(y, e.f(_LOG2EA))
    z = e.fma(f, e.f(_LOG2EA), z)
    z = arith.addf(z, y)
    z = arith.addf(z, f)
    z = arith.addf(z, k)
    return _log_specials(e, x, z)


def emit_log1p(e: _Emitter, x: ir.Value) -> ir.Value:
    """log1p(x) = log(u) * x / (u - 1), u = 1 + x (Kahan): exact where 1 + x rounds to 1."""
    u = arith.addf(x, e.f(1.0))
    lu = emit_log(e, u)
    r = arith.mulf(lu, arith.divf(x, arith.subf(u, e.f(1.0))))
    r = e.select(arith.cmpf(F.OEQ, u, e.f(1.0)), x, r)
    # x = +inf: inf * (inf / inf) would be NaN.
    return e.select(arith.cmpf(F.OEQ, x, e.f(float("inf"))), x, r)


# --- powf with a constant exponent -------------------------------------------------------------


def _ipow(x: ir.Value, n: int) -> ir.Value:
    """x^n, n >= 1, by repeated squaring."""
    result: ir.Value | None = None
    base = x
    while True:
        if n & 1:
            result = base if result is None else arith.mulf(result, base)
        n >>= 1
        if not n:
            break
        base = arith.mulf(base, base)
    assert result is not None
    return result


def constant_exponent(value: float) -> bool:
    """Whether `math.powf(x, value)` is expanded: a multiple of 1/4 with |value| <= the bound."""
    if not pymath.isfinite(value):
        return False
    quarters = value * 4
    return quarters == int(quarters) and abs(value) <= MAX_INTEGER_POWER


def emit_powf_const(e: _Emitter, x: ir.Value, value: float) -> ir.Value:
    """x^value for a constant multiple of 1/4 (see `constant_exponent`).

    x^(n + f) = x^n * sqrt(x)^[f >= 1/2] * sqrt(sqrt(x))^[f in {1/4, 3/4}]; a negative exponent
    uses 1/x (integer part) and 1/(fraction part), so tiny and huge results neither overflow nor
    flush early in an intermediate.
    """
    if value == 0:
        return e.f(1.0)  # pow(x, 0) = 1 for every x, NaN included
    n = int(abs(value))
    frac = abs(value) - n
    if frac == 0:
        base = x if value > 0 else arith.divf(e.f(1.0), x)
        return _ipow(base, n)
    # pow(-0, y) = +0 (y > 0) / +inf (y < 0) for y not an odd integer, where sqrt(-0) = -0:
    # adding +0 turns -0 into +0 and changes nothing else. pow(-inf, y) = +inf (y > 0) / +0
    # (y < 0), where sqrt(-inf) is NaN. A negative finite x gives NaN through sqrt, as pow does.
    xp = arith.addf(x, e.f(0.0))
    root = math.sqrt(xp)
    parts: list[ir.Value] = []
    if frac >= 0.5:
        parts.append(root)
    if frac in (0.25, 0.75):
        parts.append(math.sqrt(root))
    part = parts[0] if len(parts) == 1 else arith.mulf(parts[0], parts[1])
    if value > 0:
        r = part if n == 0 else arith.mulf(_ipow(xp, n), part)
        at_neg_inf = float("inf")
    else:
        inv_part = arith.divf(e.f(1.0), part)
        r = inv_part if n == 0 else arith.mulf(_ipow(arith.divf(e.f(1.0), xp), n), inv_part)
        at_neg_inf = 0.0
    return e.select(arith.cmpf(F.OEQ, x, e.f(float("-inf"))), e.f(at_neg_inf), r)


# --- the patterns -------------------------------------------------------------------------------


def _f32_shape_of(ty: ir.Type) -> ir.Type | None:
    """The f32 type of `ty`'s shape (f32 or vector<...xf32>) when `ty` is f32/f16/bf16 based."""
    elem = ty.element_type if isinstance(ty, ir.VectorType) else ty
    if not isinstance(elem, (ir.F32Type, ir.F16Type, ir.BF16Type)):
        return None
    f32 = ir.F32Type.get()
    if isinstance(ty, ir.VectorType):
        return ir.VectorType.get(ty.shape, f32, scalable=ty.scalable_dims)
    return f32


def _constant_value(v: ir.Value) -> float | None:
    """The splat value of a constant float operand, or None."""
    owner = v.owner
    if not isinstance(owner, ir.OpView) or owner.operation.name != "arith.constant":
        return None
    attr = owner.operation.attributes["value"]
    if isinstance(attr, ir.FloatAttr):
        return attr.value
    if isinstance(attr, ir.DenseFPElementsAttr) and attr.is_splat:
        return ir.FloatAttr(attr.get_splat_value()).value
    return None


@dataclass(frozen=True)
class _Config:
    functions: frozenset[str]
    narrow_floats: bool
    use_fma: bool


_UNARY: dict[str, Callable[[_Emitter, ir.Value], ir.Value]] = {
    "math.exp": emit_exp,
    "math.expm1": emit_expm1,
    "math.tanh": emit_tanh,
    "math.erf": emit_erf,
    "math.erfc": emit_erfc,
    "math.log": emit_log,
    "math.log1p": emit_log1p,
    "math.log2": emit_log2,
}


def _make_pattern(name: str, config: _Config) -> Callable[[ir.Operation, object], bool]:
    """A rewrite pattern for `name` ("math.exp", ..., "math.powf") under `config`."""

    def pattern(op: ir.Operation | ir.OpView, rewriter: object) -> bool:
        """Replace one math op by its polynomial expansion; True (no match) when not applicable."""
        op = op.operation
        ty = op.results[0].type
        wide = _f32_shape_of(ty)
        if wide is None:
            return True
        narrow = ty != wide
        if narrow and not config.narrow_floats:
            return True
        exponent: float | None = None
        if name == "math.powf":
            exponent = _constant_value(op.operands[1])
            if exponent is None or not constant_exponent(exponent):
                return True
        with rewriter.ip, op.location:  # type: ignore[attr-defined]
            x = op.operands[0]
            if narrow:
                x = arith.extf(wide, x)
            e = _Emitter(wide, config.use_fma)
            y = emit_powf_const(e, x, exponent) if exponent is not None else _UNARY[name](e, x)
            if narrow:
                y = arith.truncf(ty, y)
            rewriter.replace_op(op, [y])  # type: ignore[attr-defined]
        return False

    return pattern


def approximate_math(
    op: ir.Operation | ir.Module,
    functions: tuple[str, ...] = FUNCTIONS,
    narrow_floats: bool = True,
    use_fma: bool = True,
) -> None:
    """Rewrite the selected math ops under `op` (see the module docstring), in place.

    One walk (`walk_and_apply_patterns`), not the greedy driver: an expansion contains no op the
    patterns match, so nothing needs revisiting, and a greedy run would also fold and re-scan the
    whole module (compile time grows with model size).
    """
    unknown = sorted(set(functions) - set(FUNCTIONS))
    if unknown:
        from onnxc.errors import OnnxcError

        raise OnnxcError(f"onnxc-approximate-math: unknown function(s) {', '.join(unknown)} (known: {', '.join(FUNCTIONS)})")
    target = op.operation if isinstance(op, ir.Module) else op
    config = _Config(frozenset(functions), narrow_floats, use_fma)
    patterns = RewritePatternSet(target.context)
    for fn in functions:
        patterns.add(f"math.{fn}", _make_pattern(f"math.{fn}", config))
    walk_and_apply_patterns(target, patterns.freeze())


@dataclass(frozen=True)
class ApproximateMathPass(ModulePass):
    """Rewrite math.exp/expm1/tanh/erf/erfc/log/log1p/log2/powf as arith + math.fma polynomials.

    f32, f16 and bf16 (through f32), scalar or vector; powf only with a constant exponent that
    is a multiple of 1/4. The result vectorizes like any elementwise body: no libm calls.

    functions: which math ops to rewrite (default: all of `FUNCTIONS`).
    narrow_floats: also rewrite f16/bf16 ops, computing in f32 (False leaves them alone).
    use_fma: emit math.fma (False: mulf + addf, for CPUs without FMA, where llvm.fma is a libm call).
    """

    name = "onnxc-approximate-math"

    functions: tuple[str, ...] = FUNCTIONS
    narrow_floats: bool = True
    use_fma: bool = True

    def run(self, module: ir.Operation) -> None:
        approximate_math(module, self.functions, self.narrow_floats, self.use_fma)
