"""The CUDA target as an `onnxc.targets.base.Target`: `onnxc.compile(model, target="cuda")`.

Pipeline (text, runnable by `onnx-opt -p`): `onnxc-approximate-math{functions={erf,erfc}}` (no
erf in PTX, libdevice is not linked), `gpu-map{device=<chip> mma={f16[,tf32]}}` (the tensor-core
kinds `CudaOptions.mma_types` allows), `gpu-nvvm-prepare,
gpu-lower-to-nvvm-pipeline{cubin-chip=<chip> cubin-features=+ptxNN cubin-format=isa}`; stages `gpu` and `ptx` (`onnxc compile --target cuda --emit ptx` works without
a GPU). `compile` lowers to PTX first (so an unsupported model fails with its own error), then
says that no GPU is present, or that running on one is not implemented yet (see `__init__.py`).
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
        """Lower a copy of `module` to PTX, then refuse to run it (see the module doc)."""
        from onnxc.targets.cpu.jit import copy_module, select_entry
        from onnxc.transforms.pipeline import run_pipeline

        from . import CudaUnavailable, cuda_device_count

        from onnxc.targets.gpu.mapping import refuse_host_runtime
        from onnxc.targets.gpu.specialize import needs_specialization

        opts: CudaOptions = self.options(options)
        signature = select_entry(module, entry)
        refuse_host_runtime(module)
        # Shapes set by input values (Resize's scales) are compiled per call
        # (targets/gpu/specialize.py, as the Vulkan target runs them), which needs a GPU to call;
        # other models are lowered to PTX here so that an unsupported op (or a dynamic dim)
        # fails with its own error first.
        if not needs_specialization(module, signature.name):
            run_pipeline(copy_module(module), self.pipeline(opts), instrumentation=instrumentation, reraise=True)
        if cuda_device_count() == 0:
            raise CudaUnavailable(
                "target 'cuda': no NVIDIA GPU is present (no CUDA driver, libcuda.so.1, or no device); "
                "the PTX can still be produced without one: `onnxc compile --target cuda --emit ptx`"
            )
        raise CudaUnavailable("target 'cuda': running on the GPU is not implemented yet (PTX and cubins are: --emit ptx)")
