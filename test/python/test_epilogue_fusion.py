"""Epilogue fusion and in-place padding on whole models, checked against onnx.reference.

The CNN block below has every pattern `targets/cpu/epilogue.py` fuses and `pad_in_place.py`
writes in place: Conv + bias + Relu, a depthwise Conv with padding after it, Clip, a residual
Add + Relu after a 1x1 Conv, and a padded MaxPool after a Conv + Relu. Two equal-shaped padded
layers (the same fill, which CSE would share) are in it as well. Compiled with one and two
threads (the threaded plan fuses through the `scf.forall` too) and checked value by value; a
structural check makes sure the fusion happened (fewer loop nests than with it turned off), so
the numeric test cannot pass by the fusion silently not applying.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.compiler import lower
from onnxc.targets.cpu.pipeline import CpuPipelineOptions


def _block_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    inits: list[onnx.TensorProto] = []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        inits.append(nh.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name))
        return name

    c = 32
    nodes = [
        helper.make_node("Conv", ["x", weight("w1", (c, 16, 1, 1)), weight("b1", (c,))], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", weight("wd", (c, 1, 3, 3)), weight("bd", (c,))], ["dw"], group=c, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["dw", "lo", "hi"], ["cl"]),
        helper.make_node("Conv", ["cl", weight("wd2", (c, 1, 3, 3)), weight("bd2", (c,))], ["dw2"], group=c, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["dw2", weight("w2", (c, c, 1, 1)), weight("b2", (c,))], ["c2"]),
        helper.make_node("Add", ["c2", "r1"], ["res"]),
        helper.make_node("Relu", ["res"], ["r2"]),
        helper.make_node("Conv", ["r2", weight("w3", (c, c, 3, 3)), weight("b3", (c,))], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("MaxPool", ["r3"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    ]
    inits += [nh.from_array(np.array(0.0, np.float32), "lo"), nh.from_array(np.array(6.0, np.float32), "hi")]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 16, 12, 12])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, c, 6, 6])], initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_block_matches_reference(threads: int) -> None:
    _check_against_reference(_block_model(), (1, 16, 12, 12), threads)


def _check_against_reference(model: onnx.ModelProto, shape: tuple[int, ...], threads: int) -> None:
    """Compile `model` with `threads` threads and compare its output on a random `x` of
    `shape` with onnx.reference."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = onnxc.compile(model, threads=threads, cache_dir=False)(x=x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-5)


def _loop_nests(fuse: bool) -> int:
    module = lower(_block_model(), "vector", options=CpuPipelineOptions(threads=1, fuse_epilogues=fuse))
    count = 0
    for fn in module.body.operations:
        if fn.operation.name != "func.func":
            continue
        count += sum(1 for op in fn.regions[0].blocks[0].operations if op.operation.name == "scf.for")
    return count


def test_fusion_applies() -> None:
    """Each Conv's bias initializer and elementwise consumer join its loop nest: at least one
    nest fewer per fused Conv (five of them) than with the fusion off."""
    assert _loop_nests(True) <= _loop_nests(False) - 5


@pytest.mark.parametrize("threads", [1, 2])
def test_input_transposed_straight_into_the_padded_buffer(threads: int) -> None:
    """The model's input, transposed to channels-last, feeds a padded 3x3/2 convolution and a
    padded MaxPool (a CNN stem): the transpose (a `linalg.transpose`, whose destination the
    views name `init`, not `outputs`) and the Relu write straight into the padded buffers, so the
    bufferized code copies nothing, with one thread and with the transpose split over two (a
    forall, whose result was copied, strided and on one thread, before); and the answer is
    onnx.reference's."""
    rng = np.random.default_rng(5)
    w = nh.from_array((rng.standard_normal((8, 3, 3, 3)) / 5).astype(np.float32), "w")
    b = nh.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, None)], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = lower(model, "bufferize", options=CpuPipelineOptions(threads=threads))
    assert _copies(module) == []
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(onnxc.compile(model, threads=threads, cache_dir=False)(x)[0], expected, rtol=1e-4, atol=1e-5)


