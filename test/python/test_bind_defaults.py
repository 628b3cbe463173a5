"""Inputs with an initializer: compiled as constants, overridable through the general function.

`onnxc.compile` binds graph inputs that have an initializer to their initializer
(`onnx-bind-default-inputs`), so weights that an IR-3 model lists as inputs are packed at compile
time; a call that gives such an input runs the general function (arguments kept), compiled on the
first such call. Results are checked against `onnx.reference` with the same feeds.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxc


def _model(ir_version: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=ir_version)


@pytest.mark.parametrize("ir_version", [3, 8])
def test_defaults_bound_and_overridable(ir_version: int) -> None:
    m = _model(ir_version)
    ref = ReferenceEvaluator(m)
    c = onnxc.compile(m, cache_dir=False)
    assert c.bound == ("w", "b")
    # The compiled function takes x alone: w and b are constants of its code.
    assert len(c.function.signature.inputs) == 1
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    (y,) = c(x)
    np.testing.assert_allclose(y, ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert c._general is None  # nothing overridden yet: the general function was not compiled
    # Overriding an initializer, by name and positionally, runs the general function.
    b2 = np.arange(4, dtype=np.float32)
    (y2,) = c(x, b=b2)
    np.testing.assert_allclose(y2, ref.run(None, {"x": x, "b": b2})[0], rtol=1e-5, atol=1e-6)
    assert c._general is not None and len(c._general.signature.inputs) == 3
    w2 = np.ones((8, 4), np.float32)
    (y3,) = c(x, w2)
    np.testing.assert_allclose(y3, ref.run(None, {"x": x, "w": w2})[0], rtol=1e-5, atol=1e-6)
    # And the defaults again, through the bound function.
    np.testing.assert_allclose(c(x=x)[0], y, rtol=0, atol=0)


def test_override_is_checked_like_any_input() -> None:
    c = onnxc.compile(_model(8), cache_dir=False)
    x = np.zeros((3, 8), np.float32)
    with pytest.raises(onnxc.compiler.InputError, match="'b' dim 0 must be 4"):
        c(x, b=np.zeros((5,), np.float32))
