"""fp16 Softmax rounds where onnx.reference does (transforms/lowering/reduction.py): exp(x - max)
rounded to f16, the sum accumulated in f32 over trailing axes (numpy's pairwise sum of a
contiguous f16 row) and in f16 row by row over another axis (numpy's f16 add loop), one
correctly rounded f16 division. The result must equal onnx.reference's bit for bit, which is what
the backend suite's fp16 attention cases compare against (with rtol 1e-3, about two f16 ulps).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxc


@pytest.mark.parametrize(("shape", "axis"), [((4, 37), -1), ((2, 3, 300), -1), ((3, 5, 8), 1), ((6, 4), 0)])
def test_fp16_softmax_matches_the_reference_bit_for_bit(shape: tuple[int, ...], axis: int) -> None:
    node = helper.make_node("Softmax", ["x"], ["y"], axis=axis)
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, list(shape)) for n in ("x", "y")]
    model = helper.make_model(helper.make_graph([node], "g", io[:1], io[1:]), opset_imports=[helper.make_opsetid("", 13)])
    x = (np.random.default_rng(0).standard_normal(shape) * 3).astype(np.float16)
    got = onnxc.compile(model, cache_dir=False).run({"x": x})["y"]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
