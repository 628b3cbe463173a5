"""Benchmark: what the run-time checks cost (issue 11's status channel), on a CNN and on BERT.

What: each model is lowered to linalg once with its run-time checks (`onnxc.transforms.lowering.
runtime_checks`: index ranges, contradicted shapes, data-fed sizes) and once with them stripped
(`strip_runtime_checks`, what a target without the channel does), both compiled for the CPU in the
same process and called in interleaved rounds (A B, then B A, ...) so that a loaded machine slows
both alike. The outputs of the two builds must be identical. The CPU target's allocation tests
(a NULL test per buffer outside loops) and exit tests after calls are in both builds: they are
counted, not timed apart (a compare and a branch each). onnxruntime runs the same model as the
yardstick of the row.

Prints the host ISA, then per model: ms with and without the checks (median of the rounds, and
the fastest), the difference, onnxruntime's ms, and how many checks and allocation tests the code
has. No assertions on speed: a yardstick, not a test. Timings on a shared machine are noisy.

Run: python bench/runtime_checks.py [--rounds N] [--calls N] [--threads N] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_models  # noqa: E402

from onnxc.compiler import lower  # noqa: E402
from onnxc.targets import get_target  # noqa: E402
from onnxc.targets.cpu.isa import host_cpu  # noqa: E402
from onnxc.targets.cpu.pipeline import CpuPipelineOptions  # noqa: E402
from onnxc.transforms.lowering.runtime_checks import check_table, strip_runtime_checks  # noqa: E402

MODELS: dict[str, Callable[[], bench_models.BenchModel]] = {
    "resnet_small": lambda: bench_models.build("resnet_small"),
    "bert2": lambda: bench_models.bert(layers=2),
}


def _time(fn: Callable[[], object], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e3


def _ort(m: bench_models.BenchModel, threads: int) -> Callable[[], object] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(m.proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, m.feeds)


def measure(name: str, rounds: int, calls: int, threads: int) -> None:
    m = MODELS[name]()
    args: Sequence[np.ndarray] = [m.feeds[i.name] for i in m.proto.graph.input if i.name in m.feeds]
    cpu = get_target("cpu")
    options = CpuPipelineOptions(threads=threads)
    with_checks = lower(m.proto, "linalg")
    n_checks = sum(1 for c in check_table(with_checks.operation) if c is not None)
    without = lower(m.proto, "linalg")
    strip_runtime_checks(without.operation)
    a = cpu.compile(with_checks, options)
    b = cpu.compile(without, options)
    out_a, out_b = a(*args), b(*args)
    assert all(np.array_equal(x, y) for x, y in zip(out_a, out_b)), f"{name}: the builds disagree"
    table = check_table(a.llvm_module.operation)  # type: ignore[attr-defined]
    allocs = sum(1 for c in table if c is not None and "allocate" in str(c.get("what")))
    ta: list[float] = []
    tb: list[float] = []
    for r in range(rounds):
        pair = ((a, ta), (b, tb)) if r % 2 == 0 else ((b, tb), (a, ta))
        for fn, acc in pair:
            acc.append(_time(lambda: fn(*args), calls))
    ma, mb = statistics.median(ta), statistics.median(tb)
    ort = _ort(m, threads)
    ort_ms = statistics.median(_time(ort, calls) for _ in range(max(3, rounds // 3))) if ort else float("nan")
    print(f"{name:14s} with {ma:8.3f} ms  without {mb:8.3f} ms  {100 * (ma / mb - 1):+6.2f}%  "
          f"(fastest {min(ta):.3f} vs {min(tb):.3f})  onnxruntime {ort_ms:8.3f} ms  "
          f"checks {n_checks}, allocation tests at {allocs} nodes")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", default="")
    ns = ap.parse_args(argv)
    print(f"# ISA: {host_cpu().isa}; threads {ns.threads}; {ns.rounds} interleaved rounds of {ns.calls} calls")
    for name in MODELS:
        if ns.only in name:
            measure(name, ns.rounds, ns.calls, ns.threads)


if __name__ == "__main__":
    main()
