"""Benchmark: transcendental kernels (Exp, Tanh, Erf, Log, Sigmoid, Gelu, Softmax...) on 1M floats,
onnxc vs onnxruntime, with and without onnxc's polynomial approximations.

What: for each kernel, a one-node ONNX model over 1,048,576 f32 elements (Softmax and LogSoftmax:
1024 rows of 1024) is compiled by `onnxc.compile` (the CPU pipeline runs `onnxc-approximate-math`
before vectorization: polynomial exp/tanh/erf/log in arith + fma) and run by onnxruntime with one
intra-op thread, in the same process. Each output is checked against onnxruntime (1e-4 relative to
the output's largest magnitude, so a fast wrong answer cannot count); times are the median of
`--repeat` calls after a warm-up (`--stat min`: the fastest, steadier on a loaded machine). With `--libm`, the same model is also compiled with the pass
turned off (one libm call per element, what onnxc did before), to show what the pass is worth.
Prints the host ISA, then per kernel: onnxc ms, onnxruntime ms, the ratio (onnxc / onnxruntime:
below 1 is faster), elements per ns, the libm-build ms and compile seconds; closing line: the
geometric mean of the ratios. The first row, Relu, has no transcendental function: it is the cost
of one onnxc call over 4 MiB in and out (binding, output allocation, copy-out) against
onnxruntime's, the floor under every other row.

No assertions on speed: a yardstick, not a test. Timings on a shared machine are noisy.

Run: python bench/math_kernels.py [--repeat N] [--only SUBSTRING] [--libm] [--stat median|min]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper

import onnxc
from onnxc.targets.cpu.isa import host_cpu

N = 1 << 20


@dataclass(frozen=True)
class Kernel:
    """One benchmark case: a one-node model of `op` over `shape` f32 values in [lo, hi)."""

    name: str
    op: str
    shape: tuple[int, ...] = (N,)
    attrs: dict[str, object] = field(default_factory=dict)
    lo: float = -8.0
    hi: float = 8.0
    opset: int = 21

    def model(self) -> onnx.ModelProto:
        node = helper.make_node(self.op, ["x"], ["y"], **self.attrs)
        graph = helper.make_graph(
            [node], self.name, [helper.make_tensor_value_info("x", TP.FLOAT, list(self.shape))],
            [helper.make_tensor_value_info("y", TP.FLOAT, list(self.shape))],
        )  # fmt: skip
        # IR 10: what onnxruntime 1.2x-1.3x accepts.
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=10)


KERNELS: list[Kernel] = [
    # No transcendental: the floor of one call (argument binding, output allocation, copy-out).
    Kernel("Relu (floor)", "Relu"),
    Kernel("Exp", "Exp", lo=-20.0, hi=20.0),
    Kernel("Log", "Log", lo=1e-3, hi=1e3),
    Kernel("Tanh", "Tanh", lo=-5.0, hi=5.0),
    Kernel("Erf", "Erf", lo=-4.0, hi=4.0),
    Kernel("Sigmoid", "Sigmoid"),
    Kernel("Gelu (erf)", "Gelu", opset=20),
    Kernel("Gelu (tanh)", "Gelu", attrs={"approximate": "tanh"}, opset=20),
    Kernel("Softplus", "Softplus"),
    Kernel("Elu", "Elu"),
    Kernel("Mish", "Mish", opset=22),
    Kernel("Softmax 1024x1024", "Softmax", shape=(1024, 1024)),
    Kernel("LogSoftmax 1024x1024", "LogSoftmax", shape=(1024, 1024)),
]


def _time_ms(fn: Callable[[], object], repeat: int, stat: str) -> float:
    """The median (or the minimum: steadier on a loaded machine) of `repeat` timed calls, in ms."""
    fn()  # warm-up: page faults, caches, lazy initialization
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * (min(times) if stat == "min" else statistics.median(times))


@contextlib.contextmanager
def _without_approximations() -> Iterator[None]:
    """Compile with `onnxc-approximate-math` turned off (the CPU pipeline looks it up by name on
    each run), so math ops become libm calls as before the pass existed."""
    import onnxc.transforms.math_approximation as ma

    saved = ma.approximate_math
    ma.approximate_math = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        ma.approximate_math = saved  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--only", default="", help="run the kernels whose name contains this")
    ap.add_argument("--libm", action="store_true", help="also time onnxc without the approximations")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="statistic of the timed calls (min is steadier when other jobs share the CPU)")
    args = ap.parse_args(argv)
    import onnxruntime as ort

    cpu = host_cpu()
    print(f"# {cpu.describe()}")
    print(f"# ISA: {cpu.isa}; onnxruntime {ort.__version__}, 1 intra-op thread; {N} f32 elements; "
          f"{args.stat} of {args.repeat}; shared machine: noisy")  # fmt: skip
    print(f"{'kernel':22s} {'onnxc ms':>9s} {'ort ms':>9s} {'ratio':>6s} {'elem/ns':>8s} {'libm ms':>9s} {'compile s':>9s}")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    rng = np.random.default_rng(0)
    ratios: list[float] = []
    for k in KERNELS:
        if args.only and args.only not in k.name:
            continue
        model = k.model()
        x = rng.uniform(k.lo, k.hi, k.shape).astype(np.float32)
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        ref = sess.run(None, {"x": x})[0]
        t0 = time.perf_counter()
        compiled = onnxc.compile(model)
        compile_s = time.perf_counter() - t0
        got = compiled(x=x)[0]
        scale = float(np.abs(ref).max()) or 1.0
        err = float(np.abs(got - ref).max()) / scale
        if got.shape != ref.shape or err > 1e-4:
            print(f"{k.name:22s} WRONG: shape {got.shape} vs {ref.shape}, relative error {err:.2e}")
            continue
        onnxc_ms = _time_ms(lambda: compiled(x=x), args.repeat, args.stat)
        ort_ms = _time_ms(lambda: sess.run(None, {"x": x}), args.repeat, args.stat)
        libm = "-"
        if args.libm:
            with _without_approximations():
                plain = onnxc.compile(model)
            libm = f"{_time_ms(lambda: plain(x=x), max(3, args.repeat // 4), args.stat):9.3f}"
        ratio = onnxc_ms / ort_ms
        ratios.append(ratio)
        rate = x.size / (onnxc_ms * 1e6)
        print(f"{k.name:22s} {onnxc_ms:9.3f} {ort_ms:9.3f} {ratio:6.2f} {rate:8.2f} {libm:>9s} {compile_s:9.2f}", flush=True)
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geomean onnxc/onnxruntime over {len(ratios)} kernels: {geo:.2f} (ISA {cpu.isa})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main(sys.argv[1:]))
