"""Benchmark: a 512x512x512 f32 matmul through the onnxc CPU pipeline vs numpy (BLAS).

What: JIT-compiles `linalg.fill` + `linalg.matmul` on static 512^3 tensors with the default
pipeline (tile + vectorize, see onnxc.targets.cpu.pipeline), checks it against numpy, times both
(best of several runs, single call each) and prints GFLOP/s and the ratio. No assertions on
speed: it is a yardstick for pipeline work (packing, register tiling), not a test.

Run: python bench/cpu_matmul.py [N] [--loops]   (--loops: the scalar-loops debug pipeline)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np
from mlir import ir

from onnxc.targets.cpu import CpuPipelineOptions, compile_module


def matmul_module(n: int, ctx: ir.Context) -> ir.Module:
    t = f"tensor<{n}x{n}xf32>"
    return ir.Module.parse(
        f"""
        func.func @mm(%a: {t}, %b: {t}) -> {t} {{
          %z = arith.constant 0.0 : f32
          %e = tensor.empty() : {t}
          %f = linalg.fill ins(%z : f32) outs(%e : {t}) -> {t}
          %r = linalg.matmul ins(%a, %b : {t}, {t}) outs(%f : {t}) -> {t}
          return %r : {t}
        }}""",
        context=ctx,
    )


def best_time(fn: Callable[[], object], repeat: int = 10) -> float:
    fn()  # warm up (page faults, caches)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str]) -> None:
    n = int(next((a for a in argv if a.isdigit()), "512"))
    loops = "--loops" in argv
    ctx = ir.Context()
    t0 = time.perf_counter()
    f = compile_module(matmul_module(n, ctx), options=CpuPipelineOptions(vectorize=not loops))
    compile_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    (r,) = f(a, b)
    np.testing.assert_allclose(r, a @ b, rtol=1e-3, atol=1e-3)
    flops = 2.0 * n**3
    t_onnxc = best_time(lambda: f(a, b))
    t_numpy = best_time(lambda: a @ b)
    g_onnxc, g_numpy = flops / t_onnxc / 1e9, flops / t_numpy / 1e9
    mode = "loops" if loops else "vector"
    print(f"matmul {n}^3 f32 ({mode} pipeline), compile {compile_s:.2f} s")
    print(f"  onnxc: {t_onnxc * 1e3:8.2f} ms  {g_onnxc:7.1f} GFLOP/s (includes result copy-out)")
    print(f"  numpy: {t_numpy * 1e3:8.2f} ms  {g_numpy:7.1f} GFLOP/s")
    print(f"  ratio onnxc/numpy: {g_onnxc / g_numpy:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
