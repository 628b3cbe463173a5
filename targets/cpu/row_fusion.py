"""Row reductions and the elementwise ops around them computed one row at a time.

What: ``fuse_row_chains(module, threads)`` runs on linalg-on-tensors before the per-op tiling
(`pipeline.tile_and_vectorize`). It finds *row chains*: an all-parallel ``linalg.generic`` (the
root) and the linalg ops that produce its operands, transitively, where every value passed
between them is either a whole row space (the root's shape) or that space reduced over its
innermost dim (``R`` or ``R x 1``), every map between them reads the row dims (all but the
innermost) at the same positions, and at least one of the ops reduces over the innermost dim.
Softmax (max, exp(x - max), sum, 1 / sum, scaling), LayerNormalization and RMSNorm (mean,
centred squares, variance, normalization) lower to such chains. The root is tiled by rows
(`transform.structured.tile_using_for`, tile 1 on every row dim; an outer `tile_using_forall`
first when the chain is large enough to split over threads) and the rest of the chain is fused
into its loop (`fuse_into_containing_op`, consumers first, then CSE); the per-op plans then
tile and vectorize the per-row ops as usual. Each chain is fused in a function of its own
(`_fuse_isolated`).

Why: each op of the chain was its own pass over the whole tensor, and a row now stays in L1
from its first reduction to its last scaling. One-process A/B, AMD Zen 3, 1 thread: ViT-S's
attention softmax (6 x 197 x 197) 0.39 -> 0.37 ms, its LayerNorm (197 x 384) 0.18 -> 0.15 ms,
BERT-base's LayerNorm 0.85x and softmax 0.92x; whole models within their noise (0.99-1.03).

Reshapes: the reductions' results reach their consumers through ``tensor.expand_shape`` ops
that insert the reduced dim back as a unit dim, and tile-and-fuse cannot fuse through a
reshape. Each chain op's operand read through such an expansion reads its source instead, with
the inserted dims dropped from its indexing map (`_fold_unit_expansion`): the same elements.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mlir import ir

from onnxc.importers.functions import remap_operands
from onnxc.transforms.onnx_utils import collect_ops

__all__ = ["ROW_FUSION", "MAX_ROW_BYTES", "RowChain", "find_row_chains", "fuse_row_chains"]

#: A module flag for one-process A/Bs.
ROW_FUSION: bool = True

#: The largest row (innermost dim of the root, in bytes) fused: every op of the chain reads and
#: writes the row, which should stay in L1/L2 between them.
MAX_ROW_BYTES: int = 64 << 10

#: Attributes naming a chain's root and the rest of its ops for the transform script.
_ROOT_TAG = "onnxc.row_root"
_CHAIN_TAG = "onnxc.row_chain"


@dataclasses.dataclass
class RowChain:
    """One root, the ops fused into its row loop (any order) and the root's (row space) shape."""

    root: ir.Operation
    ops: list[ir.Operation]
    shape: tuple[int, ...]


def _static_shape(t: ir.Type) -> tuple[int, ...] | None:
    if not isinstance(t, ir.RankedTensorType):
        return None
    return tuple(t.shape) if t.has_static_shape else None


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _iterators(op: ir.Operation) -> list[str]:
    """A generic's iterator types, "parallel" or "reduction" (the tile planner's reading)."""
    from .pipeline import _iterators as iterators

    return iterators(op, [], 0)


def _num_inputs(op: ir.Operation) -> int:
    return len(op.operands) - len(op.results)


def _unit_expansion(value: ir.Value) -> tuple[ir.Operation, list[int]] | None:
    """(the `tensor.expand_shape` defining ``value``, the result dims it inserts) when it only
    inserts static unit dims into a static source; None otherwise."""
    owner = value.owner
    if not isinstance(owner, ir.OpView) or owner.operation.name != "tensor.expand_shape":
        return None
    op = owner.operation
    src, dst = _static_shape(op.operands[0].type), _static_shape(op.results[0].type)
    if src is None or dst is None:
        return None
    inserted: list[int] = []
    for group, size in zip(ir.ArrayAttr(op.attributes["reassociation"]), src):
        dims = [ir.IntegerAttr(d).value for d in ir.ArrayAttr(group)]
        # The source dim is the group's one dim of its size (the first when all are units).
        keep = next((d for d in dims if dst[d] == size), None)
        if keep is None or any(dst[d] != 1 for d in dims if d != keep):
            return None
        inserted.extend(d for d in dims if d != keep)
    return op, inserted


