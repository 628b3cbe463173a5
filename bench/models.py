"""Benchmark: onnxc against onnxruntime on real models, 1 and 2 threads, side by side in one run.

What: for each model, onnxc's compile time and median latency and onnxruntime's median latency
(``intra_op_num_threads`` = 1 and 2, ``inter_op_num_threads`` = 1, sequential execution; each
runtime measured ``--rounds`` times, alternating with the other, its best median kept), their
ratio, the peak resident memory of each runtime's process, and a check of every onnxc output
against onnxruntime's (``|onnxc - ort| <= 1e-4 * (|ort| + max|ort|)``, i.e. 1e-4 relative to the
element or to the output's scale): a mismatching or failing model is marked and left out of the
geometric means, so a fast wrong answer cannot count. The closing line gives the geometric mean
of onnxc / onnxruntime at each thread count.

Peers (``--peers``): IREE's CPU backend is a third runtime, so the table shows onnxc against both
peers in one run. Each model is imported with ``iree-import-onnx``'s loader and importer (models
older than opset 17, the `light` ones, upgraded to 17 as its ``--opset-version`` does), compiled by
IREE's compiler in the child process (``--iree-hal-local-target-device-backends=llvm-cpu
--iree-llvmcpu-target-cpu=host``, plus any ``--iree-flag``) and run on its ``local-task`` device
with N task workers (``--task_topology_group_count=N``), in its own child process in the same
alternating rounds, with the same thread counts, warm-up and budget. The table adds IREE's compile
time, latency and ``onnxc/IREE`` ratio per thread count, peak memory and an ``IREE check`` column
(its outputs against onnxruntime at the same tolerance); the closing line adds the geomeans of
onnxc / IREE. An IREE import or compile failure or mismatch is reported in its row (``iree:
failed (reason)``) and left out of the IREE geomeans; it never stops the bench or onnxc's row.
IREE is the ``peers`` extra: ``pip install -c constraints.txt -e '.[peers]'``.

Models: the nine `light` CNNs of the onnx wheel (``light:<name>``, found by ``light_models.py``;
constant weights, so their check is weak) and the random-weight models of ``bench_models.py``
(ResNet-50, MobileNetV2, BERT-base, GPT-2 prefill and decode, ViT-S, Llama-style blocks).

Why one child process per model and runtime: a crash, a 10-minute compile or a memory blow-up of
one model must not take the table down (``--timeout``), each model is compiled once in its
process, and a child's peak resident memory (VmHWM) is that runtime's own. onnxc is given N
threads through ``CpuPipelineOptions.threads`` (or a ``threads=`` argument of ``onnxc.compile``)
when it has one; otherwise its one latency is set against both onnxruntime columns (the table
says so).

Run:
  python bench/models.py                         # everything (about 30 minutes)
  python bench/models.py --quick                 # a small ResNet, 2-layer BERT, SqueezeNet
  python bench/models.py --models bert,light:resnet50 --threads 1 --layers 2
  python bench/models.py --write-doc             # also regenerate docs/performance.md
  python bench/models.py --quick --peers         # IREE's CPU backend as a third column
  python bench/models.py --models path/to/model.onnx   # any .onnx file, random inputs
Timings are only meaningful on a quiet machine; no assertion is made on speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import inspect
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_models  # noqa: E402  (bench/ is a folder of scripts, not a package)
import light_models  # noqa: E402

RTOL = 1e-4
QUICK = ("resnet_small", "bert", "light:squeezenet")
QUICK_LAYERS = 2
FULL = tuple(f"light:{n}" for n in light_models.light_models()) + ("resnet50", "mobilenet_v2", "bert", "gpt2", "gpt2_decode", "vit", "llama")
DOC = ROOT / "docs" / "performance.md"


# --- child side: one runtime, one model, one process -------------------------------------------


def _measure(fn: Callable[[], Any], warmup: int, repeat: int, budget_s: float) -> tuple[float, int]:
    """Median latency (ms) of ``fn`` after ``warmup`` calls, over ``repeat`` calls or as many as
    fit in ``budget_s`` (at least 3), and the number of timed calls."""
    for _ in range(max(1, warmup)):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeat and (len(times) < 3 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times), len(times)


def _peak_rss_mb() -> float:
    """This process's peak resident memory in MiB. VmHWM belongs to the process's own address
    space; ``ru_maxrss`` survives exec on Linux, so a child would report the (larger) parent that
    forked it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def child_main(args: argparse.Namespace) -> int:
    """Compile/load the model, time it, save outputs and a JSON result into ``args.out``."""
    feeds = dict(np.load(args.feeds))
    out = Path(args.out)
    result: dict[str, Any] = {"runtime": args.child, "threads": args.threads}
    if args.child == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        t0 = time.perf_counter()
        sess = ort.InferenceSession(args.model_file, so, providers=["CPUExecutionProvider"])
        result["compile_s"] = time.perf_counter() - t0
        names = [o.name for o in sess.get_outputs()]
        outputs = sess.run(names, feeds)
        run = lambda: sess.run(names, feeds)  # noqa: E731
    elif args.child == "iree":
        t0 = time.perf_counter()
        vmfb = out / f"iree{args.threads}.vmfb"
        input_names, names = iree_compile(args.model_file, vmfb, args.iree_flag)
        result["compile_s"] = time.perf_counter() - t0
        result["iree_version"] = _iree_version()
        fn = iree_load(vmfb, args.threads)
        inputs = [feeds[n] for n in input_names]
        run = lambda: iree_call(fn, inputs)  # noqa: E731
        outputs = run()
    else:
        import onnxc
        import onnxc.compiler

        kwargs: dict[str, Any] = {}
        if args.threads_supported:
            kwargs.update(onnxc_threads_kwargs(args.threads))
        if args.target_cpu:
            kwargs.update(onnxc_target_cpu_kwargs(args.target_cpu, kwargs))
        if "cache_dir" in inspect.signature(onnxc.compiler.compile).parameters:
            kwargs["cache_dir"] = False  # compile time is measured: never load from a cache
        t0 = time.perf_counter()
        model = onnxc.compile(args.model_file, "cpu", **kwargs)
        result["compile_s"] = time.perf_counter() - t0
        names = model.output_names
        outputs = model(**feeds)
        run = lambda: model(**feeds)  # noqa: E731
    np.savez(out / f"{args.child}{args.threads}.npz", **{f"o{i}": np.asarray(a) for i, a in enumerate(outputs)})
    result["output_names"] = list(names)
    result["ms"], result["runs"] = _measure(run, args.warmup, args.repeat, args.budget)
    result["rss_mb"] = _peak_rss_mb()
    (out / f"{args.child}{args.threads}.json").write_text(json.dumps(result))
    return 0


