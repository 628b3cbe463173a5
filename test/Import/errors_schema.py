# RUN: %PYTHON %s arity > %t.arity.onnx
# RUN: not onnx-opt %t.arity.onnx 2>&1 | filecheck %s --check-prefix=ARITY
# RUN: %PYTHON %s attr > %t.attr.onnx
# RUN: not onnx-opt %t.attr.onnx 2>&1 | filecheck %s --check-prefix=ATTR
# RUN: %PYTHON %s unknown > %t.unknown.onnx
# RUN: not onnx-opt %t.unknown.onnx 2>&1 | filecheck %s --check-prefix=UNKNOWN
# RUN: %PYTHON %s dims > %t.dims.onnx
# RUN: not onnx-opt %t.dims.onnx 2>&1 | filecheck %s --check-prefix=DIMS
# RUN: %PYTHON %s dup > %t.dup.onnx
# RUN: not onnx-opt %t.dup.onnx 2>&1 | filecheck %s --check-prefix=DUP
# Schema checks: wrong input counts, wrong attribute types, ops that do not exist at the model's
# opset, negative and absurd dims, single assignment.

import sys

import onnx
from onnx import TensorProto as T
from onnx import helper

x = helper.make_tensor_value_info("x", T.FLOAT, [2, 3])
y = helper.make_tensor_value_info("y", T.FLOAT, [2, 3])
case = sys.argv[1]
if case == "arity":
    nodes = [helper.make_node("Add", ["x"], ["y"], name="lonely_add")]
elif case == "attr":
    nodes = [helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=1.5)]
elif case == "unknown":
    nodes = [helper.make_node("Gelu", ["x"], ["y"], name="gelu")]
elif case == "dims":
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, -3])
    y = helper.make_tensor_value_info("y", T.FLOAT, [2**30, 2**30, 2**30])
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
else:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r1"), helper.make_node("Relu", ["x"], ["y"], name="r2")]
graph = helper.make_graph(nodes, case, [x], [y])
sys.stdout.buffer.write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())

# ARITY: Node 'lonely_add' (Add, domain ai.onnx, opset 18) in graph 'arity' has 1 inputs; Add-14 takes 2.
# ATTR: Node 'cat' (Concat, domain ai.onnx, opset 18) in graph 'attr': attribute 'axis' is FLOAT, but Concat-13 wants INT.
# UNKNOWN: Node 'gelu' (Gelu, domain ai.onnx, opset 18) in graph 'unknown': Gelu has no version at opset 18 of domain 'ai.onnx' (its first version is 20).
# DIMS-DAG: The input 'x' of graph 'dims' has a negative dimension -3 at axis 1.
# DIMS-DAG: The output 'y' of graph 'dims' has shape [1073741824, 1073741824, 1073741824] with 1237940039285380274899124224 elements, more than 2^40: the dims are corrupt.
# DUP: In graph 'dup', the name 'y' is defined twice (output of node 'r1' and output of node 'r2'); values must be assigned once.
