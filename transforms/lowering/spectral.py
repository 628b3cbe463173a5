"""DFT (opset 17 and 20): forward, inverse, one-sided, real or complex input, `dft_length`.

A direct O(N^2) transform: one `linalg.generic` over the output [..., K, 2] with a reduction
loop over the input samples along `axis`; the body reads the real and imaginary parts with
`tensor.extract`, computes the twiddle angle from (k * n mod L) in f64 (exact index arithmetic
keeps large k*n accurate) and accumulates in f64. The one-sided inverse (a real output) weights
the interior bins twice, as `numpy.fft.irfft` rebuilds the Hermitian half it was not given.
"""

from __future__ import annotations

import math as pymath

from mlir import ir
from mlir.dialects import arith, math, tensor

from onnxc.transforms.lowering.common import (
    Node,
    affine_map,
    const_index,
    const_scalar,
    convert_scalar,
    convert_tensor,
    empty,
    filled,
    generic,
    index_of,
    is_float,
    lowers,
    normalize_axis,
    rank_of,
    shape_of,
    static_shape,
)


def _params(node: Node) -> tuple[int | None, int | None] | str:
    """(axis, dft_length); axis None when it is a runtime input."""
    r = len(static_shape(node.onnx_types[0]))
    if node.version >= 20:
        if node.has(2):
            c = node.const_ints(2)
            if c is None:
                length = node.const_ints(1)[0] if node.has(1) and node.const_ints(1) is not None else None
                if node.has(1) and length is None:
                    return "dft_length must be a constant"
                return None, length
            axis = c[0]
        else:
            axis = -2
    else:
        axis = int(node.attr("axis", 1))
    axis = normalize_axis(axis, r)
    if not 0 <= axis < r - 1:
        return "axis must not be the last (complex) dim"
    length = None
    if node.has(1):
        c = node.const_ints(1)
        if c is None:
            return "dft_length must be a constant"
        length = c[0]
    return axis, length


def _check(node: Node) -> str | None:
    if not is_float(node.in_elem(0)):
        return "integer input"
    s = static_shape(node.onnx_types[0])
    if not s or s[-1] not in (1, 2):
        return "the last dim must be 1 (real) or 2 (complex)"
    p = _params(node)
    if isinstance(p, str):
        return p
    axis, length = p
    axes = [axis] if axis is not None else list(range(len(s) - 1))
    if length is None and any(s[a] is None for a in axes):
        return "the transformed dim must be static (or dft_length given)"
    return None


@lowers("DFT", check=_check)
def lower_dft(node: Node) -> list[ir.Value]:
    """DFT (see the module docstring). A runtime axis selects among one lowering per axis."""
    x = node.input(0)
    axis, length = _params(node)  # type: ignore[misc]
    if axis is not None:
        return [_dft(node, x, axis, length)]
    from onnxc.transforms.lowering.common import scalar_of, tensor_type, to_index
    from onnxc.transforms.lowering.indexing import select_case

    r = rank_of(x)
    a = to_index(scalar_of(node.input(2)), node.in_elem(2))
    a = arith.select(arith.cmpi(arith.CmpIPredicate.slt, a, const_index(0)), arith.addi(a, const_index(r)), a)
    a64 = arith.index_cast(ir.IntegerType.get_signless(64), a)
    branches = list(range(r - 1))
    # The result type joins the branches' static shapes.
    shapes = [static_shape(_dft_type(node, x, b, length)) for b in branches]
    joined = [s0 if all(sh[i] == s0 for sh in shapes) else None for i, s0 in enumerate(shapes[0])]
    rtype = tensor_type(joined, ir.ShapedType(x.type).element_type)
    return [select_case(a64, branches, rtype, lambda i: _dft(node, x, branches[i], length))]


