"""The calling convention shared by the JIT (`jit.py`) and AOT loader (`aot.py`).

What: the signature of a compiled function (`FunctionSignature`: ranked tensor specs for every
argument and result, JSON-serializable so an AOT library can carry it), argument validation
against it, and the ctypes side of MLIR's C interface (`_mlir_ciface_<name>`): ranked memref
descriptors written for numpy arrays, and results read out of returned descriptors: copied into
numpy arrays (the native buffer then freed), or from `WRAP_MIN_BYTES` on handed over to the
caller in the native buffer itself, freed when the last array using it goes (`_NativeBuffer`).

Per-call cost (issue 8): `Invoker` lays out its descriptors once per signature and takes common
arguments on a fast path (see its docstring). A Relu on [1,16] f32 called through
`CompiledFunction.__call__` went from 18.4-20.0 us to 6.0 us per call, and on [1,225000] (a
0.9 MB result, no longer copied) from 67-91 us to 29 us: best of 7 batches of 20000/7 (2000/7)
calls of `c.function(a)` after 300 warm-up calls, `c = onnxc.compile(m, cache_dir=False)`, old
and new code alternated twice on the 2-core dev machine. Of the 6 us, ~2 us are the JIT's
run-time status channel and hooks around the Invoker (jit.py, runtime_checks.py,
runtime_hooks.py).

Why one module: the JIT and a shared library loaded by ctypes call the same
`_mlir_ciface_` symbol with the same descriptors; only where the function pointer and `free`
come from differs.

C interface facts this relies on (MLIR `llvm.emit_c_interface`): every memref argument is
passed as a pointer to its descriptor `{allocated, aligned, offset, sizes[rank],
strides[rank]}` (rank 0: the first three fields only); with one result, the first parameter
points to the result descriptor; with several, to a struct of descriptors in order; with
none, there is no result parameter.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxc.errors import OnnxcError

try:  # bf16 numpy dtype; ml_dtypes comes with onnx.
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - exercised only without ml_dtypes
    _ml_dtypes = None

__all__ = [
    "CpuTargetError",
    "ArgumentError",
    "TensorSpec",
    "FunctionSignature",
    "numpy_dtype",
    "signature_from_func",
    "Invoker",
    "as_argument",
    "as_onnx_result",
]


class CpuTargetError(OnnxcError, ValueError):
    """A problem of the CPU target that is the caller's to fix (bad module, bad inputs)."""


class ArgumentError(CpuTargetError):
    """An argument passed to a compiled function does not match its signature."""


# MLIR element type spelling -> numpy dtype name. Signless integers are read as signed, which is
# what ONNX (and numpy's default) means by them.
_DTYPES: dict[str, str] = {
    "f64": "float64",
    "f32": "float32",
    "f16": "float16",
    "i1": "bool",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "ui8": "uint8",
    "ui16": "uint16",
    "ui32": "uint32",
    "ui64": "uint64",
    "bf16": "bfloat16",
    # ONNX strings: i64 handles in the compiled code, numpy object arrays outside (strings.py).
    "string": "object",
}