def _copies(module: ir.Module) -> list[str]:
    found: list[str] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "memref.copy":
            found.append(str(op))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def test_padded_concatenations_get_their_own_buffers() -> None:
    """Two concatenations, each the padded input of a depthwise convolution of the same shape:
    their data cannot be written in place (the slices of a concatenation), but each pad gets a
    filled buffer of its own, so no whole padded buffer is copied (the lowering's fills, merged
    by CSE, made bufferization copy the shared 18x18x16 buffer before the second insert); the
    answer is onnx.reference's."""
    rng = np.random.default_rng(9)
    inits: list[onnx.TensorProto] = []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        inits.append(nh.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name))
        return name

    nodes, cur = [], "x"
    for i in range(2):
        nodes += [helper.make_node("Conv", [cur, weight(f"a{i}", (8, 8 if i == 0 else 16, 1, 1))], [f"pa{i}"]),
                  helper.make_node("Conv", [cur, weight(f"b{i}", (8, 8 if i == 0 else 16, 1, 1))], [f"pb{i}"]),
                  helper.make_node("Concat", [f"pa{i}", f"pb{i}"], [f"cat{i}"], axis=1),
                  helper.make_node("Conv", [f"cat{i}", weight(f"d{i}", (16, 1, 3, 3))], [f"dw{i}"], pads=[1, 1, 1, 1], group=16)]
        cur = f"dw{i}"
    graph = helper.make_graph(nodes, "cat_pad", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info(cur, TP.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = lower(model, "bufferize", options=CpuPipelineOptions(threads=1))
    whole = [c for c in _copies(module) if "memref<1x18x18x16xf32> to memref<1x18x18x16xf32>" in c]
    assert whole == []
    x = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(onnxc.compile(model, threads=1, cache_dir=False)(x)[0], expected, rtol=1e-4, atol=1e-5)


def _lone_depthwise_model() -> onnx.ModelProto:
    """A depthwise Conv with a bias and nothing elementwise after it (ShuffleNet's pattern:
    BatchNormalization folded, a grouped 1x1 Conv next), at a size the two-thread plan splits."""
    rng = np.random.default_rng(3)
    c = 48
    inits = [nh.from_array(rng.uniform(-0.5, 0.5, (c, 1, 3, 3)).astype(np.float32), "w"),
             nh.from_array(rng.uniform(-0.5, 0.5, (c,)).astype(np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, pads=[1, 1, 1, 1])], "lone",
        [helper.make_tensor_value_info("x", TP.FLOAT, [1, c, 40, 40])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, c, 40, 40])], initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 2])
def test_lone_convolution_computes_its_bias_in_its_tiles(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no consumer to fuse into, the convolution's bias broadcast is computed in the
    convolution's own tiles (`epilogue.LONE_INIT_FUSION`): one top-level loop nest fewer than
    with the flag off, and the values still match onnx.reference."""
    from onnxc.targets.cpu import epilogue

    model = _lone_depthwise_model()
    _check_against_reference(model, (1, 48, 40, 40), threads)

    def nests() -> int:
        module = lower(model, "vector", options=CpuPipelineOptions(threads=threads))
        return sum(
            1 for fn in module.body.operations if fn.operation.name == "func.func"
            for op in fn.regions[0].blocks[0].operations if op.operation.name in ("scf.for", "scf.forall")
        )

    fused = nests()
    monkeypatch.setattr(epilogue, "LONE_INIT_FUSION", False)
    assert fused == nests() - 1


@pytest.mark.parametrize("threads", [1, 2])
def test_padding_fills_only_the_border(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A padded buffer's pad value is written around the data only (`pad_in_place._border_fill`):
    the block's padded layers get one fill per padded side (two per padded dim) and no fill of a
    whole padded shape, nothing is copied that is not copied without it, and the answer, where
    MaxPool pads with -inf and the depthwise convolutions with 0, is onnx.reference's."""
    from onnxc.targets.cpu import pad_in_place

    model = _block_model()
    _check_against_reference(model, (1, 16, 12, 12), threads)
    padded = {(1, 14, 14, 32)}  # the inputs of both depthwise convolutions, the 3x3 one and MaxPool

    def fills() -> list[tuple[int, ...]]:
        module = lower(model, "linalg")
        with module.context:
            pad_in_place.hoist_pad_fills(module)
        found: list[tuple[int, ...]] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name == "linalg.fill":
                found.append(tuple(ir.RankedTensorType(op.results[0].type).shape))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        return found

    border = fills()
    assert not padded & set(border)
    assert sum(1 for s in border if s in {(1, 1, 14, 32), (1, 12, 1, 32)}) == 16  # 4 sides x 4 padded layers
    copies = _copies(lower(model, "bufferize", options=CpuPipelineOptions(threads=threads)))
    monkeypatch.setattr(pad_in_place, "BORDER_FILLS", False)
    assert padded <= set(fills())
    assert len(copies) <= len(_copies(lower(model, "bufferize", options=CpuPipelineOptions(threads=threads))))
