"""ONNX tensors <-> numpy arrays <-> MLIR elements attributes, for every element type of the spec.

Import: `tensor_to_numpy` reads a `TensorProto` (raw_data, the typed fields, or external data)
into a numpy array of the element type's numpy/ml_dtypes dtype; `tensor_to_attribute` turns it
into the attribute an `onnx.constant` or an initializer carries. Export: `attribute_to_tensor` and
`numpy_to_tensor` go back. `sparse_tensor_to_attribute` / `attribute_to_sparse_tensor` do the same
for `SparseTensorProto`.

Decisions (and why):

* **Layout in MLIR.** MLIR keeps every element of a sub-byte type (`i4`, `ui2`, `f4E2M1FN`,
  `f6E2M3FN`) in its own byte, while ONNX packs them (two 4-bit, four 2-bit, four 6-bit per three
  bytes, LSB first). They are unpacked on import and packed again on export; that is the one copy
  this module makes of data that is not in the proto already. `bool` is one byte per element in
  ONNX and in resource blobs, and bit-packed in `DenseElementsAttr` (the bindings' convention).
* **Small tensors** (at most `resource_threshold` bytes) become `DenseElementsAttr`, which folding
  passes read directly. **Large tensors** become `dense_resource<name>` blobs built over the numpy
  array itself (`DenseResourceElementsAttr.get_from_buffer`): no copy into MLIR's uniqued storage,
  and for external data the array is a view into the file's memory map, so the weights are never
  copied at all. The blob owns a reference to the array, so the map stays alive as long as the
  attribute's context uses it. A misaligned view (an external offset that is not a multiple of the
  element size) is copied once into aligned memory, because MLIR reads blobs as typed arrays.
* **Strings** become MLIR's dense string elements with the `!onnx.string` element type:
  `dense<["a", "b"]> : tensor<2x!onnx.string>`. MLIR strings are byte strings, so values that are
  not UTF-8 survive the round trip (the validator reports them; the data is still kept exactly).
* **Sparse tensors** become MLIR's `sparse<indices, values>` attribute (indices as `[NNZ, rank]`
  coordinates; ONNX's linearized `[NNZ]` indices are converted). Empty ones are `sparse<>`.
* **Reading attributes back.** The Python bindings cannot export the buffer of a
  `DenseElementsAttr` of `bf16`, `f8*`, `i4`, complex, nor read string elements or resource blobs.
  The raw data and string elements are read through the MLIR C API (`mlirDenseElementsAttrGetRawData`,
  `mlirDenseElementsAttrGetStringValue`) with ctypes, after checking the attribute's kind (a wrong
  cast is a C++ assertion). Resource blobs made here are found again in a registry keyed by
  (context, resource name) that holds weak references; blobs from parsed IR are read from the
  printed `dialect_resources` section.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import re
import sys
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from mlir import ir

from onnxc.dialect.types import BY_MLIR, BY_ONNX, ElementType, numpy_dtype
from onnxc.importers.errors import ImportError_
from onnxc.importers.external_data import read_external, uses_external_data

_DT = onnx.TensorProto
# Sub-byte element types: bits per element as ONNX packs them.
PACKED_BITS: dict[int, int] = {
    _DT.INT4: 4, _DT.UINT4: 4, _DT.FLOAT4E2M1: 4,
    _DT.INT2: 2, _DT.UINT2: 2,
    _DT.FLOAT6E2M3: 6, _DT.FLOAT6E3M2: 6,
}  # fmt: skip
# Which typed field holds each element type's values (onnx.proto); everything else uses int32_data.
_TYPED_FIELD: dict[int, str] = {
    _DT.FLOAT: "float_data", _DT.COMPLEX64: "float_data",
    _DT.DOUBLE: "double_data", _DT.COMPLEX128: "double_data",
    _DT.INT64: "int64_data",
    _DT.UINT32: "uint64_data", _DT.UINT64: "uint64_data",
    _DT.STRING: "string_data",
}  # fmt: skip
_DATA_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
# Allowed int32_data values per type: plain integers in their own range, bit patterns (float16,
# float8, packed sub-byte bytes) as their unsigned or sign-extended spelling.
_INT32_RANGE: dict[int, tuple[int, int]] = {
    _DT.INT8: (-(2**7), 2**7 - 1), _DT.UINT8: (0, 2**8 - 1),
    _DT.INT16: (-(2**15), 2**15 - 1), _DT.UINT16: (0, 2**16 - 1),
    _DT.INT32: (-(2**31), 2**31 - 1), _DT.BOOL: (0, 1),
    _DT.FLOAT16: (-(2**15), 2**16 - 1), _DT.BFLOAT16: (-(2**15), 2**16 - 1),
    _DT.FLOAT6E2M3: (0, 63), _DT.FLOAT6E3M2: (0, 63),
}  # fmt: skip
_BYTE_RANGE = (-(2**7), 2**8 - 1)  # float8 bit patterns, packed 4-bit and 2-bit bytes
# Dims beyond this cannot be an MLIR static size (int64 with room for the dynamic marker).
MAX_DIM = 2**62


def _label(tensor: onnx.TensorProto | onnx.SparseTensorProto | None, name: str | None = None) -> str:
    n = name if name is not None else getattr(tensor, "name", "")
    return f"tensor '{n}'" if n else "an unnamed tensor"


def _fail(label: str, why: str) -> ImportError_:
    return ImportError_(f"invalid data in {label}", [f"{label[0].upper()}{label[1:]} {why}."])


def _elem(onnx_dtype: int, label: str) -> ElementType:
    if onnx_dtype not in BY_ONNX:
        name = _DT.DataType.Name(onnx_dtype) if onnx_dtype in _DT.DataType.values() else str(onnx_dtype)
        raise _fail(label, f"has element type {name}, which is not a tensor element type of the ONNX spec")
    return BY_ONNX[onnx_dtype]


def element_count(dims: Any, label: str) -> int:
    """The number of elements of a shape, refusing negative and unrepresentable dims."""
    n = 1
    for d in dims:
        d = int(d)
        if d < 0:
            raise _fail(label, f"has a negative dimension {d} in its shape {list(dims)}")
        if d > MAX_DIM:
            raise _fail(label, f"has dimension {d} in its shape {list(dims)}, larger than onnxc can represent")
        n *= d
    return n


def packed_size(onnx_dtype: int, count: int) -> int:
    """Bytes that `count` elements take in raw_data (packing sub-byte types as the spec says)."""
    bits = PACKED_BITS.get(onnx_dtype)
    if bits is not None:
        return (count * bits + 7) // 8
    return count * numpy_dtype(BY_ONNX[onnx_dtype]).itemsize


def _le(buf: Any, dtype: np.dtype) -> np.ndarray:
    """A view of little-endian bytes as `dtype` (a swapped copy on big-endian hosts only)."""
    raw = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    if sys.byteorder == "little" or dtype.itemsize == 1:
        return raw.view(dtype)
    unit = dtype.itemsize if dtype.kind != "c" else dtype.itemsize // 2
    uint = np.dtype(f"<u{unit}")
    return raw.view(uint).astype(uint.newbyteorder("=")).view(dtype)


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Unpack `count` codes of `bits` (2, 4 or 6) from LSB-first packed bytes into one byte each."""
    packed = np.asarray(packed, dtype=np.uint8).reshape(-1)
    if bits in (2, 4):
        shifts = np.arange(0, 8, bits, dtype=np.uint8)
        out = (packed[:, None] >> shifts[None, :]) & np.uint8((1 << bits) - 1)
        return out.reshape(-1)[:count]
    if bits == 6:
        groups = -(-count // 4)
        buf = np.zeros(groups * 3, dtype=np.uint8)
        buf[: min(packed.size, buf.size)] = packed[: buf.size]
        b0, b1, b2 = buf[0::3], buf[1::3], buf[2::3]
        out = np.empty((groups, 4), dtype=np.uint8)
        out[:, 0] = b0 & 0x3F
        out[:, 1] = (b0 >> 6) | ((b1 & 0x0F) << 2)
        out[:, 2] = (b1 >> 4) | ((b2 & 0x03) << 4)
        out[:, 3] = b2 >> 2
        return out.reshape(-1)[:count]
    raise ValueError(f"cannot unpack {bits}-bit codes")


def pack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack one-byte codes of `bits` (2, 4 or 6) LSB first, as ONNX raw_data stores them."""
    codes = np.asarray(codes).reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
    n = codes.size
    if bits in (2, 4):
        per = 8 // bits
        padded = np.zeros(-(-n // per) * per, dtype=np.uint8)
        padded[:n] = codes
        groups = padded.reshape(-1, per)
        out = np.zeros(groups.shape[0], dtype=np.uint8)
        for i in range(per):
            out |= groups[:, i] << np.uint8(i * bits)
        return out
    if bits == 6:
        padded = np.zeros(-(-n // 4) * 4, dtype=np.uint8)
        padded[:n] = codes
        v0, v1, v2, v3 = padded[0::4], padded[1::4], padded[2::4], padded[3::4]
        out = np.empty((v0.size, 3), dtype=np.uint8)
        out[:, 0] = v0 | ((v1 & 0x03) << 6)
        out[:, 1] = (v1 >> 2) | ((v2 & 0x0F) << 4)
        out[:, 2] = (v2 >> 4) | (v3 << 2)
        return out.reshape(-1)[: (n * 6 + 7) // 8]
    raise ValueError(f"cannot pack {bits}-bit codes")


def _reshape(flat: np.ndarray, dims: list[int], label: str) -> np.ndarray:
    try:
        return flat.reshape(dims)
    except ValueError as e:  # numpy refuses shapes whose byte size overflows even when empty
        raise _fail(label, f"has a shape {dims} numpy cannot represent ({e})") from None


def check_tensor(tensor: onnx.TensorProto, raw: bytes | None = None) -> tuple[ElementType, list[int], int]:
    """(element type, dims, element count) of a tensor after the checks that need no data file:
    a spec element type, dims >= 0, one data source, and in-proto data of the right size and field.

    `raw`: the tensor's raw_data when the caller has already fetched it. Each access of
    `tensor.raw_data` copies the bytes out of the protobuf (about 0.5 s of BERT-base's import
    went to fetching every weight twice, once here for its length and once to read it).

    Raises `ImportError_` naming the tensor. External data sizes are checked when the file is read.
    """
    label = _label(tensor)
    if tensor.HasField("segment"):
        raise _fail(label, "is stored in segments, which the ONNX spec leaves undefined and onnxc does not read")
    elem = _elem(tensor.data_type, label)
    dims = [int(d) for d in tensor.dims]
    count = element_count(dims, label)
    dt = tensor.data_type
    present = [f for f in _DATA_FIELDS if len(getattr(tensor, f))]
    external = uses_external_data(tensor)
    has_raw = tensor.HasField("raw_data")
    sources = present + (["raw_data"] if has_raw else []) + (["external data"] if external else [])
    if len(sources) > 1:
        raise _fail(label, f"holds its values in more than one place ({', '.join(sources)})")
    if dt == _DT.STRING:
        if has_raw or external:
            raise _fail(label, "is a string tensor with raw or external data; strings must be in string_data")
        if len(tensor.string_data) != count:
            raise _fail(label, f"has {len(tensor.string_data)} strings for shape {dims} ({count} elements)")
        return elem, dims, count
    if external:
        return elem, dims, count
    if has_raw:
        need = packed_size(dt, count)
        size = len(raw if raw is not None else tensor.raw_data)
        if size != need:
            raise _fail(label, f"has {size} bytes in raw_data, but shape {dims} of {elem.type_str} needs {need}")
        return elem, dims, count
    field = _TYPED_FIELD.get(dt, "int32_data")
    wrong = [f for f in present if f != field]
    if wrong:
        raise _fail(label, f"of type {elem.type_str} holds its values in {wrong[0]}; that type uses {field} or raw_data")
    have = len(getattr(tensor, field))
    bits = PACKED_BITS.get(dt)
    if field == "int32_data" and bits in (2, 4):
        want = -(-count // (8 // bits))
    else:
        want = count * (2 if dt in (_DT.COMPLEX64, _DT.COMPLEX128) else 1)
    if have != want:
        raise _fail(label, f"has {have} {field} entries for shape {dims} of {elem.type_str} ({want} expected)")
    return elem, dims, count


def tensor_to_numpy(tensor: onnx.TensorProto, base_dir: Path | None) -> np.ndarray:
    """The values of an ONNX tensor as a numpy array of its element type's dtype.

    Strings come back as an object array of `bytes` (exactly what the proto holds). Raw and
    external data are zero-copy views (read-only) unless unpacking or a big-endian host forces a
    copy. Every inconsistency (unknown type, data of the wrong size or in the wrong field, external
    data outside the model's folder) raises `ImportError_` naming the tensor.
    """
    label = _label(tensor)
    has_raw = tensor.HasField("raw_data")
    raw = tensor.raw_data if has_raw else None  # fetched once: each access copies (check_tensor)
    elem, dims, count = check_tensor(tensor, raw)
    dt = tensor.data_type
    external = uses_external_data(tensor)
    if dt == _DT.STRING:
        out = np.empty(count, dtype=object)
        out[:] = list(tensor.string_data)
        return _reshape(out, dims, label)
    dtype = numpy_dtype(elem)
    bits = PACKED_BITS.get(dt)
    if has_raw or external:
        buf = read_external(tensor, base_dir) if external else np.frombuffer(raw, dtype=np.uint8)
        need = packed_size(dt, count)
        where = "its external data" if external else "raw_data"
        if buf.size != need:
            raise _fail(label, f"has {buf.size} bytes in {where}, but shape {dims} of {elem.type_str} needs {need}")
        if bits is not None:
            flat = unpack_bits(buf, bits, count).view(dtype)
        else:
            flat = _le(buf, dtype)
        if dt == _DT.BOOL and count and int(buf.max()) > 1:
            raise _fail(label, f"has a bool byte {int(buf.max())} in {where}; bools must be 0 or 1")
        return _reshape(flat, dims, label)
    field = _TYPED_FIELD.get(dt, "int32_data")
    values = getattr(tensor, field)  # its size was checked by check_tensor
    if field == "int32_data":
        stored = np.array(values, dtype=np.int64)
        lo, hi = _INT32_RANGE.get(dt, _BYTE_RANGE)
        if stored.size and (stored.min() < lo or stored.max() > hi):
            bad = int(stored[(stored < lo) | (stored > hi)][0])
            raise _fail(label, f"of type {elem.type_str} has the value {bad} in int32_data, outside [{lo}, {hi}]")
        if bits in (2, 4):
            flat = unpack_bits((stored & 0xFF).astype(np.uint8), bits, count).view(dtype)
        else:
            if dtype.kind in "iub" and dtype.itemsize >= 1 and dt not in PACKED_BITS and dtype != np.dtype(bool):
                flat = stored.astype(dtype)
            else:  # bit patterns (float16, bfloat16, float8, float6) and bool
                unit = np.dtype(f"u{dtype.itemsize}")
                flat = (stored & ((1 << (8 * dtype.itemsize)) - 1)).astype(unit).view(dtype)
        return _reshape(flat, dims, label)
    per = 2 if dt in (_DT.COMPLEX64, _DT.COMPLEX128) else 1
    if field == "uint64_data" and dt == _DT.UINT32 and len(values) and max(values) >= 2**32:
        raise _fail(label, f"of type uint32 has the value {max(values)} in uint64_data, outside [0, {2**32 - 1}]")
    if per == 2:
        part = np.float32 if dt == _DT.COMPLEX64 else np.float64
        flat = np.array(values, dtype=part).view(dtype)
    else:
        flat = np.array(values, dtype=dtype)
    return _reshape(flat, dims, label)


# ---------------------------------------------------------------------------------------------
# numpy -> MLIR attributes


def _escape(value: bytes | str) -> str:
    """An MLIR string literal for arbitrary bytes (every byte outside printable ASCII as \\XX)."""
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    out = ['"']
    for b in data:
        if 0x20 <= b < 0x7F and b not in (0x22, 0x5C):
            out.append(chr(b))
        else:
            out.append(f"\\{b:02X}")
    out.append('"')
    return "".join(out)


def _nested(flat: list[str], shape: tuple[int, ...]) -> str:
    """A nested list literal of already-formatted elements in row-major order."""
    if not shape:
        return flat[0]
    if shape[0] == 0:
        return "[]"
    step = len(flat) // shape[0] if shape[0] else 0
    return "[" + ", ".join(_nested(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"


def _shaped_type(onnx_dtype: int, shape: tuple[int, ...]) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), ir.Type.parse(BY_ONNX[onnx_dtype].mlir))


def _coerce(array: np.ndarray, onnx_dtype: int, label: str) -> np.ndarray:
    """`array` in the numpy dtype of `onnx_dtype` (a no-copy view when only the spelling differs)."""
    dtype = numpy_dtype(BY_ONNX[onnx_dtype])
    array = np.asarray(array)
    if array.dtype == dtype:
        return array
    if array.dtype == object or array.dtype.kind in "SU":
        raise _fail(label, f"holds {array.dtype} values where {BY_ONNX[onnx_dtype].type_str} was expected")
    return array.astype(dtype)


_RES_LOCK = threading.Lock()
_RES_COUNTER = itertools.count()
# (context pointer, resource name) -> the exact buffer object handed to MLIR for that blob. Weak:
# the blob owns the buffer; when the context drops the blob the entry disappears with it.
_RESOURCES: "weakref.WeakValueDictionary[tuple[int, str], np.ndarray]" = weakref.WeakValueDictionary()


def _capi_pointer(obj: Any, kind: str) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get(obj._CAPIPtr, f"mlir.ir.{kind}._CAPIPtr".encode()))


def _resource_name(name: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", name)[:48] or "tensor"
    if not base[0].isalpha() and base[0] != "_":
        base = "t_" + base
    return f"{base}_{next(_RES_COUNTER)}"


#: Blobs of at least this many bytes that onnxc computed itself (packed or transposed weights,
#: folded constants: arrays that own their memory) are placed at a multiple of `BLOB_ALIGNMENT`.
BLOB_ALIGNMENT = 64
ALIGN_MIN_BYTES = 1024


def aligned_empty(shape: Sequence[int], dtype: np.dtype[Any] | type, alignment: int) -> np.ndarray:
    """An uninitialized C-order array of ``shape`` whose address is a multiple of ``alignment``:
    an array computed into it (a packed weight) becomes a blob without another copy."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    offset = (-raw.ctypes.data) % alignment
    return raw[offset : offset + nbytes].view(dt).reshape(tuple(shape))


def aligned_copy(array: np.ndarray, alignment: int) -> np.ndarray:
    """``array``'s bytes (C order) in a new uint8 buffer whose address is a multiple of
    ``alignment``."""
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    out = aligned_empty((flat.nbytes,), np.uint8, alignment)
    out[...] = flat
    return out


def _numpy_owned(array: np.ndarray) -> bool:
    """Whether ``array``'s memory was allocated by numpy (a computed array or a view of one), not
    borrowed from another object (the bytes of a protobuf, a memory map)."""
    root: Any = array
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    return isinstance(root, np.ndarray)


def _resource_attr(array: np.ndarray, onnx_dtype: int, name: str) -> ir.Attribute:
    """A `dense_resource` blob over `array`'s own memory (aligned; copied only if it is not).

    Arrays that own their memory (computed by onnxc: packed weights, transposed filters, folded
    constants) and are large go to a cache-line boundary (`BLOB_ALIGNMENT`): numpy aligns to
    16 bytes, and the CPU target's code reads these weights in place (targets/cpu/weights.py)
    with 64-byte vector loads, which straddled two cache lines each (SqueezeNet: 13.1 ms per run,
    10.9 with the weights aligned). Views of a model's own bytes (initializers read from the
    protobuf) are not copied: that would double a large model's memory during import."""
    dtype = array.dtype
    align = dtype.itemsize // 2 if dtype.kind == "c" else max(dtype.itemsize, 1)
    buf = np.ascontiguousarray(array)
    if buf.nbytes >= ALIGN_MIN_BYTES and buf.ctypes.data % BLOB_ALIGNMENT and _numpy_owned(buf):
        raw = aligned_copy(buf, BLOB_ALIGNMENT)  # a fresh array: the copy replaces it
        align = max(align, BLOB_ALIGNMENT)
    else:
        if buf.ctypes.data % align:
            buf = buf.copy()  # numpy allocations are aligned for their dtype
        raw = buf.reshape(-1).view(np.uint8)
    ctx = ir.Context.current
    shaped = _shaped_type(onnx_dtype, array.shape)
    attr = ir.DenseResourceElementsAttr.get_from_buffer(raw, _resource_name(name), shaped, alignment=align)
    text = str(attr)
    actual = text[len("dense_resource<") : text.index(">")]
    with _RES_LOCK:
        _RESOURCES[(_capi_pointer(ctx, "Context"), actual)] = raw
    return attr


def array_to_attribute(
    array: np.ndarray, onnx_dtype: int, *, name: str = "", resource_threshold: int = 1024
) -> ir.Attribute:
    """An MLIR elements attribute of type `tensor<shape x onnx type>` holding `array`'s values.

    Needs an active context. Above `resource_threshold` bytes the result is a `dense_resource`
    blob over the array itself (not copied); strings are dense string elements.
    """
    label = _label(None, name)
    elem = _elem(onnx_dtype, label)
    if onnx_dtype == _DT.STRING:
        array = np.asarray(array, dtype=object)
        flat = []
        for v in array.reshape(-1):
            if not isinstance(v, (bytes, str, np.bytes_, np.str_)):
                raise _fail(label, f"holds a {type(v).__name__} where a string was expected")
            flat.append(_escape(v))
        body = _nested(flat, array.shape) if array.size else ""
        return ir.Attribute.parse(f"dense<{body}> : {_shaped_type(onnx_dtype, array.shape)}")
    array = _coerce(array, onnx_dtype, label)
    # Complex tensors are always blobs: the LLVM 22 bindings cannot downcast a DenseElementsAttr
    # of complex<f32|f64>, and touching one through `op.attributes` raises TypeError or, while
    # iterating an op's attributes, aborts the process (the import fuzzer found a complex64
    # initializer doing that in the verifier). `dense_resource` is never downcast that way.
    if array.size and (array.nbytes > resource_threshold or onnx_dtype in (_DT.COMPLEX64, _DT.COMPLEX128)):
        return _resource_attr(array, onnx_dtype, name or "tensor")
    shaped = _shaped_type(onnx_dtype, array.shape)
    if onnx_dtype == _DT.BOOL:
        packed = np.packbits(np.ascontiguousarray(array).reshape(-1), bitorder="little")
        return ir.DenseElementsAttr.get(packed, type=shaped.element_type, shape=list(array.shape))
    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    if elem.onnx_dtype in PACKED_BITS:  # MLIR keeps only the low bits; keep them canonical
        raw = raw & np.uint8((1 << PACKED_BITS[elem.onnx_dtype]) - 1)
    return ir.DenseElementsAttr.get(raw, type=shaped)


def tensor_to_attribute(tensor: onnx.TensorProto, base_dir: Path | None, *, resource_threshold: int) -> ir.Attribute:
    """The MLIR attribute of an ONNX tensor: dense elements, a `dense_resource` blob above
    `resource_threshold` bytes, or dense string elements. Needs an active context."""
    array = tensor_to_numpy(tensor, base_dir)
    return array_to_attribute(array, tensor.data_type, name=tensor.name, resource_threshold=resource_threshold)


def sparse_tensor_to_attribute(sp: onnx.SparseTensorProto, base_dir: Path | None) -> ir.Attribute:
    """MLIR `sparse<indices, values> : tensor<dims x type>` for an ONNX sparse tensor.

    ONNX indices are `[NNZ, rank]` coordinates or `[NNZ]` linear positions; both are checked to lie
    inside `dims` (MLIR would otherwise read out of bounds) and written as coordinates.
    """
    name = sp.values.name or sp.indices.name
    label = f"sparse tensor '{name}'" if name else "an unnamed sparse tensor"
    dims = [int(d) for d in sp.dims]
    total = element_count(dims, label)
    if not dims:
        raise _fail(label, "has no dims; a sparse tensor needs rank 1 or more")
    values = tensor_to_numpy(sp.values, base_dir)
    if values.ndim != 1:
        raise _fail(label, f"has values of shape {list(values.shape)}; they must be one-dimensional [NNZ]")
    nnz = values.shape[0]
    if sp.indices.data_type != _DT.INT64:
        raise _fail(label, "has indices that are not int64")
    idx = tensor_to_numpy(sp.indices, base_dir).astype(np.int64, copy=False)
    rank = len(dims)
    if idx.shape == (nnz,):
        if nnz and (idx.min() < 0 or idx.max() >= total):
            raise _fail(label, f"has a linear index outside [0, {total}) for shape {dims}")
        coords = np.stack(np.unravel_index(idx, dims), axis=1) if nnz else np.zeros((0, rank), np.int64)
    elif idx.shape == (nnz, rank):
        coords = idx
        if nnz and ((coords < 0).any() or (coords >= np.array(dims)).any()):
            raise _fail(label, f"has an index outside shape {dims}")
    else:
        raise _fail(label, f"has indices of shape {list(idx.shape)}; [{nnz}] or [{nnz}, {rank}] expected")
    shaped = _shaped_type(sp.values.data_type, tuple(dims))
    if nnz == 0:
        return ir.Attribute.parse(f"sparse<> : {shaped}")
    index_text = _nested([str(int(v)) for v in coords.reshape(-1)], coords.shape)
    dt = sp.values.data_type
    if dt == _DT.STRING:
        value_text = _nested([_escape(v) for v in values], values.shape)
    elif dt == _DT.BOOL:
        value_text = _nested(["true" if v else "false" for v in values], values.shape)
    else:
        raw = np.ascontiguousarray(_coerce(values, dt, label)).view(np.uint8).reshape(-1)
        if dt in PACKED_BITS:
            raw = raw & np.uint8((1 << PACKED_BITS[dt]) - 1)
        value_text = '"0x' + raw.tobytes().hex().upper() + '"'
    try:
        return ir.Attribute.parse(f"sparse<{index_text}, {value_text}> : {shaped}")
    except (ir.MLIRError, ValueError) as e:
        raise _fail(label, f"cannot be represented in MLIR ({str(e).splitlines()[-1][:200]})") from None


# ---------------------------------------------------------------------------------------------
# MLIR attributes -> numpy -> ONNX tensors


class _MlirAttribute(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p)]


class _MlirStringRef(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("length", ctypes.c_size_t)]


class _MlirOperation(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p)]