def _fold_unit_expansion(op: ir.Operation, operand: int) -> bool:
    """Make input ``operand`` of generic ``op`` read the source of the unit-dim expansion that
    defines it, dropping the inserted dims from its indexing map. Returns whether it changed."""
    found = _unit_expansion(op.operands[operand])
    if found is None:
        return False
    expand, inserted = found
    maps = _maps(op)
    amap = maps[operand]
    results = [e for i, e in enumerate(amap.results) if i not in set(inserted)]
    maps[operand] = ir.AffineMap.get(amap.n_dims, amap.n_symbols, results)
    op.operands[operand] = expand.operands[0]
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
    return True


def _reads_rows(amap: ir.AffineMap, shape: Sequence[int], rows: int) -> bool:
    """Whether ``amap`` reads its first ``rows`` results at loop dims 0..rows-1 (a size-1 dim may
    read index 0), i.e. one row of the row space gives one row of the operand."""
    results = list(amap.results)
    if len(results) < rows:
        return False
    for i in range(rows):
        expr = results[i]
        if expr == ir.AffineDimExpr.get(i):
            continue
        if not (isinstance(expr, ir.AffineConstantExpr) and expr.value == 0 and shape[i] == 1):
            return False
    # The rest are the inner dims (or units): none of them may be a row dim.
    return all(not (isinstance(e, ir.AffineDimExpr) and ir.AffineDimExpr(e).position < rows) for e in results[rows:])


def _row_op(op: ir.Operation, space: tuple[int, ...]) -> bool:
    """Whether linalg op ``op`` fits a chain over row space ``space``: a fill of a row value, or
    a generic whose row loops come first with the row space's extents, whose reductions (if any)
    are over inner loops only, and whose results are row values."""
    rows = len(space) - 1
    if op.name == "linalg.fill":
        shape = _static_shape(op.results[0].type)
        return shape is not None and _row_value(shape, space)
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    # An empty operand makes a loop of extent 0, which MLIR's tiling asserts on.
    if any(0 in (_static_shape(v.type) or ()) for v in op.operands):
        return False
    shape = _static_shape(op.results[0].type)
    if shape is None or not _row_value(shape, space):
        return False
    its = _iterators(op)
    if len(its) < rows or any(it != "parallel" for it in its[:rows]):
        return False
    out_map = _maps(op)[-1]
    return _reads_rows(out_map, shape, rows)


def _row_value(shape: Sequence[int], space: tuple[int, ...]) -> bool:
    """A whole row space, or the row space reduced over its innermost dim (dropped or kept as 1)."""
    t = tuple(shape)
    return t == space or t == space[:-1] or t == space[:-1] + (1,)


def _is_reduction(op: ir.Operation) -> bool:
    return op.name == "linalg.generic" and "reduction" in _iterators(op)


