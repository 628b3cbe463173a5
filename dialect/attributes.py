"""ONNX attribute values <-> MLIR attributes, keyed by the schema's attribute kind.

The spelling (see DEVELOPERS.md): INT -> `i64` integer, FLOAT -> `f32` float, STRING -> string,
INTS -> `array<i64: ...>`, FLOATS -> `array<f32: ...>`, STRINGS -> array of strings, TENSOR ->
elements attribute, TENSORS -> array of those, TYPE_PROTO -> type, TYPE_PROTOS -> array of types.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from mlir import ir

from onnxc.errors import OnnxcError


class AttributeKindError(OnnxcError, ValueError):
    """A Python value that does not fit the attribute kind the schema asks for."""


def to_mlir(kind: str, value: Any) -> ir.Attribute:
    """An MLIR attribute for a plain Python value of an ONNX attribute kind."""
    if isinstance(value, ir.Attribute):
        return value
    if kind == "INT":
        if isinstance(value, (bool, np.bool_)):
            value = int(value)
        if not isinstance(value, (int, np.integer)):
            raise AttributeKindError(f"expected an integer, got {type(value).__name__}")
        if not -(2**63) <= int(value) < 2**63:
            raise AttributeKindError(f"integer {value} does not fit in 64 bits")
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))
    if kind == "FLOAT":
        if not isinstance(value, (int, float, np.floating, np.integer)):
            raise AttributeKindError(f"expected a float, got {type(value).__name__}")
        return ir.FloatAttr.get(ir.F32Type.get(), float(np.float32(value)))
    if kind == "STRING":
        if isinstance(value, bytes):
            value = value.decode("utf-8", "surrogateescape")
        if not isinstance(value, str):
            raise AttributeKindError(f"expected a string, got {type(value).__name__}")
        return ir.StringAttr.get(value)
    if kind == "INTS":
        ints = [int(v) for v in _seq(value, (int, np.integer, bool))]
        if any(not -(2**63) <= v < 2**63 for v in ints):
            raise AttributeKindError("an integer does not fit in 64 bits")
        return ir.DenseI64ArrayAttr.get(ints)
    if kind == "FLOATS":
        return ir.DenseF32ArrayAttr.get([float(np.float32(v)) for v in _seq(value, (int, float, np.floating, np.integer))])
    if kind == "STRINGS":
        return ir.ArrayAttr.get([to_mlir("STRING", v) for v in _seq(value, (str, bytes))])
    if kind == "TENSOR":
        if isinstance(value, np.ndarray):
            return ir.DenseElementsAttr.get(np.ascontiguousarray(value))
        raise AttributeKindError(f"expected a tensor, got {type(value).__name__}")
    if kind == "TENSORS":
        return ir.ArrayAttr.get([to_mlir("TENSOR", v) for v in _seq(value, (np.ndarray, ir.Attribute))])
    if kind == "TYPE_PROTO":
        if isinstance(value, ir.Type):
            return ir.TypeAttr.get(value)
        raise AttributeKindError(f"expected a type, got {type(value).__name__}")
    if kind == "TYPE_PROTOS":
        return ir.ArrayAttr.get([to_mlir("TYPE_PROTO", v) for v in _seq(value, (ir.Type, ir.Attribute))])
    raise AttributeKindError(f"attribute kind {kind} has no MLIR attribute (GRAPH attributes are regions)")


def _seq(value: Any, item_types: tuple[type, ...]) -> Sequence[Any]:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise AttributeKindError(f"expected a list, got {type(value).__name__}")
    for v in value:
        if not isinstance(v, item_types):
            raise AttributeKindError(f"list element {v!r} has the wrong type")
    return value


def kind_of(attr: ir.Attribute) -> str | None:
    """The ONNX attribute kind an MLIR attribute spells, or None if it spells none."""
    if isinstance(attr, ir.IntegerAttr):
        return "INT"
    if isinstance(attr, ir.FloatAttr):
        return "FLOAT"
    if isinstance(attr, ir.StringAttr):
        return "STRING"
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return "INTS"
    if isinstance(attr, ir.DenseF32ArrayAttr):
        return "FLOATS"
    if isinstance(attr, ir.TypeAttr):
        return "TYPE_PROTO"
    if isinstance(attr, ir.ArrayAttr):
        items = list(attr)
        if not items:
            return "EMPTY_LIST"  # fits any list kind
        kinds = {kind_of(a) for a in items}
        if kinds == {"STRING"}:
            return "STRINGS"
        if kinds == {"TENSOR"}:
            return "TENSORS"
        if kinds == {"TYPE_PROTO"}:
            return "TYPE_PROTOS"
        return None
    if isinstance(attr, (ir.DenseElementsAttr, ir.DenseResourceElementsAttr)):
        return "TENSOR"
    # Sparse and resource elements attributes are not downcast to a Python class in LLVM 22's
    # bindings; their type (a tensor type) says what they are.
    if isinstance(attr, ir.Attribute) and _is_elements_attr(attr):
        return "TENSOR"
    return None


def _is_elements_attr(attr: ir.Attribute) -> bool:
    """Resource, sparse and string (`tensor<...x!onnx.string>`) elements attributes, which the
    bindings leave as plain `Attribute`s: among builtin attributes exactly the elements
    attributes (dense, dense_resource, sparse) have a shaped type, and untyped attributes report
    the none type, so the attribute's type decides without printing it."""
    return isinstance(attr.type, ir.ShapedType)


# Attributes MLIR's structure needs that are not ONNX attributes (IRDL's variadic segments).
STRUCTURAL_ATTRIBUTES = frozenset({"operandSegmentSizes", "resultSegmentSizes"})


def onnx_attributes(op: ir.Operation | ir.OpView) -> dict[str, ir.Attribute]:
    """An op's ONNX attributes: without discardable (`onnx.name`-style, dotted) and structural ones."""
    return {k: v for k, v in op.operation.attributes.items() if "." not in k and k not in STRUCTURAL_ATTRIBUTES}


def from_mlir(attr: ir.Attribute) -> Any:
    """A plain Python value for an MLIR attribute of an ONNX attribute kind (tensors as numpy)."""
    kind = kind_of(attr)
    if kind == "INT":
        return attr.value
    if kind == "FLOAT":
        return attr.value
    if kind == "STRING":
        return attr.value
    if kind == "INTS":
        return list(attr)
    if kind == "FLOATS":
        return list(attr)
    if kind in ("STRINGS", "TENSORS", "TYPE_PROTOS", "EMPTY_LIST"):
        return [from_mlir(a) for a in attr]
    if kind == "TYPE_PROTO":
        return attr.value
    if kind == "TENSOR" and isinstance(attr, ir.DenseElementsAttr):
        return np.array(attr)
    return attr