# --- IREE (--peers): iree-import-onnx, IREE's compiler in this process, the local-task runtime ---

IREE_OPSET = 17  # iree-import-onnx's --opset-version: older models (the opset-9 `light` ones) are upgraded
IREE_COMPILE_FLAGS = (
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
)
PEERS_INSTALL = "pip install -c constraints.txt -e '.[peers]'"


def peers_missing() -> str | None:
    """None when IREE's compiler and runtime can be imported, else the one-line reason."""
    import importlib.util

    for mod, dist in (("iree.compiler", "iree-base-compiler"), ("iree.runtime", "iree-base-runtime")):
        try:
            found = importlib.util.find_spec(mod) is not None
        except ImportError:
            found = False
        if not found:
            return f"--peers needs IREE ({dist} is not installed): {PEERS_INSTALL}"
    return None


def _iree_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("iree-base-compiler")
    except metadata.PackageNotFoundError:
        return "unknown"


def iree_compile(model_file: str | Path, vmfb: Path, extra_flags: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """IREE's path from ONNX to a CPU module, all in this process (so its peak memory is IREE's,
    as onnxc's child holds import, compile and run): ``iree-import-onnx``'s loader (upgrade to
    opset 17, ONNX shape inference) and importer (ONNX -> torch dialect), then IREE's compiler
    API for the llvm-cpu backend on this host's CPU, written to ``vmfb`` (the runtime maps it,
    as ``iree-run-module`` does). Returns the names of the function's inputs and those of its
    outputs (ONNX graph order). A failed compile raises RuntimeError with IREE's first error line."""
    import io

    from iree.compiler.api import Output, Session, Source
    from iree.compiler.extras import onnx_importer
    from iree.compiler.ir import Context
    from iree.compiler.tools.import_onnx.__main__ import load_onnx_model, parse_arguments

    proto = load_onnx_model(parse_arguments([str(model_file), "--opset-version", str(IREE_OPSET)]))
    inits = {t.name for t in proto.graph.initializer}
    input_names = [i.name for i in proto.graph.input if i.name not in inits]
    output_names = [o.name for o in proto.graph.output]
    info = onnx_importer.ModelInfo(proto)
    module = info.create_module(context=Context())
    onnx_importer.NodeImporter.define_function(info.main_graph, module.operation).import_all()
    module.operation.verify()
    # Handed over as bytecode: a module built in the session's own context and given with
    # Invocation.import_module crashes IREE 3.13's pipeline (segfault in execute).
    buf = io.BytesIO()
    module.operation.write_bytecode(buf)
    data = buf.getvalue()
    del buf, module, info, proto
    session = Session()
    session.set_flags(*IREE_COMPILE_FLAGS, *extra_flags)
    inv = session.invocation()
    inv.enable_console_diagnostics()
    with tempfile.TemporaryFile("w+b") as diag:
        # IREE prints diagnostics on the C stderr: caught here so a failure names its first error.
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(diag.fileno(), 2)
        try:
            ok = inv.parse_source(Source.wrap_buffer(session, data)) and inv.execute()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        if not ok:
            diag.seek(0)
            text = diag.read().decode(errors="replace")
            errors = [ln.split("error:", 1)[1].strip() for ln in text.splitlines() if "error:" in ln]
            first = (errors or [ln.strip() for ln in text.splitlines() if ln.strip()] or ["no diagnostic"])[0]
            first = first.removeprefix('loc(""):').strip()
            raise RuntimeError(f"IREE compile failed: {first[:300]}")
    out = Output.open_file(str(vmfb))
    inv.output_vm_bytecode(out)
    out.keep()
    out.close()
    inv.close()
    session.close()
    return input_names, output_names


def iree_load(vmfb: Path, threads: int) -> Any:
    """The compiled model's entry function on IREE's ``local-task`` device with ``threads`` task
    workers (``--task_topology_group_count``, set before the device exists; the default takes one
    worker per physical core)."""
    import iree.runtime as rt

    rt.flags.parse_flags(f"--task_topology_group_count={threads}")
    ctx = rt.SystemContext(config=rt.Config("local-task"))
    vm_module = rt.VmModule.mmap(ctx.instance, str(vmfb))
    ctx.add_vm_module(vm_module)
    entries = [f for f in vm_module.function_names if not f.startswith("__") and not f.endswith("$async")]
    if len(entries) != 1:
        raise RuntimeError(f"IREE module has {len(entries)} entry functions ({', '.join(entries)}), expected 1")
    return ctx.modules[vm_module.name][entries[0]]


def iree_call(fn: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Call the IREE function on numpy inputs; its outputs as host numpy arrays (copied back, as
    the other runtimes return them)."""
    res = fn(*inputs)
    res = res if isinstance(res, (tuple, list)) else (res,)
    return [np.asarray(r.to_host()) if hasattr(r, "to_host") else np.asarray(r) for r in res]


def onnxc_threads_kwargs(threads: int) -> dict[str, Any]:
    """How to ask ``onnxc.compile`` for ``threads`` threads: ``CpuPipelineOptions.threads`` when
    the options have it, else a ``threads=`` argument of compile, else not at all ({})."""
    import onnxc.compiler
    from onnxc.targets.cpu import CpuPipelineOptions

    if "threads" in {f.name for f in dataclasses.fields(CpuPipelineOptions)}:
        return {"options": CpuPipelineOptions(threads=threads)}
    if "threads" in inspect.signature(onnxc.compiler.compile).parameters:
        return {"threads": threads}
    return {}


def onnxc_target_cpu_kwargs(target_cpu: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for ``onnxc.compile`` extended to generate code for ``target_cpu`` (the field
    ``CpuPipelineOptions.target_cpu``, next to the threads already asked for). An onnxc without
    the field is an error: a run that silently measured host code would be mislabelled."""
    from onnxc.targets.cpu import CpuPipelineOptions

    if "target_cpu" not in {f.name for f in dataclasses.fields(CpuPipelineOptions)}:
        raise SystemExit("--target-cpu: this onnxc's CpuPipelineOptions has no target_cpu field")
    options = kwargs.get("options") or CpuPipelineOptions()
    return {"options": dataclasses.replace(options, target_cpu=target_cpu)}


# --- parent side --------------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    """One model's line of the table."""

    model: str
    description: str
    ort_ms: dict[int, float] = dataclasses.field(default_factory=dict)
    onnxc_ms: dict[int, float] = dataclasses.field(default_factory=dict)
    compile_s: float | None = None
    onnxc_rss_mb: float | None = None
    ort_rss_mb: float | None = None
    check: str = "-"  # "ok", "MISMATCH (...)", or "-" when there was nothing to compare
    errors: list[str] = dataclasses.field(default_factory=list)
    # IREE (--peers): its own numbers, check and errors; an IREE failure never fails the row.
    iree_ms: dict[int, float] = dataclasses.field(default_factory=dict)
    iree_compile_s: float | None = None
    iree_rss_mb: float | None = None
    iree_check: str = "-"  # "ok", "MISMATCH (...)", "failed" (reason in iree_errors) or "-"
    iree_errors: list[str] = dataclasses.field(default_factory=list)

    def ratio(self, threads: int, onnxc_threads: int | None) -> float | None:
        ours = self.onnxc_ms.get(threads if onnxc_threads is None else onnxc_threads)
        theirs = self.ort_ms.get(threads)
        return ours / theirs if ours is not None and theirs else None

    def iree_ratio(self, threads: int, onnxc_threads: int | None) -> float | None:
        """onnxc / IREE latency at ``threads`` (IREE always runs with ``threads`` workers)."""
        ours = self.onnxc_ms.get(threads if onnxc_threads is None else onnxc_threads)
        theirs = self.iree_ms.get(threads)
        return ours / theirs if ours is not None and theirs else None

    @property
    def counts(self) -> bool:
        """Whether the row enters the geometric means: onnxc ran and matched onnxruntime."""
        return self.check == "ok" and not self.errors

    @property
    def iree_counts(self) -> bool:
        """Whether the row enters the geometric means against IREE: onnxc and IREE both ran and
        both matched onnxruntime."""
        return self.counts and self.iree_check == "ok" and not self.iree_errors

    @property
    def iree_status(self) -> str:
        """The IREE check column: ok, MISMATCH, failed or - (not run)."""
        if self.iree_errors:
            return "failed"
        return "MISMATCH" if self.iree_check.startswith("MISMATCH") else self.iree_check


def _run_child(kind: str, threads: int, model_file: Path, feeds: Path, work: Path, args: argparse.Namespace, threads_supported: bool) -> dict[str, Any]:
    """Run one child; its JSON result, or {"error": ...} on a crash or timeout."""
    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--child", kind, "--model-file", str(model_file), "--feeds", str(feeds),
        "--out", str(work), "--threads", str(threads), "--warmup", str(args.warmup), "--repeat", str(args.repeat), "--budget", str(args.budget),
    ]
    if threads_supported:
        cmd.append("--threads-supported")
    if kind == "iree":
        cmd += [f"--iree-flag={f}" for f in args.iree_flag]
    if kind == "onnxc" and args.target_cpu:
        cmd += ["--target-cpu", args.target_cpu]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"error": f"{kind}: timed out after {args.timeout:.0f} s"}
    result_file = work / f"{kind}{threads}.json"
    if proc.returncode != 0 or not result_file.exists():
        lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
        tail = lines[-1] if lines else f"exit status {proc.returncode}"
        return {"error": f"{kind}: {tail[:300]}"}
    return json.loads(result_file.read_text())


