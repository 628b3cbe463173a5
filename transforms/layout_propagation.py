"""layout-propagation: cancel the layout transposes between channels-last layers of a CNN.

What: the Conv and pooling lowerings compute in NHWC and wrap each op in a pair of
`linalg.transpose`s (NCHW -> NHWC before, NHWC -> NCHW after), because ONNX tensors are NCHW and
upstream MLIR vectorizes convolutions only channels-last. Between two such layers sit elementwise
ops (bias, Relu, residual Add, BatchNormalization's scale and shift), so every layer would pay two
full-tensor transposes. This pass, on linalg-on-tensors IR (its output is pure upstream MLIR):

1. **pushes a transpose through an elementwise `linalg.generic`** that consumes it: the generic is
   rewritten in place to iterate in the transpose's source layout (its indexing maps permuted, its
   operand the source, a `tensor.empty` init of the permuted shape), and one transpose of its
   result takes the place of the old result. Other operands are read through permuted maps; an
   operand that is itself a transpose by the same permutation is replaced by its source (the
   residual Add of two NHWC values becomes an NHWC Add);
2. **pushes transposes through a Concat** (a `tensor.empty` filled by a chain of
   `tensor.insert_slice`s, as the lowering builds it) whose inputs are all transposed by the same
   permutation: the Concat of their sources along the permuted axis, then one transpose;
3. **folds transpose(transpose(x))**: inverse permutations give x, others one composed transpose;
4. **moves a transpose across a static `tensor.expand_shape` or `collapse_shape`** where that
   makes it meet another transpose to fold with: transpose(x) -> expand -> transpose becomes
   expand(x) -> transpose -> transpose (down through the expand: each dim expands in place), and
   transpose(collapse(transpose(y))) becomes collapse(transpose(transpose(y))) (up through the
   collapse: its groups move as units). A ShuffleNet channel shuffle (NCHW Reshape [N, g, C/g, H,
   W], Transpose, Reshape back) between channels-last layers becomes one transpose of the
   channels-last view [N, H, W, g, C/g] instead of four full-tensor transposes.

Repeated to a fixpoint, a ResNet runs NHWC end to end with one transpose at each model boundary.
Transposes left without uses are erased.

Which generics qualify (anything else is left alone, so the pass never changes a result): every
iterator parallel, every output map the identity over the loops, no output value read in the
body, every init a `tensor.empty`, no `linalg.index` (loop indices would change meaning), every
input map made of loop dims and constants, and the transposed operand read through the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import linalg, tensor

from onnxc.transforms.lowering.common import reassociation_attr, static_shape
from onnxc.transforms.pass_base import ModulePass

__all__ = ["LayoutPropagationPass", "propagate_layouts"]

#: Rewrite rounds allowed per structured op of the input (each round handles every transpose
#: once; a transpose moves at least one op down per round, so a chain of n ops needs at most n).
#: The pass stops as soon as a round changes nothing; the bound only guarantees termination.
ROUNDS_PER_OP: int = 2


def _perm(op: ir.Operation) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))


def _owner(v: ir.Value) -> ir.Operation | None:
    if isinstance(v, ir.OpResult):
        return v.owner.operation if isinstance(v.owner, ir.OpView) else v.owner
    return None


def _is_transpose(v: ir.Value) -> ir.Operation | None:
    op = _owner(v)
    return op if op is not None and op.name == "linalg.transpose" else None


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _num_inputs(op: ir.Operation) -> int:
    seg = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
    return int(seg[0])


def _uses_index(op: ir.Operation) -> bool:
    """Whether the body of `op` reads a loop index (`linalg.index`)."""
    found = False

    def visit(o: ir.Operation) -> ir.WalkResult:
        nonlocal found
        if o.name == "linalg.index":
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _elementwise(op: ir.Operation) -> bool:
    """Whether `op` is a generic this pass may re-layout (see the module docstring)."""
    if op.name != "linalg.generic":
        return False
    iters = ir.ArrayAttr(op.attributes["iterator_types"])
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    if any(a != parallel for a in iters):
        return False
    n_in = _num_inputs(op)
    maps = _maps(op)
    n = maps[0].n_dims
    operands = list(op.operands)
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    for i, (v, m) in enumerate(zip(operands, maps)):
        if i >= n_in:
            if m != ir.AffineMap.get_identity(n):
                return False
            if _owner(v) is None or _owner(v).name != "tensor.empty":
                return False
            if len(list(args[i].uses)):
                return False
        else:
            if not isinstance(v.type, ir.RankedTensorType):
                return False
            for e in m.results:
                if not isinstance(e, (ir.AffineDimExpr, ir.AffineConstantExpr)):
                    return False
    return not _uses_index(op)


def _reads_whole(m: ir.AffineMap, t: ir.Type) -> bool:
    """Whether map `m` reads an operand of type `t` element for element with the loops: the
    identity, where a size-1 dim may be read at the constant 0 (the elementwise lowering writes
    static 1s so)."""
    if m.n_dims != len(m.results) or not isinstance(t, ir.RankedTensorType):
        return False
    for i, e in enumerate(m.results):
        if isinstance(e, ir.AffineDimExpr) and e.position == i:
            continue
        if isinstance(e, ir.AffineConstantExpr) and e.value == 0 and not t.is_dynamic_dim(i) and t.get_dim_size(i) == 1:
            continue
        return False
    return True


def _keeps_order(t: ir.Type, perm: list[int]) -> bool:
    """Whether a tensor of type `t`, read whole in the layout a transpose by `perm` produced,
    reads in its own row-major order in the transpose's source layout: its dims other than static
    1s keep their relative order under `perm` (an AveragePool divisor [1, 1, H, W] beside an NCHW
    value is a broadcast over channels in NHWC, not a strided read)."""
    rt = ir.RankedTensorType(t)
    kept = [perm[d] for d in range(rt.rank) if rt.is_dynamic_dim(d) or rt.get_dim_size(d) != 1]
    return kept == sorted(kept)


def _permute_map(m: ir.AffineMap, perm: list[int]) -> ir.AffineMap:
    """`m` with loop d_i renamed e_perm[i] (the loops of the transpose's source layout)."""
    out: list[ir.AffineExpr] = []
    for e in m.results:
        if isinstance(e, ir.AffineDimExpr):
            out.append(ir.AffineDimExpr.get(perm[e.position]))
        else:
            out.append(e)
    return ir.AffineMap.get(m.n_dims, 0, out)


def _source_map(m: ir.AffineMap, perm: list[int]) -> ir.AffineMap:
    """The map reading the source `s` of a transpose by `perm` where `m` read its result (dim k of
    the result is dim perm[k] of `s`), loops renamed as in `_permute_map`. Not the identity when
    `m` reads a size-1 dim at the constant 0: a squeeze-excite scale [1, C, 1, 1] broadcast over H
    and W stays broadcast in the new layout."""
    out: list[ir.AffineExpr] = list(m.results)
    for k, e in enumerate(m.results):
        out[perm[k]] = ir.AffineDimExpr.get(perm[e.position]) if isinstance(e, ir.AffineDimExpr) else e
    return ir.AffineMap.get(m.n_dims, 0, out)


def _transpose(v: ir.Value, perm: list[int], loc: ir.Location) -> ir.Operation:
    """A `linalg.transpose` of `v` by `perm` (with its `tensor.empty` init), built at the current
    insertion point."""
    t = ir.RankedTensorType(v.type)
    sizes: list[ir.Value] = []
    static: list[int] = []
    for p in perm:
        if t.is_dynamic_dim(p):
            idx = ir.Operation.create(
                "arith.constant", results=[ir.IndexType.get()], attributes={"value": ir.IntegerAttr.get(ir.IndexType.get(), p)}, loc=loc
            ).result
            sizes.append(tensor.dim(v, idx, loc=loc))
            static.append(ir.ShapedType.get_dynamic_size())
        else:
            static.append(t.get_dim_size(p))
    init = tensor.empty(static, t.element_type, loc=loc) if not sizes else _empty(static, sizes, t.element_type, loc)
    with loc:
        op = linalg.transpose(v, outs=[init], permutation=perm)
    return op.operation if isinstance(op, ir.OpView) else op


def _empty(static: list[int], dyn: list[ir.Value], elem: ir.Type, loc: ir.Location) -> ir.Value:
    """`tensor.empty` of `static` sizes with `dyn` values for the dynamic ones, in order."""
    it = iter(dyn)
    sizes: list[int | ir.Value] = [next(it) if s == ir.ShapedType.get_dynamic_size() else s for s in static]
    return tensor.empty(sizes, elem, loc=loc)


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _existing_transpose(v: ir.Value, perm: list[int], user: ir.Operation) -> ir.Value | None:
    """A transpose of `v` by `perm` already computed before `user` in its block (the NHWC copy
    of a model input that a convolution made), so `user` reads it instead of `v` strided. Only for
    function arguments: reusing the layout copy of a computed value would let two transposes push
    the same op back and forth."""
    if not isinstance(v, ir.BlockArgument):
        return None
    for use in v.uses:
        op = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if op.name == "linalg.transpose" and use.operand_number == 0 and _perm(op) == perm:
            if op.block == user.block and op.is_before_in_block(user):
                return op.results[0]
    return None


def _push_through(t: ir.Operation, user: ir.Operation, relaxed: bool = False) -> bool:
    """Rewrite elementwise `user` of transpose `t` to run in t's source layout (see 1. above).

    `relaxed`: another whole operand may stay in the old layout when it reads in its own order
    there anyway (`_keeps_order`). Only once nothing else moves: such an operand may become a
    transpose of its own later (a squeeze-excite scale), read through its source then."""
    perm = _perm(t)
    res = t.results[0]
    if isinstance(t.operands[0], ir.BlockArgument):
        # The boundary transpose of a model input into the network's layout: pushing it down
        # would only move the work, and undo the rewrite that reused it for a residual read.
        return False
    n_in = _num_inputs(user)
    maps = _maps(user)
    if maps[0].n_dims != len(perm):
        return False
    ident = ir.AffineMap.get_identity(len(perm))
    operands = list(user.operands)
    whole = [_reads_whole(maps[i], v.type) for i, v in enumerate(operands[:n_in])]
    if not any(v == res and whole[i] for i, v in enumerate(operands[:n_in])):
        return False
    # Only when no other full-size operand would end up read across the new layout (that would
    # trade one transpose for a strided read, and let two transposes push the op back and forth).
    for i, v in enumerate(operands[:n_in]):
        if v == res or not whole[i] or (relaxed and _keeps_order(v.type, perm)):
            continue
        pt = _is_transpose(v)
        if not (pt is not None and _perm(pt) == perm) and _existing_transpose(v, _inverse(perm), user) is None:
            return False
    loc = user.location
    new_maps: list[ir.AffineMap] = []
    with ir.InsertionPoint(user):
        for i, v in enumerate(operands):
            if i >= n_in:
                # Output: a fresh empty of the permuted shape; result k is retyped below.
                old = _owner(v)
                assert old is not None
                ot = ir.RankedTensorType(v.type)
                dyn_old = list(old.operands)
                it = iter(dyn_old)
                sizes_old: list[int | ir.Value] = [next(it) if ot.is_dynamic_dim(d) else ot.get_dim_size(d) for d in range(ot.rank)]
                new_sizes: list[int | ir.Value] = [0] * ot.rank
                for d, p in enumerate(perm):
                    new_sizes[p] = sizes_old[d]  # old dim d is dim perm[d] of the new layout
                user.operands[i] = tensor.empty(new_sizes, ot.element_type, loc=loc)
                new_maps.append(ident)
                continue
            pt = _is_transpose(v)
            if whole[i] and pt is not None and _perm(pt) == perm:
                user.operands[i] = pt.operands[0]
                new_maps.append(_source_map(maps[i], perm))
            elif whole[i] and (existing := _existing_transpose(v, _inverse(perm), user)) is not None:
                user.operands[i] = existing
                new_maps.append(_source_map(maps[i], perm))
            else:
                new_maps.append(_permute_map(maps[i], perm))
    user.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
    for r in user.results:
        rt = ir.RankedTensorType(r.type)
        uses = [(u.owner, u.operand_number) for u in r.uses]
        shape = [rt.shape[i] for i in range(rt.rank)]
        # Result dim i of the old layout is dim perm[i] of the new one.
        new_shape = [0] * rt.rank
        for i, p in enumerate(perm):
            new_shape[p] = shape[i]
        r.set_type(ir.RankedTensorType.get(new_shape, rt.element_type))
        with ir.InsertionPoint.after(user):
            back = _transpose(r, perm, loc)
        for owner, idx in uses:
            owner = owner.operation if isinstance(owner, ir.OpView) else owner
            owner.operands[idx] = back.results[0]
    return True


def _mixed(op: ir.Operation) -> list[list[int | ir.Value]]:
    """Per-dim offsets, sizes and strides of a `tensor.insert_slice` (ints or dynamic values)."""
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    dyn = list(op.operands)[2:]
    out: list[list[int | ir.Value]] = []
    start = 0
    for name, count in zip(("static_offsets", "static_sizes", "static_strides"), seg[2:]):
        values = iter(dyn[start : start + count])
        start += count
        out.append([next(values) if v == ir.ShapedType.get_dynamic_size() else v for v in ir.DenseI64ArrayAttr(op.attributes[name])])
    return out


def _concat_chain(s: ir.Operation, perm: list[int]) -> tuple[ir.Operation, list[ir.Operation]] | None:
    """(the `tensor.empty`, the `tensor.insert_slice`s) of the Concat that `s` belongs to: a chain
    empty -> insert_slice -> insert_slice ..., each link used only by the next, every inserted
    value a transpose by `perm` of the same rank, unit strides. None when `s` is not in one."""
    chain = [s]
    cur = s
    while True:
        d = _owner(cur.operands[1])
        if d is None:
            return None
        if d.name == "tensor.empty":
            head = d
            break
        if d.name != "tensor.insert_slice" or len(list(d.results[0].uses)) != 1:
            return None
        chain.insert(0, d)
        cur = d
    cur = s
    while True:
        uses = list(cur.results[0].uses)
        if len(uses) != 1:
            break
        u = uses[0].owner.operation if isinstance(uses[0].owner, ir.OpView) else uses[0].owner
        if u.name != "tensor.insert_slice" or uses[0].operand_number != 1:
            break
        chain.append(u)
        cur = u
    if len(list(head.results[0].uses)) != 1:
        return None
    for link in chain:
        pt = _is_transpose(link.operands[0])
        if pt is None or _perm(pt) != perm or any(v != 1 for v in _mixed(link)[2]):
            return None
        if ir.RankedTensorType(link.operands[0].type).rank != len(perm):
            return None
    return head, chain


def _push_through_concat(t: ir.Operation, s: ir.Operation) -> bool:
    """Concat (empty + insert_slices) of values all transposed by one permutation -> the Concat
    of the sources, in their layout, then one transpose."""
    perm = _perm(t)
    found = _concat_chain(s, perm)
    if found is None:
        return False
    head, chain = found
    rank = len(perm)

    def permuted(values: list[int | ir.Value]) -> list[int | ir.Value]:
        out: list[int | ir.Value] = [0] * rank
        for i, p in enumerate(perm):
            out[p] = values[i]  # old dim i is dim perm[i] of the source layout
        return out

    ht = ir.RankedTensorType(head.results[0].type)
    it = iter(list(head.operands))
    head_sizes = [next(it) if ht.is_dynamic_dim(d) else ht.get_dim_size(d) for d in range(rank)]
    loc = chain[-1].location
    with ir.InsertionPoint(chain[0]), loc:
        dest = tensor.empty(permuted(head_sizes), ht.element_type)
    for link in chain:
        offsets, sizes, strides = (permuted(v) for v in _mixed(link))
        src = _is_transpose(link.operands[0]).operands[0]  # type: ignore[union-attr]
        dyn = lambda vs: [v for v in vs if isinstance(v, ir.Value)]  # noqa: E731
        stat = lambda vs: [ir.ShapedType.get_dynamic_size() if isinstance(v, ir.Value) else v for v in vs]  # noqa: E731
        with ir.InsertionPoint(link), link.location:
            dest = tensor.InsertSliceOp(
                src, dest, dyn(offsets), dyn(sizes), dyn(strides), stat(offsets), stat(sizes), stat(strides)
            ).result
    tail = chain[-1]
    uses = [(u.owner, u.operand_number) for u in tail.results[0].uses]
    with ir.InsertionPoint.after(tail):
        back = _transpose(dest, perm, loc)
    for owner, idx in uses:
        owner = owner.operation if isinstance(owner, ir.OpView) else owner
        owner.operands[idx] = back.results[0]
    for link in reversed(chain):
        link.erase()
    head.erase()
    return True


def _fold_pair(t: ir.Operation) -> bool:
    """transpose(transpose(x, p0), p1) -> x (inverse) or transpose(x, p0 . p1)."""
    inner = _is_transpose(t.operands[0])
    if inner is None or not len(list(t.results[0].uses)):
        return False
    p0, p1 = _perm(inner), _perm(t)
    composed = [p0[i] for i in p1]
    x = inner.operands[0]
    if composed == list(range(len(composed))):
        t.results[0].replace_all_uses_with(x)
    else:
        with ir.InsertionPoint(t):
            new = _transpose(x, composed, t.location)
        t.results[0].replace_all_uses_with(new.results[0])
    return True


def _reassociation(op: ir.Operation) -> list[list[int]]:
    return [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]


def _single_user(v: ir.Value) -> ir.Operation | None:
    uses = list(v.uses)
    if len(uses) != 1:
        return None
    owner = uses[0].owner
    return owner.operation if isinstance(owner, ir.OpView) else owner


def _push_through_expand(t: ir.Operation) -> bool:
    """transpose(x, p) -> expand_shape (groups G) -> transpose  =>  expand_shape(x) -> transpose
    by q -> transpose (then folded): x's dim p[k] expands into the sizes of G[k], and result dim
    G[k][s] is dim s of that group. Static shapes, the transpose used only by the expand, the
    expand only by a transpose (so the move ends in a fold, never in a ping-pong)."""
    e = _single_user(t.results[0])
    if e is None or e.name != "tensor.expand_shape":
        return False
    nxt = _single_user(e.results[0])
    if nxt is None or nxt.name != "linalg.transpose":
        return False
    x = t.operands[0]
    out = static_shape(e.results[0].type)
    if None in out or None in static_shape(x.type):
        return False
    perm, groups = _perm(t), _reassociation(e)
    inv = _inverse(perm)
    new_groups: list[list[int]] = []
    new_shape: list[int] = []
    for j in range(len(perm)):  # x's dim j is the transpose's dim inv[j]
        g = groups[inv[j]]
        new_groups.append(list(range(len(new_shape), len(new_shape) + len(g))))
        new_shape += [out[r] for r in g]
    q = [0] * len(out)
    for k, g in enumerate(groups):
        for s, r in enumerate(g):
            q[r] = new_groups[perm[k]][s]
    elem = ir.RankedTensorType(x.type).element_type
    loc = e.location
    with ir.InsertionPoint(e), loc:
        expanded = tensor.expand_shape(ir.RankedTensorType.get(new_shape, elem), x, reassociation_attr(new_groups), [], new_shape)
        moved = _transpose(expanded, q, loc)
    e.results[0].replace_all_uses_with(moved.results[0])
    e.erase()
    return True


def _pull_above_collapse(t: ir.Operation) -> bool:
    """transpose(collapse_shape(z, H), p) with z a transpose's result  =>  collapse_shape(
    transpose(z, Q), H') (then folded): Q lists z's groups in the order H[p[0]], H[p[1]], ...,
    H' groups them again. Static shapes, the collapse used only by `t`."""
    c = _owner(t.operands[0])
    if c is None or c.name != "tensor.collapse_shape" or _single_user(c.results[0]) is None:
        return False
    z = c.operands[0]
    if _is_transpose(z) is None or None in static_shape(z.type):
        return False
    perm, groups = _perm(t), _reassociation(c)
    order = [d for k in perm for d in groups[k]]
    new_groups: list[list[int]] = []
    start = 0
    for k in perm:
        new_groups.append(list(range(start, start + len(groups[k]))))
        start += len(groups[k])
    loc = t.location
    with ir.InsertionPoint(t), loc:
        moved = _transpose(z, order, loc)
        collapsed = tensor.collapse_shape(t.results[0].type, moved.results[0], reassociation_attr(new_groups))
    t.results[0].replace_all_uses_with(collapsed)
    return True


def _transposes(root: ir.Operation) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "linalg.transpose":
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


def _erase_dead(root: ir.Operation) -> None:
    """Erase transposes (and their `tensor.empty` inits) whose results are unused."""
    changed = True
    while changed:
        changed = False
        for t in _transposes(root):
            if not len(list(t.results[0].uses)):
                init = _owner(t.operands[1])
                t.erase()
                if init is not None and init.name == "tensor.empty" and not len(list(init.results[0].uses)):
                    init.erase()
                changed = True


def propagate_layouts(root: ir.Operation) -> int:
    """Run the rewrites on every function under `root` to a fixpoint; returns how many applied."""
    applied = 0
    n_ops = 0

    def count(op: ir.Operation) -> ir.WalkResult:
        nonlocal n_ops
        n_ops += op.name.startswith("linalg.")
        return ir.WalkResult.ADVANCE

    root.walk(count)
    relaxed = False
    for _ in range(ROUNDS_PER_OP * n_ops + 8):
        changed = False
        for t in _transposes(root):
            if _fold_pair(t) or _push_through_expand(t) or _pull_above_collapse(t):
                applied += 1
                changed = True
                continue
            for use in list(t.results[0].uses):
                user = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
                if _elementwise(user) and _push_through(t, user, relaxed):
                    applied += 1
                    changed = True
                    break  # t's use list changed
                if user.name == "tensor.insert_slice" and use.operand_number == 0 and _push_through_concat(t, user):
                    applied += 1
                    changed = True
                    break
        _erase_dead(root)
        if not changed:
            if relaxed:
                break
            relaxed = True  # one more round allowing `_keeps_order` operands (then strict again)
        else:
            relaxed = False
    return applied


@dataclass(frozen=True)
class LayoutPropagationPass(ModulePass):
    """Cancel layout transposes across elementwise linalg ops (CNNs run NHWC end to end)."""

    name = "layout-propagation"

    def run(self, module: ir.Operation) -> None:
        with module.context, ir.Location.unknown(module.context):
            propagate_layouts(module)
