"""The CUDA target: linalg on tensors -> gpu kernels -> NVVM -> PTX (-> cubin through ptxas).

- `lowering.py`: `CudaOptions` (validated chip/PTX pair), `lower_to_ptx`, `ptx_of`, and the
  `ptxas` runner `assemble` with its `-v` resource report.
- `compile_ptx(module, options)` here: a `CudaArtifact` (PTX per kernel module, and the host
  program of launches), made with no GPU present.
- `passes.py`: the stage as a registered pass (`gpu-to-nvvm`); `target.py`: `CudaTarget`.
- `runtime.py`: `CudaContext` and `CudaProgram`, which run the host program of launches on the
  GPU through the CUDA driver API (device buffers, weights uploaded once, the PTX JIT-compiled
  by the driver); see its docstring for why not `gpu-to-llvm` host code.
- `compile_module(module, options)`: what `onnxc.compile(..., target="cuda")` calls; it returns a
  `CudaFunction` called with numpy arrays like the CPU target's `CompiledFunction`. On a machine
  without an NVIDIA driver and GPU it raises `CudaUnavailable` saying so (after lowering to PTX,
  so that an unsupported model fails with its own error first).
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
from mlir import ir

from onnxc.targets.cpu.abi import FunctionSignature
from onnxc.targets.gpu import HostProgram, device_for, host_program, map_to_gpu

from .lowering import (
    CudaLoweringError,
    CudaOptions,
    CudaUnavailable,
    KernelResources,
    PtxasError,
    PtxasResult,
    assemble,
    find_ptxas,
    lower_to_ptx,
    ptx_of,
)

from .runtime import CudaContext, CudaProgram, CudaRuntimeError, cuda_context

__all__ = [
    "CudaArtifact",
    "CudaContext",
    "CudaFunction",
    "CudaLoweringError",
    "CudaOptions",
    "CudaProgram",
    "CudaRuntimeError",
    "CudaUnavailable",
    "KernelResources",
    "PtxasError",
    "PtxasResult",
    "assemble",
    "compile_module",
    "compile_ptx",
    "cuda_context",
    "cuda_device_count",
    "find_ptxas",
    "ptx_of",
]

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


class CudaFunction:
    """A model's entry compiled for and loaded on the GPU: `f(*arrays) -> list[np.ndarray]`.

    `signature` is the tensor-level signature (arguments are checked against it before anything
    is copied to the device); `ptx` holds each kernel module's PTX; `program` the loaded
    `runtime.CudaProgram` (`program.step_times(...)` times each kernel)."""

    def __init__(self, signature: FunctionSignature, program: CudaProgram, ptx: dict[str, str]) -> None:
        self.signature = signature
        self.program = program
        self.ptx = ptx

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        return self.program(*self.signature.validate(arrays))

    def __repr__(self) -> str:
        return f"<CudaFunction {self.signature} on {self.program.ctx.device_name}: {len(self.ptx)} kernel(s)>"


def compile_module(module: ir.Module, options: CudaOptions | None = None, entry: str | None = None) -> CudaFunction:
    """Compile for and load on the GPU (`CudaTarget.compile`): lowered to PTX first, so a model
    the CUDA target cannot compile fails with that error; `CudaUnavailable` without a GPU."""
    from .target import CudaTarget

    return CudaTarget().compile(module, options or CudaOptions(), entry=entry)  # type: ignore[return-value]
