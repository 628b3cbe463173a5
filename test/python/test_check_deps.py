"""The pins (`constraints.txt`) and `python -m onnxc.tools.check_deps`.

Checks that every dependency the project declares (base and every extra) is pinned, that both
README commands install through the pins, and that check_deps installs *without* them and runs
the README's test steps. The installs themselves are not run here (minutes, and the network).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from onnxc.tools import check_deps

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return {check_deps._canonical(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in reqs}


def test_every_declared_dependency_is_pinned() -> None:
    pins = check_deps.read_pins((ROOT / "constraints.txt").read_text())
    missing = sorted(_declared() - set(pins))
    assert not missing, f"pin these in constraints.txt: {missing}"


def test_both_readme_commands_install_through_the_pins() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = [l for l in readme.splitlines() if "python3 -m venv .venv" in l and "pip install" in l]
    assert len(commands) == 2, commands
    for c in commands:
        assert "-c constraints.txt" in c, c


def test_read_pins_and_compare() -> None:
    pins = check_deps.read_pins("# c\nonnx==1.23.2\nPygments==2.21.0  # why\nfoo>=1\n-e git+x#egg=onnxc\n")
    assert pins == {"onnx": "1.23.2", "pygments": "2.21.0"}
    moved = check_deps.compare(pins, {"onnx": "1.24.0", "pygments": "2.21.0", "newdep": "0.1", "onnxc": "0.1.0"})
    assert [(m.name, m.pinned, m.newest) for m in moved] == [("newdep", None, "0.1"), ("onnx", "1.23.2", "1.24.0")]


def test_dry_run_installs_without_the_pins_and_runs_the_readme_tests(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "onnxc.tools.check_deps", "--dry-run", "--venv", str(tmp_path / "v")],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert r.returncode == 0, r.stderr
    steps = [l[2:] for l in r.stdout.splitlines() if l.startswith("+ ")]
    install = [s for s in steps if "pip install" in s and "-e" in s]
    assert len(install) == 1 and "constraints" not in install[0] and "--upgrade" in install[0], steps
    assert any("gen_onnx_dialect --check" in s for s in steps)
    assert any(s.endswith("lit -s test") for s in steps)
    assert any("pytest -q -n 2 test/python" in s for s in steps)
    assert not (tmp_path / "v").exists()  # a dry run makes nothing