def numpy_dtype(element_type: str) -> np.dtype:
    """The numpy dtype of an MLIR element type spelled as text (`f32`, `i1`, `bf16`...)."""
    name = _DTYPES.get(element_type)
    if name is None:
        raise CpuTargetError(f"element type {element_type} is not supported by the CPU target")
    if name == "bfloat16":
        if _ml_dtypes is None:
            raise CpuTargetError("bf16 tensors need the ml_dtypes package")
        return np.dtype(_ml_dtypes.bfloat16)
    return np.dtype(name)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A ranked tensor type: dims (None = dynamic) and element type (MLIR spelling)."""

    shape: tuple[int | None, ...]
    element_type: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.element_type)

    def __str__(self) -> str:
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"tensor<{dims}{self.element_type}>"

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "element_type": self.element_type}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "TensorSpec":
        return TensorSpec(tuple(d["shape"]), str(d["element_type"]))


def as_argument(array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """`array` as the compiled code holds an argument of type `spec`: an ONNX type the lowered
    code keeps in a signless integer of the same width (unsigned ints, float8 and int4 stored
    as bytes) is passed as a view of that integer type (no copy), and a one-element array for a
    rank-0 argument as a scalar (onnxruntime accepts both spellings, and so do ONNX's own test
    data). The one rule for every caller of compiled code (`onnxc.CompiledModel`, the built-in
    backends)."""
    want = spec.dtype
    if array.dtype != want and array.dtype.itemsize == want.itemsize and want.kind in "iu" and array.dtype.kind != "O":
        array = array.view(want)
    if spec.rank == 0 and array.ndim > 0 and array.size == 1:
        array = array.reshape(())
    return array


def as_onnx_result(array: np.ndarray, onnx_dtype: np.dtype) -> np.ndarray:
    """A result of compiled code as the ONNX type the graph declares: the inverse view of
    `as_argument` (a signless integer of the ONNX type's width back to uint8, float8...)."""
    if onnx_dtype != np.dtype(object) and array.dtype != onnx_dtype and array.dtype.itemsize == onnx_dtype.itemsize:
        return array.view(onnx_dtype)
    return array


@dataclasses.dataclass(frozen=True)
class FunctionSignature:
    """Name, argument and result specs of one compiled function."""

    name: str
    inputs: tuple[TensorSpec, ...]
    results: tuple[TensorSpec, ...]

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.results))
        return f"@{self.name}({ins}) -> ({outs})"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": [t.to_json() for t in self.inputs],
            "results": [t.to_json() for t in self.results],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "FunctionSignature":
        return FunctionSignature(
            str(d["name"]),
            tuple(TensorSpec.from_json(t) for t in d["inputs"]),
            tuple(TensorSpec.from_json(t) for t in d["results"]),
        )

    def validate(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        """Check ``arrays`` against the signature; return C-contiguous numpy arrays.

        Raises ArgumentError naming the argument index on a count, rank, static dim or dtype
        mismatch, and when two uses of one dynamic dim... are not checked here: MLIR does not
        record which dynamic dims must agree, so the compiled code trusts them (documented).
        """
        if len(arrays) != len(self.inputs):
            raise ArgumentError(
                f"@{self.name} takes {len(self.inputs)} argument(s), got {len(arrays)}"
            )
        return [self.check_argument(i, a) for i, a in enumerate(arrays)]

    def check_argument(self, i: int, a: Any) -> np.ndarray:
        """Argument ``i`` checked against its spec (the errors of `validate`), as a C-contiguous
        aligned numpy array (copied only when it is not one already)."""
        spec = self.inputs[i]
        if not isinstance(a, np.ndarray):
            if isinstance(a, (int, float, bool, np.generic)):
                a = np.asarray(a)
            else:
                raise ArgumentError(
                    f"argument {i} of @{self.name}: expected a numpy array for {spec}, "
                    f"got {type(a).__name__}"
                )
        if a.ndim != spec.rank:
            raise ArgumentError(
                f"argument {i} of @{self.name}: expected rank {spec.rank} ({spec}), "
                f"got an array of shape {a.shape}"
            )
        for d, (want, got) in enumerate(zip(spec.shape, a.shape)):
            if want is not None and want != got:
                raise ArgumentError(
                    f"argument {i} of @{self.name}: dim {d} must be {want} ({spec}), "
                    f"got an array of shape {a.shape}"
                )
        if a.dtype != spec.dtype:
            raise ArgumentError(
                f"argument {i} of @{self.name}: expected dtype {spec.dtype} ({spec}), "
                f"got {a.dtype}"
            )
        if not a.flags.c_contiguous or not a.flags.aligned:
            a = a.copy(order="C")  # keeps 0-d arrays 0-d, unlike np.ascontiguousarray
        return a


def signature_from_func(func_op: Any) -> FunctionSignature:
    """Read the signature of a tensor-level ``func.func`` (before bufferization)."""
    from mlir import ir

    op = func_op.operation if hasattr(func_op, "operation") else func_op
    name = ir.StringAttr(op.attributes["sym_name"]).value
    ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)

    def spec(t: ir.Type, what: str) -> TensorSpec:
        if not isinstance(t, ir.RankedTensorType):
            raise CpuTargetError(
                f"@{name}: {what} has type {t}; the CPU target calls functions on ranked "
                "tensors only"
            )
        rt = ir.RankedTensorType(t)
        shape = tuple(None if rt.is_dynamic_dim(i) else rt.get_dim_size(i) for i in range(rt.rank))
        et = str(rt.element_type)
        numpy_dtype(et)  # raises for unsupported element types
        return TensorSpec(shape, et)

    ins = tuple(spec(t, f"argument {i}") for i, t in enumerate(ftype.inputs))
    outs = tuple(spec(t, f"result {i}") for i, t in enumerate(ftype.results))
    # String tensors are i64 handles in the code; the lowering marks them `onnxc.string`.
    ins = tuple(_string_marked(op, "arg_attrs", i, s) for i, s in enumerate(ins))
    outs = tuple(_string_marked(op, "res_attrs", i, s) for i, s in enumerate(outs))
    return FunctionSignature(name, ins, outs)


