"""QuantizeLinear and DequantizeLinear for 8- and 16-bit integers (per tensor or per axis).

Dequantize: (x - zero_point) * scale, in the scale's float type. Quantize: round half to even
of x / scale, plus the zero point, saturated to the output integer's range. A 1-D scale/zero
point is viewed along `axis` (`tensor.expand_shape`) so numpy broadcasting lines it up.
Blocked quantization (`block_size`): the scale/zero point (the input's rank) is read at
`i floordiv block_size` along `axis`; its shape is checked against the input's (statically by the
pre-check, at run time where dims are dynamic), as that read is past its end otherwise.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math

from onnxc.transforms.lowering.common import (
    Node,
    bitwidth,
    const_scalar,
    convert_element,
    convert_scalar,
    elementwise,
    expand_unit_dims,
    is_unsigned,
    lowers,
    normalize_axis,
    rank_of,
    shape_of,
    static_shape,
)

_QTYPES = ("i8", "ui8", "i16", "ui16", "i32", "i4", "ui4", "i2", "ui2", "f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f4E2M1FN")


def _along(node: Node, v: ir.Value, r: int, x: ir.Value | None = None) -> ir.Value:
    """A scale or zero point viewed for broadcasting against a rank-r input: rank 0 as is, 1-D
    along `axis`, and blocked (same rank as x, `block_size`) expanded to x's shape."""
    block = int(node.attr("block_size", 0) or 0)
    if block and x is not None and rank_of(v) == r and r > 0 and any(d != 1 for d in static_shape(v.type)):
        from onnxc.transforms.lowering.common import affine_map, elem_of, empty, generic, identity_map

        axis = normalize_axis(int(node.attr("axis", 1)), r)
        _require_blocks_cover(node, v, x, axis, block)
        exprs = [ir.AffineDimExpr.get(i) if i != axis else ir.AffineFloorDivExpr.get(ir.AffineDimExpr.get(i), ir.AffineConstantExpr.get(block)) for i in range(r)]
        m = affine_map(r, exprs)
        return generic([v], [empty(shape_of(x), elem_of(v.type))], [m, identity_map(r)], ["parallel"] * r, lambda a: [a[0]])[0]
    if rank_of(v) == 0 or r <= 1 or (rank_of(v) == r and all(d == 1 for d in static_shape(v.type))):
        return v  # one element of the input's rank (blocked: per tensor) broadcasts as it is
    axis = normalize_axis(int(node.attr("axis", 1)), r)
    return expand_unit_dims(v, [i for i in range(r) if i != axis])


def _require_blocks_cover(node: Node, v: ir.Value, x: ir.Value, axis: int, block: int) -> None:
    """A run-time check that a blocked scale/zero point `v` fits `x` where their dims are dynamic
    (`_block_problem` refused static misfits): equal off `axis`, and at least ceil(D / block)
    blocks along it. Why: the view reads `v[.., i floordiv block, ..]` at every coordinate of `x`;
    a smaller `v` was read past its end (the compile fuzzer: DequantizeLinear blocked, axis 0, dims
    symbolic, answered with garbage where onnx.reference refuses)."""
    from onnxc.transforms.lowering.common import dim, dim_value
    from onnxc.transforms.lowering.runtime_checks import require

    ok: ir.Value | None = None
    for j in range(rank_of(x)):
        vd, xd = dim(v, j), dim(x, j)
        if isinstance(vd, int) and isinstance(xd, int):
            continue
        if j == axis:  # blocks * block >= D
            covered = arith.muli(dim_value(vd), dim_value(block))
            fits = arith.cmpi(arith.CmpIPredicate.sge, covered, dim_value(xd))
        else:
            fits = arith.cmpi(arith.CmpIPredicate.eq, dim_value(vd), dim_value(xd))
        ok = fits if ok is None else arith.andi(ok, fits)
    if ok is not None:
        require(ok, node.op, f"the blocked scale or zero point of shape {{blocks}} does not fit the input's {{shape}} (block_size {block}, axis {axis})",
                [("blocks", [dim_value(dim(v, j)) for j in range(rank_of(v))]), ("shape", [dim_value(dim(x, j)) for j in range(rank_of(x))])])  # fmt: skip


