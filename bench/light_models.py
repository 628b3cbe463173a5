"""Benchmark: the nine `light` CNNs of the onnx wheel, onnxc against onnxruntime in the same run.

What: for each model in onnx/backend/test/data/light (AlexNet, DenseNet-121, Inception v1/v2,
ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512; real layer sizes, every weight 0.02):
onnxc's compile time (`onnxc.compile`: import, lowering, LLVM JIT), then the median latency of
`--repeat` runs after `--warmup` runs of onnxc and of onnxruntime with one and with two intra-op
threads (`SessionOptions.intra_op_num_threads`, sequential execution), the ratio onnxc / ORT for
each, and the largest absolute difference between the two outputs (a sanity check only: with
constant weights most of these models output a uniform 0.001).

Threading: onnxc's generated code is single-threaded today (no `scf.forall` -> OpenMP/async in
the CPU pipeline), so its one latency is compared with both ORT settings.

Run: python bench/light_models.py [--repeat N] [--warmup W] [--models alexnet,resnet50,...]
No assertions on speed: it records where onnxc stands.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import random_feeds  # noqa: E402  (bench/ is a folder of scripts)


def light_models() -> dict[str, str]:
    """Short name (`resnet50`, `bvlc_alexnet`) -> path of every light model in the onnx wheel."""
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    paths = sorted(glob.glob(os.path.join(folder, "light_*.onnx")))
    return {os.path.basename(p)[len("light_") : -len(".onnx")]: p for p in paths}


def _median_ms(fn: Callable[[], Any], warmup: int, repeat: int) -> float:
    from onnxc.tools.bench import measure  # the one timing rule (`onnxc bench`)

    return measure(fn, repeat, warmup).median


def _ort_session(model: onnx.ModelProto, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def bench_model(name: str, path: str, warmup: int, repeat: int) -> dict[str, Any]:
    """Compile and time one model; returns the row of the report (errors as text)."""
    import onnxc

    model = onnx.load(path)
    feeds = random_feeds(model)
    row: dict[str, Any] = {"model": name}
    try:
        t0 = time.perf_counter()
        compiled = onnxc.compile(model, "cpu")
        row["compile_s"] = time.perf_counter() - t0
        ours = compiled(**feeds)
        row["onnxc_ms"] = _median_ms(lambda: compiled(**feeds), warmup, repeat)
    except Exception as exc:  # noqa: BLE001 - report and go on with the next model
        row["onnxc_error"] = _error_text(exc)
        ours = None
    for threads in (1, 2):
        try:
            sess = _ort_session(model, threads)
            names = [o.name for o in sess.get_outputs()]
            ref = sess.run(names, feeds)
            row[f"ort{threads}_ms"] = _median_ms(lambda s=sess, n=names: s.run(n, feeds), warmup, repeat)
            if ours is not None and threads == 1:
                row["max_abs_diff"] = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0 for a, b in zip(ours, ref))
        except Exception as exc:  # noqa: BLE001
            row[f"ort{threads}_error"] = _error_text(exc)
    return row


def _fmt(v: Any, spec: str) -> str:
    width = int(spec.split(".")[0]) if spec[0].isdigit() else 0
    return format(v, spec) if isinstance(v, (int, float)) else "-".rjust(width)


def _error_text(exc: BaseException) -> str:
    """Type, headline and first listed problem (DiagnosticsError lists every unsupported op)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {' '.join(lines[:2])}"[:240]


def print_report(rows: Sequence[dict[str, Any]], warmup: int, repeat: int) -> None:
    """The table, then the errors."""
    print(f"\nlight models: median of {repeat} runs after {warmup} warm-up runs; onnxc is single-threaded")
    head = f"{'model':<16} {'compile s':>9} {'onnxc ms':>9} {'ORT 1t ms':>9} {'x 1t':>7} {'ORT 2t ms':>9} {'x 2t':>7} {'max|diff|':>10}"
    print(head)
    print("-" * len(head))
    for r in rows:
        ratio1 = r["onnxc_ms"] / r["ort1_ms"] if "onnxc_ms" in r and "ort1_ms" in r else None
        ratio2 = r["onnxc_ms"] / r["ort2_ms"] if "onnxc_ms" in r and "ort2_ms" in r else None
        print(
            f"{r['model']:<16} {_fmt(r.get('compile_s'), '9.2f')} {_fmt(r.get('onnxc_ms'), '9.2f')} {_fmt(r.get('ort1_ms'), '9.2f')} "
            f"{_fmt(ratio1, '7.2f')} {_fmt(r.get('ort2_ms'), '9.2f')} {_fmt(ratio2, '7.2f')} {_fmt(r.get('max_abs_diff'), '10.2e')}"
        )
    for r in rows:
        for key in ("onnxc_error", "ort1_error", "ort2_error"):
            if key in r:
                print(f"  {r['model']}: {key.split('_')[0]} failed: {r[key]}")
    ok = [r for r in rows if "onnxc_ms" in r and "ort1_ms" in r]
    if ok:
        g1 = statistics.geometric_mean(r["onnxc_ms"] / r["ort1_ms"] for r in ok)
        g2 = statistics.geometric_mean(r["onnxc_ms"] / r["ort2_ms"] for r in ok if "ort2_ms" in r)
        print(f"\ngeometric mean onnxc/ORT over {len(ok)} model(s): {g1:.2f}x (ORT 1 thread), {g2:.2f}x (ORT 2 threads)")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry."""
    models = light_models()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per model and runtime (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    ap.add_argument("--models", default=",".join(models), help=f"comma-separated subset of: {', '.join(models)}")
    args = ap.parse_args(argv)
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in models]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)} (known: {', '.join(models)})", file=sys.stderr)
        return 1
    warnings.simplefilter("ignore")
    rows = []
    for name in chosen:
        print(f"{name}...", file=sys.stderr, flush=True)
        rows.append(bench_model(name, models[name], args.warmup, args.repeat))
    print_report(rows, args.warmup, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
