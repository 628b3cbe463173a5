"""Benchmark: whole models on the GPU targets (compile time, a run on Vulkan, PTX for CUDA).

What, per model of `bench/models.py` (full size unless `--layers` cuts the repeated blocks):
- Vulkan, where a Vulkan device exists (Mesa's lavapipe here, a CPU driver): the time of
  `onnxc.compile(model, target="vulkan")`, of the first call (which includes the driver's
  compilation of the SPIR-V) and of the median of `--repeat` later calls, and the largest
  difference from the CPU target's outputs relative to the largest output. On lavapipe the run
  times say nothing about a GPU; they show that no kernel is pathological (one workgroup per
  output element was 2-3x slower end to end on BERT-base), and the comparison that the
  mapping computes the right thing at full size.
- With `--kernels N`, on Vulkan: the N slowest steps of the model's program, timed by the
  device's timestamps (`VulkanProgram.step_times`, median of `--repeat` runs), with the ONNX
  node each kernel computes and its grid and workgroup sizes: where a pathological kernel
  shows (BERT-base's second FFN MatMul took 2 s a layer on lavapipe as a reduction).
- CUDA, any machine: the time of `lower(model, "ptx", target="cuda")` (mapping, NVVM and PTX
  for sm_80), and where an NVIDIA GPU exists the same run and comparison as for Vulkan.

The models are the same builders as the CPU benchmark's (`bench_models.build`), with their
seeded inputs. No assertions on speed: a yardstick, not a test. A model that fails prints its
error (a refusal names the ONNX node) and the run goes on; the exit status is 1 if any did.

Run: python bench/gpu_models.py [--models bert,vit] [--layers N] [--repeat N] [--kernels N] [--no-vulkan] [--no-cuda]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_models  # noqa: E402  (bench/ is a folder of scripts, not a package)

MODELS = ("resnet50", "mobilenet_v2", "bert", "gpt2", "gpt2_decode", "vit", "llama")


def _max_rel(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> float:
    """The largest |got - want| over each output's largest |want|, over all outputs."""
    worst = 0.0
    for name, w in want.items():
        g = got[name].astype(np.float64)
        scale = float(np.max(np.abs(w))) or 1.0
        worst = max(worst, float(np.max(np.abs(g - w))) / scale)
    return worst


def _run(compiled: Any, feeds: dict[str, np.ndarray], repeat: int) -> tuple[dict[str, np.ndarray], float, float]:
    """(outputs, first call ms, median ms of `repeat` later calls)."""
    t = time.perf_counter()
    out = compiled.run(feeds)
    first = (time.perf_counter() - t) * 1e3
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        compiled.run(feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return out, first, statistics.median(times) if times else float("nan")


def _slowest_kernels(compiled: Any, model: Any, count: int, repeat: int) -> None:
    """Print the `count` slowest steps of `compiled` (a model compiled for Vulkan) by device
    timestamps, and their sum."""
    from onnxc.targets.gpu.host import Launch

    fn = compiled.function  # a VulkanFunction, or the run-time checks' wrapper forwarding to it
    if not hasattr(fn, "program"):
        print("  vulkan steps: not timed (the entry is specialized per call: dynamic dims)")
        return
    inits = {t.name for t in model.proto.graph.initializer}
    arrays = [model.feeds[v.name] for v in model.proto.graph.input if v.name not in inits]
    times = fn.program.step_times(*fn.signature.validate(arrays), repeat=max(1, repeat))
    steps = fn.program.program.steps
    print(f"  vulkan steps: {len(steps)}, {sum(times):.1f} ms in all by timestamps; the slowest:")
    for t, step in sorted(zip(times, steps), key=lambda r: -r[0])[:count]:
        if isinstance(step, Launch):
            print(f"    {t:9.2f} ms  {step.node or step.module}  grid {step.grid} workgroup {step.block}")
        else:
            print(f"    {t:9.2f} ms  buffer copy")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated bench_models names")
    ap.add_argument("--layers", type=int, default=None, help="repeated blocks per model (default: full size)")
    ap.add_argument("--repeat", type=int, default=2, help="timed calls after the first")
    ap.add_argument("--kernels", type=int, default=0, help="print the N slowest Vulkan steps (device timestamps)")
    ap.add_argument("--no-vulkan", action="store_true", help="no Vulkan compile and run")
    ap.add_argument("--no-cuda", action="store_true", help="no PTX lowering (and no CUDA run)")
    args = ap.parse_args(argv)

    import onnxc
    from onnxc.compiler import lower
    from onnxc.targets.cuda import cuda_device_count

    vulkan = not args.no_vulkan
    if vulkan:
        try:
            from onnxc.targets.vulkan import vulkan_context

            print(f"vulkan device: {vulkan_context().device_name}")
        except onnxc.errors.OnnxcError as e:
            vulkan = False
            print(f"no Vulkan runs: {e}")
    cuda_runs = not args.no_cuda and cuda_device_count() > 0
    if not args.no_cuda and not cuda_runs:
        print("no CUDA runs: no NVIDIA GPU on this machine (PTX lowering timed only)")
    failed = False
    for name in args.models.split(","):
        m = bench_models.build(name, layers=args.layers)
        print(f"{name}:", flush=True)
        want = onnxc.compile(m.proto, target="cpu").run(m.feeds)
        targets = (["vulkan"] if vulkan else []) + (["cuda"] if cuda_runs else [])
        for target in targets:
            try:
                t = time.perf_counter()
                compiled = onnxc.compile(m.proto, target=target)
                compile_s = time.perf_counter() - t
                got, first, median = _run(compiled, m.feeds, args.repeat)
                print(f"  {target}: compile {compile_s:.1f} s, first call {first:.0f} ms, then {median:.0f} ms, max rel diff {_max_rel(got, want):.1e}", flush=True)
                if target == "vulkan" and args.kernels:
                    _slowest_kernels(compiled, m, args.kernels, args.repeat)
            except onnxc.errors.OnnxcError as e:
                failed = True
                print(f"  {target}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
        if not args.no_cuda and not cuda_runs:
            try:
                t = time.perf_counter()
                lower(m.proto, "ptx", target="cuda")
                print(f"  cuda: PTX for sm_80 in {time.perf_counter() - t:.1f} s", flush=True)
            except onnxc.errors.OnnxcError as e:
                failed = True
                print(f"  cuda: PTX FAILED {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
