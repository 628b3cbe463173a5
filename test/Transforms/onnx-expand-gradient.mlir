// RUN: onnx-opt %s --split-input-file -p onnx-expand-gradient | filecheck %s

// d = s * a with s = a + b: the gradient of s is seed * a, of a directly seed * s, so
// dd/da = seed * s + seed * a (summed with Add) and dd/db = seed * a. The seed is ones shaped
// like d (Expand of 1 to Shape(d)); the Gradient op is gone.
// CHECK-LABEL: func.func @add_mul
// CHECK: %[[S:.*]] = "onnx.add"(%arg0, %arg1)
// CHECK: %[[D:.*]] = "onnx.mul"(%[[S]], %arg0)
// CHECK: %[[SHAPE:.*]] = "onnx.shape"(%[[D]])
// CHECK: %[[SEED:.*]] = "onnx.expand"(%{{.*}}, %[[SHAPE]])
// CHECK: %[[GS:.*]] = "onnx.mul"(%[[SEED]], %arg0)
// CHECK: %[[GA:.*]] = "onnx.mul"(%[[SEED]], %[[S]])
// CHECK: %[[SUM:.*]] = "onnx.add"(%[[GA]], %[[GS]])
// CHECK-NOT: onnx_training.gradient
// CHECK: return %[[D]], %[[SUM]], %[[GS]]
func.func @add_mul(%a: tensor<f32> {onnx.name = "a"}, %b: tensor<f32> {onnx.name = "b"}) -> (tensor<f32> {onnx.name = "d"}, tensor<f32> {onnx.name = "dd_da"}, tensor<f32> {onnx.name = "dd_db"}) {
  %s = "onnx.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %d = "onnx.mul"(%s, %a) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %g:2 = "onnx_training.gradient"(%a, %b) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, xs = ["a", "b"], y = "d"} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %d, %g#0, %g#1 : tensor<f32>, tensor<f32>, tensor<f32>
}

// -----

// A broadcast operand's gradient is summed back to its shape: ReduceSum over axis 0, Reshape to [3].
// CHECK-LABEL: func.func @broadcast_add
// CHECK: %[[R:.*]] = "onnx.reduce_sum"(%{{.*}}, %{{.*}}) {keepdims = 1 : i64}
// CHECK: %[[GB:.*]] = "onnx.reshape"(%[[R]], %{{.*}}) {{.*}} -> tensor<3xf32>
// CHECK: return %{{.*}}, %[[GB]]
func.func @broadcast_add(%a: tensor<2x3xf32> {onnx.name = "a"}, %b: tensor<3xf32> {onnx.name = "b"}) -> (tensor<2x3xf32> {onnx.name = "y"}, tensor<3xf32> {onnx.name = "dy_db"}) {
  %y = "onnx.add"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %g = "onnx_training.gradient"(%b) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, xs = ["b"], y = "y"} : (tensor<3xf32>) -> tensor<3xf32>
  return %y, %g : tensor<2x3xf32>, tensor<3xf32>
}
