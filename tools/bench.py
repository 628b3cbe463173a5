"""`onnxc bench`: latency and throughput of a compiled model, and where its compile time goes.

    onnxc bench model.onnx [--threads N] [--iterations K] [--warmup W] [--input name=x.npy ...]
    onnxc bench model.onnx --profile [--iterations K]
    onnxc bench model.onnx --compile-stages [--opt-level L]
    onnxc bench model.onnx --target vulkan|cuda [--gpu-arch sm_XX] [--iterations K] [--warmup W]

What: compiles the model once (printing the compile time), runs it ``--warmup`` times untimed,
then ``--iterations`` timed runs, and prints the median, p90, mean, min and max latency and the
throughput (runs per second at the median), like onnxruntime's perf test. Inputs not given get
deterministic random data (the driver's ``run`` rules). ``--profile`` then compiles the model a
second time with its function outlined into small parts (``targets/cpu/outline.py``) and a clock
hook around each part's call, and lists the parts by time with the ONNX nodes (from the IR's name
locations) each one runs. ``--compile-stages`` instead compiles the
model stage by stage and prints the seconds each stage took (import, ONNX-level passes,
conversion to linalg, the CPU target's vector / bufferize / LLVM-dialect stages, LLVM's IR
optimisation in the ExecutionEngine and its machine-code generation, which ORC does lazily at the
first lookup of the entry) with their share of the total: the figures behind decisions
on compile time (issue 8, section 7). ``--target vulkan|cuda`` times the device target the same
way (``bench_device``); CUDA without an NVIDIA GPU fails with the target's message.

Why a separate module: the driver stays a dispatcher (`tools/driver.py` only registers the
sub-command through ``add_subparser``); the timing rules (warm-up, median and p90 of individual
runs, never a mean over a loop that hides outliers) live here once.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir

__all__ = ["LatencyStats", "PartTime", "StageTime", "add_subparser", "cmd_bench", "compile_stages", "measure", "profile"]


@dataclasses.dataclass(frozen=True)
class LatencyStats:
    """Latencies of individual runs, in milliseconds."""

    times_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p90(self) -> float:
        """90th percentile (nearest rank): 9 of 10 runs took at most this long."""
        ordered = sorted(self.times_ms)
        rank = max(1, -(-9 * len(ordered) // 10))  # ceil(0.9 n)
        return ordered[rank - 1]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times_ms)

    @property
    def throughput(self) -> float:
        """Runs per second at the median latency (one run at a time)."""
        return 1000.0 / self.median if self.median > 0 else float("inf")


def measure(fn: Callable[[], Any], iterations: int, warmup: int) -> LatencyStats:
    """Call ``fn`` ``warmup`` times untimed, then time ``iterations`` calls one by one."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        times.append(1000.0 * (time.perf_counter() - t0))
    return LatencyStats(tuple(times))


@dataclasses.dataclass(frozen=True)
class StageTime:
    """Seconds one compile stage took."""

    stage: str
    seconds: float


def _load_runtimes(options: Any) -> list[str]:
    """Load the runtime libraries code compiled with ``options`` calls into (the thread runtime
    for threaded code) into the process with RTLD_GLOBAL, as the JIT does, and return the ones
    to hand to an ExecutionEngine."""
    import ctypes

    from onnxc.targets.cpu import jit
    from onnxc.targets.cpu.pipeline import runtime_libraries

    for lib in runtime_libraries(options):
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    return jit.runtime_libraries()


