"""Antialiased Resize (opset 18+, `antialias=1`, linear and cubic modes), one axis at a time.

What: when downsampling by a scale s < 1 the interpolation kernel is stretched by 1/s (a
linear kernel covers 2/s input pixels, a cubic one 4/s), so every input pixel contributes and
the result is a box-like average rather than an aliased sample; with s >= 1 it is the plain
kernel. The tap count n = 2 - 2 * (floor(-k / s) + 1) (k = 1 linear, 2 cubic) depends on the
scale, which may be a run-time value, so an axis is one reduction `linalg.generic` over the
output and the n taps (their range given by a `tensor.empty` of n elements that the generic
reads only for its loop range). Tap t of output y sits at input index
floor(x) - n/2 + t (+1 unless x is an integer), x the source coordinate of y (the same
`coordinate_transformation_mode` code as the plain resize: `resize.source_coordinate`), with
weight kernel(s * (t + 1 - n/2 - ratio)); the generic accumulates the weighted values and the
weights, and a map divides them, which is the reference's normalization (and, with
`exclude_outside`, its renormalization over the taps inside the input). Out-of-range taps read
the edge pixel, as the reference's edge padding does. Why separate from `resize.py`: the plain
resize reads a fixed 1/2/4 taps in an elementwise body; the antialiased kernel's width is a
run-time loop.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math, tensor

from onnxc.transforms.lowering.common import (
    Dim,
    Node,
    affine_map,
    const_index,
    const_scalar,
    empty,
    filled,
    generic,
    identity_map,
    index_of,
    rank_of,
    shape_of,
    static_shape,
)
from onnxc.transforms.lowering.resize import source_coordinate

F = arith.CmpFPredicate
P = arith.CmpIPredicate


def resize_axis_antialias(x: ir.Value, axis: int, scale: float | ir.Value, out_w: Dim, node: Node, roi: tuple[float | ir.Value, float | ir.Value] | None) -> ir.Value:
    """Resize axis `axis` of the f64 tensor x to `out_w` with the antialiased linear or cubic
    kernel (see the module docstring)."""
    f64 = ir.F64Type.get()
    i64 = ir.IntegerType.get_signless(64)
    idx_t = ir.IndexType.get()
    r = rank_of(x)
    in_w = static_shape(x.type)[axis]
    assert in_w is not None
    cubic = node.attr("mode", "nearest") == "cubic"
    a = float(node.attr("cubic_coeff_a", -0.75))
    excl = int(node.attr("exclude_outside", 0) or 0)
    extrap = float(node.attr("extrapolation_value", 0.0))
    shape = shape_of(x)
    shape[axis] = out_w

    def c(v: float) -> ir.Value:
        return const_scalar(v, f64)

    scale_v = scale if isinstance(scale, ir.Value) else c(float(scale))
    s = arith.minimumf(scale_v, c(1.0))
    # start = floor(-k / s) + 1, n = 2 - 2 * start (computed in f64, then as an index).
    start_f = arith.addf(math.floor(arith.divf(c(-2.0 if cubic else -1.0), s)), c(1.0))
    n_f = arith.subf(c(2.0), arith.mulf(c(2.0), start_f))
    n_taps = arith.index_cast(idx_t, arith.fptosi(i64, n_f))
    half_n = arith.divsi(n_taps, const_index(2))
    coordinate = source_coordinate(node, in_w, scale, out_w, roi)

    def kernel(u: ir.Value) -> ir.Value:
        u = math.absf(u)
        if not cubic:
            return arith.maximumf(arith.subf(c(1.0), u), c(0.0))
        u2 = arith.mulf(u, u)
        u3 = arith.mulf(u, u2)
        near = arith.addf(arith.subf(arith.mulf(c(a + 2), u3), arith.mulf(c(a + 3), u2)), c(1.0))
        far = arith.subf(arith.addf(arith.subf(arith.mulf(c(a), u3), arith.mulf(c(5 * a), u2)), arith.mulf(c(8 * a), u)), c(4 * a))
        return arith.select(arith.cmpf(F.OLE, u, c(1.0)), near, arith.select(arith.cmpf(F.OLT, u, c(2.0)), far, c(0.0)))

    def body(args: list[ir.Value]) -> list[ir.Value]:
        y = arith.sitofp(f64, arith.index_cast(i64, index_of(axis)))
        t = index_of(r)
        xo, _ = coordinate(y)
        fl = math.floor(xo)
        integer = arith.cmpf(F.OEQ, xo, fl)
        ratio = arith.select(integer, c(1.0), arith.subf(xo, fl))
        t_f = arith.sitofp(f64, arith.index_cast(i64, t))
        w = kernel(arith.mulf(s, arith.subf(arith.addf(start_f, t_f), ratio)))
        base = arith.index_cast(idx_t, arith.fptosi(i64, fl))
        first = arith.subi(base, arith.select(integer, half_n, arith.subi(half_n, const_index(1))))
        at = arith.addi(first, t)
        clamped = arith.minsi(arith.maxsi(at, const_index(0)), const_index(in_w - 1))
        v = tensor.extract(x, [clamped if d == axis else index_of(d) for d in range(r)])
        if excl:
            inside = arith.andi(arith.cmpi(P.sge, at, const_index(0)), arith.cmpi(P.slt, at, const_index(in_w)))
            w = arith.select(inside, w, c(0.0))
        return [arith.addf(args[1], arith.mulf(w, v)), arith.addf(args[2], w)]

    taps = empty([n_taps], f64)
    out_map = affine_map(r + 1, list(range(r)))
    num, den = generic(
        [taps], [filled(shape, f64, 0.0), filled(shape, f64, 0.0)],
        [affine_map(r + 1, [r]), out_map, out_map], ["parallel"] * r + ["reduction"], body,
    )

    def finish(args: list[ir.Value]) -> list[ir.Value]:
        d = arith.select(arith.cmpf(F.OEQ, args[1], c(0.0)), c(1.0), args[1])
        v = arith.divf(args[0], d)
        _, outside = coordinate(arith.sitofp(f64, arith.index_cast(i64, index_of(axis))))
        return [v if outside is None else arith.select(outside, c(extrap), v)]

    return generic([num, den], [empty(shape, f64)], [identity_map(r)] * 3, ["parallel"] * r, finish)[0]
