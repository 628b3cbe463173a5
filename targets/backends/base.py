"""The backend interface: the ONNXIFI proposal's operations (docs/proposals/0003) in Python form.

A *backend* is one software library driving one device (the proposal's definition): the CPU
through onnxc's CPU target, the first Vulkan device through the Vulkan target, a vendor's
accelerator through a plug-in. What a framework does with one, in the proposal's order:

1. `info()` -> `BackendInfo`: name, vendor, version, device kind, peak MACs/s per data type,
   memory bandwidth, host->device and device->host bandwidths, memory size, data types,
   extensions, and for every figure where it comes from (`Figure.provenance`: "measured <date>",
   "declared" by a plug-in, "unknown"), so a partition decision can be traced to its inputs.
2. `init()` / `release()`: reference counted; the device library is initialized lazily, on the
   first `init()` (or the first call that needs the device), and torn down when the count drops
   to zero (`onnxInitBackend`/`onnxReleaseBackend`).
3. `compatibility(node_or_model)` -> `Compatibility` (supported / unsupported / partially
   supported, with the reason) for an ONNX node or a single-node model
   (`onnxGetBackendCompatibility`).
4. `init_graph(model)` -> `Graph` (`onnxInitGraph`); `Graph.set_graph_io(bindings)` checks names,
   shapes and element types against the model's inputs/outputs (`onnxSetGraphIO`);
   `Graph.run_graph()` returns at once a `concurrent.futures.Future` that completes when the
   outputs are written (`onnxRunGraph` with its output event; runs go through the backend's own
   worker thread, one at a time, like commands on a device queue); `Graph.release_graph()`
   (`onnxReleaseGraph`).

`Backend` is an abstract base class rather than a bare `Protocol` because reference counting,
lazy initialization and the I/O checks are the same for every backend: a plug-in implements only
`info`, `_startup`/`_shutdown`, `compatibility` and `_compile_graph`.
"""

from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
import enum
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnxc.errors import OnnxcError

__all__ = [
    "Backend",
    "BackendError",
    "BackendInfo",
    "Compatibility",
    "Figure",
    "Graph",
    "GraphFunction",
    "Support",
    "TensorSpec",
]


class BackendError(OnnxcError):
    """A backend refused a request: an unknown backend, a graph it cannot take, bad I/O bindings
    (the message names the tensor), or a call on a released backend or graph."""


@dataclasses.dataclass(frozen=True)
class Figure:
    """One performance figure and where it comes from ("measured 2026-11-24", "declared", ...)."""

    value: float
    provenance: str


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """What `onnxGetBackendInfo` answers, as one record.

    macs: peak multiply-accumulates per second, per element type (MLIR spelling: "f32", "f16",
        "i8"...). memory_bandwidth: device memory bytes/s. host_to_device / device_to_host:
        transfer bytes/s (the proposal's CPU_MEMORY_READ/WRITE_BANDWIDTH); `inf` for the CPU,
        which needs no transfer. memory_size: device memory in bytes (0 when unknown).
    """

    name: str
    vendor: str
    version: str
    device: str
    device_kind: str  # "cpu", "gpu", "accelerator"
    macs: Mapping[str, Figure]
    memory_bandwidth: Figure
    host_to_device: Figure
    device_to_host: Figure
    memory_size: int
    dtypes: tuple[str, ...]
    extensions: tuple[str, ...] = ()

    def profile(self) -> dict[str, Any]:
        """The figures as plain data, the form the `onnx-partition` pass reads (no provenance)."""
        return {
            "macs": {k: f.value for k, f in self.macs.items()},
            "mem_bw": self.memory_bandwidth.value,
            "h2d_bw": self.host_to_device.value,
            "d2h_bw": self.device_to_host.value,
            "host": self.device_kind == "cpu",
        }


class Support(enum.Enum):
    """`onnxGetBackendCompatibility`'s three answers."""

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    PARTIAL = "partially supported"