def _string_marked(op: Any, key: str, i: int, spec: TensorSpec) -> TensorSpec:
    """`spec` as a string tensor when argument/result `i` carries the `onnxc.string` marker."""
    from mlir import ir

    if key in op.attributes:
        attrs = ir.ArrayAttr(op.attributes[key])
        if i < len(attrs) and "onnxc.string" in ir.DictAttr(attrs[i]):
            return TensorSpec(spec.shape, "string")
    return spec


# --- ctypes descriptors -----------------------------------------------------------------------

_DESC_CACHE: dict[int, type[ctypes.Structure]] = {}


def _descriptor_type(rank: int) -> type[ctypes.Structure]:
    """ctypes struct of a rank-``rank`` memref descriptor (element type only matters to us)."""
    if rank not in _DESC_CACHE:
        fields: list[tuple[str, Any]] = [
            ("allocated", ctypes.c_void_p),
            ("aligned", ctypes.c_void_p),
            ("offset", ctypes.c_int64),
        ]
        if rank > 0:
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
        _DESC_CACHE[rank] = type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})
    return _DESC_CACHE[rank]


def _descriptor_for(a: np.ndarray) -> ctypes.Structure:
    """A ctypes descriptor of the C-contiguous array ``a`` (for C callers and tests; the
    `Invoker` writes the same words into its call frames)."""
    desc = _descriptor_type(a.ndim)()
    ptr = a.ctypes.data
    desc.allocated = ptr
    desc.aligned = ptr
    desc.offset = 0
    if a.ndim:
        sizes, strides = _sizes_strides(a)
        for d in range(a.ndim):
            desc.sizes[d] = sizes[d]
            desc.strides[d] = strides[d]
    return desc


