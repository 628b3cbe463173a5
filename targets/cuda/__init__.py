"""The CUDA target: linalg on tensors -> gpu kernels -> NVVM -> PTX (-> cubin through ptxas).

- `lowering.py`: `CudaOptions` (validated chip/PTX pair), `lower_to_ptx`, `ptx_of`, and the
  `ptxas` runner `assemble` with its `-v` resource report.
- `compile_ptx(module, options)` here: a `CudaArtifact` (PTX per kernel module, and the host
  program of launches), made with no GPU present.
- `passes.py`: the stage as a registered pass (`gpu-to-nvvm`); `target.py`: `CudaTarget`.
- `compile_module(module, options)`: what `onnxc.compile(..., target="cuda")` calls; on a machine
  without an NVIDIA driver and GPU it raises `CudaUnavailable` saying so. Running on a GPU (host
  code through `gpu-to-llvm` and `libmlir_cuda_runtime.so`) is not implemented yet: there was no
  GPU to test it on, so it is refused with that reason rather than shipped untested.
"""

from __future__ import annotations

import ctypes
import dataclasses

from mlir import ir

from onnxc.targets.gpu import HostProgram, device_for, host_program, map_to_gpu

from .lowering import (
    CudaLoweringError,
    CudaOptions,
    KernelResources,
    PtxasError,
    PtxasResult,
    assemble,
    find_ptxas,
    lower_to_ptx,
    ptx_of,
)

__all__ = [
    "CudaArtifact",
    "CudaLoweringError",
    "CudaOptions",
    "CudaUnavailable",
    "KernelResources",
    "PtxasError",
    "PtxasResult",
    "assemble",
    "compile_module",
    "compile_ptx",
    "cuda_device_count",
    "find_ptxas",
    "ptx_of",
]

class CudaUnavailable(CudaLoweringError):
    """No NVIDIA driver or GPU on this machine (or running on one is not supported yet)."""


@dataclasses.dataclass(frozen=True)
class CudaArtifact:
    """PTX per kernel module and the host program that launches them, for one chip."""

    options: CudaOptions
    ptx: dict[str, str]
    program: HostProgram

    def assemble(self, chip: str | None = None) -> dict[str, PtxasResult]:
        """Every kernel module assembled by ptxas for `chip` (default: the options' chip)."""
        return {name: assemble(text, chip or self.options.chip) for name, text in self.ptx.items()}


def compile_ptx(module: ir.Module, options: CudaOptions | None = None) -> CudaArtifact:
    """Map and lower a copy of `module` to PTX (no GPU needed); `module` is left unchanged."""
    opts = options or CudaOptions()
    opts.validate()
    from onnxc.targets.cpu.jit import copy_module

    lowered = copy_module(module)
    with lowered.context:
        map_to_gpu(lowered, device_for(opts.chip), frozenset(opts.mma_types()))
        program = host_program(lowered)
        lower_to_ptx(lowered, opts)
        return CudaArtifact(opts, ptx_of(lowered), program)


def cuda_device_count() -> int:
    """NVIDIA GPUs the driver sees (0 when there is no driver: no `libcuda.so.1`)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    if lib.cuInit(0) != 0:
        return 0
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def compile_module(module: ir.Module, options: CudaOptions | None = None, entry: str | None = None) -> object:
    """Compile for and load on the GPU (`CudaTarget.compile`): lowered to PTX first, so a model
    the CUDA target cannot compile fails with that error; then refused with a clear reason (see
    the module doc)."""
    from .target import CudaTarget

    return CudaTarget().compile(module, options or CudaOptions(), entry=entry)