def _block_problem(node: Node) -> str | None:
    """What is wrong with a blocked quantization's scale/zero point shapes where they are static:
    the input's rank (or one element: a per-tensor value, as onnx.reference reads it), the
    input's dims off `axis`, and enough blocks of `block_size` along it to cover the input
    (onnx.reference repeats each entry `block_size` times and refuses a shortfall; more blocks
    are cut off). Why: the lowering's view of the scale reads it at `i floordiv block_size`."""
    block = int(node.attr("block_size", 0) or 0)
    xs = static_shape(node.onnx_types[0])
    r = len(xs)
    axis = normalize_axis(int(node.attr("axis", 1)), r)
    for i, what in ((1, "scale"), (2, "zero point")):
        if not node.has(i):
            continue
        vs = static_shape(node.onnx_types[i])
        if all(d == 1 for d in vs):
            continue  # one element: per tensor
        if len(vs) != r:
            return f"the blocked {what} has rank {len(vs)}, the input {r}"
        for j, (vd, xd) in enumerate(zip(vs, xs)):
            if vd is None or xd is None:
                continue
            if j == axis and vd * block < xd:
                return f"the {what}'s {vd} blocks of block_size {block} along axis {axis} do not cover the input's {xd}"
            if j != axis and vd != xd:
                return f"the {what}'s dim {j} ({vd}) differs from the input's ({xd}) off axis {axis}"
    return None


def _check(node: Node, qtype_index: int) -> str | None:
    blocked = bool(int(node.attr("block_size", 0) or 0))
    t = str(node.in_elem(qtype_index) if qtype_index == 0 else node.out_elem(0))
    if t not in _QTYPES:
        return f"quantized type {t} is not lowered"
    if len(static_shape(node.onnx_types[1])) > 1 and not blocked:
        return "a scale of rank > 1 needs block_size"
    return _block_problem(node) if blocked else None


@lowers("DequantizeLinear", check=lambda n: _check(n, 0))
def lower_dequantize(node: Node) -> list[ir.Value]:
    """DequantizeLinear: (x - zero_point) * scale."""
    x = node.input(0)
    r = rank_of(x)
    qe = node.in_elem(0)
    fe = node.in_elem(1)
    ins = [x, _along(node, node.input(1), r, x)]
    has_zp = node.has(2)
    if has_zp:
        ins.append(_along(node, node.input(2), r, x))
    f = convert_element(fe)

    def body(*a: ir.Value) -> ir.Value:
        v = convert_scalar(a[0], qe, fe)
        if has_zp:
            v = arith.subf(v, convert_scalar(a[2], qe, fe))
        return arith.mulf(v, a[1])

    return [elementwise(ins, f, body, out_shape=shape_of(x))]


@lowers("QuantizeLinear", check=lambda n: _check(n, -1))
def lower_quantize(node: Node) -> list[ir.Value]:
    """QuantizeLinear: saturate(round_half_even(x / scale) + zero_point)."""
    x = node.input(0)
    r = rank_of(x)
    xe = node.in_elem(0)
    qe = node.out_elem(0)
    q = convert_element(qe)
    f32 = ir.F32Type.get()
    ins = [x, _along(node, node.input(1), r, x)]
    has_zp = node.has(2)
    if has_zp:
        ins.append(_along(node, node.input(2), r, x))
    from onnxc.transforms.lowering.minifloat import minifloat_of, small_int_of

    float_q = minifloat_of(qe) is not None
    small = small_int_of(qe)
    if small is not None:
        w, signed = small
        lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)
    else:
        w = bitwidth(q)
        lo, hi = (0, (1 << w) - 1) if is_unsigned(qe) else (-(1 << (w - 1)), (1 << (w - 1)) - 1)
    se = node.in_elem(1)
    saturate = bool(int(node.attr("saturate", 1)))

    def body(*a: ir.Value) -> ir.Value:
        v = arith.divf(convert_scalar(a[0], xe, f32), convert_scalar(a[1], se, f32))
        if float_q:
            # float8/float4 outputs: no integer rounding; the conversion rounds and saturates.
            if has_zp:
                v = arith.addf(v, convert_scalar(a[2], qe, f32))
            return convert_scalar(v, f32, qe, saturate)
        v = math.roundeven(v)
        if has_zp:
            v = arith.addf(v, convert_scalar(a[2], qe, f32))
        v = arith.maximumf(arith.minimumf(v, const_scalar(float(hi), f32)), const_scalar(float(lo), f32))
        return convert_scalar(v, f32, qe)

    return [elementwise(ins, q, body, out_shape=shape_of(x))]


# --- integer and quantized linear algebra ---------------------------------------------------------


