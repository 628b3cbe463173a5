"""Partial tiles peeled off their loops (targets/cpu/peel_tiles.py): the whole tiles run without
masks, the last partial tile keeps them; answers checked against onnx.reference.

The models have partial register tiles: a grouped 1x1 convolution with 34 channels per group
(ShuffleNet's; packed, unpacked and its Relu fused, all in tiles of a vector) and a MatMul with
N = 70, K = 36 (partial tiles in N and in the packing of K; 2 threads split N in an
``scf.forall``, whose share loops end at an ``affine.min``). The structural check makes sure
the peeling happened, so the numeric tests cannot pass by it silently not applying.
"""

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
from onnxc.targets.cpu import peel_tiles
from onnxc.targets.cpu.pipeline import CpuPipelineOptions
from onnxc.transforms.onnx_utils import collect_ops


def _grouped_conv() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w = nh.from_array(rng.uniform(-0.3, 0.3, (136, 34, 1, 1)).astype(np.float32), "w")
    b = nh.from_array(rng.uniform(-0.3, 0.3, (136,)).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=4), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "gconv", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 136, 14, 14])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, 136, 14, 14])], initializer=[w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _matmul() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    w = nh.from_array(rng.uniform(-0.5, 0.5, (36, 70)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(
        nodes, "mm", [helper.make_tensor_value_info("x", TP.FLOAT, [64, 36])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [64, 70])], initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


MODELS = {"grouped_conv": (_grouped_conv, (1, 136, 14, 14)), "matmul": (_matmul, (64, 36))}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_matches_reference(name: str, threads: int) -> None:
    build, shape = MODELS[name]
    model = build()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = onnxc.compile(model, threads=threads, cache_dir=False)(x=x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-5)


def _masked_tile_loops(model: onnx.ModelProto, cpu: str, threads: int) -> int:
    module = lower(model, "vector", options=CpuPipelineOptions(target_cpu=cpu, threads=threads))
    return sum(1 for op in collect_ops(module.operation, lambda o: o.name == "scf.for") if peel_tiles._masks_partial_tile(op))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cpu", ["znver3", "skylake-avx512"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_no_masked_tile_loop_left(name: str, cpu: str, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without peeling the vector stage leaves loops whose every tile is masked; with it, none
    on AVX2. AVX-512 (native masked stores) keeps its masked loops."""
    build, _ = MODELS[name]
    monkeypatch.setattr(peel_tiles, "PEEL_MASKED_TILES", False)
    before = _masked_tile_loops(build(), cpu, threads)
    assert before > 0
    monkeypatch.setattr(peel_tiles, "PEEL_MASKED_TILES", True)
    assert _masked_tile_loops(build(), cpu, threads) == (before if cpu == "skylake-avx512" else 0)
