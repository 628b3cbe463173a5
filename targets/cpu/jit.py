"""JIT execution of linalg-on-tensors modules on the host CPU.

What: ``compile_module(module, entry=None)`` lowers a copy of ``module`` through the CPU
stage passes (``passes.cpu_pipeline_text``, run by ``onnxc.transforms.pipeline``), builds an ``mlir.execution_engine.ExecutionEngine`` at
``CpuPipelineOptions.jit_opt_level`` (2 by default; host CPU features), and returns a ``CompiledFunction``: call it with numpy
arrays, get a list of numpy arrays back. A large module's outlined parts are compiled by a child
process meanwhile and called from its library (``split_codegen.py``).

Why like this: arguments are validated against the tensor-level signature *before* native code
runs (a wrong shape would otherwise read out of bounds); results come back as memrefs the
compiled code allocated with ``malloc`` (the deallocation pipeline guarantees they are fresh),
so dynamic result shapes need no up-front allocation: we copy them into numpy arrays and
``free`` them at once, nothing leaks and nothing aliases native memory.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine

from onnxc.transforms.lowering.runtime_checks import check_table
from onnxc.transforms.pipeline import Instrumentation, run_pipeline

from .abi import CpuTargetError, FunctionSignature, Invoker, signature_from_func
from .passes import cpu_pipeline_text
from .pipeline import CpuPipelineOptions
from .pipeline import runtime_libraries as cpu_runtime_libraries
from .runtime_checks import StatusChannel, status_address_from_engine
from .runtime_hooks import register as register_hooks
from .runtime_hooks import run_with_hooks
from .split_codegen import start_split
from .strings import load_runtime, module_uses_runtime
from .threads import resolve_thread_runtime
from .weights import ExternalWeights, externalize_weights

__all__ = ["CompiledFunction", "compile_module", "copy_module", "runtime_libraries", "select_entry"]

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


_GLOBAL_LIBRARIES: dict[str, ctypes.CDLL] = {}

#: Engines whose code MLIR's async runtime runs on its worker threads, kept for the life of the
#: process. A worker signals its task's completion from inside the JIT-compiled task function and
#: only then returns through that function's epilogue; the caller, woken by the signal, may return
#: and drop the last reference to the compiled model first, which frees the engine's code under
#: the worker (a segfault moments later, in whatever the process did next: about half of the
#: runs of `test_thread_runtimes_give_the_one_thread_results[async]`). OpenMP joins its workers
#: inside its own library before returning, so its engines are freed as usual.
_ASYNC_ENGINES: list[ExecutionEngine] = []


def _load_global(path: str) -> None:
    """dlopen ``path`` with RTLD_GLOBAL once per process (its symbols serve every JIT engine)."""
    if path not in _GLOBAL_LIBRARIES:
        from .threads import configure_openmp

        configure_openmp()  # before libiomp5's first parallel region reads it
        _GLOBAL_LIBRARIES[path] = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def runtime_libraries() -> list[str]:
    """Shared libraries handed to the ExecutionEngine (MLIR's C runner utils when installed).

    The default pipeline does not call into them (strided copies become loops), but a module
    that already contains calls to e.g. ``memrefCopy`` still links.
    """
    try:
        import mlir

        base = os.path.join(os.path.dirname(list(mlir.__path__)[0]), "mlir", "lib")
    except (ImportError, IndexError):  # pragma: no cover - no mlir package path
        return []
    lib = os.path.join(base, "libmlir_c_runner_utils.so")
    return [lib] if os.path.exists(lib) else []


def _public_functions(module: ir.Module) -> list[ir.Operation]:
    out = []
    for op in module.body.operations:
        op = op.operation
        if op.name != "func.func" or not len(op.regions[0].blocks):
            continue
        if "sym_visibility" in op.attributes and ir.StringAttr(
            op.attributes["sym_visibility"]
        ).value == "private":
            continue
        out.append(op)
    return out


def select_entry(module: ir.Module, entry: str | None) -> FunctionSignature:
    """The signature of the entry function: ``entry`` by name, else the only public one."""
    funcs = _public_functions(module)
    names = [ir.StringAttr(f.attributes["sym_name"]).value for f in funcs]
    if entry is None:
        if len(funcs) != 1:
            raise CpuTargetError(
                "module has public functions "
                f"{', '.join('@' + n for n in names) or '(none)'}; pass entry=<name>"
            )
        return signature_from_func(funcs[0])
    if entry not in names:
        raise CpuTargetError(
            f"no public function @{entry} in the module (have: "
            f"{', '.join('@' + n for n in names) or 'none'})"
        )
    return signature_from_func(funcs[names.index(entry)])


def copy_module(module: ir.Module) -> ir.Module:
    """A copy of ``module`` in its context, made with ``Operation.clone`` (no printing and
    re-parsing: weight blobs are not turned into text and back). The ExecutionEngine takes an
    ``ir.Module``, which the bindings cannot make from an operation, so the top-level ops are
    cloned into a fresh module and the module's attributes copied."""
    with module.context, module.operation.location:
        copy = ir.Module.create()
    attributes = module.operation.attributes
    for name in attributes:
        copy.operation.attributes[name] = attributes[name]
    block = copy.body
    for op in module.body.operations:
        op.operation.clone(ip=ir.InsertionPoint(block))
    return copy


class CompiledFunction:
    """A JIT-compiled function: ``f(*arrays) -> list[np.ndarray]``.

    Attributes: ``signature`` (argument/result specs), ``engine`` (the ExecutionEngine; kept
    alive as long as this object), ``llvm_module`` (the lowered module, for inspection).
    """

    def __init__(
        self, signature: FunctionSignature, engine: ExecutionEngine, llvm_module: ir.Module,
        string_runtime: Any = None,
    ) -> None:
        self.signature = signature
        self.engine = engine
        self.llvm_module = llvm_module
        self.uses_string_runtime = string_runtime is not None  # not stored by the compile cache
        # raw_lookup returns the engine's packed wrapper `_mlir__mlir_ciface_<name>(void**)`.
        address = engine.raw_lookup("_mlir_ciface_" + signature.name)
        if not address:
            raise CpuTargetError(f"JIT: no C interface for @{signature.name}")
        # The run-time status channel (runtime_checks.py): reset before a call, read after it.
        self._status = StatusChannel(status_address_from_engine(engine), check_table(llvm_module.operation))
        self._invoke = Invoker(
            signature, address, _libc.free, keepalive=engine, convention="packed", string_runtime=string_runtime,
            after_call=self._status.raise_if_exited,
        )

    @property
    def name(self) -> str:
        return self.signature.name

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        # run_with_hooks: raises what a run-time hook (runtime_hooks.py: ImageDecoder) reported.
        return run_with_hooks(self._status.run, self._invoke, arrays)

    def __repr__(self) -> str:
        return f"<CompiledFunction {self.signature}>"


def compile_module(
    module: ir.Module,
    entry: str | None = None,
    options: CpuPipelineOptions | None = None,
    shared_libs: Sequence[str] | None = None,
    *,
    instrumentation: Instrumentation | None = None,
    external_weights: bool = True,
) -> CompiledFunction:
    """Lower ``module`` (linalg on ranked tensors) to LLVM and JIT it; return the entry.

    ``entry`` names the function to call (default: the module's only public function).
    ``options`` tunes the pipeline (``CpuPipelineOptions(vectorize=False)`` for scalar loops).
    ``instrumentation`` prints IR after passes or times them (see
    ``onnxc.transforms.pipeline.Instrumentation``). ``external_weights`` keeps large constants
    out of the generated code (``weights.py``); the function's ``weights`` holds them. The input
    module is not modified.
    """
    level = (options or CpuPipelineOptions()).jit_opt_level
    if level not in (0, 1, 2, 3):  # checked here: LLVM asserts on other levels
        raise CpuTargetError(f"JIT: jit_opt_level must be 0, 1, 2 or 3, got {level!r}")
    signature = select_entry(module, entry)
    lowered = copy_module(module)
    # The CPU stages as registered passes, through the one pass-manager driver: what
    # `onnx-opt -p '<this text>'` runs. Their own errors (CpuPipelineError) come back as such.
    run_pipeline(lowered, cpu_pipeline_text(options), instrumentation=instrumentation, reraise=True)
    with lowered.context:
        libs = list(runtime_libraries() if shared_libs is None else shared_libs)
        # The thread runtime (threads.py: libiomp5, or MLIR's async runtime) is loaded into the
        # process once, not handed to the engine: an engine calls the library's `__mlir_execution_engine_destroy` when it
        # dies, which resets the runtime another live engine is using (a segfault at its next
        # call). Loaded globally, the JIT resolves its symbols and the runtime starts lazily.
        for lib in cpu_runtime_libraries(options):
            _load_global(lib)
        # String tensors (strings.py): the kernels' C runtime, loaded globally like the above.
        strings = None
        if module_uses_runtime(lowered) or any(s.element_type == "string" for s in (*signature.inputs, *signature.results)):
            strings = load_runtime()
        # Large weights become external symbols resolved to numpy buffers (weights.py): LLVM
        # would otherwise optimise and emit every byte of them (most of a big model's compile).
        weights = externalize_weights(lowered) if external_weights else ExternalWeights()
        opts = options or CpuPipelineOptions()
        # Part of the functions compiled in a child process meanwhile (split_codegen.py).
        split = None
        if opts.split_codegen and external_weights:
            split = start_split(lowered, level, {signature.name, "_mlir_ciface_" + signature.name})
        try:
            engine = _engine(split.parent if split else lowered, level, libs, signature.name)
            weights.register(engine)
            if split is not None:
                split.register(engine)
            register_hooks(engine, lowered)  # Python run-time functions the code calls (before any lookup)
            function = CompiledFunction(signature, engine, lowered, string_runtime=strings)  # machine code
        except BaseException:  # any exit, Ctrl-C included, stops the child; the error goes on as it was
            if split is not None:
                split.cancel()  # no child left compiling for a compile that failed
            raise
        if split is not None and not split.finish(engine):
            # The child failed: the whole module in this process (slower, the same code).
            split = None
            engine = _engine(lowered, level, libs, signature.name)
            weights.register(engine)
            register_hooks(engine, lowered)
            function = CompiledFunction(signature, engine, lowered, string_runtime=strings)
        if opts.threads > 1 and resolve_thread_runtime(opts.thread_runtime) == "async":
            _ASYNC_ENGINES.append(engine)  # see _ASYNC_ENGINES
    function.weights = weights  # the code reads these buffers: they live as long as the function
    function.split = split  # the child's library (its code is called): lives as long as the function
    return function


def _engine(module: ir.Module, level: int, libs: list[str], name: str) -> ExecutionEngine:
    """An ExecutionEngine for ``module`` (translated and optimised to LLVM IR here; machine
    code at the first lookup)."""
    try:
        return ExecutionEngine(module, opt_level=level, shared_libs=libs)
    except RuntimeError as e:  # translation to LLVM IR failed: a pipeline bug
        raise CpuTargetError(f"JIT: cannot create the execution engine for @{name}: {e}") from None


def run(module: ir.Module, *arrays: np.ndarray, entry: str | None = None) -> list[np.ndarray]:
    """Compile and call once (convenience for tests and tools)."""
    return compile_module(module, entry)(*arrays)


