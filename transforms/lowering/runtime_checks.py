"""Run-time checks emitted by the ONNX -> linalg lowering: the tensor-level half of the status channel.

What: `require(ok, who, what, fields)` emits, where the lowering builds code, a check that runs
with the model: when the i1 `ok` is false at run time, the first failure of a call is recorded in
the module's status words (`memref.global @__onnxc_status : memref<16xi64>`): word 0 holds the
check's id (1-based), the following words the run-time values named by `fields` (a shape, an
index, a size). The check's description (ONNX node name, op type, the sentence with placeholders
for the values) is a JSON attribute of its guard; a target collects them into the module
attribute `onnxc.runtime_checks` (`collect_check_table`, `set_check_table`), so it can turn a
status into a sentence naming the node without any text in the generated code.
`index_range_ok` builds such a check for an index tensor: its minimum and maximum (one
vectorizable reduction each, over the whole tensor, before the gather reads anything) against
the size of the axis it indexes.

Why: a declared static shape that depends on run-time data (a Reshape target fed as an input), an
index out of range, or a Reshape target of another size is invalid input that `onnx.reference`
refuses; without a way to report it the compiled code could only return a (memory-safe, clamped)
wrong answer, or trust a contradicted shape. The check writes a global rather than aborting
(`cf.assert` lowers to `abort`) so that the process lives and the caller raises a clear error; the
CPU target makes the function leave right after a failed check (`onnxc.targets.cpu.runtime_checks`).
`onnxc.transforms.lowering.common.cast_to_type` checks every dim it refines from dynamic to static,
and casts behind an `scf.if` on those dims (`guarded_cast`): canonicalization folded a plain cast
into its producer, whose loops then ran to the static sizes before the check.

Every emitted `scf.if` carries the unit attribute `onnxc.runtime_check`: a target without a
status channel (the GPU host program is a whitelist of buffer operations) removes them with
`strip_runtime_checks`; the CPU target reads them through `onnxc.targets.cpu.runtime_checks`.
Only upstream ops are emitted (`scf.if`, `memref.get_global/load/store`, `arith`, `linalg`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from mlir import ir
from mlir.dialects import arith, memref, scf

from onnxc.importers.proto import location_label

__all__ = [
    "CHECKS_ATTR",
    "CHECK_MARKER",
    "GUARDED_CAST",
    "STATUS_GLOBAL",
    "STATUS_WORDS",
    "check_table",
    "collect_check_table",
    "describe",
    "ensure_status_global",
    "format_check",
    "guarded_cast",
    "index_range_ok",
    "record_failure",
    "next_check_id",
    "require",
    "require_declared_shape",
    "require_indices",
    "require_sizes",
    "require_within",
    "set_check_table",
    "status_memref_type",
    "strip_runtime_checks",
]

#: The module-level status: word 0 the failing check's id (0: no failure), then its values.
STATUS_GLOBAL = "__onnxc_status"
STATUS_WORDS = 16
#: Module attribute a target writes once (`set_check_table`): one JSON description per check id
#: (id i is element i - 1).
CHECKS_ATTR = "onnxc.runtime_checks"
#: Module attribute: how many check ids were given out.
COUNT_ATTR = "onnxc.runtime_checks_count"
#: Attribute on every `scf.if` that records a failure: its description as JSON (with its id).
CHECK_MARKER = "onnxc.runtime_check"
#: Unit attribute on the `scf.if` of a `guarded_cast` (a cast to declared static dims).
GUARDED_CAST = "onnxc.guarded_cast"

#: (name, values): one `ir.Value` is a number in the message, a sequence a tuple (a shape).
Field = tuple[str, "ir.Value | Sequence[ir.Value]"]


def status_memref_type() -> ir.MemRefType:
    """`memref<16xi64>`, the type of the status global."""
    return ir.MemRefType.get([STATUS_WORDS], ir.IntegerType.get_signless(64))


def _module_of(block: ir.Block) -> ir.Operation:
    op = block.owner.operation
    while op.name != "builtin.module":
        parent = op.parent
        if parent is None:
            raise ValueError("a run-time check must be built inside a module")
        op = parent.operation
    return op


def ensure_status_global(module: ir.Operation) -> None:
    """Add the private, zero-initialized status global to `module` unless it is there."""
    body = module.regions[0].blocks[0]
    for op in body.operations:
        op = op.operation
        if op.name == "memref.global" and ir.StringAttr(op.attributes["sym_name"]).value == STATUS_GLOBAL:
            return
    i64 = ir.IntegerType.get_signless(64)
    zero = ir.DenseElementsAttr.get_splat(ir.RankedTensorType.get([STATUS_WORDS], i64), ir.IntegerAttr.get(i64, 0))
    with ir.InsertionPoint.at_block_begin(body), ir.Location.unknown():
        memref.GlobalOp(STATUS_GLOBAL, ir.TypeAttr.get(status_memref_type()), sym_visibility="private", initial_value=zero)


def describe(node: str, op_type: str, what: str, fields: Sequence[tuple[str, int]]) -> dict[str, object]:
    """A check's description: `what` is a sentence with `{name}` placeholders, one per field; a
    field of count 1 is an integer, a count of -n a tuple of n values (a shape)."""
    return {"node": node, "op": op_type, "what": what, "fields": [[n, int(c)] for n, c in fields]}


def next_check_id(module: ir.Operation) -> int:
    """A fresh check id (1-based) for `module`: a counter attribute, O(1) per check (rebuilding a
    table attribute per check was quadratic: 2.7 s for 3000 checks)."""
    i64 = ir.IntegerType.get_signless(64)
    n = ir.IntegerAttr(module.attributes[COUNT_ATTR]).value if COUNT_ATTR in module.attributes else 0
    module.attributes[COUNT_ATTR] = ir.IntegerAttr.get(i64, n + 1)
    return n + 1


def collect_check_table(module: ir.Operation) -> list[dict[str, object] | None]:
    """The table of the checks `require` emitted, read from the guards' descriptions (index i for id
    i + 1; None for an id whose guard is gone, e.g. folded away as statically true)."""
    found: dict[int, dict[str, object]] = {}

    def visit(op: ir.Operation) -> ir.WalkResult:
        if CHECK_MARKER in op.attributes and isinstance(op.attributes[CHECK_MARKER], ir.StringAttr):
            d = json.loads(ir.StringAttr(op.attributes[CHECK_MARKER]).value)
            found[int(d.pop("id"))] = d
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    n = max([ir.IntegerAttr(module.attributes[COUNT_ATTR]).value if COUNT_ATTR in module.attributes else 0, *found])
    return [found.get(i + 1) for i in range(n)]


def set_check_table(module: ir.Operation, table: Sequence[dict[str, object] | None]) -> None:
    """Store the whole table in the module attribute `onnxc.runtime_checks` (one write)."""
    module.attributes[CHECKS_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(json.dumps(d)) for d in table])


def check_table(module: ir.Operation) -> list[dict[str, object] | None]:
    """The descriptions of `module`'s checks, index i for id i + 1: the stored table when a target
    wrote one (`set_check_table`), else the guards' descriptions."""
    if CHECKS_ATTR not in module.attributes:
        return collect_check_table(module)
    return [json.loads(ir.StringAttr(a).value) for a in ir.ArrayAttr(module.attributes[CHECKS_ATTR])]


