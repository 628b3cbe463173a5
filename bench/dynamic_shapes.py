"""Benchmark: dynamic shapes stay fast (issue 8, item 8): a model compiled with its batch and
sequence axes dynamic against the same model with those axes pinned, at the same sizes.

What: for each model of ``bench_models`` whose builder writes dynamic axes (the T5 v1.1 encoder
at T5-small width, the Whisper-tiny-sized encoder, EfficientNet-B0, a YOLOv5-style detector at
320x320), at a few sizes: onnxc's median latency on the dynamic model (one compile serves every
size), onnxc's on a copy whose input ``dim_param`` dims are set to the row's sizes (the graph's
own Shape/Gather/Concat computations stay; onnxc folds them), onnxruntime's on the dynamic
model, the ratios dynamic / static and dynamic / onnxruntime, and both compile times. Every
output of both onnxc builds is checked against onnxruntime (floats: ``|onnxc - ort| <= 1e-4 *
(|ort| + max|ort|)``, 1e-4 relative to the element or to the output's scale, as in
``models.py``; integers exactly): a mismatching or failing row is marked and left out of the
closing geometric mean of dynamic / static (issue 8's goal: at most 1.2).

Which axes are dynamic (what the builders write): T5 ``input_ids``/``attention_mask``
[batch, seq]; Whisper ``input_features`` [batch, 80, frames]; EfficientNet ``input`` and YOLO
``images`` [batch, 3, size, size] (only the batch; the image size is fixed by the builder).

How it times: the dynamic and the static build of a row run in interleaved rounds (dynamic then
static, then static then dynamic, ...), each round a burst of calls lasting about ``--round-ms``,
and a build's latency is the median over its rounds of the per-call time: a machine that gets
busier or quieter mid-row slows both builds alike. onnxruntime is timed after them, in the same
rounds scheme, and its session is created only then (an onnxruntime session with spinning
threads slowed onnxc's code in the same process).

With ``--ir``, each model's linalg is also summarized, dynamic build against its first static
twin: how many ``linalg.batch_matmul``s and how many ``linalg.generic``s reading an operand at
run-time indices (``tensor.extract`` in the body: broadcasts the compiler could not prove, and
gathers proper). The dynamic build has the static one's counts when its dims are all proven
(`linalg_counts`); a difference names the place where dynamic shapes cost time.

Run:
  python bench/dynamic_shapes.py                    # real sizes (about ten minutes on 2 cores)
  python bench/dynamic_shapes.py --quick --ir       # and the linalg summary per model
  python bench/dynamic_shapes.py --quick            # the builders' small widths, small sizes (minutes)
  python bench/dynamic_shapes.py --models t5_small,yolo --threads 2 --rounds 15
For stable numbers run it alone on the machine, pinned to one core at a real-time priority:
  sudo chrt -f 50 taskset -c 1 python bench/dynamic_shapes.py
Timings are only meaningful on a quiet machine; no assertion is made on speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_models as B  # noqa: E402  (bench/ is a folder of scripts, not a package)

RTOL = 1e-4
Feeds = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Spec:
    """A benchmark model: its builder at the real and the quick widths, the dim_param names its
    inputs carry (batch, and the length when the length is dynamic), the sizes of its rows and
    how to make inputs of a (batch, length)."""

    build: Callable[[bool], B.BenchModel]  # quick -> model
    batch_dim: str
    length_dim: str | None  # None: only the batch is dynamic
    sizes: tuple[tuple[int, int], ...]  # (batch, length) rows at the real widths
    quick_sizes: tuple[tuple[int, int], ...]
    feeds: Callable[[onnx.ModelProto, int, int, np.random.Generator], Feeds]


def _t5_feeds(model: onnx.ModelProto, batch: int, seq: int, rng: np.random.Generator) -> Feeds:
    """Token ids below the model's vocabulary (its embedding table's rows) and a padding mask
    whose last sentence is right-padded by a quarter, so the mask matters."""
    vocab = next(t.dims[0] for t in model.graph.initializer if t.name.startswith("shared"))
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq - seq // 4 :] = 0
    return {"input_ids": rng.integers(0, vocab, (batch, seq), dtype=np.int64), "attention_mask": mask}


def _whisper_feeds(model: onnx.ModelProto, batch: int, frames: int, rng: np.random.Generator) -> Feeds:
    mels = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    return {"input_features": rng.standard_normal((batch, mels, frames), dtype=np.float32)}


def _image_feeds(model: onnx.ModelProto, batch: int, _length: int, rng: np.random.Generator) -> Feeds:
    """[batch, 3, size, size] in [0, 1): the size is the builder's (only the batch is dynamic)."""
    vi = model.graph.input[0]
    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim[1:]]
    return {vi.name: rng.random((batch, *dims), dtype=np.float32)}


