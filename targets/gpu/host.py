"""The host side of a mapped module, read as a straight-line program of buffer operations.

What: `host_program(module)` reads the host function that `mapping.map_to_gpu` leaves beside
its kernels and returns a `HostProgram`: the buffers (arguments, constants with their values,
allocations, and views that alias one of them), then `Launch` and `Copy` steps in order, and
which buffers are the results. A runtime that cannot run MLIR's host code itself (the Python
Vulkan runtime; the CUDA target's PTX report) executes or inspects this program instead.

Why an explicit whitelist: after bufferization the host function should contain only buffer
bookkeeping and kernel launches. Anything else (host loops, scalar arithmetic on tensors,
subviews with an offset) would be silently lost by a runtime that skipped it, so every op not
understood here is refused with a `GpuMappingError` naming it and its location.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from mlir import ir

from .mapping import GpuMappingError, node_label

__all__ = ["ArgLayout", "Buffer", "Copy", "HostProgram", "Launch", "host_program"]


@dataclasses.dataclass(frozen=True)
class Buffer:
    """One device buffer. kind: 'input' (argument `index`), 'constant' (`value`), 'alloc'."""

    id: int
    kind: str
    shape: tuple[int, ...]
    element_type: str
    index: int = -1
    value: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        from onnxc.targets.cpu.abi import numpy_dtype

        if self.element_type == "index":  # 64-bit at most (CUDA's width; Vulkan's kernels use 32)
            return math.prod(self.shape) * 8
        return math.prod(self.shape) * numpy_dtype(self.element_type).itemsize


@dataclasses.dataclass(frozen=True)
class ArgLayout:
    """How a kernel argument views its buffer: element offset, shape and strides (in elements),
    all static (`_static_layout`). Vulkan binds the whole buffer and kernels address it through
    the type alone; CUDA passes these as the fields of the memref descriptor."""

    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Launch:
    """`gpu.launch_func`: kernel `module::function`, grid and workgroup sizes (x, y, z), the
    buffer id behind each kernel argument in order (storage binding i = argument i), each
    argument's view of its buffer (`layouts`, one per argument), and the ONNX node the kernel
    computes (`node 'name' (Op)`, from the launch's location; "" when it names none), for
    reports such as `bench/gpu_models.py --kernels`."""

    module: str
    function: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[int, ...]
    layouts: tuple[ArgLayout, ...] = ()
    node: str = ""


@dataclasses.dataclass(frozen=True)
class Copy:
    """`memref.copy` of a whole buffer into another of the same size."""

    source: int
    target: int


@dataclasses.dataclass
class HostProgram:
    """Buffers, steps in order, result buffer ids, and the entry's name."""

    name: str
    buffers: list[Buffer]
    steps: list[Launch | Copy]
    results: list[int]
    result_shapes: list[tuple[int, ...]]

    @property
    def inputs(self) -> list[Buffer]:
        return sorted((b for b in self.buffers if b.kind == "input"), key=lambda b: b.index)


def _static_identity(t: ir.Type, where: ir.Operation) -> tuple[tuple[int, ...], str]:
    if not isinstance(t, ir.MemRefType) or not t.has_static_shape:
        raise GpuMappingError(f"{where.location}: {where.name}: the GPU targets need static buffers, got {t}")
    layout = t.layout
    if not (isinstance(layout, ir.AffineMapAttr) and layout.value == ir.AffineMap.get_identity(t.rank, context=t.context)):
        raise GpuMappingError(f"{where.location}: {where.name}: a strided view ({t}) is not supported on the host side of a GPU program")
    return tuple(t.shape), str(t.element_type)


def _static_layout(t: ir.Type, where: ir.Operation) -> ArgLayout:
    """A statically shaped memref whose layout (offset and strides) is static: a view kernels
    can address through its type alone; its offset, shape and strides."""
    if not isinstance(t, ir.MemRefType) or not t.has_static_shape:
        raise GpuMappingError(f"{where.location}: {where.name}: the GPU targets need static buffers, got {t}")
    strides, offset = t.get_strides_and_offset()
    if ir.ShapedType.is_dynamic_size(offset) or any(ir.ShapedType.is_dynamic_size(x) for x in strides):
        raise GpuMappingError(f"{where.location}: {where.name}: a view with a dynamic layout ({t}) is not supported on the host side")
    if t.rank == 0 and offset != 0:
        # The SPIR-V lowering drops the offset of a rank-0 view (a Scan over a scalar state read
        # x[0] at every step): refused rather than computed wrong, wherever such a view is
        # made (a reshape, a rank-reducing subview) or handed to a kernel.
        raise GpuMappingError(f"{where.location}: {where.name}: a rank-0 view at an offset ({t}) is not supported on the host side")
    return ArgLayout(int(offset), tuple(int(d) for d in t.shape), tuple(int(x) for x in strides))


def _globals(module: ir.Module) -> dict[str, ir.Operation]:
    return {
        ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
        for op in module.body.operations
        if op.operation.name == "memref.global"
    }


def _index_constant(value: ir.Value, where: ir.Operation) -> int:
    owner = value.owner
    if not isinstance(owner, ir.Operation):
        owner = getattr(owner, "operation", owner)
    if getattr(owner, "name", None) != "arith.constant":
        raise GpuMappingError(f"{where.location}: launch sizes must be constants")
    return int(ir.IntegerAttr(owner.attributes["value"]).value)


def host_program(module: ir.Module) -> HostProgram:
    """Read the single public host function of a mapped module (see the module doc)."""
    from onnxc.importers.tensors import attribute_to_array

    funcs = [op.operation for op in module.body.operations if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)]
    if len(funcs) != 1:
        raise GpuMappingError(f"a GPU program needs exactly one host function, found {len(funcs)}")
    func = funcs[0]
    globals_ = _globals(module)
    buffers: list[Buffer] = []
    values: dict[ir.Value, int] = {}  # host SSA value -> buffer id
    steps: list[Launch | Copy] = []
    block = func.regions[0].blocks[0]

    def new(kind: str, t: ir.Type, where: ir.Operation, **kw: object) -> int:
        shape, et = _static_identity(t, where)
        buffers.append(Buffer(len(buffers), kind, shape, et, **kw))  # type: ignore[arg-type]
        return len(buffers) - 1

    for i, arg in enumerate(block.arguments):
        values[arg] = new("input", arg.type, func, index=i)
    results: list[int] = []
    result_shapes: list[tuple[int, ...]] = []
    for op in block.operations:
        op = op.operation
        name = op.name
        if name == "arith.constant":
            if not isinstance(op.results[0].type, ir.IndexType):
                raise GpuMappingError(
                    f"{op.location}: host-side computation (a constant of type {op.results[0].type}): control flow and "
                    "data-dependent values stay on the host, which the GPU targets do not support yet"
                )
        elif name == "memref.get_global":
            sym = ir.FlatSymbolRefAttr(op.attributes["name"]).value
            g = globals_[sym]
            if "initial_value" not in g.attributes or "constant" not in g.attributes:
                raise GpuMappingError(f"{op.location}: global @{sym} is not a constant")
            array, _ = attribute_to_array(g.attributes["initial_value"])
            values[op.results[0]] = new("constant", op.results[0].type, op, value=np.ascontiguousarray(array))
        elif name in ("memref.alloc", "memref.alloca"):
            if len(op.operands):
                raise GpuMappingError(f"{op.location}: dynamically sized buffers are not supported by the GPU targets")
            values[op.results[0]] = new("alloc", op.results[0].type, op)
        elif name in ("memref.expand_shape", "memref.collapse_shape", "memref.cast", "memref.reshape"):
            # Views of the same bytes (memref.reshape's second operand, the shape, is only read
            # by the host). With identity layouts they are the whole buffer; a reshaped strided
            # view (of a subview) with a static layout is addressed by kernels through the
            # offset and strides of its type, like a subview, so the whole underlying buffer is
            # bound for it too.
            for t in (op.operands[0].type, op.results[0].type):
                _static_layout(t, op)
            values[op.results[0]] = values[op.operands[0]]
        elif name == "memref.subview":
            # A static view: kernels address it with the offset and strides of its type, so the
            # kernel is given the whole underlying buffer (SPIR-V binds the buffer's start).
            t = ir.MemRefType(op.results[0].type)
            if len(op.operands) != 1 or not t.has_static_shape:
                raise GpuMappingError(f"{op.location}: a subview with dynamic offsets or sizes is not supported on the host side")
            strides, offset = t.get_strides_and_offset()
            if ir.ShapedType.is_dynamic_size(offset) or any(ir.ShapedType.is_dynamic_size(x) for x in strides):
                raise GpuMappingError(f"{op.location}: a subview with a dynamic layout is not supported on the host side")
            values[op.results[0]] = values[op.operands[0]]
        elif name == "memref.copy":
            for v in op.operands:
                _static_identity(v.type, op)
            steps.append(Copy(values[op.operands[0]], values[op.operands[1]]))
        elif name == "memref.dealloc":
            pass  # the runtime owns every buffer for the program's lifetime
        elif name == "gpu.launch_func":
            view = op.opview  # gpu.LaunchFuncOp: named accessors for its operand groups
            kernel = ir.SymbolRefAttr(op.attributes["kernel"])
            symbols = kernel.value  # [module, kernel] of `@module::@kernel`
            path = [symbols[0], symbols[-1]]
            if len(view.asyncDependencies) or view.dynamicSharedMemorySize is not None or view.clusterSizeX is not None:
                raise GpuMappingError(f"{op.location}: async, clustered or dynamic-shared-memory launches are not supported")
            grid = tuple(_index_constant(v, op) for v in (view.gridSizeX, view.gridSizeY, view.gridSizeZ))
            blk = tuple(_index_constant(v, op) for v in (view.blockSizeX, view.blockSizeY, view.blockSizeZ))
            args = []
            layouts = []
            for v in view.kernelOperands:
                if not isinstance(v.type, ir.MemRefType):
                    raise GpuMappingError(f"{op.location}: kernel @{path[1]} takes a scalar argument ({v.type}); only buffers are supported")
                if v not in values:
                    raise GpuMappingError(f"{op.location}: kernel argument from an unsupported host op: {v.owner}")
                layouts.append(_static_layout(v.type, op))  # every view a kernel gets: static, and no rank-0 offset
                args.append(values[v])
            steps.append(Launch(path[0], path[1], grid, blk, tuple(args), tuple(layouts), node_label(op)))  # type: ignore[arg-type]
        elif name == "func.return":
            for v in op.operands:
                if v not in values:
                    raise GpuMappingError(f"{op.location}: a result comes from an unsupported host op")
                _static_identity(v.type, op)  # a strided view would be read back as the whole buffer
                results.append(values[v])
                result_shapes.append(tuple(ir.MemRefType(v.type).shape))
        else:
            raise GpuMappingError(f"{op.location}: '{name}' stays on the host after GPU mapping, which the GPU targets do not support yet")
    return HostProgram(ir.StringAttr(func.attributes["sym_name"]).value, buffers, steps, results, result_shapes)