def _model_file_name(name: str) -> Path | None:
    """The path when a --models entry names an .onnx file rather than a known model."""
    path = Path(name)
    return path if name.endswith(".onnx") and path.is_file() else None


def _compare(ours: Path, theirs: Path) -> str:
    """'ok' or 'MISMATCH (output i: worst relative error)' between two saved output sets."""
    a, b = np.load(ours), np.load(theirs)
    if sorted(a.files) != sorted(b.files):
        return f"MISMATCH ({len(a.files)} outputs, onnxruntime has {len(b.files)})"
    worst = 0.0
    for key in sorted(b.files, key=lambda k: int(k[1:])):
        x, y = a[key], b[key]
        if x.shape != y.shape:
            return f"MISMATCH (output {key[1:]}: shape {x.shape}, onnxruntime {y.shape})"
        if y.dtype.kind not in "fc":
            if not np.array_equal(x, y):
                return f"MISMATCH (output {key[1:]}: integer values differ)"
            continue
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        if not np.array_equal(np.isnan(x64), np.isnan(y64)):
            return f"MISMATCH (output {key[1:]}: NaN pattern differs)"
        finite = ~np.isnan(y64)
        if not finite.any():
            continue
        scale = float(np.max(np.abs(y64[finite])))
        err = np.abs(x64[finite] - y64[finite]) / (np.abs(y64[finite]) + scale + 1e-30)
        worst = max(worst, float(np.max(err)))
    return "ok" if worst <= RTOL else f"MISMATCH (relative error {worst:.1e} > {RTOL:g})"


