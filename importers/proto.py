"""ONNX proto <-> IR bookkeeping shared by the importer, the exporter and the passes.

One module, public names, so that `onnx_importer` and `exporter` need nothing of each other and
passes (`expand-schema-functions`) use the same conversions instead of private copies:
location conventions (`INITIALIZER_KIND`, `node_label`, `node_location`, `location_label`), type
conversion with ONNX's rank-0 convention (`type_proto`), opset bookkeeping (`opsets`,
`opset_entries`), attribute kinds and bytes-as-text (`attr_kind`, `b64`, `unb64`) and
function-body attribute substitution (`substitute`).
"""

from __future__ import annotations

import base64
from typing import Iterable, Mapping

import onnx
from mlir import ir

from onnxc.dialect import types as T

AP = onnx.AttributeProto

# Location kinds for constants that were initializers (not Constant nodes): export writes them back
# into GraphProto.initializer / sparse_initializer.
INITIALIZER_KIND = "initializer"
SPARSE_INITIALIZER_KIND = "sparse_initializer"


def node_label(node: onnx.NodeProto) -> str:
    """The name a node is known by in diagnostics: its name, else its first non-empty output."""
    if node.name:
        return node.name
    for out in node.output:
        if out:
            return out
    return node.op_type


def node_location(label: str, kind: str) -> ir.Location:
    """`loc("label"("kind"))`: the ONNX node name and op type (or "initializer")."""
    return ir.Location.name(label, childLoc=ir.Location.name(kind))


def attr_kind(a: onnx.AttributeProto) -> int:
    """The AttributeProto type; old models (IR < 3) may leave `type` unset: infer it from the field set."""
    if a.type != AP.UNDEFINED:
        return a.type
    for field, kind in (("f", AP.FLOAT), ("i", AP.INT), ("s", AP.STRING), ("t", AP.TENSOR), ("g", AP.GRAPH),
                        ("sparse_tensor", AP.SPARSE_TENSOR), ("tp", AP.TYPE_PROTO)):  # fmt: skip
        if a.HasField(field):
            return kind
    for field, kind in (("floats", AP.FLOATS), ("ints", AP.INTS), ("strings", AP.STRINGS), ("tensors", AP.TENSORS),
                        ("graphs", AP.GRAPHS), ("sparse_tensors", AP.SPARSE_TENSORS), ("type_protos", AP.TYPE_PROTOS)):  # fmt: skip
        if len(getattr(a, field)):
            return kind
    return AP.UNDEFINED


def b64(data: bytes) -> str:
    """Bytes as base64 text (proto remainders kept in string attributes)."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    """The inverse of `b64`."""
    return base64.b64decode(text.encode("ascii"))


def opsets(entries: Iterable[onnx.OperatorSetIdProto]) -> dict[str, int]:
    """Domain -> version of opset entries (`ai.onnx` spelled "")."""
    out: dict[str, int] = {}
    for e in entries:
        out["" if e.domain == "ai.onnx" else e.domain] = int(e.version)
    return out


def substitute(node: onnx.NodeProto, binding: Mapping[str, onnx.AttributeProto], omitted: set[str]) -> onnx.NodeProto:
    """A copy of a function-body node with `ref_attr_name` attributes replaced by the bound values
    (dropped when unbound: the spec treats them as absent) and omitted function inputs as ""."""
    out = onnx.NodeProto()
    out.CopyFrom(node)
    del out.attribute[:]
    for a in node.attribute:
        if a.ref_attr_name:
            bound = binding.get(a.ref_attr_name)
            if bound is None:
                continue
            new = out.attribute.add()
            new.CopyFrom(bound)
            new.name = a.name
            continue
        new = out.attribute.add()
        new.CopyFrom(a)
        if attr_kind(a) == AP.GRAPH:
            new.g.CopyFrom(substitute_graph(a.g, binding, omitted))
        elif attr_kind(a) == AP.GRAPHS:
            for i, g in enumerate(a.graphs):
                new.graphs[i].CopyFrom(substitute_graph(g, binding, omitted))
    for i, name in enumerate(out.input):
        if name in omitted:
            out.input[i] = ""
    return out


def substitute_graph(g: onnx.GraphProto, binding: Mapping[str, onnx.AttributeProto], omitted: set[str]) -> onnx.GraphProto:
    """`substitute` over every node of a subgraph."""
    out = onnx.GraphProto()
    out.CopyFrom(g)
    del out.node[:]
    for n in g.node:
        out.node.append(substitute(n, binding, omitted))
    return out


def location_label(loc: ir.Location) -> tuple[str, str]:
    """(name, kind) of a `loc("name"("kind"))` location, looking through fused/callsite wrappers;
    ("", "") when the location names nothing."""
    try:
        if loc.is_a_name():
            child = loc.child_loc
            kind = child.name_str if child is not None and child.is_a_name() else ""
            return loc.name_str, kind
        if loc.is_a_fused():
            for inner in loc.locations:
                found = location_label(inner)
                if found[0]:
                    return found
        if loc.is_a_callsite():
            return location_label(loc.callee)
    except (AttributeError, TypeError, ValueError):  # pragma: no cover - a location kind without
        pass  # these accessors (unknown, opaque): it names nothing
    return "", ""


def type_proto(t: ir.Type) -> onnx.TypeProto:
    """`types.type_to_proto`, plus the empty shape of rank-0 tensors (which it leaves unset, making
    scalars unranked), also inside sequences, optionals and maps."""
    tp = T.type_to_proto(t)
    _mark_scalars(t, tp)
    return tp


def _mark_scalars(t: ir.Type, tp: onnx.TypeProto) -> None:
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        inner = T.onnx_dialect_type(t)
        shaped = inner[1][0] if inner is not None else t
        if isinstance(shaped, ir.RankedTensorType) and shaped.rank == 0:
            getattr(tp, kind).shape.SetInParent()
        return
    inner = T.onnx_dialect_type(t)
    if inner is None:
        return
    if kind == "sequence_type":
        _mark_scalars(inner[1][0], tp.sequence_type.elem_type)
    elif kind == "optional_type":
        _mark_scalars(inner[1][0], tp.optional_type.elem_type)
    elif kind == "map_type":
        _mark_scalars(inner[1][1], tp.map_type.value_type)


def opset_entries(attr: ir.Attribute) -> list[onnx.OperatorSetIdProto]:
    """The `onnx.opset_import` attribute (`[["", 17], ...]`) as OperatorSetIdProtos."""
    out = []
    for pair in ir.ArrayAttr(attr):
        items = list(ir.ArrayAttr(pair))
        out.append(onnx.helper.make_opsetid(ir.StringAttr(items[0]).value, ir.IntegerAttr(items[1]).value))
    return out
