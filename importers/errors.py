"""The importer's own error: everything wrong with a model, reported together.

`ImportError_` (trailing underscore: Python's builtin `ImportError` means something else) is the only
exception the importer and exporter let escape for bad input. Tools print it and exit 1; the fuzz
test checks that nothing else escapes.
"""

from __future__ import annotations

from onnxc.errors import DiagnosticsError


class ImportError_(DiagnosticsError):
    """A model onnxc cannot import (or a module it cannot export).

    `headline` says what failed as a whole ("model 'x' is invalid"), `problems` lists each problem
    as a complete sentence naming the node (name, op type, opset) or model element it is about.
    """

    def __init__(self, headline: str, problems: list[str] | None = None) -> None:
        super().__init__(headline, list(problems or []))