def compile_stages(model: Any, options: Any = None) -> list[StageTime]:
    """Compile ``model`` (a path or ModelProto) for the CPU stage by stage, timing each stage.

    The stages are the public ones ``onnxc.compile`` goes through: ``import_model``, the
    ``onnx-passes`` pipeline, the rest of ``onnx-to-linalg`` (the registry's pipeline without
    its leading ``onnx-passes``), then the CPU target's ``lower_to_vector``, ``bufferize`` and
    ``lower_to_llvm``, the ExecutionEngine's LLVM IR optimisation at ``options.jit_opt_level``
    (its constructor) and machine-code generation (ORC's lazy compile at the first lookup). With
    ``options.split_codegen`` (the default) a large module's parts are compiled by a child process
    meanwhile (``split_codegen.py``): its start, and the wait for it after the engine's half, are
    stages of their own."""
    from mlir.execution_engine import ExecutionEngine

    from onnxc.importers import import_model
    from onnxc.targets.cpu import jit
    from onnxc.targets.cpu.pipeline import CpuPipelineOptions, bufferize, lower_to_llvm, lower_to_vector
    from onnxc.targets.cpu.split_codegen import start_split
    from onnxc.targets.cpu.weights import externalize_weights
    from onnxc.transforms import registry
    from onnxc.transforms.named_pipelines import lower_onnx_module
    from onnxc.transforms.pipeline import parse_pipeline, run_pipeline

    opts = options or CpuPipelineOptions()
    # The conversion part of `onnx-to-linalg`: its entries after `onnx-passes`, as registered.
    entries = parse_pipeline(registry.PIPELINES["onnx-to-linalg"].text)
    rest = ",".join(e.text() for e in entries if e.name != "onnx-passes")
    out: list[StageTime] = []

    def timed(stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        value = fn()
        out.append(StageTime(stage, time.perf_counter() - t0))
        return value

    module = timed("import", lambda: import_model(model))
    _bind_defaults(module)  # as `onnxc.compile` does: initializers that are inputs are constants
    entry = jit.select_entry(module, None).name
    timed("onnx passes", lambda: lower_onnx_module(module, "onnx"))
    timed("to linalg", lambda: run_pipeline(module, rest, reraise=True))
    with module.context:
        timed("to vector", lambda: lower_to_vector(module, opts))
        timed("bufferize", lambda: bufferize(module))
        timed("to LLVM dialect", lambda: lower_to_llvm(module, opts))
        weights = timed("weights out of the code", lambda: externalize_weights(module))
        libs = _load_runtimes(opts)
        level = opts.jit_opt_level
        # As compile_module: a large module's parts go to a child process (split_codegen.py).
        split = timed("child process started", lambda: start_split(module, level, {entry, "_mlir_ciface_" + entry})) if opts.split_codegen else None
        half = ", the parent's half" if split else ""
        engine = timed(f"LLVM IR O{level} (ExecutionEngine{half})", lambda: ExecutionEngine(split.parent if split else module, opt_level=level, shared_libs=libs))
        weights.register(engine)
        if split is not None:
            split.register(engine)
        # ORC compiles to machine code lazily, on the first lookup of a symbol.
        timed(f"machine code (first lookup{half})", lambda: engine.raw_lookup("_mlir_ciface_" + entry))
        if split is not None and not timed("waiting for the child (opt, llc, link)", lambda: split.finish(engine)):
            raise RuntimeError(f"the code generator's child process failed:\n{split.error}")
    del engine
    return out


@dataclasses.dataclass
class PartTime:
    """Time spent in one generated function (an outlined part of the model) per run."""

    function: str
    nodes: list[str]
    times_ms: list[float] = dataclasses.field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms) if self.times_ms else 0.0


#: Region ops per part when profiling: finer than compiling (``outline.DEFAULT_MAX_OPS``), so a
#: slow layer is not hidden among thirty others.
PROFILE_MAX_OPS = 4
_PROFILE_HOOK = "onnxc_profile"


def _node_names(fn: ir.Operation) -> list[str]:
    """The ONNX nodes of a function's ops, from their name locations, first seen first: each as
    ``name (OpType)`` (the importer's ``loc("name"("OpType"))``), so a profile of a model whose
    nodes are unnamed (labelled by output names) still says what each part computes."""
    seen: dict[str, None] = {}

    def names(loc: ir.Location) -> None:
        if loc.is_a_name():
            kind = loc.child_loc
            seen.setdefault(f"{loc.name_str} ({kind.name_str})" if kind.is_a_name() else loc.name_str, None)
        elif loc.is_a_fused():
            for inner in loc.locations:
                names(inner)

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name != "arith.constant":  # weights carry their initializer's name, not a node's
            names(op.location)
        return ir.WalkResult.ADVANCE

    fn.walk(visit)
    return list(seen)


