"""Differential tests of the GPU mapping against the CPU target (issue 9, item 4).

The models of test_differential: the transformer encoder layer with a dynamic sequence length
(both variants: opset-20 Gelu with a [batch, 1, seq, seq] mask; the Erf formula with a key-padding
mask and reshape shapes computed from Shape(x)) run at two lengths from one compiled model, and
the ResNet-style stack with a dynamic batch. And the onnx model hub's architectures of
test_hub_architectures (the benchmark builders at small widths): the static ones (ResNet,
MobileNetV2, BERT, GPT-2 prefill and decode, ViT, Llama) and those with dynamic axes
(EfficientNet's batch, T5's batch and sequence, Whisper's batch and frames), each at two sizes.
Vulkan (lavapipe) runs them with the targets' default options: dynamic dims go through per-call
specialization (targets/gpu/specialize.py), each call's shapes made static and compiled once.
On a machine with an NVIDIA GPU the CUDA target runs them the same way.

The Erf encoder with a key-padding mask found a mapping bug this way (a reduction whose body
gathers by its reduction index was split into a tree that read the wrong elements: every output
wrong); `_is_simple_reduction` now keeps such bodies on one thread per output element. The
default became "specialize" once the hub architectures matched too (2026-11-29). The YOLO
builder stays on the CPU: its NonMaxSuppression makes the box count data, which the GPU
targets refuse naming the node (`test_yolo_is_refused_naming_the_node`).

Comparison: test_differential's `compare` (rel <= 1e-4 against a scale-tied floor; non-finite
values at the same places), with the CPU target's output as the reference.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest

import models as M
from test_differential import _encoder_feeds, compare
from test_gpu_vulkan import _vulkan_or_skip
from test_hub_architectures import STATIC, _images, _t5_feeds

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_models as B  # noqa: E402


def _hub(build, runs=None):  # -> (model builder, feeds builder) from a bench_models builder
    """A hub architecture as a case: its proto, fed `runs` (or the builder's own feeds); built once."""
    made = functools.cache(build)
    return (lambda: made().proto, lambda model: runs if runs is not None else [made().feeds])


def _whisper_runs() -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"input_features": rng.standard_normal((b, 80, f), dtype=np.float32)} for b, f in ((1, 32), (2, 48))]


def _cases() -> dict:
    return {
        "encoder_gelu_op": (lambda: M.transformer_encoder("op", mask="full"), _encoder_feeds("full")),
        "encoder_gelu_erf": (lambda: M.transformer_encoder("erf", mask="keys", shape_from_input=True), _encoder_feeds("keys")),
        "resnet_dynbatch": (lambda: M.resnet_stack(batch="N"), lambda model: [M.random_feeds(model, seed=s, dims={"N": n}) for s, n in ((0, 2), (1, 1))]),
        **{f"hub_{name}": _hub(build) for name, build in STATIC.items()},
        "hub_efficientnet_dynbatch": _hub(lambda: B.efficientnet(size=32, layers=1), [{"input": _images(1, 32, 0)}, {"input": _images(3, 32, 1)}]),
        "hub_t5_dynbatch_seq": _hub(lambda: B.t5_encoder(layers=1), [_t5_feeds(1, 12, 0), _t5_feeds(2, 20, 1)]),
        "hub_whisper_dynbatch_frames": _hub(lambda: B.whisper_encoder(layers=1), _whisper_runs()),
    }


def _gpu_or_skip(target: str) -> None:
    """Skip without the target's device (Vulkan: as test_gpu_vulkan decides; CUDA: no NVIDIA GPU)."""
    if target == "vulkan":
        _vulkan_or_skip()
        return
    from onnxc.targets.cuda import cuda_device_count

    if cuda_device_count() == 0:
        pytest.skip("no NVIDIA GPU on this machine (no libcuda.so.1 or no device); Vulkan runs the same models")


@pytest.mark.parametrize("target", ["vulkan", "cuda"])
@pytest.mark.parametrize("name", list(_cases()))
def test_gpu_matches_the_cpu_target(name: str, target: str) -> None:
    import onnxc

    _gpu_or_skip(target)
    build, feeds_of = _cases()[name]
    model = build()
    cpu = onnxc.compile(model, target="cpu")
    gpu = onnxc.compile(model, target=target)  # the default options: dynamic dims specialized per call
    feeds = feeds_of(model)
    for i, feeds_i in enumerate(feeds):
        want = cpu.run(feeds_i)
        got = gpu.run(feeds_i)
        for out in cpu.output_names:
            compare(got[out], want[out], f"{name} run {i} {out}")  # raises beyond tolerance
    if hasattr(gpu.function, "specializations"):  # a model with dynamic dims: one program per shape
        assert gpu.function.specializations == len({tuple(f[k].shape for k in sorted(f)) for f in feeds})


@pytest.mark.parametrize("target", ["vulkan", "cuda"])
def test_yolo_is_refused_naming_the_node(target: str) -> None:
    """The YOLO builder's detections after NonMaxSuppression have a data-dependent count: the GPU
    targets refuse the model at its first call, naming a node, never a crash or a wrong answer."""
    import onnxc
    from onnxc.errors import OnnxcError

    _gpu_or_skip(target)
    m = B.yolo(size=64)
    compiled = onnxc.compile(m.proto, target=target)  # dynamic batch: compiled at the first call
    with pytest.raises(OnnxcError, match=r'loc\("[^"]+"\("[A-Za-z]+"\)\).*dynamic shape'):
        compiled.run(m.feeds)
