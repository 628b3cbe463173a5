"""Code-generation targets of onnxc, and their registry.

`onnxc.targets.cpu` lowers linalg-on-tensors modules through the vector dialect to LLVM and
runs them (JIT) or writes shared libraries (AOT). GPU and accelerator targets go beside it; each
implements `onnxc.targets.base.Target`.

This module is the targets' registry, cheap to import (nothing of a target is imported until it
is used):

- `TARGETS`: target name -> `"module:Class"` of its `Target` subclass; `get_target(name)` loads
  and instantiates it, `available_targets()` lists the names.
- `TARGET_PASSES` / `TARGET_PIPELINES`: the targets' stage passes (`"module:Class"`) and named
  pipelines (text). Importing this module adds them to the pass registry of
  `onnxc.transforms.registry` through its `register_pass`/`register_pipeline` hooks: the
  registry never imports a target (transforms sit below targets), and `onnx-opt` finds
  `cpu-to-vector` or lists every pass without loading any target's code.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING

from onnxc.transforms import registry

if TYPE_CHECKING:
    from onnxc.targets.base import Target

#: Target name -> "module:Class" of its `Target` implementation.
TARGETS: dict[str, str] = {
    "cpu": "onnxc.targets.cpu.target:CpuTarget",
    "cuda": "onnxc.targets.cuda.target:CudaTarget",
    "vulkan": "onnxc.targets.vulkan.target:VulkanTarget",
}

#: Stage passes of the targets: pass name -> "module:Class".
TARGET_PASSES: dict[str, str] = {
    "cpu-to-vector": "onnxc.targets.cpu.passes:CpuToVectorPass",
    "cpu-bufferize": "onnxc.targets.cpu.passes:CpuBufferizePass",
    "cpu-to-llvm": "onnxc.targets.cpu.passes:CpuToLLVMPass",
    "gpu-map": "onnxc.targets.gpu.passes:GpuMapPass",
    "gpu-nvvm-prepare": "onnxc.targets.cuda.passes:GpuNvvmPreparePass",
    "gpu-to-spirv": "onnxc.targets.vulkan.passes:GpuToSpirvPass",
    "spirv-serialize": "onnxc.targets.vulkan.passes:SpirvSerializePass",
}

#: Named pipelines of the targets: name -> (pipeline text, summary).
TARGET_PIPELINES: dict[str, tuple[str, str]] = {
    "onnx-to-vector": ("onnx-to-linalg,cpu-to-vector", "onnx-to-linalg, then tile and vectorize for the CPU (vector dialect on tensors)."),
    "onnx-to-llvm": (
        "onnx-to-linalg,cpu-to-vector,cpu-bufferize,cpu-to-llvm",
        "onnx-to-vector, then bufferize and lower to the LLVM dialect for the CPU.",
    ),
    "onnx-to-gpu": ("onnx-to-linalg,gpu-map", "onnx-to-linalg, then map to gpu kernels (the Vulkan device table; gpu-map{device=sm_80} for CUDA)."),
    "gpu-to-nvvm": (
        "gpu-nvvm-prepare,gpu-lower-to-nvvm-pipeline{cubin-chip=sm_80 cubin-features=+ptx80 cubin-format=isa}",
        "mapped gpu kernels to NVVM and PTX for sm_80 (the CUDA target spells out its chip).",
    ),
}

for _name, _target in TARGET_PASSES.items():
    registry.register_pass(_name, _target)
for _name, (_text, _summary) in TARGET_PIPELINES.items():
    registry.register_pipeline(_name, _text, _summary)


def available_targets() -> list[str]:
    """The names of every registered target, sorted."""
    return sorted(TARGETS)


@functools.cache
def get_target(name: str) -> Target:
    """The target registered as `name` (one instance per process); `TargetError` if none is."""
    from onnxc.targets.base import TargetError

    where = TARGETS.get(name)
    if where is None:
        raise TargetError(f"unknown target '{name}' (targets: {', '.join(available_targets())})")
    module, cls = where.split(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["TARGETS", "TARGET_PASSES", "TARGET_PIPELINES", "available_targets", "get_target"]
