"""Random number ops: RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial and
training-mode Dropout, from a counter-based generator built in the lowered code.

The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC 2011; the Random123 library's `philox4x32`): ten rounds of two 32x32->64-bit multiplies
(as i64 multiplies) and xors of a 128-bit counter under a 64-bit key. Why counter-based: an
element's random words are a pure function of (key, counter), so every output element is
computed independently inside one parallel `linalg.generic` (pure arith ops: it tiles and
vectorizes like any elementwise op) and no generator state has to live anywhere.

- **Counter** of an element: (linear element index, low and high 32 bits; the op's stream
  offset; 0). Each element uses the four words of its own counter block, so results do not
  depend on tiling, vector width or the order elements are computed in.
- **Key**: from the op's `seed` attribute when it has one (the 64 bits of the float64 seed,
  or of the int64 seed of Dropout), stream offset 0: a seeded op's output is a pure function of
  (seed, shape, dtype): the same on every run, every compile and every machine. Without a seed,
  the key is drawn once per compilation (`secrets`) and each unseeded op of the module gets its
  own stream offset, so two ops never share numbers; the values then change from one compile to
  the next but not between runs of one compiled model (no state is kept across calls, and an
  unseeded op inside a loop body gives the same numbers on each iteration).
- **Floats** in [0, 1) take as many top bits of a word as the type has significand bits (24 for
  f32, 11 for f16, 8 for bf16, 53 from two words for f64), so they are exact in the type and
  never round up to 1. Normals come from Box-Muller on two uniforms (four words for f64),
  computed in f32 (f64 for f64 results).

Reference streams cannot be matched: onnx's backend cases for Bernoulli and for Dropout with a
non-zero ratio store one draw of numpy's MT19937; what the suite can check (shapes, types, the
zero-ratio Dropout cases) passes, and the statistics are checked in test_random_ops.py.
"""

from __future__ import annotations

import math
import secrets
import struct
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import arith, tensor
from mlir.dialects import math as mmath

# Imported first so that elementwise's inference-only Dropout registers before this module's
# Dropout pattern replaces it, whatever imports this module first.
from onnxc.transforms.lowering import elementwise as _elementwise  # noqa: F401
from onnxc.transforms.lowering.common import (
    Dim,
    Node,
    const_index,
    const_scalar,
    convert_element,
    convert_scalar,
    dim_value,
    elem_of,
    element_supported,
    empty,
    generic,
    identity_map,
    index_of,
    is_float,
    lowers,
    scalar_of,
    shape_of,
    static_shape,
)
from onnxc.transforms.lowering.data_dependent import for_range

# Philox4x32 multipliers and Weyl key increments (Random123's PHILOX_M4x32_0/1, PHILOX_W32_0/1).
PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
MASK32 = 0xFFFFFFFF


def _unit_bits(elem: ir.Type) -> int | None:
    """Significand bits (with the implicit one) of the float types a uniform is made in (None
    for the others); a function because MLIR types exist only inside a context."""
    for t, bits in ((ir.F16Type.get(), 11), (ir.BF16Type.get(), 8), (ir.F32Type.get(), 24)):
        if elem == t:
            return bits
    return None


def philox4x32_round_keys(key: tuple[int, int]) -> list[tuple[int, int]]:
    """The key of each of the ten rounds (the key is bumped by the Weyl constants between rounds);
    computed at compile time, so the generated code holds them as constants."""
    k0, k1 = key[0] & MASK32, key[1] & MASK32
    out = []
    for _ in range(PHILOX_ROUNDS):
        out.append((k0, k1))
        k0, k1 = (k0 + PHILOX_W0) & MASK32, (k1 + PHILOX_W1) & MASK32
    return out


def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def _c32(v: int) -> ir.Value:
    return const_scalar(v & MASK32, _i32())


