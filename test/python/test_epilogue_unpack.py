"""Unpack epilogues (targets/cpu/epilogue.py): a data-tiled product's unpack computed in the tiles
of its elementwise consumer, checked against onnx.reference on whole models.

The ShuffleNet-like block has grouped 1x1 convolutions (4 groups of 34 channels: a partial
register tile in every group) whose Relu and residual Sum follow reshapes of the unpacked
product (`align_unpack_epilogues` moves them ahead), at 28 x 28 so that two threads split the
fused nest in an `scf.forall`, and K = 34 lets the product join the nest too; the Gemm model has a bias read through a broadcast map and
partial tiles in both dims. A structural check makes sure the fusion happened (fewer loop
nests than with `FUSE_UNPACK_EPILOGUES` off), so the numeric tests cannot pass by it silently
not applying.
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
from onnxc.targets.cpu import epilogue
from onnxc.targets.cpu.pipeline import CpuPipelineOptions

C, HW = 136, 28


def _shuffle_block() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits: list[onnx.TensorProto] = []

    def weight(name: str, shape: tuple[int, ...], lo: float = -0.3, hi: float = 0.3) -> str:
        inits.append(nh.from_array(rng.uniform(lo, hi, shape).astype(np.float32), name))
        return name

    def bn(name: str) -> list[str]:
        return [weight(name + "_s", (C,), 0.5, 1.5), weight(name + "_b", (C,)), weight(name + "_m", (C,)),
                weight(name + "_v", (C,), 0.5, 1.5)]

    nodes = [
        helper.make_node("Conv", ["x", weight("w1", (C, C // 4, 1, 1))], ["c1"], group=4),
        helper.make_node("BatchNormalization", ["c1", *bn("bn1")], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", weight("w2", (C, C // 4, 1, 1))], ["c2"], group=4),
        helper.make_node("BatchNormalization", ["c2", *bn("bn2")], ["n2"]),
        helper.make_node("Sum", ["n2", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "shuffle", [helper.make_tensor_value_info("x", TP.FLOAT, [1, C, HW, HW])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, C, HW, HW])], initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _gemm_model() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    w = nh.from_array(rng.uniform(-0.5, 0.5, (40, 70)).astype(np.float32), "w")
    b = nh.from_array(rng.uniform(-0.5, 0.5, (70,)).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(
        nodes, "gemm", [helper.make_tensor_value_info("x", TP.FLOAT, [50, 40])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [50, 70])], initializer=[w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model: onnx.ModelProto, shape: tuple[int, ...], threads: int) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = onnxc.compile(model, threads=threads, cache_dir=False)(x=x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_block_matches_reference(threads: int) -> None:
    _check(_shuffle_block(), (1, C, HW, HW), threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_bias_relu_matches_reference(threads: int) -> None:
    _check(_gemm_model(), (50, 40), threads)


def _loop_nests(fuse: bool, threads: int, product: bool = True) -> int:
    saved = epilogue.FUSE_UNPACK_EPILOGUES, epilogue.FUSE_UNPACK_PRODUCT
    epilogue.FUSE_UNPACK_EPILOGUES, epilogue.FUSE_UNPACK_PRODUCT = fuse, product
    try:
        module = lower(_shuffle_block(), "vector", options=CpuPipelineOptions(threads=threads))
    finally:
        epilogue.FUSE_UNPACK_EPILOGUES, epilogue.FUSE_UNPACK_PRODUCT = saved
    count = 0
    for fn in module.body.operations:
        if fn.operation.name == "func.func":
            count += sum(1 for op in fn.regions[0].blocks[0].operations if op.operation.name in ("scf.for", "scf.forall"))
    return count


@pytest.mark.parametrize("threads", [1, 2])
def test_fusion_applies(threads: int) -> None:
    """Each convolution's unpack joins its epilogue's loop nest, and so does its product (K = 34
    needs no cache tiles): two nests fewer for each."""
    unfused = _loop_nests(False, threads)
    without_product = _loop_nests(True, threads, product=False)
    assert without_product <= unfused - 2
    assert _loop_nests(True, threads) <= without_product - 2
