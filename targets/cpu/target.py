"""The CPU target as an `onnxc.targets.base.Target`: options, pipeline text, JIT and AOT loading.

Its options are `CpuPipelineOptions` themselves (carried through unchanged, whatever fields they
grow); its pipeline is the three stage passes of `passes.py` with the options spelled out; its
runtime is the JIT of `jit.py` (an ExecutionEngine in this process) and, ahead of time, the shared
libraries of `aot.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mlir import ir

from onnxc.targets.base import Runnable, Target, TargetError
from onnxc.transforms.pipeline import Instrumentation

from .pipeline import CpuPipelineOptions


class CpuTarget(Target):
    """The host CPU through LLVM: linalg -> vector -> bufferized memrefs -> LLVM dialect."""

    name = "cpu"
    options_type = CpuPipelineOptions
    stages = ("vector", "bufferize", "llvm")

    def check_options(self, options: Any) -> None:
        """Ranges C++ would assert on (or silently misuse), checked first. `CpuPipelineOptions`
        checks its own fields when built (target CPU, threads); this checks what it leaves: the
        JIT's optimization level, integer and boolean fields of the right kind, register tiles
        of positive sizes. Fields are looked up by name, so options that grow or lose fields
        keep working."""
        o: CpuPipelineOptions = options
        level = getattr(o, "jit_opt_level", 3)
        if level not in (0, 1, 2, 3) or isinstance(level, bool):
            raise TargetError(f"cpu option jit_opt_level must be 0, 1, 2 or 3, got {level!r}")
        tile = tuple(getattr(o, "matmul_tile", ()) or ())
        if not all(isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in tile):
            raise TargetError(f"cpu option matmul_tile must hold positive ints (m, n, k), got {tile!r}")
        for f in dataclasses.fields(o):
            value = getattr(o, f.name)
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            if kind == "bool" and not isinstance(value, bool):
                raise TargetError(f"cpu option {f.name} must be a bool, got {value!r}")
            if kind == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise TargetError(f"cpu option {f.name} must be a non-negative int, got {value!r}")

    def pipeline(self, options: Any, stop_after: str | None = None) -> str:
        """`cpu-to-vector{...},cpu-bufferize,cpu-to-llvm` (up to `stop_after`)."""
        from .passes import cpu_pipeline_text

        if stop_after is not None:
            self.check_stage(stop_after)
        return cpu_pipeline_text(self.options(options), stop_after)

    def compile(
        self,
        module: ir.Module,
        options: Any,
        *,
        entry: str | None = None,
        instrumentation: Instrumentation | None = None,
    ) -> Runnable:
        """JIT: lower a copy of `module` and return its `CompiledFunction`."""
        from .jit import compile_module

        return compile_module(module, entry, self.options(options), instrumentation=instrumentation)

    def load(self, path: str) -> Runnable:
        """A shared library written by `compile_aot` (`onnxc compile --emit lib`)."""
        from .aot import load_library

        return load_library(path)
