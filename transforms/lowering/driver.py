"""The driver of the ONNX -> linalg lowering: the pre-check, and the walk that rebuilds functions.

Pre-check (`check_module`): every op of every function is looked at before anything is built;
each op without a pattern, with an element type the lowering does not handle, with an unranked
operand, or refused by its pattern's `check` is reported, all in one `DiagnosticsError`.

Lowering (`lower_module`): each `func.func` is rebuilt as a new function with converted
(signless) argument types; its body is walked in block order with a value map from ONNX values
to lowered values, each ONNX op handing its `Node` to its pattern, which builds the lowered ops
at the end of the new block. Non-ONNX ops without regions are re-created with mapped operands;
`func.call` gets the callee's lowered result types. The function's result types are the
declared ones where the lowered values fit them (refined by `tensor.cast`), else the lowered
values' own types (e.g. an unranked declared result). Finally the old functions are erased.

Why not in-place rewriting: the original ONNX types (unsigned element types, declared shapes)
stay readable by every pattern until the end, and a half-lowered function never exists.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import func

from onnxc.dialect.table import schema_for
from onnxc.errors import DiagnosticsError
from onnxc.transforms.lowering.minifloat import is_exotic
from onnxc.transforms.lowering.strings import STRING_OPS, is_string, mark_boundary, uses_strings
from onnxc.transforms.lowering.runtime_checks import require_declared_shape
from onnxc.transforms.lowering.dim_sources import check_shared_dim_params
from onnxc.transforms.lowering.common import (
    LoweringError,
    Node,
    cast_to_type,
    compatible,
    convert_type,
    elem_of,
    element_supported,
    find_pattern,
    is_ranked,
    node_name,
    static_shape,
)

ONNX_DIALECTS = ("onnx", "onnx_ml", "onnx_training", "onnx_preview")
# Ops that may see float8/float4/int4/int2 tensors (stored as bytes): conversions, and ops that
# only move elements around.
BYTE_CODED_OPS = frozenset(
    {"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "Identity", "Reshape", "Flatten", "Squeeze",
     "Unsqueeze", "Transpose", "Concat", "Slice", "Gather", "GatherElements", "GatherND", "Split", "Expand",
     "Tile", "Shape", "Size", "Where", "If", "Loop"}
)  # fmt: skip


def _is_onnx(op: ir.Operation) -> bool:
    return op.name.split(".", 1)[0] in ONNX_DIALECTS


def _funcs(module: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in module.regions[0].blocks[0].operations if op.operation.name == "func.func"]


def _type_problem(t: ir.Type, what: str) -> str | None:
    if isinstance(t, ir.NoneType):
        return None
    if not isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)):
        return f"{what} has type {t}, which the lowering does not handle"
    if not element_supported(elem_of(t)) and not is_string(t):
        return f"{what} has element type {elem_of(t)}, which the lowering does not handle"
    return None


def _loc_text(op: ir.Operation) -> str:
    try:
        return str(op.location)
    except (RuntimeError, ValueError):  # the bindings refusing to print a location: the
        # diagnostic still names the op, only without its position
        return "loc(unknown)"


def _is_subgraph_argument(v: ir.Value) -> bool:
    """A block argument of an ONNX op's region (Loop/Scan bodies): the control-flow lowering
    binds it to a ranked value."""
    if not isinstance(v, ir.BlockArgument):
        return False
    try:
        parent = v.owner.owner
    except (RuntimeError, ValueError):  # a block without a parent op (detached): not a subgraph
        return False
    return parent is not None and _is_onnx(parent.operation if hasattr(parent, "operation") else parent)


def check_op(op: ir.Operation) -> list[str]:
    """Reasons why one ONNX op cannot be lowered (empty when it can)."""
    info = schema_for(op)
    if op.name == "onnx.none":
        return []
    if info is None:
        if op.name.endswith(".custom") and "op_type" in op.attributes:
            dom = ir.StringAttr(op.attributes["domain"]).value
            typ = ir.StringAttr(op.attributes["op_type"]).value
            return [f"custom op {dom}::{typ}: no lowering for ops of domains without schemas"]
        return [f"{op.name}: not an op of the ONNX dialect table"]
    nm = node_name(op)
    who = f"{info.op_type} (opset {info.since_version}, {op.name})" + (f" node '{nm}'" if nm else "")
    pat = find_pattern(info)
    if pat is None:
        return [f"{who}: no lowering for {info.op_type}"]
    if info.since_version < pat.min_version:
        return [f"{who}: only version {pat.min_version} and newer are lowered; run onnx-upgrade-ops first"]
    problems: list[str] = []
    exotic = [t for t in [v.type for v in op.operands] + [r.type for r in op.results] if isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)) and is_exotic(elem_of(t))]
    if exotic and info.op_type not in BYTE_CODED_OPS:
        return [f"{who}: element type {elem_of(exotic[0])} is only lowered for casts, (de)quantization and data movement"]
    if uses_strings(op) and info.op_type not in STRING_OPS:
        return [f"{who}: string tensors are only lowered for {', '.join(sorted(STRING_OPS))}"]
    deferred = False
    for i, v in enumerate(op.operands):
        p = _type_problem(v.type, f"input {i}")
        if p is None and isinstance(v.type, ir.UnrankedTensorType):
            # Every lowering produces ranked tensors: an unranked value computed by an ONNX op
            # gets its rank when lowered, and the pattern's check then runs at lowering time.
            if (isinstance(v, ir.OpResult) and _is_onnx(v.owner)) or _is_subgraph_argument(v):
                deferred = True
            else:
                p = f"input {i} is unranked ({v.type}); run onnx-shape-inference first"
        if p:
            problems.append(f"{who}: {p}")
    for i, r in enumerate(op.results):
        p = _type_problem(r.type, f"result {i}")
        if p:
            problems.append(f"{who}: {p}")
    if problems:
        return problems
    if pat.check is not None and not deferred:
        try:
            reason = pat.check(Node(op, info, list(op.operands)))
        except LoweringError as exc:
            reason = str(exc)
        if reason:
            problems.append(f"{who}: {reason}")
    return problems


def check_module(module: ir.Operation) -> list[str]:
    """Every reason the module cannot be lowered, one line each, prefixed by the op's location."""
    problems: list[str] = []
    for f in _funcs(module):
        if not len(f.regions[0].blocks):
            continue
        fname = ir.StringAttr(f.attributes["sym_name"]).value
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        for i, t in enumerate(ftype.inputs):
            p = _type_problem(t, f"argument {i}")
            if p is None and not is_ranked(t):
                p = f"argument {i} is unranked ({t})"
            if p:
                problems.append(f"@{fname}: {p}")

        def visit(op: ir.Operation) -> None:
            if _is_onnx(op):
                for reason in check_op(op):
                    problems.append(f"{_loc_text(op)}: {reason}")
                # Subgraph bodies are checked too (their ops are lowered by the If/Loop patterns).
                for region in op.regions:
                    for block in region.blocks:
                        for inner in block.operations:
                            visit(inner.operation)
                return
            if len(op.regions) and op.name not in ("func.func",):
                problems.append(f"{_loc_text(op)}: {op.name}: ops with regions other than ONNX control flow are not lowered")

        for block in f.regions[0].blocks:
            for op in block.operations:
                visit(op.operation)
    return problems