def bench_one(name: str, args: argparse.Namespace, threads: Sequence[int], threads_supported: bool, work_root: Path) -> Row:
    """Build (or locate) the model, run every child, compare outputs."""
    work = Path(tempfile.mkdtemp(prefix="".join(c if c.isalnum() or c in "._" else "_" for c in Path(name).name) + "-", dir=work_root))
    if _model_file_name(name) is not None:
        import onnx

        model_file = Path(name).resolve()
        feeds = bench_models.random_feeds(onnx.load(str(model_file)))
        row = Row(Path(name).name, f"{name} (random inputs)")
    elif name.startswith("light:"):
        import onnx

        short = name.split(":", 1)[1]
        path = light_models.light_models()[short]
        model_file = Path(path)
        feeds = bench_models.random_feeds(onnx.load(path))
        row = Row(name, f"onnx wheel light model {short} (weights 0.02)")
    else:
        built = bench_models.build(name, layers=args.layers)
        model_file = work / "model.onnx"
        model_file.write_bytes(built.proto.SerializeToString())
        feeds = built.feeds
        row = Row(name, built.description)
        del built
    feeds_file = work / "feeds.npz"
    np.savez(feeds_file, **feeds)
    # Rounds: onnxruntime and onnxc alternate (per thread count, `--rounds` times) and each keeps
    # its best median. On a shared machine whose speed drifts over minutes, one child per runtime
    # measured a minute apart put the drift into the ratio (the same model's ratio moved 10-30%
    # between runs); alternating gives both runtimes the same chances at the quiet windows.
    # With --peers IREE is the third runtime of each round (same thread counts and rules); its
    # failure or mismatch is its own (iree_errors, iree_check) and never stops onnxc's row.
    onnxc_threads = threads if threads_supported else threads[:1]
    ref = work / f"ort{threads[0]}.npz"
    failed = False
    iree_failed = not args.peers
    for _ in range(max(1, args.rounds)):
        for t in threads:
            r = _run_child("ort", t, model_file, feeds_file, work, args, threads_supported)
            if "error" in r:
                row.errors.append(r["error"])
            else:
                row.ort_ms[t] = min(row.ort_ms.get(t, r["ms"]), r["ms"])
                row.ort_rss_mb = max(row.ort_rss_mb or 0.0, r["rss_mb"])
            if t in onnxc_threads and not failed:
                r = _run_child("onnxc", t, model_file, feeds_file, work, args, threads_supported)
                if "error" in r:
                    row.errors.append(r["error"])
                    failed = True
                else:
                    row.onnxc_ms[t] = min(row.onnxc_ms.get(t, r["ms"]), r["ms"])
                    row.compile_s = r["compile_s"] if row.compile_s is None else min(row.compile_s, r["compile_s"])
                    row.onnxc_rss_mb = max(row.onnxc_rss_mb or 0.0, r["rss_mb"])
                    if ref.exists():
                        check = _compare(work / f"onnxc{t}.npz", ref)
                        row.check = check if row.check in ("-", "ok") else row.check
            if not iree_failed:
                r = _run_child("iree", t, model_file, feeds_file, work, args, threads_supported)
                if "error" in r:
                    row.iree_errors.append(r["error"])
                    iree_failed = True
                else:
                    row.iree_ms[t] = min(row.iree_ms.get(t, r["ms"]), r["ms"])
                    row.iree_compile_s = r["compile_s"] if row.iree_compile_s is None else min(row.iree_compile_s, r["compile_s"])
                    row.iree_rss_mb = max(row.iree_rss_mb or 0.0, r["rss_mb"])
                    if ref.exists():
                        check = _compare(work / f"iree{t}.npz", ref)
                        row.iree_check = check if row.iree_check in ("-", "ok") else row.iree_check
        if row.errors:
            break
    return row


