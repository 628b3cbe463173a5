"""Outline a long function into private functions of a few dozen ops each, before bufferization.

What: ``outline_functions(module, max_ops=...)`` splits the single-block body of every function
with more than ``2 * max_ops`` top-level ops that have regions (tiled ``scf.for`` nests, linalg
ops: the units of work after vectorization) into consecutive groups of about ``max_ops`` such ops.
Each group becomes a private ``func.func @<name>__part<i>`` whose arguments are the values it
reads from earlier groups (or the function's arguments) and whose results are the values later
groups (or the return) read; the original body calls the parts in order. Constant-like ops (no
operands, no regions: ``arith.constant`` weights, static ``tensor.empty``, ``ub.poison``) are
cloned into each part that uses them instead of being passed (a ``dense_resource`` clone shares
its blob; bufferization turns it into one ``memref.global``), so a part's destinations stay local
to it and ``eliminate-empty-tensors`` still sees them.

Why: ``eliminate-empty-tensors`` and ``one-shot-bufferize`` grow quadratically with the size of
one function (a chain of 128 layers took 12 s + 7 s, 32 layers 0.3 s each), and a whole model
lowered to one function is such a chain; the parts are bounded, so their cost adds up linearly.
One call per part costs nothing measurable at run time. The parts carry
``passthrough = ["noinline"]`` (``convert-func-to-llvm`` keeps it; ``func.func``'s own
``no_inline`` is dropped there) so LLVM does not inline them back into one function, whose
optimisation is superlinear too.

The pass only moves ops; it never changes what is computed, and it leaves functions with several
blocks (unstructured control flow) alone.
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import func

__all__ = ["DEFAULT_MAX_OPS", "OutlineStats", "outline_function", "outline_functions"]

#: Region-holding ops per part: the GUIDE's measurement (32 chained layers bufferize in 0.3 s)
#: makes a few dozen cheap, and the number of parts (calls) stays small.
DEFAULT_MAX_OPS = 32

#: Ops that are cloned into every part that uses them rather than passed as arguments.
_CLONEABLE = frozenset({"arith.constant", "tensor.empty", "ub.poison", "bufferization.alloc_tensor"})


@dataclasses.dataclass(frozen=True)
class OutlineStats:
    """What ``outline_functions`` did: functions split and parts created."""

    functions: int = 0
    parts: int = 0


def _is_cloneable(op: ir.Operation) -> bool:
    return op.name in _CLONEABLE and not len(op.operands) and not len(op.regions) and len(op.results) == 1


def _top_level_index(op: ir.Operation, body: ir.Block, index: dict[ir.Operation, int]) -> int | None:
    """Position in ``body`` of the top-level op that contains ``op`` (None: not in ``body``)."""
    while True:
        if op in index:
            return index[op]
        parent = op.parent
        if parent is None or parent.name == "builtin.module":
            return None
        op = parent


def _symbol(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def outline_function(fn: ir.Operation, max_ops: int = DEFAULT_MAX_OPS) -> int:
    """Split ``fn`` (a ``func.func``) into parts of about ``max_ops`` region ops; returns the
    number of parts created (0 when ``fn`` is small or has several blocks)."""
    if max_ops < 1:
        raise ValueError(f"outline: max_ops must be at least 1, got {max_ops}")
    if len(fn.regions) != 1 or len(fn.regions[0].blocks) != 1:
        return 0
    body = fn.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    if not ops:
        return 0
    terminator, ops = ops[-1], ops[:-1]
    heavy = [len(op.regions) > 0 for op in ops]
    if sum(heavy) <= 2 * max_ops:
        return 0

    # Group assignment: consecutive ops, a new group after every `max_ops` region ops; cloneable
    # ops belong to no group (-1) and stay in the caller.
    group_of: list[int] = []
    group, count = 0, 0
    for op, h in zip(ops, heavy):
        if _is_cloneable(op):
            group_of.append(-1)
            continue
        if h and count == max_ops:
            group, count = group + 1, 0
        count += h
        group_of.append(group)
    n_groups = group + 1
    if n_groups < 2:
        return 0
    index = {op: i for i, op in enumerate(ops)}
    index[terminator] = len(ops)
    group_of.append(n_groups)  # the terminator: "after every group"

    # Which values cross a group boundary, and every use to rewrite. A value's group is its
    # defining top-level op's (-1 for function arguments and cloneable ops).
    inputs: list[list[ir.Value]] = [[] for _ in range(n_groups)]
    input_pos: list[dict[ir.Value, int]] = [{} for _ in range(n_groups)]
    clones: list[list[ir.Operation]] = [[] for _ in range(n_groups)]
    clone_pos: list[dict[ir.Operation, int]] = [{} for _ in range(n_groups)]
    outputs: list[list[ir.Value]] = [[] for _ in range(n_groups)]
    output_pos: list[dict[ir.Value, int]] = [{} for _ in range(n_groups)]
    rewrites: list[tuple[ir.Operation, int, ir.Value, int]] = []  # (user, operand, value, user group)

    def scan(value: ir.Value, def_group: int, cloned_from: ir.Operation | None) -> None:
        for use in value.uses:
            user = use.owner.operation
            pos = _top_level_index(user, body, index)
            if pos is None:
                continue
            g = group_of[pos]
            if g == def_group or g == -1:
                continue
            if g < n_groups:
                if cloned_from is not None:
                    if cloned_from not in clone_pos[g]:
                        clone_pos[g][cloned_from] = len(clones[g])
                        clones[g].append(cloned_from)
                elif value not in input_pos[g]:
                    input_pos[g][value] = len(inputs[g])
                    inputs[g].append(value)
            if def_group >= 0 and value not in output_pos[def_group]:
                output_pos[def_group][value] = len(outputs[def_group])
                outputs[def_group].append(value)
            rewrites.append((user, use.operand_number, value, g))

    for arg in body.arguments:
        scan(arg, -1, None)
    for op, g in zip(ops, group_of):
        for r in op.results:
            scan(r, g, op if g == -1 else None)

    name = _symbol(fn)
    members: list[list[ir.Operation]] = [[] for _ in range(n_groups)]
    for op, g in zip(ops, group_of):
        if g >= 0:
            members[g].append(op)
    # In each part: group inputs -> block arguments, cloned constants -> their clones; in the
    # caller: group outputs -> call results.
    in_part: list[dict[ir.Value, ir.Value]] = [{} for _ in range(n_groups)]
    in_caller: dict[ir.Value, ir.Value] = {}
    noinline = ir.ArrayAttr.get([ir.StringAttr.get("noinline", fn.context)], fn.context)
    for g in range(n_groups):
        arg_types = [v.type for v in inputs[g]]
        res_types = [v.type for v in outputs[g]]
        with fn.location, ir.InsertionPoint(fn):
            part = func.FuncOp(f"{name}__part{g}", ir.FunctionType.get(arg_types, res_types), visibility="private")
        part.operation.attributes["passthrough"] = noinline
        with fn.location:
            block = part.add_entry_block()
        for v, a in zip(inputs[g], block.arguments):
            in_part[g][v] = a
        with fn.location, ir.InsertionPoint(block):
            for c in clones[g]:
                in_part[g][c.results[0]] = c.clone().results[0]
            ret = func.ReturnOp(list(outputs[g]))
        # The call goes where the group's last op was: after every value it reads (earlier
        # groups' calls, arguments), before every reader of its results.
        anchor = _next_op(members[g][-1], ops, index, terminator)
        with members[g][-1].location, ir.InsertionPoint(anchor):
            call = func.CallOp(res_types, ir.FlatSymbolRefAttr.get(part.name.value), [in_caller.get(v, v) for v in inputs[g]])
        for v, r in zip(outputs[g], call.results):
            in_caller[v] = r
        for op in members[g]:
            op.move_before(ret.operation)
    for user, operand, value, g in rewrites:
        if g < n_groups:
            user.operands[operand] = in_part[g][value]
        else:
            user.operands[operand] = in_caller.get(value, value)
    # Cloneables whose every user now reads a clone are dead in the caller.
    for op, g in zip(ops, group_of):
        if g == -1 and all(not list(r.uses) for r in op.results):
            op.erase()
    return n_groups


def _next_op(op: ir.Operation, ops: list[ir.Operation], index: dict[ir.Operation, int], terminator: ir.Operation) -> ir.Operation:
    """The op after ``op`` in the original body (the terminator after the last)."""
    i = index[op] + 1
    return ops[i] if i < len(ops) else terminator


def outline_functions(module: ir.Module, max_ops: int = DEFAULT_MAX_OPS) -> OutlineStats:
    """Outline every long function of ``module`` (see the module docstring)."""
    funcs = [op.operation for op in module.body.operations if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)]
    split, parts = 0, 0
    for fn in funcs:
        n = outline_function(fn, max_ops)
        if n:
            split += 1
            parts += n
    return OutlineStats(split, parts)
