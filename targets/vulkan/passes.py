"""The Vulkan target's stages as registered passes: `gpu-to-spirv{spirv-version=v1.0 narrow-integers=true}` (mapped
kernels to the SPIR-V dialect) and `spirv-serialize` (SPIR-V modules to `gpu.binary` objects).
Both call `lowering.py`; registered by `onnxc.targets` (TARGET_PASSES)."""

from __future__ import annotations

import dataclasses

from mlir import ir

from onnxc.targets.gpu.passes import module_view
from onnxc.transforms.pass_base import ModulePass

__all__ = ["GpuToSpirvPass", "SpirvSerializePass"]


@dataclasses.dataclass(frozen=True)
class GpuToSpirvPass(ModulePass):
    """Lower mapped gpu kernels to SPIR-V modules for Vulkan (entry points, 32-bit indices, VCE)."""

    name = "gpu-to-spirv"
    spirv_version: str = "v1.0"
    narrow_integers: bool = True  # VulkanOptions.narrow_integers

    def run(self, module: ir.Operation) -> None:
        from .lowering import VulkanOptions, lower_to_spirv

        options = VulkanOptions(spirv_version=self.spirv_version, narrow_integers=self.narrow_integers)
        lower_to_spirv(module_view(module, self.name), options, serialize=False)


@dataclasses.dataclass(frozen=True)
class SpirvSerializePass(ModulePass):
    """Serialize each kernel's SPIR-V module into a gpu.binary (what the Vulkan runtime loads)."""

    name = "spirv-serialize"

    def run(self, module: ir.Operation) -> None:
        from .lowering import serialize_spirv

        serialize_spirv(module_view(module, self.name))