def _i64(v: ir.Value) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    if isinstance(v.type, ir.IndexType):
        return arith.index_cast(i64, v)
    if v.type != i64:
        return arith.extsi(i64, v)
    return v


def record_failure(check_id: int, values: Sequence[ir.Value], description: ir.Attribute | None = None) -> None:
    """At the insertion point: store `check_id` and `values` in the status unless a failure is
    recorded already (the first failure of a call is its cause; later ones follow from it).
    Branch-free (selects), so it can be built in structured and in CFG code alike.
    `description` also goes on the record's last store: it survives a guard folded away (a check
    that fails whatever the data, inlined by canonicalize), so the message still names the node
    and the CPU target still leaves right after the record."""
    i64 = ir.IntegerType.get_signless(64)
    index = ir.IndexType.get()
    status = memref.get_global(status_memref_type(), STATUS_GLOBAL)
    zero_i = arith.constant(index, 0)
    old = memref.load(status, [zero_i])
    first = arith.cmpi(arith.CmpIPredicate.eq, old, arith.constant(i64, 0))
    last = memref.StoreOp(arith.select(first, arith.constant(i64, check_id), old), status, [zero_i])
    for k, v in enumerate(values[: STATUS_WORDS - 2]):  # the last word is the target's exit flag
        at = arith.constant(index, k + 1)
        last = memref.StoreOp(arith.select(first, v, memref.load(status, [at])), status, [at])
    if description is not None:  # on the last store: the whole record precedes it
        last.operation.attributes[CHECK_MARKER] = description


