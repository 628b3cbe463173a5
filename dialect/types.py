"""Types: ONNX element types and TypeProtos to MLIR types, and back.

One table (`ELEMENT_TYPES`) names, for every ONNX `TensorProto.DataType`, its MLIR element type,
its ONNX type-string spelling (as schemas write type constraints: `tensor(float)`) and its numpy
dtype where numpy has one. Everything else here is derived from that table, so adding an element
type is one line.

Non-tensor ONNX types are IRDL types of the `onnx` dialect: `!onnx.seq<T>`, `!onnx.map<K, V>`,
`!onnx.opt<T>`, `!onnx.sparse<tensor<...>>`; ONNX strings are `!onnx.string`. An omitted optional
value has the builtin `none` type. Signed and unsigned integers stay distinct (`i8` vs `ui8`) so
nothing is lost on the way back to ONNX; lowering makes them signless.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from mlir import ir

from onnxc.errors import OnnxcError

try:  # ml_dtypes comes with onnx; it gives numpy spellings of bfloat16 and the float8 types.
    import ml_dtypes
except ImportError:  # pragma: no cover - onnx 1.23 depends on it
    ml_dtypes = None


@dataclass(frozen=True)
class ElementType:
    """One ONNX tensor element type and its spellings elsewhere."""

    onnx_dtype: int  # TensorProto.DataType value
    mlir: str  # MLIR element type, as parsed by ir.Type.parse
    type_str: str  # the spelling in schema type constraints, inside `tensor(...)`
    numpy: str | None  # numpy / ml_dtypes dtype name, None where numpy has no such type


_DT = onnx.TensorProto.DataType
ELEMENT_TYPES: tuple[ElementType, ...] = (
    ElementType(_DT.FLOAT, "f32", "float", "float32"),
    ElementType(_DT.UINT8, "ui8", "uint8", "uint8"),
    ElementType(_DT.INT8, "i8", "int8", "int8"),
    ElementType(_DT.UINT16, "ui16", "uint16", "uint16"),
    ElementType(_DT.INT16, "i16", "int16", "int16"),
    ElementType(_DT.INT32, "i32", "int32", "int32"),
    ElementType(_DT.INT64, "i64", "int64", "int64"),
    ElementType(_DT.STRING, "!onnx.string", "string", "object"),
    ElementType(_DT.BOOL, "i1", "bool", "bool"),
    ElementType(_DT.FLOAT16, "f16", "float16", "float16"),
    ElementType(_DT.DOUBLE, "f64", "double", "float64"),
    ElementType(_DT.UINT32, "ui32", "uint32", "uint32"),
    ElementType(_DT.UINT64, "ui64", "uint64", "uint64"),
    ElementType(_DT.COMPLEX64, "complex<f32>", "complex64", "complex64"),
    ElementType(_DT.COMPLEX128, "complex<f64>", "complex128", "complex128"),
    ElementType(_DT.BFLOAT16, "bf16", "bfloat16", "bfloat16"),
    ElementType(_DT.FLOAT8E4M3FN, "f8E4M3FN", "float8e4m3fn", "float8_e4m3fn"),
    ElementType(_DT.FLOAT8E4M3FNUZ, "f8E4M3FNUZ", "float8e4m3fnuz", "float8_e4m3fnuz"),
    ElementType(_DT.FLOAT8E5M2, "f8E5M2", "float8e5m2", "float8_e5m2"),
    ElementType(_DT.FLOAT8E5M2FNUZ, "f8E5M2FNUZ", "float8e5m2fnuz", "float8_e5m2fnuz"),
    ElementType(_DT.UINT4, "ui4", "uint4", "uint4"),
    ElementType(_DT.INT4, "i4", "int4", "int4"),
    ElementType(_DT.FLOAT4E2M1, "f4E2M1FN", "float4e2m1", "float4_e2m1fn"),
    ElementType(_DT.FLOAT8E8M0, "f8E8M0FNU", "float8e8m0", "float8_e8m0fnu"),
    ElementType(_DT.UINT2, "ui2", "uint2", "uint2"),
    ElementType(_DT.INT2, "i2", "int2", "int2"),
    ElementType(_DT.FLOAT6E2M3, "f6E2M3FN", "float6e2m3", "float6_e2m3fn"),
    ElementType(_DT.FLOAT6E3M2, "f6E3M2FN", "float6e3m2", "float6_e3m2fn"),
)

BY_ONNX: dict[int, ElementType] = {e.onnx_dtype: e for e in ELEMENT_TYPES}
BY_MLIR: dict[str, ElementType] = {e.mlir: e for e in ELEMENT_TYPES}
BY_TYPE_STR: dict[str, ElementType] = {e.type_str: e for e in ELEMENT_TYPES}


class UnsupportedTypeError(OnnxcError, ValueError):
    """An ONNX type (or MLIR type) that has no counterpart on the other side."""


def numpy_dtype(elem: ElementType) -> np.dtype:
    """The numpy dtype holding values of `elem` (ml_dtypes for bfloat16 and the small floats)."""
    if elem.numpy is None:
        raise UnsupportedTypeError(f"element type {elem.type_str} has no numpy dtype")
    if elem.numpy == "object":  # ONNX strings: numpy holds them as Python objects
        return np.dtype(object)
    if hasattr(np, elem.numpy):
        return np.dtype(getattr(np, elem.numpy))
    if ml_dtypes is not None and hasattr(ml_dtypes, elem.numpy):
        return np.dtype(getattr(ml_dtypes, elem.numpy))
    raise UnsupportedTypeError(f"element type {elem.type_str} needs ml_dtypes.{elem.numpy}")


def element_type(onnx_dtype: int) -> ir.Type:
    """The MLIR element type of an ONNX `TensorProto.DataType` (needs an active context)."""
    if onnx_dtype not in BY_ONNX:
        raise UnsupportedTypeError(f"unknown ONNX element type {onnx_dtype}")
    return ir.Type.parse(BY_ONNX[onnx_dtype].mlir)


def onnx_element_type(t: ir.Type) -> ElementType:
    """The ONNX element type of an MLIR element type."""
    key = str(t)
    if key not in BY_MLIR:
        raise UnsupportedTypeError(f"MLIR type {key} is not an ONNX element type")
    return BY_MLIR[key]


def tensor_type(onnx_dtype: int, shape: list[int] | None) -> ir.Type:
    """`tensor<...>` for a shape of static sizes and -1 for unknown dims; None means unranked."""
    elem = element_type(onnx_dtype)
    if shape is None:
        return ir.UnrankedTensorType.get(elem, loc=ir.Location.unknown())
    dyn = ir.ShapedType.get_dynamic_size()
    # The location only serves diagnostics of invalid shapes, which callers rule out first.
    return ir.RankedTensorType.get([dyn if d < 0 else d for d in shape], elem, loc=ir.Location.unknown())


def _wrap(kind: str, inner: ir.Type) -> ir.Type:
    return ir.Type.parse(f"!onnx.{kind}<{inner}>")


def seq_type(elem: ir.Type) -> ir.Type:
    """`!onnx.seq<elem>`."""
    return _wrap("seq", elem)


def opt_type(elem: ir.Type) -> ir.Type:
    """`!onnx.opt<elem>`."""
    return _wrap("opt", elem)


def sparse_type(tensor: ir.Type) -> ir.Type:
    """`!onnx.sparse<tensor<...>>`."""
    return _wrap("sparse", tensor)


def map_type(key: ir.Type, value: ir.Type) -> ir.Type:
    """`!onnx.map<key, value>`."""
    return ir.Type.parse(f"!onnx.map<{key}, {value}>")


def type_from_proto(tp: onnx.TypeProto) -> ir.Type:
    """The MLIR type of an ONNX TypeProto. Dims with dim_param or no value become `?`."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type" or kind == "sparse_tensor_type":
        tt = getattr(tp, kind)
        shape: list[int] | None = None
        if tt.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        t = tensor_type(tt.elem_type, shape)
        return sparse_type(t) if kind == "sparse_tensor_type" else t
    if kind == "sequence_type":
        return seq_type(type_from_proto(tp.sequence_type.elem_type))
    if kind == "optional_type":
        return opt_type(type_from_proto(tp.optional_type.elem_type))
    if kind == "map_type":
        key = element_type(tp.map_type.key_type)
        return map_type(key, type_from_proto(tp.map_type.value_type))
    raise UnsupportedTypeError(f"TypeProto with no type ({kind!r})")