def _chain_from(root: ir.Operation, space: tuple[int, ...], taken: set[ir.Operation]) -> list[ir.Operation] | None:
    """The producers of ``root`` that form a row chain with it (in no particular order), or None.

    A producer joins when it is a row op (`_row_op`) that is not already another chain's, and
    stays when every use of its result is by the chain; an elementwise op reading a
    ``linalg.unpack`` is left to the unpack's epilogue fusion (epilogue.py)."""
    rows = len(space) - 1
    members: list[ir.Operation] = []
    seen: set[ir.Operation] = {root}
    work = [root]
    while work:
        op = work.pop()
        if op.name != "linalg.generic" and op is not root:
            continue  # a fill has only its init
        for i in range(_num_inputs(op)):
            value = op.operands[i]
            owner = value.owner
            expansion = _unit_expansion(value)
            if expansion is not None:
                owner = expansion[0].operands[0].owner
            if not isinstance(owner, ir.OpView):
                continue
            producer = owner.operation
            if producer in seen or producer in taken or not producer.name.startswith("linalg."):
                continue
            if not _row_op(producer, space):
                continue
            # An elementwise op on an unpacked product stays with the product (epilogue.py).
            if producer.name == "linalg.generic" and not _is_reduction(producer) and any(
                isinstance(v.owner, ir.OpView) and v.owner.operation.name == "linalg.unpack"
                for v in list(producer.operands)[: _num_inputs(producer)]
            ):
                continue
            seen.add(producer)
            members.append(producer)
            work.append(producer)
        # The inits of the chain's reductions (fills) come along.
        if op.name == "linalg.generic" and op is not root:
            for v in list(op.operands)[_num_inputs(op):]:
                owner = v.owner
                expansion = _unit_expansion(v)
                if expansion is not None:
                    owner = expansion[0].operands[0].owner
                if isinstance(owner, ir.OpView) and owner.operation.name == "linalg.fill" and owner.operation not in seen:
                    if _row_op(owner.operation, space):
                        seen.add(owner.operation)
                        members.append(owner.operation)
    # Drop members with a use outside the chain (it would be computed twice), to a fixpoint.
    chain = set(members) | {root}
    changed = True
    while changed:
        changed = False
        for op in list(members):
            if op not in chain:
                continue
            for result in op.results:
                for use in result.uses:
                    user = use.owner.operation
                    if user.name == "tensor.expand_shape":
                        users = [u.owner.operation for r in user.results for u in r.uses]
                    else:
                        users = [user]
                    if any(u not in chain for u in users):
                        chain.discard(op)
                        changed = True
                        break
                if op not in chain:
                    break
    kept = [op for op in members if op in chain]
    if not any(_is_reduction(op) for op in kept):
        return None
    # Every value passed inside the chain is read a row at a time.
    for op in [root, *kept]:
        if op.name != "linalg.generic":
            continue
        maps = _maps(op)
        for i in range(_num_inputs(op)):
            value = op.operands[i]
            expansion = _unit_expansion(value)
            owner = (expansion[0].operands[0] if expansion else value).owner
            if isinstance(owner, ir.OpView) and owner.operation in chain:
                amap = maps[i]
                if expansion:
                    amap = ir.AffineMap.get(amap.n_dims, amap.n_symbols,
                                            [e for j, e in enumerate(amap.results) if j not in set(expansion[1])])
                if not _reads_rows(amap, space, rows):
                    return None
    return kept


def find_row_chains(module: ir.Module) -> list[RowChain]:
    """The row chains of ``module``, roots last-first so a chain never contains another's root."""
    chains: list[RowChain] = []
    taken: set[ir.Operation] = set()
    generics = collect_ops(module.operation, lambda op: op.name == "linalg.generic")
    for root in reversed(generics):
        if root in taken or any(it != "parallel" for it in _iterators(root)) or len(root.results) != 1:
            continue
        space = _static_shape(root.results[0].type)
        if space is None or len(space) < 2 or space[-1] < 2 or 0 in space:
            continue
        elem = ir.RankedTensorType(root.results[0].type).element_type
        width = elem.width if isinstance(elem, (ir.FloatType, ir.IntegerType)) else 32
        if space[-1] * width // 8 > MAX_ROW_BYTES or not _reads_rows(_maps(root)[-1], space, len(space) - 1):
            continue
        ops = _chain_from(root, space, taken)
        if not ops:
            continue
        # One block (moved as a whole into a function of its own, `_fuse_isolated`).
        if any(op.block != root.block for op in ops):
            continue
        taken.add(root)
        taken.update(ops)
        chains.append(RowChain(root, ops, space))
    return chains


