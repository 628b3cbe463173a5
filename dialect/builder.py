"""Building ONNX-dialect operations by ONNX name: `onnx_op("MatMul", [a, b], [t])`.

The importer, passes and tests build ops only through this module, so the dialect's conventions
(DEVELOPERS.md) live in one place: operand i is ONNX input i (omitted optional inputs are
`onnx.none` values, trailing ones are filled in), optional outputs are always results (type
`none` when omitted), attributes are converted by the schema's kind, and GRAPH attributes become
regions. Arity and attribute problems raise `OnnxBuildError` before any native code sees them.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from mlir import ir
from mlir.dialects import gpu

from onnxc.dialect import attributes as attrs_mod
from onnxc.dialect.opinfo import CUSTOM_OP, OPTIONAL, VARIADIC, VARIADIC_SLOTS, OpInfo, Param
from onnxc.dialect.table import lookup, op_info
from onnxc.errors import OnnxcError


class OnnxBuildError(OnnxcError):
    """An op could not be built as asked: unknown op, wrong arity, bad attribute."""


def none_value(loc: ir.Location | None = None, ip: ir.InsertionPoint | None = None) -> ir.Value:
    """A new `onnx.none` value, standing for an omitted optional input."""
    op = ir.Operation.create("onnx.none", results=[ir.NoneType.get()], loc=loc, ip=ip)
    return op.result


def yield_values(values: Sequence[ir.Value], loc: ir.Location | None = None, ip: ir.InsertionPoint | None = None) -> ir.Operation:
    """Terminate a subgraph region with `values` (as `gpu.yield`: see DEVELOPERS.md for why)."""
    return gpu.YieldOp(list(values), loc=loc, ip=ip).operation


#: The name of the op that terminates a subgraph region (`gpu.yield`), for APIs that take op names.
SUBGRAPH_TERMINATOR: str = gpu.YieldOp.OPERATION_NAME


def is_subgraph_terminator(op: ir.Operation | ir.OpView) -> bool:
    """Whether `op` terminates an ONNX subgraph region (the op `yield_values` builds)."""
    return isinstance(op.operation.opview, gpu.YieldOp)


def _resolve(op_type: str, domain: str, version: int | None) -> OpInfo:
    info = op_info(op_type) if "." in op_type else lookup(op_type, domain, version)
    if info is None:
        where = f" in domain '{domain}'" if domain else ""
        at = f" at opset {version}" if version is not None else ""
        raise OnnxBuildError(f"no ONNX operator '{op_type}'{where}{at}")
    return info


def _operands(info: OpInfo, operands: Sequence[ir.Value | None], none: ir.Value | None, loc: Any, ip: Any) -> list[ir.Value]:
    formal = info.inputs
    variadic = bool(formal) and formal[-1].option == VARIADIC
    n_fixed = len(formal) - (1 if variadic else 0)
    if not variadic and len(operands) > len(formal):
        raise OnnxBuildError(f"{info.op_type} takes at most {len(formal)} inputs, got {len(operands)}")
    values = list(operands)
    # Trailing optional inputs that were not given are filled with none so operand i is input i.
    while len(values) < n_fixed:
        if formal[len(values)].option != OPTIONAL:
            raise OnnxBuildError(f"{info.op_type} input {len(values)} ('{formal[len(values)].onnx_name}') is required")
        values.append(None)
    if variadic and len(values) - n_fixed < formal[-1].min_arity:
        raise OnnxBuildError(f"{info.op_type} needs at least {formal[-1].min_arity} value(s) for '{formal[-1].onnx_name}'")
    out: list[ir.Value] = []
    for i, v in enumerate(values):
        if v is None:
            if i < n_fixed and formal[i].option != OPTIONAL:
                raise OnnxBuildError(f"{info.op_type} input {i} ('{formal[i].onnx_name}') is required")
            if none is None:
                none = none_value(loc=loc, ip=ip)
            v = none
        out.append(v)
    return out


def _results(info: OpInfo, result_types: Sequence[ir.Type | None]) -> list[ir.Type]:
    formal = info.outputs
    variadic = bool(formal) and formal[-1].option == VARIADIC
    n_fixed = len(formal) - (1 if variadic else 0)
    types = list(result_types)
    if not variadic and len(types) > len(formal):
        raise OnnxBuildError(f"{info.op_type} has at most {len(formal)} outputs, got {len(types)}")
    while len(types) < n_fixed:
        if formal[len(types)].option != OPTIONAL:
            raise OnnxBuildError(f"{info.op_type} output {len(types)} ('{formal[len(types)].onnx_name}') needs a type")
        types.append(None)
    return [ir.NoneType.get() if t is None else t for t in types]


def _variadic_segments(op_type: str, what: str, types: Sequence[ir.Type]) -> list[int]:
    """Segment sizes of one ONNX variadic group over its IRDL slots and tail.

    The layout depends only on the number of values, never on their types, so passes that
    refine types in place keep it valid: the first `VARIADIC_SLOTS` values take one slot each,
    the rest form the tail, which IRDL requires to share one type."""
    head = min(len(types), VARIADIC_SLOTS)
    tail = list(types)[head:]
    if any(t != tail[0] for t in tail):
        raise OnnxBuildError(
            f"{op_type} '{what}' has {len(types)} values whose values after the first {VARIADIC_SLOTS} "
            f"differ in type; the IRDL dialect holds at most {VARIADIC_SLOTS} differently typed values "
            "followed by values of one type"
        )
    return [1] * head + [0] * (VARIADIC_SLOTS - head) + [len(tail)]


def segment_sizes(op_type: str, formal: Sequence[Param], types: Sequence[ir.Type]) -> list[int] | None:
    """IRDL segment sizes for values bound to `formal` (None when there is no variadic)."""
    if not formal or formal[-1].option != VARIADIC:
        return None
    fixed = len(formal) - 1
    return [1] * fixed + _variadic_segments(op_type, formal[-1].onnx_name, list(types)[fixed:])


def _create(
    name: str, op_type: str, info: OpInfo, operands: list[ir.Value], results: list[ir.Type],
    attributes: dict[str, ir.Attribute], regions: int, loc: ir.Location | None, ip: ir.InsertionPoint | None,
) -> ir.Operation:
    """`ir.Operation.create` with the segment-size attributes IRDL needs for variadic groups."""
    for attr, formal, types in (("operandSegmentSizes", info.inputs, [v.type for v in operands]), ("resultSegmentSizes", info.outputs, results)):
        sizes = segment_sizes(op_type, formal, types)
        if sizes is not None:
            attributes[attr] = ir.DenseI32ArrayAttr.get(sizes)
    return ir.Operation.create(name, results=results, operands=operands, attributes=attributes, regions=regions, loc=loc, ip=ip)


def build_attributes(info: OpInfo, attributes: Mapping[str, Any]) -> dict[str, ir.Attribute]:
    """MLIR attributes for an op's ONNX attributes, checked against the schema."""
    out: dict[str, ir.Attribute] = {}
    for name, value in attributes.items():
        if name in attrs_mod.STRUCTURAL_ATTRIBUTES:
            continue  # recomputed from the operands and results by `_create`
        spec = info.attr(name)
        if spec is None:
            raise OnnxBuildError(f"{info.op_type} has no attribute '{name}'")
        if spec.kind == "GRAPH":
            raise OnnxBuildError(f"{info.op_type} attribute '{name}' is a graph: give it as a region")
        try:
            out[name] = attrs_mod.to_mlir(spec.kind, value)
        except attrs_mod.AttributeKindError as exc:
            raise OnnxBuildError(f"{info.op_type} attribute '{name}' ({spec.kind}): {exc}") from None
    missing = [a.name for a in info.attributes if a.required and a.kind != "GRAPH" and a.name not in out]
    if missing:
        raise OnnxBuildError(f"{info.op_type} is missing required attribute(s) {', '.join(missing)}")
    return out