def _instrument(module: ir.Module, entry: str) -> list[PartTime]:
    """Bracket every call of an outlined part in ``entry`` by calls of the ``onnxc_profile(id)``
    hook (id 2i before part i, 2i+1 after); returns the parts, with their ONNX node names."""
    from mlir.dialects import arith, func

    funcs = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation for op in module.body.operations if op.operation.name == "func.func"}
    i64 = ir.IntegerType.get_signless(64)
    with ir.Location.unknown(), ir.InsertionPoint.at_block_begin(module.body):
        hook = func.FuncOp(_PROFILE_HOOK, ir.FunctionType.get([i64], []), visibility="private")
    hook.operation.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
    body = funcs[entry].regions[0].blocks[0]
    calls = [op.operation for op in body.operations if op.operation.name == "func.call"]
    parts: list[PartTime] = []
    for call in calls:
        callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        if callee not in funcs:
            continue
        ident = len(parts)
        parts.append(PartTime(callee, _node_names(funcs[callee])))
        for offset, ip in ((0, ir.InsertionPoint(call)), (1, ir.InsertionPoint.after(call))):
            with call.location, ip:
                c = arith.ConstantOp(i64, 2 * ident + offset)
                func.CallOp([], ir.FlatSymbolRefAttr.get(_PROFILE_HOOK), [c.result])
    if not parts:  # a short model is one function: time the whole entry
        with ir.Location.unknown():
            first = next(iter(body.operations)).operation
            with ir.InsertionPoint(first):
                func.CallOp([], ir.FlatSymbolRefAttr.get(_PROFILE_HOOK), [arith.ConstantOp(i64, 0).result])
            ret = list(body.operations)[-1].operation
            with ir.InsertionPoint(ret):
                func.CallOp([], ir.FlatSymbolRefAttr.get(_PROFILE_HOOK), [arith.ConstantOp(i64, 1).result])
        parts.append(PartTime(entry, _node_names(funcs[entry])))
    return parts


def _bind_defaults(module: ir.Module) -> None:
    """Make the inputs that have an initializer constants, as ``onnxc.compile`` does when no call
    overrides them (`onnx-bind-default-inputs`): what is timed is then the code a model runs (an
    IR-3 model lists every weight as an input; kept as arguments, its weights would be filled,
    packed and folded on every run, which the compiled model never does)."""
    from onnxc.transforms.onnx_bind_defaults import OnnxBindDefaultInputsPass

    with module.context:
        OnnxBindDefaultInputsPass().run(module.operation)


