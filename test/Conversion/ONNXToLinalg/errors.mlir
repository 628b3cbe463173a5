// RUN: not onnx-opt %s -p convert-onnx-to-linalg 2>&1 | filecheck %s
// The pre-check reports every op that cannot be lowered, all at once, and lowers nothing.

// CHECK: convert-onnx-to-linalg: 3 problem(s), nothing lowered:
// CHECK-DAG: Reshape (opset {{[0-9]+}}, onnx.reshape){{.*}}: input 1 must be a 1-D tensor of static length
// CHECK-DAG: Det (opset {{[0-9]+}}, onnx.det){{.*}}: the matrices are not square (2x3)
// CHECK-DAG: ReduceSum (opset {{[0-9]+}}, onnx.reduce_sum){{.*}}: axes must be a constant or a 1-D tensor of static length
func.func @bad(%x: tensor<2x3xf32>, %s: tensor<?xi64>, %axes: tensor<?xi64>) -> tensor<*xf32> {
  %0 = "onnx.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "onnx.reshape"(%0, %s) : (tensor<2x3xf32>, tensor<?xi64>) -> tensor<*xf32>
  %2 = "onnx.det"(%0) : (tensor<2x3xf32>) -> tensor<*xf32>
  %3 = "onnx.reduce_sum"(%0, %axes) : (tensor<2x3xf32>, tensor<?xi64>) -> tensor<*xf32>
  return %1 : tensor<*xf32>
}
