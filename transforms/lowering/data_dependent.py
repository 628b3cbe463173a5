"""Ops whose output size depends on the data: NonZero, Unique, NonMaxSuppression (Compress and
TopK with a run-time k live in indexing.py and follow the same scheme).

The mechanism (one for all of them): the result is a tensor with a dynamic dim whose size is a
value computed in the generated code, so it needs nothing special at the compiled function's
boundary (the CPU ABI returns every result as a memref descriptor carrying its sizes, and the
caller copies out that many elements) nor when later ops consume it (a dynamically shaped
tensor, like any other). Two ways to get the size, whichever is cheaper for the op:

- **count, then fill** (`count_where` + `compact`): a first phase counts the selected elements
  (a reduction `linalg.generic`), the output is `tensor.empty` of that size, and a second phase
  (`scf.for` carrying the output and the write position, `tensor.insert` under `scf.if`) writes
  the selected elements in order. Used where counting is much cheaper than producing the
  values: NonZero, Unique.
- **upper bound, then a view** (`bounded_rows`): where the count is only known by running the
  whole algorithm (NonMaxSuppression's greedy selection), the output is allocated at a static
  upper bound, filled in one pass that also counts, and the result is the `tensor.extract_slice`
  of the rows written.

Both bufferize in place (one-shot bufferization: the loop-carried tensor becomes one buffer).
Unique and NonMaxSuppression are quadratic in the number of elements/boxes (loops of
comparisons, no sort), which suits the sizes they see in exported models (per-class box
candidates, token ids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, scf, tensor

from onnxc.transforms.lowering.common import (
    Dim,
    Node,
    const_index,
    const_scalar,
    convert_element,
    dim_mul,
    dim_value,
    elem_of,
    empty,
    extract_slice,
    generic,
    identity_map,
    index_of,
    insert_slice,
    is_float,
    is_unsigned,
    lowers,
    normalize_axis,
    rank_of,
    reduce_dims,
    reshape,
    scalar_of,
    shape_of,
    static_shape,
    to_index,
)

P = arith.CmpIPredicate
F = arith.CmpFPredicate


def _i1() -> ir.Type:
    return ir.IntegerType.get_signless(1)


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def _idx() -> ir.Type:
    return ir.IndexType.get()


# --- the mechanism --------------------------------------------------------------------------------


def for_range(n: Dim, carried: Sequence[ir.Value], body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]], start: Dim = 0) -> list[ir.Value]:
    """`scf.for` over [start, n) carrying `carried`; `body(iv, carried) -> new carried`."""
    loop = scf.ForOp(dim_value(start), dim_value(n), const_index(1), list(carried))
    with ir.InsertionPoint(loop.body):
        scf.YieldOp(body(loop.induction_variable, list(loop.inner_iter_args)))
    return list(loop.results)


def if_else(cond: ir.Value, types: Sequence[ir.Type], then: Callable[[], list[ir.Value]], other: Callable[[], list[ir.Value]]) -> list[ir.Value]:
    """`scf.if` yielding values of `types` from `then()` or `other()`."""
    op = scf.IfOp(cond, list(types), has_else=True)
    with ir.InsertionPoint(op.then_block):
        scf.YieldOp(then())
    with ir.InsertionPoint(op.else_block):
        scf.YieldOp(other())
    return list(op.results)


def count_where(x: ir.Value, pred: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """Phase 1: how many elements of `x` satisfy `pred(element) -> i1`, as an index (a reduction
    generic over every dim of `x`)."""
    r = rank_of(x)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        return [arith.addi(a[1], arith.extui(_i64(), pred(a[0])))]

    cnt = reduce_dims([x], list(range(r)), [0], [_i64()], body)[0]
    return arith.index_cast(_idx(), tensor.extract(cnt, []))


def compact(
    shape: Sequence[Dim],
    keep: Callable[[list[ir.Value]], ir.Value],
    outs: Sequence[ir.Value],
    write: Callable[[list[ir.Value], list[ir.Value], ir.Value], list[ir.Value]],
) -> list[ir.Value]:
    """Phase 2: visit every position of `shape` in row-major order; where `keep(ivs)` holds,
    `write(outs, ivs, pos) -> outs` stores it at output position `pos`, which then advances.
    Returns the filled `outs`."""

    def nest(d: int, ivs: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        if d == len(shape):
            *cur, pos = carried
            return if_else(
                keep(ivs),
                [v.type for v in carried],
                lambda: write(cur, ivs, pos) + [arith.addi(pos, const_index(1))],
                lambda: carried,
            )
        return for_range(shape[d], carried, lambda iv, c: nest(d + 1, ivs + [iv], c))

    return nest(0, [], [*outs, const_index(0)])[:-1]


def bounded_rows(bound: Dim, cols: int, elem: ir.Type, fill: Callable[[ir.Value], tuple[ir.Value, ir.Value]]) -> ir.Value:
    """Upper bound, then a view: `fill(out) -> (out, rows written)` writes rows into a
    [bound, cols] tensor; the result is its first `rows` rows (`tensor.extract_slice`)."""
    out, rows = fill(empty([bound, cols], elem))
    return extract_slice(out, [0, 0], [rows, cols])


def _nonzero(v: ir.Value, onnx_elem: ir.Type) -> ir.Value:
    if is_float(v.type):
        return arith.cmpf(F.UNE, v, const_scalar(0.0, v.type))  # NaN is non-zero, as in numpy
    return arith.cmpi(P.ne, v, const_scalar(0, v.type))


# --- NonZero ---------------------------------------------------------------------------------------


def _check_nonzero(node: Node) -> str | None:
    if not static_shape(node.onnx_types[0]):
        return "a rank-0 input is not lowered"
    return None


@lowers("NonZero", check=_check_nonzero)
def lower_nonzero(node: Node) -> list[ir.Value]:
    """NonZero: [rank, count] coordinates of the non-zero elements in row-major order (count
    first, then the coordinates written in one pass)."""
    x = node.input(0)
    elem = node.in_elem(0)
    r = rank_of(x)
    count = count_where(x, lambda v: _nonzero(v, elem))

    def write(outs: list[ir.Value], ivs: list[ir.Value], pos: ir.Value) -> list[ir.Value]:
        out = outs[0]
        for d, iv in enumerate(ivs):
            out = tensor.insert(arith.index_cast(_i64(), iv), out, [const_index(d), pos])
        return [out]

    keep = lambda ivs: _nonzero(tensor.extract(x, ivs), elem)  # noqa: E731
    return compact(shape_of(x), keep, [empty([r, count], _i64())], write)


# --- Unique ----------------------------------------------------------------------------------------


def _check_unique(node: Node) -> str | None:
    e = node.in_elem(0)
    if str(e) not in ("f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"):
        return f"elements of type {e} are not lowered"
    return None


@lowers("Unique", check=_check_unique)
def lower_unique(node: Node) -> list[ir.Value | None]:
    """Unique (flattened, or slices along `axis`), sorted or in order of first occurrence.

    x is viewed as [pre, n, post] (n the slices compared: the elements, or the slices along the
    axis, each flattened in row-major order as numpy compares them). Per slice i: its first
    occurrence fo[i], its count, and its output position (sorted: the number of distinct slices
    lexicographically smaller; else the number of distinct slices first seen before fo[i]);
    then the count of distinct slices, and one pass scattering the first occurrences."""
    x = node.input(0)
    onnx_elem = node.in_elem(0)
    elem = convert_element(onnx_elem)
    fl, unsigned = is_float(elem), is_unsigned(onnx_elem)
    shape = shape_of(x)
    axis_attr = node.attr("axis")
    sorted_ = int(node.attr("sorted", 1))
    if axis_attr is None:
        total: Dim = 1
        for d in shape:
            total = dim_mul(total, d)
        pre: Dim = 1
        n: Dim = total
        post: Dim = 1
        axis = None
    else:
        axis = normalize_axis(int(axis_attr), len(shape))
        pre, post = 1, 1
        for d in shape[:axis]:
            pre = dim_mul(pre, d)
        for d in shape[axis + 1 :]:
            post = dim_mul(post, d)
        n = shape[axis]
    x3 = reshape(x, [pre, n, post])

    def each(body: Callable[[ir.Value, ir.Value, list[ir.Value]], list[ir.Value]], inits: list[ir.Value]) -> list[ir.Value]:
        """Loop over the elements (p, q) of a slice carrying `inits`."""
        return for_range(pre, inits, lambda p, c: for_range(post, c, lambda q, c2: body(p, q, c2)))

    def same(a: ir.Value, b: ir.Value) -> ir.Value:
        if not fl:
            return arith.cmpi(P.eq, a, b)
        # NaNs are one value, as in np.unique (equal_nan): ordered (UEQ) and both-NaN (UNO) cases.
        both_nan = arith.andi(arith.cmpf(F.UNO, a, a), arith.cmpf(F.UNO, b, b))
        return arith.ori(arith.cmpf(F.OEQ, a, b), both_nan)

    def eq(i: ir.Value, j: ir.Value) -> ir.Value:
        def body(p: ir.Value, q: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
            a, b = tensor.extract(x3, [p, i, q]), tensor.extract(x3, [p, j, q])
            return [arith.andi(c[0], same(a, b))]

        return each(body, [const_scalar(1, _i1())])[0]

    def less(i: ir.Value, j: ir.Value) -> ir.Value:
        """Slice i lexicographically before slice j."""

        def body(p: ir.Value, q: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
            decided, result = c
            a, b = tensor.extract(x3, [p, i, q]), tensor.extract(x3, [p, j, q])
            if fl:  # NaN sorts after every number, as in numpy
                lt = arith.ori(arith.cmpf(F.OLT, a, b), arith.andi(arith.cmpf(F.ORD, a, a), arith.cmpf(F.UNO, b, b)))
                ne = arith.xori(same(a, b), const_scalar(1, _i1()))
            else:
                lt, ne = arith.cmpi(P.ult if unsigned else P.slt, a, b), arith.cmpi(P.ne, a, b)
            now = arith.andi(arith.xori(decided, const_scalar(1, _i1())), ne)
            return [arith.ori(decided, ne), arith.select(now, lt, result)]

        return each(body, [const_scalar(0, _i1()), const_scalar(0, _i1())])[1]

    def per_slice(out_elem: ir.Type, f: Callable[[ir.Value], ir.Value], ins: Sequence[ir.Value] = ()) -> ir.Value:
        """A 1-D tensor over the n slices whose element i is `f(i)`."""
        return generic(list(ins), [empty([n], out_elem)], [identity_map(1)] * (len(ins) + 1), ["parallel"], lambda a: [f(index_of(0))])[0]

    def first_occurrence(i: ir.Value) -> ir.Value:
        def body(j: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
            found, fo = c
            hit = arith.andi(arith.xori(found, const_scalar(1, _i1())), eq(j, i))
            return [arith.ori(found, hit), arith.select(hit, j, fo)]

        return for_range(arith.addi(i, const_index(1)), [const_scalar(0, _i1()), i], body)[1]

    fo = per_slice(_idx(), first_occurrence)
    is_first = per_slice(_i1(), lambda i: arith.cmpi(P.eq, tensor.extract(fo, [i]), i))

    def count_of(i: ir.Value) -> ir.Value:
        return for_range(n, [const_scalar(0, _i64())], lambda j, c: [arith.addi(c[0], arith.extui(_i64(), eq(i, j)))])[0]

    def position(i: ir.Value) -> ir.Value:
        fo_i = tensor.extract(fo, [i])

        def body(j: ir.Value, c: list[ir.Value]) -> list[ir.Value]:
            before = less(j, fo_i) if sorted_ else arith.cmpi(P.ult, j, fo_i)
            hit = arith.andi(tensor.extract(is_first, [j]), before)
            return [arith.addi(c[0], arith.extui(_i64(), hit))]

        return for_range(n, [const_scalar(0, _i64())], body)[0]

    counts_all = per_slice(_i64(), count_of)
    pos = per_slice(_i64(), position)
    u = count_where(is_first, lambda v: v)

    def write(outs: list[ir.Value], ivs: list[ir.Value], _: ir.Value) -> list[ir.Value]:
        y, first_idx, counts = outs
        (i,) = ivs
        p = arith.index_cast(_idx(), tensor.extract(pos, [i]))
        piece = extract_slice(x3, [0, i, 0], [pre, 1, post])
        y = insert_slice(piece, y, [0, p, 0])
        first_idx = tensor.insert(arith.index_cast(_i64(), i), first_idx, [p])
        counts = tensor.insert(tensor.extract(counts_all, [i]), counts, [p])
        return [y, first_idx, counts]

    y3, first_idx, counts = compact(
        [n], lambda ivs: tensor.extract(is_first, ivs), [empty([pre, u, post], elem), empty([u], _i64()), empty([u], _i64())], write
    )
    if axis is None:
        y = reshape(y3, [u])
    else:
        y_shape = list(shape)
        y_shape[axis] = u
        y = reshape(y3, y_shape)
    return [y, first_idx, pos, counts]


# --- NonMaxSuppression -----------------------------------------------------------------------------


def _check_nms(node: Node) -> str | None:
    for i in (0, 1):
        if not is_float(node.in_elem(i)):
            return f"input {i} of type {node.in_elem(i)} is not lowered"
    if rank_of(node.onnx_types[0]) != 3 or rank_of(node.onnx_types[1]) != 3:
        return "boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]"
    (b0, n0, four), (b1, _, n1) = static_shape(node.onnx_types[0]), static_shape(node.onnx_types[1])
    if four != 4:  # read as 4 scalars: an unknown last dim could be shorter
        return f"boxes must have a last dim of 4 known when compiling (have {'?' if four is None else four})"
    for what, a, b in (("batches", b0, b1), ("boxes", n0, n1)):
        if a is not None and b is not None and a != b:
            return f"boxes and scores disagree on the number of {what} ({a} vs {b})"
    return None


def _max_min(a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(min, max) of two coordinates, as the reference's max_min."""
    ge = arith.cmpf(F.OGE, a, b)
    return arith.select(ge, b, a), arith.select(ge, a, b)


