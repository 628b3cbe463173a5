"""QuantizeLinear and DequantizeLinear for 8- and 16-bit integers (per tensor or per axis).

Dequantize: (x - zero_point) * scale, in the scale's float type. Quantize: round half to even
of x / scale, plus the zero point, saturated to the output integer's range. A 1-D scale/zero
point is viewed along `axis` (`tensor.expand_shape`) so numpy broadcasting lines it up.
Blocked quantization (`block_size`) and float8/int4 types are rejected by the pre-check.
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

_QTYPES = ("i8", "ui8", "i16", "ui16", "i32")


def _along(node: Node, v: ir.Value, r: int) -> ir.Value:
    """A scale or zero point of rank <= 1 viewed for broadcasting against a rank-r input."""
    if rank_of(v) == 0 or r <= 1:
        return v
    axis = normalize_axis(int(node.attr("axis", 1)), r)
    return expand_unit_dims(v, [i for i in range(r) if i != axis])


def _check(node: Node, qtype_index: int) -> str | None:
    if int(node.attr("block_size", 0) or 0):
        return "blocked quantization is not lowered"
    t = str(node.in_elem(qtype_index) if qtype_index == 0 else node.out_elem(0))
    if t not in _QTYPES:
        return f"quantized type {t} is not lowered"
    if len(static_shape(node.onnx_types[1])) > 1:
        return "scale of rank > 1 (blocked) is not lowered"
    return None


@lowers("DequantizeLinear", check=lambda n: _check(n, 0))
def lower_dequantize(node: Node) -> list[ir.Value]:
    """DequantizeLinear: (x - zero_point) * scale."""
    x = node.input(0)
    r = rank_of(x)
    qe = node.in_elem(0)
    fe = node.in_elem(1)
    ins = [x, _along(node, node.input(1), r)]
    has_zp = node.has(2)
    if has_zp:
        ins.append(_along(node, node.input(2), r))
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
    ins = [x, _along(node, node.input(1), r)]
    has_zp = node.has(2)
    if has_zp:
        ins.append(_along(node, node.input(2), r))
    w = bitwidth(q)
    lo, hi = (0, (1 << w) - 1) if is_unsigned(qe) else (-(1 << (w - 1)), (1 << (w - 1)) - 1)
    se = node.in_elem(1)

    def body(*a: ir.Value) -> ir.Value:
        v = arith.divf(convert_scalar(a[0], xe, f32), convert_scalar(a[1], se, f32))
        v = math.roundeven(v)
        if has_zp:
            v = arith.addf(v, convert_scalar(a[2], qe, f32))
        v = arith.maximumf(arith.minimumf(v, const_scalar(float(hi), f32)), const_scalar(float(lo), f32))
        return convert_scalar(v, f32, qe)

    return [elementwise(ins, q, body, out_shape=shape_of(x))]