def _fmt(v: float | None, spec: str) -> str:
    return format(v, spec) if v is not None else "-"


def _geomeans(rows: Sequence[Row], threads: Sequence[int], onnxc_threads: int | None, peer: bool = False) -> dict[int, float | None]:
    """Geometric mean of onnxc / onnxruntime (``peer``: onnxc / IREE) at each thread count over
    the rows that count (every runtime compared matched onnxruntime)."""
    out: dict[int, float | None] = {}
    for t in threads:
        if peer:
            ratios = [r.iree_ratio(t, onnxc_threads) for r in rows if r.iree_counts]
        else:
            ratios = [r.ratio(t, onnxc_threads) for r in rows if r.counts]
        ratios = [x for x in ratios if x is not None]
        out[t] = statistics.geometric_mean(ratios) if ratios else None
    return out


def table_lines(rows: Sequence[Row], threads: Sequence[int], threads_supported: bool, markdown: bool, peers: bool = False) -> list[str]:
    """The table (plain text or markdown), the errors and the closing geomean line; ``peers``
    adds IREE's compile time, latency, onnxc/IREE ratio, memory and check columns."""
    onnxc_threads = None if threads_supported else 1
    head = ["model", "compile s"] + (["IREE compile s"] if peers else [])
    for t in threads:
        head += [f"onnxc {t}t ms" if threads_supported else ("onnxc ms" if t == threads[0] else ""), f"ORT {t}t ms", f"x {t}t"]
        if peers:
            head += [f"IREE {t}t ms", f"onnxc/IREE {t}t"]
    head += ["onnxc MB", "ORT MB"] + (["IREE MB"] if peers else []) + ["check"] + (["IREE check"] if peers else [])
    head = [h for h in head if h]
    body = []
    for r in rows:
        cells = [r.model, _fmt(r.compile_s, ".1f")] + ([_fmt(r.iree_compile_s, ".1f")] if peers else [])
        for t in threads:
            if threads_supported or t == threads[0]:
                cells.append(_fmt(r.onnxc_ms.get(t if threads_supported else threads[0]), ".2f"))
            cells += [_fmt(r.ort_ms.get(t), ".2f"), _fmt(r.ratio(t, onnxc_threads), ".2f")]
            if peers:
                cells += [_fmt(r.iree_ms.get(t), ".2f"), _fmt(r.iree_ratio(t, onnxc_threads), ".2f")]
        cells += [_fmt(r.onnxc_rss_mb, ".0f"), _fmt(r.ort_rss_mb, ".0f")] + ([_fmt(r.iree_rss_mb, ".0f")] if peers else [])
        cells.append(r.check if not r.errors else "FAILED")
        if peers:
            cells.append(r.iree_status)
        body.append(cells)
    lines: list[str] = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join("---" if i == 0 or h.endswith("check") else "---:" for i, h in enumerate(head)) + "|")
        lines += ["| " + " | ".join(c) + " |" for c in body]
    else:
        widths = [max(len(h), *(len(c[i]) for c in body)) if body else len(h) for i, h in enumerate(head)]
        lines.append("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))
        lines.append("-" * len(lines[0]))
        lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))) for cells in body]
    notes = [f"{r.model}: {e}" for r in rows for e in r.errors] + [f"{r.model}: {r.check}" for r in rows if r.check.startswith("MISMATCH")]
    if peers:
        notes += [f"{r.model}: iree: failed ({e.removeprefix('iree: ')})" for r in rows for e in r.iree_errors]
        notes += [f"{r.model}: iree: {r.iree_check}" for r in rows if r.iree_check.startswith("MISMATCH")]
    if notes:
        lines.append("")
        lines += [("- " if markdown else "  ") + n for n in notes]
    g = _geomeans(rows, threads, onnxc_threads)
    counted = sum(1 for r in rows if r.counts)
    parts = [f"{t} thread{'s' if t > 1 else ''} {_fmt(g[t], '.2f')}x" for t in threads]
    excluded = len(rows) - counted
    closing = f"geomean onnxc/onnxruntime over {counted} model(s): " + ", ".join(parts)
    if excluded:
        closing += f" ({excluded} failed or mismatched, left out)"
    if peers:
        gi = _geomeans(rows, threads, onnxc_threads, peer=True)
        counted_i = sum(1 for r in rows if r.iree_counts)
        closing += f"; onnxc/IREE over {counted_i} model(s): " + ", ".join(f"{t} thread{'s' if t > 1 else ''} {_fmt(gi[t], '.2f')}x" for t in threads)
        if len(rows) - counted_i:
            closing += f" ({len(rows) - counted_i} without a matching onnxc and IREE result, left out)"
    lines.append("")
    lines.append(closing)
    return lines


