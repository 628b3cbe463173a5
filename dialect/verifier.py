"""The Python verifier of the ONNX dialect: what IRDL in LLVM 22 cannot express.

IRDL checks arity (single/variadic operands and results), required attributes and region count
in C++. This verifier adds the rest of the schema:

- ONNX type constraints: every operand and result bound to a constraint `T` has one of `T`'s
  allowed types, and all values bound to the same `T` share one type (element type, not shape);
  literal types such as `tensor(int64)` are matched exactly;
- `none` only where the schema says the input or output is optional;
- minimum arity of variadic inputs and outputs;
- attribute kinds (an INTS attribute must be `array<i64: ...>` and so on), unknown attributes;
- `onnx.custom` carries its domain and op type.

It runs on import and as the `onnx-verify` pass. Each error names the op, the operand, result or
attribute, and what was expected, and carries the op's location (the ONNX node).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from onnxc.dialect.names import ONNX_DIALECTS
from onnxc.dialect.attributes import kind_of, onnx_attributes
from onnxc.dialect.opinfo import OPTIONAL, VARIADIC, OpInfo, Param
from onnxc.dialect.table import op_info
from onnxc.dialect.types import UnsupportedTypeError, type_string

_LIST_KINDS = {"INTS", "FLOATS", "STRINGS", "TENSORS", "TYPE_PROTOS", "GRAPHS", "SPARSE_TENSORS"}


@dataclass(frozen=True)
class VerifyError:
    """One verifier finding: where (the op's location), which op, and what is wrong."""

    location: ir.Location
    op_name: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: '{self.op_name}' op {self.message}"


def _bind(values: list[ir.Value], formal: tuple[Param, ...]) -> list[tuple[Param, int, ir.Value]]:
    """Pair each value with its formal parameter (the variadic one takes the rest)."""
    out = []
    for i, v in enumerate(values):
        p = formal[min(i, len(formal) - 1)] if formal else None
        if p is None or (i >= len(formal) and p.option != VARIADIC):
            break
        out.append((p, i, v))
    return out


def _check_values(
    info: OpInfo, kind: str, values: list[ir.Value], formal: tuple[Param, ...], bound: dict[str, tuple[str, str]]
) -> list[str]:
    """Problems of the operands (or results) of an op; `bound` maps each type constraint to the
    type that first bound it and who bound it, shared between operands and results."""
    problems: list[str] = []
    fixed = len(formal) - (1 if formal and formal[-1].option == VARIADIC else 0)
    if len(values) < fixed or (len(values) > len(formal) and not (formal and formal[-1].option == VARIADIC)):
        return [f"expects {fixed}{'+' if len(formal) > fixed else ''} {kind}s, got {len(values)}"]
    if len(formal) > fixed and len(values) - fixed < formal[-1].min_arity:
        problems.append(f"{kind} '{formal[-1].onnx_name}' is variadic with at least {formal[-1].min_arity} value(s), got {len(values) - fixed}")
    for p, i, v in _bind(values, formal):
        who = f"{kind} #{i} ('{p.onnx_name}')"
        t = v.type
        if isinstance(t, ir.NoneType):
            if p.option != OPTIONAL:
                problems.append(f"{who} is required but is none")
            continue
        try:
            ts = type_string(t)
        except UnsupportedTypeError:
            problems.append(f"{who} has type {t}, which is no ONNX type")
            continue
        allowed = info.constraint(p.type_str)
        if allowed is None:  # a literal type such as tensor(int64)
            if ts != p.type_str:
                problems.append(f"{who} must be {p.type_str}, got {ts} ({t})")
            continue
        if ts not in allowed:
            shown = ", ".join(allowed[:6]) + (", ..." if len(allowed) > 6 else "")
            problems.append(f"{who} has type {ts} ({t}), not allowed for {p.type_str} (allowed: {shown})")
            continue
        # Heterogeneous variadics (Loop's carried values) bind each value separately.
        if p.option == VARIADIC and not p.homogeneous:
            continue
        if p.type_str in bound and bound[p.type_str][0] != ts:
            first_ts, first_who = bound[p.type_str]
            problems.append(f"{who} has type {ts}, but {first_who} bound {p.type_str} to {first_ts}")
        else:
            bound.setdefault(p.type_str, (ts, who))
    return problems


def _check_attributes(info: OpInfo, op: ir.Operation) -> list[str]:
    problems: list[str] = []
    present = onnx_attributes(op)
    for name, attr in present.items():
        spec = info.attr(name)
        if spec is None:
            problems.append(f"has unknown attribute '{name}' ({info.op_type} has: {', '.join(a.name for a in info.attributes) or 'none'})")
            continue
        got = kind_of(attr)
        if got == spec.kind or (got == "EMPTY_LIST" and spec.kind in _LIST_KINDS):
            continue
        if spec.kind == "SPARSE_TENSOR" and got == "TENSOR":
            continue
        problems.append(f"attribute '{name}' must be {spec.kind}, got {got or 'an unsupported attribute'} ({attr})")
    for a in info.attributes:
        if a.required and a.kind != "GRAPH" and a.name not in present:
            problems.append(f"requires attribute '{a.name}' ({a.kind})")
    return problems


def verify_op(op: ir.Operation) -> list[str]:
    """Problems of one op (not its nested ops); [] for ops outside the ONNX dialects."""
    name = op.name
    if name == "onnx.custom":
        present = set(op.attributes.keys())
        return [f"requires string attribute '{a}'" for a in ("domain", "op_type") if a not in present]
    if name == "onnx.none" or name.split(".")[0] not in ONNX_DIALECTS:
        return []
    info = op_info(name)
    if info is None:
        return [f"is not an op of the ONNX dialect"]
    bound: dict[str, tuple[str, str]] = {}
    problems = _check_values(info, "operand", list(op.operands), info.inputs, bound)
    problems += _check_values(info, "result", list(op.results), info.outputs, bound)
    problems += _check_attributes(info, op)
    return problems


def verify_onnx(root: ir.Operation | ir.OpView | ir.Module) -> list[VerifyError]:
    """Verify every ONNX-dialect op nested in `root`; returns all findings (empty when valid)."""
    if isinstance(root, ir.Module):
        root = root.operation
    errors: list[VerifyError] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        for message in verify_op(op):
            errors.append(VerifyError(op.location, op.name, message))
        return ir.WalkResult.ADVANCE

    with root.operation.context:  # walking and printing locations need a current context
        root.operation.walk(visit)
    return errors