MODELS: dict[str, Spec] = {
    # T5-small's encoder: 6 layers, d_model 512, 8 heads, d_ff 1024 (a 1000-token vocabulary:
    # the embedding Gather's cost does not depend on it).
    "t5_small": Spec(
        lambda quick: B.t5_encoder() if quick else B.t5_encoder(layers=6, d_model=512, heads=8, d_ff=1024, vocab=1000),
        "batch", "seq", ((1, 64), (1, 128), (4, 128)), ((1, 12), (2, 20)), _t5_feeds,
    ),
    # Whisper tiny's encoder: 4 layers, d_model 384, 6 heads, FFN 1536, 1500 positions (30 s of
    # audio is 3000 frames; the rows take shorter clips).
    "whisper": Spec(
        lambda quick: B.whisper_encoder() if quick else B.whisper_encoder(layers=4, d_model=384, heads=6, ffn=1536, max_positions=1500),
        "batch", "frames", ((1, 600), (2, 400)), ((1, 32), (2, 48)), _whisper_feeds,
    ),
    "efficientnet": Spec(
        lambda quick: B.efficientnet(layers=1) if quick else B.efficientnet(size=224, width=1.0),
        "batch", None, ((1, 224), (4, 224)), ((1, 64), (2, 64)), _image_feeds,
    ),
    "yolo": Spec(
        lambda quick: B.yolo() if quick else B.yolo(size=320),
        "batch", None, ((1, 320), (2, 320)), ((1, 64), (2, 64)), _image_feeds,
    ),
}


def _calls_per_round(fn: Callable[[], Any], round_ms: float) -> int:
    """How many calls of ``fn`` fill about ``round_ms`` (one warm-up call, then one timed)."""
    fn()
    t0 = time.perf_counter()
    fn()
    return max(1, round(round_ms / max(1e3 * (time.perf_counter() - t0), 1e-3)))


def interleaved_ms(fns: Sequence[Callable[[], Any]], rounds: int, round_ms: float) -> list[float]:
    """Median per-call latency (ms) of each of ``fns``, timed in ``rounds`` interleaved rounds
    (the order reversed every other round) of a burst of calls each."""
    calls = [_calls_per_round(fn, round_ms) for fn in fns]
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            t0 = time.perf_counter()
            for _ in range(calls[i]):
                fns[i]()
            times[i].append(1e3 * (time.perf_counter() - t0) / calls[i])
    return [statistics.median(t) for t in times]


def compare(ours: Mapping[str, np.ndarray], theirs: Mapping[str, np.ndarray]) -> str:
    """'ok', or 'MISMATCH (output: what)' for the first output of ``theirs`` that ``ours`` gets
    wrong (floats within 1e-4 of the element or of the output's scale; other types exactly)."""
    for name, b in theirs.items():
        a = np.asarray(ours.get(name))
        b = np.asarray(b)
        if a.shape != b.shape:
            return f"MISMATCH ({name}: shape {a.shape} vs {b.shape})"
        if b.dtype.kind != "f":
            if not np.array_equal(a, b):
                return f"MISMATCH ({name}: {int(np.sum(a != b))} element(s) differ)"
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        scale = float(np.max(np.abs(b64))) if b64.size else 0.0
        err = np.abs(a64 - b64)
        if not np.all(err <= RTOL * (np.abs(b64) + scale)):
            return f"MISMATCH ({name}: max |diff| {float(np.max(err)):.3g}, scale {scale:.3g})"
    return "ok"


@dataclasses.dataclass
class Row:
    """One (model, sizes) line of the table."""

    model: str
    sizes: str
    dyn_ms: float = math.nan
    static_ms: float = math.nan
    ort_ms: float = math.nan
    dyn_compile_s: float = math.nan
    static_compile_s: float = math.nan
    check: str = "-"

    @property
    def ratio(self) -> float:
        return self.dyn_ms / self.static_ms

    def line(self) -> str:
        return (
            f"{self.model:13s} {self.sizes:>9s} {self.dyn_ms:9.2f} {self.static_ms:9.2f} {self.ort_ms:9.2f} {self.ratio:10.2f} "
            f"{self.dyn_ms / self.ort_ms:8.2f} {self.dyn_compile_s:8.1f} {self.static_compile_s:8.1f}  {self.check}"
        )


HEADER = f"{'model':13s} {'sizes':>9s} {'dyn ms':>9s} {'static ms':>9s} {'ORT ms':>9s} {'dyn/static':>10s} {'dyn/ORT':>8s} {'dyn cs':>8s} {'stat cs':>8s}  check"


