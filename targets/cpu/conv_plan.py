"""Tile plans for channels-last convolutions and poolings, sized from the target CPU's vector unit.

What: ``plan_conv(op, options)`` returns the ``TilePlan`` of a ``linalg.conv_2d_nhwc_hwcf``,
``linalg.depthwise_conv_2d_nhwc_hwc``, ``linalg.pooling_nhwc_{max,sum}``, and of the layout
``linalg.transpose``s around them (None for any other op); ``plan_tiles`` in pipeline.py asks it
first.

Why this shape of plan: upstream MLIR (LLVM 22) vectorizes convolutions only in their 1-D form
(``conv_1d_nwc_wcf``, ``depthwise_conv_1d_nwc_wc``, ``pooling_nwc_*``), with static shapes and no
masking. So each op is tiled to one output row (n = oh = 1) and one kernel row (kh = 1), which
``transform.structured.decompose`` turns into the 1-D op, then vectorized without vector sizes.
The channel tile divides its loop (a partial tile would be dynamic and stay scalar). The register
tile is (ow_t output pixels) x (f_t channels): channels fill the vector lanes (two registers'
worth when the channel count allows), output pixels as many as the register file holds beside
the filter vectors and the broadcasts, up to 2 x ``FMA_DEPTH`` accumulators (AVX2: 16 ymm ->
5 x 16 f32; AVX-512: 32 zmm -> 8 x 32 f32), the count that costs an output row the fewest issue
slots (`_register_tile`). The pixel tile need not divide the output width: the plan's sequence
leaves the last, partial tile dynamic and scalar, and `peel_tiles.peel_conv_tiles` peels it off
the pixel loop and vectorizes both parts at their static sizes (13 = 2 x 5 + 3). Widths too short
to fill such a tile keep a divisor (`_divisor_tile`, the whole file where half holds fewer than
``FMA_DEPTH``). The reduction over input channels goes one channel per step (see `plan_conv`).
Kernel width is left whole (tile 0), except with a width stride above 1, where one tap per step
keeps the register tile from spilling (`_kw_steps`). The figures scale with the ISA's lanes and
registers, not with one machine.

Measured (one process, interleaved runs, medians of 40-80; AVX2 Zen 3 shared with other work;
Conv + BN + Relu, channels-last, divisor tiles -> peeled tiles, onnxruntime alongside), 1 thread:
3x3 64->256 at 13x13 0.902 -> 0.727 ms (55 -> 69 GFLOP/s; onnxruntime 0.637), 3x3 64->64 at
13x13 0.269 -> 0.213, 3x3 16->64 at 55x55 0.870 -> 0.728, 3x3 32->128 at 27x27 0.977 -> 0.874,
3x3/2 64->128 from 27x27 0.528 -> 0.516, depthwise 3x3 96 at 13x13 0.092 -> 0.077, depthwise
3x3/2 96 from 27x27 0.107 -> 0.092; ResNet widths (5 x 2 vectors beat 4 x 2 even with a peeled
tile): 3x3 64->64 at 56x56 3.550 -> 3.201, 128->128 at 28x28 3.104 -> 2.981, 256->256 at 14x14
3.288 -> 2.803, 512->512 at 7x7 3.188 -> 3.224 (noise). 2 threads: 3x3 64->256 at 13x13
0.509 -> 0.410, 256->256 at 14x14 3.499 -> 2.996. SqueezeNet (light model, random weights)
1 thread 14.09 -> 10.72 ms (onnxruntime 8.89), 2 threads 17.00 -> 13.58 ms (onnxruntime 9.27,
on a loaded machine); ResNet-50 1 thread 128.2 -> 120.7 ms (onnxruntime 102.3). AVX-512 was not
measured: there the plan changes only at widths 9, 11, 13, 17, 26, 27, 35, 55 (two-vector tiles
with a peeled last tile instead of one-vector divisor tiles).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from mlir import ir

from onnxc.targets.cpu.isa import CpuFeatures, host_cpu

if TYPE_CHECKING:
    from onnxc.targets.cpu.pipeline import TilePlan

__all__ = ["plan_conv", "CONV_OPS", "conv_register_tile", "filter_outgrows_l2", "mean_accumulators", "short_register_tile", "window_ints"]

#: Op name -> (loop index of output width, of the vectorized channel loop, of the input-channel
#: reduction or None, number of loops). Loop orders are linalg's: conv (n, oh, ow, f, kh, kw, c),
#: depthwise and pooling (n, oh, ow, c, kh, kw).
CONV_OPS: dict[str, tuple[int, int, int | None, int]] = {
    "linalg.conv_2d_nhwc_hwcf": (2, 3, 6, 7),
    "linalg.depthwise_conv_2d_nhwc_hwc": (2, 3, None, 6),
    "linalg.pooling_nhwc_max": (2, 3, None, 6),
    "linalg.pooling_nhwc_sum": (2, 3, None, 6),
}


def window_ints(op: ir.Operation, name: str) -> list[int]:
    """A convolution's or pooling's ``strides`` or ``dilations`` (1 per spatial dim when absent)."""
    return [int(v) for v in ir.DenseIntElementsAttr(op.attributes[name])] if name in op.attributes else [1, 1]


def _largest_divisor(extent: int, at_most: int) -> int:
    """The largest divisor of `extent` not above `at_most` (at least 1)."""
    for d in range(min(extent, max(1, at_most)), 0, -1):
        if extent % d == 0:
            return d
    return 1


def _channel_tile(extent: int, lanes: int) -> int:
    """Two vectors' worth of channels when they divide the count, else one, else the largest power
    of two dividing it (a part of one vector). Measured (AVX-512, depthwise 3x3): tiles of 1.5 or
    3 vectors (24, 48 channels) ran 3-5x slower than 8 or 16: LLVM splits such vectors badly."""
    for t in (2 * lanes, lanes):
        if extent % t == 0:
            return t
    t = 1
    while extent % (2 * t) == 0 and 2 * t < lanes:
        t *= 2
    return t


#: Independent accumulators that keep the FMA units busy: an FMA's result is ready 4 cycles after
#: it issues and two FMA pipes issue each cycle (every x86 core with FMA since Haswell and Zen 1),
#: so a register tile of fewer accumulators waits on its own dependency chains.
FMA_DEPTH = 8


def _best_tile(ow: int, channels: int, lanes: int, cap: Callable[[int], int]) -> tuple[int, int, int]:
    """(accumulators, f_t, ow_t) of the tile with the most accumulators, ``ow_t`` output pixels
    (a divisor of ``ow``, at most ``cap(vectors per pixel)``) x ``f_t`` channels (two vectors'
    worth or one, ``_channel_tile``); a tie goes to the wider channel tile (fewer broadcasts)."""
    best: tuple[int, int, int] | None = None
    for f_t in dict.fromkeys((_channel_tile(channels, lanes), lanes if channels % lanes == 0 else 0)):
        if not f_t:
            continue
        vectors = -(-f_t // lanes)
        o = _largest_divisor(ow, max(1, cap(vectors)))
        candidate = (o * vectors, f_t, o)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    assert best is not None
    return best


#: Let the register tile's pixel count not divide the output width (`_peeled_tile`): the last,
#: partial tile is peeled off the pixel loop (`peel_tiles.peel_conv_tiles`). A module flag for
#: one-process A/Bs; off, the pixel count divides the width (`_divisor_tile`).
PARTIAL_PIXEL_TILES: bool = True


def _issue_cost(ow: int, o: int, vectors: int) -> int:
    """Issue slots one reduction step of an output row costs in tiles of ``o`` pixels x
    ``vectors`` vectors (the last tile partial when ``o`` does not divide ``ow``): a tile of
    ``a`` accumulators takes ``max(a, FMA_DEPTH)`` FMA slots (fewer wait on their own chains),
    plus ``FMA_DEPTH`` for what each tile pays once per step whatever its size (the filter
    vectors' loads, the loop, the accumulators' reads and writes: fitted to the AVX2 timings
    in this module's docstring, where 5 x 2 vectors beat 4 x 2 even with a partial tile)."""
    full, rest = divmod(ow, o)
    return full * (max(o * vectors, FMA_DEPTH) + FMA_DEPTH) + ((max(rest * vectors, FMA_DEPTH) + FMA_DEPTH) if rest else 0)


def _accumulator_budget(registers: int, vectors: int) -> int:
    """Accumulators a tile of ``vectors`` vectors per pixel may hold: what the register file
    keeps beside the filter vectors (twice: this tap's and the next's) and two broadcast inputs,
    up to twice ``FMA_DEPTH``, and to ``FMA_DEPTH`` at one vector per pixel
    (``ONE_VECTOR_FMA_DEPTH``). AVX2 (16 registers): 10 at 2 vectors per pixel, 8 at 1;
    AVX-512 (32): 16, half the file, as before (a fuller file was measured slower there)."""
    if vectors == 1 and ONE_VECTOR_FMA_DEPTH:
        return min(FMA_DEPTH, registers - 2 * vectors - 2)
    return min(2 * FMA_DEPTH, registers - 2 * vectors - 2)


#: Hold a one-vector channel tile (channels a multiple of 8 but not 16 on AVX2: 24, 40, 136...)
#: to ``FMA_DEPTH`` accumulators. Each of its FMAs needs its own broadcast input, and LLVM keeps
#: the kernel row's filter vectors in registers, so 12 pixels spilled accumulators inside the
#: reduction loop: ShuffleNet's and MobileNetV2's stem (3x3/2, 3 -> 24 channels at 112 wide),
#: one process, AVX2 Zen 3, 1 thread, median ms: 12 pixels 2.85, 10: 0.64, 8: 0.60, 6: 0.63,
#: 4: 0.71 (onnxruntime 0.53). A module flag for one-process A/Bs.
ONE_VECTOR_FMA_DEPTH: bool = True


def _peeled_tile(ow: int, channels: int, lanes: int, registers: int) -> tuple[int, int, int]:
    """(ow_t, f_t, accumulators of a full tile): ``f_t`` the widest channel tile
    (`_channel_tile`: two vectors where the channels allow), ``ow_t`` the pixel count within
    `_accumulator_budget` of ``registers`` that costs a whole output row the fewest issue slots
    (`_issue_cost`), its last tile partial where ``ow_t`` does not divide ``ow``; a tie goes to a
    divisor of the width (nothing peeled), then to more accumulators. Why the widest channel
    tile: a 1-vector tile needs a broadcast per FMA, and every one measured (AVX2, 13 pixels:
    8, 10, 12 x 1 vector) was slower than 5 x 2 vectors."""
    f_t = _channel_tile(channels, lanes)
    vectors = -(-f_t // lanes)
    best: tuple[tuple[Fraction, bool, int], int] | None = None
    for o in range(1, max(1, min(ow, _accumulator_budget(registers, vectors) // vectors)) + 1):
        key = (Fraction(1, _issue_cost(ow, o, vectors)), ow % o == 0, o * vectors)
        if best is None or key > best[0]:
            best = (key, o)
    assert best is not None
    return best[1], f_t, best[1] * vectors


def _register_tile(ow: int, channels: int, lanes: int, budget: int) -> tuple[int, int]:
    """(ow_t, f_t): output pixels x channels of the register tile; ``budget`` is half the vector
    registers (the file is ``2 * budget``).

    With ``PARTIAL_PIXEL_TILES`` (the default) `_peeled_tile`: two vectors of channels where the
    channels allow, and as many pixels as `_accumulator_budget` lets the file hold (AVX2: 5;
    AVX-512: 8) or fewer where that costs an output row fewer issue slots (`_issue_cost`).
    ``ow_t`` need not divide the output width: the last, partial tile is peeled off the pixel
    loop and vectorized at its own, static size (`peel_tiles.peel_conv_tiles`). On AVX2:
    13 = 2 x 5 + 3, 27 = 5 x 5 + 2, 55 = 11 x 5, 56 = 11 x 5 + 1, 14 = 2 x 5 + 4, 7 = 4 + 3.
    Where even that tile holds fewer than ``FMA_DEPTH`` accumulators (widths too short to fill
    it, or one vector of channels at widths below 8), `_divisor_tile` decides, as before.

    Why: with ``ow_t`` a divisor of the width (a partial tile would be dynamic and stay scalar),
    widths with few small divisors got tiles of 1 to 6 accumulators, latency-bound, or, the
    fallback of `_divisor_tile`, the whole register file: 13 pixels x 1 vector on AVX2, whose
    13 accumulators and 15 broadcast inputs spilled (3x3 64->256 at 13x13: 42 GFLOP/s against
    onnxruntime's 59 on the same machine; 57 now). More accumulators than half of AVX2's file
    paid at every width measured, ResNet's too. Numbers: this module's docstring."""
    if PARTIAL_PIXEL_TILES:
        o, f_t, acc = _peeled_tile(ow, channels, lanes, 2 * budget)
        if acc >= FMA_DEPTH:
            return o, f_t
    return _divisor_tile(ow, channels, lanes, budget)


def _divisor_tile(ow: int, channels: int, lanes: int, budget: int) -> tuple[int, int]:
    """(ow_t, f_t): output pixels x channels of the register tile. First choice: the most
    accumulators (``ow_t`` x vectors of ``f_t``) within ``budget`` vector registers (half the
    file: the rest hold the filter vectors and the broadcast inputs). When that gives fewer than
    ``FMA_DEPTH`` accumulators, the whole file minus the filter vectors and two broadcasts.
    ``ow_t`` divides the output width (the plan before `_peeled_tile`, kept for A/Bs).

    Why: with ``ow_t`` a divisor of the output width, a width with few small divisors (SqueezeNet's and AlexNet's 13, 26, 27, 55) got tiles of
    1 to 6 accumulators within half of AVX2's 16 registers, latency-bound: one-process A/B
    compiled for znver3 (AVX2) on the AVX-512 Zen 4, 1 thread: SqueezeNet 23.4 -> 8.3 ms
    (13 pixels x 1 vector), AlexNet 27.0 -> 21.8 ms, ZFNet-512 73.6 -> 67.2 ms; ResNet-50,
    MobileNetV2, Inception-v2 have no such width (same tiles). With AVX-512's 32 registers half
    the file already holds 8 or more accumulators for these widths, and a fuller file was
    slower (27 pixels x 1 vector: SqueezeNet 8.2 -> 9.3 ms), hence only as the second choice."""
    acc, f_t, o = _best_tile(ow, channels, lanes, lambda vectors: budget // vectors)
    if acc < FMA_DEPTH:
        registers = 2 * budget
        acc, f_t, o = _best_tile(ow, channels, lanes, lambda vectors: (registers - vectors - 2) // vectors)
    return o, f_t


#: Let `short_register_tile` follow the peeled tile of `_register_tile` (``PARTIAL_PIXEL_TILES``):
#: 1x1 convolutions at widths with few small divisors then stay direct instead of becoming packed
#: matmuls (`conv_filters.pointwise_as_matmul`). Off by default: measured in one process (AVX2
#: Zen 3, 1 thread, Conv + BN + Relu, matmul -> direct on its peeled tile), 1x1 64->256 at 13x13
#: 0.200 -> 0.154 ms, 64->16 at 55x55 0.252 -> 0.152, 96->16 at 55x55 0.252 -> 0.236, 32->128
#: at 27x27 0.177 -> 0.167, 384->64 at 14x14 0.200 -> 0.203; SqueezeNet 12.84 -> 11.88 ms
#: (0.93). On by default since a second one-process A/B (light models, random weights, same
#: machine, median ms off -> on, onnxruntime beside): SqueezeNet 1 thread 13.82 -> 12.64 (ORT
#: 10.29), 2 threads 8.08 -> 7.57 (7.52); Inception-v1 47.9 -> 46.8, Inception-v2 61.0 -> 61.6,
#: ShuffleNet 9.82 -> 9.68 (1 thread; within noise); wide 1x1s (ResNet's, DenseNet's) are
#: matmuls by the channel rule either way.
POINTWISE_FOLLOWS_PEELED_TILE: bool = True


def short_register_tile(ow: int, channels: int, lanes: int, budget: int) -> bool:
    """Whether a convolution at output width ``ow`` (``budget``: half the vector registers) has
    a register tile of fewer than ``FMA_DEPTH`` accumulators, so that its FMA pipes wait on
    their own chains: `conv_filters.pointwise_as_matmul` then runs a 1x1 convolution as a packed
    matmul. The first choice of `_divisor_tile` (widths with few small divisors: 7, 13, 14, 27),
    or, with ``POINTWISE_FOLLOWS_PEELED_TILE`` and ``PARTIAL_PIXEL_TILES``, the peeled tile
    (`_peeled_tile`: only widths too short to fill one)."""
    if POINTWISE_FOLLOWS_PEELED_TILE and PARTIAL_PIXEL_TILES:
        return _peeled_tile(ow, channels, lanes, 2 * budget)[2] < FMA_DEPTH
    return _best_tile(ow, channels, lanes, lambda vectors: budget // vectors)[0] < FMA_DEPTH


def mean_accumulators(ow: int, channels: int, lanes: int, budget: int) -> float:
    """Accumulators per register tile of an output row, averaged over its tiles (the peeled
    last one included), of a convolution at output width ``ow`` (``budget``: half the vector
    registers): 7 pixels on AVX2 are a 4-pixel and a 3-pixel tile of two vectors, 7 on average,
    where 56 pixels average 9.8."""
    o, f_t = _register_tile(ow, channels, lanes, budget)
    vectors = -(-f_t // lanes)
    return ow * vectors / -(-ow // o)


def _cpu(options: Any) -> CpuFeatures:
    cpu = getattr(options, "cpu", None)
    if isinstance(cpu, CpuFeatures):
        return cpu
    if isinstance(cpu, str) and cpu:
        return CpuFeatures.for_target(cpu)
    return host_cpu()


def _elem_bits(op: ir.Operation) -> int | None:
    t = op.results[0].type if len(op.results) else op.operands[-1].type
    if not isinstance(t, ir.ShapedType):
        return None
    et = ir.ShapedType(t).element_type
    if isinstance(et, ir.FloatType):
        return ir.FloatType(et).width
    return None  # integer convolutions keep the generic plan


def plan_conv(op: ir.Operation, options: Any = None) -> "TilePlan | None":
    """The tile plan of a channels-last convolution or pooling op, or None for other ops (and for
    ops whose shapes are not static where the plan needs them)."""
    from onnxc.targets.cpu.pipeline import TilePlan

    if op.name == "linalg.transpose":
        return _plan_transpose(op, options)
    spec = CONV_OPS.get(op.name)
    if spec is None or not len(op.results):
        return None
    ow_loop, ch_loop, red_loop, n_loops = spec
    bits = _elem_bits(op)
    if bits is None:
        return None
    out = ir.RankedTensorType(op.results[0].type)
    # Output (n, oh, ow, channels): the window/filter operand gives kh, kw (and c for conv).
    if out.is_dynamic_dim(2) or out.is_dynamic_dim(3):
        return None
    ow, channels = out.get_dim_size(2), out.get_dim_size(3)
    window = ir.RankedTensorType(op.operands[1].type)
    if not window.has_static_shape:
        return None
    cpu = _cpu(options)
    ow_t, f_t = _register_tile(ow, channels, cpu.lanes(bits), cpu.vector_registers // 2)
    tiles = [1] * n_loops
    tiles[ow_loop] = ow_t
    tiles[ch_loop] = f_t
    # Kernel loops: kh tiled by 1 (decompose needs it), kw whole, or one tap per step where a
    # stride makes the taps share pixels in a pattern that spills (`_kw_steps`).
    kh_loop = 4
    tiles[kh_loop] = 1
    tiles[kh_loop + 1] = 1 if _kw_steps(op, window) else 0
    if red_loop is not None:
        # One input channel per step: each step is then a pure outer product (ow_t broadcast
        # inputs x f_t filter lanes), and the filter slice the vectorizer loads per step is
        # kw x 1 x f_t rather than kw x c_t x f_t (3 x 32 x 32 floats = 192 zmm registers, which
        # spill). Measured on AVX-512 (best of 25): 3x3 64->64 @56 83 -> 105 GFLOP/s going from
        # 32 channels per step to 1; 1x1 256->64 @56 97 -> 107; the 7x7/2 stem 87 -> 92.
        tiles[red_loop] = 1
    macs = out.get_dim_size(0) * out.get_dim_size(1) * ow * channels if out.has_static_shape else 0
    # Window dims: (kh, kw) always, and the input channels c of a conv's (kh, kw, c, f) filter.
    for d in range(3 if red_loop is not None else 2):
        macs *= window.get_dim_size(d)
    order = _channels_outermost(op, cpu) if op.name == "linalg.conv_2d_nhwc_hwcf" else None
    # A convolution on one channel tile of a packed filter (conv_filters.py) runs inside the
    # forall that splits the tiles over the threads.
    forall = None if _in_forall(op) else _forall_rows(out, tiles, ch_loop, macs, options)
    return TilePlan(tuple(tiles), (), decompose=True, forall_threads=forall, interchange=order)


#: Step a strided convolution's or pooling's kernel width one tap at a time (`_kw_steps`); a
#: module flag for one-process A/Bs.
STRIDED_KW_STEPS: bool = True


def _kw_steps(op: ir.Operation, window: ir.RankedTensorType) -> bool:
    """Whether a ``linalg.conv_2d_nhwc_hwcf`` or pooling steps its kernel width one tap at a time
    (a convolution's input channels inside the tap loop): those with a width stride above 1 and
    a window wider than 1.

    Why: with the kernel row whole, one reduction step reads the ``(ow_t - 1) * stride + kw``
    input pixels of the row once and feeds each to every tap that reads it. At stride 2 a pixel
    of even position feeds taps 0 and 2, so it stays live across tap 1. A convolution's tile of
    ``ow_t x 2`` vector accumulators and its six filter vectors then exceed AVX2's 16 registers,
    and LLVM kept the accumulators on the stack, loading and storing all ten in every step of
    the channel loop (3x3/2 128 -> 128 from 56x56); a pooling's window is 11 pixels of two
    vectors beside its ten accumulators. One tap per step reads each tap's ``ow_t`` pixels
    itself: the even pixels are loaded twice, but the live values are the accumulators, the
    tap's filter vectors and one input. Measured (one process, AVX2 Zen 3, 1 thread, NHWC
    kernel, median ms whole row -> one tap): 3x3/2 128 -> 128 from 56 3.77 -> 2.86, 256 -> 256
    from 28 3.58 -> 2.90, 64 -> 64 from 112 4.77 -> 4.02, 512 -> 512 from 14 3.68 -> 3.85 (7
    outputs wide: 4 + 3 pixels), the 7x7/2 stem 3.70 -> 3.66; MaxPool 3x3/2 of 64 channels
    from 112 0.481 -> 0.451. At stride 1 the taps' windows overlap by ``kw - 1`` pixels and
    LLVM keeps that schedule in registers (no spills in the code). Depthwise convolutions keep
    the whole row: they have no channel loop inside the tap loop, so LLVM unrolls the three
    taps back into one step (measured: no change).
    Models (one process, 1 thread, on/off): AlexNet 0.97, ZFNet-512 0.96, Inception-v1 0.99;
    2 threads: ShuffleNet 0.97, ResNet-50 0.99, MobileNetV2 and SqueezeNet 1.00.
    """
    if not STRIDED_KW_STEPS or op.name == "linalg.depthwise_conv_2d_nhwc_hwc" or window.get_dim_size(1) < 2:
        return False
    return window_ints(op, "strides")[1] > 1


def _touched_extent(out_extent: int, stride: int, kernel: int, in_extent: int) -> int:
    """Input rows (or columns) a convolution reads for `out_extent` outputs: with a stride above
    the kernel size (a strided 1x1) the rows between the windows are never read."""
    if kernel >= stride:
        return min(in_extent, (out_extent - 1) * stride + kernel)
    return out_extent * kernel


def _channels_outermost(op: ir.Operation, cpu: CpuFeatures) -> tuple[int, ...] | None:
    """The loop order (n, f, oh, ow, kh, kw, c) for a conv whose filter outgrows L2
    (`filter_outgrows_l2`) while the input it reads fits in half of it; None (the order n, oh,
    ow, f) else.

    Why: in the default order every output row streams the whole filter, so a filter that does
    not stay in L2 is read from L3 or memory once per output row. ResNet-50's last stage (7x7
    outputs, 4-8 MB filters) ran at 66-74 GFLOP/s where its earlier convolutions reach 100-110.
    With the output channels outermost each filter tile (kh x kw x c x f_t) is read once and
    the input, re-read once per channel tile, comes from L2. A constant filter goes further:
    `conv_filters.py` packs it per channel tile at compile time, and its convolutions on the
    contiguous slices no longer reach this order."""
    if not filter_outgrows_l2(op, cpu):
        return None
    inp, window = ir.RankedTensorType(op.operands[0].type), ir.RankedTensorType(op.operands[1].type)
    out = ir.RankedTensorType(op.results[0].type)
    strides = window_ints(op, "strides")
    rows = _touched_extent(out.get_dim_size(1), int(strides[0]), window.get_dim_size(0), inp.get_dim_size(1))
    cols = _touched_extent(out.get_dim_size(2), int(strides[1]), window.get_dim_size(1), inp.get_dim_size(2))
    input_bytes = max(1, (_elem_bits(op) or 32) // 8) * inp.get_dim_size(0) * rows * cols * inp.get_dim_size(3)
    if input_bytes > cpu.l2_bytes // 2:
        return None
    return (0, 3, 1, 2, 4, 5, 6)


def filter_outgrows_l2(op: ir.Operation, cpu: CpuFeatures) -> bool:
    """Whether a static float ``linalg.conv_2d_nhwc_hwcf`` with more than one output row has a
    filter larger than half the L2 cache."""
    inp, window = ir.RankedTensorType(op.operands[0].type), ir.RankedTensorType(op.operands[1].type)
    out = ir.RankedTensorType(op.results[0].type)
    bits = _elem_bits(op)
    if bits is None or not (inp.has_static_shape and out.has_static_shape and window.has_static_shape):
        return False
    if out.get_dim_size(0) * out.get_dim_size(1) < 2:
        return False  # one output row: every order reads everything once
    filter_bytes = max(1, bits // 8) * window.get_dim_size(0) * window.get_dim_size(1) * window.get_dim_size(2) * window.get_dim_size(3)
    return filter_bytes > cpu.l2_bytes // 2


def conv_register_tile(op: ir.Operation, cpu: CpuFeatures) -> tuple[int, int] | None:
    """(ow_t, f_t): the register tile `plan_conv` gives a static float convolution or pooling
    (output pixels x channels), or None where it makes no plan."""
    bits = _elem_bits(op)
    if bits is None or op.name not in CONV_OPS:
        return None
    out = ir.RankedTensorType(op.results[0].type)
    if out.is_dynamic_dim(2) or out.is_dynamic_dim(3):
        return None
    return _register_tile(out.get_dim_size(2), out.get_dim_size(3), cpu.lanes(bits), cpu.vector_registers // 2)


def _in_forall(op: ir.Operation) -> bool:
    """Whether `op` already runs inside an ``scf.forall`` (its threads split an outer loop)."""
    parent = op.parent
    while parent is not None and parent.name != "builtin.module":
        if parent.name == "scf.forall":
            return True
        parent = parent.parent
    return False


#: Multiply-adds (or window elements) a convolution/pooling must have before its output rows are
#: split over threads: below this a task's wake-up (microseconds) costs more than it saves.
MIN_THREADED_MACS: int = 1 << 17


def _forall_rows(
    out: ir.RankedTensorType, tiles: list[int], ch_loop: int, macs: int, options: Any
) -> tuple[int, ...] | None:
    """Thread counts of the outer ``scf.forall``: the batch, the output rows or the output
    channels (in whole channel tiles), the first that splits evenly over the threads
    (`pipeline.forall_split`: 7 output rows over 2 threads would leave one idle an eighth of the
    time, 512 channels do not). None for one thread, dynamic shapes or too little work."""
    from onnxc.targets.cpu.pipeline import forall_split

    threads = int(getattr(options, "threads", 1) or 1)
    if threads <= 1 or not out.has_static_shape or macs < MIN_THREADED_MACS:
        return None
    ranges: list[int | None] = [None] * len(tiles)
    for loop in (0, 1, 2, ch_loop):  # output dims n, oh, ow, channels are loops 0-3
        ranges[loop] = out.get_dim_size(loop)
    return forall_split(ranges, (0, 1, ch_loop), threads, tiles)


def _plan_transpose(op: ir.Operation, options: Any) -> "TilePlan | None":
    """A 2-D register tile for a `linalg.transpose` that moves the innermost dim (the layout
    transposes at a CNN's boundary, NCHW <-> NHWC).

    The generic plan vectorizes only the output's innermost dim, which the input reads with a
    stride: one scalar load per lane. Tiling the output's innermost dim by a vector and the dim
    that is the input's innermost by half a vector makes both the reads and the writes contiguous
    vectors (the vectorizer emits a `vector.transpose` between them). Measured (AVX-512, best of
    25): [1,112,112,64] -> NCHW 1.15 -> 0.36 ms, [1,64,112,112] -> NHWC 0.68 -> 0.40 ms.
    None (the generic plan) when the innermost dim stays innermost, or where a tiled dim is not
    static or not divided by its tile.
    """
    from onnxc.targets.cpu.pipeline import TilePlan

    perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    rank = len(perm)
    if rank < 2 or perm[-1] == rank - 1 or not len(op.results):
        return None
    out = ir.RankedTensorType(op.results[0].type)
    et = out.element_type
    if isinstance(et, ir.FloatType):
        bits = ir.FloatType(et).width
    elif isinstance(et, ir.IntegerType) and ir.IntegerType(et).width >= 8:
        bits = ir.IntegerType(et).width
    else:
        return None  # i1 and others: the generic plan's rules apply
    lanes = _cpu(options).lanes(bits)
    inner_out = rank - 1
    inner_in = perm.index(rank - 1)  # the output dim that is the input's innermost
    tiles = [1] * rank
    for d, want in ((inner_out, lanes), (inner_in, max(1, lanes // 2))):
        if out.is_dynamic_dim(d):
            return None
        extent = out.get_dim_size(d)
        t = _largest_divisor(extent, want)
        if t < 2:
            return None
        tiles[d] = t
    return TilePlan(tuple(tiles), tuple(tiles), forall_threads=_forall_transpose(out, tiles, options))


def _forall_transpose(out: ir.RankedTensorType, tiles: list[int], options: Any) -> tuple[int, ...] | None:
    """Thread counts of a large static layout transpose's outer ``scf.forall``: its outermost
    dims that split evenly into whole tiles (`pipeline.forall_split`). None for one thread, a
    dynamic shape, or fewer than `pipeline.min_threaded_elements` elements.

    Why: a transpose is pure data movement, but left to one thread it is the part of a small
    CNN that does not scale: ShuffleNet's channel shuffles (a transpose per unit) and the
    boundary NCHW <-> NHWC transposes ran on the calling thread while the other waited."""
    from onnxc.targets.cpu.pipeline import forall_split, min_threaded_elements

    threads = int(getattr(options, "threads", 1) or 1)
    if threads <= 1 or not out.has_static_shape:
        return None
    shape = list(out.shape)
    total = 1
    for extent in shape:
        total *= extent
    if total < min_threaded_elements(options):
        return None
    return forall_split(shape, range(len(shape)), threads, tiles)