def require(ok: ir.Value, who: ir.Operation | tuple[str, str] | None, what: str, fields: Sequence[Field] = ()) -> None:
    """Emit at the current insertion point: if `ok` (i1) is false at run time, record the failure.

    who: the ONNX op being lowered (its location names the node and op type), (node, op type), or
    None for the current location (the lowering driver builds each op's code under its location).
    what: the sentence, with `{name}` for each of `fields` ((name, value) for a number, (name,
    [values]) for a shape; index or integer scalars)."""
    block = ir.InsertionPoint.current.block
    module = _module_of(block)
    if isinstance(who, tuple):
        node, op_type = who
    elif who is None:
        node, op_type = location_label(ir.Location.current)
    else:
        node, op_type = location_label(who.location)
    seqs = [(n, [vs] if isinstance(vs, ir.Value) else list(vs), isinstance(vs, ir.Value)) for n, vs in fields]
    values = [v for _, vs, _ in seqs for v in vs]
    fields_desc = [(n, len(vs) if scalar else -len(vs)) for n, vs, scalar in seqs]
    known = _constant_int(ok)
    if known is not None and bool(known):
        return  # holds whatever the data
    ensure_status_global(module)
    check_id = next_check_id(module)
    desc = ir.StringAttr.get(json.dumps({"id": check_id, **describe(node, op_type, what, fields_desc)}))
    failed = arith.xori(ok, arith.constant(ir.IntegerType.get_signless(1), 1))
    guard = scf.IfOp(failed)
    guard.operation.attributes[CHECK_MARKER] = desc
    with ir.InsertionPoint(guard.then_block):  # the values widened only where they are reported
        record_failure(check_id, [_i64(v) for v in values], desc)
        scf.YieldOp([])


def format_check(check: dict[str, Any], values: Sequence[int]) -> str:
    """A check's sentence with its values: `Reshape node 'r1': the run-time target shape (2, 7) has
    14 elements, the input 12` (a field of count 1 is a number, of count -n a tuple of n)."""
    named: dict[str, object] = {}
    at = 0
    for name, count in check.get("fields", []):
        n = abs(int(count))
        vs = [int(v) for v in values[at : at + n]]
        at += n
        named[str(name)] = vs[0] if int(count) == 1 and vs else "(" + ", ".join(map(str, vs)) + ("," if n == 1 else "") + ")"
    try:
        what = str(check.get("what", "")).format(**named)
    except (KeyError, IndexError, ValueError):  # a description that does not fit its values
        what = f"{check.get('what')} {named}"
    node, op = str(check.get("node") or ""), str(check.get("op") or "")
    who = f"{op} node '{node}'" if node and op else (f"node '{node}'" if node else (op or "the model"))
    return f"{who}: {what}"


def _declared_dims_ok(v: ir.Value, declared: ir.Type) -> ir.Value | None:
    """The i1 "every dim of `v` that is dynamic but static in `declared` has the declared size"
    (None when no such dim exists): what a `tensor.cast` from `v` to `declared` assumes."""
    from mlir.dialects import tensor

    vt, dt = ir.RankedTensorType(v.type), ir.RankedTensorType(declared)
    ok: ir.Value | None = None
    for i in range(vt.rank):
        if vt.is_dynamic_dim(i) and not dt.is_dynamic_dim(i):
            same = arith.cmpi(arith.CmpIPredicate.eq, tensor.dim(v, arith.constant(ir.IndexType.get(), i)),
                              arith.constant(ir.IndexType.get(), dt.get_dim_size(i)))  # fmt: skip
            ok = same if ok is None else arith.andi(ok, same)
    return ok


def require_declared_shape(v: ir.Value, declared: ir.Type, who: ir.Operation | tuple[str, str] | None, label: str, claim: str = "the model declares") -> None:
    """Check at run time that the dims of `v` that are dynamic but static in `declared` (a
    ranked tensor type of the same rank) have the declared sizes: what a `tensor.cast` from
    `v` to `declared` assumes. Nothing is emitted when no such dim exists. The cast itself must
    be `guarded_cast` (the check records; it does not stop the code before it)."""
    from mlir.dialects import tensor

    vt, dt = ir.RankedTensorType(v.type), ir.RankedTensorType(declared)
    ok = _declared_dims_ok(v, declared)
    if ok is None:
        return
    dims = [tensor.dim(v, arith.constant(ir.IndexType.get(), i)) for i in range(vt.rank)]
    want = tuple(None if dt.is_dynamic_dim(i) else dt.get_dim_size(i) for i in range(dt.rank))
    shown = "(" + ", ".join("?" if d is None else str(d) for d in want) + ("," if len(want) == 1 else "") + ")"
    label = label.replace("{", "{{").replace("}", "}}")
    require(ok, who, f"{label} has the run-time shape {{shape}}, {claim} {shown}", [("shape", dims)])


