"""The layering rule of DEVELOPERS.md ("Layers"), checked on the source: every import of every
module of the installed packages is parsed (`ast`, so imports inside functions count too) and
must go downwards or sideways:

    errors  <  dialect  <  importers  <  transforms  <  targets  <  onnxc API  <  tools

(`onnxc.errors` at the bottom, the API modules `onnxc.compiler`/`onnxc.backend`/`onnxc/__init__`
above the targets, the command-line tools on top.) Also refused: importing a private name (one
starting with `_`), or a private module, of another package, by `from m import _x` or by
`m._x` on an imported module. `import onnxc` itself is allowed anywhere for `onnxc.__version__`
and `onnxc.__file__` (the root `__init__` imports nothing); `onnxc.compile` and the like count
as imports of the API layer where they are used. The package folders are read from pyproject.toml, so a new
package is checked as soon as it is declared.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Layer of each package (the longest matching prefix of a module name decides).
LAYERS: dict[str, int] = {
    "onnxc.errors": 0,
    "onnxc.dialect": 1,
    "onnxc.importers": 2,
    "onnxc.transforms": 3,
    "onnxc.targets": 4,
    "onnxc": 5,  # the API: onnxc/__init__, onnxc.compiler, onnxc.backend
    "onnxc.tools": 6,
}
NAMES = {v: k for k, v in LAYERS.items()}


def _package_of(module: str) -> str | None:
    """The layer key of `module` (None for modules outside onnxc: mlir, onnx, numpy...)."""
    best = None
    for key in LAYERS:
        if module == key or module.startswith(key + "."):
            if best is None or len(key) > len(best):
                best = key
    return best


def _modules() -> dict[str, Path]:
    """Module name -> file, for every .py file of every package in pyproject.toml."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dirs: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    out: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            out[name] = path
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against `module`)."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def violations(module: str, path: Path) -> list[str]:
    """Every import of `module` (at `path`) against the layering rule, as readable lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _package_of(module)
    assert here is not None, module
    found: list[str] = []
    aliases: dict[str, str] = {}  # local name -> imported onnxc module (for `alias._private`)

    def check(target: str, names: list[str], line: int) -> None:
        there = _package_of(target)
        if there is None:
            return
        where = f"{_rel(path)}:{line}: {module} imports {target}"
        if LAYERS[there] > LAYERS[here]:
            found.append(f"{where}: {NAMES[LAYERS[here]]} (layer {LAYERS[here]}) may not import {there} (layer {LAYERS[there]})")
        if there != here:
            private_parts = [p for p in target.split(".") if _is_private(p)]
            private_names = [n for n in names if _is_private(n)]
            if private_parts or private_names:
                found.append(f"{where}: private {', '.join(private_parts + private_names)} of another package")

    root_names: set[str] = set()  # local names bound to the bare `onnxc` package
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "onnxc":
                    # The root package's __init__ imports nothing: `onnxc.__version__` and
                    # `onnxc.__file__` are fine anywhere; its other names are checked where used.
                    root_names.add(a.asname or a.name)
                    continue
                check(a.name, [], node.lineno)
                if a.asname:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.stem == "__init__", node)
            names = [a.name for a in node.names]
            check(target, names, node.lineno)
            for a in node.names:
                # `from onnxc.importers import onnx_importer as I` binds a module.
                if f"{target}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{target}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in root_names:
            if not (node.attr.startswith("__") and node.attr.endswith("__")):
                check(f"onnxc.{node.attr}" if _package_of(f"onnxc.{node.attr}") != "onnxc" else "onnxc", [], node.lineno)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            target = aliases[node.value.id]
            if _is_private(node.attr) and _package_of(target) != here:
                found.append(
                    f"{_rel(path)}:{node.lineno}: {module} uses private {target}.{node.attr} of another package"
                )
    return found


MODULES = _modules()


def test_every_package_is_in_a_layer() -> None:
    assert MODULES, "no modules found: pyproject.toml's package-dir moved?"
    assert all(_package_of(m) is not None for m in MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_follow_the_layers(module: str) -> None:
    problems = violations(module, MODULES[module])
    assert not problems, "\n".join(problems)


def test_the_checker_finds_what_it_must(tmp_path: Path) -> None:
    """The rule catches an upward import, a private name and a private attribute of another
    package, and accepts imports downwards and private names of the same package."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from onnxc.targets.cpu import compile_module\n"
        "from onnxc.importers.onnx_importer import _Scope\n"
        "from onnxc.importers import onnx_importer as I\n"
        "x = I._opsets\n"
        "from onnxc.transforms.onnx_utils import _private_ok_here\n"
        "from onnxc.dialect import onnx_op\n"
        "import onnxc\n"
        "v = onnxc.__version__\n"
        "m = onnxc.compile\n"
    )
    problems = violations("onnxc.transforms.bad", bad)
    assert len(problems) == 4, problems
    assert "may not import onnxc (layer 5)" in problems[3]
    assert "may not import onnxc.targets" in problems[0]
    assert "private _Scope of another package" in problems[1]
    assert "private onnxc.importers.onnx_importer._opsets" in problems[2]
