"""The GPU mapping as a registered pass: `gpu-map{device=<row of DEVICES>}`.

`onnx-opt -p gpu-map{device=sm_80}` and both GPU targets (`targets/cuda/target.py`,
`targets/vulkan/target.py`) run the same code (`mapping.map_to_gpu`) through the one pass-manager
driver. Registered by `onnxc.targets` (TARGET_PASSES); the named pipeline `onnx-to-gpu` is
`onnx-to-linalg,gpu-map`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mlir import ir

from onnxc.errors import OnnxcError
from onnxc.transforms.pass_base import ModulePass

__all__ = ["GPU_MATH_APPROXIMATION", "GpuMapPass", "module_view"]

#: The first element of both GPU targets' pipelines: math ops without a GPU instruction (no
#: SPIR-V GLSL.std.450 op; NVVM would call libdevice's __nv_erff, which is not linked into the
#: PTX) become arith/math.fma polynomials (`onnxc-approximate-math`, shared with the CPU target).
#: exp, log, tanh... stay: both GPUs have them natively.
GPU_MATH_APPROXIMATION = "onnxc-approximate-math{functions={erf,erfc}}"


def module_view(op: ir.Operation, what: str) -> Any:
    """The `builtin.module` op as the stage functions take it (`.body`, `.context`,
    `.operation`): its `builtin.ModuleOp` view."""
    if op.name != "builtin.module":
        raise OnnxcError(f"{what} runs on a builtin.module, got '{op.name}'")
    return op.opview


@dataclasses.dataclass(frozen=True)
class GpuMapPass(ModulePass):
    """Map linalg on tensors to gpu.launch kernels (fusion, block/thread tiling, bufferization, outlining)."""

    name = "gpu-map"
    device: str = "vulkan"  # a row of onnxc.targets.gpu.device.DEVICES: its tile sizes are used
    mma: tuple[str, ...] = ()  # tensor-core element kinds (mapping.MMA_TYPES keys; CUDA only)

    def run(self, module: ir.Operation) -> None:
        from .device import device_for
        from .mapping import map_to_gpu

        map_to_gpu(module_view(module, self.name), device_for(self.device), frozenset(self.mma))