def split_params(body: str) -> list[str]:
    """Split `a, b<c, d>` at top-level commas."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i].strip())
            start = i + 1
    parts.append(body[start:].strip())
    return parts


def onnx_dialect_type(t: ir.Type) -> tuple[str, list[ir.Type]] | None:
    """(`seq`, [elem]) for `!onnx.seq<elem>` and so on; None for other types."""
    text = str(t)
    if not text.startswith("!onnx.") or "<" not in text:
        return None
    kind = text[len("!onnx.") : text.index("<")]
    params = split_params(text[text.index("<") + 1 : -1])
    return kind, [ir.Type.parse(p) for p in params]


def type_to_proto(t: ir.Type) -> onnx.TypeProto:
    """The ONNX TypeProto of an MLIR type (the inverse of `type_from_proto`, dim names aside)."""
    tp = onnx.TypeProto()
    wrapped = onnx_dialect_type(t)
    if wrapped is not None:
        kind, params = wrapped
        if kind == "seq":
            tp.sequence_type.elem_type.CopyFrom(type_to_proto(params[0]))
        elif kind == "opt":
            tp.optional_type.elem_type.CopyFrom(type_to_proto(params[0]))
        elif kind == "map":
            tp.map_type.key_type = onnx_element_type(params[0]).onnx_dtype
            tp.map_type.value_type.CopyFrom(type_to_proto(params[1]))
        elif kind == "sparse":
            dense = type_to_proto(params[0]).tensor_type
            tp.sparse_tensor_type.elem_type = dense.elem_type
            if dense.HasField("shape"):
                tp.sparse_tensor_type.shape.CopyFrom(dense.shape)
        else:
            raise UnsupportedTypeError(f"unknown onnx type {t}")
        return tp
    if isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)):
        st = t
        tp.tensor_type.elem_type = onnx_element_type(st.element_type).onnx_dtype
        if st.has_rank:
            shape = tp.tensor_type.shape
            shape.SetInParent()  # a rank-0 shape has no dims but is still a known shape
            for d in st.shape:
                dim = shape.dim.add()
                if d >= 0 and not ir.ShapedType.is_dynamic_size(d):
                    dim.dim_value = d
        return tp
    raise UnsupportedTypeError(f"MLIR type {t} has no ONNX counterpart")


def type_string(t: ir.Type) -> str:
    """The schema spelling of a value's type (`tensor(float)`, `seq(tensor(int64))`, `map(int64, float)`).

    Map values in schemas are written with bare element types (`map(int64, float)`), so a map's
    value tensor is spelled by its element type alone.
    """
    wrapped = onnx_dialect_type(t)
    if wrapped is not None:
        kind, params = wrapped
        if kind == "seq":
            return f"seq({type_string(params[0])})"
        if kind == "opt":
            return f"optional({type_string(params[0])})"
        if kind == "sparse":
            return "sparse_" + type_string(params[0])
        if kind == "map":
            value = type_string(params[1])
            if value.startswith("tensor("):
                value = value[len("tensor(") : -1]
            return f"map({onnx_element_type(params[0]).type_str}, {value})"
    if isinstance(t, ir.NoneType):
        return "none"
    if isinstance(t, ir.RankedTensorType) or isinstance(t, ir.UnrankedTensorType):
        return f"tensor({onnx_element_type(t.element_type).type_str})"
    if str(t) in BY_MLIR:  # a bare element type (map keys)
        return BY_MLIR[str(t)].type_str
    raise UnsupportedTypeError(f"MLIR type {t} has no ONNX counterpart")


def type_from_string(type_str: str, shape: list[int] | None = None) -> ir.Type:
    """An MLIR type for a schema type string (`tensor(float)` -> `tensor<...xf32>`, `seq(...)`,
    `optional(...)`, `map(int64, float)`); tensors get `shape` (None: unranked)."""
    s = type_str.strip()
    head, _, rest = s.partition("(")
    body = rest[:-1] if rest.endswith(")") else rest
    if head == "tensor" or head == "sparse_tensor":
        if body not in BY_TYPE_STR:
            raise UnsupportedTypeError(f"unknown element type in {type_str!r}")
        t = tensor_type(BY_TYPE_STR[body].onnx_dtype, shape)
        return sparse_type(t) if head == "sparse_tensor" else t
    if head == "seq":
        return seq_type(type_from_string(body, shape))
    if head == "optional":
        return opt_type(type_from_string(body, shape))
    if head == "map":
        key, value = split_params(body.replace("(", "<").replace(")", ">"))
        value = value.replace("<", "(").replace(">", ")")
        value_type = type_from_string(value if "(" in value else f"tensor({value})", None)
        return map_type(element_type(BY_TYPE_STR[key].onnx_dtype), value_type)
    raise UnsupportedTypeError(f"cannot read type string {type_str!r}")
