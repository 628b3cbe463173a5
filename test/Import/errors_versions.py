# RUN: %PYTHON %s ir > %t.ir.onnx
# RUN: not onnx-opt %t.ir.onnx 2>&1 | filecheck %s --check-prefix=IR
# RUN: %PYTHON %s opset > %t.opset.onnx
# RUN: not onnx-opt %t.opset.onnx 2>&1 | filecheck %s --check-prefix=OPSET
# RUN: %PYTHON %s old > %t.old.onnx
# RUN: not onnx-opt %t.old.onnx 2>&1 | filecheck %s --check-prefix=OLD
# An IR version or opset newer than the installed onnx is an error, never a silent guess; so is an
# IR version older than 3.

import sys

import onnx
from onnx import TensorProto as T
from onnx import helper

graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2])], [helper.make_tensor_value_info("y", T.FLOAT, [2])])  # fmt: skip
case = sys.argv[1]
opset = onnx.defs.onnx_opset_version() + (5 if case == "opset" else 0)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
if case == "ir":
    model.ir_version = onnx.IR_VERSION + 7
if case == "old":
    model.ir_version = 2
sys.stdout.buffer.write(model.SerializeToString())

# IR: error:
# IR: IR version {{[0-9]+}}
# IR: allow_newer_opset=True
# OPSET: error:
# OPSET: {{.*}}opset {{[0-9]+}}{{.*}}newer than the installed schemas
# OLD: error:
# OLD: IR version 2