_CAPI: ctypes.CDLL | None = None


def _capi() -> ctypes.CDLL:
    """The MLIR C API library the bindings themselves use (already loaded: same handle)."""
    global _CAPI
    if _CAPI is None:
        import mlir._mlir_libs as libs

        lib = ctypes.CDLL(os.path.join(os.path.dirname(libs.__file__), "libMLIRPythonCAPI.so"))
        for fn in (
            "mlirAttributeIsADenseElements", "mlirAttributeIsADenseResourceElements",
            "mlirAttributeIsASparseElements", "mlirDenseElementsAttrIsSplat",
        ):  # fmt: skip
            getattr(lib, fn).argtypes = [_MlirAttribute]
            getattr(lib, fn).restype = ctypes.c_bool
        lib.mlirDenseElementsAttrGetRawData.argtypes = [_MlirAttribute]
        lib.mlirDenseElementsAttrGetRawData.restype = ctypes.c_void_p
        lib.mlirDenseElementsAttrGetStringValue.argtypes = [_MlirAttribute, ctypes.c_ssize_t]
        lib.mlirDenseElementsAttrGetStringValue.restype = _MlirStringRef
        lib.mlirDenseElementsAttrGetBoolValue.argtypes = [_MlirAttribute, ctypes.c_ssize_t]
        lib.mlirDenseElementsAttrGetBoolValue.restype = ctypes.c_bool
        lib.mlirElementsAttrGetNumElements.argtypes = [_MlirAttribute]
        lib.mlirElementsAttrGetNumElements.restype = ctypes.c_int64
        for fn in ("mlirSparseElementsAttrGetIndices", "mlirSparseElementsAttrGetValues"):
            getattr(lib, fn).argtypes = [_MlirAttribute]
            getattr(lib, fn).restype = _MlirAttribute
        lib.mlirOperationGetAttributeByName.argtypes = [_MlirOperation, _MlirStringRef]
        lib.mlirOperationGetAttributeByName.restype = _MlirAttribute
        lib.mlirAttributeIsAArray.argtypes = [_MlirAttribute]
        lib.mlirAttributeIsAArray.restype = ctypes.c_bool
        lib.mlirArrayAttrGetNumElements.argtypes = [_MlirAttribute]
        lib.mlirArrayAttrGetNumElements.restype = ctypes.c_ssize_t
        lib.mlirArrayAttrGetElement.argtypes = [_MlirAttribute, ctypes.c_ssize_t]
        lib.mlirArrayAttrGetElement.restype = _MlirAttribute
        _CAPI = lib
    return _CAPI


