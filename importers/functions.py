"""Inlining of imported ONNX model-local functions: replace each `func.call` by the callee's body.

The importer keeps model-local functions as private `func.func`s (one per specialization) called by
`func.call`, so the model's structure stays visible; `ImportConfig(inline_functions=True)` and the
`inline-functions` pass (`onnxc.transforms.inline_functions`) flatten them with this module. It lives
with the importer because it undoes the importer's own function structure, and so that the importer
needs nothing from `transforms` (layers: DEVELOPERS.md). Upstream MLIR's `inline` pass cannot do it:
IRDL ops do not implement the inliner interface, so MLIR treats them as not legal to inline. The
callee's ops are cloned in front of each call, the operands rewired (block arguments -> call
operands, including uses inside nested subgraph regions that capture function-level values), the
call's results replaced by the returned values, and functions no longer called erased. Calls inside
inlined bodies are inlined in turn (ONNX functions cannot recurse; a depth limit turns a malformed
recursive module into an error instead of a hang).
"""

from __future__ import annotations

from mlir import ir

from onnxc.importers.errors import ModelImportError

__all__ = ["inline_call", "inline_functions", "remap_operands"]

_MAX_DEPTH = 64


def _functions(module: ir.Operation) -> dict[str, ir.Operation]:
    out = {}
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            out[ir.StringAttr(op.attributes["sym_name"]).value] = op.operation
    return out


def _calls(root: ir.Operation, funcs: dict[str, ir.Operation]) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            f = funcs.get(callee)
            if f is not None and "onnx.function" in f.attributes:
                found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def remap_operands(op: ir.Operation, mapping: dict[ir.Value, ir.Value]) -> None:
    """Point every operand of `op` and of the ops nested in it at its mapped value."""

    def visit(inner: ir.Operation) -> ir.WalkResult:
        for i, v in enumerate(inner.operands):
            new = mapping.get(v)
            if new is not None:
                inner.operands[i] = new
        return ir.WalkResult.ADVANCE

    op.walk(visit, ir.WalkOrder.PRE_ORDER)


def inline_call(call: ir.Operation, callee: ir.Operation) -> None:
    """Inline one `func.call` of `callee` (a single-block function) at the call."""
    block = callee.regions[0].blocks[0]
    mapping: dict[ir.Value, ir.Value] = {arg: v for arg, v in zip(block.arguments, call.operands)}
    returned: list[ir.Value] = []
    ip = ir.InsertionPoint(call)
    for op in block.operations:
        if op.operation.name == "func.return":
            returned = [mapping.get(v, v) for v in op.operands]
            break
        clone = op.operation.clone(ip=ip)
        remap_operands(clone, mapping)
        for old, new in zip(op.operation.results, clone.results):
            mapping[old] = new
    for res, new in zip(call.results, returned):
        res.replace_all_uses_with(new)
    call.erase()


def inline_functions(module: ir.Operation, only: tuple[str, ...] = ()) -> int:
    """Inline every call of an imported ONNX function (or of those named in `only`: ONNX function
    names or symbols); returns the number of calls inlined."""
    module = module.operation
    funcs = _functions(module)
    count = 0
    for _ in range(_MAX_DEPTH):
        calls = _calls(module, funcs)
        if only:
            calls = [c for c in calls if _wanted(c, funcs, only)]
        # A call inside a function that is itself inlined later is inlined there too.
        calls = [c for c in calls if not _inside_function_body(c, funcs)] or calls
        if not calls:
            break
        for call in calls:
            callee = funcs[ir.FlatSymbolRefAttr(call.attributes["callee"]).value]
            inline_call(call, callee)
            count += 1
    else:
        raise ModelImportError(
            "cannot inline the model's functions", [f"calls still remain after {_MAX_DEPTH} rounds: are the functions recursive?"]
        )
    # Functions no call refers to any more are dropped (the main graph is public and kept).
    remaining = {ir.FlatSymbolRefAttr(c.attributes["callee"]).value for c in _calls(module, funcs)}
    for name, f in funcs.items():
        if "onnx.function" in f.attributes and name not in remaining and (not only or _named(f, name, only)):
            f.erase()
    return count


def _named(f: ir.Operation, sym: str, only: tuple[str, ...]) -> bool:
    return sym in only or ir.StringAttr(f.attributes["onnx.function"]).value in only


def _wanted(call: ir.Operation, funcs: dict[str, ir.Operation], only: tuple[str, ...]) -> bool:
    sym = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
    return _named(funcs[sym], sym, only)


def _inside_function_body(op: ir.Operation, funcs: dict[str, ir.Operation]) -> bool:
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    return parent is not None and "onnx.function" in parent.attributes
