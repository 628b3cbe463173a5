"""Element types narrower than a byte or without LLVM arithmetic: float8 (E4M3FN, E4M3FNUZ,
E5M2, E5M2FNUZ, E8M0), float4 E2M1, and int4/uint4/int2/uint2.

Representation: after lowering, a tensor of any of these types is a tensor of `i8`, one
element per byte, holding the type's bit pattern in the low bits (zero-extended), which is how
numpy's `ml_dtypes` stores them, so arrays cross the JIT boundary as byte views. Only
conversions compute on them (Cast, CastLike, QuantizeLinear, DequantizeLinear); data movement
ops work on the bytes unchanged; the pre-check refuses every other op on them.

Conversions follow `ml_dtypes` (what the ONNX reference uses): floats round to nearest even;
out-of-range values become NaN (E4M3FN, the FNUZ types), infinity (E5M2) or the largest value
(E2M1); with ONNX `saturate` they clamp to the largest finite value first. Integers wrap to
their low bits (float sources truncate toward zero first). Encoding works on the f32 bit
pattern: the exponent gives the quantum 2^(max(e, emin) - mbits), `roundeven(|x| / quantum)`
is then exactly the code's magnitude (the carry into the exponent field comes for free).
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import arith, math

I = arith.CmpIPredicate
F = arith.CmpFPredicate


@dataclasses.dataclass(frozen=True)
class MiniFloat:
    """A small float format: exponent/mantissa bits, bias, largest finite code, and how it
    spells NaN and infinity (None: it has none)."""

    ebits: int
    mbits: int
    bias: int
    max_code: int
    inf_code: int | None
    nan_code: int | None  # positive NaN code (FN types OR the sign in; FNUZ: 0x80 alone)
    fnuz: bool = False

    @property
    def sign_shift(self) -> int:
        return self.ebits + self.mbits

    @property
    def emin(self) -> int:
        return 1 - self.bias


MINIFLOATS: dict[str, MiniFloat] = {
    "f8E4M3FN": MiniFloat(4, 3, 7, 0x7E, None, 0x7F),
    "f8E4M3FNUZ": MiniFloat(4, 3, 8, 0x7F, None, 0x80, fnuz=True),
    "f8E5M2": MiniFloat(5, 2, 15, 0x7B, 0x7C, 0x7E),
    "f8E5M2FNUZ": MiniFloat(5, 2, 16, 0x7F, None, 0x80, fnuz=True),
    "f4E2M1FN": MiniFloat(2, 1, 1, 0x7, None, None),
}

SMALL_INTS: dict[str, tuple[int, bool]] = {"i4": (4, True), "ui4": (4, False), "i2": (2, True), "ui2": (2, False)}


E8M0 = "f8E8M0FNU"


def minifloat_of(t: ir.Type) -> MiniFloat | None:
    """The encoding of a float8/float4 element type of `MINIFLOATS` (None for other types),
    found by comparing `t` with each type by value (the table is keyed by the types' names
    because MLIR types exist only inside a context)."""
    for name, mf in MINIFLOATS.items():
        if t == ir.Type.parse(name):
            return mf
    return None


def small_int_of(t: ir.Type) -> tuple[int, bool] | None:
    """(bits, signed) of an int4/uint4/int2/uint2 element type (`i4`, `ui4`, `i2`, `ui2`), else None."""
    if not isinstance(t, ir.IntegerType):
        return None
    it = ir.IntegerType(t)
    if it.width not in (2, 4) or not (it.is_signless or it.is_unsigned):
        return None
    return it.width, it.is_signless


def is_e8m0(t: ir.Type) -> bool:
    """Whether `t` is float8 E8M0 (`f8E8M0FNU`, a power-of-two scale)."""
    return t == ir.Float8E8M0FNUType.get()


def is_exotic(t: ir.Type) -> bool:
    """Whether an element type is one of the byte-stored types of this module."""
    return minifloat_of(t) is not None or small_int_of(t) is not None or is_e8m0(t)


def _i32(v: int) -> ir.Value:
    t = ir.IntegerType.get_signless(32)
    return arith.constant(t, ir.IntegerAttr.get(t, v))


def _f32(v: float) -> ir.Value:
    return arith.constant(ir.F32Type.get(), v)


def _pow2(k: ir.Value) -> ir.Value:
    """2^k as f32 for an i32 k in the normal range, built from the bit pattern (exact)."""
    bits = arith.shli(arith.addi(k, _i32(127)), _i32(23))
    return arith.bitcast(ir.F32Type.get(), bits)


def encode(x: ir.Value, fmt: MiniFloat, saturate: bool) -> ir.Value:
    """An f32 scalar as the code (i8) of `fmt`."""
    i32 = ir.IntegerType.get_signless(32)
    i8 = ir.IntegerType.get_signless(8)
    is_nan = arith.cmpf(F.UNO, x, x)
    max_val = decode_const(fmt.max_code, fmt)
    if saturate or (fmt.inf_code is None and fmt.nan_code is None):
        # Clamp (NaN stays NaN); float4 always saturates, as ml_dtypes does.
        x = arith.select(is_nan, x, arith.maximumf(arith.minimumf(x, _f32(max_val)), _f32(-max_val)))
    bits = arith.bitcast(i32, x)
    sign = arith.shrui(bits, _i32(31))
    abs_bits = arith.andi(bits, _i32(0x7FFFFFFF))
    is_inf = arith.cmpi(I.eq, abs_bits, _i32(0x7F800000))
    ax = math.absf(x)
    e = arith.subi(arith.andi(arith.shrui(abs_bits, _i32(23)), _i32(0xFF)), _i32(127))
    e_eff = arith.maxsi(e, _i32(fmt.emin))
    # Infinity and NaN would overflow the integer conversion: give them a harmless magnitude.
    safe = arith.select(arith.ori(is_inf, is_nan), _f32(0.0), ax)
    m = math.roundeven(arith.divf(safe, _pow2(arith.subi(e_eff, _i32(fmt.mbits)))))
    code = arith.addi(arith.shli(arith.subi(e_eff, _i32(fmt.emin)), _i32(fmt.mbits)), arith.fptoui(i32, m))
    over = arith.ori(arith.cmpi(I.sgt, code, _i32(fmt.max_code)), is_inf)
    if fmt.inf_code is not None:
        over_code = _i32(fmt.inf_code)
    elif fmt.nan_code is not None:
        over_code = _i32(fmt.nan_code)
    else:
        over_code = _i32(fmt.max_code)
    code = arith.select(over, over_code, code)
    signed = arith.ori(code, arith.shli(sign, _i32(fmt.sign_shift)))
    if fmt.fnuz:
        # No negative zero; the only NaN is 0x80.
        signed = arith.select(arith.cmpi(I.eq, code, _i32(0)), _i32(0), signed)
        signed = arith.select(arith.cmpi(I.eq, code, _i32(0x80)), _i32(0x80), signed)
    if fmt.nan_code is not None:
        nan = _i32(fmt.nan_code) if fmt.fnuz else arith.ori(_i32(fmt.nan_code), arith.shli(sign, _i32(fmt.sign_shift)))
    else:
        nan = _i32(1 << fmt.sign_shift)  # E2M1 has no NaN: ml_dtypes gives -0
    signed = arith.select(is_nan, nan, signed)
    return arith.trunci(i8, signed)


def decode_const(code: int, fmt: MiniFloat) -> float:
    """The value of a non-negative finite code (Python side)."""
    e = code >> fmt.mbits
    f = code & ((1 << fmt.mbits) - 1)
    if e == 0:
        return f * 2.0 ** (fmt.emin - fmt.mbits)
    return (1 + f / (1 << fmt.mbits)) * 2.0 ** (e - fmt.bias)


def decode(b: ir.Value, fmt: MiniFloat) -> ir.Value:
    """The code b (i8) of `fmt` as an f32 scalar."""
    i32 = ir.IntegerType.get_signless(32)
    c = arith.extui(i32, b)
    mag = arith.andi(c, _i32((1 << fmt.sign_shift) - 1))
    sign = arith.andi(arith.shrui(c, _i32(fmt.sign_shift)), _i32(1))
    ef = arith.shrui(mag, _i32(fmt.mbits))
    fr = arith.andi(mag, _i32((1 << fmt.mbits) - 1))
    normal = arith.cmpi(I.ne, ef, _i32(0))
    sig = arith.addi(fr, arith.select(normal, _i32(1 << fmt.mbits), _i32(0)))
    k = arith.subi(arith.maxsi(ef, _i32(1)), _i32(fmt.bias + fmt.mbits))
    v = arith.mulf(arith.uitofp(ir.F32Type.get(), sig), _pow2(k))
    v = arith.select(arith.cmpi(I.ne, sign, _i32(0)), arith.negf(v), v)
    nan = _f32(float("nan"))
    if fmt.fnuz:
        v = arith.select(arith.cmpi(I.eq, c, _i32(0x80)), nan, v)
    elif fmt.inf_code is not None:
        top = arith.cmpi(I.eq, ef, _i32((1 << fmt.ebits) - 1))
        inf = arith.select(arith.cmpi(I.ne, sign, _i32(0)), _f32(float("-inf")), _f32(float("inf")))
        v = arith.select(top, arith.select(arith.cmpi(I.eq, fr, _i32(0)), inf, nan), v)
    elif fmt.nan_code is not None:
        v = arith.select(arith.cmpi(I.eq, mag, _i32(fmt.nan_code)), nan, v)
    return v


def small_int_to_i32(b: ir.Value, bits: int, signed: bool) -> ir.Value:
    """A stored int4/uint4/int2/uint2 byte as an i32 value."""
    i32 = ir.IntegerType.get_signless(32)
    c = arith.andi(arith.extui(i32, b), _i32((1 << bits) - 1))
    if signed:
        c = arith.shrsi(arith.shli(c, _i32(32 - bits)), _i32(32 - bits))
    return c


def i64_to_small_int(v: ir.Value, bits: int) -> ir.Value:
    """The low `bits` bits of an integer scalar, stored in a byte."""
    i8 = ir.IntegerType.get_signless(8)
    w = ir.IntegerType(v.type).width
    b = arith.trunci(i8, v) if w > 8 else (arith.extui(i8, v) if w < 8 else v)
    return arith.andi(b, arith.constant(i8, ir.IntegerAttr.get(i8, (1 << bits) - 1)))


def encode_e8m0(x: ir.Value, saturate: bool, round_mode: str) -> ir.Value:
    """An f32 scalar as float8 E8M0 (a biased power of two; the sign is dropped), rounding
    the mantissa away (`up`), by truncation (`down`) or to nearest as the ONNX helper does;
    NaN and infinity give 0xFF; with `saturate`, rounding never passes 0xFE."""
    i32 = ir.IntegerType.get_signless(32)
    i8 = ir.IntegerType.get_signless(8)
    bits = arith.bitcast(i32, x)
    e = arith.andi(arith.shrui(bits, _i32(23)), _i32(0xFF))
    special = arith.cmpi(I.eq, e, _i32(0xFF))
    if round_mode == "nearest":
        g = arith.cmpi(I.ne, arith.andi(bits, _i32(0x400000)), _i32(0))
        rr = arith.cmpi(I.ne, arith.andi(bits, _i32(0x200000)), _i32(0))
        st = arith.cmpi(I.ne, arith.andi(bits, _i32(0x1FFFFF)), _i32(0))
        lsb = arith.cmpi(I.ugt, e, _i32(0))
        up = arith.andi(g, arith.ori(rr, arith.ori(st, lsb)))
    elif round_mode == "up":
        up = arith.cmpi(I.ne, arith.andi(bits, _i32(0x7FFFFF)), _i32(0))
    else:
        up = arith.cmpi(I.ne, _i32(0), _i32(0))
    if saturate:
        up = arith.andi(up, arith.cmpi(I.ne, e, _i32(0xFE)))
    e = arith.addi(e, arith.extui(i32, up))
    return arith.trunci(i8, arith.select(special, _i32(0xFF), e))


def decode_e8m0(b: ir.Value) -> ir.Value:
    """A float8 E8M0 code (i8) as f32: 2^(code - 127), NaN for 0xFF."""
    i32 = ir.IntegerType.get_signless(32)
    c = arith.extui(i32, b)
    bits = arith.select(arith.cmpi(I.eq, c, _i32(0)), _i32(0x00400000), arith.shli(c, _i32(23)))
    v = arith.bitcast(ir.F32Type.get(), bits)
    return arith.select(arith.cmpi(I.eq, c, _i32(0xFF)), _f32(float("nan")), v)
