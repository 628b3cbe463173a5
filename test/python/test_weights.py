"""Tests of `onnxc.targets.cpu.weights` (large constants outside the generated code) and of the
importer's shape inference on a model without its weights' data.

What is checked: a model's large weights leave the LLVM module (no initialized global of
`MIN_BYTES` or more remains) and live in the compiled function's aligned buffers, and the code
reading them computes what onnx.reference does; small constants stay in the code; turning it off
gives the same results; the realignment keeps the bytes; the importer infers the same types from
the stubbed model as from the full one and leaves the caller's model untouched."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.importers import import_model
from onnxc.importers.onnx_importer import _without_weight_data
from onnxc.targets.cpu import weights as W
from onnxc.targets.cpu.jit import compile_module
from onnxc.transforms.named_pipelines import lower_onnx_module


def mlp(n_in: int, n_hidden: int, rows: int = 3) -> onnx.ModelProto:
    """y = relu(x @ w1 + b1) @ w2, with a Reshape by a small shape initializer in between."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((n_in, n_hidden)) / 8).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(n_hidden).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((n_hidden, 8)) / 8).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([rows, n_hidden], dtype=np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m"]),
        helper.make_node("Add", ["m", "b1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["rs"]),
        helper.make_node("MatMul", ["rs", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, n_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _initialized_bytes(llvm_module: ir.Module) -> list[int]:
    """Sizes in bytes of the initialized constant globals of a module in the LLVM dialect."""
    sizes = []
    for op in llvm_module.body.operations:
        op = op.operation
        if op.name == "llvm.mlir.global" and "value" in op.attributes:
            t = ir.ShapedType(op.attributes["value"].type)
            sizes.append(int(np.prod(t.shape)) * (W._element_bytes(t.element_type) or 1))
    return sizes


def test_large_weights_leave_the_code_and_compute_right() -> None:
    model = mlp(128, 256)
    x = np.random.default_rng(1).standard_normal((3, 128)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    compiled = onnxc.compile(model, cache_dir=False)
    fn = compiled.function
    assert fn.weights.nbytes >= (128 * 256 + 256 * 8) * 4  # both matrices (packed or not)
    assert all(a.ctypes.data % 16 == 0 for a in fn.weights.arrays.values())
    # The weights packed at compile time (both MatMuls' B) sit on cache lines: 64-byte vector
    # loads of a 16-byte-aligned buffer straddle two lines (SqueezeNet ran 13.1 instead of 10.9 ms).
    assert all(a.ctypes.data % 64 == 0 for a in fn.weights.arrays.values()), [a.ctypes.data % 64 for a in fn.weights.arrays.values()]
    assert max(_initialized_bytes(fn.llvm_module), default=0) < W.MIN_BYTES
    np.testing.assert_allclose(compiled(x)[0], want, rtol=1e-4, atol=1e-5)


def test_small_weights_stay_and_switching_off_gives_the_same_results() -> None:
    small = mlp(4, 8)
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    (want,) = ReferenceEvaluator(small).run(None, {"x": x})
    compiled = onnxc.compile(small, cache_dir=False)
    assert not compiled.function.weights.arrays
    np.testing.assert_allclose(compiled(x)[0], want, rtol=1e-5, atol=1e-6)

    big = mlp(128, 256)
    xb = np.random.default_rng(3).standard_normal((3, 128)).astype(np.float32)
    module = import_model(big)
    lower_onnx_module(module, "linalg")
    inside = compile_module(module, external_weights=False)
    outside = compile_module(module)
    assert not inside.weights.arrays and outside.weights.arrays
    assert max(_initialized_bytes(inside.llvm_module)) >= W.MIN_BYTES
    np.testing.assert_array_equal(inside(xb)[0], outside(xb)[0])


@pytest.mark.parametrize("offset", [0, 4, 12])
def test_realignment_keeps_the_bytes(offset: int) -> None:
    raw = np.arange(1000, dtype=np.uint8)
    view = raw[offset : offset + 512].view(np.float32)
    out = W._aligned(view, 64)
    assert out.ctypes.data % 64 == 0
    assert out.tobytes() == view.tobytes()


def test_shape_inference_sees_stubs_with_the_same_types() -> None:
    model = mlp(128, 1024)
    before = model.SerializeToString()
    skeleton, stubbed = _without_weight_data(model)
    assert stubbed == 2  # w1 and w2; b1 and the shape are small
    assert model.SerializeToString() == before  # the caller's model is not touched
    stubs = {t.name: t for t in skeleton.graph.initializer}
    assert not stubs["w1"].raw_data and list(stubs["w1"].dims) == [128, 1024]
    assert numpy_helper.to_array(stubs["shape"]).tolist() == [3, 1024]
    full = onnx.shape_inference.infer_shapes(model, data_prop=True)
    light = onnx.shape_inference.infer_shapes(skeleton, data_prop=True)
    types = lambda m: {vi.name: vi.type.SerializeToString() for vi in m.graph.value_info}  # noqa: E731
    assert types(light) == types(full) and types(full)


def light_gemm(value: float) -> onnx.ModelProto:
    """AlexNet's classifier as the onnx wheel's `light` models write it: the weight is a
    ConstantOfShape whose shape is a graph input with a default (overridable, so not folded at
    the ONNX level), feeding a Gemm with transB, and a Conv whose filter is made the same way."""
    shape_w = numpy_helper.from_array(np.array([64, 256], dtype=np.int64), "w_shape")
    shape_f = numpy_helper.from_array(np.array([8, 3, 3, 3], dtype=np.int64), "f_shape")
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=numpy_helper.from_array(np.array([value], np.float32))),
        helper.make_node("ConstantOfShape", ["f_shape"], ["f"], value=numpy_helper.from_array(np.array([value / 2], np.float32))),
        helper.make_node("Gemm", ["x", "w"], ["y"], transB=1),
        helper.make_node("Conv", ["img", "f"], ["z"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "light",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256]),
            helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 8, 8]),
            helper.make_tensor_value_info("w_shape", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("f_shape", TensorProto.INT64, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 8, 8])],
        [shape_w, shape_f],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("value", [0.0, 0.25])
def test_weights_made_by_a_fill_become_constants(value: float) -> None:
    """The fills feeding the Gemm and the Conv become splat constants (packed at compile time,
    not written at every run), and the results equal onnx.reference's; zero and non-zero."""
    from onnxc.targets.cpu.data_tiling import fills_to_constants

    model = light_gemm(value)
    module = import_model(model)
    lower_onnx_module(module, "linalg")
    with module.context:
        assert fills_to_constants(module) == 2
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((1, 256)).astype(np.float32), "img": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)
    got = onnxc.compile(model, cache_dir=False)(**feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
