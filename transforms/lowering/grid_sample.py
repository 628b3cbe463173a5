"""GridSample (2-D and 3-D; nearest, linear, cubic; zeros, border, reflection padding;
align_corners) and AffineGrid.

GridSample is one `linalg.generic` over the output [N, C, out...]: the body reads the grid
point with `tensor.extract`, maps each normalized coordinate to the input's pixel space, applies
the padding mode to the coordinate, then sums the 1 (nearest), 2 (linear) or 4 (cubic) taps
per spatial dim, each tap read with `tensor.extract` at an index fixed up by the padding mode
(zeros: the tap counts 0 outside; border: clamped; reflection: reflected). The arithmetic
follows the ONNX reference step by step (coordinates in f32, `rint` for nearest, the same
reflection loop in closed form), so the results match it bit for bit in f32.
"""

from __future__ import annotations

import itertools

from mlir import ir
from mlir.dialects import arith, math, tensor

from onnxc.transforms.lowering.common import (
    Node,
    const_index,
    const_scalar,
    convert_element,
    convert_scalar,
    dim,
    empty,
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


def _check(node: Node) -> str | None:
    xs = static_shape(node.onnx_types[0])
    gs = static_shape(node.onnx_types[1])
    if len(xs) not in (4, 5) or len(gs) != len(xs):
        return "only 2-D and 3-D grid sampling is lowered"
    if any(d is None for d in xs[2:]) or gs[-1] is None:
        return "spatial dims must be static"
    if not is_float(node.in_elem(0)):
        return "integer inputs"
    return None


def _c(v: float) -> ir.Value:
    return const_scalar(v, ir.F32Type.get())


def _reflect(x: ir.Value, lo: float, hi: float) -> ir.Value:
    """The reference's reflection of x into [lo, hi] (closed form of its loop)."""
    rng = hi - lo
    below = arith.cmpf(F.OLT, x, _c(lo))
    above = arith.cmpf(F.OGT, x, _c(hi))
    dx = arith.select(below, arith.subf(_c(lo), x), arith.subf(x, _c(hi)))
    n = math.floor(arith.divf(dx, _c(rng))) if rng > 0 else _c(0.0)
    r = arith.subf(dx, arith.mulf(n, _c(rng)))
    ni = arith.fptosi(ir.IntegerType.get_signless(32), n)
    even = arith.cmpi(P.eq, arith.andi(ni, const_scalar(1, ir.IntegerType.get_signless(32))), const_scalar(0, ir.IntegerType.get_signless(32)))
    low_side = arith.select(even, arith.addf(_c(lo), r), arith.subf(_c(hi), r))
    high_side = arith.select(even, arith.subf(_c(hi), r), arith.addf(_c(lo), r))
    return arith.select(below, low_side, arith.select(above, high_side, x))


def _cubic(s: ir.Value) -> list[ir.Value]:
    a = -0.75

    def far(u: ir.Value) -> ir.Value:
        return arith.subf(arith.mulf(arith.addf(arith.mulf(arith.subf(arith.mulf(_c(a), u), _c(5 * a)), u), _c(8 * a)), u), _c(4 * a))

    def near(u: ir.Value) -> ir.Value:
        return arith.addf(arith.mulf(arith.mulf(arith.subf(arith.mulf(_c(a + 2), u), _c(a + 3)), u), u), _c(1.0))

    t = arith.subf(_c(1.0), s)
    return [far(arith.addf(s, _c(1.0))), near(s), near(t), far(arith.addf(t, _c(1.0)))]


@lowers("GridSample", check=_check)
def lower_grid_sample(node: Node) -> list[ir.Value]:
    """GridSample (see the module docstring)."""
    x, grid = node.input(0), node.input(1)
    elem = convert_element(node.in_elem(0))
    gelem = node.in_elem(1)
    f32 = ir.F32Type.get()
    r = rank_of(x)
    k = r - 2
    dims = [int(d) for d in static_shape(x.type)[2:]]  # type: ignore[arg-type]
    mode = str(node.attr("mode", "linear"))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    pad = str(node.attr("padding_mode", "zeros"))
    align = bool(int(node.attr("align_corners", 0)))
    out_shape = [dim(x, 0), dim(x, 1)] + [dim(grid, 1 + i) for i in range(k)]
    lo_b = [0.0 if align else -0.5 for _ in dims]
    hi_b = [d - 1.0 if align else d - 0.5 for d in dims]

    def body(args: list[ir.Value]) -> list[ir.Value]:
        n, c = index_of(0), index_of(1)
        outs = [index_of(2 + i) for i in range(k)]
        # Spatial dim i (of D, H, W order) reads grid component k - 1 - i (x is the last dim).
        coords = []
        for i in range(k):
            g = convert_scalar(tensor.extract(grid, [n] + outs + [const_index(k - 1 - i)]), gelem, f32)
            d = float(dims[i])
            if align:
                v = arith.mulf(arith.divf(arith.addf(g, _c(1.0)), _c(2.0)), _c(d - 1))
            else:
                v = arith.divf(arith.subf(arith.mulf(arith.addf(g, _c(1.0)), _c(d)), _c(1.0)), _c(2.0))
            if mode == "nearest":
                v = math.roundeven(v)
            if pad == "border":
                outside = arith.ori(arith.cmpf(F.OLT, v, _c(lo_b[i])), arith.cmpf(F.OGT, v, _c(hi_b[i])))
                v = arith.select(outside, arith.maximumf(arith.minimumf(v, _c(d - 1)), _c(0.0)), v)
            elif pad == "reflection":
                v = _reflect(v, lo_b[i], hi_b[i])
            coords.append(v)
        # Taps per dim: (integer index as i32 value, weight).
        i32 = ir.IntegerType.get_signless(32)
        taps: list[list[tuple[ir.Value, ir.Value]]] = []
        for i in range(k):
            v = coords[i]
            if mode == "nearest":
                taps.append([(arith.fptosi(i32, v), _c(1.0))])
                continue
            fl = math.floor(v)
            s = arith.subf(v, fl)
            base = arith.fptosi(i32, fl)
            if mode == "linear":
                offs, ws = [0, 1], [arith.subf(_c(1.0), s), s]
            else:
                offs, ws = [-1, 0, 1, 2], _cubic(s)
            taps.append([(arith.addi(base, const_scalar(o, i32)), w) for o, w in zip(offs, ws)])
        acc = _c(0.0)
        for combo in itertools.product(*taps):
            weight = combo[0][1]
            for _, w in combo[1:]:
                weight = arith.mulf(weight, w)
            valid = None
            idx = []
            for i, (t, _) in enumerate(combo):
                d = dims[i]
                if pad == "zeros":
                    ok = arith.andi(arith.cmpi(P.sge, t, const_scalar(0, i32)), arith.cmpi(P.slt, t, const_scalar(d, i32)))
                    valid = ok if valid is None else arith.andi(valid, ok)
                    t = arith.maxsi(arith.minsi(t, const_scalar(d - 1, i32)), const_scalar(0, i32))
                elif pad == "border":
                    t = arith.maxsi(arith.minsi(t, const_scalar(d - 1, i32)), const_scalar(0, i32))
                else:
                    t = arith.fptosi(i32, _reflect(arith.sitofp(f32, t), lo_b[i], hi_b[i]))
                    t = arith.maxsi(arith.minsi(t, const_scalar(d - 1, i32)), const_scalar(0, i32))
                idx.append(arith.index_cast(ir.IndexType.get(), t))
            px = convert_scalar(tensor.extract(x, [n, c] + idx), node.in_elem(0), f32)
            if valid is not None:
                px = arith.select(valid, px, _c(0.0))
            acc = arith.addf(acc, arith.mulf(weight, px))
        return [convert_scalar(acc, f32, node.in_elem(0))]

    return generic([], [empty(out_shape, elem)], [identity_map(r)], ["parallel"] * r, body)


def _check_affine_grid(node: Node) -> str | None:
    s = static_shape(node.onnx_types[1])
    if s not in ([4], [5]):
        return "size must be a 1-D tensor of 4 or 5 elements"
    return None


@lowers("AffineGrid", check=_check_affine_grid)
def lower_affine_grid(node: Node) -> list[ir.Value]:
    """AffineGrid: grid[n, ..., j] = sum_k theta[n, j, k] * (x, y[, z], 1)_k over the normalized
    base grid (computed in f64 like the reference's arange, rounded once at the end). The size
    may be a runtime value (dynamic output dims)."""
    from onnxc.transforms.lowering.common import Dim, extract_dims

    theta = node.input(0)
    c = node.const_ints(1)
    sp: list[Dim] = list(c[2:]) if c is not None else list(extract_dims(node.input(1), node.in_elem(1)))[2:]
    k = len(sp)
    elem = convert_element(node.in_elem(0))
    f64 = ir.F64Type.get()
    i64 = ir.IntegerType.get_signless(64)
    align = bool(int(node.attr("align_corners", 0)))
    out_shape = [dim(theta, 0)] + sp + [k]
    r = len(out_shape)

    def as_f64(d: Dim) -> ir.Value:
        return const_scalar(float(d), f64) if isinstance(d, int) else arith.sitofp(f64, arith.index_cast(i64, d))

    dims_f = [as_f64(d) for d in sp]

    def base(i: int) -> ir.Value:
        """Normalized coordinate along spatial dim i (D, H, W order) at this point."""
        idx = arith.sitofp(f64, arith.index_cast(i64, index_of(1 + i)))
        one = const_scalar(1.0, f64)
        if align:
            step = arith.divf(const_scalar(2.0, f64), arith.subf(dims_f[i], one))
            return arith.addf(const_scalar(-1.0, f64), arith.mulf(idx, step))
        step = arith.divf(const_scalar(2.0, f64), dims_f[i])
        start = arith.addf(const_scalar(-1.0, f64), arith.divf(step, const_scalar(2.0, f64)))
        return arith.addf(start, arith.mulf(idx, step))

    def body(args: list[ir.Value]) -> list[ir.Value]:
        n, j = index_of(0), index_of(r - 1)
        homo = [base(k - 1 - kk) for kk in range(k)] + [const_scalar(1.0, f64)]
        acc = const_scalar(0.0, f64)
        for kk, h in enumerate(homo):
            t = convert_scalar(tensor.extract(theta, [n, j, const_index(kk)]), node.in_elem(0), f64)
            acc = arith.addf(acc, arith.mulf(t, h))
        return [convert_scalar(acc, f64, node.in_elem(0))]

    return generic([], [empty(out_shape, elem)], [identity_map(r)], ["parallel"] * r, body)
