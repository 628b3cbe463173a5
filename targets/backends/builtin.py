"""The built-in backends: the CPU (always present) and one per code-generation target whose device is.

- `CpuBackend`: onnxc's CPU target. Compatibility is the ONNX -> linalg lowering's own pre-check
  (`onnxc.transforms.lowering.driver.check_op`) on the node after the ONNX passes (upgrade, shape
  inference, folding): exactly what `onnxc.compile(..., target="cpu")` refuses, no second table.
- `TargetBackend`: a device target registered in `onnxc.targets.TARGETS` (`vulkan`, `cuda`).
  Compatibility is the CPU answer (every device target starts from the same linalg) and then
  the target's own pipeline (`Target.pipeline(options)`, run on a copy of the single-node
  module): what the GPU mapping or the SPIR-V/NVVM lowering refuses is what the device refuses,
  asked of the `Target` object rather than copied from its tables. Answers are cached per node
  signature (op, attributes, input types), so a model's hundred Convs cost one compile.

Device presence decides discovery: Vulkan needs a loader and a compute device (`vulkan_context()`,
which also names it: lavapipe here), CUDA a driver that counts a GPU. The Vulkan backend's
figures are measured through its own graphs on first use (`measure.device_figures`); the CUDA
backend's are 0 "not measured" (the CUDA target cannot run on a GPU yet), which the partitioner
never offloads to: no guessed numbers.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnx
from mlir import ir

from onnxc.errors import OnnxcError
from onnxc.importers import import_model
from onnxc.targets import get_target
from onnxc.targets.backends.base import Backend, BackendError, BackendInfo, Compatibility, Figure, GraphFunction, Support
from onnxc.targets.backends.measure import cpu_figures, device_figures
from onnxc.transforms.pipeline import run_pipeline

__all__ = ["CpuBackend", "TargetBackend", "cuda_backend", "vulkan_backend", "onnx_module", "node_signature"]

_ONNX_DIALECTS = ("onnx", "onnx_ml", "onnx_training", "onnx_preview")
_INF = float("inf")


def onnx_module(model: onnx.ModelProto) -> ir.Module:
    """`model` imported, its model-local functions inlined (so every node is an ONNX op of the
    main graph, which the partitioner can place), and run through the ONNX passes (types
    inferred): what every target lowers."""
    module = import_model(model)
    run_pipeline(module, "inline-functions,onnx-passes", reraise=True)
    return module


def onnx_ops(module: ir.Module) -> list[ir.Operation]:
    """The ONNX ops of every function of `module` (top level of each body; regions are checked
    by their parent op's pattern)."""
    out = []
    for f in module.body.operations:
        for region in f.operation.regions:
            for block in region.blocks:
                for op in block.operations:
                    if op.operation.name.split(".", 1)[0] in _ONNX_DIALECTS:
                        out.append(op.operation)
    return out


def node_signature(model: onnx.ModelProto) -> bytes:
    """A cache key of a single-node model: its nodes and typed inputs (names stripped)."""
    g = onnx.GraphProto()
    g.CopyFrom(model.graph)
    g.name = ""
    for n in g.node:
        n.name = ""
        n.doc_string = ""
    return g.SerializeToString(deterministic=True) + b"|" + b",".join(o.domain.encode() + str(o.version).encode() for o in model.opset_import)


def _op_type_known(node: onnx.NodeProto) -> bool:
    from onnxc.transforms.lowering import lowered_op_types

    if (node.domain or "", node.op_type) in lowered_op_types():
        return True
    try:  # ops without a direct pattern may still be expanded through their schema function
        schema = onnx.defs.get_schema(node.op_type, domain=node.domain or "")
    except onnx.defs.SchemaError:
        return False
    return schema.has_function or schema.has_context_dependent_function


def _cpu_reasons(model: onnx.ModelProto) -> tuple[ir.Module | None, list[str]]:
    """The module after the ONNX passes and every reason the CPU lowering refuses it."""
    from onnxc.transforms.lowering import load_patterns
    from onnxc.transforms.lowering.driver import check_op

    load_patterns()
    try:
        module = onnx_module(model)
    except OnnxcError as e:
        return None, [str(e)]
    with module.context:
        reasons = [r for op in onnx_ops(module) for r in check_op(op)]
    return module, reasons


class CpuBackend(Backend):
    """The host CPU through onnxc's CPU target (LLVM JIT)."""

    name = "cpu"

    def info(self) -> BackendInfo:
        """Measured figures (cached per machine, see `measure.py`); no transfers (host memory)."""
        return _cpu_info()

    def compatibility(self, node_or_model: onnx.NodeProto | onnx.ModelProto) -> Compatibility:
        """The lowering's pre-check on the (single-node) model; a bare node by its op type only."""
        if isinstance(node_or_model, onnx.NodeProto):
            return _by_op_type(node_or_model)
        return _cached_cpu(node_signature(node_or_model), node_or_model)

    def _compile_graph(self, model: onnx.ModelProto) -> GraphFunction:
        return _compile_with(get_target("cpu"), None, model)


@functools.cache
def _cpu_info() -> BackendInfo:
    """The CPU's `BackendInfo` (figures measured once per machine)."""
    import platform

    figs = cpu_figures()
    none = Figure(_INF, "host memory: no transfer")
    return BackendInfo(
        name="cpu", vendor="onnxc", version=_version(), device=platform.processor() or platform.machine(),
        device_kind="cpu", macs=figs["macs"], memory_bandwidth=figs["memory_bandwidth"],
        host_to_device=none, device_to_host=none, memory_size=_memory_size(),
        dtypes=("f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"),
    )


_CPU_ANSWERS: dict[bytes, Compatibility] = {}


def _cached_cpu(key: bytes, model: onnx.ModelProto) -> Compatibility:
    if key not in _CPU_ANSWERS:
        _, reasons = _cpu_reasons(model)
        _CPU_ANSWERS[key] = Compatibility(Support.UNSUPPORTED, "; ".join(reasons)) if reasons else Compatibility(Support.SUPPORTED)
    return _CPU_ANSWERS[key]


def _by_op_type(node: onnx.NodeProto) -> Compatibility:
    who = f"{node.domain + '::' if node.domain else ''}{node.op_type}"
    if _op_type_known(node):
        return Compatibility(Support.PARTIAL, f"{who} is lowered for some types and attributes; pass a single-node model with typed inputs for a definite answer")
    return Compatibility(Support.UNSUPPORTED, f"{who}: no lowering and no schema function")


def _viewing_integers(runnable: Any, model: onnx.ModelProto) -> GraphFunction:
    """`runnable` called with its arguments as the compiled code holds them and its results
    viewed as the graph outputs' ONNX types (the rules of `targets.cpu.abi.as_argument` and
    `as_onnx_result`, shared with `onnxc.CompiledModel`)."""
    from onnx import helper

    from onnxc.targets.cpu.abi import as_argument, as_onnx_result

    sig = getattr(runnable, "signature", None)
    wanted = [
        np.dtype(helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)) if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type else None
        for o in model.graph.output
    ]

    def call(*arrays: Any) -> Any:
        given = [np.asarray(a) for a in arrays]
        if sig is not None:
            given = [as_argument(a, spec) for a, spec in zip(given, sig.inputs)]
        results = runnable(*given)
        return [as_onnx_result(r, d) if d is not None and isinstance(r, np.ndarray) else r for r, d in zip(results, wanted)]

    return call


