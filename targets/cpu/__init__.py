"""The CPU target of onnxc: linalg on tensors -> vector -> LLVM, run by JIT or AOT.

Public API:

- ``lower_to_vector(module)``, ``bufferize(module)``, ``lower_to_llvm(module)``,
  ``lower_module(module, stage)``: the named pipeline stages (``pipeline.py``), with the native
  pipeline strings ``VECTOR_PRE_PIPELINE``, ``VECTOR_POST_PIPELINE``, ``BUFFERIZE_PIPELINE``,
  ``LLVM_PIPELINE`` for a pass registry.
- ``compile_module(module, entry=None) -> CompiledFunction`` (``jit.py``): call with numpy
  arrays, get numpy arrays.
- ``compile_aot(module, path, entry=None)`` / ``load_library(path)`` (``aot.py``): a shared
  library with a C entry point, and its ctypes loader.
- ``CpuTarget`` (``target.py``): the ``onnxc.targets.base.Target`` of the CPU, what
  ``onnxc.targets.get_target("cpu")`` returns; its stage passes ``cpu-to-vector``,
  ``cpu-bufferize``, ``cpu-to-llvm`` live in ``passes.py`` (``cpu_pipeline_text(options)``).
"""

from .abi import ArgumentError, CpuTargetError, FunctionSignature, TensorSpec
from .aot import AotFunction, compile_aot, load_library
from .jit import CompiledFunction, compile_module, copy_module
from .passes import CpuBufferizePass, CpuToLLVMPass, CpuToVectorPass, cpu_pipeline_text
from .pipeline import (
    BUFFERIZE_PIPELINE,
    LLVM_PIPELINE,
    STAGES,
    VECTOR_POST_PIPELINE,
    VECTOR_PRE_PIPELINE,
    CpuPipelineError,
    CpuPipelineOptions,
    bufferize,
    lower_module,
    lower_to_llvm,
    lower_to_loops,
    lower_to_vector,
    tile_and_vectorize,
    vector_transform_script,
)
from .target import CpuTarget

__all__ = [
    "AotFunction",
    "ArgumentError",
    "BUFFERIZE_PIPELINE",
    "CompiledFunction",
    "CpuBufferizePass",
    "CpuTarget",
    "CpuToLLVMPass",
    "CpuToVectorPass",
    "CpuPipelineError",
    "CpuPipelineOptions",
    "CpuTargetError",
    "FunctionSignature",
    "LLVM_PIPELINE",
    "STAGES",
    "TensorSpec",
    "VECTOR_POST_PIPELINE",
    "VECTOR_PRE_PIPELINE",
    "bufferize",
    "compile_aot",
    "compile_module",
    "copy_module",
    "cpu_pipeline_text",
    "load_library",
    "lower_module",
    "lower_to_llvm",
    "lower_to_loops",
    "lower_to_vector",
    "tile_and_vectorize",
    "vector_transform_script",
]
