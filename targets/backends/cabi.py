"""The Python half of onnxc's C interface (libonnxc_onnxifi.so, `c/onnxc_onnxifi.h`).

What: one function per ONNXIFI entry point, called by the C library (which embeds the
interpreter) with plain values: ints, bytes, tuples of (name, data type, shape, address) for
tensor descriptors. Each returns a tuple whose first item is the ONNXIFI status code and whose
second is a message for `onnxcGetLastErrorMessage` ("" on success); nothing raises into C.
The C side owns the handles (magic numbers, registry, reference counts); this side owns the
`Backend`s, `Graph`s and run futures, addressed by index or integer id.

Why the status codes are read from the header: the C library, C programs and this module then
agree by construction (`constants()`); a renamed or renumbered code fails here, not at run time.

Memory: input and output buffers are wrapped in place (numpy arrays over the caller's
addresses, `_array`), as the proposal's onnxSetGraphIO binds memory the caller keeps valid
until the run's output event is signalled; weights are copied at onnxInitGraph, after which the
caller may free them.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from onnxc.errors import OnnxcError
from onnxc.targets.backends.base import Backend, BackendError, Graph, Support

__all__ = ["HEADER", "constants"]

HEADER = Path(__file__).parent / "c" / "onnxc_onnxifi.h"

#: A tensor descriptor as the C side passes it: (name, ONNXIFI data type, shape, buffer address).
Descriptor = tuple[str, int, tuple[int, ...], int]


@functools.cache
def constants() -> dict[str, int]:
    """Every `#define NAME <integer>` of the header."""
    out = {}
    for m in re.finditer(r"^#define\s+(ONNXIFI_\w+)\s+(0x[0-9A-Fa-f]+|\d+)\b", HEADER.read_text(), re.MULTILINE):
        out[m.group(1)] = int(m.group(2), 0)
    return out


def _s(name: str) -> int:
    return constants()[f"ONNXIFI_STATUS_{name}"]


_backends: list[Backend] | None = None
_graphs: dict[int, Graph] = {}
_futures: dict[int, concurrent.futures.Future[Any]] = {}
_next_id = 1


def _new_id() -> int:
    global _next_id
    _next_id += 1
    return _next_id - 1


def _guard(fn: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
    """Turn every exception into (status, message, ...): OnnxcErrors are the caller's or the
    backend's refusals, anything else an internal error (with its type, for the bug report)."""

    @functools.wraps(fn)
    def wrapped(*args: Any) -> tuple[Any, ...]:
        try:
            return fn(*args)
        except _Status as e:
            return (e.status, e.message)
        except OnnxcError as e:
            return (_s("UNSUPPORTED_OPERATOR"), str(e))
        except Exception as e:  # noqa: BLE001 - nothing may raise into the C caller
            return (_s("INTERNAL_ERROR"), f"{type(e).__name__}: {e}")

    return wrapped