def _script(chain: RowChain, threads: int, min_elements: int) -> str:
    """The transform script fusing ``chain`` (alone in the function it is applied to, `%fn`);
    its rows are split over ``threads`` when it has at least ``min_elements`` elements."""
    from .pipeline import forall_split

    rows = len(chain.shape) - 1
    sizes = ", ".join(["1"] * rows + ["0"])
    loops = ", ".join(["!transform.any_op"] * rows)
    n = len(chain.ops)
    handles = ", ".join(["!transform.any_op"] * n)
    lines = [
        f"  %root = transform.structured.match attributes{{{_ROOT_TAG}}} in %fn : (!transform.any_op) -> !transform.any_op",
        f"  %chain = transform.structured.match attributes{{{_CHAIN_TAG}}} in %fn : (!transform.any_op) -> !transform.any_op",
        f"  %c:{n + 1} = transform.split_handle %chain : (!transform.any_op) -> ({handles}, !transform.any_op)",
    ]
    # Consumers first (the reverse of program order): a producer is fused once all of its users
    # are in the loop, so each of its uses there is tiled (CSE then merges the copies).
    producers = [f"%c#{k}" for k in reversed(range(n))]
    target = "%root"
    total = 1
    for d in chain.shape:
        total *= d
    counts = forall_split(list(chain.shape), range(rows), threads) if threads > 1 and total >= min_elements else None
    if counts:
        lines.append(f"  %ft, %fl = transform.structured.tile_using_forall {target} num_threads"
                     f" [{', '.join(str(c) for c in counts)}] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)")
        fused = []
        for k, p in enumerate(producers):
            lines.append(f"  %ff{k}, %fl{k} = transform.structured.fuse_into_containing_op {p} into %fl"
                         " : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)")
            fused.append(f"%ff{k}")
        target, producers = "%ft", fused
    lines.append(f"  %t, %l:{rows} = transform.structured.tile_using_for {target} tile_sizes [{sizes}]"
                 f" : (!transform.any_op) -> (!transform.any_op, {loops})")
    for k, p in enumerate(producers):
        lines.append(f"  %fu{k}, %nl{k} = transform.structured.fuse_into_containing_op {p} into %l#0"
                     " : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)")
    # A step that cannot be done (a producer the tiling cannot fuse) ends the sequence there and
    # is suppressed: every step before it left valid IR (a producer not fused stays a pass of its
    # own), and the clean-up below still runs.
    body = "\n".join("  " + line for line in lines)
    return f"""module attributes {{transform.with_named_sequence}} {{
transform.named_sequence @__transform_main(%fn: !transform.any_op {{transform.readonly}}) {{
  transform.sequence %fn : !transform.any_op failures(suppress) {{
  ^bb0(%fn_: !transform.any_op):
{body.replace("%fn ", "%fn_ ")}
    transform.yield
  }}
  transform.apply_patterns to %fn {{
    transform.apply_patterns.canonicalization
  }} : !transform.any_op
  transform.apply_cse to %fn : !transform.any_op
  transform.yield
}}
}}"""


def _external_values(ops: Sequence[ir.Operation]) -> list[ir.Value]:
    """Values the ops (and the ops nested in them) use that none of them defines, in first-use order."""
    inside: set[ir.Operation] = set()
    for op in ops:
        op.walk(lambda o: inside.add(o) or ir.WalkResult.ADVANCE)
    seen: dict[ir.Value, None] = {}

    def defined_inside(v: ir.Value) -> bool:
        owner = v.owner
        if isinstance(owner, ir.Block):
            return owner.owner in inside
        return owner.operation in inside

    def visit(o: ir.Operation) -> ir.WalkResult:
        for v in o.operands:
            if not defined_inside(v) and v not in seen:
                seen[v] = None
        return ir.WalkResult.ADVANCE

    for op in ops:
        op.walk(visit)
    return list(seen)