def _handle(attr: ir.Attribute) -> _MlirAttribute:
    return _MlirAttribute(_capi_pointer(attr, "Attribute"))


def is_sparse_elements(attr: ir.Attribute) -> bool:
    """Whether `attr` is a `sparse<...>` elements attribute, asked of MLIR's C API (the Python
    bindings have no class for it, so it would otherwise be recognized by its printed text)."""
    return bool(_capi().mlirAttributeIsASparseElements(_handle(attr)))


def _wrap(h: _MlirAttribute) -> ir.Attribute | None:
    """A plain `ir.Attribute` for a handle, without the bindings' downcast (see `get_attribute`)."""
    if not h.ptr:
        return None
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    # The capsule only carries the pointer: attributes are owned (uniqued) by their context.
    return ir.Attribute._CAPICreate(new(h.ptr, b"mlir.ir.Attribute._CAPIPtr", None))


def get_attribute(op: ir.Operation | ir.OpView, name: str) -> ir.Attribute | None:
    """`op.attributes[name]` (None if absent) that also works for complex-valued tensors.

    The LLVM 22 bindings downcast every attribute they return, and the downcast of a
    `DenseElementsAttr` of `complex<f32|f64>` raises TypeError ("Can't cast unknown element type"),
    so `op.attributes["value"]` fails on a complex constant. This reads the attribute through the C
    API and returns it as a plain `ir.Attribute`, which `attribute_to_tensor` accepts.
    """
    operation = op.operation if isinstance(op, ir.OpView) else op
    key = name.encode()
    h = _capi().mlirOperationGetAttributeByName(_MlirOperation(_capi_pointer(operation, "Operation")), _MlirStringRef(ctypes.cast(ctypes.c_char_p(key), ctypes.c_void_p), len(key)))
    return _wrap(h)


