"""Row fusion (targets/cpu/row_fusion.py) and reassociated float reductions
(targets/cpu/reassociate_reductions.py): Softmax and the normalizations become one loop over
rows with every op of the chain inside, a chain whose intermediate is read elsewhere is left
alone, and the values match onnx.reference at one and two threads (rows of odd lengths, so the
row tails are masked); float sums across a vector carry `reassoc`."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.compiler import lower
from onnxc.targets.cpu import row_fusion
from onnxc.targets.cpu.pipeline import CpuPipelineOptions
from onnxc.transforms.onnx_utils import collect_ops


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _softmax(shape: list[int]):
    """Scaled softmax over the last axis (attention's scores)."""
    scale = nh.from_array(np.array(0.125, np.float32), "scale")
    nodes = [helper.make_node("Mul", ["x", "scale"], ["s"]), helper.make_node("Softmax", ["s"], ["y"], axis=-1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", TP.FLOAT, shape)], [scale])


def _layer_norm(shape: list[int]):
    rng = np.random.default_rng(1)
    gamma = nh.from_array(rng.standard_normal(shape[-1]).astype(np.float32), "gamma")
    beta = nh.from_array(rng.standard_normal(shape[-1]).astype(np.float32), "beta")
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)]
    return _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", TP.FLOAT, shape)], [gamma, beta])


def _rms_norm(shape: list[int]):
    """Llama's RMSNorm as torch.onnx exports it: x * rsqrt(mean(x^2) + eps) * w."""
    rng = np.random.default_rng(2)
    inits = [
        nh.from_array(rng.standard_normal(shape[-1]).astype(np.float32), "w"),
        nh.from_array(np.array(2.0, np.float32), "two"),
        nh.from_array(np.array(1e-6, np.float32), "eps"),
        nh.from_array(np.array([-1], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
        helper.make_node("Div", ["x", "rms"], ["n"]),
        helper.make_node("Mul", ["n", "w"], ["y"]),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", TP.FLOAT, shape)], inits)


def _top_level(module: ir.Module) -> list[ir.Operation]:
    fn = next(op.operation for op in module.body.operations if op.operation.name == "func.func")
    return [op.operation for op in fn.regions[0].blocks[0].operations]


def _count_nested(op: ir.Operation, name: str) -> int:
    return len(collect_ops(op, lambda inner: inner.name == name))


@pytest.mark.parametrize("build", [_softmax, _layer_norm, _rms_norm], ids=["softmax", "layernorm", "rmsnorm"])
def test_chain_is_one_row_loop(build) -> None:
    """Every op of the chain is inside one loop nest: its reductions and its elementwise ops."""
    with ir.Context():
        module = lower(build([2, 3, 37]), "vector", options=CpuPipelineOptions(threads=1))
        loops = [op for op in _top_level(module) if op.name == "scf.for"]
        assert len(loops) == 1, [op.name for op in _top_level(module)]
        assert _count_nested(loops[0], "vector.reduction") >= 1
        assert not any(op.name.startswith("linalg.") for op in _top_level(module))


def test_without_row_fusion_each_op_is_its_own_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: with the pass off, the softmax is several loop nests."""
    monkeypatch.setattr(row_fusion, "ROW_FUSION", False)
    with ir.Context():
        module = lower(_softmax([2, 3, 37]), "vector", options=CpuPipelineOptions(threads=1))
        assert len([op for op in _top_level(module) if op.name == "scf.for"]) > 1


def test_intermediate_read_elsewhere_is_not_fused() -> None:
    """A mean that is also a model output is not folded into the centring's row loop (it would
    be computed twice or lost); the values still match."""
    axes = nh.from_array(np.array([-1], np.int64), "axes")
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1), helper.make_node("Sub", ["x", "m"], ["y"])]
    shape = [3, 45]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
                   [helper.make_tensor_value_info("y", TP.FLOAT, shape), helper.make_tensor_value_info("m", TP.FLOAT, [3, 1])], [axes])
    with ir.Context():
        assert row_fusion.find_row_chains(lower(model, "linalg")) == []
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = onnxc.compile(model, cache_dir=False, threads=1)(x=x)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("build,shape", [
    (_softmax, [1, 6, 197, 197]),  # ViT-S attention: 0.9 MB, split over the threads
    (_softmax, [2, 5, 3]),
    (_layer_norm, [1, 197, 384]),
    (_layer_norm, [4, 33]),
    (_rms_norm, [1, 64, 200]),
], ids=["softmax-vit", "softmax-tiny", "layernorm-vit", "layernorm-odd", "rmsnorm"])
def test_values_match_reference(build, shape: list[int], threads: int) -> None:
    model = build(shape)
    x = (np.random.default_rng(0).standard_normal(shape) * 4).astype(np.float32)
    (got,) = onnxc.compile(model, cache_dir=False, threads=threads)(x=x)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_float_sums_are_reassociated() -> None:
    """ReduceSum's horizontal step carries `reassoc` (a shuffle tree, not one scalar add per
    element), and the sum of a long row is still right."""
    axes = nh.from_array(np.array([1], np.int64), "axes")
    shape = [4, 1000]
    model = _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                   [helper.make_tensor_value_info("x", TP.FLOAT, shape)], [helper.make_tensor_value_info("y", TP.FLOAT, [4])], [axes])
    with ir.Context():
        module = lower(model, "vector", options=CpuPipelineOptions(threads=1))
        reductions = collect_ops(module.operation, lambda op: op.name == "vector.reduction")
        assert reductions
        assert all("reassoc" in str(op.attributes["fastmath"]) for op in reductions)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (got,) = onnxc.compile(model, cache_dir=False, threads=1)(x=x)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)


def test_a_fusion_that_fails_leaves_the_chain_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step of the script that cannot be done is suppressed, not an error: the chain's ops come
    back unfused (one loop nest each) and the values are unchanged. Simulated by a split of the
    chain's handle into more handles than it has ops (a silenceable failure before any fusion)."""
    script = row_fusion._script

    def failing(chain, threads, min_elements):
        text = script(chain, threads, min_elements)
        n = len(chain.ops) + 1
        return text.replace(f"%c:{n} = transform.split_handle", f"%c:{n + 3} = transform.split_handle").replace(
            "(!transform.any_op) -> (" + ", ".join(["!transform.any_op"] * n) + ")",
            "(!transform.any_op) -> (" + ", ".join(["!transform.any_op"] * (n + 3)) + ")",
        )

    monkeypatch.setattr(row_fusion, "_script", failing)
    model = _softmax([2, 3, 37])
    with ir.Context():
        module = lower(model, "vector", options=CpuPipelineOptions(threads=1))
        assert len([op for op in _top_level(module) if op.name == "scf.for"]) > 1
    x = np.random.default_rng(0).standard_normal([2, 3, 37]).astype(np.float32)
    (got,) = onnxc.compile(model, cache_dir=False, threads=1)(x=x)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
