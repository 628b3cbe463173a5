"""Differential tests of the GPU mapping against the CPU target (issue 9, item 4), on the models of
test_differential: the transformer encoder layer with a dynamic sequence length (both variants:
opset-20 Gelu with a [batch, 1, seq, seq] mask; the Erf formula with a key-padding mask and
reshape shapes computed from Shape(x)) run at two lengths from one compiled model, and the
ResNet-style stack with a dynamic batch. Vulkan (lavapipe) runs them through per-call
specialization (targets/gpu/specialize.py, the opt-in `VulkanOptions(dynamic_shapes="specialize")`):
each call's shapes are made static and compiled once. On a machine with an NVIDIA GPU the CUDA
target runs them the same way (`CudaOptions(dynamic_shapes="specialize")`).

The Erf encoder with a key-padding mask found a mapping bug this way (a reduction whose body
gathers by its reduction index was split into a tree that read the wrong elements: every output
wrong); `_is_simple_reduction` now keeps such bodies on one thread per output element.

Comparison: test_differential's `compare` (rel <= 1e-4 against a scale-tied floor; non-finite
values at the same places), with the CPU target's output as the reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import models as M
from test_differential import _encoder_feeds, compare
from test_gpu_vulkan import _vulkan_or_skip


def _cases() -> dict:
    return {
        "encoder_gelu_op": (lambda: M.transformer_encoder("op", mask="full"), _encoder_feeds("full")),
        "encoder_gelu_erf": (lambda: M.transformer_encoder("erf", mask="keys", shape_from_input=True), _encoder_feeds("keys")),
        "resnet_dynbatch": (lambda: M.resnet_stack(batch="N"), lambda model: [M.random_feeds(model, seed=s, dims={"N": n}) for s, n in ((0, 2), (1, 1))]),
    }


def _gpu_or_skip(target: str):  # -> the target's options with per-call specialization
    """Skip without the target's device (Vulkan: as test_gpu_vulkan decides; CUDA: no NVIDIA GPU)."""
    if target == "vulkan":
        from onnxc.targets.vulkan import VulkanOptions

        _vulkan_or_skip()
        return VulkanOptions(dynamic_shapes="specialize")
    from onnxc.targets.cuda import CudaOptions, cuda_device_count

    if cuda_device_count() == 0:
        pytest.skip("no NVIDIA GPU on this machine (no libcuda.so.1 or no device); Vulkan runs the same models")
    return CudaOptions(dynamic_shapes="specialize")


@pytest.mark.parametrize("target", ["vulkan", "cuda"])
@pytest.mark.parametrize("name", list(_cases()))
def test_gpu_matches_the_cpu_target(name: str, target: str) -> None:
    import onnxc

    options = _gpu_or_skip(target)
    build, feeds_of = _cases()[name]
    model = build()
    cpu = onnxc.compile(model, target="cpu")
    gpu = onnxc.compile(model, target=target, options=options)
    feeds = feeds_of(model)
    for i, feeds_i in enumerate(feeds):
        want = cpu.run(feeds_i)
        got = gpu.run(feeds_i)
        for out in cpu.output_names:
            compare(got[out], want[out], f"{name} run {i} {out}")  # raises beyond tolerance
    assert gpu.function.specializations == len({tuple(f[k].shape for k in sorted(f)) for f in feeds})
