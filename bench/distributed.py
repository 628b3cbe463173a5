"""Benchmark: a large MLP on 2 MPI ranks (tensor parallel) against 1 rank, time and peak memory.

What: an MLP block (x @ W1 + b1 -> Relu -> @ W2, f32, default batch 64, d_model 2048, hidden 8192:
128 MiB of weights) is annotated by `onnxc shard --strategy tensor-parallel` and run

- on one rank: the annotated model in a plain process (no MPI launcher: onnxc runs it on one
  device), and onnxruntime on the same arrays in that process;
- on `--ranks` ranks: `mpirun -n N` of this script's worker, each rank compiling its own shard.

Every process compiles with `threads=1`, so 2 ranks use 2 cores where 1 rank uses one. Printed:
the ISA, compile time, median latency over `--iterations` runs (per rank: the slowest rank's, as
the collective makes them wait for each other), peak resident memory (ru_maxrss) of each process
and its resident memory once compiled (what it keeps to run: each rank holds only its weight
shards then; the peak still includes the whole model, which every rank imports), and the 2-rank result's largest relative difference from the 1-rank result (a fast wrong answer
does not count). Each worker is a fresh process so its peak memory is its own.

On a shared, loaded machine the times are noisy (2 ranks on 2 busy cores especially); the memory
figures are not.

Run: python bench/distributed.py [--batch B] [--d-model D] [--hidden H] [--ranks N] [--iterations I]
"""

from __future__ import annotations

import os
import sys

os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402


def build(folder: Path, batch: int, d_model: int, hidden: int, ranks: int) -> None:
    """The annotated MLP (`mlp.onnx`, weights inline) and its input (`x.npy`) in `folder`."""
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    from onnxc.tools.shard import tensor_parallel

    rng = np.random.default_rng(0)
    inits = [
        nh.from_array((rng.standard_normal((d_model, hidden)) / np.sqrt(d_model)).astype(np.float32), "W1"),
        nh.from_array(rng.standard_normal((hidden,)).astype(np.float32), "B1"),
        nh.from_array((rng.standard_normal((hidden, d_model)) / np.sqrt(hidden)).astype(np.float32), "W2"),
    ]
    nodes = [
        oh.make_node("MatMul", ["X", "W1"], ["H0"], name="fc1"),
        oh.make_node("Add", ["H0", "B1"], ["H1"], name="bias1"),
        oh.make_node("Relu", ["H1"], ["R"], name="relu"),
        oh.make_node("MatMul", ["R", "W2"], ["Y"], name="fc2"),
    ]
    g = oh.make_graph(nodes, "mlp", [oh.make_tensor_value_info("X", TP.FLOAT, [batch, d_model])],
                      [oh.make_tensor_value_info("Y", TP.FLOAT, [batch, d_model])], inits)  # fmt: skip
    model, _ = tensor_parallel(oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)]), ranks)
    onnx.save(model, str(folder / "mlp.onnx"))
    np.save(folder / "x.npy", rng.standard_normal((batch, d_model)).astype(np.float32))


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_mib() -> float:
    """Resident memory now (Linux /proc): after compiling, what the process keeps to run."""
    import gc

    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(folder: Path, iterations: int, with_ort: bool) -> dict[str, object]:
    """Compile and time the model in this process (one rank of mpirun, or alone)."""
    import onnxc

    x = np.load(folder / "x.npy")
    t0 = time.perf_counter()
    model = onnxc.compile(str(folder / "mlp.onnx"), threads=1, cache_dir=False)
    compile_s = time.perf_counter() - t0
    (y,) = model(x)
    rank, size = getattr(model, "rank", 0), getattr(model, "size", 1)
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        model(x)
        times.append(time.perf_counter() - t)
    out: dict[str, object] = {"rank": rank, "size": size, "compile_s": compile_s, "times": times, "peak_mib": _peak_mib(), "rss_mib": _current_mib()}
    if rank == 0:
        np.save(folder / f"y{size}.npy", y)
    if with_ort:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(str(folder / "mlp.onnx"), so, providers=["CPUExecutionProvider"])
        sess.run(None, {"X": x})
        ort_times = []
        for _ in range(iterations):
            t = time.perf_counter()
            sess.run(None, {"X": x})
            ort_times.append(time.perf_counter() - t)
        out["ort_times"] = ort_times
    if size > 1:
        from mpi4py import MPI

        gathered = MPI.COMM_WORLD.gather(out, root=0)
        if rank == 0:
            print(json.dumps(gathered))
    else:
        print(json.dumps([out]))
    return out


def _run(command: list[str], cwd: Path) -> list[dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_"))}
    r = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--worker", metavar="FOLDER", help=argparse.SUPPRESS)
    ap.add_argument("--ort", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(Path(args.worker), args.iterations, args.ort)
        return

    from onnxc.targets.cpu.isa import host_cpu

    if shutil.which("mpirun") is None:
        raise SystemExit("mpirun not found: run tools/install_system_deps.sh (as root) first")
    print(host_cpu().describe())
    weights_mib = (2 * args.d_model * args.hidden + args.hidden) * 4 / 2**20
    print(f"MLP {args.batch}x{args.d_model} -> {args.hidden} -> {args.d_model}, f32 weights {weights_mib:.0f} MiB; threads=1 per process")
    print("figures from a shared machine are noisy; memory (peak RSS) is not\n")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build(folder, args.batch, args.d_model, args.hidden, args.ranks)
        me = [sys.executable, os.path.abspath(__file__), "--worker", str(folder), "--iterations", str(args.iterations)]
        single = _run(me + ["--ort"], folder)
        multi = _run(["mpirun", "-n", str(args.ranks), *me], folder)
        y1, yn = np.load(folder / "y1.npy"), np.load(folder / f"y{args.ranks}.npy")
    rel = float(np.abs(y1 - yn).max() / np.abs(y1).max())
    one = single[0]
    ort_ms = 1e3 * float(np.median(one["ort_times"]))  # type: ignore[arg-type]
    one_ms = 1e3 * float(np.median(one["times"]))  # type: ignore[arg-type]
    # Per iteration, the slowest rank (the all-reduce makes the others wait for it).
    slowest = np.max(np.array([r["times"] for r in multi]), axis=0)
    multi_ms = 1e3 * float(np.median(slowest))
    print(f"{'run':>22} {'compile s':>9} {'median ms':>10} {'peak RSS MiB':>13} {'RSS after MiB':>14}")
    print(f"{'onnxruntime, 1 proc':>22} {'':>9} {ort_ms:>10.2f}")
    print(f"{'onnxc, 1 rank':>22} {one['compile_s']:>9.2f} {one_ms:>10.2f} {one['peak_mib']:>13.0f} {one['rss_mib']:>14.0f}")
    for r in sorted(multi, key=lambda r: r["rank"]):  # type: ignore[no-any-return]
        label = f"onnxc, rank {r['rank']} of {args.ranks}"
        print(f"{label:>22} {r['compile_s']:>9.2f} {multi_ms:>10.2f} {r['peak_mib']:>13.0f} {r['rss_mib']:>14.0f}")
    print(f"\n{args.ranks} ranks vs 1: {one_ms / multi_ms:.2f}x speed-up; "
          f"largest difference {rel:.2e} (relative to the output's largest magnitude)")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
