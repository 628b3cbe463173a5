"""On-disk cache of JIT-compiled CPU models: a second compile of the same model loads a library.

What: ``ModelCache(folder)`` keeps one shared library per compiled model, named by a key that
hashes everything the generated code depends on (``cache_key``): the model's bytes (and, for
external data, each data file's name, size and modification time), the target's options, the
CPU the code is generated for, onnxc's version and a fingerprint of onnxc's own source files
(so a change to the compiler never loads code the old compiler made), and the MLIR/LLVM version.
``store`` writes the object code the JIT has already generated
(``ExecutionEngine.dump_to_object_file``; no second code generation), with the object of the
parts a child process compiled (``split_codegen.py``) when there is one, linked with the AOT entry
stub of ``aot.py`` into ``<key>.so`` (+ ``<key>.so.json``, the signature); ``lookup`` loads it
with ``aot.load_library`` (no MLIR, no LLVM), so a hit costs milliseconds. Entries are written
to a temporary name and renamed (two processes compiling the same model both succeed), a library
that fails to load is removed and recompiled, and the folder is pruned to ``max_bytes``, oldest
first.

Where and when: ``resolve_dir(cache_dir)`` gives the folder: the ``cache_dir`` argument of
``onnxc.compile``, else ``$ONNXC_CACHE_DIR``; ``False``, ``""``, ``0``, ``off`` or ``none``
disable it. With neither given the cache is off (``DEFAULT_ENABLED``), so compile-time
measurements and tests always compile; ``DEFAULT_DIR`` is the folder used once it is turned on
by default. Compiles faster than ``MIN_COMPILE_S`` are not stored (linking would cost more than
it saves).

Why object code from the JIT: ``compile_aot`` would run LLVM's code generation a second time
(most of a big model's compile time) and print the weights as LLVM IR text. The JIT's object uses
the large code model and absolute relocations, so the library has text relocations (``ld`` says
``DT_TEXTREL``); glibc applies them at load time on x86-64. A library the loader refuses is
treated as a miss.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .abi import CpuTargetError

__all__ = [
    "DEFAULT_DIR",
    "DEFAULT_ENABLED",
    "ENV",
    "MIN_COMPILE_S",
    "ModelCache",
    "cache_key",
    "cached_compile",
    "model_cache_key",
    "resolve_dir",
    "source_fingerprint",
]

#: The environment variable naming the cache folder (or `off`).
ENV = "ONNXC_CACHE_DIR"
#: Whether the cache is used when neither `cache_dir` nor $ONNXC_CACHE_DIR says anything.
DEFAULT_ENABLED = False
#: The folder used when the cache is on by default.
DEFAULT_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "onnxc"
#: Compiles shorter than this are not stored.
MIN_COMPILE_S = 1.0
#: Prune the folder to this size after each store.
MAX_BYTES = 4 << 30
_OFF = {"", "0", "off", "none", "false", "no"}
_FORMAT = 1  # bump when the entry layout changes


def resolve_dir(cache_dir: str | os.PathLike[str] | bool | None) -> Path | None:
    """The cache folder for a `cache_dir` argument (None: ask $ONNXC_CACHE_DIR), or None when off."""
    if cache_dir is None:
        env = os.environ.get(ENV)
        if env is None:
            return DEFAULT_DIR if DEFAULT_ENABLED else None
        cache_dir = env
    if cache_dir is False:
        return None
    if cache_dir is True:
        return DEFAULT_DIR
    text = os.fspath(cache_dir)
    if text.strip().lower() in _OFF:
        return None
    return Path(text).expanduser()


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """SHA-256 over onnxc's Python sources and generated data files (relative name and content),
    plus the MLIR bindings' version: any change to the compiler changes every key."""
    import onnxc

    roots: list[Path] = [Path(onnxc.__file__).resolve().parent]
    for sub in ("dialect", "importers", "transforms", "targets", "tools"):
        try:
            mod = __import__(f"onnxc.{sub}", fromlist=["__file__"])
        except ImportError:  # pragma: no cover - a partial install
            continue
        roots.append(Path(mod.__file__).resolve().parent)
    h = hashlib.sha256()
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.suffix in (".py", ".mlir", ".json") and p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(root.parent)).encode())
                h.update(p.read_bytes())
    try:
        from importlib.metadata import version

        h.update(version("xtc-mlir-python-bindings").encode())
    except Exception:  # noqa: BLE001 - not installed from a wheel: the sources still count
        pass
    return h.hexdigest()


