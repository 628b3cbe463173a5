// RUN: onnx-opt %s --split-input-file -p onnx-canonicalize | filecheck %s

// Constant spellings become `value`.
// CHECK-LABEL: func.func @constants
// CHECK-DAG: "onnx.constant"() {value = dense<1.500000e+00> : tensor<f32>} : () -> tensor<f32>
// CHECK-DAG: "onnx.constant"() {value = dense<[1, 2, 3]> : tensor<3xi64>} : () -> tensor<3xi64>
// CHECK-DAG: "onnx.constant"() {value = dense<7> : tensor<i64>} : () -> tensor<i64>
// CHECK-DAG: "onnx.constant"() {value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>} : () -> tensor<2xf32>
// CHECK-NOT: value_
func.func @constants() -> (tensor<f32>, tensor<3xi64>, tensor<i64>, tensor<2xf32>) {
  %0 = "onnx.constant"() {value_float = 1.5 : f32} : () -> tensor<f32>
  %1 = "onnx.constant"() {value_ints = array<i64: 1, 2, 3>} : () -> tensor<3xi64>
  %2 = "onnx.constant"() {value_int = 7 : i64} : () -> tensor<i64>
  %3 = "onnx.constant"() {value_floats = array<f32: 1.0, 2.0>} : () -> tensor<2xf32>
  return %0, %1, %2, %3 : tensor<f32>, tensor<3xi64>, tensor<i64>, tensor<2xf32>
}

// -----

// Identity, inference-mode Dropout, Cast to the same type and an identity Transpose disappear;
// so does the dead Relu chain. One onnx.none remains, first in the function.
// CHECK-LABEL: func.func @noops
// CHECK-NEXT: %[[N:.*]] = "onnx.none"
// CHECK-NEXT: %[[C:.*]] = "onnx.conv"(%arg0, %arg1, %[[N]])
// CHECK-NEXT: return %[[C]]
func.func @noops(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x1x1xf32>) -> tensor<1x1x4x4xf32> {
  %i = "onnx.identity"(%x) : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %n0 = "onnx.none"() : () -> none
  %d:2 = "onnx.dropout"(%i, %n0, %n0) : (tensor<1x1x4x4xf32>, none, none) -> (tensor<1x1x4x4xf32>, none)
  %c = "onnx.cast"(%d#0) {to = 1 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %t = "onnx.transpose"(%c) {perm = array<i64: 0, 1, 2, 3>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %dead = "onnx.relu"(%t) : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %dead2 = "onnx.sigmoid"(%dead) : (tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %n1 = "onnx.none"() : () -> none
  %conv = "onnx.conv"(%t, %w, %n1) : (tensor<1x1x4x4xf32>, tensor<1x1x1x1xf32>, none) -> tensor<1x1x4x4xf32>
  return %conv : tensor<1x1x4x4xf32>
}

// -----

// Dropout in training mode and custom ops stay; a Cast that changes the type stays.
// CHECK-LABEL: func.func @kept
// CHECK: "onnx.dropout"
// CHECK: "onnx.cast"
// CHECK: "onnx.custom"
func.func @kept(%x: tensor<4xf32>, %r: tensor<f32>, %t: tensor<i1>) -> (tensor<4xf32>, tensor<4xf16>) {
  %d:2 = "onnx.dropout"(%x, %r, %t) : (tensor<4xf32>, tensor<f32>, tensor<i1>) -> (tensor<4xf32>, none)
  %c = "onnx.cast"(%x) {to = 10 : i64} : (tensor<4xf32>) -> tensor<4xf16>
  "onnx.custom"(%x) {domain = "com.example", op_type = "Print", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> ()
  return %d#0, %c : tensor<4xf32>, tensor<4xf16>
}

// -----

// A used Dropout mask becomes all-true of the data's shape.
// CHECK-LABEL: func.func @mask
// CHECK: %[[S:.*]] = "onnx.shape"(%arg0)
// CHECK: %[[M:.*]] = "onnx.constant_of_shape"(%[[S]]) {value = dense<true> : tensor<1xi1>}
// CHECK: return %arg0, %[[M]]
func.func @mask(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>) {
  %n = "onnx.none"() : () -> none
  %d:2 = "onnx.dropout"(%x, %n, %n) : (tensor<4xf32>, none, none) -> (tensor<4xf32>, tensor<4xi1>)
  return %d#0, %d#1 : tensor<4xf32>, tensor<4xi1>
}

// -----

// An If with a constant condition becomes the ops of the branch it takes.
// CHECK-LABEL: func.func @constant_if
// CHECK-NOT: "onnx.if"
// CHECK: %[[R:.*]] = "onnx.relu"(%arg0)
// CHECK-NOT: "onnx.neg"
// CHECK: return %[[R]]
func.func @constant_if(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = "onnx.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
  %r = "onnx.if"(%c) ({
    %0 = "onnx.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    gpu.yield %0 : tensor<4xf32>
  }, {
    %1 = "onnx.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    gpu.yield %1 : tensor<4xf32>
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Identical constants in a block become one.
// CHECK-LABEL: func.func @shared_constants
// CHECK: %[[C:.*]] = "onnx.constant"() {value = dense<[1, 2]> : tensor<2xi64>}
// CHECK-NEXT: "onnx.add"(%arg0, %[[C]])
// CHECK-NEXT: "onnx.mul"(%arg0, %[[C]])
// CHECK-NOT: dense<[1, 2]>
func.func @shared_constants(%x: tensor<2xi64>) -> (tensor<2xi64>, tensor<2xi64>) {
  %0 = "onnx.constant"() {value = dense<[1, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %a = "onnx.add"(%x, %0) : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  %1 = "onnx.constant"() {value = dense<[1, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %b = "onnx.mul"(%x, %1) : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %a, %b : tensor<2xi64>, tensor<2xi64>
}
