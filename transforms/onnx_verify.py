"""The `onnx-verify` pass: run the ONNX dialect's Python verifier over the module.

IRDL verifies arity and required attributes in C++ whenever MLIR verifies; the schema rules it
cannot express (type constraints, attribute kinds, optional inputs) live in
`onnxc.dialect.verifier`. This pass makes them part of a pipeline, failing with every finding.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from onnxc.dialect.verifier import verify_onnx
from onnxc.transforms.pass_base import ModulePass, PassFailure


@dataclass(frozen=True)
class OnnxVerifyPass(ModulePass):
    """Check ONNX type constraints, attribute kinds and optional operands against the schemas."""

    name = "onnx-verify"

    def run(self, module: ir.Operation) -> None:
        errors = verify_onnx(module)
        if errors:
            raise PassFailure(self.name, [(e.location, f"'{e.op_name}' op {e.message}") for e in errors])