def _external_files(model_path: Path | None, locations: Iterable[str]) -> list[str]:
    """Name, size and mtime of each external data file (its bytes are not in the model)."""
    out = []
    for loc in sorted(set(locations)):
        p = (model_path.parent if model_path is not None else Path.cwd()) / loc
        try:
            st = p.stat()
            out.append(f"{loc}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            out.append(f"{loc}:missing")
    return out


def cache_key(model_bytes: bytes, options: Any, target: str, *, model_path: str | os.PathLike[str] | None = None, external: Iterable[str] = (), extra: Iterable[str] = ()) -> str:
    """The hex key of a compiled model: model bytes (+ external data files), options, target
    (the CPU's name and features), onnxc's version and source fingerprint, and ``extra``."""
    import onnxc

    from .isa import host_cpu

    cpu = host_cpu()
    h = hashlib.sha256()
    parts = [
        f"format={_FORMAT}",
        f"onnxc={onnxc.__version__}",
        f"sources={source_fingerprint()}",
        f"target={target}",
        f"cpu={cpu.name}|{cpu.llvm_cpu}|{cpu.llvm_features}",
        f"options={options!r}",
        *_external_files(Path(model_path) if model_path is not None else None, external),
        *extra,
    ]
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    h.update(hashlib.sha256(model_bytes).digest())
    return h.hexdigest()[:40]


@dataclasses.dataclass
class ModelCache:
    """A folder of compiled models (``<key>.so`` + ``<key>.so.json``)."""

    folder: Path
    max_bytes: int = MAX_BYTES

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.so"

    def lookup(self, key: str) -> Any | None:
        """The loaded function of ``key`` (an ``AotFunction``), or None on a miss. An entry that
        fails to load is removed (it is recompiled and stored again)."""
        from .aot import load_library

        lib = self.path(key)
        if not lib.exists():
            return None
        try:
            function = load_library(lib)
        except (OSError, CpuTargetError, ValueError, KeyError):
            self._remove(key)
            return None
        try:
            os.utime(lib)  # recently used: pruned last
        except OSError:
            pass
        return function

    def store(self, key: str, function: Any, options: Any = None) -> Path | None:
        """Write the JIT's code of ``function`` (a ``CompiledFunction`` compiled with ``options``)
        as ``<key>.so``, linked with the runtime libraries that code calls (the thread runtime
        for threaded code); None when it cannot be stored (no C compiler, a refused link): the
        cache is an optimisation."""
        from .aot import _METADATA_VERSION, _stub_source, find_cc
        from .jit import runtime_libraries
        from .pipeline import runtime_libraries as threaded_runtime_libraries

        engine = getattr(function, "engine", None)
        signature = getattr(function, "signature", None)
        if engine is None or signature is None:
            return None
        if getattr(function, "uses_string_runtime", False):  # its arena is this process's (strings.py)
            return None
        try:
            cc = find_cc()
        except CpuTargetError:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        metadata = json.dumps({"onnxc_aot": _METADATA_VERSION, "function": signature.to_json()}, separators=(",", ":"))
        final = self.path(key)
        with tempfile.TemporaryDirectory(prefix="onnxc-cache-", dir=self.folder) as tmp:
            obj = os.path.join(tmp, "kernel.o")
            stub = os.path.join(tmp, "entry.c")
            lib = os.path.join(tmp, final.name)
            try:
                engine.dump_to_object_file(obj)
            except Exception:  # noqa: BLE001 - an engine without an object cache: no entry
                return None
            if not os.path.exists(obj):
                return None
            source = _stub_source(signature, metadata) + _weights_source(getattr(function, "weights", None), tmp)
            objects = [obj]
            split = getattr(function, "split", None)
            if split is not None:  # parts compiled by a child process (split_codegen.py): its object too
                from .split_codegen import library_source

                source += library_source(split)
                objects.append(split.object_path)
            Path(stub).write_text(source)
            # The runtime libraries the JIT linked against, so their symbols resolve at load.
            libs = [x for p in runtime_libraries() + threaded_runtime_libraries(options) for x in (p, f"-Wl,-rpath,{os.path.dirname(p)}")]
            import subprocess

            proc = subprocess.run([cc, "-O2", "-fPIC", "-shared", "-Wl,-z,notext", "-o", lib, stub, *objects, *libs, "-lm"], capture_output=True, text=True)
            if proc.returncode != 0:
                return None
            try:
                _check_loads(lib)  # loads here, so it loads on a hit
            except (OSError, CpuTargetError):
                return None
            Path(lib + ".json").write_text(metadata)
            os.replace(lib + ".json", str(final) + ".json")
            os.replace(lib, final)
        self.prune()
        return final

    def prune(self) -> None:
        """Remove the least recently used entries until the folder holds at most ``max_bytes``."""
        entries = []
        for p in self.folder.glob("*.so"):
            try:
                st = p.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries):
            if total <= self.max_bytes:
                break
            self._remove(p.stem)
            total -= size

    def _remove(self, key: str) -> None:
        for p in (self.path(key), Path(str(self.path(key)) + ".json")):
            try:
                p.unlink()
            except OSError:
                pass


