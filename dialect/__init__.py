"""The ONNX dialect: generated from the ONNX operator schemas, registered at run time through IRDL.

Public API (see DEVELOPERS.md): `onnx_context`, `register_dialects`, `onnx_op`, `none_value`,
`yield_values`, `schema_for`, `lookup`, `verify_onnx`. Names resolve lazily so that the generator
can import `onnxc.dialect.names` before the op table exists.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "onnx_context": "context",
    "register_dialects": "context",
    "IRDL_PATH": "context",
    "onnx_op": "builder",
    "none_value": "builder",
    "yield_values": "builder",
    "is_subgraph_terminator": "builder",
    "SUBGRAPH_TERMINATOR": "builder",
    "custom_op": "builder",
    "OnnxBuildError": "builder",
    "lookup": "table",
    "schema_for": "table",
    "op_info": "table",
    "all_ops": "table",
    "verify_onnx": "verifier",
    "VerifyError": "verifier",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
