"""Registering the ONNX dialects in an MLIR context, from the generated IRDL file.

`irdl.load_dialects` parses `onnx.irdl.mlir` and registers its dialects (about 50 ms for every
op of every domain). A context can hold each dialect only once, so loading checks first.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from mlir import ir
from mlir.dialects import irdl

from onnxc.dialect.names import DIALECT_TO_DOMAIN

IRDL_PATH = Path(__file__).resolve().parent / "onnx.irdl.mlir"

def _irdl_text() -> str:
    return IRDL_PATH.read_text()


def _placeholder_python_modules() -> None:
    """Give each ONNX dialect namespace an empty `mlir.dialects.<ns>` Python module.

    Whenever the bindings wrap an operation (`value.owner`, walking, `op.parent`) they look for
    the Python module of its dialect and do not remember a failed lookup, so every wrap of an
    ONNX op cost an import search (about 90 µs; most of the time of the ONNX passes on big
    models). A module in `sys.modules` ends the search at once (0.2 µs). It defines no op
    classes, so ONNX ops stay generic `OpView`s."""
    for ns in DIALECT_TO_DOMAIN:
        name = f"mlir.dialects.{ns}"
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name, "Placeholder: the ONNX dialects are IRDL dialects with no Python op classes.")


def register_dialects(ctx: ir.Context) -> None:
    """Load the ONNX dialects (`onnx`, `onnx_ml`, `onnx_training`, `onnx_preview`) into `ctx`.

    Calling it again on the same context does nothing.
    """
    _placeholder_python_modules()
    # Loading twice would register the dialects twice; the context itself knows whether it has them.
    if ctx.is_registered_operation("onnx.none"):
        return
    with ctx, ir.Location.unknown():
        irdl.load_dialects(ir.Module.parse(_irdl_text()))


def onnx_context() -> ir.Context:
    """A new context with the upstream dialects and the ONNX dialects loaded."""
    ctx = ir.Context()
    register_dialects(ctx)
    return ctx