def _minus_zp(node: Node, v: ir.Value, ve: ir.Type, zp_index: int, row_axis: int | None) -> ir.Value:
    """v - zero_point as i32 (zero point: omitted, a scalar, or 1-D along `row_axis` of v)."""
    i32 = ir.IntegerType.get_signless(32)
    i32_onnx = i32
    if not node.has(zp_index):
        return elementwise([v], i32, lambda a: convert_scalar(a, ve, i32_onnx))
    zp = node.input(zp_index)
    ze = node.in_elem(zp_index)
    r = rank_of(v)
    if rank_of(zp) == 1 and row_axis is not None and r > 1:
        zp = expand_unit_dims(zp, [i for i in range(r) if i != row_axis])
    return elementwise([v, zp], i32, lambda a, z: arith.subi(convert_scalar(a, ve, i32_onnx), convert_scalar(z, ze, i32_onnx)), out_shape=shape_of(v))


def _check_int_mm(node: Node) -> str | None:
    return None if len(static_shape(node.onnx_types[0])) >= 1 and len(static_shape(node.onnx_types[1])) >= 1 else "rank-0 operand"


@lowers("MatMulInteger", check=_check_int_mm)
def lower_matmul_integer(node: Node) -> list[ir.Value]:
    """MatMulInteger: (A - a_zp) @ (B - b_zp) in int32 (per-row a_zp, per-column b_zp)."""
    from onnxc.transforms.lowering.matmul import matmul_values

    a = _minus_zp(node, node.input(0), node.in_elem(0), 2, rank_of(node.input(0)) - 2)
    b = _minus_zp(node, node.input(1), node.in_elem(1), 3, rank_of(node.input(1)) - 1)
    return [matmul_values(a, b, ir.IntegerType.get_signless(32))]


def _requantize(node: Node, acc: ir.Value, scale_ins: list[int], y_scale: int, y_zp: int, out_q: ir.Type, channel_axis: int | None) -> ir.Value:
    """rint(acc * (prod(scales) / y_scale)) + y_zp, clipped to the output type (as the reference:
    the multiplier in f32, the product in f64)."""
    f64 = ir.F64Type.get()
    r = rank_of(acc)
    ins = [acc]
    for i in scale_ins + [y_scale]:
        v = node.input(i)
        if rank_of(v) == 1 and channel_axis is not None:
            v = expand_unit_dims(v, [j for j in range(r) if j != channel_axis])
        ins.append(v)
    has_zp = node.has(y_zp)
    if has_zp:
        ins.append(node.input(y_zp))
    w = bitwidth(convert_element(out_q))
    lo, hi = (0, (1 << w) - 1) if is_unsigned(out_q) else (-(1 << (w - 1)), (1 << (w - 1)) - 1)
    n_sc = len(scale_ins)

    def body(*a: ir.Value) -> ir.Value:
        m = a[1]
        for s in a[2 : 1 + n_sc]:
            m = arith.mulf(m, s)
        m = arith.divf(m, a[1 + n_sc])
        d = arith.mulf(arith.sitofp(f64, a[0]), arith.extf(f64, m))
        d = math.roundeven(d)
        if has_zp:
            d = arith.addf(d, convert_scalar(a[2 + n_sc], out_q, f64))
        d = arith.maximumf(arith.minimumf(d, const_scalar(float(hi), f64)), const_scalar(float(lo), f64))
        return convert_scalar(d, f64, out_q)

    return elementwise(ins, convert_element(out_q), body, out_shape=shape_of(acc))


@lowers("QLinearMatMul", check=lambda n: None if len(static_shape(n.onnx_types[0])) >= 1 else "rank-0 operand")
def lower_qlinear_matmul(node: Node) -> list[ir.Value]:
    """QLinearMatMul: integer matmul of zero-point-shifted operands, then requantization."""
    from onnxc.transforms.lowering.matmul import matmul_values

    a = _minus_zp(node, node.input(0), node.in_elem(0), 2, rank_of(node.input(0)) - 2)
    b = _minus_zp(node, node.input(3), node.in_elem(3), 5, rank_of(node.input(3)) - 1)
    acc = matmul_values(a, b, ir.IntegerType.get_signless(32))
    out_q = node.out_elem(0)
    return [_requantize(node, acc, [1, 4], 6, 7, out_q, rank_of(acc) - 1)]


