"""Resize (opset 11-19; nearest, linear, cubic; every coordinate transformation mode) and Upsample.

Resize is separable: the reference (and this lowering) resizes one axis at a time, in f64, and
converts to the element type at the end. Each axis is one `linalg.generic` over the output whose
body maps the output index to a source coordinate (`coordinate_transformation_mode`), then
reads 1 (nearest), 2 (linear) or 4 (cubic) taps with `tensor.extract` at clamped indices (edge
padding, as the reference does) and blends them; `exclude_outside` renormalizes the cubic
weights over the taps inside the input; `tf_crop_and_resize` yields `extrapolation_value`
outside the region. Axes whose scale is 1 and size unchanged (and no crop) are skipped.

Scales, sizes and roi may be constants or run-time values (dynamic output dims). Antialiased
linear/cubic resizing (a kernel widened by 1/scale when downsampling) is `resize_antialias.py`.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, math, tensor

from onnxc.transforms.lowering.common import (
    Dim,
    Node,
    const_index,
    const_scalar,
    convert_element,
    convert_scalar,
    convert_tensor,
    dim,
    dim_value,
    elem_of,
    empty,
    generic,
    identity_map,
    index_of,
    is_float,
    lowers,
    rank_of,
    shape_of,
    static_shape,
)

F = arith.CmpFPredicate


def _plan(node: Node) -> tuple[list[float], list[int], list[float] | None] | str:
    """(per-axis scale factors, output sizes, roi as [starts..., ends...] or None)."""
    xs = static_shape(node.onnx_types[0])
    r = len(xs)
    if any(d is None for d in xs):
        return "dynamic input dims are not lowered for Resize"
    in_shape = [int(d) for d in xs]  # type: ignore[arg-type]
    if node.op_type == "Upsample":
        sc = node.attr("scales") if node.version < 9 else (None if node.const(1) is None else [float(v) for v in node.const(1).reshape(-1)])
        if sc is None:
            return "scales must be a constant"
        return list(sc), [int(pymath.floor(s * d)) for s, d in zip(sc, in_shape)], None
    axes = node.attr("axes")
    axes = [a + r if a < 0 else a for a in axes] if axes else list(range(r))
    roi_in = node.const(1) if node.has(1) else None
    scales_c = node.const(2) if node.has(2) else None
    sizes_c = node.const(3) if node.has(3) else None
    if (node.has(1) and roi_in is None) or (node.has(2) and scales_c is None) or (node.has(3) and sizes_c is None):
        return "runtime"
    if scales_c is not None and scales_c.size == 0:
        scales_c = None
    if sizes_c is not None and sizes_c.size == 0:
        sizes_c = None
    roi: list[float] | None = None
    if roi_in is not None and roi_in.size:
        vals = [float(v) for v in roi_in.reshape(-1)]
        roi = [0.0] * r + [1.0] * r
        n = len(axes)
        for i, a in enumerate(axes):
            roi[a] = vals[i]
            roi[r + a] = vals[n + i]
    if sizes_c is not None:
        sz = [int(v) for v in sizes_c.reshape(-1)]
        out = list(in_shape)
        for i, a in enumerate(axes):
            out[a] = sz[i]
        scales = [out[i] / in_shape[i] for i in range(r)]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            s = min(scales[a] for a in axes) if policy == "not_larger" else max(scales[a] for a in axes)
            scales = [s if i in axes else 1.0 for i in range(r)]
            out = [int(s * in_shape[i] + 0.5) if i in axes else in_shape[i] for i in range(r)]
        return scales, out, roi
    if scales_c is None:
        return "one of scales and sizes is needed"
    sc = [float(v) for v in scales_c.reshape(-1)]
    scales = [1.0] * r
    for i, a in enumerate(axes):
        scales[a] = sc[i]
    return scales, [int(s * d) for s, d in zip(scales, in_shape)], roi


def _check_resize(node: Node) -> str | None:
    if node.op_type == "Resize" and node.version < 11:
        return "Resize-10 is not lowered; run onnx-upgrade-ops"
    if int(node.attr("antialias", 0) or 0) and node.attr("mode", "nearest") == "nearest":
        return "antialias is not defined for nearest mode"
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic", "bilinear", "trilinear"):
        return f"mode {mode!r}"
    if mode != "nearest" and not is_float(node.in_elem(0)):
        return f"{mode} resize of integers is not lowered"
    p = _plan(node)
    if p == "runtime":
        for i in (1, 2, 3):
            if node.has(i) and len(static_shape(node.onnx_types[i])) != 1:
                return "roi, scales and sizes must be 1-D"
        if not (node.has(2) and static_shape(node.onnx_types[2])[0] not in (0, None)) and not node.has(3):
            return "one of scales and sizes is needed"
        return None
    return p if isinstance(p, str) else None


def source_coordinate(node: Node, in_w: int, scale: float | ir.Value, out_w: Dim, roi: tuple[float | ir.Value, float | ir.Value] | None) -> Callable[[ir.Value], tuple[ir.Value, ir.Value | None]]:
    """The `coordinate_transformation_mode` of one axis: builds the values it needs (at the
    current insertion point, outside any generic body) and returns `map(y) -> (x, outside)`,
    the f64 source coordinate of output index y (an f64) and, for tf_crop_and_resize, whether
    it falls outside the input (else None). Shared by the plain and the antialiased resize."""
    f64 = ir.F64Type.get()
    ctm = node.attr("coordinate_transformation_mode", "asymmetric" if node.op_type == "Upsample" else "half_pixel")

    def c(v: float) -> ir.Value:
        return const_scalar(v, f64)

    def fv(v: float | ir.Value) -> ir.Value:
        return v if isinstance(v, ir.Value) else c(float(v))

    scale_v = fv(scale)
    out_w_v = arith.sitofp(f64, arith.index_cast(ir.IntegerType.get_signless(64), out_w)) if isinstance(out_w, ir.Value) else c(float(out_w))
    out_wf = arith.mulf(scale_v, c(float(in_w)))  # the unrounded output width
    one_out = arith.cmpf(F.OEQ, out_wf, c(1.0))
    r0 = fv(roi[0]) if roi else c(0.0)
    r1 = fv(roi[1]) if roi else c(1.0)

    def coordinate(y: ir.Value) -> tuple[ir.Value, ir.Value | None]:
        outside = None
        half = arith.subf(arith.divf(arith.addf(y, c(0.5)), scale_v), c(0.5))
        if ctm == "align_corners":
            xo = arith.select(one_out, c(0.0), arith.divf(arith.mulf(y, c(float(in_w - 1))), arith.subf(out_wf, c(1.0))))
        elif ctm == "asymmetric":
            xo = arith.divf(y, scale_v)
        elif ctm == "tf_crop_and_resize":
            span = arith.mulf(arith.subf(r1, r0), c(float(in_w - 1)))
            start = arith.mulf(r0, c(float(in_w - 1)))
            single = arith.addf(arith.divf(span, c(2.0)), start)
            many = arith.addf(arith.divf(arith.mulf(y, span), arith.subf(out_wf, c(1.0))), start)
            xo = arith.select(one_out, single, many)
            outside = arith.ori(arith.cmpf(F.OLT, xo, c(0.0)), arith.cmpf(F.OGT, xo, c(float(in_w - 1))))
        elif ctm == "pytorch_half_pixel":
            xo = arith.select(one_out, c(-0.5), half)
        elif ctm == "half_pixel_symmetric":
            adjustment = arith.divf(out_w_v, out_wf)
            offset = arith.mulf(c(in_w / 2), arith.subf(c(1.0), adjustment))
            xo = arith.addf(offset, half)
        else:  # half_pixel
            xo = half
        return xo, outside

    return coordinate


def _resize_axis(x: ir.Value, axis: int, scale: float | ir.Value, out_w: Dim, node: Node, roi: tuple[float | ir.Value, float | ir.Value] | None) -> ir.Value:
    """Resize one axis of x to `out_w` with `scale` (python numbers or f64/index values)."""
    f64 = ir.F64Type.get()
    r = rank_of(x)
    in_w = static_shape(x.type)[axis]
    assert in_w is not None
    mode = node.attr("mode", "nearest")
    if mode in ("bilinear", "trilinear"):
        mode = "linear"
    if int(node.attr("antialias", 0) or 0):  # linear/cubic with a widened kernel (resize_antialias.py)
        from onnxc.transforms.lowering.resize_antialias import resize_axis_antialias

        return resize_axis_antialias(x, axis, scale, out_w, node, roi)
    nearest_mode = node.attr("nearest_mode", "round_prefer_floor")
    a = float(node.attr("cubic_coeff_a", -0.75))
    excl = int(node.attr("exclude_outside", 0) or 0)
    extrap = float(node.attr("extrapolation_value", 0.0))
    shape = shape_of(x)
    shape[axis] = out_w

    def c(v: float) -> ir.Value:
        return const_scalar(v, f64)

    coordinate = source_coordinate(node, in_w, scale, out_w, roi)

    def body(args: list[ir.Value]) -> list[ir.Value]:
        y = arith.sitofp(f64, arith.index_cast(ir.IntegerType.get_signless(64), index_of(axis)))
        xo, outside = coordinate(y)
        fl = math.floor(xo)
        ratio = arith.subf(xo, fl)
        base = arith.index_cast(ir.IndexType.get(), arith.fptosi(ir.IntegerType.get_signless(64), fl))

        def clamp(i: ir.Value) -> ir.Value:
            return arith.minsi(arith.maxsi(i, const_index(0)), const_index(in_w - 1))

        def read(i: ir.Value) -> ir.Value:
            coords = [clamp(i) if d == axis else index_of(d) for d in range(r)]
            return tensor.extract(x, coords)

        if mode == "nearest":
            is_int = arith.cmpf(F.OEQ, ratio, c(0.0))
            if nearest_mode == "round_prefer_ceil":
                up = arith.cmpf(F.OGE, ratio, c(0.5))
            elif nearest_mode == "floor":
                up = arith.cmpf(F.OLT, ratio, c(0.0))  # never
            elif nearest_mode == "ceil":
                up = arith.cmpf(F.OGT, ratio, c(0.0))
            else:  # round_prefer_floor
                up = arith.cmpf(F.OGT, ratio, c(0.5))
            up = arith.andi(up, arith.xori(is_int, const_scalar(1, ir.IntegerType.get_signless(1))))
            idx = arith.select(up, arith.addi(base, const_index(1)), base)
            v = read(idx)
        elif mode == "linear":
            v0, v1 = read(base), read(arith.addi(base, const_index(1)))
            v = arith.addf(arith.mulf(v0, arith.subf(c(1.0), ratio)), arith.mulf(v1, ratio))
        else:  # cubic
            s = ratio
            s1 = arith.addf(s, c(1.0))
            t = arith.subf(c(1.0), s)
            t1 = arith.addf(t, c(1.0))

            def far(u: ir.Value) -> ir.Value:  # ((a*u - 5a)*u + 8a)*u - 4a
                return arith.subf(arith.mulf(arith.addf(arith.mulf(arith.subf(arith.mulf(c(a), u), c(5 * a)), u), c(8 * a)), u), c(4 * a))

            def near(u: ir.Value) -> ir.Value:  # ((a+2)*u - (a+3))*u*u + 1
                return arith.addf(arith.mulf(arith.mulf(arith.subf(arith.mulf(c(a + 2), u), c(a + 3)), u), u), c(1.0))

            ws = [far(s1), near(s), near(t), far(t1)]
            taps = [arith.addi(base, const_index(k)) if k >= 0 else arith.subi(base, const_index(-k)) for k in (-1, 0, 1, 2)]
            if excl:
                inside = [arith.andi(arith.cmpi(arith.CmpIPredicate.sge, i, const_index(0)), arith.cmpi(arith.CmpIPredicate.slt, i, const_index(in_w))) for i in taps]
                ws = [arith.select(ok, w, c(0.0)) for ok, w in zip(inside, ws)]
                tot = arith.addf(arith.addf(ws[0], ws[1]), arith.addf(ws[2], ws[3]))
                ws = [arith.divf(w, tot) for w in ws]
            v = c(0.0)
            for w, i in zip(ws, taps):
                v = arith.addf(v, arith.mulf(w, read(i)))
        if outside is not None:
            fill = const_scalar(extrap if is_float(elem_of(x.type)) else int(extrap), elem_of(x.type))
            v = arith.select(outside, fill, v)
        return [v]

    return generic([], [empty(shape, elem_of(x.type))], [identity_map(r)], ["parallel"] * r, body)[0]


def _runtime_plan(node: Node, x: ir.Value) -> tuple[list[ir.Value], list[Dim], list[tuple[ir.Value, ir.Value]] | None, list[int]]:
    """Per-axis scale (f64 values) and output size for runtime scales/sizes/roi, the roi per
    axis, and the axes to resize."""
    f64 = ir.F64Type.get()
    i64 = ir.IntegerType.get_signless(64)
    r = rank_of(x)
    in_shape = [int(d) for d in static_shape(x.type)]  # type: ignore[arg-type]
    axes = node.attr("axes")
    axes = [a + r if a < 0 else a for a in axes] if axes else list(range(r))

    def elem(i: int, j: int) -> ir.Value:
        v = tensor.extract(node.input(i), [const_index(j)])
        return convert_scalar(v, node.in_elem(i), f64)

    def given(i: int, want: int) -> bool:
        """Whether input i is given: a static non-zero length, or a run-time length, which must
        then be `want` (checked when the model runs). A run-time length was read as absent: a
        tf_crop_and_resize whose roi had a symbolic length ignored the roi and answered the
        uncropped resize (fuzz seed 409 case 30640)."""
        if not node.has(i):
            return False
        length = static_shape(node.onnx_types[i])[0]
        if length is None:
            from onnxc.transforms.lowering.runtime_checks import require

            got = dim_value(dim(node.input(i), 0))
            require(arith.cmpi(arith.CmpIPredicate.eq, got, const_index(want)), node.op,
                    f"{('roi', 'scales', 'sizes')[i - 1]} has {{n}} entries at run time, {want} expected", [("n", got)])
            return True
        return length != 0

    scales: list[ir.Value] = [const_scalar(1.0, f64)] * r
    outs: list[Dim] = list(in_shape)
    sizes_given = given(3, len(axes))
    if sizes_given:
        for j, a in enumerate(axes):
            scales[a] = arith.divf(elem(3, j), const_scalar(float(in_shape[a]), f64))
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = arith.minimumf if policy == "not_larger" else arith.maximumf
            sc = scales[axes[0]]
            for a in axes[1:]:
                sc = pick(sc, scales[a])
            for a in axes:
                scales[a] = sc
                outs[a] = arith.index_cast(ir.IndexType.get(), arith.fptosi(i64, arith.addf(arith.mulf(sc, const_scalar(float(in_shape[a]), f64)), const_scalar(0.5, f64))))
        else:
            for j, a in enumerate(axes):
                outs[a] = arith.index_cast(ir.IndexType.get(), arith.fptosi(i64, elem(3, j)))
    else:
        given(2, len(axes))
        for j, a in enumerate(axes):
            scales[a] = elem(2, j)
            outs[a] = arith.index_cast(ir.IndexType.get(), arith.fptosi(i64, math.floor(arith.mulf(scales[a], const_scalar(float(in_shape[a]), f64)))))
    roi = None
    if node.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize" and given(1, 2 * len(axes)):
        n = len(axes)
        roi = [(const_scalar(0.0, f64), const_scalar(1.0, f64))] * r
        for j, a in enumerate(axes):
            roi[a] = (elem(1, j), elem(1, n + j))
    return scales, outs, roi, axes


@lowers("Resize", "Upsample", check=_check_resize)
def lower_resize(node: Node) -> list[ir.Value]:
    """Resize/Upsample: separable per-axis interpolation in f64 (see the module docstring).
    Runtime scales/sizes/roi give dynamic output dims and resize every listed axis."""
    x = node.input(0)
    onnx_elem = node.in_elem(0)
    mode = node.attr("mode", "nearest")
    f64 = ir.F64Type.get()
    work = x if mode == "nearest" else convert_tensor(x, onnx_elem, f64)
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    r = rank_of(x)
    plan = _plan(node)
    if plan == "runtime":
        scales_v, outs_v, roi_v, axes = _runtime_plan(node, x)
        for axis in axes:
            work = _resize_axis(work, axis, scales_v[axis], outs_v[axis], node, roi_v[axis] if roi_v else None)
    else:
        scales, out, roi = plan  # type: ignore[misc]
        for axis in range(r):
            in_w = static_shape(work.type)[axis]
            full_roi = roi is None or (pymath.isclose(roi[axis], 0.0) and pymath.isclose(roi[r + axis], 1.0))
            if pymath.isclose(scales[axis], 1.0) and out[axis] == in_w and (full_roi or ctm != "tf_crop_and_resize"):
                continue
            work = _resize_axis(work, axis, scales[axis], out[axis], node, (roi[axis], roi[r + axis]) if roi else None)
    if mode == "nearest":
        return [work]
    return [convert_tensor(work, f64, onnx_elem)]
