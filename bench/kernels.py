"""Benchmark: f32 GEMM kernels through onnxc vs numpy/OpenBLAS and onnxruntime, side by side.

What: for each shape (M x N x K: 1024^3, 2048^3, 1x2048x1000, 128x768x768, 128x768x3072) an
ONNX MatMul model is compiled by ``onnxc.compile`` twice, once with the weight B a constant
initializer (packed at compile time) and once with both operands as inputs, and timed (best
of several calls, result copy-out included) against ``a @ b`` in numpy (single-thread OpenBLAS)
and onnxruntime with one intra-op thread on the same arrays. Prints the ISA (``host_cpu()``),
GFLOP/s of each and the ratios onnxc/numpy and onnxc/onnxruntime (> 1: onnxc faster), then
onnxc with ``threads=2`` and its speed-up over one thread.
Every onnxc result is checked against numpy first (a fast wrong answer does not count).

``--target-cpu znver3`` builds with the AVX2 tile table (the JIT still runs on this host, so
AVX2-table code runs on an AVX-512 machine too); ``--shapes 1024x1024x1024,...`` picks shapes.
On a shared, loaded machine the figures are noisy: compare ratios taken in one run.

Run: python bench/kernels.py [--target-cpu NAME] [--shapes MxNxK,...] [--repeat R]
"""

from __future__ import annotations

import os
import sys

# Single-thread BLAS for a fair 1-thread comparison; must happen before numpy is imported.
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (set on some machines to work around detection) would
# pin a kernel that is not the one this CPU should use: drop them in this process only.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ.pop("OPENBLAS_CORETYPE", None)
os.environ.pop("OPENBLAS_L2_SIZE", None)

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

DEFAULT_SHAPES = ["1024x1024x1024", "2048x2048x2048", "1x1000x2048", "128x768x768", "128x768x3072"]


def matmul_model(m: int, n: int, k: int, weight: np.ndarray | None) -> Any:
    """Y = A(m,k) @ B(k,n); B a constant initializer when ``weight`` is given, else an input."""
    from onnx import TensorProto, helper, numpy_helper

    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])]
    inits = []
    if weight is None:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n]))
    else:
        inits.append(numpy_helper.from_array(weight, "b"))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "gemm", inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # onnxruntime releases refuse the newest IR version
    return model


def best_seconds(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up: page faults, caches
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def ort_session(model: Any) -> Any | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def main(argv: list[str]) -> None:
    import onnxc
    from onnxc.targets.cpu import CpuPipelineOptions
    from onnxc.targets.cpu.isa import CpuFeatures, host_cpu
    from onnxc.targets.cpu.tiles import matmul_tile

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target-cpu", default="host")
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES), help="MxNxK,... (comma separated)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    cpu = CpuFeatures.for_target(args.target_cpu)
    print(f"host: {host_cpu().describe()}")
    print(f"tiles for: {cpu.describe()}")
    print("figures from a shared machine are noisy; compare ratios within one run\n")
    print(f"{'M x N x K':>18} {'B':>6} {'tile':>7} {'compile s':>9} {'onnxc':>8} {'numpy':>8} {'ort':>8} "
          f"{'/numpy':>7} {'/ort':>6} {'onnxc 2T':>9} {'2T/1T':>6}   (GFLOP/s; 2T: threads=2)")
    rng = np.random.default_rng(0)
    options = CpuPipelineOptions(target_cpu=args.target_cpu, threads=1)
    options2 = CpuPipelineOptions(target_cpu=args.target_cpu, threads=2)
    for shape in args.shapes.split(","):
        m, n, k = (int(s) for s in shape.lower().split("x"))
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        flops = 2.0 * m * n * k
        want = a @ b
        t_np = best_seconds(lambda: a @ b, args.repeat)
        tile = matmul_tile(cpu, 32, m, n)
        for const in (True, False):
            model = matmul_model(m, n, k, b if const else None)
            t0 = time.perf_counter()
            compiled = onnxc.compile(model, cpu_options=options)
            compile_s = time.perf_counter() - t0
            call_args = (a,) if const else (a, b)
            (y,) = compiled(*call_args)
            np.testing.assert_allclose(y, want, rtol=2e-3, atol=2e-3 * np.sqrt(k))
            t_ours = best_seconds(lambda: compiled(*call_args), args.repeat)
            sess = ort_session(model)
            t_ort = float("nan")
            if sess is not None:
                feeds = {"a": a} if const else {"a": a, "b": b}
                t_ort = best_seconds(lambda: sess.run(None, feeds), args.repeat)
            compiled2 = onnxc.compile(model, cpu_options=options2)
            (y2,) = compiled2(*call_args)
            np.testing.assert_allclose(y2, want, rtol=2e-3, atol=2e-3 * np.sqrt(k))
            t_two = best_seconds(lambda: compiled2(*call_args), args.repeat)
            g = lambda t: flops / t / 1e9  # noqa: E731
            print(f"{shape:>18} {'const' if const else 'input':>6} {tile.m0:>3}x{tile.n0:<3} {compile_s:9.2f} "
                  f"{g(t_ours):8.1f} {g(t_np):8.1f} {g(t_ort):8.1f} {t_np / t_ours:7.2f} {t_ort / t_ours:6.2f} "
                  f"{g(t_two):9.1f} {t_ours / t_two:6.2f}",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
