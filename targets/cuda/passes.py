"""The CUDA target's kernel preparation as a registered pass: `gpu-nvvm-prepare` (workgroup
buffers to shared-memory attributions, kernel bodies to loops). The rest of the CUDA stage is the
upstream `gpu-lower-to-nvvm-pipeline{cubin-chip=.. cubin-features=.. cubin-format=isa}`, run as a
native element of the same pipeline (not from inside a Python pass: it registers dialects when its
pass manager starts, which MLIR forbids while another runs). The named pipeline `gpu-to-nvvm` is
both for sm_80. Registered by `onnxc.targets` (TARGET_PASSES, TARGET_PIPELINES)."""

from __future__ import annotations

import dataclasses

from mlir import ir

from onnxc.targets.gpu.passes import module_view
from onnxc.transforms.pass_base import ModulePass

__all__ = ["GpuNvvmPreparePass"]


@dataclasses.dataclass(frozen=True)
class GpuNvvmPreparePass(ModulePass):
    """Prepare mapped gpu kernels for NVVM: workgroup buffers as shared memory, bodies as loops."""

    name = "gpu-nvvm-prepare"

    def run(self, module: ir.Operation) -> None:
        from .lowering import prepare_for_nvvm

        prepare_for_nvvm(module_view(module, self.name))