def _compile_with(target: Any, options: Any, model: onnx.ModelProto) -> GraphFunction:
    """Import, lower to linalg and compile `model` with `target`; the runnable takes the graph's
    non-initializer inputs in order (what `Graph` passes)."""
    from onnx import numpy_helper

    module = import_model(model)
    run_pipeline(module, "onnx-to-linalg", reraise=True)
    runnable = target.compile(module, target.options(options))
    # The runnable holds unsigned ONNX types in signless integers of the same width (uint8 as
    # int8): the arrays are viewed as `onnxc.compile` does, so a uint8 graph placed on a backend
    # takes and returns uint8 arrays (target="auto" refused them before). Done here, not with
    # `onnxc.compiler.CompiledModel`: targets sit below the `onnxc` package (DEVELOPERS.md, Layers).
    compiled = _viewing_integers(runnable, model)
    # The importer keeps inputs that have an initializer as arguments (callers of onnxc.compile
    # may override them); a backend graph binds only the others, so the initializer is passed.
    names = [v.name for v in model.graph.input]
    defaults = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in set(names)}
    if not defaults:
        return compiled

    def with_defaults(*arrays: Any) -> Any:
        given = iter(arrays)
        return compiled(*[defaults[n] if n in defaults else next(given) for n in names])

    return with_defaults