def _dft_sizes(node: Node, x: ir.Value, axis: int, length: int | None) -> tuple[int, int, int, int]:
    """(L, output bins, output channels, input samples used)."""
    n_in = static_shape(x.type)[axis]
    inverse = bool(int(node.attr("inverse", 0)))
    onesided = bool(int(node.attr("onesided", 0)))
    if length is None:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    L = int(length)
    if inverse and onesided:
        return L, L, 1, min(n_in, L // 2 + 1)
    return L, (L // 2 + 1 if onesided else L), 2, min(n_in, L)


def _dft_type(node: Node, x: ir.Value, axis: int, length: int | None) -> ir.Type:
    from onnxc.transforms.lowering.common import tensor_type

    _, k_out, c_out, _ = _dft_sizes(node, x, axis, length)
    shape = list(static_shape(x.type))
    shape[axis] = k_out
    shape[-1] = c_out
    return tensor_type(shape, ir.ShapedType(x.type).element_type)


def _dft(node: Node, x: ir.Value, axis: int, length: int | None) -> ir.Value:
    onnx_elem = node.in_elem(0)
    f64 = ir.F64Type.get()
    r = rank_of(x)
    n_in = static_shape(x.type)[axis]
    inverse = bool(int(node.attr("inverse", 0)))
    onesided = bool(int(node.attr("onesided", 0)))
    complex_in = static_shape(x.type)[-1] == 2
    L, k_out, c_out, n_use = _dft_sizes(node, x, axis, length)
    shape = shape_of(x)
    out_shape = list(shape)
    out_shape[axis] = k_out
    out_shape[-1] = c_out
    if L <= 0 or n_use <= 0:
        # A degenerate transform (possible for the branches of a runtime axis): zeros.
        return filled(out_shape, ir.ShapedType(x.type).element_type, 0.0)
    # Loops: output dims (r), then the reduction over input samples n.
    nloops = r + 1
    red = r
    init = filled(out_shape, f64, 0.0)
    window = empty([n_use], f64)
    out_map = affine_map(nloops, list(range(r)))
    win_map = affine_map(nloops, [red])
    two_pi = 2 * pymath.pi

    def body(a: list[ir.Value]) -> list[ir.Value]:
        n = index_of(red)
        k = index_of(axis)
        coords = [n if d == axis else index_of(d) for d in range(r - 1)]
        xr = convert_scalar(tensor.extract(x, coords + [const_index(0)]), onnx_elem, f64)
        xi = convert_scalar(tensor.extract(x, coords + [const_index(1)]), onnx_elem, f64) if complex_in else const_scalar(0.0, f64)
        kn = arith.remui(arith.muli(k, n), const_index(L))
        ang = arith.mulf(arith.sitofp(f64, arith.index_cast(ir.IntegerType.get_signless(64), kn)), const_scalar(two_pi / L, f64))
        cs, sn = math.cos(ang), math.sin(ang)
        if inverse and onesided:
            # Bin n of the half spectrum counts twice unless it is 0 or (L even) L/2.
            single = arith.ori(arith.cmpi(arith.CmpIPredicate.eq, n, const_index(0)), arith.cmpi(arith.CmpIPredicate.eq, arith.muli(n, const_index(2)), const_index(L)))
            w = arith.select(single, const_scalar(1.0 / L, f64), const_scalar(2.0 / L, f64))
            term = arith.mulf(w, arith.subf(arith.mulf(xr, cs), arith.mulf(xi, sn)))
            return [arith.addf(a[1], term)]
        if inverse:
            re = arith.subf(arith.mulf(xr, cs), arith.mulf(xi, sn))
            im = arith.addf(arith.mulf(xi, cs), arith.mulf(xr, sn))
            scale = const_scalar(1.0 / L, f64)
            re, im = arith.mulf(re, scale), arith.mulf(im, scale)
        else:
            re = arith.addf(arith.mulf(xr, cs), arith.mulf(xi, sn))
            im = arith.subf(arith.mulf(xi, cs), arith.mulf(xr, sn))
        is_im = arith.cmpi(arith.CmpIPredicate.eq, index_of(r - 1), const_index(1))
        return [arith.addf(a[1], arith.select(is_im, im, re))]

    acc = generic([window], [init], [win_map, out_map], ["parallel"] * r + ["reduction"], body)[0]
    return convert_tensor(acc, f64, onnx_elem)
