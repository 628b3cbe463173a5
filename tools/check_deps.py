"""`python -m onnxc.tools.check_deps`: run the tests against the newest releases of every dependency.

Why: both README commands install through `constraints.txt`, so CI only ever sees the versions
the project was last green with, and an upstream release (onnxruntime 1.32 accepting an IR
version that 1.31 refused once turned CI red overnight) can no longer break it unseen. The other
side of pinning is finding out early what the next bump will break: this tool makes a scratch
virtual environment, installs onnxc with its test extras *without* the constraints (so pip takes
the newest releases the package index serves), prints which packages moved and how, and runs the
README's tests there. Run it on a schedule or before bumping `constraints.txt`; with
`--write-constraints` a green run rewrites the pins to the versions it tested.

    python -m onnxc.tools.check_deps                   # newest releases, full test command
    python -m onnxc.tools.check_deps --pytest-args "-q -n 2 test/python/test_driver.py"
    python -m onnxc.tools.check_deps --dry-run         # print the steps only

Exit status: 0 when the tests pass on the newest releases, 1 when they fail (the table of moved
packages says where to look), 2 when the environment could not be set up.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from onnxc.errors import OnnxcError

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"


class CheckDepsError(OnnxcError):
    """The scratch environment could not be made (venv or pip failed)."""


def _canonical(name: str) -> str:
    """PEP 503 normalized project name (`Pygments` == `pygments`, `ml_dtypes` == `ml-dtypes`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(text: str) -> dict[str, str]:
    """`name==version` lines of a constraints/freeze file -> {canonical name: version}.

    Comments, blank lines, editable installs and anything that is not an exact pin are ignored.
    """
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if m:
            pins[_canonical(m.group(1))] = m.group(2)
    return pins


@dataclass(frozen=True)
class Moved:
    """One package whose newest release differs from its pin (`pinned` None: not pinned)."""

    name: str
    pinned: str | None
    newest: str | None


def compare(pins: dict[str, str], installed: dict[str, str]) -> list[Moved]:
    """What differs between the pins and a fresh install, sorted by name."""
    names = sorted(set(pins) | set(installed))
    return [Moved(n, pins.get(n), installed.get(n)) for n in names if pins.get(n) != installed.get(n) and n != "onnxc"]


def test_steps(python: Path, pytest_args: str | None) -> list[list[str]]:
    """The README test command's steps, run with the scratch environment's interpreter."""
    bindir = python.parent
    steps = [[str(python), "-m", "onnxc.tools.gen_onnx_dialect", "--check"]]
    if pytest_args is None:
        steps.append([str(bindir / "lit"), "-s", "test"])
        steps.append([str(python), "-m", "pytest", "-q", "-n", "2", "test/python"])
    else:
        steps.append([str(python), "-m", "pytest", *shlex.split(pytest_args)])
    return steps


def _run(cmd: Sequence[str], env: dict[str, str] | None = None, dry: bool = False) -> int:
    print("+ " + shlex.join(cmd), flush=True)
    if dry:
        return 0
    return subprocess.run(list(cmd), cwd=ROOT, env=env).returncode


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m onnxc.tools.check_deps", description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, help="where to make the scratch virtual environment (default: a temporary folder)")
    ap.add_argument("--extras", default="test,gpu,peers", help="the extras to install, comma separated (default: test,gpu,peers, as README's test command)")
    ap.add_argument("--pytest-args", help="run pytest with these arguments instead of the full README test command")
    ap.add_argument("--dry-run", action="store_true", help="print the steps without running them")
    ap.add_argument("--write-constraints", action="store_true", help="after a green run, rewrite constraints.txt with the tested versions")
    args = ap.parse_args(argv)

    pins = read_pins(CONSTRAINTS.read_text()) if CONSTRAINTS.exists() else {}
    tmp = None
    venv = args.venv
    if venv is None:
        tmp = tempfile.TemporaryDirectory(prefix="onnxc-check-deps-")
        venv = Path(tmp.name) / "venv"
    python = venv / "bin" / "python"
    # The project's constraints are deliberately NOT passed; PIP_CONSTRAINT is cleared so an
    # environment that sets it does not pin the scratch install either.
    env = {k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    extras = ",".join(e.strip() for e in args.extras.split(",") if e.strip())
    setup = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
        [str(python), "-m", "pip", "install", "-q", "--upgrade", "--upgrade-strategy", "eager", "-e", f".[{extras}]" if extras else "."],
    ]
    try:
        for cmd in setup:
            if _run(cmd, env, args.dry_run) != 0:
                raise CheckDepsError(f"setting up the scratch environment failed at: {shlex.join(cmd)}")
        if args.dry_run:
            installed: dict[str, str] = {}
        else:
            freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, env=env, check=False)
            installed = read_pins(freeze.stdout)
            moved = compare(pins, installed)
            print(f"\n{len(moved)} package(s) differ from constraints.txt:")
            for m in moved:
                print(f"  {m.name}: {m.pinned or '(not pinned)'} -> {m.newest or '(not installed)'}")
            print()
        status = 0
        for cmd in test_steps(python, args.pytest_args):
            if _run(cmd, env, args.dry_run) != 0:
                status = 1
                break
        verdict = "pass" if status == 0 else "FAIL"
        print(f"\ncheck_deps: the tests {verdict} on the newest releases")
        if status == 0 and args.write_constraints and not args.dry_run:
            _write_constraints(installed)
        return status
    except CheckDepsError as e:
        print(f"check_deps: error: {e}", file=sys.stderr)
        return 2
    finally:
        if tmp is not None:
            tmp.cleanup()


def _write_constraints(installed: dict[str, str]) -> None:
    """Bump every pinned line of constraints.txt to the tested version, keeping comments/order."""
    lines = []
    for line in CONSTRAINTS.read_text().splitlines():
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)(.*)", line)
        if m and _canonical(m.group(1)) in installed:
            line = f"{m.group(1)}=={installed[_canonical(m.group(1))]}{m.group(3)}"
        lines.append(line)
    CONSTRAINTS.write_text("\n".join(lines) + "\n")
    print(f"check_deps: wrote the tested versions to {CONSTRAINTS}")


if __name__ == "__main__":
    sys.exit(main())
