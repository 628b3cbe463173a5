"""The calling convention shared by the JIT (`jit.py`) and AOT loader (`aot.py`).

What: the signature of a compiled function (`FunctionSignature`: ranked tensor specs for every
argument and result, JSON-serializable so an AOT library can carry it), argument validation
against it, and the ctypes side of MLIR's C interface (`_mlir_ciface_<name>`): ranked memref
descriptors built from numpy arrays and results copied out of returned descriptors into
numpy arrays owned by Python, after which the native buffers are freed.

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
        out: list[np.ndarray] = []
        for i, (a, spec) in enumerate(zip(arrays, self.inputs)):
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
            out.append(a)
        return out


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
    desc = _descriptor_type(a.ndim)()
    ptr = a.ctypes.data
    desc.allocated = ptr
    desc.aligned = ptr
    desc.offset = 0
    if a.ndim:
        item = a.itemsize
        for d in range(a.ndim):
            desc.sizes[d] = a.shape[d]
            desc.strides[d] = a.strides[d] // item if a.shape[d] > 1 else 1
    return desc


def _copy_out(desc: ctypes.Structure, spec: TensorSpec) -> np.ndarray:
    """Copy a returned memref into a fresh numpy array (the native buffer is freed later)."""
    dtype = spec.dtype
    rank = spec.rank
    shape = tuple(int(desc.sizes[d]) for d in range(rank)) if rank else ()
    out = np.empty(shape, dtype=dtype)
    if out.size == 0:
        return out
    item = dtype.itemsize
    strides = tuple(int(desc.strides[d]) * item for d in range(rank)) if rank else ()
    base = int(desc.aligned or 0) + int(desc.offset) * item
    # Span of bytes the view touches, so numpy never reads beyond the buffer.
    extent = item + sum((s - 1) * abs(st) for s, st in zip(shape, strides))
    raw = (ctypes.c_char * extent).from_address(base)
    view = np.ndarray(shape, dtype=dtype, buffer=raw, offset=0, strides=strides)
    out[...] = view
    return out


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


class Invoker:
    """Calls ``_mlir_ciface_<name>`` at an address with numpy arrays; frees results.

    fn_address: the C-interface function; free: a ctypes callable freeing a buffer allocated by
    the compiled code (libc ``free`` for the JIT, the library's own for AOT).
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
        self._res_types = [_descriptor_type(r.rank) for r in signature.results]
        if n_res == 1:
            self._res_struct: type[ctypes.Structure] | None = self._res_types[0]
        elif n_res > 1:
            self._res_struct = type(
                "Results",
                (ctypes.Structure,),
                {"_fields_": [(f"r{i}", t) for i, t in enumerate(self._res_types)]},
            )
        else:
            self._res_struct = None
        self._n_params = len(signature.inputs) + (1 if n_res else 0)
        # "packed": the ExecutionEngine's `_mlir_<fn>(void **args)` wrapper, each slot pointing
        # at one argument value (here: at a pointer to a descriptor). "array": the AOT entry
        # `onnxc_run(void **descs)`, each slot holding a descriptor pointer. "ciface": the plain
        # C function `_mlir_ciface_<fn>(desc *...)`.
        if convention not in ("ciface", "packed", "array"):
            raise ValueError(f"unknown calling convention {convention!r}")
        self._convention = convention
        if convention != "ciface":
            self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(fn_address)
        else:
            proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * self._n_params))
            self._fn = proto(fn_address)

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
        inputs = sig.validate(arrays)
        keep = []
        for i, spec in enumerate(sig.inputs):
            if spec.element_type == "string":
                inputs[i], blob = self._strings.encode(inputs[i], f"argument {i} of @{sig.name}")
                keep.append(blob)
        descs = [_descriptor_for(a) for a in inputs]
        params: list[Any] = [ctypes.cast(ctypes.pointer(d), ctypes.c_void_p) for d in descs]
        res = None
        if self._res_struct is not None:
            res = self._res_struct()
            params.insert(0, ctypes.cast(ctypes.pointer(res), ctypes.c_void_p))
        if self._convention == "packed":
            slots = [ctypes.c_void_p(p.value) for p in params]
            packed = (ctypes.c_void_p * max(1, len(slots)))()
            for i, slot in enumerate(slots):
                packed[i] = ctypes.addressof(slot)
            self._fn(packed)
        elif self._convention == "array":
            arr = (ctypes.c_void_p * max(1, len(params)))(*[p.value for p in params])
            self._fn(arr)
        else:
            self._fn(*params)
        if self._after_call is not None:
            self._after_call()
        if res is None:
            return []
        results = [res] if len(sig.results) == 1 else [
            getattr(res, f"r{i}") for i in range(len(sig.results))
        ]
        outs: list[np.ndarray] = []
        freed: set[int] = set()
        try:
            for desc, spec in zip(results, sig.results):
                if spec.element_type == "string":
                    outs.append(self._strings.decode(_copy_out(desc, TensorSpec(spec.shape, "i64"))))
                else:
                    outs.append(_copy_out(desc, spec))
        finally:
            # Every returned buffer is a fresh allocation owned by us (the deallocation
            # pipeline clones what it does not own); one buffer returned twice is freed once.
            for desc in results:
                p = int(desc.allocated or 0)
                if p and p not in freed:
                    freed.add(p)
                    self._free(p)
        del inputs, keep  # alive (referenced) during the call and while string outputs were read
        return outs