@lowers("NonMaxSuppression", check=_check_nms)
def lower_nms(node: Node) -> list[ir.Value]:
    """NonMaxSuppression: per batch and class, candidates (score > score_threshold when given)
    are visited in (score descending, box index ascending) order; one is selected unless its IoU
    with an already selected box of the class exceeds iou_threshold; at most
    max_output_boxes_per_class per class (0 when omitted). Rows (batch, class, box) go to a
    [batches * classes * boxes, 3] bound and the result is the rows written."""
    boxes, scores = node.input(0), node.input(1)
    belem = elem_of(boxes.type)
    selem = elem_of(scores.type)
    center = int(node.attr("center_point_box", 0))
    # Dims known only at run time are not checked against each other (no run-time error path):
    # the loops take the smaller of each pair, so they never read outside either tensor.
    nb0, nbox0, _ = shape_of(boxes)
    nb1, nc, nbox1 = shape_of(scores)
    nb = nb0 if nb0 == nb1 else arith.minsi(dim_value(nb0), dim_value(nb1))
    nbox = nbox1 if nbox0 == nbox1 else arith.minsi(dim_value(nbox0), dim_value(nbox1))
    if node.has(2):
        mo = to_index(scalar_of(node.input(2)), node.in_elem(2))
        max_out = arith.maxsi(mo, const_index(0))
    else:
        max_out = const_index(0)
    iou_thr = scalar_of(node.input(3)) if node.has(3) else const_scalar(0.0, belem)
    has_sthr = node.has(4)
    sthr = scalar_of(node.input(4)) if has_sthr else None
    true, false = const_scalar(1, _i1()), const_scalar(0, _i1())
    not_ = lambda v: arith.xori(v, true)  # noqa: E731
    zero = const_scalar(0.0, belem)

    def corners(b: ir.Value, k: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """(x_min, x_max, y_min, y_max) of box k of batch b."""
        c = [tensor.extract(boxes, [b, k, const_index(j)]) for j in range(4)]
        if center == 0:
            x0, x1 = _max_min(c[1], c[3])
            y0, y1 = _max_min(c[0], c[2])
            return x0, x1, y0, y1
        half = const_scalar(2.0, belem)
        w, h = arith.divf(c[2], half), arith.divf(c[3], half)
        return arith.subf(c[0], w), arith.addf(c[0], w), arith.subf(c[1], h), arith.addf(c[1], h)

    def suppresses(b: ir.Value, k1: ir.Value, k2: ir.Value) -> ir.Value:
        """The reference's suppress_by_iou: IoU(k1, k2) > iou_threshold (False for boxes that
        do not intersect or have no area)."""
        ax0, ax1, ay0, ay1 = corners(b, k1)
        bx0, bx1, by0, by1 = corners(b, k2)
        ix0, ix1 = arith.maximumf(ax0, bx0), arith.minimumf(ax1, bx1)
        iy0, iy1 = arith.maximumf(ay0, by0), arith.minimumf(ay1, by1)
        inter = arith.mulf(arith.subf(ix1, ix0), arith.subf(iy1, iy0))
        a1 = arith.mulf(arith.subf(ax1, ax0), arith.subf(ay1, ay0))
        a2 = arith.mulf(arith.subf(bx1, bx0), arith.subf(by1, by0))
        union = arith.subf(arith.addf(a1, a2), inter)
        ok = arith.andi(arith.cmpf(F.OGT, ix1, ix0), arith.cmpf(F.OGT, iy1, iy0))
        for v in (inter, a1, a2, union):
            ok = arith.andi(ok, arith.cmpf(F.OGT, v, zero))
        # A safe divisor where ok is false (the select discards that quotient).
        iou = arith.divf(inter, arith.select(ok, union, const_scalar(1.0, belem)))
        return arith.andi(ok, arith.cmpf(F.OGT, iou, iou_thr))

    def fill(out: ir.Value) -> tuple[ir.Value, ir.Value]:
        def per_class(b: ir.Value, c: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
            out, rows = carried

            def score(k: ir.Value) -> ir.Value:
                return tensor.extract(scores, [b, c, k])

            def step(st: list[ir.Value]) -> list[ir.Value]:
                out, rows, sel, pv, pk, have_prev, _ = st

                # The next candidate: the best (score desc, index asc) after the previous one.
                def scan(k: ir.Value, s: list[ir.Value]) -> list[ir.Value]:
                    bv, bk, found = s
                    v = score(k)
                    after = arith.ori(arith.cmpf(F.OLT, v, pv), arith.andi(arith.cmpf(F.OEQ, v, pv), arith.cmpi(P.sgt, k, pk)))
                    cand = arith.ori(not_(have_prev), after)
                    if sthr is not None:
                        cand = arith.andi(cand, arith.cmpf(F.OGT, v, sthr))
                    better = arith.ori(not_(found), arith.cmpf(F.OGT, v, bv))  # ties: the lower index came first
                    take = arith.andi(cand, better)
                    return [arith.select(take, v, bv), arith.select(take, k, bk), arith.ori(found, take)]

                bv, bk, found = for_range(nbox, [pv, const_index(0), false], scan)

                def try_select() -> list[ir.Value]:
                    # Suppressed by a box already selected for this class (rows rows-sel .. rows-1).
                    def check(t: ir.Value, s: list[ir.Value]) -> list[ir.Value]:
                        kk = arith.index_cast(_idx(), tensor.extract(out, [t, const_index(2)]))
                        return [arith.ori(s[0], suppresses(b, bk, kk))]

                    (supp,) = for_range(rows, [false], check, start=arith.subi(rows, sel))

                    def add() -> list[ir.Value]:
                        o = out
                        for j, v in enumerate((b, c, bk)):
                            o = tensor.insert(arith.index_cast(_i64(), v), o, [rows, const_index(j)])
                        return [o, arith.addi(rows, const_index(1)), arith.addi(sel, const_index(1))]

                    return if_else(supp, [out.type, _idx(), _idx()], lambda: [out, rows, sel], add)

                out, rows, sel = if_else(found, [out.type, _idx(), _idx()], try_select, lambda: [out, rows, sel])
                # Once no candidate is left or the class is full, the remaining visits are skipped.
                live = arith.andi(found, arith.cmpi(P.slt, sel, max_out))
                return [out, rows, sel, bv, bk, true, live]

            def visit(_: ir.Value, st: list[ir.Value]) -> list[ir.Value]:
                return if_else(st[-1], [v.type for v in st], lambda: step(st), lambda: st)

            init_score = const_scalar(0.0, selem)
            live0 = arith.cmpi(P.sgt, max_out, const_index(0))
            res = for_range(nbox, [out, rows, const_index(0), init_score, const_index(0), false, live0], visit)
            return res[:2]

        out, rows = for_range(
            nb, [out, const_index(0)], lambda b, cb: for_range(nc, cb, lambda c, cc: per_class(b, c, cc))
        )
        return out, rows

    # At most min(max_output_boxes_per_class, boxes) rows per batch and class: with a constant
    # maximum (what exporters write) the bound is that, not every box of every class.
    per_class: Dim = nbox
    mc = node.const_ints(2) if node.has(2) else [0]
    if mc is not None:
        cap = max(mc[0], 0)
        per_class = min(cap, nbox) if isinstance(nbox, int) else arith.minsi(nbox, const_index(cap))
    bound = dim_mul(dim_mul(nb, nc), per_class)
    return [bounded_rows(bound, 3, _i64(), fill)]