def _machine(target_cpu: str | None = None) -> tuple[str, str]:
    """(CPU model and core count, ISA) of this machine; the ISA is that of the code onnxc
    generates: the host's, or ``target_cpu``'s when the bench asks for another CPU."""
    from onnxc.targets.cpu.isa import CpuFeatures, host_cpu

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    host = f"{model}, {os.cpu_count()} logical CPU(s)"
    if target_cpu:
        return host + f", host ISA {host_cpu().isa}", f"{CpuFeatures.for_target(target_cpu).isa} (onnxc code for --target-cpu {target_cpu})"
    return host, host_cpu().isa


def _iree_header(args: argparse.Namespace) -> str:
    """How IREE was built and run, for the output and the doc's header."""
    flags = " ".join([*IREE_COMPILE_FLAGS, *args.iree_flag])
    return (f"IREE {_iree_version()} (--peers): iree-import-onnx (--opset-version {IREE_OPSET}), compiled in-process with `{flags}`,"
            " run on the local-task device with --task_topology_group_count=N")


def write_doc(lines: Sequence[str], args: argparse.Namespace, threads_supported: bool, header: Sequence[str]) -> None:
    import onnxruntime

    machine, isa = _machine(args.target_cpu)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    text = [
        "<!-- DO NOT EDIT: generated by `python bench/models.py --write-doc`; rerun it to update. -->",
        "",
        "# Performance: onnxc against onnxruntime" + (" and IREE" if args.peers else ""),
        "",
        f"- machine: {machine}; ISA: {isa}",
        f"- onnxc commit {commit or 'unknown (not run from a git checkout)'}, onnxruntime {onnxruntime.__version__}, Python {platform.python_version()}, {datetime.date.today().isoformat()}",
        f"- command: `python bench/models.py {shlex.join(sys.argv[1:])}`",
        *[f"- {h}" for h in header],
        f"- latencies are medians after warm-up, the best of {max(1, args.rounds)} round(s) in which the two runtimes alternate;"
        " `x Nt` = onnxc / onnxruntime latency at N threads (below 1: onnxc faster);",
        f"  `check`: every onnxc output against onnxruntime, relative error <= {RTOL:g} (a mismatch is left out of the geomeans);",
        *([
            "  `onnxc/IREE Nt` = onnxc / IREE latency at N threads, IREE measured in the same alternating rounds; `IREE check`: IREE's"
            " outputs against onnxruntime at the same tolerance (a failed or mismatched IREE row is left out of the IREE geomeans);",
        ] if args.peers else []),
        "  MB: peak resident memory of the process (onnxc: import, compile and run; onnxruntime: session and run"
        + ("; IREE: import, compile and run" if args.peers else "") + ").",
        "",
        *lines,
        "",
    ]
    DOC.write_text("\n".join(text))
    print(f"wrote {DOC}", file=sys.stderr)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    known = ", ".join(FULL + ("resnet_small",))
    ap.add_argument("--models", help=f"comma-separated subset of: {known}")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, transformers at {QUICK_LAYERS} layers")
    ap.add_argument("--layers", type=int, help="layers of the transformer models (default: their real depth)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs at most (default 20)")
    ap.add_argument("--budget", type=float, default=5.0, help="seconds of timed runs per measurement, at least 3 runs (default 5)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="times each runtime is measured, alternating with the other; each keeps its best median (default 2)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per child process (compile and runs; default 600)")
    ap.add_argument("--write-doc", action="store_true", help=f"regenerate {DOC.relative_to(ROOT)}")
    ap.add_argument("--note", action="append", default=[], help="a line for the doc's header (e.g. how quiet the machine was); repeat")
    ap.add_argument("--peers", action="store_true",
                    help=f"also measure IREE's CPU backend (a third runtime, same rounds and thread counts; needs {PEERS_INSTALL})")
    ap.add_argument("--iree-flag", action="append", default=[], metavar="FLAG",
                    help="an extra iree-compile flag for --peers, written --iree-flag=--iree-opt-level=O3; repeat")
    ap.add_argument("--target-cpu", metavar="CPU",
                    help="generate onnxc's code for this CPU (an LLVM CPU name, e.g. znver3 for AVX2 code on an AVX-512 host);"
                         " it must run on this machine. Default: the host")
    ap.add_argument("--child", choices=("ort", "onnxc", "iree"), help=argparse.SUPPRESS)
    ap.add_argument("--model-file", help=argparse.SUPPRESS)
    ap.add_argument("--feeds", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--threads-supported", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        args.threads = int(args.threads)
        return child_main(args)
    import onnxc
    import onnxc.compiler

    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    if not threads or min(threads) < 1:
        print("--threads: give positive counts, e.g. 1,2", file=sys.stderr)
        return 1
    names = list(QUICK if args.quick else FULL)
    if args.models:
        names = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.quick and args.layers is None:
        args.layers = QUICK_LAYERS
    light = light_models.light_models()
    unknown = [n for n in names if not (n in bench_models.BUILDERS or (n.startswith("light:") and n[6:] in light) or _model_file_name(n))]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)} (known: {', '.join(FULL + ('resnet_small',))}, or a path to an .onnx file)", file=sys.stderr)
        return 1
    if args.peers and (missing := peers_missing()):
        print(missing, file=sys.stderr)
        return 1
    threads_supported = bool(onnxc_threads_kwargs(1))
    if args.target_cpu:
        from onnxc.errors import OnnxcError
        from onnxc.targets.cpu.isa import CpuFeatures, host_cpu

        try:
            wanted = CpuFeatures.for_target(args.target_cpu)
        except OnnxcError as e:
            print(f"--target-cpu: {e}", file=sys.stderr)
            return 1
        host = host_cpu()
        if wanted.arch != host.arch or not wanted.features <= host.features:  # its code must run here to be timed
            print(f"--target-cpu {args.target_cpu}: its code ({wanted.isa}) does not run on this machine ({host.isa})", file=sys.stderr)
            return 1
    machine, isa = _machine(args.target_cpu)
    header = [f"onnxc threads: {'as onnxruntime (threads=N)' if threads_supported else '1 thread (threads option not available)'}", *args.note]
    if args.layers is not None:
        header.append(f"transformers shrunk to {args.layers} layer(s) (--layers)")
    if args.peers:
        header.append(_iree_header(args))
    print(f"ISA: {isa}; machine: {machine}; threads: {','.join(map(str, threads))}")
    print(f"onnxc: {'threads=N as onnxruntime' if threads_supported else '1 thread (threads option not available)'}")
    if args.peers:
        print(_iree_header(args))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="onnxc-bench-") as tmp:
        for name in names:
            t0 = time.perf_counter()
            print(f"{name}...", file=sys.stderr, flush=True)
            row = bench_one(name, args, threads, threads_supported, Path(tmp))
            rows.append(row)
            ratios = ", ".join(f"x{t}t {_fmt(row.ratio(t, None if threads_supported else 1), '.2f')}" for t in threads)
            iree = ""
            if args.peers:
                iree = (f", IREE compile {_fmt(row.iree_compile_s, '.1f')} s, {', '.join(f'{t}t {v:.2f} ms' for t, v in row.iree_ms.items()) or '-'}, "
                        f"check {row.iree_status}{' (' + '; '.join(row.iree_errors) + ')' if row.iree_errors else ''}")
            print(
                f"  {name}: ISA {isa}, compile {_fmt(row.compile_s, '.1f')} s, onnxc {', '.join(f'{t}t {v:.2f} ms' for t, v in row.onnxc_ms.items()) or '-'}, "
                f"ORT {', '.join(f'{t}t {v:.2f} ms' for t, v in row.ort_ms.items()) or '-'}, {ratios}, check {row.check}{iree}"
                f"{' ERRORS: ' + '; '.join(row.errors) if row.errors else ''} [{time.perf_counter() - t0:.0f} s]",
                flush=True,
            )
    lines = table_lines(rows, threads, threads_supported, markdown=False, peers=args.peers)
    print()
    print("\n".join(lines))
    if args.write_doc:
        write_doc(table_lines(rows, threads, threads_supported, markdown=True, peers=args.peers), args, threads_supported, header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