def _version() -> str:
    """onnxc's version, from the installed distribution (the `onnxc` package sits above targets)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("onnxc")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


def _memory_size() -> int:
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX
        return 0


#: Compatibility answers of device targets for this process: (target, device, node signature) ->
#: answer (each `backends()` call makes new backend objects; the answers stay true).
_TARGET_ANSWERS: dict[tuple[str, str, bytes], Compatibility] = {}


class TargetBackend(Backend):
    """A device target of `onnxc.targets` (one device: the first the target's runtime finds)."""

    def __init__(self, target: str, device: str, info: BackendInfo | None = None, dtypes: tuple[str, ...] = ("f32",), options: Any = None) -> None:
        super().__init__()
        self.name = target
        self.target = get_target(target)
        self.device = device
        self._info = info
        self.dtypes = dtypes
        self.options = options

    def info(self) -> BackendInfo:
        """The figures given at discovery, or (none given) measured through this backend's own
        graphs on first use and cached per machine and device (`measure.device_figures`)."""
        if self._info is None:
            figs = device_figures(self, self.device)
            self._info = BackendInfo(
                name=self.name, vendor="onnxc", version=_version(), device=self.device, device_kind="gpu", macs=figs["macs"],
                memory_bandwidth=figs["memory_bandwidth"], host_to_device=figs["host_to_device"],
                device_to_host=figs["device_to_host"], memory_size=0, dtypes=self.dtypes,
            )
        return self._info

    def compatibility(self, node_or_model: onnx.NodeProto | onnx.ModelProto) -> Compatibility:
        """The CPU lowering's pre-check, then the target's pipeline on a copy of the module."""
        if isinstance(node_or_model, onnx.NodeProto):
            base = _by_op_type(node_or_model)
            return base if base.support is Support.UNSUPPORTED else Compatibility(Support.PARTIAL, base.reason + f" ({self.name}: decided per typed node)")
        key = (self.name, self.device, node_signature(node_or_model))
        if key not in _TARGET_ANSWERS:
            _TARGET_ANSWERS[key] = self._ask_target(node_or_model)
        return _TARGET_ANSWERS[key]

    def _ask_target(self, model: onnx.ModelProto) -> Compatibility:
        module, reasons = _cpu_reasons(model)
        if reasons or module is None:
            return Compatibility(Support.UNSUPPORTED, "; ".join(reasons))
        try:
            # The named stage, as `compile` runs it (its ONNX passes are a no-op the second time).
            run_pipeline(module, "onnx-to-linalg", reraise=True)
            run_pipeline(module, self.target.pipeline(self.target.options(self.options)), reraise=True)
        except OnnxcError as e:
            return Compatibility(Support.UNSUPPORTED, f"{self.name}: {e}".splitlines()[0])
        return Compatibility(Support.SUPPORTED)

    def _compile_graph(self, model: onnx.ModelProto) -> GraphFunction:
        try:
            return _compile_with(self.target, self.options, model)
        except OnnxcError as e:
            raise BackendError(f"backend '{self.name}' refused the graph: {e}") from e


def vulkan_backend() -> TargetBackend | None:
    """The first Vulkan compute device as a backend, or None when there is none. Its figures are
    measured on first use through its own compiled graphs (lavapipe included: there the "device"
    is the host CPU run through a Vulkan driver, and the measurement says how much slower)."""
    from onnxc.targets.vulkan import SUPPORTED_ELEMENT_TYPES, VulkanError, vulkan_context

    try:
        ctx = vulkan_context()
    except VulkanError:
        return None
    return TargetBackend("vulkan", ctx.device_name, dtypes=tuple(SUPPORTED_ELEMENT_TYPES))


def cuda_backend() -> TargetBackend | None:
    """The first CUDA GPU as a backend, or None without a driver and device. Its figures are
    measured on first use through its own compiled graphs, as the Vulkan backend's are."""
    from onnxc.targets.cuda import CudaLoweringError, cuda_context, cuda_device_count

    if cuda_device_count() == 0:
        return None
    try:
        ctx = cuda_context()
    except CudaLoweringError:
        return None
    return TargetBackend("cuda", ctx.device_name, dtypes=("f32",))
