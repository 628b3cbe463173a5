"""1x1 convolutions run as packed matmuls where that pays (targets/cpu/conv_filters.py:
``pointwise_as_matmul``): answers against onnx.reference, and which shapes are rewritten on
AVX2 (none on AVX-512, whose plans are kept)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.compiler import lower
from onnxc.targets.cpu import conv_filters
from onnxc.targets.cpu.isa import CpuFeatures
from onnxc.targets.cpu.pipeline import CpuPipelineOptions
from onnxc.transforms.onnx_utils import collect_ops


def _pointwise(c: int, f: int, hw: int, residual: bool = False) -> onnx.ModelProto:
    """Conv 1x1 (bias) + Relu (+ a residual Add of a second input when ``residual``)."""
    rng = np.random.default_rng(c + f + hw)
    w = nh.from_array(rng.uniform(-0.2, 0.2, (f, c, 1, 1)).astype(np.float32), "w")
    b = nh.from_array(rng.uniform(-0.5, 0.5, (f,)).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"])]
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, [1, c, hw, hw])]
    if residual:
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
        inputs.append(helper.make_tensor_value_info("r", TP.FLOAT, [1, f, hw, hw]))
    nodes.append(helper.make_node("Relu", ["s" if residual else "c"], ["y"]))
    graph = helper.make_graph(nodes, "pw", inputs, [helper.make_tensor_value_info("y", TP.FLOAT, [1, f, hw, hw])],
                              initializer=[w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


#: (c, f, hw): a short direct tile (13 wide), a wide one with enough channels, one kept direct, and
#: one rewritten at 2 threads too (its packed direct filter would run on one thread).
SHAPES = [(64, 100, 13), (64, 256, 8), (16, 24, 16), (256, 1000, 13)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("residual", [False, True])
def test_matches_reference(shape: tuple[int, int, int], threads: int, residual: bool) -> None:
    c, f, hw = shape
    model = _pointwise(c, f, hw, residual)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, c, hw, hw)).astype(np.float32)}
    if residual:
        feeds["r"] = rng.standard_normal((1, f, hw, hw)).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    got = onnxc.compile(model, threads=threads, target_cpu="znver3", cache_dir=False)(**feeds)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-4)


def _rewritten(model: onnx.ModelProto, cpu: str, threads: int = 1) -> int:
    module = lower(model, "linalg", options=CpuPipelineOptions(target_cpu=cpu, threads=threads))
    return conv_filters.pointwise_as_matmul(module, CpuFeatures.for_target(cpu), threads)


@pytest.mark.parametrize("cpu", ["znver3", "skylake-avx512"])
def test_rewritten_on_avx2_only(cpu: str) -> None:
    assert _rewritten(_pointwise(64, 100, 13), cpu) == (1 if cpu == "znver3" else 0)
    assert _rewritten(_pointwise(16, 24, 16), cpu) == 0


def test_threads_rewrite_only_a_direct_conv_that_runs_alone() -> None:
    """With 2 threads a small filter stays direct (its convolution splits over the threads); a
    filter packed per channel tile in 125 tiles (1000 channels, 13 wide: tiles of 8) would run
    on one thread, and becomes the matmul."""
    assert _rewritten(_pointwise(64, 100, 13), "znver3", threads=2) == 0
    assert _rewritten(_pointwise(256, 1000, 13), "znver3", threads=2) == 1


def test_rule_per_shape() -> None:
    """AVX2 (8 lanes), one thread: wide convolutions (at least 96 output and 64 input channels)
    go to the matmul where the direct tile is weak: one vector of channels (1000 = 125 x 8), or
    widths whose tiles average fewer than FMA_DEPTH accumulators (7 = a 4- and a 3-pixel tile);
    at widths 13, 14, 28, 56 (5-pixel tiles of two vectors, conv_plan's peeled tiles) they stay
    direct. Narrow ones stay direct at every width but those too short to fill a tile of
    FMA_DEPTH accumulators (3). With threads, the channel rule alone decides (only a direct
    convolution that would run alone is asked, `test_threads_rewrite_only_a_direct_conv_that_runs_alone`)."""
    avx2 = CpuFeatures.for_target("znver3")
    pays = conv_filters._pointwise_pays
    assert pays(512, 1000, 13, avx2) and pays(960, 160, 7, avx2) and pays(1024, 352, 7, avx2)
    assert not pays(64, 256, 56, avx2) and not pays(512, 128, 28, avx2) and not pays(1024, 256, 14, avx2)
    assert pays(64, 256, 56, avx2, wide_direct=False) and pays(512, 128, 28, avx2, wide_direct=False)
    assert pays(64, 64, 3, avx2)
    assert not pays(32, 128, 27, avx2) and not pays(384, 64, 14, avx2) and not pays(64, 64, 13, avx2)
    assert not pays(256, 64, 56, avx2) and not pays(32, 192, 28, avx2) and not pays(24, 144, 56, avx2)
    assert not pays(16, 96, 112, avx2) and not pays(64, 64, 56, avx2)
