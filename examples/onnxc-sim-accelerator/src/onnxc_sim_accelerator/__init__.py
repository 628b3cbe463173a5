"""A simulated accelerator as an onnxc backend plug-in: what a hardware vendor writes.

What it shows (docs/backends.md walks through it):

- Discovery: the distribution declares `simaccel = "onnxc_sim_accelerator:make_backends"` in the
  `onnxc.backends` entry-point group (pyproject.toml); onnxc calls `make_backends()` when it
  lists backends, which returns one `SimAccelerator` per device found (none: an empty list, so
  a machine without the device simply does not list it).
- Declared figures: a vendor knows its device's peak MACs/s, memory bandwidth and link
  bandwidth; `info()` returns them with provenance "declared" (onnxc measures only its
  built-in backends). They come from `SimConfig`, which reads `ONNXC_SIM_ACCEL_*` environment
  variables so a test (or a curious user) can make the device faster, slower or smaller and
  watch the partitioner's decisions change.
- A subset of ops and data types: `compatibility()` accepts the ops of `SUPPORTED_OPS` on
  float32/float16 tensors only, answering UNSUPPORTED with the reason otherwise, and PARTIAL
  for a bare node (its types are unknown until it comes as a typed single-node model).
- Refusal at init: `_compile_graph` refuses a graph whose weights and I/O do not fit the
  declared device memory, something no single-node query can foresee; onnxc then runs that
  subgraph on its next choice (the CPU) with a warning.
- Execution through onnxc's CPU code: the "device" compiles each graph with the public
  `onnxc.compile(model, target="cpu")`, and a run copies the inputs to "device buffers" and the
  outputs back, counting every transfer (`stats`), so a test can check what moved.

Only public names of onnxc are used (`onnxc.targets.backends`, `onnxc.compile`): a plug-in never
needs onnxc's internals, and onnxc imports nothing of it until `backends()` is called.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from onnxc.targets.backends import Backend, BackendError, BackendInfo, Compatibility, Figure, Support

__all__ = ["SUPPORTED_OPS", "SUPPORTED_TYPES", "SimAccelerator", "SimConfig", "TransferStats", "make_backends"]

__version__ = "0.1.0"

#: The ONNX ops (default domain) the accelerator runs.
SUPPORTED_OPS = frozenset({"Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Conv", "Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs"})
#: The element types it computes in (ONNX data types), by the name `info()` reports them with.
SUPPORTED_TYPES = {onnx.TensorProto.FLOAT: "f32", onnx.TensorProto.FLOAT16: "f16"}

_ENV = "ONNXC_SIM_ACCEL_"


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """The simulated device's declared figures (what a vendor's data sheet says).

    Each field can be set by an environment variable `ONNXC_SIM_ACCEL_<FIELD>` (upper case):
    `devices=0` means no device is present."""

    devices: int = 1
    macs_f32: float = 50.0e12  # multiply-accumulates per second
    macs_f16: float = 100.0e12
    memory_bandwidth: float = 1.0e12  # device memory, bytes per second
    link: float = 16.0e9  # host <-> device, bytes per second each way
    memory: int = 8 << 30  # device memory, bytes

    @classmethod
    def from_env(cls) -> SimConfig:
        """The defaults, overridden by `ONNXC_SIM_ACCEL_*` variables (bad values name the variable)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = os.environ.get(_ENV + f.name.upper())
            if raw is None:
                continue
            try:
                values[f.name] = int(float(raw)) if f.type in ("int", int) else float(raw)
            except ValueError:
                raise BackendError(f"{_ENV}{f.name.upper()}={raw!r} is not a number") from None
        return cls(**values)


@dataclasses.dataclass
class TransferStats:
    """What moved between the host and the simulated device (bytes and number of copies)."""

    h2d_bytes: int = 0
    d2h_bytes: int = 0
    h2d_copies: int = 0
    d2h_copies: int = 0
    weight_bytes: int = 0  # uploaded once per graph, at init
    runs: int = 0
    graphs: int = 0


def _tensor_bytes(t: onnx.TypeProto) -> int:
    """Bytes of a tensor type (unknown dims count as 1: a lower bound)."""
    tt = t.tensor_type
    n = 1
    for d in tt.shape.dim:
        n *= d.dim_value if d.HasField("dim_value") else 1
    return n * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).itemsize