def _conv_quant_param_problem(node: Node, per_tensor: tuple[int, ...], per_channel: tuple[int, ...]) -> str | None:
    """The ranks of a quantized convolution's scales and zero points: `per_tensor` inputs one
    element (rank 0, or [1]), `per_channel` ones rank 0 or 1 (M entries along the output
    channels, whose length the elementwise broadcast checks). Why: a [1, 2] weight zero point
    of ConvInteger was broadcast against the weights' trailing dims (the kernel width) and
    answered where onnx.reference refuses (the compile fuzzer, seed 211 case 8048)."""
    for i in per_tensor + per_channel:
        if not node.has(i):
            continue
        dims = static_shape(node.onnx_types[i])
        if len(dims) == 0 or dims == [1] or (i in per_channel and len(dims) == 1):
            continue
        kind = "a scalar" if i in per_tensor else "a scalar or 1-D (one entry per output channel)"
        return f"input {i} has shape {['?' if d is None else d for d in dims]}; it must be {kind}"
    return None


def _check_conv_integer(node: Node) -> str | None:
    from onnxc.transforms.lowering.conv import check_conv

    return _conv_quant_param_problem(node, (2,), (3,)) or check_conv(node)


@lowers("ConvInteger", check=_check_conv_integer)
def lower_conv_integer(node: Node) -> list[ir.Value]:
    """ConvInteger: convolution of zero-point-shifted operands in int32."""
    from onnxc.transforms.lowering.conv import conv_values

    x = _minus_zp(node, node.input(0), node.in_elem(0), 2, None)
    w = _minus_zp(node, node.input(1), node.in_elem(1), 3, 0)
    return [conv_values(node, x, w, None, ir.IntegerType.get_signless(32))]


def _check_qlinear_conv(node: Node) -> str | None:
    from onnxc.transforms.lowering.conv import check_conv

    return _conv_quant_param_problem(node, (1, 2, 6, 7), (4, 5)) or check_conv(node, 0, 3)


@lowers("QLinearConv", check=_check_qlinear_conv)
def lower_qlinear_conv(node: Node) -> list[ir.Value]:
    """QLinearConv: integer convolution (+ int32 bias), then requantization per output channel."""
    from onnxc.transforms.lowering.conv import conv_values

    x = _minus_zp(node, node.input(0), node.in_elem(0), 2, None)
    w = _minus_zp(node, node.input(3), node.in_elem(3), 5, 0)
    bias = node.input(8) if node.has(8) else None
    acc = conv_values(node, x, w, bias, ir.IntegerType.get_signless(32), 0, 3)
    return [_requantize(node, acc, [1, 4], 6, 7, node.out_elem(0), 1)]


@lowers("DynamicQuantizeLinear")
def lower_dynamic_quantize(node: Node) -> list[ir.Value]:
    """DynamicQuantizeLinear: uint8 scale and zero point from the data range (including 0)."""
    from mlir.dialects import tensor

    from onnxc.transforms.lowering.common import reduce_dims

    x = node.input(0)
    f32 = ir.F32Type.get()
    r = rank_of(x)
    axes = list(range(r))
    mx = reduce_dims([x], axes, [0.0], [f32], lambda a: [arith.maximumf(a[1], a[0])])[0]
    mn = reduce_dims([x], axes, [0.0], [f32], lambda a: [arith.minimumf(a[1], a[0])])[0]
    mxs, mns = tensor.extract(mx, []), tensor.extract(mn, [])
    rng = arith.subf(mxs, mns)
    same = arith.cmpf(arith.CmpFPredicate.OEQ, mxs, mns)
    scale = arith.divf(arith.select(same, const_scalar(1.0, f32), rng), const_scalar(255.0, f32))
    zp = arith.subf(const_scalar(0.0, f32), arith.divf(mns, scale))
    zp = math.roundeven(arith.maximumf(const_scalar(0.0, f32), arith.minimumf(const_scalar(255.0, f32), zp)))
    u8 = ir.IntegerType.get_signless(8)

    def q(v: ir.Value) -> ir.Value:
        y = arith.addf(math.roundeven(arith.divf(v, scale)), zp)
        y = arith.maximumf(const_scalar(0.0, f32), arith.minimumf(const_scalar(255.0, f32), y))
        return arith.fptoui(u8, y)

    y = elementwise([x], u8, q)
    scale_t = tensor.from_elements(ir.RankedTensorType.get([], f32), [scale])
    zp_t = tensor.from_elements(ir.RankedTensorType.get([], u8), [arith.fptoui(u8, zp)])
    return [y, scale_t, zp_t]
