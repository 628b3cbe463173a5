"""Named pipelines, so a user can stop at each stage: `onnx-opt -p onnx-to-linalg` (or
`onnx-to-vector`, `onnx-to-llvm`), and the CPU stages as passes (`cpu-to-vector`,
`cpu-bufferize`, `cpu-to-llvm`).

`onnxc.compile` runs the same stages through `lower_onnx_module`, so the tool and the API can
not drift apart. The ONNX-level passes run first (upgrade every op to its newest version, infer
shapes, fold constants, canonicalize) because the conversion to linalg lowers newest versions
and static or `tensor.dim`-computed shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlir import ir
from mlir.passmanager import PassManager

from onnxc.transforms.pass_base import ModulePass, PassFailure
from onnxc.transforms.registry import get_pass_class

#: ONNX-level passes before conversion, in order, with their options. Ops without a direct
#: lowering are replaced by their schema function bodies (one general mechanism for every op the
#: spec defines as a function); the bodies are written at the model's opset, hence a second upgrade.
#: Folding and inlining If with a known condition unlock more inference, hence the second round.
ONNX_LEVEL_PASSES: tuple[tuple[str, dict[str, str]], ...] = (
    ("onnx-upgrade-ops", {}),
    ("expand-schema-functions", {"unlowered-only": "true"}),
    ("onnx-upgrade-ops", {}),
    ("onnx-eliminate-sequences", {}),
    ("onnx-canonicalize", {}),
    ("onnx-shape-inference", {}),
    ("onnx-constant-fold", {}),
    ("onnx-canonicalize", {}),
    ("onnx-shape-inference", {}),
    ("onnx-validate-attributes", {}),
)

#: The stages a module goes through, in order; each names what the IR is after it.
STAGES: tuple[str, ...] = ("onnx", "linalg", "vector", "bufferize", "llvm")


class _ModuleView:
    """What the CPU target's functions need of an `ir.Module`, over a `builtin.module` op
    (passes get the operation, and the bindings cannot wrap an operation as a Module)."""

    def __init__(self, op: ir.Operation) -> None:
        self.operation = op
        self.context = op.context
        self.body = op.regions[0].blocks[0]


def _as_module(module: Any) -> Any:
    return module if isinstance(module, ir.Module) else _ModuleView(module.operation)


def _run_native(module: Any, pipeline: str) -> None:
    PassManager.parse(f"builtin.module({pipeline})", context=module.context).run(module.operation)


def run_onnx_passes(module: Any, passes: tuple[tuple[str, dict[str, str]], ...] = ONNX_LEVEL_PASSES) -> None:
    """Run the ONNX-level passes, in order."""
    for name, options in passes:
        cls = get_pass_class(name)
        if cls is None:
            raise PassFailure(name, [(None, f"the {name} pass is not registered")])
        cls.from_options(options).run(module.operation)


def lower_onnx_module(module: Any, stage: str = "llvm", cpu_options: Any = None) -> None:
    """Lower an imported ONNX-dialect module in place up to `stage` (one of `STAGES`)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage '{stage}' (stages: {', '.join(STAGES)})")
    with module.context:  # callers need not enter it: the passes build types and attributes
        _lower(module, stage, cpu_options)


def _lower(module: Any, stage: str, cpu_options: Any) -> None:
    run_onnx_passes(module)
    if stage == "onnx":
        return
    convert = get_pass_class("convert-onnx-to-linalg")
    if convert is None:
        raise PassFailure("onnx-to-linalg", [(None, "the convert-onnx-to-linalg pass is not available")])
    convert().run(module.operation)
    _run_native(module, "canonicalize,cse")
    if stage == "linalg":
        return
    from onnxc.targets.cpu import lower_module

    lower_module(_as_module(module), stage, cpu_options)


@dataclass(frozen=True)
class OnnxToLinalgPipeline(ModulePass):
    """Upgrade, infer shapes, fold, canonicalize, then convert ONNX to linalg/tensor/arith/math/scf."""

    name = "onnx-to-linalg"

    def run(self, module: ir.Operation) -> None:
        lower_onnx_module(module, "linalg")


@dataclass(frozen=True)
class OnnxToVectorPipeline(ModulePass):
    """onnx-to-linalg, then tile and vectorize for the CPU (vector dialect on tensors)."""

    name = "onnx-to-vector"

    def run(self, module: ir.Operation) -> None:
        lower_onnx_module(module, "vector")


@dataclass(frozen=True)
class OnnxToLLVMPipeline(ModulePass):
    """onnx-to-vector, then bufferize and lower to the LLVM dialect for the CPU."""

    name = "onnx-to-llvm"

    def run(self, module: ir.Operation) -> None:
        lower_onnx_module(module, "llvm")


def _cpu_stage(stage: str) -> type[ModulePass]:
    from onnxc.targets import cpu

    docs = {
        "vector": "Tile and vectorize linalg ops for the CPU (vector dialect, still on tensors).",
        "bufferize": "One-shot bufferize the module (function boundaries, identity layouts).",
        "llvm": "Lower vector/memref/math/arith/scf/cf/func to the LLVM dialect.",
    }
    fn = {"vector": cpu.lower_to_vector, "bufferize": cpu.bufferize, "llvm": cpu.lower_to_llvm}[stage]

    @dataclass(frozen=True)
    class CpuStage(ModulePass):
        __doc__ = docs[stage]
        name = f"cpu-to-{stage}" if stage != "bufferize" else "cpu-bufferize"

        def run(self, module: ir.Operation) -> None:
            fn(_as_module(module))

    CpuStage.__name__ = CpuStage.__qualname__ = f"Cpu{stage.capitalize()}Stage"
    return CpuStage


def __getattr__(name: str) -> type[ModulePass]:
    stages = {"CpuToVector": "vector", "CpuBufferize": "bufferize", "CpuToLLVM": "llvm"}
    if name in stages:
        return _cpu_stage(stages[name])
    raise AttributeError(name)
