"""Constant convolution filters that outgrow L2, packed per channel tile at compile time.

What: ``pack_conv_filters(module, cpu, threads)`` rewrites each ``linalg.conv_2d_nhwc_hwcf`` whose
filter is a compile-time constant larger than half the L2 cache (`conv_plan.filter_outgrows_l2`)
into a loop over its output-channel tiles. The filter becomes one constant
[F / f_t, kh, kw, c, f_t] (f_t: the channels of the register tile `plan_conv` gives the
convolution, `conv_plan.conv_register_tile`), and each iteration
convolves the whole input with one contiguous [kh, kw, c, f_t] slice of it into that tile's
slice of the output (the bias already in it). With several threads the tiles are split evenly
over an ``scf.forall`` of one iteration per thread, each running its share in an ``scf.for``
(the convolutions inside then get no forall of their own: `plan_conv`). Returns how many
convolutions it rewrote.

Why: in HWCF a channel tile's filter row is f_t of F floats (32 of 512: 128 bytes every 2 KB),
read once per output row, and the hardware prefetchers do not follow that stride: the FMA loop
waited on the filter loads (40% of ResNet-50's stage-3 samples on them, `perf annotate`). The
plan's channels-outermost order (`conv_plan._channels_outermost`) keeps a tile's filter in L2
but still strided. Measured on an AVX-512 Xeon (2 vCPUs, 1 thread, best of 30; the same
convolution split into 32-channel convolutions of their own constants, against one convolution):
3x3 256->256 at 14x14 2.51 -> 1.30 ms, 3x3 512->512 at 7x7 2.93 -> 1.46 ms, 1x1 2048->512 at
7x7 1.49 -> 0.76 ms (onnxruntime 1.28, 1.56, 0.67); convolutions with smaller filters were the
same or slower split (the input is read once per channel tile), hence only past the L2 limit.
Where the input outgrows L2 too (VGG-19), reading it once per channel tile still beats reading
the strided filter once per output row: 3x3 256->256 at 56x56 37.4 -> 22.9 ms, 512->512 at
28x28 52.6 -> 22.5 ms (onnxruntime 21.9, 21.8). A run-time filter keeps the one convolution
and the plan's order.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, scf, tensor

from onnxc.transforms.lowering.common import extract_slice, filled, insert_slice

from .conv_plan import FMA_DEPTH, _register_tile, conv_register_tile, filter_outgrows_l2, mean_accumulators, short_register_tile, window_ints
from .data_tiling import _constant_array, _packed_constant
from .isa import CpuFeatures

__all__ = ["pack_conv_filters", "pad_conv_channels", "pointwise_as_matmul", "subsample_strided_pointwise", "POINTWISE_AS_MATMUL"]

#: Rewrite chosen 1x1 convolutions as packed matmuls (`pointwise_as_matmul`); a module flag for
#: one-process A/Bs.
POINTWISE_AS_MATMUL: bool = True


def _tiles(op: ir.Operation, cpu: CpuFeatures) -> int | None:
    """f_t, the channel tile the filter of `op` is packed by, or None where `op` stays whole."""
    if op.name != "linalg.conv_2d_nhwc_hwcf" or not filter_outgrows_l2(op, cpu):
        return None
    tile = conv_register_tile(op, cpu)
    channels = ir.RankedTensorType(op.results[0].type).get_dim_size(3)
    if tile is None or channels % tile[1] or channels // tile[1] < 2:
        return None
    return tile[1]


def _rewrite(op: ir.Operation, f_t: int, threads: int, name: str) -> bool:
    """Replace `op` by the loop over its channel tiles (see the module docstring)."""
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    arr = _constant_array(w)
    if arr is None:
        return False
    kh, kw, c, f = (int(d) for d in arr.shape)
    count = f // f_t
    out = ir.RankedTensorType(op.results[0].type)
    n, oh, ow = out.get_dim_size(0), out.get_dim_size(1), out.get_dim_size(2)
    strides, dilations = window_ints(op, "strides"), window_ints(op, "dilations")
    # The largest thread count that splits the tiles evenly (a forall of one iteration per thread).
    split = max(t for t in range(1, max(1, threads) + 1) if count % t == 0)
    per_thread = count // split
    index = ir.IndexType.get()
    f32 = ir.F32Type.get()
    dyn = ir.ShapedType.get_dynamic_size()
    with op.location, ir.InsertionPoint(op):
        packed = _packed_constant(arr.reshape(kh, kw, c, count, f_t).transpose(3, 0, 1, 2, 4).copy(), name)

        def const(v: int) -> ir.Value:
            return arith.constant(index, v)

        def tile_loop(acc: ir.Value, first: ir.Value | None) -> ir.Value:
            """`per_thread` channel tiles from tile `first` (None: 0) on, into `acc` (its channels
            from 0)."""
            loop = scf.ForOp(const(0), const(per_thread), const(1), [acc])
            with ir.InsertionPoint(loop.body):
                j = loop.induction_variable
                tile = j if first is None else arith.addi(first, j)
                slice_type = ir.RankedTensorType.get([kh, kw, c, f_t], f32)
                wt = tensor.ExtractSliceOp(slice_type, packed, [tile], [], [], [dyn, 0, 0, 0, 0], [1, kh, kw, c, f_t], [1] * 5).result
                at = arith.muli(j, const(f_t))
                dest = extract_slice(loop.inner_iter_args[0], [0, 0, 0, at], [n, oh, ow, f_t])
                y = linalg.conv_2d_nhwc_hwcf(x, wt, outs=[dest], strides=strides, dilations=dilations)
                scf.YieldOp([insert_slice(y, loop.inner_iter_args[0], [0, 0, 0, at])])
            return loop.results[0]

        if split == 1:
            result = tile_loop(init, None)
        else:
            forall = scf.ForallOp([0], [split], [1], shared_outs=[init])
            with ir.InsertionPoint(forall.body):
                t = forall.induction_variables[0]
                width = per_thread * f_t
                at = arith.muli(t, const(width))
                mine = extract_slice(forall.inner_iter_args[0], [0, 0, 0, at], [n, oh, ow, width])
                part = tile_loop(mine, arith.muli(t, const(per_thread)))
                term = forall.terminator()
                with ir.InsertionPoint(term.block):
                    tensor.ParallelInsertSliceOp(
                        part, forall.inner_iter_args[0], [at], [], [], [0, 0, 0, dyn], [n, oh, ow, width], [1] * 4
                    )
            result = forall.results[0]
    op.results[0].replace_all_uses_with(result)
    op.erase()
    return True


def pack_conv_filters(module: ir.Module, cpu: CpuFeatures, threads: int = 1) -> int:
    """Rewrite the convolutions whose constant filters outgrow L2 (see the module docstring)."""
    from onnxc.transforms.onnx_utils import collect_ops

    count = 0
    with module.context:
        for op in collect_ops(module.operation, lambda o: o.name == "linalg.conv_2d_nhwc_hwcf"):
            f_t = _tiles(op, cpu)
            if f_t is not None and _rewrite(op, f_t, threads, f"packed_filter_{count}"):
                count += 1
    return count


def _pad_channels(op: ir.Operation, padded: int) -> bool:
    """Replace `op` by the convolution of its filter padded with zero columns to a multiple of
    `lanes` output channels, into its accumulator padded alike, and the slice of the real
    channels of the result (see `pad_conv_channels`)."""
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    arr = _constant_array(w)
    if arr is None:
        return False
    kh, kw, c, f = (int(d) for d in arr.shape)
    out = ir.RankedTensorType(op.results[0].type)
    n, oh, ow = out.get_dim_size(0), out.get_dim_size(1), out.get_dim_size(2)
    f32 = ir.F32Type.get()
    with op.location, ir.InsertionPoint(op):
        wide = np.zeros((kh, kw, c, padded), np.float32)
        wide[..., :f] = arr
        wp = _packed_constant(wide, "padded_filter")  # MLIR makes resource names unique
        acc = insert_slice(init, filled([n, oh, ow, padded], f32, 0.0), [0, 0, 0, 0])
        y = linalg.conv_2d_nhwc_hwcf(x, wp, outs=[acc], strides=window_ints(op, "strides"), dilations=window_ints(op, "dilations"))
        result = extract_slice(y, [0, 0, 0, 0], [n, oh, ow, f])
    op.results[0].replace_all_uses_with(result)
    op.erase()
    return True


#: Pad channels so that their tiles split evenly over the threads (`_padded_channels`); a module
#: flag for one-process A/Bs. Measured in one process (AVX-512 Zen 4, 2 threads, medians of 400
#: interleaved runs): SqueezeNet 3.85 -> 3.74 ms (its 512 -> 1000 classifier convolution padded
#: to 1024 splits its channel tiles, half the 2 MB filter per thread, instead of 13 rows 7/6).
THREAD_PAD: bool = True

#: Most extra work (a share of the vector-padded channels) `pad_conv_channels` adds so that the
#: channel tiles split evenly over the threads.
THREAD_PAD_SHARE: float = 0.04


def _padded_channels(f: int, lanes: int, threads: int, tile: int | None) -> int:
    """The channels `pad_conv_channels` pads ``f`` to: a multiple of ``lanes``, and where that
    leaves a number of channel tiles (``tile`` channels each, the padded convolution's register
    tile) the threads do not divide, the next multiple of ``tile * threads`` when that adds at
    most ``THREAD_PAD_SHARE`` more work."""
    padded = -(-f // lanes) * lanes
    if threads <= 1 or not tile or tile % lanes:
        return padded
    even = -(-f // (tile * threads)) * tile * threads
    return even if even != padded and even <= padded * (1 + THREAD_PAD_SHARE) else padded


def pad_conv_channels(module: ir.Module, cpu: CpuFeatures, threads: int = 1) -> int:
    """Pad the output channels of each static f32 ``linalg.conv_2d_nhwc_hwcf`` with a constant
    filter to a multiple of the vector lanes, where they are more than a vector and not a
    multiple of one (with ``threads`` > 1, to one whose channel tiles the threads divide, when
    that costs little more: `_padded_channels`); returns how many convolutions it padded.

    Why: the plan's channel tile must divide the channel count (a partial tile would be
    dynamic and stay scalar), so 1000 channels (SqueezeNet's classifier convolution, 512 -> 1000
    at 13x13) got tiles of 8 on AVX-512: half-width vectors and a broadcast per FMA, 30% of
    the model's time. Padded to 1008 they take whole vectors, for 0.8% more work and one copy of
    the accumulator; the zero columns' results are sliced off. Measured in one process (AVX-512
    Xeon, 1 thread): SqueezeNet 7.64 -> 7.28 ms. (Its 13 pixels x 1 vector tile is still bound
    by the broadcast loads: a 13 x 2-vector tile would need 26 of the 32 registers, which
    `conv_plan._register_tile` gives only when half the file holds fewer than 8.)"""
    from onnxc.transforms.onnx_utils import collect_ops

    count = 0
    with module.context:
        for op in collect_ops(module.operation, lambda o: o.name == "linalg.conv_2d_nhwc_hwcf"):
            if conv_register_tile(op, cpu) is None:
                continue
            out, w = ir.RankedTensorType(op.results[0].type), ir.RankedTensorType(op.operands[1].type)
            if not (out.has_static_shape and w.has_static_shape) or out.element_type != ir.F32Type.get():
                continue
            lanes = cpu.lanes(32)
            f = out.get_dim_size(3)
            if f <= lanes or not f % lanes:
                continue
            tile = _register_tile(out.get_dim_size(2), -(-f // lanes) * lanes, lanes, cpu.vector_registers // 2)[1]
            if _pad_channels(op, _padded_channels(f, lanes, threads if THREAD_PAD else 1, tile)):
                count += 1
    return count


#: Subsample the input of strided 1x1 convolutions first (`subsample_strided_pointwise`); a
#: module flag for one-process A/Bs.
SUBSAMPLE_STRIDED_POINTWISE: bool = True


def _static_pointwise_convs(module: ir.Module) -> list[ir.Operation]:
    """The module's ``linalg.conv_2d_nhwc_hwcf``s with a 1x1 filter, static shapes and f32
    results (the ones `subsample_strided_pointwise` and `pointwise_as_matmul` rewrite)."""
    from onnxc.transforms.onnx_utils import collect_ops

    f32 = ir.F32Type.get(module.context)

    def wanted(op: ir.Operation) -> bool:
        if op.name != "linalg.conv_2d_nhwc_hwcf":
            return False
        xt, wt, out = (ir.RankedTensorType(v.type) for v in (op.operands[0], op.operands[1], op.results[0]))
        return xt.has_static_shape and wt.has_static_shape and out.has_static_shape and out.element_type == f32 and list(wt.shape[:2]) == [1, 1]

    return collect_ops(module.operation, wanted)


def subsample_strided_pointwise(module: ir.Module) -> int:
    """Rewrite each static f32 1x1 ``linalg.conv_2d_nhwc_hwcf`` with a stride above 1 as a copy
    of the pixels it reads (a strided ``tensor.extract_slice`` into a compact tensor) and a
    stride-1 convolution of that copy; returns how many it rewrote.

    Why: a strided 1x1 convolution (ResNet's projection shortcuts) reads every other pixel of
    every other row, and the pixels it skips share its cache lines: each channel tile of a
    filter packed per tile (`pack_conv_filters`: 1024 -> 2048 channels, 8 MB) streamed the
    strided input again, at twice the bytes it used. The compact copy is read once per tile
    instead, and the stride-1 convolution may become a packed matmul (`pointwise_as_matmul`).
    One-process A/B, AVX2 Zen 3, 1 thread, NHWC kernels, median ms: 1024 -> 2048 from 14x14
    2.88 -> 2.65, 256 -> 512 from 56x56 2.84 -> 2.77, 512 -> 1024 from 28x28 3.12 -> 3.13;
    ResNet-50 (torchvision export and the onnx wheel's) 0.99."""
    if not SUBSAMPLE_STRIDED_POINTWISE:
        return 0
    from mlir.dialects import tensor as tensor_d

    count = 0
    f32 = ir.F32Type.get(module.context)
    with module.context:
        for op in _static_pointwise_convs(module):
            x, w, init = op.operands[0], op.operands[1], op.operands[2]
            strides, dilations = window_ints(op, "strides"), window_ints(op, "dilations")
            if strides == [1, 1]:
                continue
            n, oh, ow, _f = (int(d) for d in ir.RankedTensorType(op.results[0].type).shape)
            c = int(ir.RankedTensorType(x.type).get_dim_size(3))
            with op.location, ir.InsertionPoint(op):
                compact = ir.RankedTensorType.get([n, oh, ow, c], f32)
                picked = tensor_d.extract_slice(compact, x, [], [], [], [0, 0, 0, 0], [n, oh, ow, c], [1, strides[0], strides[1], 1])
                copied = linalg.copy(picked, outs=[tensor_d.empty([n, oh, ow, c], f32)])
                y = linalg.conv_2d_nhwc_hwcf(copied, w, outs=[init], strides=[1, 1], dilations=dilations)
            op.results[0].replace_all_uses_with(y)
            op.erase()
            count += 1
    return count


#: Keep wide 1x1 convolutions direct where their direct tile is strong (two vectors of channels,
#: tiles averaging FMA_DEPTH accumulators or more), one thread; a module flag for A/Bs.
WIDE_POINTWISE_DIRECT: bool = True


def _pointwise_pays(c: int, f: int, ow: int, cpu: CpuFeatures, wide_direct: bool = True) -> bool:
    """Whether a stride-1 1x1 convolution with `c` input and `f` output channels at output width
    `ow` runs faster as a packed matmul over its pixels (see `pointwise_as_matmul`)."""
    lanes = cpu.lanes(32)
    budget = cpu.vector_registers // 2
    if short_register_tile(ow, f, lanes, budget):
        return True
    if not (f >= 12 * lanes and c >= 8 * lanes):
        return False
    if not (WIDE_POINTWISE_DIRECT and wide_direct):
        return True
    return f % (2 * lanes) != 0 or mean_accumulators(ow, f, lanes, budget) < FMA_DEPTH


def _direct_runs_alone(op: ir.Operation, cpu: CpuFeatures, threads: int) -> bool:
    """Whether the direct convolution `op` would have its filter packed per channel tile
    (`_tiles`) with a tile count the threads do not divide, so `_rewrite` runs it on one
    thread (SqueezeNet's 1000 channels = 125 tiles of 8 on 2 threads)."""
    f_t = _tiles(op, cpu)
    if f_t is None:
        return False
    count = ir.RankedTensorType(op.results[0].type).get_dim_size(3) // f_t
    return count % threads != 0


def pointwise_as_matmul(module: ir.Module, cpu: CpuFeatures, threads: int = 1) -> int:
    """Rewrite static f32 stride-1 1x1 ``linalg.conv_2d_nhwc_hwcf``s with a constant filter as a
    ``linalg.matmul`` of their pixels ([n*h*w, c] x [c, f], views of the same buffers), which
    data tiling then packs (the filter at compile time), where `_pointwise_pays`; returns how
    many it rewrote. Only for CPUs without AVX-512: there the direct convolution was measured
    faster on every CNN (transforms/lowering/conv.py, ``ONE_BY_ONE_AS_MATMUL``), and its plans
    are kept.

    Why: the direct convolution's register tile had to divide the output width, so widths such
    as 13, 27, 14 or 7 got few accumulators (or the whole-file tile, bound by one broadcast per
    FMA), while the matmul's pixels are one dimension tiled by the tile table's m0. (Since the
    direct tile may leave a peeled partial tile, conv_plan.py, only widths too short to fill a
    tile count as short; the measurements below predate that, and the channel rule still sends
    the wide 1x1s to the matmul.) The packed
    matmul packs the pixels at run time (a read and write of n*h*w x c per call), which pays
    when that is spread over enough output channels and the reduction is long enough for the
    mmt4d loop. One-process A/B per convolution with Relu, AVX2 Zen 3, 1 thread (direct /
    matmul time): 512->1000 at 13x13 1.70x (SqueezeNet's classifier), 256->1024 at 14 1.33x,
    64->256 at 13 1.27x, 32->128 at 27 1.22x, 512->128 at 28 1.12x, 1024->256 at 14 1.12x,
    320->1280 at 7 1.15x, 64->256 at 56 1.06x; kept direct: 256->64 at 56 0.88x, 144->24 at 56
    0.84x, 192->32 at 28 0.86x, 64->64 at 56 0.94x, 24->144 at 56 0.97x, 16->96 at 112 0.99x.
    Hence the rule: a short direct tile, or at least 12 vectors of output channels and 8 of
    input channels.

    Since the direct tile became 5 pixels x 2 vectors with a peeled last tile, the channel rule
    sends only the wide convolutions whose direct tile is still weak to the matmul: one vector
    of channels (SqueezeNet's 1000-channel classifier: direct 4.02 ms, matmul 2.63), or widths
    whose tiles average fewer than FMA_DEPTH accumulators (`conv_plan.mean_accumulators`:
    width 7 is a 4- and a 3-pixel tile). One-process A/B, AVX2 Zen 3, 1 thread, NHWC kernels,
    median ms direct / matmul: 64->256 at 56 2.03 / 2.65, 256->128 at 56 3.17 / 4.41, 320->128
    at 28 1.03 / 1.20, 576->192 at 14 0.73 / 0.81, 1024->256 at 14 1.30 / 1.43; at width 7:
    1024->352 0.73 / 0.69, 512->2048 2.05 / 1.96. Models, the rule against the channel rule
    alone: ResNet-50 0.95, MobileNetV2 0.93 (its 14-wide expansions, whose unpacked result was
    copied into the next depthwise convolution's padded buffer, now write it in place),
    ShuffleNet 0.98, Inception-v1 0.99, Inception-v2, DenseNet, SqueezeNet, light ResNet-50
    within 1%.

    With several threads the packed matmul's phases (pack, product, unpack) each split over the
    threads, and the same A/B at 2 threads (a loaded machine) favoured the direct convolution's
    single split: 96->576 at 14 0.71x, 64->256 at 56 0.73-0.90x, 512->128 at 28 0.83x, 384->64 at 14
    0.84x, 2048->512 at 7 0.97x. So with threads only the direct convolutions that would run on
    one thread are rewritten (`_direct_runs_alone`): 512->1000 at 13 on 2 threads 17.1 -> 3.6 ms.
    """
    if not POINTWISE_AS_MATMUL or cpu.vector_bits >= 512:
        return 0
    count = 0
    f32 = ir.F32Type.get(module.context)
    with module.context:
        for op in _static_pointwise_convs(module):
            x, w, init = op.operands[0], op.operands[1], op.operands[2]
            xt, wt, out = (ir.RankedTensorType(v.type) for v in (x, w, op.results[0]))
            if window_ints(op, "strides") != [1, 1] or list(xt.shape[:3]) != list(out.shape[:3]):
                continue
            n, h, wd, c = (int(d) for d in xt.shape)
            f = int(wt.get_dim_size(3))
            # With threads only a direct convolution that would run on one thread is rewritten
            # (below), and then the channel rule alone decides: its split is the matmul's gain.
            if _constant_array(w) is None or not _pointwise_pays(c, f, wd, cpu, wide_direct=threads <= 1):
                continue
            if threads > 1 and not _direct_runs_alone(op, cpu, threads):
                continue
            pixels = n * h * wd
            with op.location, ir.InsertionPoint(op):
                a = tensor.collapse_shape(ir.RankedTensorType.get([pixels, c], f32), x, [[0, 1, 2], [3]])
                b = tensor.collapse_shape(ir.RankedTensorType.get([c, f], f32), w, [[0, 1, 2], [3]])
                acc = tensor.collapse_shape(ir.RankedTensorType.get([pixels, f], f32), init, [[0, 1, 2], [3]])
                prod = linalg.matmul(a, b, outs=[acc])
                y = tensor.expand_shape(out, prod, [[0, 1, 2], [3]], [], [n, h, wd, f])
            op.results[0].replace_all_uses_with(y)
            op.erase()
            count += 1
    return count
