"""Tests of `onnxc.compile`: binding inputs by position and name, the checks made before native
code runs, initializer defaults, unsigned and scalar inputs, and models with sequence inputs and
outputs (specialized per call structure). Numerics against onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.compiler import InputError


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture(scope="module")
def add_model() -> tuple[onnx.ModelProto, onnxc.compiler.CompiledModel]:
    m = _model(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [helper.make_tensor_value_info("a", T.FLOAT, ["N", 3]), helper.make_tensor_value_info("b", T.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("c", T.FLOAT, ["N", 3])],
    )
    return m, onnxc.compile(m)


def test_positional_and_named_inputs_and_dynamic_dims(add_model) -> None:
    m, cm = add_model
    for n in (1, 4):
        a, b = np.random.rand(n, 3).astype(np.float32), np.random.rand(n, 3).astype(np.float32)
        expected = ReferenceEvaluator(m).run(None, {"a": a, "b": b})[0]
        np.testing.assert_allclose(cm(a, b)[0], expected, rtol=1e-6)
        np.testing.assert_allclose(cm(b=b, a=a)[0], expected, rtol=1e-6)
        np.testing.assert_allclose(cm.run({"a": a, "b": b})["c"], expected, rtol=1e-6)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((np.zeros((2, 3), np.float64), np.zeros((2, 3), np.float32)), {}, "input 'a' must have dtype float32, got float64"),
        ((np.zeros((2, 3, 1), np.float32), np.zeros((2, 3), np.float32)), {}, "input 'a' must have rank 2"),
        ((np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)), {}, "input 'a' dim 1 must be 3"),
        ((np.zeros((2, 3), np.float32), np.zeros((5, 3), np.float32)), {}, "is 'N' = 5, but input 'a' bound 'N' = 2"),
        ((np.zeros((2, 3), np.float32),), {}, "missing input(s): b"),
        ((), {"a": np.zeros((2, 3), np.float32), "bb": 1}, "the model has no input 'bb'"),
    ],
)
def test_bad_inputs_are_refused_before_native_code(add_model, args, kwargs, message) -> None:
    _, cm = add_model
    with pytest.raises(InputError) as info:
        cm(*args, **kwargs)
    assert message in str(info.value)


def test_inputs_with_initializer_defaults_and_unsigned_and_scalars() -> None:
    bias = onnx.numpy_helper.from_array(np.array([1, 2, 3], np.uint8), "bias")
    m = _model(
        [helper.make_node("Add", ["x", "bias"], ["y"]), helper.make_node("Mul", ["y", "k"], ["z"])],
        [helper.make_tensor_value_info("x", T.UINT8, [3]), helper.make_tensor_value_info("bias", T.UINT8, [3]),
         helper.make_tensor_value_info("k", T.UINT8, [])],
        [helper.make_tensor_value_info("z", T.UINT8, [3])],
        [bias],
    )
    cm = onnxc.compile(m)
    x = np.array([250, 10, 20], np.uint8)
    k = np.array(3, np.uint8)
    (z,) = cm(x=x, k=k)  # bias omitted: its initializer is used
    assert z.dtype == np.uint8
    np.testing.assert_array_equal(z, ReferenceEvaluator(m).run(None, {"x": x, "bias": bias_array(bias), "k": k})[0])
    (z2,) = cm(x=x, bias=np.zeros(3, np.uint8), k=k.reshape(1))  # overridden default; [1] for a scalar
    np.testing.assert_array_equal(z2, (x * 3).astype(np.uint8))


def bias_array(t: onnx.TensorProto) -> np.ndarray:
    return onnx.numpy_helper.to_array(t)


def test_sequence_inputs_and_outputs_specialize_per_structure() -> None:
    m = _model(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0), helper.make_node("SequenceInsert", ["s", "x"], ["s2"])],
        [helper.make_tensor_sequence_value_info("s", T.FLOAT, None), helper.make_tensor_value_info("x", T.FLOAT, [2])],
        [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_sequence_value_info("s2", T.FLOAT, None)],
    )
    cm = onnxc.compile(m)
    x = np.array([7, 8], np.float32)
    for seq in ([np.ones(2, np.float32), np.arange(3, dtype=np.float32)], [np.arange(4, dtype=np.float32)]):
        y, s2 = cm(seq, x)
        ref_y, ref_s2 = ReferenceEvaluator(m).run(None, {"s": seq, "x": x})
        np.testing.assert_array_equal(y, ref_y)
        assert len(s2) == len(ref_s2)
        for got, want in zip(s2, ref_s2):
            np.testing.assert_array_equal(got, want)


def test_compile_from_a_path_reads_external_data_from_the_model_folder(tmp_path) -> None:
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).random((64, 64), dtype=np.float32), "w")
    m = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 64])],
        [w],
    )
    expected_w = onnx.numpy_helper.to_array(w)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    x = np.random.default_rng(1).random((2, 64), dtype=np.float32)
    np.testing.assert_allclose(onnxc.compile(path)(x)[0], x @ expected_w, rtol=1e-5)
