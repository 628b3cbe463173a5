"""DeformConv (opset 19/22), 2-D: a convolution whose kernel taps are moved by learned offsets
and optionally scaled by a mask.

What: two `linalg.generic`s.
  1. Sampling, over (N, C_in, kH, kW, oH, oW): the tap (kh, kw) of output pixel (i, j) sits at
     y = i * stride_h - pad_top + kh * dilation_h + offset_y, likewise x; X[n, c] is sampled there
     bilinearly with zero padding (what the reference gets from GridSample with align_corners=1
     on those coordinates) and multiplied by the mask. The offset and mask of channel c are those
     of its offset group c / (C_in / offset_group).
  2. Contraction, over (N, C_out, oH, oW, C_in/group, kH, kW): out = B + sum W * sampled, the
     sampled channel of output channel o being (o / (C_out/group)) * (C_in/group) + ic (an
     affine map, so grouped convolution needs no copy).
Why two steps rather than one: every sample is shared by all output channels of its group, so
computing it once (the "deformable im2col") costs one bilinear read per (channel, tap, pixel)
instead of one per output channel. Only 2-D is lowered (the reference implements only 2-D).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math, tensor

from onnxc.transforms.lowering.common import (
    Node,
    affine_map,
    const_index,
    const_scalar,
    convert_tensor,
    dim,
    dim_value,
    empty,
    filled,
    generic,
    identity_map,
    index_of,
    is_float,
    lowers,
    rank_of,
    static_shape,
)

F = arith.CmpFPredicate
P = arith.CmpIPredicate


def _check_deform_conv(node: Node) -> str | None:
    """2-D, float, W with static dims, channel counts consistent with the group attributes."""
    for i in (0, 1, 2):
        if not isinstance(node.onnx_types[i], ir.RankedTensorType):
            return f"input {i} must be ranked"
    if rank_of(node.onnx_types[0]) != 4:
        return "only 2-D deformable convolution is lowered"
    if not is_float(node.in_elem(0)):
        return "X must be a float tensor"
    w = static_shape(node.onnx_types[1])
    if len(w) != 4 or any(d is None for d in w):
        return "W must be rank 4 with static dims"
    group, ogroup = int(node.attr("group", 1)), int(node.attr("offset_group", 1))
    kernel = list(node.attr("kernel_shape") or w[2:])
    if kernel != w[2:]:
        return f"kernel_shape {kernel} differs from W's {w[2:]}"
    c_in = static_shape(node.onnx_types[0])[1]
    if c_in is None:
        return "X's channel dim must be static"
    if group < 1 or ogroup < 1 or c_in != w[1] * group or w[0] % group or c_in % ogroup:
        return f"channels (X: {c_in}, W: {w[:2]}) do not fit group {group} / offset_group {ogroup}"
    off = static_shape(node.onnx_types[2])
    if len(off) != 4 or off[1] != ogroup * kernel[0] * kernel[1] * 2:
        return "offset must be (N, offset_group * kH * kW * 2, oH, oW)"
    if node.has(4):
        m = static_shape(node.onnx_types[4])
        if len(m) != 4 or m[1] != ogroup * kernel[0] * kernel[1]:
            return "mask must be (N, offset_group * kH * kW, oH, oW)"
    for name, n in (("pads", 4), ("strides", 2), ("dilations", 2)):
        v = node.attr(name)
        if v is not None and len(v) != n:
            return f"{name} must have {n} values"
    return None


@lowers("DeformConv", check=_check_deform_conv)
def lower_deform_conv(node: Node) -> list[ir.Value]:
    """DeformConv (see the module docstring)."""
    elem = node.in_elem(0)
    ct = ir.F64Type.get() if elem == ir.F64Type.get() else ir.F32Type.get()
    x = convert_tensor(node.input(0), elem, ct)
    w = convert_tensor(node.input(1), node.in_elem(1), ct)
    off = convert_tensor(node.input(2), node.in_elem(2), ct)
    mask = convert_tensor(node.input(4), node.in_elem(4), ct) if node.has(4) else None
    bias = convert_tensor(node.input(3), node.in_elem(3), ct) if node.has(3) else None
    c_out, c_in_g, kh_n, kw_n = static_shape(node.onnx_types[1])
    group, ogroup = int(node.attr("group", 1)), int(node.attr("offset_group", 1))
    pads = [int(p) for p in (node.attr("pads") or [0, 0, 0, 0])]
    strides = [int(s) for s in (node.attr("strides") or [1, 1])]
    dil = [int(d) for d in (node.attr("dilations") or [1, 1])]
    c_in = c_in_g * group
    c_per_og = c_in // ogroup
    n, oh, ow = dim(off, 0), dim(off, 2), dim(off, 3)
    ih, iw = dim_value(dim(x, 2)), dim_value(dim(x, 3))
    i64 = ir.IntegerType.get_signless(64)
    idx = ir.IndexType.get()

    def c(v: float) -> ir.Value:
        return const_scalar(v, ct)

    def to_f(i: ir.Value) -> ir.Value:
        return arith.sitofp(ct, arith.index_cast(i64, i))

    def sample(args: list[ir.Value]) -> list[ir.Value]:
        b, ch, kh, kw, i, j = (index_of(k) for k in range(6))
        g = arith.divui(ch, const_index(c_per_og))
        tap = arith.addi(arith.muli(arith.addi(arith.muli(g, const_index(kh_n)), kh), const_index(kw_n)), kw)
        oy = tensor.extract(off, [b, arith.muli(tap, const_index(2)), i, j])
        ox = tensor.extract(off, [b, arith.addi(arith.muli(tap, const_index(2)), const_index(1)), i, j])
        base_y = arith.addi(arith.muli(i, const_index(strides[0])), arith.muli(kh, const_index(dil[0])))
        base_x = arith.addi(arith.muli(j, const_index(strides[1])), arith.muli(kw, const_index(dil[1])))
        y = arith.addf(arith.subf(to_f(base_y), c(pads[0])), oy)
        xx = arith.addf(arith.subf(to_f(base_x), c(pads[1])), ox)
        y0f, x0f = math.floor(y), math.floor(xx)
        ly, lx = arith.subf(y, y0f), arith.subf(xx, x0f)
        y0 = arith.index_cast(idx, arith.fptosi(i64, y0f))
        x0 = arith.index_cast(idx, arith.fptosi(i64, x0f))
        one = const_index(1)
        acc = c(0.0)
        for yi, wy in ((y0, arith.subf(c(1.0), ly)), (arith.addi(y0, one), ly)):
            for xi, wx in ((x0, arith.subf(c(1.0), lx)), (arith.addi(x0, one), lx)):
                inside = arith.andi(
                    arith.andi(arith.cmpi(P.sge, yi, const_index(0)), arith.cmpi(P.slt, yi, ih)),
                    arith.andi(arith.cmpi(P.sge, xi, const_index(0)), arith.cmpi(P.slt, xi, iw)),
                )
                zero = const_index(0)
                v = tensor.extract(x, [b, ch, arith.select(inside, yi, zero), arith.select(inside, xi, zero)])
                v = arith.select(inside, v, c(0.0))
                acc = arith.addf(acc, arith.mulf(arith.mulf(wy, wx), v))
        if mask is not None:
            acc = arith.mulf(acc, tensor.extract(mask, [b, tap, i, j]))
        return [acc]

    cols = generic([], [empty([n, c_in, kh_n, kw_n, oh, ow], ct)], [identity_map(6)], ["parallel"] * 6, sample)[0]

    # out[n, o, i, j] += W[o, ic, kh, kw] * cols[n, (o / oc_g) * ic_g + ic, kh, kw, i, j];
    # loops (n, o, i, j, ic, kh, kw).
    d = [ir.AffineDimExpr.get(k) for k in range(7)]
    oc_g = c_out // group
    chan = d[4] if group == 1 else ir.AffineAddExpr.get(
        ir.AffineMulExpr.get(ir.AffineFloorDivExpr.get(d[1], ir.AffineConstantExpr.get(oc_g)), ir.AffineConstantExpr.get(c_in_g)), d[4]
    )
    if bias is not None:
        init = generic([bias], [empty([n, c_out, oh, ow], ct)], [affine_map(4, [1]), identity_map(4)], ["parallel"] * 4, lambda a: [a[0]])[0]
    else:
        init = filled([n, c_out, oh, ow], ct, 0.0)
    out = generic(
        [w, cols], [init],
        [affine_map(7, [1, 4, 5, 6]), ir.AffineMap.get(7, 0, [d[0], chan, d[5], d[6], d[2], d[3]]), affine_map(7, [0, 1, 2, 3])],
        ["parallel"] * 4 + ["reduction"] * 3,
        lambda a: [arith.addf(a[2], arith.mulf(a[0], a[1]))],
    )[0]
    return [convert_tensor(out, ct, node.out_elem(0))]
