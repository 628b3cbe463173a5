"""The `convert-onnx-to-linalg` pass: ONNX-dialect functions -> upstream linalg/tensor/arith/
math/scf on tensors.

What: every op of every `func.func` is first checked (all ops that cannot be lowered are
reported together, with op type, opset version and node name), then each function is rebuilt
with signless element types and one lowering pattern per ONNX op (`onnxc.transforms.lowering`,
one module per op family). The output holds no ONNX op and no unrealized cast.

Why a pass over the whole module rather than greedy patterns: see
`onnxc.transforms.lowering.driver` (original types stay readable until the end; the pre-check
must see everything before anything changes).
"""

from __future__ import annotations

import dataclasses

from mlir import ir

from onnxc.transforms.lowering import load_patterns
from onnxc.transforms.lowering.driver import lower_module
from onnxc.transforms.pass_base import ModulePass


@dataclasses.dataclass(frozen=True)
class ConvertOnnxToLinalgPass(ModulePass):
    """Lower ONNX-dialect ops to linalg/tensor/arith/math/scf on tensors (all-or-nothing)."""

    name = "convert-onnx-to-linalg"

    def run(self, module: ir.Operation) -> None:
        load_patterns()
        lower_module(module.operation if isinstance(module, ir.Module) else module)