#: Producers that read no tensor: a cast folded into them makes them write the declared size into
#: a buffer of their own, and nothing is read past an input (`guarded_cast` casts them plainly).
_NO_TENSOR_READ = frozenset({"linalg.fill", "tensor.empty", "arith.constant"})


def _reads_no_tensor(v: ir.Value) -> bool:
    """Whether `v` is made by an op of `_NO_TENSOR_READ` (a ConstantOfShape's fill of a run-time
    shape): its cast may fold into it, which data tiling needs to see the fill as a constant
    (`data_tiling.fills_to_constants`: weights made by a fill are packed at compile time)."""
    owner = v.owner if isinstance(v, ir.OpResult) else None
    return owner is not None and owner.name in _NO_TENSOR_READ


def guarded_cast(v: ir.Value, declared: ir.Type) -> ir.Value:
    """`tensor.cast` of `v` to `declared` (ranked, compatible) built where canonicalization cannot
    fold it into `v`'s producer: inside an `scf.if` on the run-time sizes of the dims it refines
    from dynamic to static (marked `onnxc.guarded_cast`); the other branch yields an uninitialized
    tensor of the declared shape. A plain cast when no dim is refined.

    Why: `linalg`'s canonicalization folds a `tensor.cast` to a more static type into the linalg
    op producing its source (the op's result, init and inputs become static, the cast moves to
    the inputs and on up), so the producer's loops ran to the declared sizes over buffers of the
    run-time ones *before* `require_declared_shape`'s check could stop the function: a Slice fed
    3 elements whose Neg was declared [50000000] read 200 MB past the input (SIGSEGV). That fold
    (and the other cast folds) only take a cast in the producer's block; behind the `scf.if` the
    producer keeps its dynamic type and its run-time loop bounds. On a failed check nothing reads
    the other branch's tensor (the CPU target leaves after the check, or after the loop holding
    it); a target without the status channel (`strip_runtime_checks`) gets the plain cast back.
    A value made by an op that reads no tensor (`_reads_no_tensor`) gets the plain cast too."""
    from mlir.dialects import tensor

    ok = _declared_dims_ok(v, declared) if v.type != declared else None
    if ok is None or _reads_no_tensor(v):
        return tensor.cast(declared, v)
    dt = ir.RankedTensorType(declared)
    guard = scf.IfOp(ok, [declared], has_else=True)
    guard.operation.attributes[GUARDED_CAST] = ir.UnitAttr.get()
    with ir.InsertionPoint(guard.then_block):
        scf.YieldOp([tensor.cast(declared, v)])
    with ir.InsertionPoint(guard.else_block):
        sizes = [tensor.dim(v, arith.constant(ir.IndexType.get(), i)) if dt.is_dynamic_dim(i) else dt.get_dim_size(i) for i in range(dt.rank)]
        scf.YieldOp([tensor.empty(sizes, dt.element_type)])
    return guard.results[0]


