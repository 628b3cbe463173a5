"""How the CPU target's threaded loops run: OpenMP (``libiomp5``) or MLIR's async runtime.

What: the tile plans put each large op's outer tiles in an ``scf.forall`` with one iteration per
thread (pipeline.py, ``forall_split``). Before the to-LLVM passes those loops become calls into a
thread runtime, chosen by ``CpuPipelineOptions.thread_runtime``:

* ``openmp``: ``convert-scf-to-openmp`` (an ``omp.parallel`` of exactly ``threads`` threads with a
  work-sharing loop) and ``convert-openmp-to-llvm``; the code calls ``__kmpc_fork_call`` of LLVM's
  OpenMP runtime, ``libiomp5.so`` from the ``intel-openmp`` package (the system ``libgomp`` lacks
  the ``__kmpc_*`` entry points).
* ``async``: MLIR's async runtime (``libmlir_async_runtime.so`` from the MLIR wheel): each forall
  becomes tasks on the runtime's thread pool (``ASYNC_PIPELINE``).
* ``auto`` (the default): OpenMP where ``libiomp5`` is installed, else the async runtime.

Why OpenMP by default: its workers wait for the next parallel region by spinning a little while
(``KMP_BLOCKTIME``, 200 ms by default) before they sleep, so handing a region to a thread costs
about a microsecond. The async runtime's pool sleeps on a condition variable: every region paid
two futex wake-ups, tens of microseconds in a VM, and a network of small ops (ShuffleNet,
SqueezeNet, MobileNetV2) ran slower on 2 threads than on 1 (measured, bench/models.py, AVX-512
EPYC: ShuffleNet 13.6 ms on 1 thread, 24.9 on 2 with the async runtime). The price is the spin:
after a run the workers keep a core busy for up to ``KMP_BLOCKTIME`` (``KMP_BLOCKTIME=0``
give it back at once, as onnxruntime's ``allow_spinning=0`` does); onnxc sets 20 ms unless the
user set it (``DEFAULT_BLOCKTIME_MS``).
"""

from __future__ import annotations

import functools
import os
import sys

__all__ = [
    "THREAD_RUNTIMES",
    "ASYNC_PIPELINE",
    "openmp_library",
    "async_runtime_library",
    "resolve_thread_runtime",
    "forall_pipeline",
    "runtime_libraries_for",
    "configure_openmp",
    "DEFAULT_BLOCKTIME_MS",
]

#: Values of ``CpuPipelineOptions.thread_runtime``.
THREAD_RUNTIMES: tuple[str, ...] = ("auto", "openmp", "async")

#: `scf.forall` (threaded outer tiles) -> MLIR's async runtime: each forall becomes a parallel
#: loop split into tasks (one per iteration here: the forall already has one per thread; the
#: worker count only caps the split, and `min-task-size=1` because its default of 1000
#: iterations kept a 2-iteration forall in one task) run by the runtime's thread pool;
#: `async-dispatch=false` launches them from the caller in a loop. Runs before the to-LLVM
#: passes (GUIDE: threads). Measuring threads on a shared machine needs it quiet (or the benchmark
#: at a real-time priority, `chrt -f`): with other work on the second core, a 2-thread run's tasks
#: run one after the other and look like no speedup at all.
ASYNC_PIPELINE: str = (
    "builtin.module(scf-forall-to-parallel,"
    "async-parallel-for{async-dispatch=false num-workers=256 min-task-size=1},"
    "async-to-async-runtime,async-runtime-ref-counting,async-runtime-ref-counting-opt,"
    "convert-async-to-llvm)"
)


@functools.cache
def openmp_library() -> str | None:
    """The path of ``libiomp5.so`` installed by the ``intel-openmp`` package (its data files go
    to ``<prefix>/lib``), or None when it is not installed."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution
    except ImportError:  # pragma: no cover - Python >= 3.8 has it
        return None
    try:
        dist = distribution("intel-openmp")
    except PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == "libiomp5.so":
            path = os.path.normpath(str(dist.locate_file(f)))
            if os.path.exists(path):
                return path
    candidate = os.path.join(sys.prefix, "lib", "libiomp5.so")
    return candidate if os.path.exists(candidate) else None


@functools.cache
def async_runtime_library() -> str | None:
    """The path of MLIR's ``libmlir_async_runtime.so`` (MLIR tools wheel), or None."""
    try:
        import mlir
    except ImportError:  # pragma: no cover - the bindings are a dependency
        return None
    for base in list(mlir.__path__):
        lib = os.path.join(base, "lib", "libmlir_async_runtime.so")
        if os.path.exists(lib):
            return lib
    return None


def resolve_thread_runtime(runtime: str) -> str:
    """``openmp`` or ``async`` for an option value (``auto`` picks OpenMP when installed)."""
    if runtime == "auto":
        return "openmp" if openmp_library() is not None else "async"
    return runtime


def forall_pipeline(runtime: str, threads: int) -> str:
    """The pass pipeline that turns ``scf.forall`` loops into calls of ``runtime`` (resolved),
    each parallel region with ``threads`` threads."""
    if resolve_thread_runtime(runtime) == "openmp":
        return f"builtin.module(scf-forall-to-parallel,convert-scf-to-openmp{{num-threads={int(threads)}}})"
    return ASYNC_PIPELINE


#: How long (ms) OpenMP's idle workers spin before they sleep, unless ``KMP_BLOCKTIME`` is set.
#: libiomp5's own default, 200 ms, keeps a core busy for a fifth of a second after every run (a
#: test suite or a server that runs one request now and then pays it each time); the ops of one
#: run are microseconds apart and back-to-back runs a few tens of microseconds, so 20 ms keeps
#: the workers awake through a run and between runs of a loop.
DEFAULT_BLOCKTIME_MS: int = 20


def configure_openmp() -> None:
    """Set ``KMP_BLOCKTIME`` to ``DEFAULT_BLOCKTIME_MS`` when the user has not set it. libiomp5
    reads it when it initializes (its first parallel region), so call this before running code
    that uses it (the JIT and the AOT loader do)."""
    os.environ.setdefault("KMP_BLOCKTIME", str(DEFAULT_BLOCKTIME_MS))


def runtime_libraries_for(runtime: str, threads: int) -> list[str]:
    """Shared libraries threaded code calls into (none for one thread)."""
    if threads <= 1:
        return []
    lib = openmp_library() if resolve_thread_runtime(runtime) == "openmp" else async_runtime_library()
    return [lib] if lib else []