def array_elements(attr: ir.Attribute) -> list[ir.Attribute]:
    """The elements of an ArrayAttr as plain attributes (no downcast; see `get_attribute`)."""
    h = _handle(attr)
    lib = _capi()
    if not lib.mlirAttributeIsAArray(h):
        raise _cannot(f"The attribute {str(attr)[:80]} is not an array.")
    return [_wrap(lib.mlirArrayAttrGetElement(h, i)) for i in range(lib.mlirArrayAttrGetNumElements(h))]  # type: ignore[misc]


def _cannot(why: str) -> ImportError_:
    return ImportError_("cannot export an attribute", [why])


def _attr_info(attr: ir.Attribute) -> tuple[int, tuple[int, ...]]:
    """(ONNX element type, static shape) of an elements attribute's tensor type."""
    try:
        t = ir.RankedTensorType(attr.type)
    except (ValueError, TypeError):
        raise _cannot(f"The attribute {str(attr)[:80]} has no ranked tensor type.") from None
    if not t.has_static_shape:
        raise _cannot(f"The attribute {str(attr)[:80]} has no static shape.")
    key = str(t.element_type)
    if key not in BY_MLIR:
        raise _cannot(f"The element type {key} has no ONNX counterpart.")
    return BY_MLIR[key].onnx_dtype, tuple(t.shape)


