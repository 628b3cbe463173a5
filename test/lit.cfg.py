"""lit configuration for onnxc's FileCheck tests (`lit -sv test` from the repository root).

The tests run the installed project: `onnx-opt` and the Python `filecheck` come from the active
virtual environment (or the one beside this checkout), `%PYTHON` is the interpreter running lit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import lit.formats

# lit provides `config` and `lit_config` when it executes this file.
config = globals()["config"]
lit_config = globals()["lit_config"]

config.name = "onnxc"
# The internal shell: lit 23 refuses `execute_external=True`, and the internal one knows `not`.
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")
# `python/` holds the pytest suite; helper files and lit's own output are not tests either.
config.excludes = ["lit.cfg.py", "python", "Output", "__pycache__", "conftest.py"]

_repo = Path(config.test_source_root).parent


def _bin_dir() -> Path:
    """The bin folder of the environment with onnxc installed: this interpreter's, else `.venv`."""
    here = Path(sys.executable).parent
    if (here / "onnx-opt").exists():
        return here
    venv = _repo / ".venv" / "bin"
    if (venv / "onnx-opt").exists():
        return venv
    lit_config.fatal("onnx-opt is not installed: run `pip install -e .` in a virtual environment first")
    raise SystemExit(1)  # fatal() exits; this satisfies type checkers


_bin = _bin_dir()
_python = sys.executable if (Path(sys.executable).parent == _bin) else str(_bin / "python")
config.environment["PATH"] = os.pathsep.join([str(_bin), config.environment.get("PATH", os.environ.get("PATH", ""))])
# Tests must not depend on the user's terminal or on a traceback switch left on.
config.environment.pop("ONNXC_TRACEBACK", None)
config.environment["PYTHONDONTWRITEBYTECODE"] = "1"


def _installed(python: str, expression: str) -> str:
    """Evaluate `expression` in the test environment's interpreter (paths as installed there)."""
    import subprocess

    out = subprocess.run([python, "-c", f"print({expression})"], capture_output=True, text=True)
    if out.returncode != 0:
        lit_config.fatal(f"cannot evaluate {expression} with {python}: {out.stderr.strip()}")
    return out.stdout.strip()


_mlir_opt = _installed(
    _python,
    "next((str(p) for r in __import__('mlir').__path__ for p in [__import__('pathlib').Path(r, 'bin', 'mlir-opt')] if p.is_file()), '')",
)
_irdl = _installed(_python, "__import__('onnxc.dialect', fromlist=['IRDL_PATH']).IRDL_PATH")

config.substitutions.append(("%PYTHON", _python))
config.substitutions.append(("%irdl_file", _irdl))

# Substitution patterns are regular expressions applied after `%s` has become a path: a tool name
# must stand alone, or `test/onnx-opt/x.mlir` would have its folder name replaced.
def _word(name: str) -> str:
    return r"(?<![\w/.%-])" + name + r"(?![\w/.-])"


if _mlir_opt:
    config.substitutions.append((_word("mlir-opt"), _mlir_opt))
    config.available_features.add("mlir-opt")
config.substitutions.append((_word("onnx-opt"), str(_bin / "onnx-opt")))
config.substitutions.append((_word("filecheck"), str(_bin / "filecheck")))