def _check_loads(path: str) -> None:
    """Load the library at ``path`` (raising what ``load_library`` raises) and unload it again:
    a library left mapped would take SIGBUS if its file were later rewritten in place."""
    import _ctypes

    from .aot import load_library

    function = load_library(path)
    handle = function._lib._handle
    del function
    _ctypes.dlclose(handle)


def model_cache_key(model: Any, proto: Any, options: Any, target: str) -> str:
    """``cache_key`` of an ``onnxc.compile`` argument: ``model`` is a path, bytes or ModelProto
    and ``proto`` its loaded ModelProto (external data not loaded)."""
    from onnx import TensorProto

    path: str | None = None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        data = Path(path).read_bytes()
    elif isinstance(model, (bytes, bytearray)):
        data = bytes(model)
    else:
        data = proto.SerializeToString()
    external = [
        e.value
        for t in proto.graph.initializer
        if t.data_location == TensorProto.EXTERNAL
        for e in t.external_data
        if e.key == "location"
    ]
    return cache_key(data, options, target, model_path=path, external=external)


def _weights_source(weights: Any, folder: str) -> str:
    """C source defining the JIT's external weights (``weights.py``) for the library: each array
    is written to a file in ``folder`` and included byte for byte by the assembler (``.incbin``),
    under the symbol the code refers to and with the alignment the code assumes. Empty when the
    function has no external weights."""
    arrays = getattr(weights, "arrays", None) or {}
    lines = []
    for i, (name, array) in enumerate(arrays.items()):
        path = os.path.join(folder, f"weights{i}.bin")
        array.tofile(path)
        lines.append(
            f'__asm__(".section .rodata.onnxc_weights,\\"a\\"\\n.balign 64\\n.globl {name}\\n'
            f'.hidden {name}\\n{name}:\\n.incbin \\"{path}\\"\\n.previous");'
        )
    return "\n" + "\n".join(lines) + "\n" if lines else ""


def cached_compile(folder: Path | None, key: Callable[[], str], compile_fn: Callable[[], Any], options: Any = None) -> Any:
    """``compile_fn()``, through the cache in ``folder`` (None: no cache). ``key`` is called only
    when the cache is on; a compile that took at least ``MIN_COMPILE_S`` is stored (``options``:
    the CPU options it compiled with, for the runtime libraries to link)."""
    if folder is None:
        return compile_fn()
    cache = ModelCache(folder)
    k = key()
    hit = cache.lookup(k)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    function = compile_fn()
    if time.perf_counter() - t0 >= MIN_COMPILE_S:
        cache.store(k, function, options)
    return function