def index_range_ok(indices: ir.Value, unsigned: bool, sizes: Sequence[ir.Value], negative: bool = True) -> tuple[ir.Value, ir.Value]:
    """(ok, offending value) for an index tensor whose entries must lie in [-size, size) (in
    [0, size) when `negative` is False: ops that do not count from the end).

    One size: every entry is checked against it. Several (GatherND/ScatterND): entry [..., j] of
    the last dim is checked against `sizes[j]`. The minimum and maximum are two reductions over
    the index tensor (vectorized like any reduction), not a test per gathered element, so the
    gather's own loop stays as it was. The offending value is the minimum when it is below
    -size, else the maximum."""
    from onnxc.transforms.lowering.common import affine_map, filled, generic, rank_of

    i64 = ir.IntegerType.get_signless(64)
    r = rank_of(indices)
    per_column = len(sizes) > 1
    out_shape = [len(sizes)] if per_column else []
    out_map = affine_map(r, [r - 1] if per_column else [])
    iters = ["reduction"] * (r - 1) + (["parallel"] if per_column else ["reduction"] * min(r, 1))
    imin, imax = (1 << 63) - 1, -(1 << 63)

    def reduce(init: int, combine: str) -> ir.Value:
        def body(a: list[ir.Value]) -> list[ir.Value]:
            v = a[0]
            if v.type != i64:
                v = arith.extui(i64, v) if unsigned else arith.extsi(i64, v)
            return [arith.minsi(a[1], v) if combine == "min" else arith.maxsi(a[1], v)]

        return generic([indices], [filled(out_shape, i64, init)], [affine_map(r, list(range(r))), out_map], iters, body)[0]

    lo, hi = reduce(imin, "min"), reduce(imax, "max")
    from mlir.dialects import tensor

    ok: ir.Value | None = None
    bad: ir.Value | None = None
    for j, size in enumerate(sizes):
        at = [arith.constant(ir.IndexType.get(), j)] if per_column else []
        mn, mx = tensor.extract(lo, at), tensor.extract(hi, at)
        s = _i64(size)
        low_ok = arith.cmpi(arith.CmpIPredicate.sge, mn, arith.subi(arith.constant(i64, 0), s) if negative else arith.constant(i64, 0))
        high_ok = arith.cmpi(arith.CmpIPredicate.slt, mx, s)
        this_ok = arith.andi(low_ok, high_ok)
        this_bad = arith.select(low_ok, mx, mn)
        bad = this_bad if bad is None else arith.select(ok, this_bad, bad)  # type: ignore[arg-type]
        ok = this_ok if ok is None else arith.andi(ok, this_ok)
    assert ok is not None and bad is not None
    return ok, bad


def require_within(who: ir.Operation, inner: ir.Value, outer: ir.Value, skip: int, what: str, equal: bool = False) -> str | None:
    """Each dim of `inner` but `skip` at most (or, with `equal`, exactly) the same dim of `outer`:
    a problem sentence when static dims already break it, else a run-time check of the dynamic
    ones (none when all are static). Why: GatherElements/ScatterElements loop over the indices'
    shape and read or write the data at those coordinates off the axis: indices larger than the
    data read and wrote past it (the compile fuzzer: a NegativeLogLikelihoodLoss whose labels had
    more rows than the input, dims symbolic, answered). `what` names `inner` in the message."""
    from onnxc.transforms.lowering.common import dim, dim_value, rank_of, static_shape

    si, so = static_shape(inner.type), static_shape(outer.type)
    pred = arith.CmpIPredicate.eq if equal else arith.CmpIPredicate.ule
    ok: ir.Value | None = None
    for j in range(rank_of(inner)):
        if j == skip:
            continue
        a, b = si[j], so[j]
        if a is not None and b is not None:
            if (a != b) if equal else (a > b):
                return f"{what} dim {j} ({a}) {'differs from' if equal else 'exceeds'} the data's ({b})"
            continue
        fits = arith.cmpi(pred, dim_value(dim(inner, j)), dim_value(dim(outer, j)))
        ok = fits if ok is None else arith.andi(ok, fits)
    if ok is not None:
        require(ok, who, f"{what} of the run-time shape {{inner}} does not fit the data's shape {{outer}} off axis {skip}",
                [("inner", [dim_value(dim(inner, j)) for j in range(rank_of(inner))]),
                 ("outer", [dim_value(dim(outer, j)) for j in range(rank_of(outer))])])  # fmt: skip
    return None


def require_indices(who: ir.Operation, indices: ir.Value, unsigned: bool, sizes: Sequence[ir.Value], first_axis: int, data_shape: Sequence[ir.Value], negative: bool = True) -> None:
    """A run-time error for an entry of `indices` outside [-size, size) (`index_range_ok`: one
    size, or one per column of the last dim) indexing the data from `first_axis` on: onnx.reference
    refuses it; the gather/scatter itself clamps (memory-safe) and the caller raises."""
    if _constant_in_range(indices, sizes, negative):
        return  # nothing to check at run time (the embedding tables' position ids, a class token)
    ok, bad = index_range_ok(indices, unsigned, sizes, negative)
    where = f"axis {first_axis}" if len(sizes) == 1 else f"axes {first_axis}..{first_axis + len(sizes) - 1}"
    require(ok, who, f"index {{index}} is out of range for {where} of the data's shape {{shape}}",
            [("index", bad), ("shape", list(data_shape))])  # fmt: skip