def onnx_op(
    op_type: str,
    operands: Sequence[ir.Value | None],
    result_types: Sequence[ir.Type | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    domain: str = "",
    version: int | None = None,
    none: ir.Value | None = None,
    loc: ir.Location | None = None,
    ip: ir.InsertionPoint | None = None,
) -> ir.Operation:
    """Create the ONNX-dialect op for `op_type` (or a dialect name like `onnx.mat_mul`).

    `version` is the opset the op binds at (None: the newest). `None` operands are omitted
    optional inputs; `none` is a shared `onnx.none` value to use for them (one is created if not
    given). `None` result types are omitted optional outputs. GRAPH attributes become empty
    regions, in `OpInfo.regions` order, for the caller to fill.
    """
    info = _resolve(op_type, domain, version)
    values = _operands(info, operands, none, loc, ip)
    types = _results(info, result_types)
    mlir_attrs = build_attributes(info, attributes or {})
    return _create(info.full_name, info.op_type, info, values, types, mlir_attrs, len(info.regions), loc, ip)


def custom_op(
    domain: str,
    op_type: str,
    operands: Sequence[ir.Value],
    result_types: Sequence[ir.Type],
    attributes: Mapping[str, ir.Attribute] | None = None,
    *,
    loc: ir.Location | None = None,
    ip: ir.InsertionPoint | None = None,
) -> ir.Operation:
    """An `onnx.custom` op for a node of a domain onnxc has no schemas for; it keeps the domain,
    op type, attributes (already MLIR attributes) and types so export writes it back unchanged."""
    all_attrs = dict(attributes or {})
    for reserved in ("domain", "op_type"):
        if reserved in all_attrs:
            raise OnnxBuildError(f"custom op {domain}::{op_type} has an attribute named '{reserved}', which onnx.custom reserves")
    all_attrs["domain"] = ir.StringAttr.get(domain)
    all_attrs["op_type"] = ir.StringAttr.get(op_type)
    return _create("onnx.custom", f"{domain}::{op_type}", CUSTOM_OP, list(operands), list(result_types), all_attrs, 0, loc, ip)