def profile(
    model: Any, arrays: Sequence[np.ndarray], iterations: int, warmup: int, options: Any = None, bind_defaults: bool = False
) -> list[PartTime]:
    """Compile ``model`` with its function outlined into parts of ``PROFILE_MAX_OPS`` region ops
    and a timing hook around each part's call, run it on ``arrays`` (in input order), and return
    the time of each part per run.

    With ``bind_defaults`` the inputs that have an initializer are constants (``_bind_defaults``)
    and ``arrays`` holds the other inputs only: the code ``onnxc.compile`` runs when a call keeps
    every default.

    The hook is a Python callback (``ExecutionEngine.register_runtime``) that reads a clock: it
    adds about a microsecond per part, so the parts' times sum to slightly more than a run."""
    import ctypes

    from mlir.execution_engine import ExecutionEngine

    from onnxc.importers import import_model
    from onnxc.targets.cpu import jit
    from onnxc.targets.cpu.outline import outline_functions
    from onnxc.targets.cpu.pipeline import CpuPipelineOptions, bufferize, lower_to_llvm, lower_to_vector
    from onnxc.transforms.named_pipelines import lower_onnx_module

    opts = options or CpuPipelineOptions()
    module = import_model(model)
    if bind_defaults:
        _bind_defaults(module)
    lower_onnx_module(module, "linalg")
    signature = jit.select_entry(module, None)
    with module.context:
        # Not outlined (nor merged) in the vector stage: here every part is one place of the
        # model, named by its nodes, so equal layers must stay apart.
        lower_to_vector(module, opts, outline_max_ops=0)
        outline_functions(module, PROFILE_MAX_OPS)
        parts = _instrument(module, signature.name)
        bufferize(module)
        lower_to_llvm(module)
        engine = ExecutionEngine(module, opt_level=opts.jit_opt_level, shared_libs=_load_runtimes(opts))
    events: list[tuple[int, float]] = []
    clock = time.perf_counter

    @ctypes.CFUNCTYPE(None, ctypes.c_int64)
    def hook(ident: int) -> None:
        events.append((ident, clock()))

    engine.register_runtime(_PROFILE_HOOK, hook)
    function = jit.CompiledFunction(signature, engine, module)
    for i in range(warmup + iterations):
        events.clear()
        function(*arrays)
        if i < warmup:
            continue
        start: dict[int, float] = {}
        for ident, t in events:
            if ident % 2 == 0:
                start[ident // 2] = t
            elif ident // 2 in start:
                parts[ident // 2].times_ms.append(1000.0 * (t - start.pop(ident // 2)))
    del function, engine  # the engine calls `hook`: it goes first
    return parts


def _compile_kwargs(threads: int | None) -> dict[str, Any]:
    """How to ask ``onnxc.compile`` for ``threads`` threads: ``CpuPipelineOptions.threads`` when
    the options have it, else a ``threads=`` argument (checked by signature)."""
    import onnxc.compiler
    from onnxc.targets.cpu import CpuPipelineOptions

    if threads is None:
        return {}
    if "threads" in {f.name for f in dataclasses.fields(CpuPipelineOptions)}:
        return {"options": CpuPipelineOptions(threads=threads)}
    if "threads" in inspect.signature(onnxc.compiler.compile).parameters:
        return {"threads": threads}
    print(f"onnxc bench: --threads {threads} ignored: this onnxc compiles single-threaded code", file=sys.stderr)
    return {}


def cmd_bench(args: argparse.Namespace) -> int:
    """The `onnxc bench` command."""
    from onnxc.targets.cpu.isa import host_cpu
    from onnxc.tools.driver import DriverError, _bind_inputs

    if args.iterations < 1 or args.warmup < 0:
        raise DriverError("--iterations must be at least 1 and --warmup at least 0")
    if args.target != "cpu":
        return bench_device(args)
    if args.compile_stages:
        from onnxc.targets.cpu.pipeline import CpuPipelineOptions

        # The options the timed stages use: --opt-level and --threads where given, else the defaults.
        given = {k: v for k, v in (("jit_opt_level", args.opt_level), ("threads", args.threads)) if v is not None}
        stages = compile_stages(args.model, CpuPipelineOptions(**given))
        total = sum(s.seconds for s in stages)
        print(f"compile stages of {args.model} (ISA {host_cpu().isa}):")
        for s in stages:
            print(f"  {s.stage:<48} {s.seconds:8.2f} s  {100.0 * s.seconds / total if total else 0.0:5.1f}%")
        print(f"  {'total':<48} {total:8.2f} s")
        return 0
    import onnxc
    import onnxc.compiler

    from onnxc.targets.cpu import CpuPipelineOptions

    kwargs = _compile_kwargs(args.threads)
    t0 = time.perf_counter()
    model = onnxc.compile(args.model, "cpu", **kwargs)
    compile_s = time.perf_counter() - t0
    feeds = _bind_inputs(model, args.input or [], args.seed)
    stats = measure(lambda: model(**feeds), args.iterations, args.warmup)
    options = kwargs.get("options", CpuPipelineOptions())
    threads = args.threads if kwargs else getattr(options, "threads", 1)
    print(f"model: {args.model}")
    print(f"ISA: {host_cpu().isa}; threads: {threads}; compile: {compile_s:.2f} s")
    print(f"iterations: {args.iterations} (after {args.warmup} warm-up)")
    print(f"latency ms: median {stats.median:.3f}  p90 {stats.p90:.3f}  mean {stats.mean:.3f}  min {min(stats.times_ms):.3f}  max {max(stats.times_ms):.3f}")
    print(f"throughput: {stats.throughput:.2f} runs/s")
    if args.profile:
        # The code the model ran: its defaults bound unless the command line overrides one.
        # (`_bind_inputs` feeds a defaulted input only when --input gives it.)
        bind = not any(s.default is not None and s.name in feeds for s in model.inputs)
        arrays = [feeds[s.name] if s.name in feeds else s.default for s in model.inputs if not (bind and s.default is not None)]
        parts = profile(args.model, arrays, args.iterations, args.warmup, options, bind_defaults=bind)
        total = sum(p.median for p in parts)
        print(f"profile: {len(parts)} generated function(s) of up to {PROFILE_MAX_OPS} kernels, median ms per run (slowest first):")
        for p in sorted(parts, key=lambda p: -p.median)[: args.profile_top]:
            nodes = ", ".join(p.nodes[:4]) + (f" +{len(p.nodes) - 4} more" if len(p.nodes) > 4 else "")
            print(f"  {p.median:10.3f} ms {100.0 * p.median / total if total else 0.0:5.1f}%  {p.function}: {nodes or '(no ONNX node names)'}")
    return 0


def add_subparser(sub: Any) -> argparse.ArgumentParser:
    """Register `bench` on the driver's sub-parsers."""
    b = sub.add_parser("bench", help="time a model: median/p90 latency and throughput (or --compile-stages)")
    b.add_argument("model", help="the ONNX model (.onnx)")
    b.add_argument("--threads", type=int, help="threads of the compiled code (when onnxc supports it)")
    b.add_argument("--iterations", type=int, default=20, help="timed runs (default 20)")
    b.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    b.add_argument("--input", "-i", action="append", metavar="NAME=FILE", help="an input (.npy/.pb); others get random data")
    b.add_argument("--seed", type=int, default=0, help="seed of the generated random inputs (default 0)")
    b.add_argument("--compile-stages", action="store_true", help="time each compile stage instead of running")
    b.add_argument("--opt-level", type=int, choices=(0, 1, 2, 3), default=None, help="LLVM level for --compile-stages (default: the CPU target's, CpuPipelineOptions.jit_opt_level)")
    b.add_argument("--profile", action="store_true", help="also time each generated function, naming the ONNX nodes it runs")
    b.add_argument("--profile-top", type=int, default=15, help="functions listed by --profile (default 15)")
    b.add_argument("--target", default="cpu", help="the target to time (cpu, vulkan, cuda; default cpu)")
    from onnxc.tools.driver import add_gpu_flags

    add_gpu_flags(b)
    b.set_defaults(func=cmd_bench)
    return b


def bench_device(args: argparse.Namespace) -> int:
    """`onnxc bench --target vulkan|cuda`: compile for the device target, then warm-up runs and
    timed runs as for the CPU (median, p90, throughput; each run uploads the inputs, dispatches
    every kernel and downloads the outputs, what a caller of the compiled model waits for). The
    device is named; CUDA without a GPU fails with the target's own message. CPU-only flags
    (--threads, --compile-stages, --profile) are refused rather than ignored."""
    import onnxc
    from onnxc.tools.driver import DriverError, _bind_inputs, gpu_options

    cpu_only = [flag for flag, given in (("--threads", args.threads is not None), ("--compile-stages", args.compile_stages), ("--profile", args.profile)) if given]
    if cpu_only:
        raise DriverError(f"{', '.join(cpu_only)}: only for --target cpu (got --target {args.target})")
    t0 = time.perf_counter()
    model = onnxc.compile(args.model, args.target, options=gpu_options(args))
    compile_s = time.perf_counter() - t0
    feeds = _bind_inputs(model, args.input or [], args.seed)
    stats = measure(lambda: model(**feeds), args.iterations, args.warmup)
    device = args.target
    if args.target == "vulkan":
        from onnxc.targets.vulkan import vulkan_context

        device = f"vulkan ({vulkan_context().device_name})"
    print(f"model: {args.model}")
    print(f"target: {device}; compile: {compile_s:.2f} s")
    print(f"iterations: {args.iterations} (after {args.warmup} warm-up)")
    print(f"latency ms: median {stats.median:.3f}  p90 {stats.p90:.3f}  mean {stats.mean:.3f}  min {min(stats.times_ms):.3f}  max {max(stats.times_ms):.3f}")
    print(f"throughput: {stats.throughput:.2f} runs/s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m onnxc.tools.bench model.onnx ...` (same as `onnxc bench`)."""
    from onnxc.tools.driver import main as driver_main

    return driver_main(["bench", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