def _mulhilo(m: int, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(low, high) 32-bit halves of the 64-bit product m * x (unsigned). Through an i64 multiply
    rather than `arith.mului_extended`: LLVM 22's arith-to-llvm leaves a vectorized
    mului_extended of rank > 1 (`vector<1x16xi32>`) unconverted, while i64 arithmetic is unrolled
    to 1-D vectors like any elementwise op."""
    i64 = ir.IntegerType.get_signless(64)
    p = arith.muli(arith.extui(i64, x), const_scalar(m, i64))
    return arith.trunci(_i32(), p), arith.trunci(_i32(), arith.shrui(p, const_scalar(32, i64)))


def philox4x32(counter: Sequence[ir.Value], key: tuple[int, int]) -> list[ir.Value]:
    """Philox4x32-10 of four i32 counter words under a compile-time key: four random i32 words."""
    c0, c1, c2, c3 = counter
    for k0, k1 in philox4x32_round_keys(key):
        lo0, hi0 = _mulhilo(PHILOX_M0, c0)
        lo1, hi1 = _mulhilo(PHILOX_M1, c2)
        c0, c1, c2, c3 = (
            arith.xori(arith.xori(hi1, c1), _c32(k0)),
            lo1,
            arith.xori(arith.xori(hi0, c3), _c32(k1)),
            lo0,
        )
    return [c0, c1, c2, c3]


# --- streams ----------------------------------------------------------------------------------


@dataclass
class _CompileStreams:
    """Per-compilation generator choices: the default key of unseeded ops and the next stream."""

    key: tuple[int, int] = field(default_factory=lambda: (secrets.randbits(32), secrets.randbits(32)))
    next_offset: int = 1


# One entry per running lowering (a `Lowering` object, i.e. one compilation of one module).
_STREAMS: "weakref.WeakKeyDictionary[object, _CompileStreams]" = weakref.WeakKeyDictionary()


def _seed_key(seed: float | int, integer: bool) -> tuple[int, int]:
    bits = struct.unpack("<Q", struct.pack("<q", int(seed)) if integer else struct.pack("<d", float(seed)))[0]
    return bits & MASK32, bits >> 32


def stream_of(node: Node, integer_seed: bool = False) -> tuple[tuple[int, int], int]:
    """(key, stream offset) of a random op: from its seed, else this compilation's default key
    and a fresh offset."""
    if node.has_attr("seed"):
        return _seed_key(node.attr("seed"), integer_seed), 0
    if node.lowering is None:  # only patterns' check functions run without a lowering
        return _CompileStreams().key, 1
    streams = _STREAMS.setdefault(node.lowering, _CompileStreams())
    offset = streams.next_offset
    streams.next_offset += 1
    return streams.key, offset


# --- scalars from random words ------------------------------------------------------------------


def _linear_index(shape: Sequence[Dim]) -> ir.Value:
    """Row-major linear index (index type) of the current element of a generic over `shape`."""
    lin: ir.Value | None = None
    for k, d in enumerate(shape):
        ik = index_of(k)
        lin = ik if lin is None else arith.addi(arith.muli(lin, dim_value(d)), ik)
    return lin if lin is not None else const_index(0)


def element_words(shape: Sequence[Dim], key: tuple[int, int], offset: int) -> list[ir.Value]:
    """Inside a generic over `shape`: the four random i32 words of the current element."""
    i64 = ir.IntegerType.get_signless(64)
    lin = arith.index_cast(i64, _linear_index(shape))
    lo = arith.trunci(_i32(), lin)
    hi = arith.trunci(_i32(), arith.shrui(lin, const_scalar(32, i64)))
    return philox4x32([lo, hi, _c32(offset), _c32(0)], key)


def _compute_type(elem: ir.Type) -> ir.Type:
    """The float type random values are computed in: f64 for f64 results, else f32."""
    return ir.F64Type.get() if elem == ir.F64Type.get() else ir.F32Type.get()


def unit_float(words: Sequence[ir.Value], elem: ir.Type) -> ir.Value:
    """A uniform float in [0, 1) of type `elem` from random words (one, two for f64): the top
    significand-many bits times 2^-bits, so it is exact and below 1."""
    if elem == ir.F64Type.get():
        i64 = ir.IntegerType.get_signless(64)
        hi = arith.extui(i64, arith.shrui(words[0], _c32(5)))  # 27 bits
        lo = arith.extui(i64, arith.shrui(words[1], _c32(6)))  # 26 bits
        m = arith.ori(arith.shli(hi, const_scalar(26, i64)), lo)
        return arith.mulf(arith.uitofp(elem, m), const_scalar(2.0**-53, elem))
    bits = _unit_bits(elem)
    if bits is None:
        raise ValueError(f"no uniform floats of type {elem}")
    f32 = ir.F32Type.get()
    u = arith.mulf(arith.uitofp(f32, arith.shrui(words[0], _c32(32 - bits))), const_scalar(2.0**-bits, f32))
    return u if elem == f32 else arith.truncf(elem, u)  # exact: `bits` fit the type


def standard_normal(words: Sequence[ir.Value], ctype: ir.Type) -> ir.Value:
    """A standard normal of type `ctype` (f32 or f64) by Box-Muller from two uniforms."""
    per = 2 if ctype == ir.F64Type.get() else 1
    u1 = arith.subf(const_scalar(1.0, ctype), unit_float(words[:per], ctype))  # (0, 1]: log is finite
    u2 = unit_float(words[per : 2 * per], ctype)
    radius = mmath.sqrt(arith.mulf(const_scalar(-2.0, ctype), mmath.log(u1)))
    return arith.mulf(radius, mmath.cos(arith.mulf(const_scalar(2.0 * math.pi, ctype), u2)))


def _to_elem(x: ir.Value, elem: ir.Type) -> ir.Value:
    return x if x.type == elem else arith.truncf(elem, x)


# --- RandomUniform / RandomNormal (and Like) ---------------------------------------------------


def _check_random(node: Node) -> str | None:
    elem = node.out_elem(0)
    if elem not in (ir.F16Type.get(), ir.BF16Type.get(), ir.F32Type.get(), ir.F64Type.get()):
        return f"random values of type {elem} are not lowered (float16, bfloat16, float, double)"
    t = node.onnx_result_types[0]
    if node.op_type in ("RandomUniform", "RandomNormal") and not (
        isinstance(t, ir.RankedTensorType) and all(d is not None for d in static_shape(t))
    ):
        return "the output shape (the `shape` attribute) must be known"
    return None


def _random_tensor(node: Node, shape: list[Dim], scalar: Callable[[list[ir.Value]], ir.Value]) -> ir.Value:
    """A generic over `shape` whose element is `scalar(words)` (words of that element)."""
    key, offset = stream_of(node)
    elem = elem_of(node.result_type(0))
    r = len(shape)

    def body(args: list[ir.Value]) -> list[ir.Value]:
        return [scalar(element_words(shape, key, offset))]

    return generic([], [empty(shape, elem)], [identity_map(r)], ["parallel"] * r, body)[0]


def _result_shape(node: Node) -> list[Dim]:
    if node.op_type.endswith("Like"):
        return shape_of(node.input(0))
    return [int(d) for d in static_shape(node.result_type(0))]  # type: ignore[arg-type]


@lowers("RandomUniform", "RandomUniformLike", check=_check_random)
def lower_random_uniform(node: Node) -> list[ir.Value]:
    """RandomUniform(Like): low + u * (high - low), u uniform in [0, 1)."""
    elem = elem_of(node.result_type(0))
    ctype = _compute_type(elem)
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))

    def scalar(words: list[ir.Value]) -> ir.Value:
        u = unit_float(words, ctype)
        return _to_elem(arith.addf(const_scalar(low, ctype), arith.mulf(u, const_scalar(high - low, ctype))), elem)

    return [_random_tensor(node, _result_shape(node), scalar)]


@lowers("RandomNormal", "RandomNormalLike", check=_check_random)
def lower_random_normal(node: Node) -> list[ir.Value]:
    """RandomNormal(Like): mean + scale * z, z standard normal (Box-Muller)."""
    elem = elem_of(node.result_type(0))
    ctype = _compute_type(elem)
    mean, scale = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0))

    def scalar(words: list[ir.Value]) -> ir.Value:
        z = standard_normal(words, ctype)
        return _to_elem(arith.addf(const_scalar(mean, ctype), arith.mulf(z, const_scalar(scale, ctype))), elem)

    return [_random_tensor(node, _result_shape(node), scalar)]


# --- Bernoulli --------------------------------------------------------------------------------------


def _check_bernoulli(node: Node) -> str | None:
    if not is_float(node.in_elem(0)):
        return f"probabilities of type {node.in_elem(0)} are not lowered"
    if not element_supported(node.out_elem(0)):
        return f"results of type {node.out_elem(0)} are not lowered"
    return None


@lowers("Bernoulli", check=_check_bernoulli)
def lower_bernoulli(node: Node) -> list[ir.Value]:
    """Bernoulli: 1 where u < p (u uniform in [0, 1), p the input probability), else 0, in the
    output type; computed in f64 for f64 probabilities, else f32."""
    x = node.input(0)
    src = node.in_elem(0)
    ctype = _compute_type(src)
    out_onnx = node.out_elem(0)
    elem = convert_element(out_onnx)
    shape = shape_of(x)
    key, offset = stream_of(node)
    r = len(shape)

    def body(args: list[ir.Value]) -> list[ir.Value]:
        p = convert_scalar(args[0], src, ctype)
        u = unit_float(element_words(shape, key, offset), ctype)
        hit = arith.cmpf(arith.CmpFPredicate.OLT, u, p)
        return [convert_scalar(hit, ir.IntegerType.get_signless(1), out_onnx)]

    return generic([x], [empty(shape, elem)], [identity_map(r)] * 2, ["parallel"] * r, body)


# --- Multinomial ------------------------------------------------------------------------------------


def _check_multinomial(node: Node) -> str | None:
    t = node.onnx_types[0]
    if not is_float(node.in_elem(0)):
        return f"log-probabilities of type {node.in_elem(0)} are not lowered"
    if not isinstance(t, ir.RankedTensorType) or ir.RankedTensorType(t).rank != 2:
        return "the input must be a [batch, classes] tensor"
    if str(node.out_elem(0)) not in ("i32", "i64"):
        return f"sample indices of type {node.out_elem(0)} are not lowered (int32, int64)"
    if int(node.attr("sample_size", 1)) < 1:
        return "sample_size must be at least 1"
    return None


@lowers("Multinomial", check=_check_multinomial)
def lower_multinomial(node: Node) -> list[ir.Value]:
    """Multinomial: for each batch row and sample, the class index c drawn with probability
    softmax(x[b])[c]: with u uniform, c = #{j : cumsum_j(exp(x - max)) <= u * total}, clamped to
    the last class (an inverse-CDF lookup; the sum runs in f64 for f64 inputs, else f32)."""
    x = node.input(0)
    src = node.in_elem(0)
    ctype = _compute_type(src)
    out = convert_element(node.out_elem(0))
    batch, classes = shape_of(x)
    n_samples = int(node.attr("sample_size", 1))
    shape: list[Dim] = [batch, n_samples]
    key, offset = stream_of(node)
    n_cls = dim_value(classes)

    def body(args: list[ir.Value]) -> list[ir.Value]:
        b = index_of(0)

        def logit(j: ir.Value) -> ir.Value:
            return convert_scalar(tensor.extract(x, [b, j]), src, ctype)

        (mx,) = for_range(n_cls, [const_scalar(float("-inf"), ctype)], lambda j, c: [arith.maximumf(c[0], logit(j))])
        (total,) = for_range(n_cls, [const_scalar(0.0, ctype)], lambda j, c: [arith.addf(c[0], mmath.exp(arith.subf(logit(j), mx)))])
        target = arith.mulf(unit_float(element_words(shape, key, offset), ctype), total)

        def step(j: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
            acc = arith.addf(c[0], mmath.exp(arith.subf(logit(j), mx)))
            below = arith.cmpf(arith.CmpFPredicate.OLE, acc, target)
            return [acc, arith.addi(c[1], arith.select(below, const_index(1), const_index(0)))]

        _, count = for_range(n_cls, [const_scalar(0.0, ctype), const_index(0)], step)
        idx = arith.minui(count, arith.subi(n_cls, const_index(1)))  # rounding can leave u*total >= the sum
        return [arith.index_cast(out, idx)]

    return generic([], [empty(shape, out)], [identity_map(2)], ["parallel", "parallel"], body)


# --- Dropout ----------------------------------------------------------------------------------------


def _training_const(node: Node) -> bool | None:
    """The constant training_mode (False when omitted), or None when it is a run-time value."""
    if not node.has(2):
        return False
    c = node.const(2)
    return None if c is None else bool(c.reshape(-1)[0])


def _check_dropout(node: Node) -> str | None:
    if not is_float(node.in_elem(0)) or str(node.in_elem(0)) not in ("f16", "bf16", "f32", "f64"):
        return f"data of type {node.in_elem(0)} is not lowered"
    if node.has(1) and not is_float(node.in_elem(1)):
        return f"a ratio of type {node.in_elem(1)} is not lowered"
    ratio = node.const(1)
    if _training_const(node) is not False and ratio is not None and not 0.0 <= float(ratio.reshape(-1)[0]) < 1.0:
        return f"ratio {float(ratio.reshape(-1)[0])} is outside [0, 1)"
    return None


@lowers("Dropout", check=_check_dropout)
def lower_dropout(node: Node) -> list[ir.Value | None]:
    """Dropout: at inference (training_mode omitted or a constant false) the input and an
    all-true mask; in training mode mask = (u >= ratio) and output = data * mask / (1 - ratio),
    u uniform in [0, 1) from the op's stream (int `seed`); a run-time training_mode selects
    between the two per element. Replaces the inference-only pattern of elementwise.py (this
    module is imported after it: `FAMILIES` order)."""
    x = node.input(0)
    i1 = ir.IntegerType.get_signless(1)
    want_mask = len(node.op.results) > 1 and not isinstance(node.op.results[1].type, ir.NoneType)
    shape = shape_of(x)
    r = len(shape)
    training = _training_const(node)
    ratio_c = node.const(1) if node.has(1) else None
    if training is False or (ratio_c is not None and float(ratio_c.reshape(-1)[0]) == 0.0):
        mask = None
        if want_mask:
            mask = generic([], [empty(shape, i1)], [identity_map(r)], ["parallel"] * r, lambda a: [const_scalar(1, i1)])[0]
        return [x, mask]
    elem = node.in_elem(0)
    f64 = ir.F64Type.get()
    key, offset = stream_of(node, integer_seed=True)
    # ratio and 1 / (1 - ratio) once, outside the loop (f64: numpy's reference scales by a double).
    if node.has(1):
        ratio = convert_scalar(scalar_of(node.input(1)), node.in_elem(1), f64)
    else:
        ratio = const_scalar(0.5, f64)
    scale = convert_scalar(arith.divf(const_scalar(1.0, f64), arith.subf(const_scalar(1.0, f64), ratio)), f64, elem)
    mode = None if training is not None else scalar_of(node.input(2))

    def body(args: list[ir.Value]) -> list[ir.Value]:
        u = unit_float(element_words(shape, key, offset), f64)
        keep = arith.cmpf(arith.CmpFPredicate.OGE, u, ratio)
        if mode is not None:  # run-time training_mode: false keeps everything, unscaled
            keep = arith.ori(keep, arith.xori(mode, const_scalar(1, i1)))
        y = arith.select(keep, arith.mulf(args[0], scale), const_scalar(0.0, elem))
        if mode is not None:
            y = arith.select(mode, y, args[0])
        return [y, keep] if want_mask else [y]

    outs = [empty(shape, elem)] + ([empty(shape, i1)] if want_mask else [])
    res = generic([x], outs, [identity_map(r)] * (1 + len(outs)), ["parallel"] * r, body)
    return [res[0], res[1] if want_mask else None]
