"""The Vulkan target as an `onnxc.targets.base.Target`: `onnxc.compile(model, target="vulkan")`.

Pipeline (text, runnable by `onnx-opt -p`): `onnxc-approximate-math{functions={erf,erfc}},
gpu-map{device=vulkan},gpu-to-spirv{spirv-version=v1.0},spirv-serialize`; stages `gpu`, `spirv`, `binary` (`onnxc compile --target vulkan --emit
...`). `compile` runs it on a copy of the module, reads the host program and the SPIR-V
binaries from the result and loads them on the first Vulkan device (`runtime.VulkanProgram`).
"""

from __future__ import annotations

import dataclasses

from typing import Any

from mlir import ir

from onnxc.errors import OnnxcError
from onnxc.targets.base import Runnable, Target, TargetError
from onnxc.transforms.pass_base import element_text
from onnxc.transforms.pipeline import Instrumentation

from onnxc.targets.gpu.passes import GPU_MATH_APPROXIMATION

from .lowering import VulkanOptions

__all__ = ["VulkanTarget"]


class VulkanTarget(Target):
    """Vulkan compute through SPIR-V, run by onnxc's Python Vulkan runtime (lavapipe included)."""

    name = "vulkan"
    options_type = VulkanOptions
    stages = ("gpu", "spirv", "binary")

    def check_options(self, options: Any) -> None:
        """`VulkanOptions.validate`, its error as a `TargetError` naming the field."""
        try:
            options.validate()
        except OnnxcError as e:
            raise TargetError(f"vulkan option: {e}") from None

    def pipeline(self, options: Any, stop_after: str | None = None) -> str:
        """`gpu-map{device=...},gpu-to-spirv{spirv-version=...},spirv-serialize` (up to `stop_after`)."""
        if stop_after is not None:
            self.check_stage(stop_after)
        o: VulkanOptions = self.options(options)
        elements = [
            GPU_MATH_APPROXIMATION + "," + element_text("gpu-map", {"device": o.device_row()}),
            element_text("gpu-to-spirv", {"spirv_version": o.spirv_version, "narrow_integers": o.narrow_integers}),
            "spirv-serialize",
        ]
        return ",".join(elements[: self.stages.index(stop_after) + 1 if stop_after else None])

    def compile(
        self,
        module: ir.Module,
        options: Any,
        *,
        entry: str | None = None,
        instrumentation: Instrumentation | None = None,
    ) -> Runnable:
        """Lower a copy of `module` and load it on the first Vulkan device."""
        from onnxc.targets.cpu.jit import copy_module, select_entry
        from onnxc.targets.gpu.checks import Checked, check_program
        from onnxc.targets.gpu.host import host_program
        from onnxc.targets.gpu.mapping import refuse_host_runtime
        from onnxc.targets.gpu.specialize import SpecializingFunction, needs_specialization
        from onnxc.transforms.pipeline import run_pipeline

        from . import VulkanFunction, check_signature
        from .lowering import spirv_binaries
        from .runtime import VulkanProgram, vulkan_context

        opts: VulkanOptions = self.options(options)
        signature = select_entry(module, entry)
        refuse_host_runtime(module)  # names the node of a string/image op before the types are read
        check_signature(signature, opts.narrow_integers)  # before any device is asked for
        if opts.device == "auto":  # the tile sizes of the device this will run on
            opts = dataclasses.replace(opts, device=opts.device_row(vulkan_context().cpu_device))
        if opts.narrow_integers and not vulkan_context().narrow_integers:
            # bool buffers then go through the 32-bit-word emulation, which every device runs
            opts = dataclasses.replace(opts, narrow_integers=False)
            check_signature(signature, opts.narrow_integers)

        def compile_one(lowered: ir.Module) -> VulkanFunction:
            static = select_entry(lowered, signature.name)
            run_pipeline(lowered, self.pipeline(opts), instrumentation=instrumentation, reraise=True)
            program = host_program(lowered)  # the host function is untouched by the SPIR-V stages
            binaries = spirv_binaries(lowered)
            return VulkanFunction(static, VulkanProgram(program, binaries), binaries)

        if needs_specialization(module, signature.name, opts.dynamic_shapes == "specialize"):  # data-dependent shapes: per call
            entry_fn: Runnable = SpecializingFunction(copy_module(module), signature, compile_one)
        else:
            entry_fn = compile_one(copy_module(module))
        check = check_program(module, signature.name)  # the run-time checks, run on the CPU per call
        return Checked(entry_fn, check) if check is not None else entry_fn
