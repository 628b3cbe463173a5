# RUN: %PYTHON %s truncated > %t.truncated.onnx
# RUN: not onnx-opt %t.truncated.onnx 2>&1 | filecheck %s --check-prefix=TRUNC
# RUN: %PYTHON %s garbage > %t.garbage.onnx
# RUN: not onnx-opt %t.garbage.onnx 2>&1 | filecheck %s --check-prefix=GARBAGE
# RUN: %PYTHON %s tensor > %t.tensor.onnx
# RUN: not onnx-opt %t.tensor.onnx 2>&1 | filecheck %s --check-prefix=TENSOR
# Truncated or corrupt protobuf and inconsistent tensor data are clear errors, not crashes.

import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])], [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])],
                          initializer=[w])  # fmt: skip
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
data = model.SerializeToString()
case = sys.argv[1]
if case == "truncated":
    data = data[: len(data) // 2]
elif case == "garbage":
    data = b"\x0a\xff\xff\xff\xff\x0fnot a model at all"
else:
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:-4]
    data = model.SerializeToString()
sys.stdout.buffer.write(data)

# TRUNC-NOT: Traceback
# TRUNC: error:
# TRUNC-SAME: .onnx'
# TRUNC: not a valid ONNX protobuf
# GARBAGE-NOT: Traceback
# GARBAGE: error:
# GARBAGE: not a valid ONNX protobuf
# TENSOR: error:
# TENSOR: initializer 'w' of graph 'g' is invalid: tensor 'w' has 20 bytes in raw_data, but shape [2, 3] of float needs 24.
