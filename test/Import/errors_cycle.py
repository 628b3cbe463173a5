# RUN: %PYTHON %s > %t.onnx
# RUN: not onnx-opt %t.onnx 2>&1 | filecheck %s
# Nodes given out of order are sorted; a real cycle is an error that names the nodes on it.

import sys

from onnx import TensorProto as T
from onnx import helper

nodes = [
    helper.make_node("Relu", ["x"], ["a"], name="start"),
    helper.make_node("Add", ["a", "c"], ["b"], name="join"),
    helper.make_node("Neg", ["b"], ["c"], name="back"),
    helper.make_node("Identity", ["b"], ["y"], name="out"),
]
graph = helper.make_graph(nodes, "loopy", [helper.make_tensor_value_info("x", T.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2])])  # fmt: skip
sys.stdout.buffer.write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())

# CHECK-NOT: Traceback
# CHECK: error:
# CHECK: In graph 'loopy', these nodes depend on each other in a cycle: node 'join' [Add] -> node 'back' [Neg] -> node 'join' [Add].