def _resource_bytes(attr: ir.Attribute, name: str) -> np.ndarray:
    """The blob of a `dense_resource` attribute: from the registry, else from the printed IR."""
    key = (_capi_pointer(attr.context, "Context"), name)
    with _RES_LOCK:
        buf = _RESOURCES.get(key)
    if buf is not None:
        return buf
    holder = ir.Module.create(loc=ir.Location.unknown(attr.context))
    holder.operation.attributes["onnxc.blob"] = attr
    text = holder.operation.get_asm()
    m = re.search(r"^\s*" + re.escape(name) + r'\s*:\s*"0x([0-9A-Fa-f]*)"', text, re.MULTILINE)
    if m is None:
        raise _cannot(f"The resource blob '{name}' has no data in its context.")
    data = bytes.fromhex(m.group(1))
    return np.frombuffer(data[4:], dtype=np.uint8)  # the first 4 bytes give the blob's alignment


def _dense_values(h: _MlirAttribute, onnx_dtype: int, count: int) -> np.ndarray:
    """The flat values of a DenseElementsAttr handle (checked to be one by the caller)."""
    lib = _capi()
    splat = lib.mlirDenseElementsAttrIsSplat(h)
    if onnx_dtype == _DT.STRING:
        out = np.empty(count, dtype=object)
        for i in range(count):
            s = lib.mlirDenseElementsAttrGetStringValue(h, 0 if splat else i)
            out[i] = ctypes.string_at(s.data, s.length) if s.length else b""
        return out
    if onnx_dtype == _DT.BOOL:
        if splat:
            return np.full(count, bool(lib.mlirDenseElementsAttrGetBoolValue(h, 0)))
        # Non-splat i1 storage is bit-packed, LSB first (see DenseElementsAttr.get's docstring).
        packed = np.frombuffer(ctypes.string_at(lib.mlirDenseElementsAttrGetRawData(h), (count + 7) // 8), np.uint8)
        return np.unpackbits(packed, bitorder="little")[:count].astype(bool)
    dtype = numpy_dtype(BY_ONNX[onnx_dtype])
    n = 1 if splat else count
    if n == 0:
        return np.zeros(0, dtype=dtype)
    raw = np.frombuffer(ctypes.string_at(lib.mlirDenseElementsAttrGetRawData(h), n * dtype.itemsize), dtype=np.uint8)
    if onnx_dtype in PACKED_BITS:  # storage may hold a sign-extended byte; the code is the low bits
        raw = raw & np.uint8((1 << PACKED_BITS[onnx_dtype]) - 1)
    values = _le(raw, dtype)
    return np.broadcast_to(values, (count,)).copy() if splat else values


def attribute_to_array(attr: ir.Attribute) -> tuple[np.ndarray, int]:
    """(values, ONNX element type) of a dense, dense_resource or dense string elements attribute."""
    onnx_dtype, shape = _attr_info(attr)
    count = math.prod(shape)
    h = _handle(attr)
    lib = _capi()
    if lib.mlirAttributeIsADenseResourceElements(h):
        text = str(attr)
        name = text[len("dense_resource<") : text.index(">")]
        raw = _resource_bytes(attr, name)
        if onnx_dtype == _DT.STRING:
            raise _cannot(f"The resource blob '{name}' has string elements, which blobs cannot hold.")
        dtype = numpy_dtype(BY_ONNX[onnx_dtype])
        if raw.size != count * dtype.itemsize:
            raise _cannot(f"The resource blob '{name}' holds {raw.size} bytes; its type {attr.type} needs {count * dtype.itemsize}.")
        return raw.view(dtype).reshape(shape), onnx_dtype
    if not lib.mlirAttributeIsADenseElements(h):
        raise _cannot(f"The attribute {str(attr)[:80]} is not a dense tensor.")
    return _dense_values(h, onnx_dtype, count).reshape(shape), onnx_dtype


def numpy_to_tensor(array: np.ndarray, name: str, onnx_dtype: int) -> onnx.TensorProto:
    """An ONNX tensor of element type `onnx_dtype` holding `array` (raw_data, little-endian, sub-byte
    types packed; strings in string_data)."""
    label = _label(None, name)
    elem = _elem(onnx_dtype, label)
    t = onnx.TensorProto()
    t.name = name
    t.data_type = elem.onnx_dtype
    arr = np.asarray(array) if onnx_dtype != _DT.STRING else np.asarray(array, dtype=object)
    t.dims.extend(int(d) for d in arr.shape)
    if onnx_dtype == _DT.STRING:
        for v in arr.reshape(-1):
            if isinstance(v, (str, np.str_)):
                v = str(v).encode("utf-8")
            elif not isinstance(v, (bytes, np.bytes_)):
                raise _fail(label, f"holds a {type(v).__name__} where a string was expected")
            t.string_data.append(bytes(v))
        return t
    arr = np.ascontiguousarray(_coerce(arr, onnx_dtype, label)).reshape(-1)
    bits = PACKED_BITS.get(onnx_dtype)
    if bits is not None:
        t.raw_data = pack_bits(arr.view(np.uint8), bits).tobytes()
    elif sys.byteorder == "little" or arr.dtype.itemsize == 1:
        t.raw_data = arr.view(np.uint8).tobytes()
    else:
        unit = arr.dtype.itemsize // 2 if arr.dtype.kind == "c" else arr.dtype.itemsize
        t.raw_data = arr.view(f"u{unit}").astype(f"<u{unit}").tobytes()
    return t


def attribute_to_tensor(attr: ir.Attribute, name: str) -> onnx.TensorProto:
    """The ONNX tensor of a dense, dense_resource or dense string elements attribute (exact values
    and type; the inverse of `tensor_to_attribute`)."""
    values, onnx_dtype = attribute_to_array(attr)
    return numpy_to_tensor(values, name, onnx_dtype)


def attribute_to_sparse_tensor(attr: ir.Attribute, name: str) -> onnx.SparseTensorProto:
    """The ONNX sparse tensor of an MLIR `sparse<...>` attribute (indices as [NNZ, rank])."""
    onnx_dtype, shape = _attr_info(attr)
    h = _handle(attr)
    lib = _capi()
    if not lib.mlirAttributeIsASparseElements(h):
        raise _cannot(f"The attribute {str(attr)[:80]} is not a sparse tensor.")
    idx_h = lib.mlirSparseElementsAttrGetIndices(h)
    val_h = lib.mlirSparseElementsAttrGetValues(h)
    rank = len(shape)
    n_idx = lib.mlirElementsAttrGetNumElements(idx_h)
    nnz = n_idx // rank if rank else 0
    coords = _dense_values(idx_h, _DT.INT64, n_idx).reshape(nnz, rank)
    values = _dense_values(val_h, onnx_dtype, nnz)
    sp = onnx.SparseTensorProto()
    sp.dims.extend(shape)
    sp.values.CopyFrom(numpy_to_tensor(values, name, onnx_dtype))
    sp.indices.CopyFrom(numpy_to_tensor(coords, name + "_indices" if name else "", _DT.INT64))
    return sp
