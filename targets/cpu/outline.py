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
A function with dynamic shapes is cut in shorter parts
(``DYNAMIC_MAX_OPS``): there a part's cost is how far the value-bounds analysis follows each
dynamic size back, which the part's arguments stop. One call per part costs nothing measurable
at run time. The parts carry
``passthrough = ["noinline"]`` (``convert-func-to-llvm`` keeps it; ``func.func``'s own
``no_inline`` is dropped there) so LLVM does not inline them back into one function, whose
optimisation is superlinear too.

Repeated layers (``dedupe=True``, what ``pipeline.bufferize`` uses): a transformer's twelve
layers lower to twelve copies of the same code on other weights. Before grouping,
``unshare_generators`` gives each user of a shared constant fill its own; the groups are then
cut at the same offset in every repetition of the longest repeated run of ops
(``_periodic_starts``, found from a digest per op), views of the weights join their users'
group, and constants of more than ``LIFT_ELEMENTS`` elements stay in the caller and are passed
in, so repetitions become equal functions, which ``dedupe_parts`` merges. LLVM then optimises
and generates code for one layer: BERT-base's compile went from 45 s to 11 s with the external
weights of ``weights.py`` (``onnxc bench --compile-stages``), and its run time did not grow.

Where it runs: ``pipeline.tile_and_vectorize`` outlines a function with fused convolutions before
tiling, with ``bonds`` (a convolution, its initializer and the consumer it is tiled with stay in
one part), because tiling with fusion costs time proportional to the enclosing function per
fusion; ``pipeline.bufferize`` outlines whatever is still long after tiling.

The pass only moves ops (and clones constant fills); it never changes what is computed, and it
leaves functions with several blocks (unstructured control flow) alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import func

__all__ = ["DEFAULT_MAX_OPS", "DYNAMIC_MAX_OPS", "has_dynamic_shapes", "LIFT_ELEMENTS", "MIN_PERIOD", "OutlineStats", "dedupe_parts", "outline_function", "outline_functions", "unshare_empties", "unshare_generators"]

#: Region-holding ops per part: the GUIDE's measurement (32 chained layers bufferize in 0.3 s)
#: makes a few dozen cheap, and the number of parts (calls) stays small.
DEFAULT_MAX_OPS = 32

#: Region-holding ops per part in a function with dynamic shapes. There the cost of a part is
#: not its length but how far back `ValueBoundsConstraintSet` follows a size: bufferization's
#: subset comparisons (`eliminate-empty-tensors`, one-shot analysis) and the subset hoisting
#: populate every dynamic offset and size back through `tensor.dim` of earlier loop results and
#: `arith.select` chains of broadcast sizes, comparing both operands of each select and both
#: branches of each `scf.if` (a guarded cast) -- exponential in their nesting -- up to the part's
#: arguments, where it stops. FlexAttention (fp16) with every input dim symbolic: 17 loop nests
#: and 41 checks in one function (under 2 x 32 region ops, so not split) compiled in 150 s;
#: in parts of 8, 2.7 s (compile fuzzer seed 402, cases 10683, 47952).
DYNAMIC_MAX_OPS = 8

#: Constants with more elements than this are passed to parts as arguments when deduplicating:
#: every non-splat tensor (a layer's bias of 32 values differs from the next layer's as much as
#: its weights do); scalars and splats are cloned into the parts.
LIFT_ELEMENTS = 1

#: Ops that are cloned into every part that uses them rather than passed as arguments.
_CLONEABLE = frozenset({"arith.constant", "tensor.empty", "ub.poison", "bufferization.alloc_tensor"})

#: Ops whose result is a view of their first operand, rebuilt in the caller rather than returned.
_VIEW_OPS = frozenset({"tensor.expand_shape", "tensor.collapse_shape", "tensor.cast"})


@dataclasses.dataclass(frozen=True)
class OutlineStats:
    """What ``outline_functions`` did: functions split and parts created."""

    functions: int = 0
    parts: int = 0
    merged: int = 0


def _is_cloneable(op: ir.Operation) -> bool:
    return op.name in _CLONEABLE and not len(op.operands) and not len(op.regions) and len(op.results) == 1


