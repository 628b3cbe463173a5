"""The CUDA target: linalg on tensors -> gpu kernels -> NVVM -> PTX (-> cubin through ptxas).

- `lowering.py`: `CudaOptions` (validated chip/PTX pair), `lower_to_ptx`, `ptx_of`, and the
  `ptxas` runner `assemble` with its `-v` resource report.
- `compile_ptx(module, options)` here: a `CudaArtifact` (PTX per kernel module, and the host
  program of launches), made with no GPU present.
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
    "STAGES",
    "assemble",
    "compile_module",
    "compile_ptx",
    "cuda_device_count",
    "find_ptxas",
    "lower_module",
    "ptx_of",
]

#: IR stages of the CUDA target after linalg (`--emit`): gpu kernels, then LLVM host + PTX objects.
STAGES: tuple[str, ...] = ("gpu", "ptx")


class CudaUnavailable(CudaLoweringError):
    """No NVIDIA driver or GPU on this machine (or running on one is not supported yet)."""


def lower_module(module: ir.Module, stage: str = "ptx", options: CudaOptions | None = None) -> ir.Module:
    """Lower `module` (linalg on tensors) in place up to `stage` (one of `STAGES`)."""
    opts = options or CudaOptions()
    opts.validate()
    if stage not in STAGES:
        raise CudaLoweringError(f"unknown CUDA stage {stage!r} (stages: {', '.join(STAGES)})")
    map_to_gpu(module, device_for(opts.chip))
    if stage == "ptx":
        lower_to_ptx(module, opts)
    return module


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
    lowered = ir.Module.parse(module.operation.get_asm(binary=True), context=module.context)
    with lowered.context:
        map_to_gpu(lowered, device_for(opts.chip))
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
    """Compile for and load on the GPU: refused with a clear reason (see the module doc). The
    options are validated and the module is lowered to PTX first, so a model the CUDA target
    cannot compile fails with that error rather than with the missing GPU."""
    compile_ptx(module, options)
    if cuda_device_count() == 0:
        raise CudaUnavailable(
            "target 'cuda': no NVIDIA GPU is present (no CUDA driver, libcuda.so.1, or no device); "
            "the PTX can still be produced without one: `onnxc compile --target cuda --emit ptx`"
        )
    raise CudaUnavailable("target 'cuda': running on the GPU is not implemented yet (PTX and cubins are: --emit ptx)")
