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
from onnxc.dialect.opinfo import OPTIONAL, VARIADIC, OpInfo
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


def build_attributes(info: OpInfo, attributes: Mapping[str, Any]) -> dict[str, ir.Attribute]:
    """MLIR attributes for an op's ONNX attributes, checked against the schema."""
    out: dict[str, ir.Attribute] = {}
    for name, value in attributes.items():
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
    return ir.Operation.create(
        info.full_name, results=types, operands=values, attributes=mlir_attrs, regions=len(info.regions), loc=loc, ip=ip
    )


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
    return ir.Operation.create("onnx.custom", results=list(result_types), operands=list(operands), attributes=all_attrs, loc=loc, ip=ip)
