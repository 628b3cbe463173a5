"""Benchmark: the convolution and pooling kernels of ResNet-50 and MobileNetV2 (and, with
`--set shufflenet`, ShuffleNet's grouped 1x1 and depthwise ones), onnxc vs onnxruntime.

What: for each shape, a one-node ONNX model (Conv with bias and random weights, a depthwise Conv,
MaxPool, AveragePool, GlobalAveragePool; batch 1, NCHW as ONNX has it) is compiled by `onnxc.compile` (the
channels-last lowering, layout transposes at the model boundary, the ISA-derived tile plan) and
run by onnxruntime with one intra-op thread, in the same process. Each output is checked against
onnxruntime (1e-4 relative to the output's largest magnitude, so a fast wrong answer cannot
count); times are the best of `--repeat` calls after a warm-up (on a shared machine the median
mostly measures the other processes: it moved 2-3x between runs where the best moved 10%). Prints the host ISA, then per
kernel: onnxc ms (NCHW model), onnxc nhwc ms (see below), onnxruntime ms, the ratio (onnxc nhwc /
onnxruntime: below 1 is faster), GFLOP/s of onnxc nhwc, and compile seconds; closing line: the
geometric mean of the ratios.

A one-node model pays its two boundary transposes (NCHW -> NHWC of the input, back for the
output), which a whole CNN pays once (`layout-propagation` cancels the ones between layers). The
`nhwc ms` column times the kernel as it runs inside a network: the same node wrapped in ONNX
Transposes (NHWC in and out), which cancel against the lowering's own, so onnxc runs the
channels-last kernel alone; `ratio` compares that with onnxruntime on the plain NCHW model.

No assertions on speed: a yardstick, not a test. Timings on a shared machine are noisy.

Run: python bench/conv_kernels.py [--repeat N] [--only SUBSTRING] [--set resnet50|shufflenet]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh

import onnxc
from onnxc.targets.cpu.isa import host_cpu


@dataclass(frozen=True)
class Kernel:
    """One benchmark case: an ONNX op on an NCHW input of `shape`."""

    name: str
    op: str
    shape: tuple[int, int, int, int]
    out_channels: int = 0
    kernel: int = 1
    stride: int = 1
    pad: int = 0
    group: int = 1

    def model(self, rng: np.random.Generator) -> onnx.ModelProto:
        n, c, h, w = self.shape
        inits: list[onnx.TensorProto] = []
        attrs: dict[str, object] = {}
        inputs = ["x"]
        if self.op == "Conv":
            wshape = (self.out_channels, c // self.group, self.kernel, self.kernel)
            inits = [
                nh.from_array(rng.uniform(-0.1, 0.1, wshape).astype(np.float32), "w"),
                nh.from_array(rng.uniform(-1, 1, self.out_channels).astype(np.float32), "b"),
            ]
            inputs += ["w", "b"]
            attrs = {"strides": [self.stride] * 2, "pads": [self.pad] * 4, "group": self.group}
        elif self.op in ("MaxPool", "AveragePool"):
            attrs = {"kernel_shape": [self.kernel] * 2, "strides": [self.stride] * 2, "pads": [self.pad] * 4}
        node = helper.make_node(self.op, inputs, ["y"], **attrs)
        graph = helper.make_graph(
            [node], self.name, [helper.make_tensor_value_info("x", TP.FLOAT, list(self.shape))],
            [helper.make_tensor_value_info("y", TP.FLOAT, None)], initializer=inits,
        )
        # IR 10 / opset 21: what onnxruntime 1.2x-1.3x accepts.
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)

    def nhwc_model(self, rng: np.random.Generator) -> onnx.ModelProto:
        """The model with NHWC input and output (Transpose nodes around the op)."""
        m = self.model(rng)
        g = m.graph
        n, c, h, w = self.shape
        g.input[0].CopyFrom(helper.make_tensor_value_info("x_nhwc", TP.FLOAT, [n, h, w, c]))
        g.output[0].CopyFrom(helper.make_tensor_value_info("y_nhwc", TP.FLOAT, None))
        g.node.insert(0, helper.make_node("Transpose", ["x_nhwc"], ["x"], perm=[0, 3, 1, 2]))
        g.node.append(helper.make_node("Transpose", ["y"], ["y_nhwc"], perm=[0, 2, 3, 1]))
        return m

    def flops(self, out: np.ndarray) -> float:
        if self.op == "Conv":
            return 2.0 * out.size * (self.shape[1] // self.group) * self.kernel**2
        if self.op in ("MaxPool", "AveragePool"):
            return float(out.size * self.kernel**2)
        return float(np.prod(self.shape))


def _resnet50() -> list[Kernel]:
    conv = lambda name, c, hw, f, k, s=1: Kernel(name, "Conv", (1, c, hw, hw), f, k, s, k // 2)  # noqa: E731
    return [
        conv("stem 7x7/2 3->64 @224", 3, 224, 64, 7, 2),
        conv("1x1 64->64 @56", 64, 56, 64, 1),
        conv("3x3 64->64 @56", 64, 56, 64, 3),
        conv("1x1 64->256 @56", 64, 56, 256, 1),
        conv("1x1 256->64 @56", 256, 56, 64, 1),
        conv("3x3/2 128->128 @56", 128, 56, 128, 3, 2),
        conv("3x3 128->128 @28", 128, 28, 128, 3),
        conv("1x1 512->128 @28", 512, 28, 128, 1),
        conv("3x3 256->256 @14", 256, 14, 256, 3),
        conv("1x1 1024->256 @14", 1024, 14, 256, 1),
        conv("3x3 512->512 @7", 512, 7, 512, 3),
        conv("1x1 2048->512 @7", 2048, 7, 512, 1),
        Kernel("depthwise 3x3 144 @56", "Conv", (1, 144, 56, 56), 144, 3, 1, 1, group=144),
        Kernel("depthwise 3x3/2 576 @14", "Conv", (1, 576, 14, 14), 576, 3, 2, 1, group=576),
        Kernel("maxpool 3x3/2 64 @112", "MaxPool", (1, 64, 112, 112), 0, 3, 2, 1),
        Kernel("global avgpool 2048 @7", "GlobalAveragePool", (1, 2048, 7, 7)),
    ]


def _shufflenet() -> list[Kernel]:
    """ShuffleNet's (the onnx wheel's `light` model) grouped 1x1 convolutions (4 groups of 28 to
    136 channels: not multiples of a vector) and depthwise 3x3 ones, at the sizes it runs them."""
    g4 = lambda c, f, hw: Kernel(f"group4 1x1 {c}->{f} @{hw}", "Conv", (1, c, hw, hw), f, 1, 1, 0, group=4)  # noqa: E731
    dw = lambda c, hw, s=1: Kernel(f"depthwise 3x3{'/2' if s > 1 else ''} {c} @{hw}", "Conv", (1, c, hw, hw), c, 3, s, 1, group=c)  # noqa: E731
    return [Kernel("conv 3x3/2 3->24 @224", "Conv", (1, 3, 224, 224), 24, 3, 2, 1),
            Kernel("maxpool 3x3/2 24 @112", "MaxPool", (1, 24, 112, 112), 0, 3, 2, 1),
            Kernel("avgpool 3x3/2 24 @56", "AveragePool", (1, 24, 56, 56), 0, 3, 2, 1),
            g4(24, 112, 56), g4(136, 136, 28), g4(272, 272, 14), g4(544, 544, 7),
            dw(112, 56, 2), dw(136, 28), dw(272, 14), dw(544, 7)]


SETS: dict[str, Callable[[], list[Kernel]]] = {"resnet50": _resnet50, "shufflenet": _shufflenet}


def _best_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: page faults, caches, lazy initialization
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=25)
    ap.add_argument("--only", default="", help="run the kernels whose name contains this")
    ap.add_argument("--set", default="resnet50", choices=sorted(SETS), help="which model's kernels (default resnet50: with MobileNetV2's)")
    args = ap.parse_args(argv)
    import onnxruntime as ort

    cpu = host_cpu()
    print(f"# {cpu.describe()}")
    print(f"# ISA: {cpu.isa}; onnxruntime {ort.__version__}, 1 intra-op thread; best of {args.repeat}; shared machine: noisy")
    print(f"{'kernel':28s} {'onnxc ms':>9s} {'nhwc ms':>9s} {'ort ms':>9s} {'ratio':>6s} {'GFLOP/s':>8s} {'compile s':>9s}")
    rng = np.random.default_rng(0)
    ratios: list[float] = []
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    for k in SETS[args.set]():
        if args.only and args.only not in k.name:
            continue
        model = k.model(np.random.default_rng(1))
        x = rng.standard_normal(k.shape).astype(np.float32)
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        ref = sess.run(None, {"x": x})[0]
        t0 = time.perf_counter()
        compiled = onnxc.compile(model, threads=1)  # onnxruntime runs one intra-op thread too
        compile_s = time.perf_counter() - t0
        got = compiled(x=x)[0]
        scale = float(np.abs(ref).max()) or 1.0
        err = float(np.abs(got - ref).max()) / scale
        if got.shape != ref.shape or err > 1e-4:
            print(f"{k.name:28s} WRONG: shape {got.shape} vs {ref.shape}, relative error {err:.2e}")
            continue
        onnxc_ms = _best_ms(lambda: compiled(x=x), args.repeat)
        ort_ms = _best_ms(lambda: sess.run(None, {"x": x}), args.repeat)
        # The same weights (same seed), NHWC in and out: the kernel without boundary transposes.
        nhwc = onnxc.compile(k.nhwc_model(np.random.default_rng(1)), threads=1)
        x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        got_nhwc = nhwc(x_nhwc=x_nhwc)[0]
        if float(np.abs(got_nhwc.transpose(0, 3, 1, 2) - ref).max()) / scale > 1e-4:
            print(f"{k.name:28s} WRONG (NHWC variant)")
            continue
        nhwc_ms = _best_ms(lambda: nhwc(x_nhwc=x_nhwc), args.repeat)
        ratio = nhwc_ms / ort_ms
        ratios.append(ratio)
        gflops = k.flops(got) / (nhwc_ms * 1e6)
        print(f"{k.name:28s} {onnxc_ms:9.3f} {nhwc_ms:9.3f} {ort_ms:9.3f} {ratio:6.2f} {gflops:8.1f} {compile_s:9.2f}", flush=True)
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geomean onnxc/onnxruntime over {len(ratios)} kernels: {geo:.2f} (ISA {cpu.isa})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main(sys.argv[1:]))