class Lowering:
    """One run of the lowering over a module (see the module docstring)."""

    def __init__(self, module: ir.Operation) -> None:
        self.module = module
        self.values: dict[ir.Value, ir.Value | None] = {}
        self.lowered: dict[str, ir.Operation] = {}  # function name -> new func.func
        self._in_progress: set[str] = set()
        self._old: dict[str, ir.Operation] = {}
        self._created: list[ir.Operation] = []

    # value map
    def lookup(self, v: ir.Value) -> ir.Value | None:
        """The lowered value of an ONNX-level value (None for `onnx.none`)."""
        if isinstance(v.type, ir.NoneType):
            return None
        try:
            return self.values[v]
        except KeyError:
            raise LoweringError(f"value {v.get_name()} used before it was lowered") from None

    def bind(self, old: ir.Value, new: ir.Value | None) -> None:
        self.values[old] = new

    # functions
    def run(self) -> None:
        funcs = _funcs(self.module)
        self._old = {ir.StringAttr(f.attributes["sym_name"]).value: f for f in funcs}
        try:
            for name, f in self._old.items():
                if len(f.regions[0].blocks):
                    self.lower_func(name)
        except Exception:  # noqa: BLE001 - any failure (a LoweringError or a bug) is re-raised
            # below; first leave the module as it was: drop the functions built so far.
            self.values.clear()
            for new in self._created:
                new.erase()
            raise
        self.values.clear()
        for name, f in self._old.items():
            if name in self.lowered:
                f.erase()

    def lower_func(self, name: str) -> ir.Operation:
        if name in self.lowered:
            return self.lowered[name]
        if name in self._in_progress:
            raise LoweringError(f"@{name}: recursive function calls are not lowered")
        self._in_progress.add(name)
        old = self._old[name]
        ftype = ir.FunctionType(ir.TypeAttr(old.attributes["function_type"]).value)
        arg_types = [convert_type(t) for t in ftype.inputs]
        attrs = {n: old.attributes[n] for n in old.attributes}
        attrs["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(arg_types, [convert_type(t) for t in ftype.results]))
        with old.location:
            new = ir.Operation.create("func.func", attributes=attrs, regions=1, ip=ir.InsertionPoint(old))
        self._created.append(new)
        old_block = old.regions[0].blocks[0]
        block = new.regions[0].blocks.append(*arg_types)
        for a, b in zip(old_block.arguments, block.arguments):
            self.bind(a, b)
        with ir.InsertionPoint(block), old.location:  # inputs sharing a dim_param: checked, then one source
            check_shared_dim_params(new, f"@{name}")
        results = self.lower_block(old_block, block, terminator="func.return")
        # Result types: the declared ones where the lowered values fit them.
        final: list[ir.Value] = []
        with ir.InsertionPoint(block), old.location:
            for v, declared in zip(results, ftype.results):
                want = convert_type(declared)
                if v is None:
                    raise LoweringError(f"@{name}: returns an omitted optional value")
                if is_ranked(want) and compatible(v.type, want):
                    # A declared static dim the lowered value has only at run time is checked
                    # there (runtime_checks.py): the cast assumes it.
                    require_declared_shape(v, want, ("", f"@{name}"), f"result {len(final)}")
                    v = cast_to_type(v, want, check=False)
                final.append(v)
            func.ReturnOp(final)
        new.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(arg_types, [v.type for v in final]))
        mark_boundary(new, ftype)  # string arguments/results: the ABI converts them
        self.lowered[name] = new
        self._in_progress.discard(name)
        return new

    def lower_block(self, old_block: ir.Block, new_block: ir.Block, terminator: str | Sequence[str]) -> list[ir.Value | None]:
        """Lower the ops of `old_block` into the end of `new_block` (block arguments must be
        bound already); returns the lowered operands of its terminator (not built)."""
        terms = (terminator,) if isinstance(terminator, str) else tuple(terminator)
        for op in old_block.operations:
            op = op.operation
            if op.name in terms:
                return [self.lookup(v) for v in op.operands]
            with ir.InsertionPoint(new_block), op.location:
                self.lower_op(op)
        raise LoweringError("block without terminator")

    def lower_op(self, op: ir.Operation) -> None:
        if op.name == "onnx.none":
            self.bind(op.results[0], None)
            return
        if _is_onnx(op):
            self._lower_onnx(op)
            return
        if op.name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee in self._old and len(self._old[callee].regions[0].blocks):
                target = self.lower_func(callee)
                ftype = ir.FunctionType(ir.TypeAttr(target.attributes["function_type"]).value)
                result_types = list(ftype.results)
            else:
                result_types = [convert_type(r.type) for r in op.results]
            operands = [self.lookup(v) for v in op.operands]
            new = func.CallOp(result_types, ir.FlatSymbolRefAttr.get(callee), operands)
            for a, b in zip(op.results, new.results):
                self.bind(a, b)
            return
        if len(op.regions):
            raise LoweringError(f"{op.name}: ops with regions are not lowered")
        operands = [self.lookup(v) for v in op.operands]
        attrs = {n: op.attributes[n] for n in op.attributes}
        new = ir.Operation.create(op.name, results=[convert_type(r.type) for r in op.results], operands=operands, attributes=attrs)
        for a, b in zip(op.results, new.results):
            self.bind(a, b)

    def _lower_onnx(self, op: ir.Operation) -> None:
        info = schema_for(op)
        if info is None:
            raise LoweringError(f"{op.name}: not lowered")
        pat = find_pattern(info)
        if pat is None:
            raise LoweringError(f"{info.op_type}: no lowering")
        node = Node(op, info, [self.lookup(v) for v in op.operands], self)
        # Unranked operands take the shape of their lowered values (keeping the ONNX element
        # type, so unsigned stays unsigned); the check deferred by the pre-check runs now.
        refined = False
        for i, (t, v) in enumerate(zip(node.onnx_types, node.inputs)):
            if t is not None and v is not None and isinstance(t, ir.UnrankedTensorType) and is_ranked(v.type):
                node.onnx_types[i] = ir.RankedTensorType.get(list(ir.RankedTensorType(v.type).shape), elem_of(t))
                refined = True
        if refined and pat.check is not None:
            reason = pat.check(node)
            if reason:
                raise node.fail(reason)
        try:
            results = list(pat.fn(node))
        except LoweringError as exc:
            # A helper's error (broadcast_plan's, say) names no node: the diagnostic must.
            if str(exc).startswith(node.describe()):
                raise
            raise node.fail(str(exc)) from None
        if len(results) < len(op.results):
            results += [None] * (len(op.results) - len(results))
        for i, (old, new) in enumerate(zip(op.results, results)):
            if isinstance(old.type, ir.NoneType):
                self.bind(old, None)
                continue
            if new is None:
                raise node.fail(f"result {i} was not produced by the lowering")
            want = convert_type(old.type)
            if elem_of(new.type) != elem_of(want):
                raise node.fail(f"lowering produced {new.type} for result {i} declared {old.type}")
            if is_ranked(want):
                if not compatible(new.type, want):
                    raise node.fail(f"lowering produced {new.type} for result {i} declared {old.type}")
                # Refine to the declared static dims (shape inference may know more).
                if any(a is None and b is not None for a, b in zip(static_shape(new.type), static_shape(want))):
                    # ... and checked at run time: a declared dim that depends on run-time data
                    # (a Reshape target fed as an input) must not be trusted.
                    require_declared_shape(new, want, op, f"result {i}")
                    new = cast_to_type(new, want, check=False)
            self.bind(old, new)


def lower_module(module: ir.Operation) -> None:
    """Check then lower every function of `module` (a `builtin.module` operation) in place."""
    with module.context, ir.Location.unknown():
        problems = check_module(module)
        if problems:
            raise DiagnosticsError(f"convert-onnx-to-linalg: {len(problems)} problem(s), nothing lowered:", problems)
        try:
            Lowering(module).run()
        except LoweringError as exc:
            raise DiagnosticsError("convert-onnx-to-linalg: lowering failed:", [str(exc)]) from None