def _is_lifted(op: ir.Operation, lift_elements: int | None) -> bool:
    """A constant tensor of more than ``lift_elements`` elements that is not a splat: passed to
    the parts as an argument instead of cloned, so parts that differ only in their weights are
    the same function (see ``dedupe_parts``). Splats and small constants stay cloned: they are
    cheap to repeat, and folding may still use their values."""
    if lift_elements is None or op.name != "arith.constant" or not isinstance(op.results[0].type, ir.RankedTensorType):
        return False
    value = op.attributes["value"]
    if isinstance(value, ir.DenseElementsAttr) and value.is_splat:
        return False
    t = ir.RankedTensorType(op.results[0].type)
    return t.has_static_shape and math.prod(t.shape) > lift_elements


def _top_level_index(op: ir.Operation, body: ir.Block, index: dict[ir.Operation, int]) -> int | None:
    """Position in ``body`` of the top-level op that contains ``op`` (None: not in ``body``)."""
    while True:
        if op in index:
            return index[op]
        parent = op.parent
        if parent is None or parent.name == "builtin.module":
            return None
        op = parent


#: Any SSA name of the custom form: numbered (``%12``, ``%arg3``) or suggested by the op
#: (``%cst_12``, ``%c0``, ``%in``), all renumbered per op.
_SSA_NAME = re.compile(r"%[A-Za-z0-9_.$-]+")
#: An op of the function's body: a line indented by exactly two spaces that starts with its
#: results, a quoted (generic) op name or a dialect's name; region ends (``}``) and block labels
#: (``^bb``) of nested regions print at the same indentation and are not ops.
_TOP_LEVEL_OP = re.compile(r'^  [%"a-z]', re.MULTILINE)


def _op_keys(fn: ir.Operation, ops: list[ir.Operation]) -> list[str] | None:
    """A digest per op of ``fn``'s body (``ops``, its ops in order, terminator included): equal
    digests mark the same computation (ops, types, attributes and how values flow between them),
    possibly on other data. Only used to find repetitions; ``dedupe_parts`` compares the parts
    themselves, so an unequal pair with equal digests costs a missed merge, never a wrong one.
    None when the printed function cannot be split into one text per op.

    Why the function is printed once and split: printing one nested op numbers the values of
    its whole function first (10 ms per op of BERT-base's body, 2 s in all; the whole function
    prints in 0.4 s). Each op of the body starts a line indented by two spaces
    (``_TOP_LEVEL_OP``); the names are renumbered in order of first appearance per op, since one
    layer's ops print ``%4120`` where the next's print ``%4302``. The text is hashed, never
    parsed. The custom form, not the generic one: half the text, printed in 0.23 instead of
    0.39 s for BERT-base; both gave the same partition of the ops into equal digests on BERT,
    GPT-2 (prefill and decode), ViT, Llama, ResNet-50 and MobileNetV2."""
    text = fn.get_asm(large_elements_limit=16, assume_verified=True)
    starts = [m.start() for m in _TOP_LEVEL_OP.finditer(text)]
    if len(starts) != len(ops):
        return None
    keys = []
    for begin, end in zip(starts, [*starts[1:], len(text)]):
        names: dict[str, str] = {}
        chunk = _SSA_NAME.sub(lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), text[begin:end])
        keys.append(hashlib.sha256(chunk.encode()).hexdigest())
    return keys


#: Shortest repetition worth cutting at (in region ops): shorter runs (a pair of elementwise ops
#: repeated) are not layers, and cutting at them would make many tiny parts.
MIN_PERIOD = 4


