"""Build onnxc's C interface: libonnxc_onnxifi.so from `c/onnxc_onnxifi.c` with the system C compiler.

What: `build_library(out_dir)` compiles the library (it embeds this Python: the include and
library folders come from `sysconfig`, and the interpreter the library starts by default is
this one, `sys.executable`, so a virtualenv's onnxc is found without setup); `header()` is the
path of `onnxc_onnxifi.h` to compile programs against. `python -m onnxc.targets.backends.cbuild
-o DIR` does the same from a shell and prints the library's path.

Why built on the user's machine rather than shipped compiled: the library links the exact
libpython of the environment onnxc is installed in; the sources ship with the package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from onnxc.errors import OnnxcError

__all__ = ["LIBRARY", "CBuildError", "build_library", "compiler", "embed_flags", "header", "library", "main"]

LIBRARY = "libonnxc_onnxifi.so"
_SOURCES = Path(__file__).parent / "c"


class CBuildError(OnnxcError):
    """The C library could not be built (no C compiler, no shared libpython, a compile error)."""


def header() -> Path:
    """The C header of the interface."""
    return _SOURCES / "onnxc_onnxifi.h"


def compiler() -> str:
    """The C compiler: $CC, else cc/gcc/clang on PATH."""
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    raise CBuildError("no C compiler found (set CC, or install cc/gcc/clang)")


def embed_flags() -> tuple[list[str], list[str]]:
    """(compile flags, link flags) to embed this interpreter."""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise CBuildError("this Python has no shared libpython (built without --enable-shared): it cannot be embedded in a library")
    include = sysconfig.get_config_var("INCLUDEPY")
    libdir = sysconfig.get_config_var("LIBDIR")
    version = sysconfig.get_config_var("LDVERSION") or sysconfig.get_config_var("VERSION")
    return [f"-I{include}"], [f"-L{libdir}", f"-Wl,-rpath,{libdir}", f"-lpython{version}", "-lpthread"]


def build_library(out_dir: str | os.PathLike[str]) -> Path:
    """Compile `libonnxc_onnxifi.so` into `out_dir` and return its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cflags, ldflags = embed_flags()
    target = out / LIBRARY
    cmd = [
        compiler(), "-std=gnu11", "-O2", "-fPIC", "-shared", "-Wall", "-Werror=implicit-function-declaration",
        f"-DONNXC_DEFAULT_PYTHON=\"{sys.executable}\"", *cflags, str(_SOURCES / "onnxc_onnxifi.c"), "-o", str(target), *ldflags,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise CBuildError(f"building {LIBRARY} failed:\n{' '.join(cmd)}\n{done.stderr}")
    return target


def library(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The library built once per source version and interpreter, in the onnxc cache folder
    (`cache_dir`, else $ONNXC_CACHE_DIR, else ~/.cache/onnxc; a temporary folder when caching is
    off), so programs and tests can ask for it without a build step of their own."""
    import hashlib
    import tempfile

    from onnxc.targets.cpu.cache import resolve_dir

    digest = hashlib.sha256()
    for f in sorted(_SOURCES.glob("*.[ch]")):
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    digest.update(sys.version.encode() + sys.executable.encode())
    base = resolve_dir(cache_dir) or Path(tempfile.gettempdir()) / "onnxc-nocache"
    folder = base / f"onnxifi-{digest.hexdigest()[:16]}"
    if (folder / LIBRARY).exists():
        return folder / LIBRARY
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="onnxifi-build-", dir=base))  # same file system: os.replace is atomic
    built = build_library(staging)
    folder.mkdir(parents=True, exist_ok=True)
    os.replace(built, folder / LIBRARY)  # atomic: two processes building at once both succeed
    shutil.rmtree(staging, ignore_errors=True)
    return folder / LIBRARY


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m onnxc.targets.backends.cbuild -o DIR`."""
    ap = argparse.ArgumentParser(prog="python -m onnxc.targets.backends.cbuild", description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output-dir", default=".", help="where to write the library (default: here)")
    args = ap.parse_args(argv)
    try:
        print(build_library(args.output_dir))
    except CBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"header: {header()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
