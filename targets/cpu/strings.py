"""String tensors at the CPU target's boundary, and the C runtime their kernels call.

What: the lowering (`onnxc.transforms.lowering.strings`) turns `!onnx.string` tensors into
tensors of i64 *handles* (the address of a NUL-terminated UTF-8 string) and the string kernels
into calls of `onnxc_str_*` functions, which `runtime/onnxc_strings.c` defines. This module

- builds that library once per source version with the system C compiler, in the onnxc cache
  folder (`runtime_library()`), and loads it into the process with RTLD_GLOBAL so that every JIT
  engine resolves the calls (`load_runtime()`); an AOT library compiles the source in
  (`aot_link_args`, `runtime_of_library`: a C caller of such a library passes `const char *`
  addresses as the int64 elements of string arguments, reads string results the same way, then
  calls `onnxc_str_arena_release()`); the compile cache does not store string models;
- converts at the compiled function's boundary (`StringRuntime`, used by `abi.Invoker`): numpy
  object (str/bytes) arrays in -> one UTF-8 blob plus an int64 handle array, kept alive for the
  call; handle arrays out -> numpy object arrays of `str`; then frees what the run allocated.

Why C (not Python callbacks registered with the engine): the kernels run per element inside the
generated loops, possibly on OpenMP worker threads; a C call costs nanoseconds and needs no GIL.
Why handles rather than a string type in the generated code: the lowered IR stays pure upstream
MLIR (tensors of i64, `func.call`), and every data-movement lowering (Reshape, Gather, Concat,
Where, ...) moves strings unchanged.

Ownership: strings made during a run live in the library's arena until `onnxc_str_arena_release`.
A run of a model that calls the runtime holds `StringRuntime.lock` from the call until its
outputs are copied out and the arena released, so concurrent runs never free each other's
strings (such runs are serialized; models without strings never take the lock). Strings with an
embedded NUL character are refused at the boundary (a handle is a C string).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from .abi import ArgumentError, CpuTargetError

__all__ = [
    "LIBRARY", "RUNTIME_PREFIX", "StringRuntime", "aot_link_args", "load_runtime", "module_uses_runtime",
    "runtime_library", "runtime_of_library", "uses_strings",
]

LIBRARY = "libonnxc_strings.so"
RUNTIME_PREFIX = "onnxc_str_"  # every kernel's symbol starts with it (the lowering's contract)
_SOURCE = Path(__file__).parent / "runtime" / "onnxc_strings.c"


def _compiler() -> str:
    from onnxc.targets.backends.cbuild import CBuildError, compiler

    try:
        return compiler()
    except CBuildError as exc:
        raise CpuTargetError(f"string tensors need a C compiler to build onnxc's string runtime: {exc}") from None


def runtime_library(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """`libonnxc_strings.so`, built once per source version (and compiler) in the onnxc cache
    folder (`cache_dir`, else $ONNXC_CACHE_DIR, else ~/.cache/onnxc; a temporary folder when
    caching is off). Two processes building at once both succeed (atomic rename)."""
    from .cache import resolve_dir

    cc = _compiler()
    digest = hashlib.sha256(_SOURCE.read_bytes() + cc.encode() + sys.platform.encode()).hexdigest()[:16]
    base = resolve_dir(cache_dir) or Path(tempfile.gettempdir()) / "onnxc-nocache"
    folder = base / f"strings-{digest}"
    if (folder / LIBRARY).exists():
        return folder / LIBRARY
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="strings-build-", dir=base))
    target = staging / LIBRARY
    cmd = [cc, "-std=gnu11", "-O2", "-fPIC", "-shared", "-Wall", "-Werror=implicit-function-declaration", str(_SOURCE), "-o", str(target), "-lpthread"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise CpuTargetError(f"building the string runtime {LIBRARY} failed:\n{' '.join(cmd)}\n{done.stderr}")
    folder.mkdir(parents=True, exist_ok=True)
    os.replace(target, folder / LIBRARY)
    shutil.rmtree(staging, ignore_errors=True)
    return folder / LIBRARY


_LOADED: dict[str, "StringRuntime"] = {}
_LOAD_LOCK = threading.Lock()


class StringRuntime:
    """The loaded string runtime: boundary conversion, the run lock, arena release."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.lock = threading.Lock()
        lib.onnxc_str_arena_release.argtypes = []
        lib.onnxc_str_arena_release.restype = None
        lib.onnxc_str_arena_count.argtypes = []
        lib.onnxc_str_arena_count.restype = ctypes.c_int64
        lib.onnxc_str_failure.argtypes = []
        lib.onnxc_str_failure.restype = ctypes.c_char_p
        lib.onnxc_str_pack.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64]
        lib.onnxc_str_pack.restype = ctypes.c_int64

    @staticmethod
    def encode(a: np.ndarray, what: str) -> tuple[np.ndarray, Any]:
        """An int64 handle array of the shape of `a` (str or bytes elements) and the buffer the
        handles point into (keep it alive during the call)."""
        items = a.reshape(-1).tolist()
        if items and set(map(type, items)) == {str}:
            # Fast path: one join and one encode; the NULs of the blob are the strings' ends
            # (one per string exactly, unless a string holds a NUL: the slow path names it).
            blob = np.frombuffer(("\0".join(items) + "\0").encode("utf-8", errors="surrogateescape"), dtype=np.uint8)
            ends = np.flatnonzero(blob == 0)
            if len(ends) == len(items):
                starts = np.empty(len(items), dtype=np.int64)
                starts[0] = 0
                starts[1:] = ends[:-1] + 1
                return (starts + blob.ctypes.data).reshape(a.shape), blob
        pieces: list[bytes] = []
        for i, s in enumerate(items):
            if isinstance(s, str):
                b = s.encode("utf-8", errors="surrogateescape")
            elif isinstance(s, (bytes, np.bytes_)):
                b = bytes(s)
            else:
                raise ArgumentError(f"{what}: element {i} is a {type(s).__name__}, not a string")
            if b"\0" in b:
                raise ArgumentError(f"{what}: element {i} contains a NUL character, which onnxc's string tensors cannot hold")
            pieces.append(b)
        blob = np.frombuffer(b"\0".join(pieces) + b"\0", dtype=np.uint8)
        lengths = np.fromiter((len(p) + 1 for p in pieces), dtype=np.int64, count=len(pieces))
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(pieces) else np.zeros(0, np.int64)
        handles = (offsets + blob.ctypes.data).astype(np.int64).reshape(a.shape)
        return handles, blob

    def decode(self, handles: np.ndarray) -> np.ndarray:
        """A numpy object array of `str` read from an int64 handle array (the runtime packs the
        strings into one buffer, decoded at once)."""
        out = np.empty(handles.shape, dtype=object)
        flat = np.ascontiguousarray(handles.reshape(-1), dtype=np.int64)
        if flat.size == 0:
            return out
        ptr = flat.ctypes.data_as(ctypes.c_void_p)
        total = int(self.lib.onnxc_str_pack(ptr, flat.size, None, 0))
        buf = ctypes.create_string_buffer(total)
        self.lib.onnxc_str_pack(ptr, flat.size, buf, total)
        text = buf.raw[: total - 1].decode("utf-8", errors="surrogateescape")
        out.reshape(-1)[:] = text.split("\0")
        return out

    def finish(self, report: bool = True) -> None:
        """After a run's outputs were copied out: free what it allocated; raise what a kernel
        reported (the outputs are then not returned) unless `report` is false."""
        failure = self.lib.onnxc_str_failure()
        self.lib.onnxc_str_arena_release()
        if failure and report:
            raise CpuTargetError(f"string runtime: {failure.decode('utf-8', errors='replace')}")

    def arena_count(self) -> int:
        """How many strings the arena holds now (0 between runs)."""
        return int(self.lib.onnxc_str_arena_count())