@dataclasses.dataclass(frozen=True)
class Compatibility:
    """A compatibility answer and why (empty reason when supported)."""

    support: Support
    reason: str = ""

    def __bool__(self) -> bool:
        return self.support is Support.SUPPORTED


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, numpy dtype, shape (None for a dimension known only at run time)."""

    name: str
    dtype: np.dtype
    shape: tuple[int | None, ...]

    def check(self, array: np.ndarray, what: str) -> None:
        """Raise `BackendError` naming this tensor unless `array` has its dtype and shape."""
        if array.dtype != self.dtype:
            raise BackendError(f"{what} '{self.name}': element type {array.dtype}, the graph expects {self.dtype}")
        if array.ndim != len(self.shape) or any(d is not None and d != s for d, s in zip(self.shape, array.shape)):
            want = "x".join("?" if d is None else str(d) for d in self.shape) or "scalar"
            raise BackendError(f"{what} '{self.name}': shape {tuple(array.shape)}, the graph expects {want}")


def _specs(values: Sequence[onnx.ValueInfoProto]) -> list[TensorSpec]:
    out = []
    for v in values:
        t = v.type.tensor_type
        if not v.type.HasField("tensor_type"):
            raise BackendError(f"graph value '{v.name}' is not a tensor; backends take tensor inputs and outputs only")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        out.append(TensorSpec(v.name, dtype, shape))
    return out


#: A compiled graph: called with the input arrays in the model's input order, returns outputs in order.
GraphFunction = Callable[..., Sequence[np.ndarray]]


class Graph:
    """A model initialized on a backend (`onnxInitGraph`): holds a reference to the backend."""

    def __init__(self, backend: Backend, model: onnx.ModelProto, function: GraphFunction) -> None:
        self.backend = backend
        self.model = model
        initializers = {i.name for i in model.graph.initializer}
        self.inputs = _specs([v for v in model.graph.input if v.name not in initializers])
        self.outputs = _specs(model.graph.output)
        self._function: GraphFunction | None = function
        self._bindings: dict[str, np.ndarray] | None = None
        self._outputs: dict[str, np.ndarray] = {}

    def set_graph_io(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray] | None = None) -> None:
        """Bind input arrays (every input, by name) and optionally output arrays to write into;
        shapes and element types are checked here, each error naming the tensor."""
        self._alive()
        given = {k: np.asarray(v) for k, v in inputs.items()}
        for name in given:
            if name not in {s.name for s in self.inputs}:
                raise BackendError(f"input '{name}' is not an input of the graph (inputs: {', '.join(s.name for s in self.inputs)})")
        for spec in self.inputs:
            if spec.name not in given:
                raise BackendError(f"input '{spec.name}' is not bound")
            spec.check(given[spec.name], "input")
        out: dict[str, np.ndarray] = {}
        for name, array in (outputs or {}).items():
            spec = next((s for s in self.outputs if s.name == name), None)
            if spec is None:
                raise BackendError(f"output '{name}' is not an output of the graph (outputs: {', '.join(s.name for s in self.outputs)})")
            spec.check(array, "output")
            out[name] = array
        self._bindings = given
        self._outputs = out

    def run_graph(self) -> concurrent.futures.Future[dict[str, np.ndarray]]:
        """Start a run with the bound I/O and return at once (`onnxRunGraph`); the future completes
        when the outputs are ready, with the outputs by name (bound output arrays are written in
        place as well), or with the run's error. Runs on one backend execute one at a time, in
        submission order (its queue); the bound arrays must not change until the future is done."""
        self._alive()
        if self._bindings is None:
            raise BackendError("run_graph before set_graph_io: bind the inputs first")
        fn, outputs, bound = self._function, self.outputs, self._outputs
        assert fn is not None
        arrays = [self._bindings[s.name] for s in self.inputs]

        def work() -> dict[str, np.ndarray]:
            named = {}
            for spec, value in zip(outputs, list(fn(*arrays))):
                value = np.asarray(value)
                if spec.name in bound:
                    spec.check(value, "output")
                    bound[spec.name][...] = value
                    value = bound[spec.name]
                named[spec.name] = value
            return named

        return self.backend.submit(work)

    def release_graph(self) -> None:
        """Free the compiled graph and drop the reference to the backend (idempotent)."""
        if self._function is not None:
            self._function = None
            self.backend.release()

    def _alive(self) -> None:
        if self._function is None:
            raise BackendError(f"graph on backend '{self.backend.name}' was released")


class Backend(abc.ABC):
    """One library + one device. Subclasses implement `info`, `compatibility`, `_compile_graph`
    and, when the device needs it, `_startup`/`_shutdown` (the lazy library initialization)."""

    name: str = ""

    def __init__(self) -> None:
        self._refs = 0
        self._started = False
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    @abc.abstractmethod
    def info(self) -> BackendInfo:
        """The backend's description and figures (cached by implementations that measure)."""

    @abc.abstractmethod
    def compatibility(self, node_or_model: onnx.NodeProto | onnx.ModelProto) -> Compatibility:
        """Whether the backend runs this node (a bare node is judged by its op type alone, hence
        at best PARTIAL; a single-node model with typed inputs gets a definite answer)."""

    @abc.abstractmethod
    def _compile_graph(self, model: onnx.ModelProto) -> GraphFunction:
        """Compile `model` for the device; raise `BackendError` (or any `OnnxcError`) to refuse it."""

    def _startup(self) -> None:
        """Initialize the device library (called once, lazily)."""

    def _shutdown(self) -> None:
        """Release the device library (called when the last reference goes)."""

    @property
    def references(self) -> int:
        """The current reference count (graphs hold one each)."""
        return self._refs

    @property
    def started(self) -> bool:
        """Whether the device library is initialized now."""
        return self._started

    def submit(self, work: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Queue `work` on the backend's one worker thread (created on first use)."""
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"onnxc-{self.name}")
            return self._executor.submit(work)

    def init(self) -> Backend:
        """Take a reference, initializing the device library on the first one."""
        with self._lock:
            if not self._started:
                self._startup()
                self._started = True
            self._refs += 1
        return self

    def release(self) -> None:
        """Drop a reference; the last one shuts the device library down."""
        with self._lock:
            if self._refs <= 0:
                raise BackendError(f"backend '{self.name}' released more often than initialized")
            self._refs -= 1
            if self._refs == 0 and self._started:
                if self._executor is not None:  # finish queued runs before the library goes
                    self._executor.shutdown(wait=True)
                    self._executor = None
                self._shutdown()
                self._started = False

    def init_graph(self, model: onnx.ModelProto) -> Graph:
        """Compile `model` for this backend; the graph holds a backend reference until released."""
        self.init()
        try:
            return Graph(self, model, self._compile_graph(model))
        except BaseException:
            self.release()
            raise

    def __repr__(self) -> str:
        return f"<{type(self).__name__} '{self.name}' refs={self._refs}>"
