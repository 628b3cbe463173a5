# RUN: %PYTHON %s %t.onnx && onnx-opt %t.onnx -p onnx-to-shard 2>&1 | filecheck %s
"""`onnx-opt -p onnx-to-shard` on a model file (no `onnxc.io_names` metadata): spec tensor names
are matched through graph input names, initializer locations and graph output names."""

import sys

import numpy as np
import onnx.helper as oh
import onnx.numpy_helper as nh
from onnx import TensorProto, save

from onnxc.tools.shard import tensor_parallel

rng = np.random.default_rng(0)
g = oh.make_graph([oh.make_node("MatMul", ["X", "W1"], ["H"], name="up"), oh.make_node("Relu", ["H"], ["R"], name="act"),
                   oh.make_node("MatMul", ["R", "W2"], ["Y"], name="down")], "ffn",
                  [oh.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])],
                  [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])],
                  [nh.from_array(rng.standard_normal((4, 8)).astype(np.float32), "W1"),
                   nh.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W2")])  # fmt: skip
model, _ = tensor_parallel(oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)]), 2)
save(model, sys.argv[1])
# CHECK-NOT: Warning
# CHECK: shard.grid @grid_tensor_parallel(shape = 2)
# CHECK: shard.shard %{{.*}} annotate_for_users : tensor<4x8xf32>
# CHECK: "onnx.mat_mul"
# CHECK: shard.shard %{{.*}} annotate_for_users : tensor<8x4xf32>
# CHECK: %[[Y:.*]] = "onnx.mat_mul"
# CHECK: %[[S:.*]] = shard.sharding @grid_tensor_parallel split_axes = {{\[}}[]]
# CHECK: %[[A:.*]] = shard.shard %[[Y]] to %[[S]] annotate_for_users : tensor<2x4xf32>
# CHECK: return %[[A]]
