"""onnxc.importers: ONNX models into the ONNX dialect, and back out again.

- `import_model(model | path | bytes, config=None, *, context=None) -> ir.Module`
- `import_context() -> ir.Context` (the ONNX dialects loaded)
- `export_model(module) -> onnx.ModelProto`
- `ImportConfig` (options, each with its reason) and `ModelImportError` (every problem of a model at
  once; `ImportError_` is its former name)

The IR an import produces is described in `onnx_importer.py`'s docstring; the exporter reads the same
conventions. Names resolve lazily so that `import onnxc.importers` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "import_model": "onnx_importer",
    "import_context": "onnx_importer",
    "load_model": "onnx_importer",
    "export_model": "exporter",
    "ImportConfig": "config",
    "ModelImportError": "errors",
    "ImportError_": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
