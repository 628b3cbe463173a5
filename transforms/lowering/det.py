"""Det (opset 22): the determinant of each square matrix in the last two dims.

What: LU elimination with partial pivoting, batched over all leading dims (flattened to one),
in f64 whatever the float input type (np.linalg.det, the reference, uses LAPACK's pivoted LU;
f64 keeps the f32/f16 results within the suite's tolerance). One `scf.for` over the pivot column
k carries the matrices and the running determinants; a step is
  1. a reduction `linalg.generic` over (batch, row) picking the row p >= k of largest |a[i, k]|;
  2. a map over (batch, row, col) that swaps rows k and p and eliminates below the pivot (the
     rows are read with `tensor.extract` at the swapped index, since k and p are run-time values);
  3. det *= a[p, k] (negated when p != k).
A zero pivot column gives det 0 (its elimination is skipped, so no NaN is produced).
Why not a library call: the lowered IR stays plain linalg/tensor/scf, as for every other op.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math, scf, tensor

from onnxc.transforms.lowering.common import (
    Dim,
    Node,
    affine_map,
    const_index,
    const_scalar,
    convert_tensor,
    dim_mul,
    empty,
    filled,
    generic,
    identity_map,
    index_of,
    is_float,
    lowers,
    rank_of,
    reshape,
    shape_of,
    static_shape,
)

F = arith.CmpFPredicate
P = arith.CmpIPredicate


def _check_det(node: Node) -> str | None:
    """A ranked float input of rank >= 2 whose last two dims are not known to differ."""
    t = node.onnx_types[0]
    if not isinstance(t, ir.RankedTensorType) or rank_of(t) < 2:
        return "the input must be ranked, rank >= 2"
    if not is_float(node.in_elem(0)):
        return "the input is not a float tensor"
    m, n = static_shape(t)[-2:]
    if m is not None and n is not None and m != n:
        return f"the matrices are not square ({m}x{n})"
    return None


@lowers("Det", check=_check_det)
def lower_det(node: Node) -> list[ir.Value]:
    """Det (see the module docstring)."""
    f64 = ir.F64Type.get()
    x = convert_tensor(node.input(0), node.in_elem(0), f64)
    shape = shape_of(x)
    batch_shape, n = shape[:-2], shape[-1]
    if not (isinstance(shape[-2], int) and isinstance(n, int)):
        # Square only at run time: a 6x2 input with symbolic dims was reshaped to 2x2 matrices
        # and answered where onnx.reference refuses (the compile fuzzer, seed 211 case 13817).
        from onnxc.transforms.lowering.common import dim_value
        from onnxc.transforms.lowering.runtime_checks import require

        require(arith.cmpi(P.eq, dim_value(shape[-2]), dim_value(n)), node.op, "the matrices are not square ({rows}x{cols})",
                [("rows", dim_value(shape[-2])), ("cols", dim_value(n))])  # fmt: skip
    nb: Dim = 1
    for d in batch_shape:
        nb = dim_mul(nb, d)
    a0 = reshape(x, [nb, n, n])
    det0 = filled([nb], f64, 1.0)
    n_val = n if isinstance(n, ir.Value) else const_index(n)
    zero, one = const_scalar(0.0, f64), const_scalar(1.0, f64)

    loop = scf.ForOp(const_index(0), n_val, const_index(1), [a0, det0])
    with ir.InsertionPoint(loop.body):
        k = loop.induction_variable
        a, det = list(loop.inner_iter_args)

        # 1. pivot row per matrix: (max |a[b, i, k]| over i >= k, its row); loops (b, i).
        def pick(args: list[ir.Value]) -> list[ir.Value]:
            b, i = index_of(0), index_of(1)
            v = math.absf(tensor.extract(a, [b, i, k]))
            better = arith.andi(arith.cmpi(P.sge, i, k), arith.cmpf(F.OGT, v, args[1]))
            return [arith.select(better, v, args[1]), arith.select(better, i, args[2])]

        # `a` is read (at column 0, unused) only to give the row loop its range. Rows above k
        # never win; the initial row k with -1 loses to |a[k, k]| >= 0 at i = k.
        _, piv = generic(
            [a], [filled([nb], f64, -1.0), filled([nb], ir.IndexType.get(), k)],
            [affine_map(2, [0, 1, "0"]), affine_map(2, [0]), affine_map(2, [0])], ["parallel", "reduction"], pick,
        )

        # 2. swap rows k and p, eliminate below row k; loops (b, i, j).
        def eliminate(args: list[ir.Value]) -> list[ir.Value]:
            b, i, j = index_of(0), index_of(1), index_of(2)
            p = args[0]
            row = arith.select(arith.cmpi(P.eq, i, k), p, arith.select(arith.cmpi(P.eq, i, p), k, i))
            v = tensor.extract(a, [b, row, j])
            pivot = tensor.extract(a, [b, p, k])
            below = arith.andi(arith.cmpi(P.sgt, i, k), arith.cmpf(F.UNE, pivot, zero))
            factor = arith.divf(tensor.extract(a, [b, row, k]), arith.select(below, pivot, one))
            elim = arith.subf(v, arith.mulf(factor, tensor.extract(a, [b, p, j])))
            return [arith.select(below, elim, v)]

        a_next = generic([piv], [empty([nb, n, n], f64)], [affine_map(3, [0]), identity_map(3)], ["parallel"] * 3, eliminate)[0]

        # 3. det *= pivot, negated on a row swap.
        def update(args: list[ir.Value]) -> list[ir.Value]:
            b = index_of(0)
            p, d = args[0], args[1]
            pv = tensor.extract(a, [b, p, k])
            pv = arith.select(arith.cmpi(P.ne, p, k), arith.negf(pv), pv)
            return [arith.mulf(d, pv)]

        det_next = generic([piv, det], [empty([nb], f64)], [identity_map(1)] * 3, ["parallel"], update)[0]
        scf.YieldOp([a_next, det_next])
    det = reshape(loop.results[1], batch_shape) if batch_shape else reshape(loop.results[1], [])
    return [convert_tensor(det, f64, node.out_elem(0))]
