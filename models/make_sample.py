"""Write `models/sample.onnx`: the small CNN the README's main command compiles and runs.

A 1x3x16x16 image through Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax with random
(seeded) weights, so its numbers can be checked against onnx.reference and onnxruntime. Written
at IR version 10 / opset 21, which onnxruntime accepts (onnx 1.23 would default to IR 14).
Run `python models/make_sample.py` to regenerate; the output is deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.2, "conv_w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "conv_b")
    fc_w = numpy_helper.from_array(rng.standard_normal((8 * 8 * 8, 10)).astype(np.float32) * 0.05, "fc_w")
    fc_b = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32) * 0.1, "fc_b")
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu1"),
        helper.make_node("MaxPool", ["relu"], ["pool"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "sample_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        initializer=[w, b, fc_w, fc_b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="onnxc-sample")
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    out = Path(__file__).with_name("sample.onnx")
    onnx.save(build(), out)
    np.save(Path(__file__).with_name("sample_input.npy"), np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32))
    print(f"wrote {out}")
