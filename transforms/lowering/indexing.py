"""Index-computing ops: Einsum, Trilu, EyeLike, OneHot, CumSum, DepthToSpace, SpaceToDepth,
GatherND, ReverseSequence, ScatterElements, ScatterND.

The ones that compute every output element independently are `linalg.generic`s whose body
uses `linalg.index` and reads sources with `tensor.extract` (Einsum is a plain contraction
generic, one loop per subscript letter). Scatters update a copy of the data element by element
in nested `scf.for` loops carrying the tensor (`tensor.insert`), which bufferizes in place;
duplicate indices then apply in order, as the reference does.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, scf, tensor

from onnxc.transforms.lowering.runtime_checks import require, require_indices, require_within
from onnxc.transforms.lowering.common import (
    LoweringError,
    Dim,
    Node,
    affine_map,
    const_index,
    const_scalar,
    convert_element,
    dim,
    dim_floordiv,
    dim_mul,
    dim_value,
    elem_of,
    empty,
    filled,
    generic,
    identity_map,
    index_of,
    is_float,
    is_unsigned,
    lowers,
    normalize_axis,
    rank_of,
    shape_of,
    static_shape,
    to_index,
)

P = arith.CmpIPredicate


def _wrap(i: ir.Value, size: Dim) -> ir.Value:
    """A possibly negative index made non-negative."""
    neg = arith.cmpi(P.slt, i, const_index(0))
    return arith.select(neg, arith.addi(i, dim_value(size)), i)


def _in_bounds(i: ir.Value, size: Dim) -> ir.Value:
    """A possibly negative index made non-negative, then clamped into [0, size - 1].

    An index out of range is invalid input (onnx.reference raises), but the CPU code has no
    channel to report it at run time; unclamped, Scatter* wrote past its buffer and corrupted the
    heap (compile fuzzer: ScatterElements with axis -2 aborted the process) and GatherND read past
    it. Clamped, every access stays in bounds; valid indices are unchanged. (OneHot keeps `_wrap`:
    an index out of range is all off values there, by the spec.)"""
    last = arith.subi(dim_value(size), const_index(1))
    return arith.maxsi(arith.minsi(_wrap(i, size), last), const_index(0))


# --- Einsum ---------------------------------------------------------------------------------------


def _parse_einsum(eq: str, ranks: list[int]) -> tuple[list[str], str] | str:
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        return f"equation has {len(terms)} inputs, the op {len(ranks)}"
    n_ell = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            n_ell = max(n_ell, r - (len(t) - 3))
        elif len(t) != r:
            return f"term '{t}' does not match rank {r}"
    ell = [chr(0x3B1 + i) for i in range(n_ell)]  # Greek letters cannot clash with [a-zA-Z]
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - (len(t) - 3)
            t = t.replace("...", "".join(ell[n_ell - k :]))
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", "".join(ell))
    else:
        counts: dict[str, int] = {}
        for t in out_terms:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        out = "".join(ell) + "".join(sorted(ch for ch, n in counts.items() if n == 1 and ch not in ell))
    return out_terms, out


def _check_einsum(node: Node) -> str | None:
    ranks = [len(static_shape(t)) for t in node.onnx_types if t is not None]
    p = _parse_einsum(str(node.attr("equation")), ranks)
    return p if isinstance(p, str) else None


@lowers("Einsum", check=_check_einsum)
def lower_einsum(node: Node) -> list[ir.Value]:
    """Einsum: one generic, a loop per letter, output letters parallel, the rest reduced."""
    ins = [v for v in node.inputs if v is not None]
    terms, out = _parse_einsum(str(node.attr("equation")), [rank_of(v) for v in ins])  # type: ignore[misc]
    letters = list(out) + sorted({ch for t in terms for ch in t} - set(out))
    loop = {ch: i for i, ch in enumerate(letters)}
    size: dict[str, Dim] = {}
    for v, t in zip(ins, terms):
        for j, ch in enumerate(t):
            s = static_shape(v.type)[j]
            if ch not in size or (isinstance(size[ch], int) and size[ch] == 1 and s != 1):
                size[ch] = s if s is not None else dim(v, j)
    # Every other occurrence of a letter is read at the letter's loop index: its size must equal
    # the letter's (a static 1 is broadcast). Unchecked, "i,i" of sizes 5 and 6 with symbolic dims
    # answered a sum of 5 products (and read past the shorter operand the other way round; the
    # compile fuzzer). Static mismatches are refused, dynamic ones checked at run time.
    ok: ir.Value | None = None
    for v, t in zip(ins, terms):
        st = static_shape(v.type)
        for j, ch in enumerate(t):
            want = size[ch]
            if st[j] == 1 and not (isinstance(want, int) and want == 1):
                continue
            if st[j] is not None and isinstance(want, int):
                if st[j] != want:
                    raise LoweringError(f"{node.describe()}: letter '{ch}' has sizes {want} and {st[j]}")
                continue
            got = dim_value(dim(v, j))
            if isinstance(want, ir.Value) and got == want:
                continue
            same = arith.cmpi(arith.CmpIPredicate.eq, got, dim_value(want))
            ok = same if ok is None else arith.andi(ok, same)
    if ok is not None:
        shapes = [dim_value(d) for v in ins for d in shape_of(v)]
        require(ok, node.op, f"the operands' run-time dims {{dims}} give a letter of '{node.attr('equation')}' two sizes", [("dims", shapes)])
    n = len(letters)
    maps = []
    for v, t in zip(ins, terms):
        st = static_shape(v.type)
        exprs: list[int | str] = []
        for j, ch in enumerate(t):
            broadcast = st[j] == 1 and not (isinstance(size[ch], int) and size[ch] == 1)
            exprs.append("0" if broadcast else loop[ch])
        maps.append(affine_map(n, exprs))
    elem = convert_element(node.in_elem(0))
    zero = 0.0 if is_float(elem) else 0
    init = filled([size[ch] for ch in out], elem, zero)
    maps.append(affine_map(n, [loop[ch] for ch in out]))
    iters = ["parallel"] * len(out) + ["reduction"] * (n - len(out))
    mul = arith.mulf if is_float(elem) else arith.muli
    add = arith.addf if is_float(elem) else arith.addi

    def body(a: list[ir.Value]) -> list[ir.Value]:
        p = a[0]
        for x in a[1:-1]:
            p = mul(p, x)
        return [add(a[-1], p)]

    return generic(ins, [init], maps, iters, body)


# --- triangular, eye, one-hot ---------------------------------------------------------------------


def _scalar_k(node: Node, i: int) -> ir.Value:
    """Optional int64 scalar input `i` as an index (0 when omitted)."""
    if not node.has(i):
        return const_index(0)
    c = node.const_ints(i)
    if c is not None:
        return const_index(c[0])
    v = node.input(i)
    return to_index(tensor.extract(v, [const_index(0)] * rank_of(v)), node.in_elem(i))


@lowers("Trilu")
def lower_trilu(node: Node) -> list[ir.Value]:
    """Trilu: keep x[..., i, j] where j - i >= k (upper) or <= k (lower), else 0."""
    x = node.input(0)
    r = rank_of(x)
    k = _scalar_k(node, 1)
    upper = int(node.attr("upper", 1))
    elem = elem_of(x.type)
    zero = const_scalar(0.0 if is_float(elem) else 0, elem)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        d = arith.subi(index_of(r - 1), index_of(r - 2))
        keep = arith.cmpi(P.sge if upper else P.sle, d, k)
        return [arith.select(keep, a[0], zero)]

    return generic([x], [empty(shape_of(x), elem)], [identity_map(r)] * 2, ["parallel"] * r, body)


@lowers("EyeLike")
def lower_eye_like(node: Node) -> list[ir.Value]:
    """EyeLike: ones on the k-th diagonal of a 2-D tensor shaped like the input."""
    x = node.input(0)
    elem = elem_of(node.result_type(0))
    k = int(node.attr("k", 0))
    one = const_scalar(1.0 if is_float(elem) else 1, elem)
    zero = const_scalar(0.0 if is_float(elem) else 0, elem)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        d = arith.subi(index_of(1), index_of(0))
        return [arith.select(arith.cmpi(P.eq, d, const_index(k)), one, zero)]

    return generic([], [empty(shape_of(x), elem)], [identity_map(2)], ["parallel"] * 2, body)


def _check_onehot(node: Node) -> str | None:
    if static_shape(node.onnx_types[2]) != [2]:
        return "values must be a 2-element tensor"
    return None


@lowers("OneHot", check=_check_onehot)
def lower_one_hot(node: Node) -> list[ir.Value]:
    """OneHot: out[..., d, ...] = values[1] if indices[...] (wrapped by depth) == d else values[0]."""
    ind, vals = node.input(0), node.input(2)
    q = rank_of(ind)
    axis = normalize_axis(int(node.attr("axis", -1)), q + 1)
    dc = node.const(1)
    if dc is not None:
        depth: Dim = int(float(dc.reshape(-1)[0]))
    else:
        dv = tensor.extract(node.input(1), [const_index(0)] * rank_of(node.input(1)))
        delem = node.in_elem(1)
        if is_float(delem):
            dv = arith.fptosi(ir.IntegerType.get_signless(64), dv)
            delem = ir.IntegerType.get_signless(64)
        depth = to_index(dv, delem)
    ishape = shape_of(ind)
    out_shape = ishape[:axis] + [depth] + ishape[axis:]
    elem = elem_of(vals.type)
    off = tensor.extract(vals, [const_index(0)])
    on = tensor.extract(vals, [const_index(1)])
    ielem = node.in_elem(0)
    n = q + 1
    imap = affine_map(n, [i for i in range(n) if i != axis])

    def body(a: list[ir.Value]) -> list[ir.Value]:
        v = a[0]
        if is_float(ielem):
            v = arith.fptosi(ir.IntegerType.get_signless(64), v)
            iv = arith.index_cast(ir.IndexType.get(), v)
        else:
            iv = to_index(v, ielem)
        iv = _wrap(iv, depth)
        return [arith.select(arith.cmpi(P.eq, iv, index_of(axis)), on, off)]

    return generic([ind], [empty(out_shape, elem)], [imap, identity_map(n)], ["parallel"] * n, body)


def switch(selector: ir.Value, n: int, result_type: ir.Type, build: Callable[[int], ir.Value]) -> ir.Value:
    """`build(i)` for the case selector == i (an index), as a chain of `scf.if`; the last case
    is also the default (the caller validates the selector's range)."""
    if n == 1:
        return build(0)
    cond = arith.cmpi(P.eq, selector, const_index(0))
    op = scf.IfOp(cond, [result_type], has_else=True)
    with ir.InsertionPoint(op.then_block):
        scf.YieldOp([_cast(build(0), result_type)])
    with ir.InsertionPoint(op.else_block):
        rest = switch(arith.subi(selector, const_index(1)), n - 1, result_type, lambda i: build(i + 1))
        scf.YieldOp([_cast(rest, result_type)])
    return op.results[0]


def select_case(selector: ir.Value, keys: list[int], result_type: ir.Type, build: Callable[[int], ir.Value]) -> ir.Value:
    """`build(i)` for the case selector == keys[i] (an integer scalar), as a chain of `scf.if`;
    the last case is also the default. Each case's value is cast to `result_type`."""
    if len(keys) == 1:
        return _cast(build(0), result_type)
    cond = arith.cmpi(P.eq, selector, const_scalar(keys[0], selector.type))
    op = scf.IfOp(cond, [result_type], has_else=True)
    with ir.InsertionPoint(op.then_block):
        scf.YieldOp([_cast(build(0), result_type)])
    with ir.InsertionPoint(op.else_block):
        rest = select_case(selector, keys[1:], result_type, lambda i: build(i + 1))
        scf.YieldOp([rest])
    return op.results[0]


def _cast(v: ir.Value, t: ir.Type) -> ir.Value:
    from onnxc.transforms.lowering.common import cast_to_type

    return cast_to_type(v, t)


def _cumsum_axis(x: ir.Value, axis: int, excl: int, rev: int, prod: bool = False) -> ir.Value:
    r = rank_of(x)
    elem = elem_of(x.type)
    fl = is_float(elem)
    ident = 1 if prod else 0
    init = filled(shape_of(x), elem, float(ident) if fl else ident)
    j = r  # the extra reduction loop
    in_map = affine_map(r + 1, [j if i == axis else i for i in range(r)])
    out_map = affine_map(r + 1, list(range(r)))
    pred = {(0, 0): P.ule, (1, 0): P.ult, (0, 1): P.uge, (1, 1): P.ugt}[(excl, rev)]
    zero = const_scalar(float(ident) if fl else ident, elem)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        take = arith.cmpi(pred, index_of(j), index_of(axis))
        v = arith.select(take, a[0], zero)
        if prod:
            return [arith.mulf(a[1], v) if fl else arith.muli(a[1], v)]
        return [arith.addf(a[1], v) if fl else arith.addi(a[1], v)]

    return generic([x], [init], [in_map, out_map], ["parallel"] * r + ["reduction"], body)[0]


@lowers("CumSum", "CumProd")
def lower_cumsum(node: Node) -> list[ir.Value]:
    """CumSum as a masked reduction: out[i] = sum over j of x[j] where j precedes i (or follows,
    with reverse; strictly, with exclusive). Quadratic in the axis length, but one generic. A
    runtime axis selects among one lowering per axis (`scf.if`)."""
    x = node.input(0)
    r = rank_of(x)
    excl = int(node.attr("exclusive", 0))
    rev = int(node.attr("reverse", 0))
    prod = node.op_type == "CumProd"
    c = node.const_ints(1)
    if c is not None:
        return [_cumsum_axis(x, normalize_axis(c[0], r), excl, rev, prod)]
    av = node.input(1)
    ax = to_index(tensor.extract(av, [const_index(0)] * rank_of(av)), node.in_elem(1))
    given = ax
    ax = arith.select(arith.cmpi(P.slt, ax, const_index(0)), arith.addi(ax, const_index(r)), ax)
    # A run-time axis out of range is invalid (onnx.reference raises); it selected some axis.
    inside = arith.andi(arith.cmpi(P.sge, ax, const_index(0)), arith.cmpi(P.slt, ax, const_index(r)))
    require(inside, node.op, f"the run-time axis {{axis}} is out of range for rank {r}", [("axis", given)])
    t = x.type
    return [switch(ax, r, t, lambda i: _cumsum_axis(x, i, excl, rev, prod))]


# --- depth/space ----------------------------------------------------------------------------------


def _require_divisible(node: Node, d: Dim, by: int, what: str, axis: int) -> None:
    """Dim `d` of DepthToSpace/SpaceToDepth's input must be a multiple of `by` (the spec's
    constraint): refused when static, a run-time check when dynamic. Why: the result's dim is the
    floor quotient, so a remainder was dropped and answered (DepthToSpace of 8 channels with
    blocksize 3 returned an empty tensor; the compile fuzzer)."""
    if isinstance(d, int):
        if d % by:
            raise LoweringError(f"{node.describe()}: input dim {axis} ({what}, {d}) is not a multiple of {by}")
        return
    ok = arith.cmpi(arith.CmpIPredicate.eq, arith.remui(d, const_index(by)), const_index(0))
    require(ok, node.op, f"input dim {axis} ({what}) of run-time size {{size}} is not a multiple of {by}", [("size", d)])


@lowers("DepthToSpace")
def lower_depth_to_space(node: Node) -> list[ir.Value]:
    """DepthToSpace (DCR or CRD): out[n, c, h, w] = x[n, channel(c, h % b, w % b), h / b, w / b]."""
    x = node.input(0)
    b = int(node.attr("blocksize"))
    crd = node.attr("mode", "DCR") == "CRD"
    n, c, h, w = shape_of(x)
    oc = dim_floordiv(c, b * b)
    out = [n, oc, dim_mul(h, b), dim_mul(w, b)]
    _require_divisible(node, c, b * b, "channels", 1)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        bi, bj = const_index(b), const_index(b * b)
        oh, ow = index_of(2), index_of(3)
        hb, wb = arith.remui(oh, bi), arith.remui(ow, bi)
        blk = arith.addi(arith.muli(hb, bi), wb)
        if crd:
            ch = arith.addi(arith.muli(index_of(1), bj), blk)
        else:
            ch = arith.addi(arith.muli(blk, dim_value(oc)), index_of(1))
        return [tensor.extract(x, [index_of(0), ch, arith.divui(oh, bi), arith.divui(ow, bi)])]

    return generic([], [empty(out, elem_of(x.type))], [identity_map(4)], ["parallel"] * 4, body)


@lowers("SpaceToDepth")
def lower_space_to_depth(node: Node) -> list[ir.Value]:
    """SpaceToDepth: out[n, (bh*b + bw)*C + c, h, w] = x[n, c, h*b + bh, w*b + bw] (DCR, the
    default); with mode CRD (opset 28) out[n, c*b*b + bh*b + bw, h, w] (ignoring the mode returned
    the DCR order: a silent wrong answer in the backend suite)."""
    x = node.input(0)
    b = int(node.attr("blocksize"))
    crd = node.attr("mode", "DCR") == "CRD"
    n, c, h, w = shape_of(x)
    out = [n, dim_mul(c, b * b), dim_floordiv(h, b), dim_floordiv(w, b)]
    _require_divisible(node, h, b, "height", 2)
    _require_divisible(node, w, b, "width", 3)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        bi = const_index(b)
        oc = index_of(1)
        if crd:
            cc, t = arith.divui(oc, const_index(b * b)), arith.remui(oc, const_index(b * b))
        else:
            cc, t = arith.remui(oc, dim_value(c)), arith.divui(oc, dim_value(c))
        bh, bw = arith.divui(t, bi), arith.remui(t, bi)
        hh = arith.addi(arith.muli(index_of(2), bi), bh)
        ww = arith.addi(arith.muli(index_of(3), bi), bw)
        return [tensor.extract(x, [index_of(0), cc, hh, ww])]

    return generic([], [empty(out, elem_of(x.type))], [identity_map(4)], ["parallel"] * 4, body)


# --- GatherND, ReverseSequence ----------------------------------------------------------------------


def _check_gather_nd(node: Node) -> str | None:
    s = static_shape(node.onnx_types[1])
    if not s or s[-1] is None:
        return "the last dim of indices must be static"
    d = static_shape(node.onnx_types[0])
    for j in range(int(node.attr("batch_dims", 0) or 0)):
        if d and j < len(d) and j < len(s) and d[j] is not None and s[j] is not None and d[j] != s[j]:
            return f"batch dim {j} of indices ({s[j]}) differs from the data's ({d[j]})"
    return None


@lowers("GatherND", check=_check_gather_nd)
def lower_gather_nd(node: Node) -> list[ir.Value]:
    """GatherND (with batch_dims): one generic over the output reading indices and data."""
    data, ind = node.input(0), node.input(1)
    b = int(node.attr("batch_dims", 0))
    q = rank_of(ind)
    k = static_shape(ind.type)[-1]
    dshape = shape_of(data)
    ishape = shape_of(ind)
    out_shape = ishape[:-1] + dshape[b + k :]
    n = len(out_shape)
    ielem = node.in_elem(1)
    # Out-of-range indices: a run-time error (runtime_checks.py), checked once before the gather.
    require_indices(node.op, ind, is_unsigned(ielem), [dim_value(d) for d in dshape[b : b + k]], b, [dim_value(d) for d in dshape])
    # The batch dims must be equal (static ones: the check): the gather loops over the indices'
    # and read the data at the same batch coordinates, so indices with 1 batch entry against
    # data with 2 answered from the first entry only (compile fuzzer, seed 406, dims symbolic).
    from onnxc.transforms.lowering.runtime_checks import require

    for j in range(b):
        if not (isinstance(dshape[j], int) and isinstance(ishape[j], int)):
            dv, iv = dim_value(dshape[j]), dim_value(ishape[j])
            require(arith.cmpi(P.eq, dv, iv), node.op, f"batch dim {j} of indices ({{i}}) differs from the data's ({{d}})", [("i", iv), ("d", dv)])

    def body(a: list[ir.Value]) -> list[ir.Value]:
        lead = [index_of(i) for i in range(q - 1)]
        coords = lead[:b]
        for j in range(k):
            v = tensor.extract(ind, lead + [const_index(j)])
            coords.append(_in_bounds(to_index(v, ielem), dshape[b + j]))
        coords += [index_of(q - 1 + i) for i in range(len(dshape) - b - k)]
        return [tensor.extract(data, coords)]

    return generic([], [empty(out_shape, elem_of(data.type))], [identity_map(n)], ["parallel"] * n, body)


@lowers("ReverseSequence")
def lower_reverse_sequence(node: Node) -> list[ir.Value]:
    """ReverseSequence: within each batch entry, the first seq_len elements along time reversed."""
    x, lens = node.input(0), node.input(1)
    r = rank_of(x)
    t_ax = int(node.attr("time_axis", 0))
    b_ax = int(node.attr("batch_axis", 1))
    lelem = node.in_elem(1)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        t = index_of(t_ax)
        ln = to_index(tensor.extract(lens, [index_of(b_ax)]), lelem)
        inside = arith.cmpi(P.slt, t, ln)
        src_t = arith.select(inside, arith.subi(arith.subi(ln, const_index(1)), t), t)
        coords = [src_t if i == t_ax else index_of(i) for i in range(r)]
        return [tensor.extract(x, coords)]

    return generic([], [empty(shape_of(x), elem_of(x.type))], [identity_map(r)], ["parallel"] * r, body)


# --- scatters -------------------------------------------------------------------------------------


def _loop_nest(shape: list[Dim], init: ir.Value, body: Callable[[list[ir.Value], ir.Value], ir.Value]) -> ir.Value:
    """Nested `scf.for` over `shape` carrying one tensor; `body(ivs, t) -> new t`."""

    def level(d: int, ivs: list[ir.Value], t: ir.Value) -> ir.Value:
        if d == len(shape):
            return body(ivs, t)
        loop = scf.ForOp(const_index(0), dim_value(shape[d]), const_index(1), [t])
        with ir.InsertionPoint(loop.body):
            res = level(d + 1, ivs + [loop.induction_variable], loop.inner_iter_args[0])
            scf.YieldOp([res])
        return loop.results[0]

    return level(0, [], init)


def _combine(reduction: str, old: ir.Value, new: ir.Value, elem: ir.Type, unsigned: bool) -> ir.Value:
    fl = is_float(elem)
    if reduction == "add":
        return arith.addf(old, new) if fl else arith.addi(old, new)
    if reduction == "mul":
        return arith.mulf(old, new) if fl else arith.muli(old, new)
    if reduction == "max":
        return arith.maximumf(old, new) if fl else (arith.maxui(old, new) if unsigned else arith.maxsi(old, new))
    if reduction == "min":
        return arith.minimumf(old, new) if fl else (arith.minui(old, new) if unsigned else arith.minsi(old, new))
    return new


def _copy(x: ir.Value) -> ir.Value:
    """A fresh tensor holding x (so the scatter's in-place updates never touch the input)."""
    r = rank_of(x)
    return generic([x], [empty(shape_of(x), elem_of(x.type))], [identity_map(r)] * 2, ["parallel"] * r, lambda a: [a[0]])[0]


@lowers("ScatterElements", "Scatter")
def lower_scatter_elements(node: Node) -> list[ir.Value]:
    """ScatterElements: out = copy of data; out[idx at axis] (op)= updates, in order."""
    data, ind, upd = node.input(0), node.input(1), node.input(2)
    r = rank_of(data)
    axis = normalize_axis(int(node.attr("axis", 0)), r)
    reduction = str(node.attr("reduction", "none"))
    ielem = node.in_elem(1)
    elem = elem_of(data.type)
    unsigned = is_unsigned(node.in_elem(0))
    size = dim(data, axis)
    if rank_of(ind) != r or rank_of(upd) != r:
        raise LoweringError(f"{node.describe()}: indices and updates must have the data's rank {r}")
    # The loop runs over the indices' shape, writes the data off the axis and reads the updates
    # there: larger indices wrote past the data, smaller updates were read past their end.
    for problem in (require_within(node.op, ind, data, axis, "the indices"), require_within(node.op, upd, ind, -1, "the updates", equal=True)):
        if problem is not None:
            raise LoweringError(f"{node.describe()}: {problem}")
    require_indices(node.op, ind, is_unsigned(ielem), [dim_value(size)], axis, [dim_value(d) for d in shape_of(data)])

    def body(ivs: list[ir.Value], t: ir.Value) -> ir.Value:
        i = _in_bounds(to_index(tensor.extract(ind, ivs), ielem), size)
        u = tensor.extract(upd, ivs)
        coords = [i if j == axis else ivs[j] for j in range(r)]
        if reduction != "none":
            u = _combine(reduction, tensor.extract(t, coords), u, elem, unsigned)
        return tensor.insert(u, t, coords)

    return [_loop_nest(shape_of(ind), _copy(data), body)]


def _check_scatter_nd(node: Node) -> str | None:
    s = static_shape(node.onnx_types[1])
    if not s or s[-1] is None:
        return "the last dim of indices must be static"
    return None


@lowers("ScatterND", check=_check_scatter_nd)
def lower_scatter_nd(node: Node) -> list[ir.Value]:
    """ScatterND: out = copy of data; out[indices[i...], rest...] (op)= updates[i..., rest...]."""
    data, ind, upd = node.input(0), node.input(1), node.input(2)
    q = rank_of(ind)
    k = static_shape(ind.type)[-1]
    reduction = str(node.attr("reduction", "none"))
    ielem = node.in_elem(1)
    elem = elem_of(data.type)
    unsigned = is_unsigned(node.in_elem(0))
    dshape = shape_of(data)
    require_indices(node.op, ind, is_unsigned(ielem), [dim_value(d) for d in dshape[:k]], 0, [dim_value(d) for d in dshape])

    def body(ivs: list[ir.Value], t: ir.Value) -> ir.Value:
        lead = ivs[: q - 1]
        coords = [_in_bounds(to_index(tensor.extract(ind, lead + [const_index(j)]), ielem), dshape[j]) for j in range(k)]
        coords += ivs[q - 1 :]
        u = tensor.extract(upd, ivs)
        if reduction != "none":
            u = _combine(reduction, tensor.extract(t, coords), u, elem, unsigned)
        return tensor.insert(u, t, coords)

    return [_loop_nest(shape_of(upd), _copy(data), body)]


# --- TopK -----------------------------------------------------------------------------------------


def _for(lb: ir.Value, ub: ir.Value, carried: list[ir.Value], body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
    """One `scf.for` from lb to ub (step 1) carrying `carried`; `body(iv, args) -> new args`."""
    loop = scf.ForOp(lb, ub, const_index(1), carried)
    with ir.InsertionPoint(loop.body):
        scf.YieldOp(body(loop.induction_variable, list(loop.inner_iter_args)))
    return list(loop.results)


def _check_topk(node: Node) -> str | None:
    if node.const(1) is None and static_shape(node.onnx_types[1]) not in ([], [1]):
        return "K must be a one-element tensor"
    return None


@lowers("TopK", check=_check_topk)
def lower_topk(node: Node) -> list[ir.Value]:
    """TopK by repeated selection (O(n*k) per row, sequential `scf.for` loops): the j-th pick is
    the best element ordered after the (j-1)-th in (value, then lower index first) order, so
    ties keep the lower index first as the spec asks; the output is always sorted."""
    x = node.input(0)
    r = rank_of(x)
    axis = normalize_axis(int(node.attr("axis", -1)), r)
    kc = node.const_ints(1)
    if kc is not None:
        k: Dim = int(kc[0])
    else:
        kv = node.input(1)
        k = to_index(tensor.extract(kv, [const_index(0)] * rank_of(kv)), node.in_elem(1))
        # A run-time k outside [0, dim] is invalid (onnx.reference raises); a larger one read past
        # the row.
        kdim = dim_value(shape_of(x)[axis])
        k_ok = arith.andi(arith.cmpi(P.sge, k, const_index(0)), arith.cmpi(P.sle, k, kdim))
        require(k_ok, node.op, f"the run-time k = {{k}} is out of range for axis {axis} of size {{size}}", [("k", k), ("size", kdim)])
    largest = int(node.attr("largest", 1))
    onnx_elem = node.in_elem(0)
    elem = convert_element(onnx_elem)
    unsigned = is_unsigned(onnx_elem)
    fl = is_float(elem)
    i64 = ir.IntegerType.get_signless(64)
    shape = shape_of(x)
    out_shape = list(shape)
    out_shape[axis] = k
    vals0 = empty(out_shape, elem)
    idx0 = empty(out_shape, i64)
    n = dim_value(shape[axis])
    outer = [d for i, d in enumerate(shape) if i != axis]
    true = const_scalar(1, ir.IntegerType.get_signless(1))
    false = const_scalar(0, ir.IntegerType.get_signless(1))

    def better(a: ir.Value, b: ir.Value) -> ir.Value:
        """a strictly before b by value."""
        if fl:
            return arith.cmpf(arith.CmpFPredicate.OGT if largest else arith.CmpFPredicate.OLT, a, b)
        if largest:
            return arith.cmpi(P.ugt if unsigned else P.sgt, a, b)
        return arith.cmpi(P.ult if unsigned else P.slt, a, b)

    def equal(a: ir.Value, b: ir.Value) -> ir.Value:
        return arith.cmpf(arith.CmpFPredicate.OEQ, a, b) if fl else arith.cmpi(P.eq, a, b)

    def before(av: ir.Value, ai: ir.Value, bv: ir.Value, bi: ir.Value) -> ir.Value:
        return arith.ori(better(av, bv), arith.andi(equal(av, bv), arith.cmpi(P.slt, ai, bi)))

    def row(ivs: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        def coords(a: ir.Value) -> list[ir.Value]:
            it = iter(ivs)
            return [a if i == axis else next(it) for i in range(r)]

        def pick(j: ir.Value, args: list[ir.Value]) -> list[ir.Value]:
            vals, idxs, pv, pi, have_prev = args

            def scan(i: ir.Value, st: list[ir.Value]) -> list[ir.Value]:
                bv, bi, found = st
                v = tensor.extract(x, coords(i))
                # Candidates come after the previous pick; the best candidate wins.
                after_prev = arith.ori(arith.xori(have_prev, true), before(pv, pi, v, i))
                take = arith.andi(after_prev, arith.ori(arith.xori(found, true), before(v, i, bv, bi)))
                return [arith.select(take, v, bv), arith.select(take, i, bi), arith.ori(found, take)]

            bv, bi, _ = _for(const_index(0), n, [pv, const_index(0), false], scan)
            vals = tensor.insert(bv, vals, coords(j))
            idxs = tensor.insert(arith.index_cast(i64, bi), idxs, coords(j))
            return [vals, idxs, bv, bi, true]

        init_v = const_scalar(0.0 if fl else 0, elem)
        res = _for(const_index(0), dim_value(k), [carried[0], carried[1], init_v, const_index(0), false], pick)
        return res[:2]

    def nest(d: int, ivs: list[ir.Value], carried: list[ir.Value]) -> list[ir.Value]:
        if d == len(outer):
            return row(ivs, carried)
        return _for(const_index(0), dim_value(outer[d]), carried, lambda iv, c: nest(d + 1, ivs + [iv], c))

    vals, idxs = nest(0, [], [vals0, idx0])
    return [vals, idxs]


@lowers("Compress")
def lower_compress(node: Node) -> list[ir.Value]:
    """Compress: the slices of x along `axis` (flattened x without it) whose condition is true,
    by data_dependent.py's count-then-fill: the selected count (a reduction over the condition,
    cut to the axis length) sizes the output, then the selected slices are copied in order."""
    from onnxc.transforms.lowering.common import dim_mul, extract_slice, insert_slice, reshape
    from onnxc.transforms.lowering.data_dependent import compact, count_where

    x, cond = node.input(0), node.input(1)
    axis_attr = node.attr("axis")
    if axis_attr is None:
        total: Dim = 1
        for d in shape_of(x):
            total = dim_mul(total, d)
        x = reshape(x, [total])
        axis = 0
    else:
        axis = normalize_axis(int(axis_attr), rank_of(x))
    shape = shape_of(x)
    r = len(shape)
    n = arith.minsi(dim_value(dim(cond, 0)), dim_value(shape[axis]))
    # A condition longer than the axis is invalid (onnx.reference raises); it is cut (memory-safe)
    # and the caller gets a run-time error (runtime_checks.py).
    fits = arith.cmpi(P.sle, dim_value(dim(cond, 0)), dim_value(shape[axis]))
    require(fits, node.op, f"the condition has {{length}} entries, axis {axis} only {{size}}", [("length", dim_value(dim(cond, 0))), ("size", dim_value(shape[axis]))])
    out_shape = list(shape)
    out_shape[axis] = count_where(extract_slice(cond, [0], [n]), lambda c: c)
    slice_sizes = list(shape)
    slice_sizes[axis] = 1

    def write(outs: list[ir.Value], ivs: list[ir.Value], pos: ir.Value) -> list[ir.Value]:
        src: list[Dim] = [0] * r
        src[axis] = ivs[0]
        dst: list[Dim] = [0] * r
        dst[axis] = pos
        return [insert_slice(extract_slice(x, src, slice_sizes), outs[0], dst)]

    return compact([n], lambda ivs: tensor.extract(cond, ivs), [empty(out_shape, elem_of(x.type))], write)
