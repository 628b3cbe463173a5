"""Reductions whose length is not a multiple of the vector length (masked tails) are exact.

LLVM 22.1.8 lowers a masked ``vector.reduction <maximumf>`` with a wrong neutral value: ReduceMax
of an all-negative row of 17 floats returned -1.4e-45. ``targets/cpu/masked_reductions.py``
replaces masked-off lanes by each kind's identity; these tests compare every reduction kind,
with rows of every sign, lengths around the vector width, and a dynamic length, against numpy.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxc

_NP = {"ReduceMax": np.max, "ReduceMin": np.min, "ReduceSum": np.sum, "ReduceProd": np.prod}
_ELEM = {np.float32: TensorProto.FLOAT, np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}


def _model(op: str, dtype: type, n: int | str) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)],
        "g",
        [helper.make_tensor_value_info("x", _ELEM[dtype], [3, n])],
        [helper.make_tensor_value_info("y", _ELEM[dtype], [3])],
        [numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op", sorted(_NP))
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("n", [5, 17, 33])
def test_masked_tail_reduction(op: str, dtype: type, n: int) -> None:
    rng = np.random.default_rng(n)
    compiled = onnxc.compile(_model(op, dtype, n))
    for sign in (-1, 1):
        if np.issubdtype(dtype, np.floating):
            x = (sign * (rng.random((3, n)) + 1.0)).astype(dtype)
            if op == "ReduceProd":
                x = (sign * (rng.random((3, n)) * 0.2 + 0.9)).astype(dtype)
        else:
            x = (sign * rng.integers(1, 4 if op == "ReduceProd" else 1000, (3, n))).astype(dtype)
        (got,) = compiled(x)
        # dtype=: numpy would accumulate int32 in int64; ONNX keeps the input type (and wraps).
        want = _NP[op](x, axis=1, dtype=dtype) if op in ("ReduceSum", "ReduceProd") else _NP[op](x, axis=1)
        if np.issubdtype(dtype, np.floating):
            np.testing.assert_allclose(got, want, rtol=1e-5)
        else:
            np.testing.assert_array_equal(got, want)


def test_dynamic_length_max_of_negative_rows() -> None:
    compiled = onnxc.compile(_model("ReduceMax", np.float32, "n"))
    for n in (1, 7, 16, 19, 100):
        x = -(np.random.default_rng(n).random((3, n)).astype(np.float32) + 0.5)
        (got,) = compiled(x)
        np.testing.assert_array_equal(got, x.max(axis=1))
