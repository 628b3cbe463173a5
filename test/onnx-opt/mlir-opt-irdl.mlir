// REQUIRES: mlir-opt
// RUN: mlir-opt --irdl-file=%irdl_file %s | filecheck %s
// RUN: mlir-opt --irdl-file=%irdl_file %s > %t.mlir-opt && onnx-opt %s > %t.onnx-opt && diff %t.mlir-opt %t.onnx-opt
// Stock mlir-opt reads onnxc IR through the generated IRDL file and prints it as onnx-opt does.

// CHECK-LABEL: func.func @model
func.func @model(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %c: tensor<i1>, %a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> (tensor<1x4x6x6xf32>, tensor<2x6xf32>, tensor<2x3xf32>, tensor<i64>) {
  // CHECK: %[[NONE:.*]] = "onnx.none"() : () -> none
  %none = "onnx.none"() : () -> none
  // CHECK: "onnx.conv"(%arg0, %arg1, %[[NONE]]) {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, none) -> tensor<1x4x6x6xf32>
  %y = "onnx.conv"(%x, %w, %none) {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, none) -> tensor<1x4x6x6xf32>
  // CHECK: "onnx.concat"(%arg3, %arg4) {axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  %cat = "onnx.concat"(%a, %b) {axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  // CHECK: %[[IF:.*]] = "onnx.if"(%arg2) ({
  // CHECK-NEXT: "onnx.neg"(%arg3)
  // CHECK-NEXT: gpu.yield %{{.*}} : tensor<2x3xf32>
  // CHECK-NEXT: }, {
  // CHECK-NEXT: "onnx.relu"(%arg3)
  // CHECK-NEXT: gpu.yield %{{.*}} : tensor<2x3xf32>
  // CHECK-NEXT: }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<2x3xf32>
  %r = "onnx.if"(%c) ({
    %n = "onnx.neg"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    gpu.yield %n : tensor<2x3xf32>
  }, {
    %p = "onnx.relu"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    gpu.yield %p : tensor<2x3xf32>
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<2x3xf32>
  // CHECK: %[[SEQ:.*]] = "onnx.sequence_construct"(%arg3, %[[IF]]) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> !onnx.seq<tensor<2x3xf32>>
  %s = "onnx.sequence_construct"(%a, %r) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> !onnx.seq<tensor<2x3xf32>>
  // CHECK: "onnx.sequence_length"(%[[SEQ]]) : (!onnx.seq<tensor<2x3xf32>>) -> tensor<i64>
  %len = "onnx.sequence_length"(%s) : (!onnx.seq<tensor<2x3xf32>>) -> tensor<i64>
  return %y, %cat, %r, %len : tensor<1x4x6x6xf32>, tensor<2x6xf32>, tensor<2x3xf32>, tensor<i64>
}