def load_runtime(cache_dir: str | os.PathLike[str] | None = None) -> StringRuntime:
    """Build (once) and load the runtime into the process with RTLD_GLOBAL, so JIT engines
    resolve `onnxc_str_*` calls against it; every caller gets the same instance (one arena)."""
    with _LOAD_LOCK:
        path = str(runtime_library(cache_dir))
        if path not in _LOADED:
            _LOADED[path] = StringRuntime(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
        return _LOADED[path]


def module_uses_runtime(module: Any) -> bool:
    """Whether a (lowered) module declares any `onnxc_str_*` function."""
    from mlir import ir

    for op in module.body.operations:
        op = op.operation
        if op.name in ("func.func", "llvm.func") and "sym_name" in op.attributes:
            if ir.StringAttr(op.attributes["sym_name"]).value.startswith(RUNTIME_PREFIX):
                return True
    return False



def uses_strings(module: Any, signature: Any) -> bool:
    """Whether a lowered module calls the string runtime or has strings at its boundary."""
    return module_uses_runtime(module) or any(s.element_type == "string" for s in (*signature.inputs, *signature.results))


def aot_link_args(module: Any, signature: Any) -> list[str]:
    """What an AOT library's link adds for string models: the runtime's source, compiled into the
    library (linked with -Bsymbolic, the library's calls bind to its own copy, so each library
    has its own arena and run lock: `runtime_of_library`). Empty for other models."""
    return [str(_SOURCE), "-lpthread"] if uses_strings(module, signature) else []


def runtime_of_library(lib: ctypes.CDLL) -> StringRuntime | None:
    """The string runtime compiled into an AOT library (None when it has none)."""
    try:
        lib.onnxc_str_arena_release  # noqa: B018 - the lookup is the test
    except AttributeError:
        return None
    return StringRuntime(lib)