def _constant_int(v: ir.Value) -> "np.ndarray | None":
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)) or owner.operation.name != "arith.constant":
        return None
    attr = owner.operation.attributes["value"]
    if isinstance(attr, ir.IntegerAttr):
        return np.array(attr.value)
    if isinstance(attr, ir.DenseIntElementsAttr):
        return np.array(attr)
    return None


def _constant_in_range(indices: ir.Value, sizes: Sequence[ir.Value], negative: bool = True) -> bool:
    """Whether `indices` and `sizes` are constants with every index in [-size, size) ([0, size)
    unless `negative`)."""
    ind = _constant_int(indices)
    bounds = [_constant_int(s) for s in sizes]
    if ind is None or any(b is None for b in bounds):
        return False
    cols = ind.reshape(-1, len(sizes))
    return all(bool(((cols[:, j] >= (-int(b) if negative else 0)) & (cols[:, j] < int(b))).all()) for j, b in enumerate(bounds))  # type: ignore[arg-type]


def _reads_data(v: ir.Value, depth: int = 12) -> bool:
    """Whether index `v` is computed from tensor *data* (a `tensor.extract`: a shape, repeats or
    depth fed as an input) rather than from other tensors' dims alone, within `depth` defining ops."""
    owner = v.owner
    if depth == 0 or not isinstance(owner, (ir.Operation, ir.OpView)):
        return False
    op = owner.operation
    if op.name in ("tensor.extract", "memref.load"):
        return True
    if op.name in ("tensor.dim", "arith.constant") or len(op.regions):
        return False
    return any(_reads_data(o, depth - 1) for o in op.operands)


def require_sizes(sizes: Sequence[ir.Value]) -> None:
    """A run-time error for a negative size computed from tensor data (a ConstantOfShape shape, Tile
    repeats, an Expand target, OneHot's depth fed as inputs): it reached numpy as a negative
    dim, or two negative dims made a positive size. Sizes computed from dims alone are skipped."""
    data = [v for v in sizes if isinstance(v.type, ir.IndexType) and _reads_data(v)]
    if not data:
        return
    zero = arith.constant(ir.IndexType.get(), 0)
    ok: ir.Value | None = None
    for v in data:
        nonneg = arith.cmpi(arith.CmpIPredicate.sge, v, zero)
        ok = nonneg if ok is None else arith.andi(ok, nonneg)
    assert ok is not None
    require(ok, None, "a size computed from the run-time data is negative: {sizes}", [("sizes", data)])


def strip_runtime_checks(module: ir.Operation) -> int:
    """Erase every run-time check (and the status global) from `module`; return how many.

    For targets without a status channel: their code then behaves as before the checks existed
    (memory-safe, clamped indices; a contradicting declared shape is trusted: each `guarded_cast`
    becomes its plain `tensor.cast` again, as no check stops the code before it)."""
    from mlir.dialects import tensor

    found: list[ir.Operation] = []
    guarded: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if CHECK_MARKER in op.attributes:
            found.append(op)
            return ir.WalkResult.SKIP
        if GUARDED_CAST in op.attributes:
            guarded.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    for op in found:
        op.erase()
    # Innermost first (a guard inside a loop body or another guard's branch): the then-branch's
    # ops (`tensor.cast %v`, or what canonicalization left of it) move before the guard, whose
    # result becomes the yielded value. (Building a cast of the yield's source instead aborted
    # the process where that source was defined inside the branch: Scan's loop on the GPU path.)
    for op in reversed(guarded):
        then = op.regions[0].blocks[0]
        inner = [o.operation for o in then.operations]
        for o in inner[:-1]:
            o.move_before(op)
        value = inner[-1].operands[0]
        if value.type != op.results[0].type:
            with ir.InsertionPoint(op), op.location:
                value = tensor.cast(op.results[0].type, value)
        op.results[0].replace_all_uses_with(value)
        op.erase()
    body = module.regions[0].blocks[0]
    for op in list(body.operations):
        op = op.operation
        if op.name == "memref.global" and ir.StringAttr(op.attributes["sym_name"]).value == STATUS_GLOBAL:
            op.erase()
    for name in (CHECKS_ATTR, COUNT_ATTR):
        if name in module.attributes:
            del module.attributes[name]
    return len(found)
