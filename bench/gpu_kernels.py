"""Benchmark: the GPU targets' kernels for GEMM and the ResNet-50 convolutions.

What, per shape (a one-node ONNX model with random weights; MatMul, or Conv with bias, NCHW,
batch 1, "same" padding):
- CUDA, any machine: the model lowered to PTX for sm_80 and sm_90 and assembled by ptxas; per
  kernel the registers, shared memory and spill bytes from `ptxas -v`, the launch's block and
  grid sizes, and the occupancy they allow (estimated from the per-SM limits of the chip:
  64 warps, 65536 registers allocated per warp in units of 256, 32 blocks, 164 KiB (sm_80) or
  228 KiB (sm_90) of shared memory). GEMMs are reported twice: the default f32 (SIMT) kernel,
  whose A and B slices are promoted to shared memory, and the tensor-core kernel that
  `allow_tf32=True` gives (mma.sync m16n8k4 tf32) where the shape is whole tiles.
- CUDA, where an NVIDIA GPU exists: the model compiled for the device's chip with
  `onnxc.compile(..., target="cuda")` and run; each kernel timed with CUDA events
  (`CudaProgram.step_times`, median of `--repeat` runs), the case's FLOP/s from the sum of its
  kernels' times, and beside it the vendor library on the same shape when PyTorch is installed
  (cuBLAS for GEMM in f32, tf32 and f16; cuDNN for the convolutions in f32), timed the same way
  (CUDA events around the call), with the ratio onnxc / vendor. Every CUDA output is checked
  against the CPU target's (1e-3 of the largest magnitude; tf32 5e-2).
- Vulkan, where a Vulkan device exists (Mesa's lavapipe here, a CPU driver): the median time of
  `--repeat` calls of `onnxc.compile(model, target="vulkan")` and of the CPU target on the same
  model in the same process, and their ratio (vulkan / cpu). On lavapipe this only shows that the
  kernels are not pathological (one thread per row, uncoalesced everything); it says nothing of
  a real GPU. Every Vulkan output is checked against the CPU target's (1e-3 of the largest
  magnitude), so a fast wrong answer cannot count.

No assertions on speed: a yardstick, not a test. Timings on a shared machine are noisy.

Run: python bench/gpu_kernels.py [--repeat N] [--only SUBSTRING] [--no-vulkan] [--no-ptxas]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh


@dataclass(frozen=True)
class Case:
    """One benchmark shape: a MatMul (m, k, n) or a Conv (cin, cout, hw, kernel, stride)."""

    name: str
    kind: str
    dims: tuple[int, ...]

    def flops(self) -> float:
        if self.kind in MATMULS:
            m, k, n = self.dims
            return 2.0 * m * k * n
        cin, cout, hw, ksz, stride = self.dims
        out = -(-hw // stride)
        return 2.0 * cout * out * out * cin * ksz * ksz


#: The MatMul kinds: "gemm" is [m, k] x [k, n]; "proj" is a transformer projection,
#: [1, m, k] x [k, n] (tokens of one sequence times a weight), the MatMul transformers run most.
MATMULS = ("gemm", "proj")

CASES = [
    Case("gemm 256x256x256", "gemm", (256, 256, 256)),
    Case("gemm 512x512x512", "gemm", (512, 512, 512)),
    Case("gemm 128x768x768", "gemm", (128, 768, 768)),
    # Large enough to fill a data-centre GPU (CUDA only: lavapipe would take minutes).
    Case("gemm 2048x2048x2048", "gemm", (2048, 2048, 2048)),
    Case("gemm 4096x4096x4096", "gemm", (4096, 4096, 4096)),
    # BERT-base (sequence 128): the attention projections and the FFN's first layer.
    Case("proj 1x128x768 @ 768x768", "proj", (128, 768, 768)),
    Case("proj 1x128x768 @ 768x3072", "proj", (128, 768, 3072)),
    # GPT-2's LM head: 50257 columns divide no tile, so every workgroup's tile sizes are
    # dynamic in the IR (the full-tile twin, `mapping._full_tile_versions`).
    Case("proj 1x64x768 @ 768x50257", "proj", (64, 768, 50257)),
    # ResNet-50 (batch 1): conv2_x 3x3 and 1x1, conv3_x..conv5_x 3x3.
    Case("conv 64->64 3x3 56x56", "conv", (64, 64, 56, 3, 1)),
    Case("conv 256->64 1x1 56x56", "conv", (256, 64, 56, 1, 1)),
    Case("conv 128->128 3x3 28x28", "conv", (128, 128, 28, 3, 1)),
    Case("conv 256->256 3x3 14x14", "conv", (256, 256, 14, 3, 1)),
    Case("conv 512->512 3x3 7x7", "conv", (512, 512, 7, 3, 1)),
]


def build(case: Case) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    if case.kind in MATMULS:
        m, k, n = case.dims
        lead = [1] if case.kind == "proj" else []
        w = nh.from_array((rng.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32), "W")
        node = helper.make_node("MatMul", ["x", "W"], ["y"])
        ins, outs, inits = [helper.make_tensor_value_info("x", TP.FLOAT, lead + [m, k])], [helper.make_tensor_value_info("y", TP.FLOAT, lead + [m, n])], [w]
        feeds = {"x": rng.standard_normal(lead + [m, k]).astype(np.float32)}
    else:
        cin, cout, hw, ksz, stride = case.dims
        out = -(-hw // stride)
        w = nh.from_array((rng.standard_normal((cout, cin, ksz, ksz)) / math.sqrt(cin * ksz * ksz)).astype(np.float32), "W")
        b = nh.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), "B")
        pad = ksz // 2
        node = helper.make_node("Conv", ["x", "W", "B"], ["y"], kernel_shape=[ksz, ksz], pads=[pad] * 4, strides=[stride, stride])
        ins, outs, inits = [helper.make_tensor_value_info("x", TP.FLOAT, [1, cin, hw, hw])], [helper.make_tensor_value_info("y", TP.FLOAT, [1, cout, out, out])], [w, b]
        feeds = {"x": rng.standard_normal((1, cin, hw, hw)).astype(np.float32)}
    graph = helper.make_graph([node], case.name.replace(" ", "_"), ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), feeds


#: Cases above this many FLOPs are not run on Vulkan (lavapipe, a CPU driver, would take minutes).
VULKAN_MAX_FLOPS = 5e9

#: Per-SM limits used for the occupancy estimate: (max warps, registers, max blocks, shared bytes).
SM_LIMITS = {"sm_80": (64, 65536, 32, 164 * 1024), "sm_90": (64, 65536, 32, 228 * 1024)}


def occupancy(chip: str, threads: int, registers: int, shared: int) -> float:
    """Resident warps / max warps per SM for one kernel (registers allocated per warp in 256s)."""
    max_warps, regs, max_blocks, smem = SM_LIMITS[chip]
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // 256) * 256 or 256
    blocks = min(max_blocks, max_warps // warps, regs // (per_warp * warps), smem // shared if shared else max_blocks)
    return blocks * warps / max_warps


def median_ms(fn, args: dict[str, np.ndarray], repeat: int) -> float:
    fn(**args)  # warm-up (first submission, page faults)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(**args)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def cuda_report(case: Case, model: onnx.ModelProto) -> None:
    from onnxc.compiler import lower
    from onnxc.targets.cuda import CudaOptions, compile_ptx

    linalg = lower(model, "linalg")
    variants = [("f32", False)] + ([("tf32", True)] if case.kind in MATMULS else [])
    for chip in ("sm_80", "sm_90"):
        for label, tf32 in variants:
            artifact = compile_ptx(linalg, CudaOptions(chip, "+ptx80", allow_tf32=tf32))
            reports = artifact.assemble()
            for step in artifact.program.steps:
                k = reports[step.module].kernels[0]
                threads = step.block[0] * step.block[1] * step.block[2]
                mma = " mma.sync" if "mma.sync" in artifact.ptx[step.module] else ""
                print(
                    f"  cuda {chip} {label:4} {step.module:<14} block {step.block} grid {step.grid} regs {k.registers:3d} "
                    f"smem {k.shared_bytes:6d} B spill {k.spill_stores + k.spill_loads:4d} B "
                    f"occupancy ~{occupancy(chip, threads, k.registers, k.shared_bytes):.2f}{mma}"
                )


def vendor_ms(case: Case, feeds: dict[str, np.ndarray], model: onnx.ModelProto, repeat: int, kind: str) -> float | None:
    """Median milliseconds of PyTorch's vendor kernel (cuBLAS / cuDNN) on the same shape, timed
    with CUDA events; None when PyTorch (with CUDA) is not installed."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    dtype = torch.float16 if kind == "f16" else torch.float32
    torch.backends.cuda.matmul.allow_tf32 = kind == "tf32"
    torch.backends.cudnn.allow_tf32 = kind == "tf32"
    x = torch.from_numpy(feeds["x"]).cuda().to(dtype)
    inits = {t.name: torch.from_numpy(nh.to_array(t).copy()).cuda().to(dtype) for t in model.graph.initializer}
    if case.kind in MATMULS:
        def call() -> object:
            return x @ inits["W"]
    else:
        pad = case.dims[3] // 2
        def call() -> object:
            return torch.nn.functional.conv2d(x, inits["W"], inits["B"], stride=case.dims[4], padding=pad)
    for _ in range(3):
        call()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def cuda_run(case: Case, model: onnx.ModelProto, feeds: dict[str, np.ndarray], repeat: int) -> None:
    """Compile for the GPU's chip, check against the CPU target, time each kernel (see the doc)."""
    import onnxc
    from onnxc.compiler import lower
    from onnxc.targets.cuda import CudaOptions, compile_module, cuda_context

    ctx = cuda_context()
    chip = ctx.chip if ctx.chip in ("sm_80", "sm_86", "sm_89", "sm_90") else "sm_80"
    if case.kind in MATMULS:  # numpy's BLAS in f64: the CPU target would add minutes at 4096^3
        w = nh.to_array(model.graph.initializer[0])
        want = (feeds["x"].astype(np.float64) @ w.astype(np.float64)).astype(np.float32)
    else:
        want = onnxc.compile(model, target="cpu")(**feeds)[0]
    linalg = lower(model, "linalg")
    for label, tf32 in [("f32", False)] + ([("tf32", True)] if case.kind in MATMULS else []):
        t = time.perf_counter()
        fn = compile_module(linalg, CudaOptions(chip, "+ptx80", allow_tf32=tf32))
        compile_s = time.perf_counter() - t
        got = fn(feeds["x"])[0]
        err = float(np.abs(got - want).max() / max(1e-30, float(np.abs(want).max())))
        if err > (5e-2 if tf32 else 1e-3):
            print(f"  cuda {chip} {label:4} WRONG: max relative difference {err:.2e} from the CPU target")
            continue
        steps = fn.program.step_times(feeds["x"], repeat=repeat)
        ms = sum(steps)
        mma = " mma.sync" if any("mma.sync" in p for p in fn.ptx.values()) else ""
        vendor = vendor_ms(case, feeds, model, repeat, label)
        versus = f"  vendor {vendor:8.4f} ms ({case.flops() / vendor / 1e9:8.1f} TFLOP/s)  onnxc/vendor {ms / vendor:6.2f}" if vendor else ""
        print(
            f"  cuda {chip} {label:4} {ms:8.4f} ms ({case.flops() / ms / 1e9:8.2f} TFLOP/s) in {len(steps)} step(s)"
            f"{mma}{versus}  compile {compile_s:.1f} s  max rel diff {err:.1e}"
        )
    vendor16 = vendor_ms(case, feeds, model, repeat, "f16") if case.kind in MATMULS else None
    if vendor16:
        print(f"  vendor f16 (cuBLAS, for scale) {vendor16:8.4f} ms ({case.flops() / vendor16 / 1e9:8.1f} TFLOP/s)")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--no-vulkan", action="store_true", help="no Vulkan timings")
    ap.add_argument("--no-ptxas", action="store_true", help="no ptxas resource reports")
    args = ap.parse_args(argv)

    import onnxc
    from onnxc.targets.cuda import CudaLoweringError, cuda_context

    try:
        ctx = cuda_context()
        print(f"cuda device: {ctx.device_name} ({ctx.chip}, {ctx.multiprocessors} SMs, driver {ctx.driver_version})")
    except CudaLoweringError as e:
        ctx = None
        print(f"no CUDA timings: {e}")

    vulkan_reason = None
    if not args.no_vulkan:
        try:
            from onnxc.targets.vulkan import vulkan_context

            print(f"vulkan device: {vulkan_context().device_name}")
        except onnxc.errors.OnnxcError as e:
            vulkan_reason = str(e)
            print(f"no Vulkan timings: {e}")
    ratios = []
    for case in CASES:
        if args.only not in case.name:
            continue
        model, feeds = build(case)
        print(f"{case.name}  ({case.flops() / 1e9:.2f} GFLOP)")
        if not args.no_ptxas:
            cuda_report(case, model)
        if ctx is not None:
            cuda_run(case, model, feeds, args.repeat)
        if args.no_vulkan or vulkan_reason or case.flops() > VULKAN_MAX_FLOPS:
            continue
        t = time.perf_counter()
        gpu = onnxc.compile(model, target="vulkan")
        compile_s = time.perf_counter() - t
        cpu = onnxc.compile(model, target="cpu")
        want, got = cpu(**feeds)[0], gpu(**feeds)[0]
        err = float(np.abs(got - want).max() / max(1e-30, float(np.abs(want).max())))
        if err > 1e-3:
            print(f"  vulkan WRONG: max relative difference {err:.2e} from the CPU target")
            continue
        tv, tc = median_ms(gpu, feeds, args.repeat), median_ms(cpu, feeds, args.repeat)
        ratios.append(tv / tc)
        print(
            f"  vulkan {tv:9.2f} ms ({case.flops() / tv / 1e6:6.2f} GFLOP/s)  cpu {tc:8.2f} ms  "
            f"vulkan/cpu {tv / tc:6.2f}  compile {compile_s:.1f} s  max rel diff {err:.1e}"
        )
    if ratios:
        print(f"geometric mean vulkan/cpu: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
