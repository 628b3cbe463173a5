"""The Vulkan target: linalg on tensors -> gpu kernels -> SPIR-V, run by a Python Vulkan runtime.

- `lowering.py`: `VulkanOptions`, `lower_to_spirv(module)`, `spirv_binaries(module)`.
- `runtime.py`: `VulkanContext`, `VulkanProgram` (device buffers, one recorded command buffer).
- `compile_module(module, options)` here: map, lower, load; returns a `VulkanFunction` called with
  numpy arrays like the CPU target's `CompiledFunction`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mlir import ir

from onnxc.targets.cpu.abi import FunctionSignature
from onnxc.targets.gpu import device_for, host_program, map_to_gpu

from .lowering import SUPPORTED_ELEMENT_TYPES, VulkanLoweringError, VulkanOptions, lower_to_spirv, spirv_binaries
from .runtime import VulkanContext, VulkanError, VulkanProgram, VulkanUnavailable, vulkan_context

__all__ = [
    "STAGES",
    "SUPPORTED_ELEMENT_TYPES",
    "VulkanContext",
    "VulkanError",
    "VulkanFunction",
    "VulkanLoweringError",
    "VulkanOptions",
    "VulkanProgram",
    "VulkanUnavailable",
    "compile_module",
    "lower_module",
    "spirv_binaries",
    "vulkan_context",
]

#: IR stages of the Vulkan target after linalg (`--emit`): gpu kernels, SPIR-V dialect, binary.
STAGES: tuple[str, ...] = ("gpu", "spirv", "binary")


def _copy(module: ir.Module) -> ir.Module:
    return ir.Module.parse(module.operation.get_asm(binary=True), context=module.context)


def lower_module(module: ir.Module, stage: str = "binary", options: VulkanOptions | None = None) -> ir.Module:
    """Lower `module` (linalg on tensors) in place up to `stage` (one of `STAGES`)."""
    opts = options or VulkanOptions()
    opts.validate()
    if stage not in STAGES:
        raise VulkanLoweringError(f"unknown Vulkan stage {stage!r} (stages: {', '.join(STAGES)})")
    map_to_gpu(module, device_for(opts.device))
    if stage != "gpu":
        lower_to_spirv(module, opts, serialize=stage == "binary")
    return module


class VulkanFunction:
    """A model's entry compiled for Vulkan: `f(*arrays) -> list[np.ndarray]`.

    `signature` is the tensor-level signature (arguments are checked against it before anything
    is written to the device); `spirv` holds each kernel module's SPIR-V.
    """

    def __init__(self, signature: FunctionSignature, program: VulkanProgram, spirv: dict[str, bytes]) -> None:
        self.signature = signature
        self.program = program
        self.spirv = spirv

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        return self.program(*self.signature.validate(arrays))

    def __repr__(self) -> str:
        return f"<VulkanFunction {self.signature} on {self.program.ctx.device_name}: {len(self.spirv)} kernel(s)>"


def compile_module(module: ir.Module, options: VulkanOptions | None = None, entry: str | None = None) -> VulkanFunction:
    """Map, lower and load a copy of `module` (linalg on ranked static tensors) on the first
    Vulkan device; `module` is left unchanged."""
    from onnxc.targets.cpu.jit import select_entry

    opts = options or VulkanOptions()
    opts.validate()
    signature = select_entry(module, entry)
    for spec in list(signature.inputs) + list(signature.results):
        if spec.element_type not in SUPPORTED_ELEMENT_TYPES:
            raise VulkanLoweringError(f"@{signature.name}: {spec} has element type {spec.element_type}; the Vulkan target supports {', '.join(SUPPORTED_ELEMENT_TYPES)}")
    lowered = _copy(module)
    with lowered.context:
        map_to_gpu(lowered, device_for(opts.device))
        program = host_program(lowered)
        lower_to_spirv(lowered, opts)
        binaries = spirv_binaries(lowered)
    return VulkanFunction(signature, VulkanProgram(program, binaries), binaries)


def run(module: ir.Module, *arrays: np.ndarray, options: VulkanOptions | None = None) -> Sequence[np.ndarray]:
    """Compile and call once (convenience for tests and tools)."""
    return compile_module(module, options)(*arrays)