def _sizes_strides(a: np.ndarray) -> tuple[list[int], list[int]]:
    """Descriptor sizes and strides (in elements) of a C-contiguous array; a dim of size 0 or 1
    gets stride 1 (numpy gives such dims any stride)."""
    item = a.itemsize
    shape, st = a.shape, a.strides
    return list(shape), [st[d] // item if shape[d] > 1 else 1 for d in range(len(shape))]


_MASK64 = (1 << 64) - 1
#: A zero-length ctypes array type: `addressof(_NO_BYTES.from_buffer(a))` is the address of a
#: writable C-contiguous array's data in ~0.2 us, where `a.ctypes.data` takes ~1 us.
_NO_BYTES = ctypes.c_char * 0
_from_buffer = _NO_BYTES.from_buffer
_addressof = ctypes.addressof
_memmove = ctypes.memmove
_ndarray = np.ndarray


def _exports_buffer(dtype: np.dtype) -> bool:
    """Whether numpy exports arrays of ``dtype`` through the buffer protocol (ml_dtypes' bf16
    does not: "cannot include dtype 'E' in a buffer")."""
    try:
        _from_buffer(np.zeros(1, dtype))
    except (TypeError, ValueError, BufferError):
        return False
    return True


def _data_address(a: np.ndarray, direct: bool = True) -> int:
    """The address of the first element of the C-contiguous array ``a``."""
    if direct and a.flags.writeable:
        try:
            return _addressof(_from_buffer(a))
        except (TypeError, ValueError, BufferError):
            pass
    return a.ctypes.data


def _c_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether element strides ``strides`` lay ``shape`` out densely in C order (dims of size 1
    may have any stride)."""
    expect = 1
    for d in range(len(shape) - 1, -1, -1):
        n = shape[d]
        if n != 1 and strides[d] != expect:
            return False
        expect *= n
    return True


def _view_of(address: int, shape: tuple[int, ...], strides_el: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """A numpy view (no copy, not owning) of native memory with element strides ``strides_el``."""
    item = dtype.itemsize
    strides = tuple(s * item for s in strides_el)
    # Span of bytes the view touches, so numpy never reads beyond the buffer.
    extent = item + sum((s - 1) * abs(st) for s, st in zip(shape, strides))
    raw = (ctypes.c_char * extent).from_address(address)
    return np.ndarray(shape, dtype=dtype, buffer=raw, offset=0, strides=strides)


def _copy_from(address: int, shape: tuple[int, ...], strides_el: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """A fresh C-contiguous numpy array holding the native tensor at ``address`` (the first
    element) laid out with element strides ``strides_el``. A dense tensor is one memmove."""
    out = np.empty(shape, dtype=dtype)
    if out.size == 0:
        return out
    if _c_contiguous(shape, strides_el):
        _memmove(_data_address(out, dtype.kind != "V"), address, out.nbytes)
    else:
        out[...] = _view_of(address, shape, strides_el, dtype)
    return out


def _copy_out(desc: ctypes.Structure, spec: TensorSpec) -> np.ndarray:
    """Copy a returned memref into a fresh numpy array (the native buffer is freed later)."""
    dtype = spec.dtype
    rank = spec.rank
    shape = tuple(int(desc.sizes[d]) for d in range(rank)) if rank else ()
    strides = [int(desc.strides[d]) for d in range(rank)] if rank else []
    if any(n == 0 for n in shape):
        return np.empty(shape, dtype=dtype)
    return _copy_from(int(desc.aligned or 0) + int(desc.offset) * dtype.itemsize, shape, strides, dtype)


class _NativeBuffer:
    """Owns one result buffer that the compiled code allocated: the numpy array wrapping it
    holds this object as its ``base`` (numpy keeps the object whose ``__array_interface__`` it
    wrapped), and the buffer is freed when the last array or view of it goes away. Why: a result
    copied out cost a copy proportional to its size on every call (0.9 MB: ~50 us)."""

    __slots__ = ("__array_interface__", "_address", "_free", "__weakref__")

    def __init__(self, address: int, free: Callable[[int], None], interface: dict[str, Any]) -> None:
        self._address = address
        self._free = free
        self.__array_interface__ = interface

    def __del__(self) -> None:
        address, self._address = self._address, 0
        if address:
            self._free(address)


#: glibc `mallopt` parameters (malloc.h): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: What `keep_freed_memory` sets: blocks up to 32 MiB (glibc's largest mmap threshold on 64-bit)
#: come from the heap, and up to 1 GiB of freed heap top stays mapped.
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 1 << 30
_malloc_tuned = False


def keep_freed_memory() -> bool:
    """Make the process's glibc malloc keep the memory that compiled code frees, so the next
    call reuses it instead of faulting in fresh pages (once per process; True when applied).

    Why: the generated code allocates its intermediate buffers with `malloc` and frees them
    before it returns. glibc serves blocks above its mmap threshold (128 KiB at first, raised
    dynamically only after such a block is freed) with a fresh `mmap` and returns heap top above
    its trim threshold to the kernel, so every call paid page faults for its temporaries: GPT-2
    prefill (seq 64) took 16,400 minor faults and 31.6 ms of kernel time per 220 ms call, 20%
    of its latency, and the share depended on what the process had allocated and freed before
    (the same code ran 180 ms when compiling had happened to raise the threshold). onnxruntime
    keeps an arena for the same reason. The setting is process-wide and only changes when
    memory goes back to the kernel, never what a program computes; `ONNXC_KEEP_FREED_MEMORY=0`
    leaves malloc as it is. Not glibc (no `mallopt`): nothing is changed.
    """
    global _malloc_tuned
    if _malloc_tuned:
        return True
    import os

    if os.environ.get("ONNXC_KEEP_FREED_MEMORY", "1") == "0":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except AttributeError:  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # Setting either threshold also turns off glibc's dynamic adjustment of both.
    _malloc_tuned = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) & bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    return _malloc_tuned


#: Results of at least this many bytes are handed to the caller in the buffer the compiled code
#: allocated (`_NativeBuffer`, freed with the last array using it) instead of being copied into
#: numpy memory; smaller ones are copied (one memmove, as cheap as wrapping) and stay arrays
#: that own their data like any other. Measured (malloc'ed buffer -> array -> dropped, per
#: call): copy 1.6 us at 64 B, 2.2 us at 16 KiB, 23 us at 0.9 MB; wrapping 1.9 us at any size.
WRAP_MIN_BYTES = 16 << 10
#: Call frames kept per Invoker for reuse (one per concurrently running call; more are made on
#: demand and dropped after the call).
_MAX_FRAMES = 8


class Invoker:
    """Calls ``_mlir_ciface_<name>`` at an address with numpy arrays; frees results.

    fn_address: the C-interface function; free: a ctypes callable freeing a buffer allocated by
    the compiled code (libc ``free`` for the JIT, the library's own for AOT).

    How a call is made, and why (issue 8, per-call overhead): every descriptor, the result
    struct and the parameter block of the calling convention are int64 words of one ctypes
    array, a *frame*, laid out once per signature; its pointers to itself and the sizes and
    strides of static-shape arguments are written when it is made. A call takes a frame from a
    small pool (a list: pop/append are atomic, so concurrent calls from several threads, and a
    re-entrant call from a run-time hook, each get their own), writes each argument's data
    address (and a dynamic one's sizes and strides), calls, and reads the result words back as
    one list. An argument that is already a C-contiguous aligned ndarray of the exact dtype and
    static shape is taken as is after four cheap tests; anything else goes through
    `FunctionSignature.check_argument`, the full validation with its errors (and a copy when
    not contiguous). Results are copied with one memmove, or, from `WRAP_MIN_BYTES` on, wrapped
    without a copy (`_NativeBuffer`), except a second result in the same allocation, which is
    copied so results never share memory (as when every result was a copy).

    Measured (module docstring for how): `CompiledFunction.__call__` of a Relu on [1,16] f32,
    18.4-20.0 us -> 6.0 us per call (the Invoker alone ~4 us, of which ~1.5 us ctypes and numpy
    calls: the native call, two `from_buffer`, `np.empty`, `memmove`, `free`); with a 0.9 MB
    result 67-91 us -> 29 us (the copy and its page faults gone).
    """

    def __init__(
        self,
        signature: FunctionSignature,
        fn_address: int,
        free: Callable[[int], None],
        keepalive: Any = None,
        convention: str = "ciface",
        string_runtime: Any = None,
        after_call: Callable[[], None] | None = None,
    ) -> None:
        self.signature = signature
        # strings.StringRuntime when the code calls the string runtime or has string tensors
        # at its boundary (handles in, handles out, the arena freed after the copy).
        self._strings = string_runtime
        # Runs right after the native call, before any result is read: the run-time status
        # channel (runtime_checks.py) raises there when the code left early (poison results).
        self._after_call = after_call
        self._free = free
        keep_freed_memory()  # the code's temporaries reuse freed memory from call to call
        self._keepalive = keepalive  # the engine / CDLL owning the code must outlive us
        n_res = len(signature.results)
        # "packed": the ExecutionEngine's `_mlir_<fn>(void **args)` wrapper, each slot pointing
        # at one argument value (here: at a pointer to a descriptor). "array": the AOT entry
        # `onnxc_run(void **descs)`, each slot holding a descriptor pointer. "ciface": the plain
        # C function `_mlir_ciface_<fn>(desc *...)`.
        if convention not in ("ciface", "packed", "array"):
            raise ValueError(f"unknown calling convention {convention!r}")
        self._convention = convention
        self._n_params = len(signature.inputs) + (1 if n_res else 0)
        if convention != "ciface":
            self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(fn_address)
        else:
            proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * self._n_params))
            self._fn = proto(fn_address)
        # The frame layout (in int64 words): each argument's descriptor {allocated, aligned,
        # offset, sizes[rank], strides[rank]}, then the results' (one descriptor, or the struct
        # of several: all fields are 8 bytes, so the struct is the descriptors back to back),
        # then the convention's pointer block.
        words = 0
        self._inputs: list[tuple[int, np.dtype, tuple[int, ...] | None, bool]] = []
        self._templates: list[tuple[int, list[int]]] = []  # static sizes+strides, per frame
        for spec in signature.inputs:
            dtype = spec.dtype
            shape: tuple[int, ...] | None = None
            if spec.element_type != "string" and all(d is not None for d in spec.shape):
                shape = tuple(int(d) for d in spec.shape)  # type: ignore[arg-type]
                if 0 in shape:
                    shape = None  # zero-size: the full path (nothing to gain)
                else:  # what `_sizes_strides` gives for any C-contiguous array of this shape
                    strides = [math.prod(shape[d + 1 :]) if shape[d] > 1 else 1 for d in range(len(shape))]
                    self._templates.append((words + 3, list(shape) + strides))
            self._inputs.append((words, dtype, shape, _exports_buffer(dtype)))
            words += 3 + 2 * spec.rank
        self._n_in = len(self._inputs)
        self._res_start = words
        # Per result: its words' offset, rank, dtype (int64 handles for strings), whether a
        # string, the typestr that wraps it, whether numpy exports its buffer, and for a static
        # shape (shape, dense C strides, bytes) so that the common result needs no arithmetic.
        self._results: list[tuple[int, int, np.dtype, bool, str, bool, Any]] = []
        for spec in signature.results:
            string = spec.element_type == "string"
            dtype = np.dtype(np.int64) if string else spec.dtype
            typestr = dtype.str if dtype.kind != "V" else f"|V{dtype.itemsize}"
            static = None
            if all(d is not None for d in spec.shape):
                rshape = tuple(int(d) for d in spec.shape)  # type: ignore[arg-type]
                dense = [math.prod(rshape[d + 1 :]) for d in range(len(rshape))]
                static = (rshape, list(rshape) + dense, math.prod(rshape) * dtype.itemsize)
            self._results.append((words - self._res_start, spec.rank, dtype, string, typestr, _exports_buffer(dtype), static))
            words += 3 + 2 * spec.rank
        self._res_end = words
        self._block = words  # the convention's pointer block
        if convention == "packed":
            words += 2 * max(1, self._n_params)  # slots, then the array of slot pointers
        elif convention == "array":
            words += max(1, self._n_params)
        self._n_words = words
        self._frames: list[tuple[Any, tuple[int, ...]]] = []
        self._frames.append(self._new_frame())  # also checks the layout once, at load time

    def _new_frame(self) -> tuple[Any, tuple[int, ...]]:
        """A fresh frame (the int64 words) and the arguments `self._fn` is called with."""
        frame = (ctypes.c_int64 * self._n_words)()
        base = ctypes.addressof(frame)
        params = [base + 8 * o for o, *_ in self._inputs]
        if self._results:
            params.insert(0, base + 8 * self._res_start)
        for start, values in self._templates:
            frame[start : start + len(values)] = values
        block = self._block
        if self._convention == "packed":
            n = max(1, len(params))
            for k, p in enumerate(params):
                frame[block + k] = p  # slot k holds the descriptor pointer
                frame[block + n + k] = base + 8 * (block + k)  # args[k] points at slot k
            return frame, (base + 8 * (block + n),)
        if self._convention == "array":
            frame[block : block + len(params)] = params
            return frame, (base + 8 * block,)
        return frame, tuple(params)

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        if self._strings is None:
            return self._call(arrays)
        with self._strings.lock:  # one run at a time owns the string arena (strings.py)
            try:
                outs = self._call(arrays)
            except BaseException:
                self._strings.finish(report=False)
                raise
            self._strings.finish()  # frees the run's strings; raises what a kernel reported
            return outs

    def _call(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        sig = self.signature
        if len(arrays) != self._n_in:
            sig.validate(arrays)  # raises the count error
        frames = self._frames
        try:
            frame, entry = frames.pop()
        except IndexError:
            frame, entry = self._new_frame()
        keep: list[Any] = []  # copies and string blobs: alive during the call and the read-back
        try:
            i = 0
            for a, (o, dtype, shape, direct) in zip(arrays, self._inputs):
                # Fast path: an exact ndarray of the static shape and dtype, C-contiguous and
                # aligned: passed as is (its sizes and strides are the frame's template).
                if type(a) is _ndarray and a.shape == shape and a.dtype == dtype:
                    flags = a.flags
                    if flags.c_contiguous and flags.aligned:
                        p = _addressof(_from_buffer(a)) if direct and flags.writeable else a.ctypes.data
                        frame[o] = p
                        frame[o + 1] = p
                        i += 1
                        continue
                a = sig.check_argument(i, a)  # every error of `validate`; a copy if not contiguous
                if sig.inputs[i].element_type == "string":
                    keep.append(a)
                    a, blob = self._strings.encode(a, f"argument {i} of @{sig.name}")
                    keep.append(blob)
                keep.append(a)
                p = _data_address(a, a.dtype.kind != "V")  # string handles are int64: direct
                frame[o] = p
                frame[o + 1] = p
                frame[o + 2] = 0
                rank = a.ndim
                if rank:
                    sizes, strides = _sizes_strides(a)
                    frame[o + 3 : o + 3 + 2 * rank] = sizes + strides
                i += 1
            self._fn(*entry)
            if self._after_call is not None:
                self._after_call()
            if not self._results:
                return []
            words = frame[self._res_start : self._res_end]
        finally:
            if len(frames) < _MAX_FRAMES:
                frames.append((frame, entry))
        outs: list[np.ndarray] = []
        seen: dict[int, None] = {}  # allocations returned, in order (one may back several results)
        owned: set[int] = set()  # allocations handed to a result array (freed with it)
        try:
            for k, rank, dtype, string, typestr, direct, static in self._results:
                allocated = words[k]
                aligned = words[k + 1]
                if allocated < 0 or aligned < 0:  # the words are signed; addresses are not
                    allocated &= _MASK64
                    aligned &= _MASK64
                seen[allocated] = None
                offset = words[k + 2]
                address = aligned + offset * dtype.itemsize
                end = k + 3 + rank
                if static is not None and words[k + 3 : end + rank] == static[1]:
                    shape, dense, nbytes = static[0], True, static[2]  # the static sizes, dense
                else:
                    shape = tuple(words[k + 3 : end])
                    strides = words[end : end + rank]
                    dense, nbytes = _c_contiguous(shape, strides), math.prod(shape) * dtype.itemsize
                if not nbytes:
                    out = np.empty(shape, dtype=dtype)
                elif not dense:
                    out = _copy_from(address, shape, strides, dtype)
                elif nbytes >= WRAP_MIN_BYTES and not string and allocated and not offset and allocated not in owned:
                    # Every returned buffer is a fresh allocation owned by us (the deallocation
                    # pipeline clones what it does not own): the array takes it over. Only at
                    # offset 0, the usual result, so that a result at an offset into a larger
                    # buffer does not keep the rest alive.
                    owner = _NativeBuffer(
                        allocated, self._free, {"data": (address, False), "shape": shape, "typestr": typestr, "version": 3}
                    )
                    owned.add(allocated)
                    out = np.asarray(owner)
                    if out.dtype != dtype:
                        out = out.view(dtype)
                else:
                    out = np.empty(shape, dtype=dtype)
                    _memmove(_addressof(_from_buffer(out)) if direct else out.ctypes.data, address, nbytes)
                outs.append(self._strings.decode(out) if string else out)
        finally:
            # Each allocation once; those taken over by a result are freed with it.
            for p in seen:
                if p and p not in owned:
                    self._free(p)
        del keep  # alive (referenced) during the call and while string outputs were read
        return outs