class _Status(Exception):
    """A specific status code to return, with its message."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = _s(status)
        self.message = message


def _all() -> list[Backend]:
    global _backends
    if _backends is None:
        from onnxc.targets.backends import backends

        _backends = backends()
    return _backends


def _backend(index: int) -> Backend:
    found = _all()
    if not 0 <= index < len(found):
        raise _Status("INVALID_ID", f"backend index {index} out of range (0..{len(found) - 1})")
    return found[index]


@_guard
def discover() -> tuple[int, str, int]:
    """(status, message, number of backends): discovery runs once per process."""
    return (_s("SUCCESS"), "", len(_all()))


_DEVICE_TYPES = {"cpu": "CPU", "gpu": "GPU", "accelerator": "NPU"}
_U64_MAX = (1 << 64) - 1


def _u64(x: float) -> int:
    return _U64_MAX if x == float("inf") else max(0, min(_U64_MAX, int(x)))


@_guard
def info(index: int, query: int) -> tuple[int, str, int, Any]:
    """(status, message, kind, value): kind 0 = bytes (a string), 1 = an uint64 value."""
    c = constants()
    b = _backend(index)
    i = b.info()
    strings = {
        "NAME": i.name, "VENDOR": i.vendor, "VERSION": i.version, "EXTENSIONS": " ".join(i.extensions), "DEVICE": i.device,
        "ONNX_IR_VERSION": str(onnx.IR_VERSION), "OPSET_VERSION": str(onnx.defs.onnx_opset_version()),
    }
    numbers = {
        "ONNXIFI_VERSION": 1 << 32,
        "DEVICE_TYPE": c["ONNXIFI_DEVICE_TYPE_" + _DEVICE_TYPES.get(i.device_kind, "HETEROGENEOUS")],
        "MEMORY_SIZE": i.memory_size,
        "MACS_FP32": _u64(i.macs["f32"].value) if "f32" in i.macs else 0,
        "MACS_FP16": _u64(i.macs["f16"].value) if "f16" in i.macs else 0,
        "MEMORY_BANDWIDTH": _u64(i.memory_bandwidth.value),
        "CPU_MEMORY_READ_BANDWIDTH": _u64(i.host_to_device.value),
        "CPU_MEMORY_WRITE_BANDWIDTH": _u64(i.device_to_host.value),
    }
    for key, value in strings.items():
        if c[f"ONNXIFI_BACKEND_{key}"] == query:
            return (_s("SUCCESS"), "", 0, value.encode())
    for key, number in numbers.items():
        if c[f"ONNXIFI_BACKEND_{key}"] == query:
            return (_s("SUCCESS"), "", 1, int(number))
    raise _Status("UNSUPPORTED_ATTRIBUTE", f"backend info query {query} is not answered by onnxc")


def _parse(model: bytes) -> onnx.ModelProto:
    try:
        proto = onnx.ModelProto.FromString(model)
    except DecodeError as e:
        raise _Status("INVALID_PROTOBUF", f"not a serialized ModelProto: {e}") from None
    if not proto.graph.node:
        raise _Status("INVALID_MODEL", "the model has no nodes")
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        raise _Status("INVALID_MODEL", f"invalid model: {str(e).splitlines()[0]}") from None
    return proto


@_guard
def compatibility(index: int, model: bytes) -> tuple[int, str]:
    """SUCCESS (supported), FALLBACK (partially), UNSUPPORTED_OPERATOR (with the reason)."""
    answer = _backend(index).compatibility(_parse(model))
    if answer.support is Support.SUPPORTED:
        return (_s("SUCCESS"), "")
    return (_s("FALLBACK" if answer.support is Support.PARTIAL else "UNSUPPORTED_OPERATOR"), answer.reason)


@_guard
def init_backend(index: int) -> tuple[int, str]:
    """A reference on the backend (its library starts on the first)."""
    try:
        _backend(index).init()
    except _Status:
        raise
    except Exception as e:  # noqa: BLE001 - a device library that fails to start
        raise _Status("BACKEND_UNAVAILABLE", f"{type(e).__name__}: {e}") from None
    return (_s("SUCCESS"), "")


@_guard
def release_backend(index: int) -> tuple[int, str]:
    _backend(index).release()
    return (_s("SUCCESS"), "")


def _dtype(code: int, name: str) -> np.dtype:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, ValueError, TypeError):
        raise _Status("INVALID_DATATYPE", f"tensor '{name}': data type {code} is not an ONNX tensor type") from None


def _array(d: Descriptor) -> np.ndarray:
    """The caller's memory of descriptor `d` as a numpy array (no copy)."""
    name, code, shape, address = d
    dtype = _dtype(code, name)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count == 0:
        return np.empty(shape, dtype)
    if address == 0:
        raise _Status("INVALID_POINTER", f"tensor '{name}': NULL buffer")
    raw = (ctypes.c_ubyte * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


@_guard
def init_graph(index: int, model: bytes, weights: Sequence[Descriptor]) -> tuple[int, str, int]:
    """(status, message, graph id): the model with the weights (copied) as initializers of its
    inputs of the same name, compiled on the backend."""
    proto = _parse(model)
    inputs = {v.name: v for v in proto.graph.input}
    for d in weights:
        spec = inputs.get(d[0])
        if spec is None:
            raise _Status("UNIDENTIFIED_NAME", f"weight '{d[0]}' is not an input of the model (inputs: {', '.join(inputs)})")
        array = np.array(_array(d), copy=True)
        tt = spec.type.tensor_type
        if tt.elem_type != d[1]:
            raise _Status("MISMATCHING_DATATYPE", f"weight '{d[0]}': data type {d[1]}, the model's input has {tt.elem_type}")
        dims = [x.dim_value if x.HasField("dim_value") else None for x in tt.shape.dim]
        if len(dims) != array.ndim or any(w is not None and w != g for w, g in zip(dims, array.shape)):
            raise _Status("MISMATCHING_SHAPE", f"weight '{d[0]}': shape {array.shape}, the model's input has {dims}")
        for k, t in enumerate(proto.graph.initializer):
            if t.name == d[0]:
                del proto.graph.initializer[k]
                break
        proto.graph.initializer.append(onnx.numpy_helper.from_array(array, d[0]))
    graph = _backend(index).init_graph(proto)
    gid = _new_id()
    _graphs[gid] = graph
    return (_s("SUCCESS"), "", gid)


def _graph(gid: int) -> Graph:
    g = _graphs.get(gid)
    if g is None:
        raise _Status("INVALID_GRAPH", f"graph {gid} was released")
    return g


def _bind(specs: Sequence[Any], given: Sequence[Descriptor], what: str) -> dict[str, np.ndarray]:
    by_name = {s.name: s for s in specs}
    out = {}
    for d in given:
        spec = by_name.get(d[0])
        if spec is None:
            raise _Status("UNIDENTIFIED_NAME", f"{what} '{d[0]}' is not an {what} of the graph ({what}s: {', '.join(by_name)})")
        if _dtype(d[1], d[0]) != spec.dtype:
            raise _Status("MISMATCHING_DATATYPE", f"{what} '{d[0]}': {_dtype(d[1], d[0])}, the graph has {spec.dtype}")
        if len(d[2]) != len(spec.shape) or any(w is not None and w != g for w, g in zip(spec.shape, d[2])):
            raise _Status("MISMATCHING_SHAPE", f"{what} '{d[0]}': shape {tuple(d[2])}, the graph has {spec.shape}")
        out[d[0]] = _array(d)
    return out


@_guard
def set_io(gid: int, inputs: Sequence[Descriptor], outputs: Sequence[Descriptor]) -> tuple[int, str]:
    """Bind the caller's buffers (every input; outputs to be written in place)."""
    g = _graph(gid)
    bound_in = _bind(g.inputs, inputs, "input")
    missing = [s.name for s in g.inputs if s.name not in bound_in]
    if missing:
        raise _Status("INVALID_NAME", f"input(s) {', '.join(missing)} not bound")
    bound_out = _bind(g.outputs, outputs, "output")
    if not all(a.flags.writeable for a in bound_out.values()):
        raise _Status("INVALID_POINTER", "an output buffer is read-only")
    g.set_graph_io(bound_in, bound_out)
    return (_s("SUCCESS"), "")


@_guard
def run(gid: int) -> tuple[int, str, int]:
    """(status, message, run id): the run is queued; its id names the output event's future."""
    g = _graph(gid)
    if g._bindings is None:  # noqa: SLF001 - the one state check set_graph_io leaves to run_graph
        raise _Status("INVALID_STATE", "onnxRunGraph before onnxSetGraphIO")
    rid = _new_id()
    _futures[rid] = g.run_graph()
    return (_s("SUCCESS"), "", rid)


@_guard
def run_done(rid: int) -> tuple[int, str, int]:
    """(status, message, 1 when the run finished)."""
    f = _futures.get(rid)
    if f is None:
        raise _Status("INVALID_EVENT", f"run {rid} is unknown")
    return (_s("SUCCESS"), "", int(f.done()))


@_guard
def run_wait(rid: int) -> tuple[int, str]:
    """Block until the run finished (the GIL is released while waiting); its error, if any."""
    f = _futures.get(rid)
    if f is None:
        raise _Status("INVALID_EVENT", f"run {rid} is unknown")
    error = f.exception()
    if error is not None:
        if isinstance(error, OnnxcError):
            raise _Status("INVALID_STATE" if isinstance(error, BackendError) else "UNSUPPORTED_OPERATOR", str(error))
        raise _Status("INTERNAL_ERROR", f"{type(error).__name__}: {error}")
    return (_s("SUCCESS"), "")


@_guard
def run_release(rid: int) -> tuple[int, str]:
    _futures.pop(rid, None)
    return (_s("SUCCESS"), "")


@_guard
def release_graph(gid: int) -> tuple[int, str]:
    _graph(gid).release_graph()
    del _graphs[gid]
    return (_s("SUCCESS"), "")
