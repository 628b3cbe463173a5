"""Registering the ONNX dialects in an MLIR context, from the generated IRDL file.

`irdl.load_dialects` parses `onnx.irdl.mlir` and registers its dialects (about 50 ms for every
op of every domain). A context can hold each dialect only once, so loading checks first.
"""

from __future__ import annotations

from pathlib import Path

from mlir import ir
from mlir._mlir_libs import _mlir
from mlir.dialects import irdl

IRDL_PATH = Path(__file__).resolve().parent / "onnx.irdl.mlir"

def _irdl_text() -> str:
    return IRDL_PATH.read_text()


#: The package holding an empty Python module per ONNX dialect namespace (see its docstring).
NAMESPACE_MODULES = "onnxc.dialect.namespaces"


def _add_dialect_search_prefix() -> None:
    """Let the bindings find a Python module for each ONNX dialect namespace.

    Without one, every wrap of an ONNX op (`value.owner`, walks, `op.parent`) repeats a failed
    import search (about 90 µs each); `onnxc.dialect.namespaces` ends it at once. Appending a
    dialect search prefix is the bindings' own extension hook (idempotent here), unlike putting
    placeholder modules into `sys.modules`."""
    prefixes = _mlir.globals.dialect_search_modules
    if NAMESPACE_MODULES not in prefixes:
        _mlir.globals.append_dialect_search_prefix(NAMESPACE_MODULES)


def register_dialects(ctx: ir.Context) -> None:
    """Load the ONNX dialects (`onnx`, `onnx_ml`, `onnx_training`, `onnx_preview`) into `ctx`.

    Calling it again on the same context does nothing.
    """
    _add_dialect_search_prefix()
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
