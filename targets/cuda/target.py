"""The CUDA target as an `onnxc.targets.base.Target`: `onnxc.compile(model, target="cuda")`.

Pipeline (text, runnable by `onnx-opt -p`): `onnxc-approximate-math{functions={erf,erfc}}` (no
erf in PTX, libdevice is not linked), `gpu-map{device=<chip> mma={f16[,tf32]}}` (the tensor-core
kinds `CudaOptions.mma_types` allows), `gpu-nvvm-prepare,
gpu-lower-to-nvvm-pipeline{cubin-chip=<chip> cubin-features=+ptxNN cubin-format=isa}`; stages `gpu` and `ptx` (`onnxc compile --target cuda --emit ptx` works without
a GPU). `compile` runs the `gpu` stage, reads the host program (`gpu.host.host_program`), runs the
`ptx` stage and loads the PTX on the first GPU (`runtime.CudaProgram`); without a GPU it lowers to
PTX first (so an unsupported model fails with its own error), then says that none is present.
Shapes known only when the model is called (Resize's scales) are compiled per call
(`gpu.specialize.SpecializingFunction`), as on Vulkan.
"""

from __future__ import annotations

from typing import Any

from mlir import ir

from onnxc.errors import OnnxcError
from onnxc.targets.base import Runnable, Target, TargetError
from onnxc.transforms.pass_base import element_text
from onnxc.transforms.pipeline import Instrumentation

from .lowering import CudaOptions

__all__ = ["CudaTarget"]


class CudaTarget(Target):
    """NVIDIA GPUs through NVVM: PTX for sm_80/sm_86/sm_89/sm_90, assembled by ptxas."""

    name = "cuda"
    options_type = CudaOptions
    stages = ("gpu", "ptx")

    def check_options(self, options: Any) -> None:
        """`CudaOptions.validate` (chip and PTX version), its error as a `TargetError`."""
        try:
            options.validate()
        except OnnxcError as e:
            raise TargetError(f"cuda option: {e}") from None

    def pipeline(self, options: Any, stop_after: str | None = None) -> str:
        """`gpu-map{device=<chip>}` (stage `gpu`), then `gpu-nvvm-prepare` and the upstream
        NVVM pipeline (stage `ptx`); the chip/PTX pair is checked by `self.options` first."""
        from .lowering import nvvm_pipeline_element

        if stop_after is not None:
            self.check_stage(stop_after)
        o: CudaOptions = self.options(options)
        from onnxc.targets.gpu.passes import GPU_MATH_APPROXIMATION

        mapping: dict[str, object] = {"device": o.chip}
        if o.mma_types():
            mapping["mma"] = o.mma_types()
        text = GPU_MATH_APPROXIMATION + "," + element_text("gpu-map", mapping)
        if stop_after != "gpu":
            text += ",gpu-nvvm-prepare," + nvvm_pipeline_element(o)
        return text

    def compile(
        self,
        module: ir.Module,
        options: Any,
        *,
        entry: str | None = None,
        instrumentation: Instrumentation | None = None,
    ) -> Runnable:
        """Lower a copy of `module` to PTX and load it on the first GPU (see the module doc)."""
        from onnxc.targets.cpu.jit import copy_module, select_entry
        from onnxc.targets.gpu.checks import Checked, check_program
        from onnxc.targets.gpu.host import host_program
        from onnxc.targets.gpu.mapping import refuse_host_runtime
        from onnxc.targets.gpu.specialize import SpecializingFunction, needs_specialization
        from onnxc.transforms.pipeline import run_pipeline

        from . import CudaFunction, CudaUnavailable, cuda_device_count
        from .lowering import nvvm_pipeline_element, ptx_of
        from .runtime import CudaProgram, cuda_context

        opts: CudaOptions = self.options(options)
        signature = select_entry(module, entry)
        refuse_host_runtime(module)

        def lower(lowered: ir.Module) -> tuple[Any, Any, dict[str, str]]:
            """The `gpu` stage, the host program read from it, then the `ptx` stage."""
            static = select_entry(lowered, signature.name)
            run_pipeline(lowered, self.pipeline(opts, stop_after="gpu"), instrumentation=instrumentation, reraise=True)
            program = host_program(lowered)  # before the NVVM stage lowers the host function
            run_pipeline(lowered, "gpu-nvvm-prepare," + nvvm_pipeline_element(opts), instrumentation=instrumentation, reraise=True)
            return static, program, ptx_of(lowered)

        def load(parts: tuple[Any, Any, dict[str, str]]) -> CudaFunction:
            static, program, ptx = parts
            return CudaFunction(static, CudaProgram(program, ptx, opts.chip), ptx)

        specialized = needs_specialization(module, signature.name, opts.dynamic_shapes == "specialize")
        # Shapes set by input values (Resize's scales) are compiled per call; other models are
        # lowered to PTX before the GPU is looked for, so that an unsupported op (or a dynamic
        # dim) fails with its own error first.
        if not specialized:
            parts = lower(copy_module(module))
        if cuda_device_count() == 0:
            raise CudaUnavailable(
                "target 'cuda': no NVIDIA GPU is present (no CUDA driver, libcuda.so.1, or no device); "
                "the PTX can still be produced without one: `onnxc compile --target cuda --emit ptx`"
            )
        cuda_context()  # the driver and device, once per process
        if specialized:
            entry_fn: Runnable = SpecializingFunction(copy_module(module), signature, lambda lowered: load(lower(lowered)))
        else:
            entry_fn = load(parts)
        check = check_program(module, signature.name)  # the run-time checks, run on the CPU per call
        return Checked(entry_fn, check) if check is not None else entry_fn
