"""The CPU target's stages as registered passes: `cpu-to-vector`, `cpu-bufferize`, `cpu-to-llvm`.

Each pass calls its stage function of `onnxc.targets.cpu.pipeline` (`lower_to_vector`,
`bufferize`, `lower_to_llvm`) on the module it is given, so `onnx-opt -p cpu-to-vector`, the CPU
target's JIT and AOT, and `onnxc.compile` all run the same code through the one pass-manager
driver (`onnxc.transforms.pipeline`). They are registered by `onnxc.targets` (TARGET_PASSES).

Options: every pass takes the fields of `CpuPipelineOptions` as its options, spelled with dashes
(`cpu-to-vector{vectorize=false matmul-tile={8,16,1}}`), parsed by the fields' types. The options
are those of the dataclass itself, not a copy, so a field added to `CpuPipelineOptions` is an
option of the passes at once. `cpu-bufferize` accepts the options and does not use them yet (its
stage function takes none); `cpu-to-vector` and `cpu-to-llvm` pass `self.cpu` on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from mlir import ir

from onnxc.errors import OnnxcError
from onnxc.transforms.pass_base import ModulePass, convert_option, element_text

from . import pipeline as cpu_pipeline
from .pipeline import CpuPipelineOptions


def _module(op: ir.Operation) -> Any:
    """The `builtin.module` op as the stage functions take it (`.body`, `.context`, `.operation`):
    its `builtin.ModuleOp` view."""
    view = op.opview
    if op.name != "builtin.module":
        raise OnnxcError(f"the CPU stage passes run on a builtin.module, got '{op.name}'")
    return view


@dataclasses.dataclass(frozen=True)
class _CpuStagePass(ModulePass):
    """Base of the CPU stage passes: one field, `cpu`, holding the `CpuPipelineOptions`."""

    cpu: CpuPipelineOptions = CpuPipelineOptions()

    #: Whether the stage's function reads the options (they are spelled out in pipeline text).
    uses_options: ClassVar[bool] = False

    @classmethod
    def options(cls) -> list[dataclasses.Field[Any]]:
        """The pass's options: the fields of `CpuPipelineOptions`."""
        return list(dataclasses.fields(CpuPipelineOptions))

    @classmethod
    def from_options(cls, options: dict[str, str]) -> ModulePass:
        """Build the pass from `{key=value ...}` options naming `CpuPipelineOptions` fields."""
        fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(CpuPipelineOptions)}
        fields.update({f.name: f for f in dataclasses.fields(CpuPipelineOptions)})
        values: dict[str, Any] = {}
        for key, raw in options.items():
            field = fields.get(key)
            if field is None:
                known = ", ".join(f.name.replace("_", "-") for f in dataclasses.fields(CpuPipelineOptions))
                raise OnnxcError(f"pass '{cls.name}' has no option '{key}' (options: {known})")
            kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
            values[field.name] = convert_option(cls.name, key, kind, raw)
        return cls(CpuPipelineOptions(**values))

    @classmethod
    def element(cls, options: CpuPipelineOptions) -> str:
        """The pass as a pipeline element carrying `options` (the fields that differ from the
        defaults), when the stage uses options; else its bare name."""
        from onnxc.targets.base import non_default_fields

        return element_text(cls.name, non_default_fields(options) if cls.uses_options else {})


@dataclasses.dataclass(frozen=True)
class CpuToVectorPass(_CpuStagePass):
    """Tile and vectorize linalg ops for the CPU (vector dialect, still on tensors)."""

    name = "cpu-to-vector"
    uses_options = True

    def run(self, module: ir.Operation) -> None:
        cpu_pipeline.lower_to_vector(_module(module), self.cpu)


@dataclasses.dataclass(frozen=True)
class CpuBufferizePass(_CpuStagePass):
    """One-shot bufferize the module (function boundaries, identity layouts), then deallocation."""

    name = "cpu-bufferize"

    def run(self, module: ir.Operation) -> None:
        cpu_pipeline.bufferize(_module(module))


@dataclasses.dataclass(frozen=True)
class CpuToLLVMPass(_CpuStagePass):
    """Lower vector/memref/math/arith/scf/cf/func to the LLVM dialect (C interfaces marked)."""

    name = "cpu-to-llvm"
    uses_options = True  # threads and thread_runtime pick how threaded loops are lowered

    def run(self, module: ir.Operation) -> None:
        cpu_pipeline.lower_to_llvm(_module(module), self.cpu)


#: Stage name (`--emit`) -> the pass that produces it, in pipeline order.
STAGE_PASSES: dict[str, type[_CpuStagePass]] = {
    "vector": CpuToVectorPass,
    "bufferize": CpuBufferizePass,
    "llvm": CpuToLLVMPass,
}


def cpu_pipeline_text(options: CpuPipelineOptions | None = None, stop_after: str | None = None) -> str:
    """The CPU pipeline from linalg on tensors to the LLVM dialect as pipeline text (up to and
    including the stage `stop_after`: 'vector', 'bufferize' or 'llvm')."""
    opts = options or CpuPipelineOptions()
    if stop_after is not None and stop_after not in STAGE_PASSES:
        raise cpu_pipeline.CpuPipelineError(f"unknown stage {stop_after!r}; expected one of {', '.join(STAGE_PASSES)}")
    elements: list[str] = []
    for stage, cls in STAGE_PASSES.items():
        elements.append(cls.element(opts))
        if stage == stop_after:
            break
    return ",".join(elements)
