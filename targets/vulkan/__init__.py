"""The Vulkan target: linalg on tensors -> gpu kernels -> SPIR-V, run by a Python Vulkan runtime.

- `lowering.py`: `VulkanOptions`, `lower_to_spirv(module)`, `spirv_binaries(module)`.
- `runtime.py`: `VulkanContext`, `VulkanProgram` (device buffers, one recorded command buffer).
- `passes.py`: the stages as registered passes (`gpu-to-spirv`, `spirv-serialize`).
- `target.py`: `VulkanTarget` (`onnxc.compile(model, target="vulkan")`).
- `compile_module(module, options)` here: map, lower, load; returns a `VulkanFunction` called with
  numpy arrays like the CPU target's `CompiledFunction`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mlir import ir

from onnxc.targets.cpu.abi import FunctionSignature

from .lowering import NARROW_INTEGER_TYPES, SUPPORTED_ELEMENT_TYPES, VulkanLoweringError, VulkanOptions, lower_to_spirv, serialize_spirv, spirv_binaries
from .runtime import VulkanContext, VulkanError, VulkanProgram, VulkanUnavailable, vulkan_context

__all__ = [
    "SUPPORTED_ELEMENT_TYPES",
    "VulkanContext",
    "VulkanError",
    "VulkanFunction",
    "VulkanLoweringError",
    "VulkanOptions",
    "VulkanProgram",
    "VulkanUnavailable",
    "check_signature",
    "compile_module",
    "lower_to_spirv",
    "serialize_spirv",
    "spirv_binaries",
    "vulkan_context",
]


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


def check_signature(signature: FunctionSignature, narrow_integers: bool = True) -> None:
    """Refuse entry arguments/results of element types the Vulkan target cannot store (8/16-bit
    integers only with `VulkanOptions.narrow_integers`)."""
    allowed = [t for t in SUPPORTED_ELEMENT_TYPES if narrow_integers or t not in NARROW_INTEGER_TYPES]
    for what, specs in (("input", signature.inputs), ("output", signature.results)):
        for i, spec in enumerate(specs):
            if spec.element_type not in allowed:
                raise VulkanLoweringError(
                    f"@{signature.name}: {what} #{i} ({spec}) has element type {spec.element_type}; "
                    f"the Vulkan target supports {', '.join(allowed)}"
                )


def compile_module(module: ir.Module, options: VulkanOptions | None = None, entry: str | None = None) -> VulkanFunction:
    """Map, lower and load a copy of `module` (linalg on ranked static tensors) on the first
    Vulkan device (`VulkanTarget.compile`); `module` is left unchanged."""
    from .target import VulkanTarget

    return VulkanTarget().compile(module, options or VulkanOptions(), entry=entry)  # type: ignore[return-value]


def run(module: ir.Module, *arrays: np.ndarray, options: VulkanOptions | None = None) -> Sequence[np.ndarray]:
    """Compile and call once (convenience for tests and tools)."""
    return compile_module(module, options)(*arrays)