class SimAccelerator(Backend):
    """One simulated device (see the module doc)."""

    def __init__(self, index: int, config: SimConfig) -> None:
        super().__init__()
        self.name = "simaccel" if index == 0 else f"simaccel{index}"
        self.index = index
        self.config = config
        self.stats = TransferStats()
        self.opened = 0  # how often the "driver" was initialized (lazily, by onnxc's init())
        self._stats_lock = threading.Lock()

    # -- the proposal's onnxGetBackendInfo

    def info(self) -> BackendInfo:
        """The declared figures, provenance "declared"."""
        c = self.config
        link = Figure(c.link, "declared")
        return BackendInfo(
            name=self.name, vendor="onnxc examples", version=__version__, device=f"simulated accelerator #{self.index}",
            device_kind="accelerator", macs={"f32": Figure(c.macs_f32, "declared"), "f16": Figure(c.macs_f16, "declared")},
            memory_bandwidth=Figure(c.memory_bandwidth, "declared"), host_to_device=link, device_to_host=link,
            memory_size=c.memory, dtypes=tuple(SUPPORTED_TYPES.values()), extensions=("transfer-counters",),
        )

    # -- lazy library initialization (onnxInitBackend / onnxReleaseBackend)

    def _startup(self) -> None:
        self.opened += 1

    # -- onnxGetBackendCompatibility

    def compatibility(self, node_or_model: onnx.NodeProto | onnx.ModelProto) -> Compatibility:
        """Ops of `SUPPORTED_OPS` on float32/float16 tensors; a bare node by its op type only."""
        if isinstance(node_or_model, onnx.NodeProto):
            why = self._op_problem(node_or_model)
            if why:
                return Compatibility(Support.UNSUPPORTED, why)
            return Compatibility(Support.PARTIAL, f"{node_or_model.op_type}: supported for float32/float16 tensors; pass a typed single-node model")
        problems = [p for n in node_or_model.graph.node for p in [self._op_problem(n)] if p]
        problems += self._type_problems(node_or_model)
        if problems:
            return Compatibility(Support.UNSUPPORTED, "; ".join(problems))
        return Compatibility(Support.SUPPORTED)

    @staticmethod
    def _op_problem(node: onnx.NodeProto) -> str:
        if node.domain not in ("", "ai.onnx") or node.op_type not in SUPPORTED_OPS:
            return f"simaccel has no kernel for {node.domain + '::' if node.domain else ''}{node.op_type}"
        if node.op_type == "Conv" and any(a.name == "group" and a.i != 1 for a in node.attribute):
            return "simaccel runs ungrouped Conv only"
        return ""

    @staticmethod
    def _type_problems(model: onnx.ModelProto) -> list[str]:
        g = model.graph
        typed = [(v.name, v.type.tensor_type.elem_type if v.type.HasField("tensor_type") else None) for v in [*g.input, *g.output, *g.value_info]]
        typed += [(t.name, t.data_type) for t in g.initializer]
        bad = sorted({f"'{name}' is {onnx.TensorProto.DataType.Name(t) if t else 'not a tensor'}" for name, t in typed if t not in SUPPORTED_TYPES})
        return [f"simaccel computes in float32/float16 only: {', '.join(bad)}"] if bad else []

    # -- onnxInitGraph

    def _compile_graph(self, model: onnx.ModelProto) -> Callable[..., Sequence[np.ndarray]]:
        """Check the graph fits, "upload" its weights, compile it with onnxc's CPU target."""
        answer = self.compatibility(model)
        if answer.support is not Support.SUPPORTED:
            raise BackendError(f"{self.name}: {answer.reason}")
        g = model.graph
        weights = sum(t.ByteSize() for t in g.initializer)
        io = sum(_tensor_bytes(v.type) for v in [*g.input, *g.output])
        if weights + io > self.config.memory:
            raise BackendError(f"{self.name}: the graph needs {weights + io} bytes of device memory, the device has {self.config.memory}")
        import onnxc

        compiled = onnxc.compile(model, target="cpu")
        initialized = {t.name for t in g.initializer}
        names = [v.name for v in g.input if v.name not in initialized]
        with self._stats_lock:
            self.stats.weight_bytes += weights
            self.stats.graphs += 1

        def run(*arrays: np.ndarray) -> list[np.ndarray]:
            on_device = [np.array(a, copy=True) for a in arrays]  # host -> device
            outputs = compiled(**dict(zip(names, on_device)))
            on_host = [np.array(o, copy=True) for o in outputs]  # device -> host
            with self._stats_lock:
                self.stats.h2d_bytes += sum(a.nbytes for a in on_device)
                self.stats.h2d_copies += len(on_device)
                self.stats.d2h_bytes += sum(o.nbytes for o in on_host)
                self.stats.d2h_copies += len(on_host)
                self.stats.runs += 1
            return on_host

        return run


def make_backends() -> list[SimAccelerator]:
    """The entry point onnxc calls: one backend per simulated device (`ONNXC_SIM_ACCEL_DEVICES`)."""
    config = SimConfig.from_env()
    return [SimAccelerator(i, config) for i in range(max(config.devices, 0))]