def _find_period(keys: list[str], lo: int, hi: int) -> tuple[int, int, int] | None:
    """The repetition covering most of ``keys[lo:hi]``: (start, period, repeats) with at least
    two repeats of at least ``MIN_PERIOD`` keys, the shortest period among equal coverage."""
    best: tuple[int, int, int] | None = None
    covered = 0
    for p in range(MIN_PERIOD, (hi - lo) // 2 + 1):
        run_start, run = lo, 0
        for i in range(lo, hi - p + 1):
            if i < hi - p and keys[i] == keys[i + p]:
                if run == 0:
                    run_start = i
                run += 1
                continue
            # a run of `run` matches: keys[run_start : run_start + run + p] repeat with period p
            repeats = (run + p) // p
            if run and repeats >= 2 and repeats * p > covered:
                best, covered = (run_start, p, repeats), repeats * p
            run = 0
    return best


def _periodic_starts(keys: list[str], max_ops: int) -> set[int]:
    """Where groups start (indices into ``keys``, one per region op): each repetition of the
    longest-covering repeated run is cut into groups of at most ``max_ops`` at the same offsets,
    and the stretches before and after it are handled alike, recursively; stretches without
    repetition are cut every ``max_ops``."""
    starts: set[int] = set()

    def chunk(lo: int, hi: int) -> None:
        starts.update(range(lo, hi, max_ops))

    def cover(lo: int, hi: int) -> None:
        if hi <= lo:
            return
        found = _find_period(keys, lo, hi) if hi - lo >= 2 * MIN_PERIOD else None
        if found is None:
            chunk(lo, hi)
            return
        start, period, repeats = found
        cover(lo, start)
        pieces = -(-period // max_ops)
        offsets = [round(k * period / pieces) for k in range(pieces)]
        for r in range(repeats):
            starts.update(start + r * period + off for off in offsets)
        cover(start + repeats * period, hi)

    cover(0, len(keys))
    return starts


def _caller_resident(v: ir.Value, group_of: list[int], index: dict[ir.Operation, int], body: ir.Block) -> bool:
    """Whether ``v`` is an argument of the function or the result of a constant that stays in
    (or is cloned from) the caller."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return owner == body
    pos = index.get(owner.operation)
    return pos is not None and group_of[pos] < 0


def _light_ops_join_users(ops: list[ir.Operation], heavy: list[bool], group_of: list[int], body: ir.Block) -> None:
    """Move each op without regions (a reshape, a cast of a weight) into the group of its first
    user, last ops first so that chains follow their ends.

    Why: a light op placed by position can land in the group before its user's; that group then
    returns the op's result, and a returned view of an argument (the reshaped weight of the
    next layer's matmul) is copied at every call by bufferization. Beside its user it stays a
    view."""
    index = {op: i for i, op in enumerate(ops)}
    for i in range(len(ops) - 1, -1, -1):
        if heavy[i] or group_of[i] < 0:
            continue
        # Only views of values the caller holds (weights, arguments): moving an op that reads
        # another group's result (a dim of a dynamic tensor, a reshape of an activation) gave
        # wrong answers with dynamic shapes (a YOLO head with a dynamic batch).
        if not all(_caller_resident(v, group_of, index, body) for v in ops[i].operands):
            continue
        users = [
            group_of[pos]
            for r in ops[i].results
            for use in r.uses
            if (pos := _top_level_index(use.owner.operation, body, index)) is not None and group_of[pos] >= 0
        ]
        if users:
            group_of[i] = min(users)


def _captures_only_constants(op: ir.Operation) -> bool:
    """Whether ``op`` reads nothing but cloneable constants from outside itself (its operands and
    the values its nested ops use from above)."""
    inside: set[ir.Operation] = set()

    def visit(nested: ir.Operation) -> ir.WalkResult:
        inside.add(nested)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    for nested in inside:
        for v in nested.operands:
            owner = v.owner
            if isinstance(owner, ir.Block):
                block_op = owner.owner
                if block_op is None or block_op.operation not in inside:
                    return False
                continue
            owner = owner.operation
            if owner not in inside and not _is_cloneable(owner):
                return False
    return True


#: Loops whose operands (iter_args, shared_outs; their bounds are not tensors) are destinations.
_LOOP_DESTINATION_USERS = frozenset({"scf.for", "scf.forall"})


def _is_destination_use(user: ir.Operation, operand: int) -> bool:
    """Whether ``user`` writes into its operand ``operand``: a loop's iter_args/shared_outs (a
    tiled op), or the init of a linalg op (before tiling: the matmul accumulating into a fill)."""
    if user.name in _LOOP_DESTINATION_USERS:
        return True
    if user.name.startswith("linalg."):
        inputs = getattr(user.opview, "inputs", None)
        return inputs is not None and operand >= len(inputs)
    return False


def unshare_generators(fn: ir.Operation) -> int:
    """Give each user of a generator its own copy: a region op of ``fn``'s body that reads only
    constants (a zero fill of a matmul's accumulator, after vectorization a loop nest writing a
    constant vector) and whose result has several users is cloned before each user but the first;
    returns the number of clones.

    Why: CSE merges the twelve identical fills of twelve layers into one; each matmul then
    accumulates in place into it, so bufferization copies the shared buffer before every matmul
    (read and write) where a fill of its own only writes. Outlined into parts, the shared fill
    also crosses every part boundary."""
    if len(fn.regions) != 1 or len(fn.regions[0].blocks) != 1:
        return 0
    body = fn.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    index = {op: i for i, op in enumerate(ops)}
    clones = 0
    for op in ops:
        if not len(op.regions) or len(op.results) != 1:
            continue
        uses = [(u.owner.operation, u.operand_number) for u in op.results[0].uses]
        if len(uses) < 2 or not _captures_only_constants(op):
            continue
        # Only loops' destinations (a tiled contraction accumulating into the fill) are given
        # their own copy. A zero tensor that a pad inserts into or that slices read from stays
        # shared: cloning those (ShuffleNet's padded inputs) made LLVM's code generation of the
        # model 3x slower (24 s -> 72 s) for no run-time gain.
        uses = [(user, operand) for user, operand in uses if _is_destination_use(user, operand)]
        for user, operand in uses[1:]:
            pos = _top_level_index(user, body, index)
            if pos is None:
                continue
            copy = op.clone(ip=ir.InsertionPoint(ops[pos]))
            user.operands[operand] = copy.results[0]
            clones += 1
    return clones


def unshare_empties(body: ir.Block) -> int:
    """Give every top-level user of a ``tensor.empty`` with dynamic sizes, or of a view
    (``_VIEW_OPS``: expand/collapse_shape, cast) of any ``tensor.empty``, its own copy of the
    empty and of the views up to the value it uses, placed right before that user; returns the
    number of copies.

    Why: static ``tensor.empty`` ops are cloned into each part (``_CLONEABLE``), but one with
    size operands, or a view of one, is an ordinary op of some group, so a shared one (CSE merges
    the empties of equal-shaped destinations: the q and k head transposes of an attention)
    crossed a part boundary: the part that fills it in place returned both its result and the
    empty itself, i.e. two aliases of one buffer (bufferization sees no conflict: an empty's
    contents are undefined), and the next part wrote its own destination into the second alias,
    overwriting the first part's result. A Whisper encoder with dynamic batch/frames returned the
    k heads in place of the q heads; SoftmaxCrossEntropyLoss with ignore_index and every dim
    symbolic (compile fuzzer seed 403 case 2370) shared an ``expand_shape`` of an empty between
    a reduction's destination and a later loop's, and returned a wrong loss. A copy per user
    joins its user's group, and only its index sizes cross."""
    ops = [op.operation for op in body.operations]
    index = {op: i for i, op in enumerate(ops)}
    copies = 0
    erased: set[int] = set()  # positions of views erased below: their ops are never touched again
    for position, op in enumerate(ops):
        if position in erased or op.name != "tensor.empty":
            continue
        dynamic = len(op.operands) > 0
        # (user, operand number, path from the empty to the value used, user's top-level position)
        consumers: list[tuple[ir.Operation, int, list[ir.Operation], int]] = []
        views: list[ir.Operation] = []
        stack = [[op]]
        while stack:
            path = stack.pop()
            for use in list(path[-1].results[0].uses):
                user = use.owner.operation
                if user.name in _VIEW_OPS and use.operand_number == 0 and user in index:
                    views.append(user)
                    stack.append(path + [user])
                    continue
                if len(path) == 1 and not dynamic:
                    continue  # a static empty used directly: cloned into each part anyway
                pos = _top_level_index(user, body, index)
                if pos is not None:
                    consumers.append((user, use.operand_number, path, pos))
        for user, number, path, pos in consumers:
            value: ir.Value | None = None
            for original in path:
                copy = original.clone(ip=ir.InsertionPoint(ops[pos]))
                if value is not None:
                    copy.operands[0] = value
                value = copy.results[0]
            assert value is not None
            user.operands[number] = value
            copies += 1
        for view in reversed(views):  # users before what they view
            if not list(view.results[0].uses):
                erased.add(index.pop(view))  # out of `index` too: a clone may reuse its address
                view.erase()
        if consumers and not list(op.results[0].uses):
            index.pop(op)
            op.erase()
    return copies


def _symbol(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


#: A use of a value in a function's body: (position of the top-level op holding the user, user,
#: operand number).
_Use = tuple[int, ir.Operation, int]


def _sink_bonded_producers(body: ir.Block, bonds: Sequence[tuple[ir.Operation, ir.Operation]]) -> None:
    """Move each bonded producer of ``body`` (the first op of a bond, when it comes first) to
    just before its first user, latest producers first, so a chain (initializer, convolution,
    consumer) ends up adjacent. Why: an initializer fill sits where canonicalization left it,
    often near the top of the function, and a bond from there to its convolution would keep
    every group between them from starting (one part of 93 region ops in ResNet-50). Valid: its
    operands are defined before its old place, its users all come at or after its first one."""
    if not bonds:
        return
    index = {op.operation: i for i, op in enumerate(body.operations)}
    producers = sorted({a for a, b in bonds if a in index and b in index and index[a] < index[b]}, key=index.__getitem__, reverse=True)
    for producer in producers:
        users = [pos for r in producer.results for use in r.uses if (pos := _top_level_index(use.owner.operation, body, index)) is not None]
        if not users:
            continue
        first = min(users)
        ops = list(body.operations)
        target = ops[first].operation
        if target != producer:
            producer.move_before(target)
            index = {op.operation: i for i, op in enumerate(body.operations)}


def _keep_bonds_together(starts: set[int], ops: list[ir.Operation], heavy: list[bool], bonds: Sequence[tuple[ir.Operation, ir.Operation]]) -> set[int]:
    """``starts`` (region-op indices where a group begins) without the ones that would separate
    the two ops of a bond. An op without regions counts as the next region op, whose group it
    joins."""
    if not bonds:
        return starts
    heavy_index: dict[ir.Operation, int] = {}
    pending: list[ir.Operation] = []
    seen = 0
    for op, h in zip(ops, heavy):
        pending.append(op)
        if h:
            for o in pending:
                heavy_index[o] = seen
            pending.clear()
            seen += 1
    for o in pending:
        heavy_index[o] = max(seen - 1, 0)
    kept = set(starts)
    for a, b in bonds:
        ia, ib = heavy_index.get(a), heavy_index.get(b)
        if ia is None or ib is None:
            continue  # not top-level ops of this function
        lo, hi = min(ia, ib), max(ia, ib)
        kept.difference_update(range(lo + 1, hi + 1))
    return kept


def outline_function(fn: ir.Operation, max_ops: int = DEFAULT_MAX_OPS, *, lift_elements: int | None = None, periodic: bool = False,
                     bonds: Sequence[tuple[ir.Operation, ir.Operation]] = ()) -> int:
    """Split ``fn`` (a ``func.func``) into parts of at most ``max_ops`` region ops; returns the
    number of parts created (0 when ``fn`` has at most ``2 * max_ops`` region ops, or several
    blocks). Constants of more than ``lift_elements`` elements (None: none) stay in ``fn`` and are
    passed to the parts that read them. With ``periodic``, runs of repeated ops (layers) are cut
    at the same place in each repetition (``_periodic_starts``), so their parts are equal.
    ``bonds`` are pairs of top-level ops that must land in the same part (a convolution and the
    consumer it is tiled with, ``pipeline.fusion_bonds``): no group starts between them, so a
    part may hold more than ``max_ops`` region ops."""
    if max_ops < 1:
        raise ValueError(f"outline: max_ops must be at least 1, got {max_ops}")
    if len(fn.regions) != 1 or len(fn.regions[0].blocks) != 1:
        return 0
    body = fn.regions[0].blocks[0]
    _sink_bonded_producers(body, bonds)
    ops = [op.operation for op in body.operations]
    if not ops:
        return 0
    terminator, ops = ops[-1], ops[:-1]
    heavy = [len(op.regions) > 0 for op in ops]
    if sum(heavy) <= 2 * max_ops:
        return 0
    if unshare_empties(body):
        ops = [op.operation for op in body.operations][:-1]
        heavy = [len(op.regions) > 0 for op in ops]

    # Group assignment: consecutive ops, a new group after every `max_ops` region ops; cloneable
    # ops belong to no group (-1) and stay in the caller; lifted constants (-2) stay there too
    # and are passed like function arguments.
    # Region ops start a new group where `starts` says (every `max_ops`-th, or the boundaries of
    # repeated runs with `periodic`); an op without regions joins the group of the next region op
    # (it prepares that op's operands: a reshape, a cast), the last group after the last one.
    n_heavy = sum(heavy)
    keys = _op_keys(fn, [*ops, terminator]) if periodic else None
    if keys is not None:
        starts = _periodic_starts([k for k, h in zip(keys, heavy) if h], max_ops)
    else:
        starts = set(range(0, n_heavy, max_ops))
    starts = _keep_bonds_together(starts, ops, heavy, bonds)
    group_of: list[int] = []
    pending: list[int] = []  # positions in group_of of light ops waiting for the next region op
    group, seen = -1, 0
    for op, h in zip(ops, heavy):
        if _is_lifted(op, lift_elements):
            group_of.append(-2)
            continue
        if _is_cloneable(op):
            group_of.append(-1)
            continue
        if not h:
            pending.append(len(group_of))
            group_of.append(-3)
            continue
        if seen in starts:
            group += 1
        seen += 1
        for i in pending:
            group_of[i] = group
        pending.clear()
        group_of.append(group)
    for i in pending:
        group_of[i] = max(group, 0)
    n_groups = group + 1
    if periodic:
        _light_ops_join_users(ops, heavy, group_of, body)
    if n_groups < 2:
        return 0
    index = {op: i for i, op in enumerate(ops)}
    index[terminator] = len(ops)
    group_of.append(n_groups)  # the terminator: "after every group"

    # Which values cross a group boundary, and every use to rewrite. A value's group is its
    # defining top-level op's (-1 for function arguments and cloneable ops).
    walk_order: dict[int, dict[ir.Operation, int]] = {}  # `_use_key`'s cache
    outputs: list[list[ir.Value]] = [[] for _ in range(n_groups)]
    output_pos: list[dict[ir.Value, int]] = [{} for _ in range(n_groups)]
    rewrites: list[tuple[ir.Operation, int, ir.Value, int]] = []  # (user, operand, value, user group)
    # Each group's inputs (values passed in) and clones (cloneable ops copied in), with the
    # first use in the group of each: (top-level position, user, operand).
    first_input: list[dict[ir.Value, _Use]] = [{} for _ in range(n_groups)]
    first_clone: list[dict[ir.Operation, _Use]] = [{} for _ in range(n_groups)]

    def earlier(known: _Use | None, use: _Use) -> _Use:
        if known is None or use[0] < known[0]:
            return use
        if use[0] > known[0]:
            return known
        return min(known, use, key=lambda u: _use_key(u, ops, walk_order))

    def scan(value: ir.Value, def_group: int, cloned_from: ir.Operation | None) -> None:
        for use in value.uses:
            user = use.owner.operation
            pos = _top_level_index(user, body, index)
            if pos is None:
                continue
            g = group_of[pos]
            if g == def_group or g < 0:
                continue
            if g < n_groups:
                here = (pos, user, use.operand_number)
                if cloned_from is not None:
                    first_clone[g][cloned_from] = earlier(first_clone[g].get(cloned_from), here)
                else:
                    first_input[g][value] = earlier(first_input[g].get(value), here)
            if def_group >= 0 and value not in output_pos[def_group]:
                output_pos[def_group][value] = len(outputs[def_group])
                outputs[def_group].append(value)
            rewrites.append((user, use.operand_number, value, g))

    for arg in body.arguments:
        scan(arg, -1, None)
    for op, g in zip(ops, group_of):
        for r in op.results:
            scan(r, g, op if g == -1 else None)

    # Arguments and clones in the order the group first uses them, not the order the caller
    # defines them: two repetitions of a layer read the same values in the same order, while
    # the caller may define them in another (a residual block's input and its shortcut come
    # from earlier parts in either order), which made equal layers differ and not merge.
    inputs = [sorted(first, key=lambda v, first=first: _use_key(first[v], ops, walk_order)) for first in first_input]
    clones = [sorted(first, key=lambda c, first=first: _use_key(first[c], ops, walk_order)) for first in first_clone]

    views = [_return_view_roots(outputs[g], g, group_of, index) for g in range(n_groups)]

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
        # The views the part would have returned beside their source: rebuilt on its result.
        with members[g][-1].location, ir.InsertionPoint(anchor):
            for view, chain in views[g]:
                source = chain[0].operands[0]
                value = in_caller.get(source, source)
                for op in chain:
                    copy = op.clone()
                    copy.operands[0] = value
                    value = copy.results[0]
                in_caller[view] = value
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




def _use_key(use: _Use, ops: list[ir.Operation], walk_order: dict[int, dict[ir.Operation, int]]) -> tuple[int, int, int]:
    """Where a use (top-level position, user, operand number) comes in its function: the
    top-level op, then the user's place in that op's pre-order walk (computed once per top-level
    op, and only for ties: nested users of one loop nest), then the operand."""
    pos, user, operand = use
    if user == ops[pos]:
        return (pos, 0, operand)
    order = walk_order.get(pos)
    if order is None:
        order = {}

        def number(op: ir.Operation) -> ir.WalkResult:
            order[op] = len(order)
            return ir.WalkResult.ADVANCE

        ops[pos].walk(number, ir.WalkOrder.PRE_ORDER)
        walk_order[pos] = order
    return (pos, order[user], operand)


def _return_view_roots(outputs: list[ir.Value], g: int, group_of: list[int],
                       index: dict[ir.Operation, int]) -> list[tuple[ir.Value, list[ir.Operation]]]:
    """Replace, in group ``g``'s ``outputs`` (in place), each result of a chain of static view ops
    of the group (reshapes, casts) by the chain's source; returns (view, chain from the source)
    for the caller to rebuild the view on the returned source.

    Why: a part that returned a tensor and a reshape of it (ShuffleNet: a Relu's result and its
    [pixels, group, channels] view, read by a packed grouped convolution) returned two memrefs of
    one buffer after bufferization, each owned by the caller: the deallocation pass freed the
    buffer after the last use of one while the other was still read (the AveragePool beside the
    convolution read freed memory: a wrong answer). One returned buffer and a view of it built in
    the caller alias visibly."""
    def view_chain(v: ir.Value) -> list[ir.Operation]:
        chain: list[ir.Operation] = []
        while isinstance(v, ir.OpResult):
            op = v.owner.operation
            pos = index.get(op)
            if op.name not in _VIEW_OPS or pos is None or group_of[pos] != g or len(op.operands) != 1:
                break
            chain.insert(0, op)
            v = op.operands[0]
        return chain

    found: list[tuple[ir.Value, list[ir.Operation]]] = []
    kept: list[ir.Value] = []
    for v in outputs:
        chain = view_chain(v)
        if chain:
            found.append((v, chain))
            v = chain[0].operands[0]
            if isinstance(v, ir.BlockArgument) or group_of[index[v.owner.operation]] != g:
                continue  # a view of the group's input: the caller holds the source already
        if v not in kept:
            kept.append(v)
    outputs[:] = kept
    return found


def _next_op(op: ir.Operation, ops: list[ir.Operation], index: dict[ir.Operation, int], terminator: ir.Operation) -> ir.Operation:
    """The op after ``op`` in the original body (the terminator after the last)."""
    i = index[op] + 1
    return ops[i] if i < len(ops) else terminator


def _structure_key(part: ir.Operation) -> str:
    """A digest of ``part``'s IR with its name taken out: equal digests mean the two functions'
    printed forms are equal, i.e. the same ops, types, attributes and value flow.

    Why printed IR: the Python bindings expose no structural equivalence (C++'s
    ``OperationEquivalence``); the printer is deterministic (values are numbered in order, debug
    locations are not printed), and its output is hashed, never parsed back. Large constants are
    arguments by then (``_is_lifted``), so the text stays small; a ``dense_resource`` prints its
    blob's key, which is unique per blob, so two parts never compare equal on different weights."""
    name = part.attributes["sym_name"]
    part.attributes["sym_name"] = ir.StringAttr.get("__onnxc_part", part.context)
    try:
        text = part.get_asm(print_generic_op_form=True, use_local_scope=True, assume_verified=True)
    finally:
        part.attributes["sym_name"] = name
    return hashlib.sha256(text.encode()).hexdigest()


def dedupe_parts(module: ir.Module, parts: list[ir.Operation]) -> int:
    """Replace calls of each part in ``parts`` by calls of the first structurally equal one and
    erase the copies; returns how many parts were erased.

    Why: a transformer's layers (and a CNN's repeated blocks) lower to the same code with other
    weights; once the weights are arguments the parts are equal, and LLVM optimizes and
    generates machine code for one copy instead of twelve. This is most of the compile time of
    a deep model (BERT-base's twelve layers)."""
    first: dict[str, str] = {}
    alias: dict[str, str] = {}
    for part in parts:
        key = _structure_key(part)
        name = _symbol(part)
        if key in first:
            alias[name] = first[key]
        else:
            first[key] = name
    if not alias:
        return 0
    from onnxc.transforms.onnx_utils import collect_ops

    for call in collect_ops(module.operation, lambda op: op.name == "func.call"):
        callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        if callee in alias:
            call.attributes["callee"] = ir.FlatSymbolRefAttr.get(alias[callee], call.context)
    for part in parts:
        if _symbol(part) in alias:
            part.erase()
    return len(alias)


def has_dynamic_shapes(fn: ir.Operation) -> bool:
    """Whether an argument of `fn` or a result of an op in its body is a tensor with a dynamic
    dim (a symbolic input dim, or a size only known from the data)."""
    def dynamic(t: ir.Type) -> bool:
        return isinstance(t, ir.RankedTensorType) and not t.has_static_shape

    for block in fn.regions[0].blocks:
        if any(dynamic(a.type) for a in block.arguments):
            return True
        for op in block.operations:
            if any(dynamic(r.type) for r in op.operation.results):
                return True
    return False


def outline_functions(module: ir.Module, max_ops: int | None = None, *, dedupe: bool = False,
                      bonds: Sequence[tuple[ir.Operation, ir.Operation]] = (),
                      normalize: Callable[[ir.Operation], None] | None = None) -> OutlineStats:
    """Outline every long function of ``module`` (see the module docstring), in parts of
    ``max_ops`` region ops; None: ``DYNAMIC_MAX_OPS`` for a function with dynamic shapes
    (``has_dynamic_shapes``), else ``DEFAULT_MAX_OPS``.

    With ``dedupe``, repeated runs of ops (a model's layers) are cut at the same places in each
    repetition, constants of more than ``LIFT_ELEMENTS`` elements are passed to the parts as
    arguments, and parts that are equal are merged (``dedupe_parts``); ``normalize`` is called on
    each part first (to number tags per part that were numbered per module). ``bonds``: see
    ``outline_function``."""
    funcs = [op.operation for op in module.body.operations if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)]
    split, parts, merged = 0, 0, 0
    for fn in funcs:
        size = max_ops if max_ops is not None else DYNAMIC_MAX_OPS if has_dynamic_shapes(fn) else DEFAULT_MAX_OPS
        if dedupe:
            unshare_generators(fn)
            n = outline_function(fn, size, lift_elements=LIFT_ELEMENTS, periodic=True, bonds=bonds)
        else:
            n = outline_function(fn, size, bonds=bonds)
        if n:
            split += 1
            parts += n
            if dedupe:
                prefix = _symbol(fn) + "__part"
                mine = [op.operation for op in module.body.operations if op.operation.name == "func.func" and _symbol(op.operation).startswith(prefix)]
                if normalize is not None:
                    for part in mine:
                        normalize(part)
                merged += dedupe_parts(module, mine)
    return OutlineStats(split, parts, merged)
