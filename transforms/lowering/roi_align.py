"""RoiAlign (opset 16/22): average or max pooling of bilinear samples over each region of interest.

What: an `scf.for` over the ROIs carries the output (R, C, out_h, out_w). Per ROI, scalar arith
computes the box in feature-map coordinates (half_pixel or output_half_pixel), the bin sizes and
the sampling grid (`sampling_ratio`, or ceil(roi size / bins) when it is 0: a run-time count,
which is why the grid is a loop range rather than an unrolled constant). One reduction
`linalg.generic` over (C, ph, pw, iy, ix) then samples X bilinearly at each grid point and
reduces it: avg sums the four weighted taps and divides by the grid size; max keeps the largest
of the four weighted taps (not of their sum), as the reference (and onnxruntime) do. The grid
dims come from a `tensor.empty` of the run-time grid shape that the generic reads only for its
loop ranges. The arithmetic follows the reference's order in the compute type (f32, f64 for f64
inputs), including its boundary rule: a point beyond [-1, size] contributes 0, otherwise it is
clamped into the map.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math, scf, tensor

from onnxc.transforms.lowering.runtime_checks import require, require_indices
from onnxc.transforms.lowering.common import (
    Node,
    affine_map,
    const_index,
    const_scalar,
    convert_scalar,
    convert_tensor,
    dim,
    dim_value,
    empty,
    expand_unit_dims,
    filled,
    generic,
    index_of,
    insert_slice,
    is_float,
    lowers,
    rank_of,
    shape_of,
    static_shape,
    to_index,
)

F = arith.CmpFPredicate
P = arith.CmpIPredicate


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _check_roi_align(node: Node) -> str | None:
    """Rank-4 float X, (R, 4) rois, 1-D batch indices; known modes."""
    ts = node.onnx_types[:3]
    if not all(isinstance(t, ir.RankedTensorType) for t in ts):
        return "X, rois and batch_indices must be ranked"
    if rank_of(ts[0]) != 4 or rank_of(ts[1]) != 2 or rank_of(ts[2]) != 1:
        return "X must be rank 4, rois rank 2 and batch_indices rank 1"
    if static_shape(ts[1])[1] not in (None, 4):
        return "rois must have 4 columns"
    if not is_float(node.in_elem(0)) or not is_float(node.in_elem(1)):
        return "X and rois must be float tensors"
    if _text(node.attr("mode", "avg")).lower() not in ("avg", "max"):
        return f"mode '{_text(node.attr('mode'))}' is neither avg nor max"
    ctm = _text(node.attr("coordinate_transformation_mode", "half_pixel")).lower()
    if ctm not in ("half_pixel", "output_half_pixel"):
        return f"coordinate_transformation_mode '{ctm}' is not lowered"
    if int(node.attr("output_height", 1)) < 1 or int(node.attr("output_width", 1)) < 1:
        return "output_height and output_width must be positive"
    return None


@lowers("RoiAlign", check=_check_roi_align)
def lower_roi_align(node: Node) -> list[ir.Value]:
    """RoiAlign (see the module docstring)."""
    in_elem = node.in_elem(0)
    ct = ir.F64Type.get() if in_elem == ir.F64Type.get() else ir.F32Type.get()
    x = convert_tensor(node.input(0), in_elem, ct)
    rois, bidx = node.input(1), node.input(2)
    roi_elem, idx_elem = node.in_elem(1), node.in_elem(2)
    avg = _text(node.attr("mode", "avg")).lower() == "avg"
    half_pixel = _text(node.attr("coordinate_transformation_mode", "half_pixel")).lower() == "half_pixel"
    ph_n, pw_n = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    ratio = int(node.attr("sampling_ratio", 0))
    scale = float(node.attr("spatial_scale", 1.0))
    n_rois, chans = dim(bidx, 0), dim(x, 1)
    height, width = dim_value(dim(x, 2)), dim_value(dim(x, 3))

    def c(v: float) -> ir.Value:
        return const_scalar(v, ct)

    def to_f(i: ir.Value) -> ir.Value:
        return arith.sitofp(ct, arith.index_cast(ir.IntegerType.get_signless(64), i))

    idx = ir.IndexType.get()
    h_f, w_f = to_f(height), to_f(width)
    # A batch index outside [0, N) read outside X (SIGSEGV): a run-time error (runtime_checks.py).
    require_indices(node.op, bidx, False, [dim_value(dim(x, 0))], 0, [dim_value(d) for d in shape_of(node.input(0))], negative=False)
    # rois has one row of 4 per batch index: the loop runs over the batch indices and read rows
    # past a shorter rois (the compile fuzzer: rois of 2 rows, 3 indices, symbolic dims, answered).
    rows, cols = dim(rois, 0), dim(rois, 1)
    if not (isinstance(rows, int) and isinstance(n_rois, int) and isinstance(cols, int)):
        fits = arith.andi(arith.cmpi(arith.CmpIPredicate.eq, dim_value(rows), dim_value(n_rois)),
                          arith.cmpi(arith.CmpIPredicate.eq, dim_value(cols), const_index(4)))  # fmt: skip
        require(fits, node.op, "rois of the run-time shape {rois} does not hold one row of 4 per batch index ({count})",
                [("rois", [dim_value(rows), dim_value(cols)]), ("count", dim_value(n_rois))])  # fmt: skip
    out0 = empty([n_rois, chans, ph_n, pw_n], ct)
    loop = scf.ForOp(const_index(0), dim_value(n_rois), const_index(1), [out0])
    with ir.InsertionPoint(loop.body):
        r = loop.induction_variable
        (out,) = list(loop.inner_iter_args)
        coord = [convert_scalar(tensor.extract(rois, [r, const_index(j)]), roi_elem, ct) for j in range(4)]
        offset = c(0.5 if half_pixel else 0.0)
        start_w, start_h, end_w, end_h = (arith.subf(arith.mulf(v, c(scale)), offset) for v in coord)
        roi_w, roi_h = arith.subf(end_w, start_w), arith.subf(end_h, start_h)
        if not half_pixel:  # malformed ROIs are forced to 1x1
            roi_w, roi_h = arith.maximumf(roi_w, c(1.0)), arith.maximumf(roi_h, c(1.0))
        bin_h, bin_w = arith.divf(roi_h, c(ph_n)), arith.divf(roi_w, c(pw_n))
        if ratio > 0:
            grid_h = grid_w = const_index(ratio)
        else:
            # ceil(size / bins); a negative size (half_pixel, reversed box) samples nothing.
            def grid(size: ir.Value, n: int) -> ir.Value:
                g = arith.fptosi(ir.IntegerType.get_signless(64), math.ceil(arith.divf(size, c(n))))
                return arith.maxsi(arith.index_cast(idx, g), const_index(0))

            grid_h, grid_w = grid(roi_h, ph_n), grid(roi_w, pw_n)
        grid_h_f, grid_w_f = to_f(grid_h), to_f(grid_w)
        n_samples = arith.muli(grid_h, grid_w)
        count = to_f(arith.maxsi(n_samples, const_index(1)))
        batch = to_index(tensor.extract(bidx, [r]), idx_elem)

        def sample(args: list[ir.Value]) -> list[ir.Value]:
            ch, ph, pw, iy, ix = (index_of(i) for i in range(5))
            yy = arith.addf(arith.addf(start_h, arith.mulf(to_f(ph), bin_h)), arith.divf(arith.mulf(arith.addf(to_f(iy), c(0.5)), bin_h), grid_h_f))
            xx = arith.addf(arith.addf(start_w, arith.mulf(to_f(pw), bin_w)), arith.divf(arith.mulf(arith.addf(to_f(ix), c(0.5)), bin_w), grid_w_f))
            outside = arith.ori(
                arith.ori(arith.cmpf(F.OLT, yy, c(-1.0)), arith.cmpf(F.OGT, yy, h_f)),
                arith.ori(arith.cmpf(F.OLT, xx, c(-1.0)), arith.cmpf(F.OGT, xx, w_f)),
            )

            def axis(v: ir.Value, size: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
                """(low, high, l, h) of one coordinate, as the reference clamps it."""
                v = arith.maximumf(v, c(0.0))
                last = arith.subi(size, const_index(1))
                low = arith.index_cast(idx, arith.fptosi(ir.IntegerType.get_signless(64), v))
                at_end = arith.cmpi(P.sge, low, last)
                low = arith.select(at_end, last, low)
                high = arith.select(at_end, last, arith.addi(low, const_index(1)))
                v = arith.select(at_end, to_f(low), v)
                frac = arith.subf(v, to_f(low))
                return low, high, frac, arith.subf(c(1.0), frac)

            y_lo, y_hi, ly, hy = axis(yy, height)
            x_lo, x_hi, lx, hx = axis(xx, width)
            zero_i = const_index(0)
            taps = []
            for yi, xi, wy, wx in ((y_lo, x_lo, hy, hx), (y_lo, x_hi, hy, lx), (y_hi, x_lo, ly, hx), (y_hi, x_hi, ly, lx)):
                # Out-of-map points read position 0 with weight 0, as the reference's pre-calc.
                yi, xi = arith.select(outside, zero_i, yi), arith.select(outside, zero_i, xi)
                w = arith.select(outside, c(0.0), arith.mulf(wy, wx))
                taps.append(arith.mulf(w, tensor.extract(x, [batch, ch, yi, xi])))
            if avg:
                return [arith.addf(args[1], arith.addf(arith.addf(arith.addf(taps[0], taps[1]), taps[2]), taps[3]))]
            best = arith.maximumf(arith.maximumf(arith.maximumf(taps[0], taps[1]), taps[2]), taps[3])
            return [arith.maximumf(args[1], best)]

        grid_space = empty([grid_h, grid_w], ct)
        init = filled([chans, ph_n, pw_n], ct, 0.0 if avg else float("-inf"))
        pooled = generic(
            [grid_space], [init],
            [affine_map(5, [3, 4]), affine_map(5, [0, 1, 2])],
            ["parallel", "parallel", "parallel", "reduction", "reduction"], sample,
        )[0]
        none = arith.cmpi(P.eq, n_samples, const_index(0))
        finish = (lambda v: arith.divf(v, count)) if avg else (lambda v: arith.select(none, c(0.0), v))
        pooled = generic(
            [pooled], [empty([chans, ph_n, pw_n], ct)], [affine_map(3, [0, 1, 2])] * 2, ["parallel"] * 3,
            lambda a: [finish(a[0])],
        )[0]
        scf.YieldOp([insert_slice(expand_unit_dims(pooled, [0]), out, [r, 0, 0, 0])])
    return [convert_tensor(loop.results[0], ct, in_elem)]