def _fuse_isolated(module: ir.Module, ops: list[ir.Operation], shape: tuple[int, ...], threads: int,
                   min_elements: int, scripts: dict[str, ir.Module]) -> None:
    """Fuse one chain (``ops``: its producers and, last, its root, in program order; the list is
    emptied) in a function of its own: the ops move into a temporary private function (the
    values they read from outside become its arguments), the script runs there, and the
    resulting loop moves back to the root's place.

    Why: `fuse_into_containing_op` prints the producer and the loop into a diagnostic (kept
    only if the fusion fails), which numbers the whole enclosing function: once per fusion, so
    on a whole model quadratic (BERT-base: +14 s of compile for 37 chains); in its own function
    each chain costs a few milliseconds.
    No Python reference to a chain op survives the script, which erases them: the bindings map
    an op to its Python object by address, and a stale object found again for a new op at the
    same address crashed the process."""
    from mlir.dialects import func, ub
    from mlir.dialects.transform import interpreter

    text = _script(RowChain(ops[-1], ops[:-1], shape), threads, min_elements)
    external = _external_values(ops)
    result_type = ops[-1].results[0].type
    # The root's users keep a stand-in until the loop comes back.
    with ir.InsertionPoint(ops[-1]):
        stand_in = ub.PoisonOp(result_type).operation
    ops[-1].results[0].replace_all_uses_with(stand_in.results[0])
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp("__onnxc_row_chain", ([v.type for v in external], [result_type]), visibility="private")
    entry = fn.add_entry_block()
    to_args = dict(zip(external, entry.arguments))
    with ir.InsertionPoint(entry):
        func.ReturnOp([ops[-1].results[0]])
    ret = list(entry.operations)[-1].operation
    for op in ops:
        op.move_before(ret)
        remap_operands(op, to_args)
    del ret
    ops.clear()
    tm = scripts.get(text)
    if tm is None:
        tm = scripts[text] = ir.Module.parse(text)
    interpreter.apply_named_sequence(fn.operation, tm.body.operations[0], tm)
    from_args = dict(zip(entry.arguments, external))
    body = [o.operation for o in entry.operations]
    loop_result = body[-1].operands[0]
    for op in body[:-1]:
        op.move_before(stand_in)
        remap_operands(op, from_args)
    stand_in.results[0].replace_all_uses_with(from_args.get(loop_result, loop_result))
    stand_in.erase()
    fn.operation.erase()


def _prepare(chain: RowChain, order: dict[ir.Operation, int]) -> list[ir.Operation] | None:
    """The chain's ops in program order (root last), tagged for the script, with the unit-dim
    expansions between them folded into their readers; None when a value of the chain turns out
    to be read elsewhere (the chain is left alone)."""
    group = sorted([chain.root, *chain.ops], key=order.__getitem__)
    for op in group:
        if op.name == "linalg.generic":
            for k in range(_num_inputs(op)):
                _fold_unit_expansion(op, k)
    # The expansions the chain no longer reads go (they would keep a use of a moved op).
    for op in group[:-1]:
        for use in list(op.results[0].uses):
            user = use.owner.operation
            if user.name == "tensor.expand_shape" and not list(user.results[0].uses):
                user.erase()
    inside = set(group)
    if any(use.owner.operation not in inside for op in group[:-1] for use in op.results[0].uses):
        return None
    for op in group:
        op.attributes[_CHAIN_TAG] = ir.UnitAttr.get()
    chain.root.attributes[_ROOT_TAG] = ir.UnitAttr.get()
    return group


def fuse_row_chains(module: ir.Module, threads: int = 1, min_elements: int | None = None) -> int:
    """Tile each row chain's root by rows and fuse the chain into its loop, split over ``threads``
    when it has at least ``min_elements`` elements (`pipeline.min_threaded_elements`; None:
    OpenMP's `pipeline.MIN_THREADED_ELEMENTS`); returns the number of chains fused (see the
    module docstring)."""
    if not ROW_FUSION:
        return 0
    if min_elements is None:
        from .pipeline import MIN_THREADED_ELEMENTS as min_elements
    with module.context, ir.Location.unknown():
        chains = find_row_chains(module)
        # Program order (a pre-order walk; a chain's ops share one block), numbered once: from
        # Python, iterating a block's ops per chain costs time quadratic in the block's length.
        order = {op: i for i, op in enumerate(collect_ops(module.operation, lambda o: o.name.startswith("linalg.")))} if chains else {}
        prepared = [(_prepare(chain, order), chain.shape) for chain in chains]
        # No reference to an op the scripts erase may outlive them (`_fuse_isolated`): only
        # `members` holds the chains' ops, and each list is emptied as its chain is fused.
        members = [group for group, _ in prepared if group is not None]
        shapes = [shape for group, shape in prepared if group is not None]
        del chains, order, prepared
        scripts: dict[str, ir.Module] = {}
        for i in range(len(members)):
            ops, members[i] = members[i], []
            try:
                _fuse_isolated(module, ops, shapes[i], threads, min_elements, scripts)
            except ir.MLIRError as e:
                from .pipeline import CpuPipelineError

                raise CpuPipelineError(f"CPU pipeline: row fusion failed: {e}") from None
        if members:
            from .pipeline import _strip_tags

            _strip_tags(module, _ROOT_TAG)
            _strip_tags(module, _CHAIN_TAG)
    return len(members)
