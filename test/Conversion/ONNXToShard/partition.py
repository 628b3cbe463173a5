# RUN: %PYTHON %s | filecheck %s
"""The partitioned IR of a 2-way tensor-parallel MLP for each rank (targets/distributed): each rank
holds its own weight shards as constants (W1 columns, W2 rows), computes a partial product and
all-reduces it once; lowered to LLVM the collective is an MPI_Allreduce on MPI_COMM_WORLD
(MPICH's ABI: MPI_COMM_WORLD is the constant 0x44000000) in an outlined function, with no
MPI_Comm_split per call."""

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh

from onnxc.targets.distributed import lower_distributed
from onnxc.tools.shard import tensor_parallel

w1 = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
w2 = np.arange(4 * 8, dtype=np.float32).reshape(4, 8) + 100
g = oh.make_graph([oh.make_node("MatMul", ["X", "W1"], ["H"], name="fc1"), oh.make_node("Relu", ["H"], ["R"], name="relu"),
                   oh.make_node("MatMul", ["R", "W2"], ["Y"], name="fc2")], "mlp",
                  [oh.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [2, 8])],
                  [oh.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [2, 8])],
                  [nh.from_array(w1, "W1"), nh.from_array(w2, "W2")])  # fmt: skip
model, _ = tensor_parallel(oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)]), 2)

for rank in (0, 1):
    print(f"// rank {rank}")
    print(lower_distributed(model, rank, 2, stage="partition"))
# CHECK-LABEL: // rank 0
# CHECK: func.func @mlp(%[[X:[a-z0-9]+]]: tensor<2x8xf32> {onnx.name = "X"}) -> (tensor<2x8xf32> {onnx.name = "Y"})
# W1[:, 0:2] (columns 0 and 1 of rows 0, 4, 8, ...) and W2[0:2, :] (100, 101, ...).
# CHECK-DAG: arith.constant dense<{{\[}}[0.000000e+00, 1.000000e+00], [4.000000e+00, 5.000000e+00]{{.*}}> : tensor<8x2xf32>
# CHECK-DAG: arith.constant dense<{{\[}}[1.000000e+02, 1.010000e+02{{.*}}> : tensor<2x8xf32>
# CHECK: linalg.matmul ins(%[[X]], %{{.*}} : tensor<2x8xf32>, tensor<8x2xf32>)
# CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<2x2xf32>, tensor<2x8xf32>)
# CHECK: %[[SUM:.*]] = shard.all_reduce %{{.*}} on @grid_tensor_parallel grid_axes = [0] : tensor<2x8xf32> -> tensor<2x8xf32>
# CHECK: return %[[SUM]]
# CHECK-LABEL: // rank 1
# W1[:, 2:4] and W2[2:4, :] (116 = 100 + 2 * 8).
# CHECK-DAG: arith.constant dense<{{\[}}[2.000000e+00, 3.000000e+00], [6.000000e+00, 7.000000e+00]{{.*}}> : tensor<8x2xf32>
# CHECK-DAG: arith.constant dense<{{\[}}[1.160000e+02, 1.170000e+02{{.*}}> : tensor<2x8xf32>
# CHECK: shard.all_reduce

print("// llvm")
print(lower_distributed(model, 0, 2, stage="llvm"))
# CHECK-LABEL: // llvm
# CHECK-NOT: MPI_Comm_split
# CHECK: llvm.func @onnxc_collective_0(
# CHECK: llvm.mlir.constant(1140850688 : i64)
# CHECK: llvm.call @MPI_Allreduce
