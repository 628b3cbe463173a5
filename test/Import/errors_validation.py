# RUN: %PYTHON %s > %t.onnx
# RUN: not onnx-opt %t.onnx 2>&1 | filecheck %s
# A model with three problems reports all three in one error, each naming the node (name or index),
# op type, domain and opset, and exits non-zero without a traceback.

import sys

import onnx
from onnx import TensorProto as T
from onnx import helper

nodes = [
    helper.make_node("Add", ["x", "ghost"], ["t"], name="add"),  # undefined input
    helper.make_node("Concat", ["t"], ["u"], name="cat"),  # required attribute missing
    helper.make_node("Relu", ["u"], ["y"], beta=2.0),  # unknown attribute, unnamed node
]
graph = helper.make_graph(nodes, "three", [helper.make_tensor_value_info("x", T.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2])])  # fmt: skip
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
sys.stdout.buffer.write(model.SerializeToString())

# CHECK-NOT: Traceback
# CHECK: error: model 'three' is invalid (3 problem(s))
# CHECK-DAG: Node 'add' (Add, domain ai.onnx, opset 18) in graph 'three' uses input 'ghost', which no input, initializer, node output or outer scope defines.
# CHECK-DAG: Node 'cat' (Concat, domain ai.onnx, opset 18) in graph 'three' lacks the required attribute 'axis' (INT).
# CHECK-DAG: Node #2 (Relu, domain ai.onnx, opset 18) in graph 'three' has the attribute 'beta', which Relu-14 does not define.
# CHECK-NOT: Traceback
