"""The importer's own error: everything wrong with a model, reported together.

`ModelImportError` is the only exception the importer and exporter let escape for bad input. Tools
print it and exit 1; the fuzz test checks that nothing else escapes. `ImportError_` is its former
name (kept as an alias for existing callers; it read like Python's builtin `ImportError`, which
means something else).
"""

from __future__ import annotations

from onnxc.errors import DiagnosticsError


class ModelImportError(DiagnosticsError):
    """A model onnxc cannot import (or a module it cannot export).

    `headline` says what failed as a whole ("model 'x' is invalid"), `problems` lists each problem
    as a complete sentence naming the node (name, op type, opset) or model element it is about.
    """

    def __init__(self, headline: str, problems: list[str] | None = None) -> None:
        super().__init__(headline, list(problems or []))


#: The former name of `ModelImportError`.
ImportError_ = ModelImportError