def _ort_session(model: onnx.ModelProto, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _compile(model: onnx.ModelProto, threads: int) -> tuple[Any, float]:
    import onnxc

    t0 = time.perf_counter()
    compiled = onnxc.compile(model, "cpu", threads=threads, cache_dir=False)  # compile time is measured: no cache
    return compiled, time.perf_counter() - t0


def linalg_counts(model: onnx.ModelProto) -> dict[str, int]:
    """The model lowered to linalg: its `linalg.batch_matmul`s and its `linalg.generic`s whose body
    reads an operand with `tensor.extract` (at run-time indices), walked through the bindings."""
    from mlir import ir

    from onnxc.compiler import lower

    counts = {"batch_matmul": 0, "gathers": 0}

    def walk(op: ir.Operation) -> None:
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    child = child.operation
                    if child.name == "linalg.batch_matmul":
                        counts["batch_matmul"] += 1
                    elif child.name == "linalg.generic":
                        if any(o.operation.name == "tensor.extract" for o in child.regions[0].blocks[0].operations):
                            counts["gathers"] += 1
                    walk(child)

    walk(lower(model, "linalg").operation)
    return counts


def _ir_line(name: str, spec: Spec, model: onnx.ModelProto, quick: bool) -> str:
    """One model's linalg summary: the dynamic build against its first static twin."""
    batch, length = (spec.quick_sizes if quick else spec.sizes)[0]
    pins = {spec.batch_dim: batch} | ({spec.length_dim: length} if spec.length_dim else {})
    dyn, static = linalg_counts(model), linalg_counts(B.pinned(model, pins))
    return (f"{name} linalg: batch_matmul {dyn['batch_matmul']} dynamic / {static['batch_matmul']} static; "
            f"run-time-index generics {dyn['gathers']} / {static['gathers']}")  # fmt: skip


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160] if text else ''}"


def bench_model(name: str, spec: Spec, quick: bool, args: argparse.Namespace, rng: np.random.Generator) -> list[Row]:
    """The rows of one model: the dynamic build compiled once, a static twin per size."""
    model = spec.build(quick).proto
    sizes = spec.quick_sizes if quick else spec.sizes
    rows: list[Row] = []
    try:
        dynamic, dyn_s = _compile(model, args.threads)
    except Exception as e:  # noqa: BLE001 - any failure of the compiler is a row of the table, not the end of it
        row = Row(name, "all", check=f"FAILED (dynamic build: {_first_line(e)})")
        print(row.line(), flush=True)
        return [row]
    for batch, length in sizes:
        pins = {spec.batch_dim: batch} | ({spec.length_dim: length} if spec.length_dim else {})
        row = Row(name, f"{batch}x{length}" if spec.length_dim else f"{batch}", dyn_compile_s=dyn_s)
        feeds = spec.feeds(model, batch, length, rng)
        try:
            static, row.static_compile_s = _compile(B.pinned(model, pins), args.threads)
            row.dyn_ms, row.static_ms = interleaved_ms([lambda: dynamic.run(feeds), lambda: static.run(feeds)], args.rounds, args.round_ms)
            outs = (dynamic.run(feeds), static.run(feeds))
        except Exception as e:  # noqa: BLE001 - as above: the row says what failed
            row.check = f"FAILED ({_first_line(e)})"
            print(row.line(), flush=True)
            rows.append(row)
            continue
        sess = _ort_session(model, args.threads)
        names = [o.name for o in sess.get_outputs()]
        (row.ort_ms,) = interleaved_ms([lambda: sess.run(names, feeds)], args.rounds, args.round_ms)
        ref = dict(zip(names, sess.run(names, feeds)))
        del sess
        checks = {f"{kind} {c}" for kind, out in zip(("dynamic", "static"), outs) if (c := compare(out, ref)) != "ok"}
        row.check = "; ".join(sorted(checks)) or "ok"
        print(row.line(), flush=True)
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    import onnxruntime as ort

    from onnxc.targets.cpu.isa import host_cpu

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {', '.join(MODELS)}")
    ap.add_argument("--quick", action="store_true", help="the builders' small widths and small sizes (a few minutes)")
    ap.add_argument("--threads", type=int, default=1, help="onnxc's and onnxruntime's intra-op threads")
    ap.add_argument("--rounds", type=int, default=11, help="interleaved timing rounds per row")
    ap.add_argument("--round-ms", type=float, default=100.0, help="about how long one round's burst of calls lasts")
    ap.add_argument("--ir", action="store_true", help="also summarize each model's linalg, dynamic against static (`linalg_counts`)")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(MODELS)})")
    print(f"ISA: {host_cpu().isa}; threads: {args.threads}; onnxruntime {ort.__version__}; {'quick' if args.quick else 'real'} sizes; "
          f"{args.rounds} interleaved rounds of ~{args.round_ms:.0f} ms; cs = compile seconds")  # fmt: skip
    print(HEADER, flush=True)
    rng = np.random.default_rng(0)
    rows = [row for n in names for row in bench_model(n, MODELS[n], args.quick, args, rng)]
    if args.ir:
        for n in names:
            print(_ir_line(n, MODELS[n], MODELS[n].build(args.quick).proto, args.quick), flush=True)
    counted = [r.ratio for r in rows if r.check == "ok"]
    if counted:
        geo = math.exp(statistics.fmean(math.log(r) for r in counted))
        print(f"geomean onnxc dynamic / static over {len(counted)} row(s): {geo:.2f}x (goal <= 1.2; worst {max(counted):.2f}x)")
    left_out = len(rows) - len(counted)
    if left_out:
        print(f"{left_out} row(s) failed or mismatched and are left out of the geomean")
    return 0 if rows and not left_out else 1


if __name__ == "__main__":
    sys.exit(main())
