"""Integer Div and Mod never trap: zero divisors, INT_MIN / -1 and the masked tail lanes of
vectorized code (whose divisor is the transfer's padding 0) used to kill the process with SIGFPE
(the compile fuzzer's Mod on uint32 with a dynamic dim). Results against onnx.reference, which
gives 0 for integer division and remainder by zero, as numpy does."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxc

_TYPES = {np.int8: TensorProto.INT8, np.int32: TensorProto.INT32, np.int64: TensorProto.INT64, np.uint32: TensorProto.UINT32, np.uint8: TensorProto.UINT8}


def _model(op: str, dtype: type, **attrs: int):
    tp = _TYPES[dtype]
    graph = helper.make_graph(
        [helper.make_node(op, ["a", "b"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("a", tp, ["n"]), helper.make_tensor_value_info("b", tp, ["n"])],
        [helper.make_tensor_value_info("y", tp, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op,attrs", [("Div", {}), ("Mod", {}), ("Mod", {"fmod": 1})], ids=["div", "mod", "fmod"])
@pytest.mark.parametrize("dtype", list(_TYPES), ids=lambda t: t.__name__)
def test_integer_division_never_traps(op: str, attrs: dict[str, int], dtype: type) -> None:
    model = _model(op, dtype, **attrs)
    compiled = onnxc.compile(model)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    cases = []
    for n in (5, 17, 33):  # tails of every vector width
        a = rng.integers(max(info.min, -1000), min(info.max, 1000), n).astype(dtype)
        b = rng.integers(max(info.min, -7), 8, n).astype(dtype)
        cases.append((a, b))  # b holds zeros too
    if info.min < 0:
        cases.append((np.array([info.min, 7, -7, 5, info.min], dtype), np.array([-1, -1, 2, -3, 0], dtype)))
    for a, b in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns on x / 0
            (want,) = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
        (got,) = compiled(a, b)
        np.testing.assert_array_equal(got, want, err_msg=f"a={a} b={b}")
