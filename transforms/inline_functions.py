"""The `inline-functions` pass: replace calls of imported ONNX model-local functions by their bodies.

The work is done by `onnxc.importers.functions` (shared with `ImportConfig(inline_functions=True)`,
which must not reach up into `transforms`); this module makes it a registered pass.
How and why (IRDL ops cannot go through upstream `inline`) is said there.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from onnxc.importers.functions import inline_call, inline_functions
from onnxc.transforms.pass_base import ModulePass

__all__ = ["InlineFunctionsPass", "inline_call", "inline_functions"]


@dataclass(frozen=True)
class InlineFunctionsPass(ModulePass):
    """Inline calls of model-local ONNX functions and drop the functions no longer called."""

    name = "inline-functions"
    # Only these functions (ONNX function names or func symbols, comma-separated); empty: all.
    functions: tuple[str, ...] = ()

    def run(self, module: ir.Operation) -> None:
        inline_functions(module, self.functions)
