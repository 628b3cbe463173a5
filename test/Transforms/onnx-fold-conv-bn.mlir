// RUN: onnx-opt %s --split-input-file -p onnx-fold-conv-bn,onnx-canonicalize | filecheck %s

// Conv -> BatchNormalization: s = scale / sqrt(var + eps) = 4 / sqrt(3 + 1) = 2, so the weights
// double and the bias becomes (b - mean) * s + B = (3 - 1) * 2 + 0.5 = 4.5; the BN is gone and the
// old weights with it.
// CHECK-LABEL: func.func @conv_bn
// CHECK-DAG: %[[W:.*]] = "onnx.constant"() {value = dense<2.000000e+00> : tensor<1x1x3x3xf32>}
// CHECK-DAG: %[[B:.*]] = "onnx.constant"() {value = dense<4.500000e+00> : tensor<1xf32>}
// CHECK: %[[C:.*]] = "onnx.conv"(%arg0, %[[W]], %[[B]])
// CHECK-NOT: onnx.batch_normalization
// CHECK: return %[[C]]
func.func @conv_bn(%x: tensor<1x1x5x5xf32>) -> tensor<1x1x3x3xf32> {
  %w = "onnx.constant"() {value = dense<1.0> : tensor<1x1x3x3xf32>} : () -> tensor<1x1x3x3xf32>
  %b = "onnx.constant"() {value = dense<3.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %scale = "onnx.constant"() {value = dense<4.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %shift = "onnx.constant"() {value = dense<0.5> : tensor<1xf32>} : () -> tensor<1xf32>
  %mean = "onnx.constant"() {value = dense<1.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %var = "onnx.constant"() {value = dense<3.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %c = "onnx.conv"(%x, %w, %b) : (tensor<1x1x5x5xf32>, tensor<1x1x3x3xf32>, tensor<1xf32>) -> tensor<1x1x3x3xf32>
  %y, %rm, %rv = "onnx.batch_normalization"(%c, %scale, %shift, %mean, %var) {epsilon = 1.0 : f32} : (tensor<1x1x3x3xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) -> (tensor<1x1x3x3xf32>, none, none)
  return %y : tensor<1x1x3x3xf32>
}

// -----

// Per-channel Mul then Add by constants (no bias on the Conv): weights scaled per output
// channel, the bias is the added constant.
// CHECK-LABEL: func.func @conv_mul_add
// CHECK-DAG: %[[W:.*]] = "onnx.constant"() {value = dense<{{\[\[\[\[}}2.000000e+00]]], {{\[\[\[}}-3.000000e+00]]]]> : tensor<2x1x1x1xf32>}
// CHECK-DAG: %[[B:.*]] = "onnx.constant"() {value = dense<[5.000000e-01, 2.500000e-01]> : tensor<2xf32>}
// CHECK: %[[C:.*]] = "onnx.conv"(%arg0, %[[W]], %[[B]])
// CHECK-NOT: onnx.mul
// CHECK-NOT: onnx.add
// CHECK: return %[[C]]
func.func @conv_mul_add(%x: tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = "onnx.constant"() {value = dense<1.0> : tensor<2x1x1x1xf32>} : () -> tensor<2x1x1x1xf32>
  %none = "onnx.none"() : () -> none
  %k = "onnx.constant"() {value = dense<[[[2.0]], [[-3.0]]]> : tensor<2x1x1xf32>} : () -> tensor<2x1x1xf32>
  %a = "onnx.constant"() {value = dense<[[[[0.5]], [[0.25]]]]> : tensor<1x2x1x1xf32>} : () -> tensor<1x2x1x1xf32>
  %c = "onnx.conv"(%x, %w, %none) : (tensor<1x1x4x4xf32>, tensor<2x1x1x1xf32>, none) -> tensor<1x2x4x4xf32>
  %m = "onnx.mul"(%k, %c) : (tensor<2x1x1xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %s = "onnx.add"(%m, %a) : (tensor<1x2x4x4xf32>, tensor<1x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  return %s : tensor<1x2x4x4xf32>
}

// -----

// Not folded: the Conv's result has another use, a training-mode BN, a constant that varies
// along a spatial dim.
// CHECK-LABEL: func.func @not_folded
// CHECK: onnx.batch_normalization
// CHECK: onnx.mul
// CHECK: onnx.add
func.func @not_folded(%x: tensor<1x1x4x4xf32>) -> (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) {
  %w = "onnx.constant"() {value = dense<1.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %p = "onnx.constant"() {value = dense<1.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %k = "onnx.constant"() {value = dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>} : () -> tensor<1x4xf32>
  %none = "onnx.none"() : () -> none
  %c1 = "onnx.conv"(%x, %w, %none) : (tensor<1x1x4x4xf32>, tensor<1x1x1x1xf32>, none) -> tensor<1x1x4x4xf32>
  %y, %rm, %rv = "onnx.batch_normalization"(%c1, %p, %p, %p, %p) {training_mode = 1 : i64} : (tensor<1x1x4x4xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) -> (tensor<1x1x4x4xf32>, tensor<1xf32>, tensor<1xf32>)
  %c2 = "onnx.conv"(%x, %w, %none) : (tensor<1x1x4x4xf32>, tensor<1x1x1x1xf32>, none) -> tensor<1x1x4x4xf32>
  %m = "onnx.mul"(%c2, %k) : (tensor<1x1x4x4xf32>, tensor<1x4xf32>) -> tensor<1x1x4x4xf32>
  %c3 = "onnx.conv"(%x, %w, %none) : (tensor<1x1x4x4xf32>, tensor<1x1x1x1xf32>, none) -> tensor<1x1x4x4xf32>
  %a = "onnx.add"(%c3, %p) : (tensor<1x1x4x4xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  return %y, %m, %a, %c3 : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>
}

// -----

// The folded op's result type is kept where it is the more precise one (a function result must
// not lose the static shape shape inference gave it).
// CHECK-LABEL: func.func @refined
// CHECK: %[[C:.*]] = "onnx.conv"({{.*}}) -> tensor<1x1x4x4xf32>
// CHECK-NEXT: return %[[C]] : tensor<1x1x4x4xf32>
func.func @refined(%x: tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32> {
  %w = "onnx.constant"() {value = dense<1.0> : tensor<1x1x1x1xf32>} : () -> tensor<1x1x1x1xf32>
  %k = "onnx.constant"() {value = dense<2.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %none = "onnx.none"() : () -> none
  %c = "onnx.conv"(%x, %w, %none) : (tensor<1x1x4x4xf32>, tensor<1x1x1x1xf32>, none) -> tensor<?x?x?x?xf32>
  %y = "onnx.add"(%c, %k) : (tensor<?x?x?x?xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  return %y : tensor<1x1x4x4xf32>
}
