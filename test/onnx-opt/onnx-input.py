# RUN: %PYTHON %s %t.onnx
# RUN: onnx-opt %t.onnx -p onnx-verify | filecheck %s
# RUN: not onnx-opt %t.onnx -p one-shot-bufferize 2>&1 | filecheck %s --check-prefix=FAIL
# RUN: not onnx-opt %t.onnx --split-input-file 2>&1 | filecheck %s --check-prefix=SPLIT
"""onnx-opt reads an `.onnx` model through the importer; diagnostics then name the ONNX node."""

import sys

import onnx
from onnx import TensorProto, helper

x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])
graph = helper.make_graph(
    [helper.make_node("Relu", ["X"], ["T"], name="relu0"), helper.make_node("Neg", ["T"], ["Y"], name="neg0")],
    "g",
    [x],
    [y],
)
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), sys.argv[1])

# CHECK: func.func @g(%arg0: tensor<2x3xf32> {onnx.name = "X"})
# CHECK-NEXT: %[[R:.*]] = "onnx.relu"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
# CHECK-NEXT: "onnx.neg"(%[[R]])

# FAIL: {{.*}}relu0{{.*}}: error: op was not bufferized
# FAIL: note: reproduce with: onnx-opt {{.*}}.onnx --pass-pipeline='builtin.module(one-shot-bufferize)'

# SPLIT: onnx-opt: error: --split-input-file and --verify-diagnostics need a textual .mlir input
