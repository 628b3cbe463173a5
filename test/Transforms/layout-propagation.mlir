// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg,layout-propagation,canonicalize | filecheck %s

// Conv -> Relu -> Conv: each Conv is lowered channels-last between two transposes; the pass
// pushes the first Conv's NHWC -> NCHW transpose through the Relu, where it meets the second
// Conv's NCHW -> NHWC transpose and both vanish. One transpose is left at each boundary.
// CHECK-LABEL: func.func @conv_relu_conv
// CHECK: linalg.transpose ins(%arg0 : tensor<1x4x6x6xf32>) outs(%{{.+}} : tensor<1x6x6x4xf32>) permutation = [0, 2, 3, 1]
// CHECK-NOT: linalg.transpose
// CHECK: %[[C1:.+]] = linalg.conv_2d_nhwc_hwcf
// CHECK-NOT: linalg.transpose
// CHECK: %[[R:.+]] = linalg.generic
// CHECK-SAME: ins(%[[C1]] : tensor<1x6x6x4xf32>) outs(%{{.+}} : tensor<1x6x6x4xf32>)
// CHECK: arith.maximumf
// CHECK-NOT: linalg.transpose
// CHECK: tensor.insert_slice %[[R]]
// CHECK-NOT: linalg.transpose
// CHECK: %[[C2:.+]] = linalg.conv_2d_nhwc_hwcf
// CHECK: %[[OUT:.+]] = linalg.transpose ins(%[[C2]] : tensor<1x6x6x4xf32>) outs(%{{.+}} : tensor<1x4x6x6xf32>) permutation = [0, 3, 1, 2]
// CHECK-NEXT: return %[[OUT]]
func.func @conv_relu_conv(%x: tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32> {
  %w = "onnx.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> tensor<4x4x3x3xf32>
  %b = "onnx.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>
  %none = "onnx.none"() : () -> none
  %c1 = "onnx.conv"(%x, %w, %b) {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  %r = "onnx.relu"(%c1) : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %c2 = "onnx.conv"(%r, %w, %none) {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, none) -> tensor<1x4x6x6xf32>
  return %c2 : tensor<1x4x6x6xf32>
}

// -----

// A residual Add of two channels-last values (and a per-channel bias read through a permuted
// map) runs channels-last as well: the Add's operands are the Conv results themselves.
// CHECK-LABEL: func.func @residual
// CHECK: %[[A:.+]] = linalg.conv_2d_nhwc_hwcf
// CHECK: %[[B:.+]] = linalg.conv_2d_nhwc_hwcf
// CHECK-NOT: linalg.transpose
// CHECK: linalg.generic {{.+}} ins(%[[A]], %[[B]] : tensor<1x5x5x2xf32>, tensor<1x5x5x2xf32>) outs(%{{.+}} : tensor<1x5x5x2xf32>)
// CHECK: arith.addf
// CHECK: linalg.transpose {{.+}} permutation = [0, 3, 1, 2]
func.func @residual(%x: tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32> {
  %w = "onnx.constant"() {value = dense<0.5> : tensor<2x2x3x3xf32>} : () -> tensor<2x2x3x3xf32>
  %none = "onnx.none"() : () -> none
  %a = "onnx.conv"(%x, %w, %none) {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x5xf32>, tensor<2x2x3x3xf32>, none) -> tensor<1x2x5x5xf32>
  %b = "onnx.conv"(%a, %w, %none) {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x5xf32>, tensor<2x2x3x3xf32>, none) -> tensor<1x2x5x5xf32>
  %s = "onnx.add"(%a, %b) : (tensor<1x2x5x5xf32>, tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32>
  return %s : tensor<1x2x5x5xf32>
}

// -----

// A channel Concat of two Convs (SqueezeNet's fire module, Inception) is done channels-last:
// the slices go into an NHWC tensor at channel offsets, and the next Conv reads it directly.
// CHECK-LABEL: func.func @concat
// CHECK: %[[A:.+]] = linalg.conv_2d_nhwc_hwcf {{.+}} -> tensor<1x5x5x2xf32>
// CHECK: %[[B:.+]] = linalg.conv_2d_nhwc_hwcf {{.+}} -> tensor<1x5x5x4xf32>
// CHECK: %[[E:.+]] = tensor.empty() : tensor<1x5x5x6xf32>
// CHECK: %[[S1:.+]] = tensor.insert_slice %[[A]] into %[[E]][0, 0, 0, 0] [1, 5, 5, 2] [1, 1, 1, 1]
// CHECK: %[[S2:.+]] = tensor.insert_slice %[[B]] into %[[S1]][0, 0, 0, 2] [1, 5, 5, 4] [1, 1, 1, 1]
// CHECK-NOT: linalg.transpose
// CHECK: %[[P:.+]] = tensor.insert_slice %[[S2]]
// CHECK-NOT: linalg.transpose
// CHECK: linalg.conv_2d_nhwc_hwcf {{.+}} ins(%[[P]]
// CHECK: linalg.transpose {{.+}} permutation = [0, 3, 1, 2]
func.func @concat(%x: tensor<1x3x5x5xf32>) -> tensor<1x1x5x5xf32> {
  %w1 = "onnx.constant"() {value = dense<0.5> : tensor<2x3x1x1xf32>} : () -> tensor<2x3x1x1xf32>
  %w2 = "onnx.constant"() {value = dense<0.25> : tensor<4x3x1x1xf32>} : () -> tensor<4x3x1x1xf32>
  %w3 = "onnx.constant"() {value = dense<1.0> : tensor<1x6x3x3xf32>} : () -> tensor<1x6x3x3xf32>
  %none = "onnx.none"() : () -> none
  %a = "onnx.conv"(%x, %w1, %none) {pads = array<i64: 0, 0, 0, 0>, kernel_shape = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x3x5x5xf32>, tensor<2x3x1x1xf32>, none) -> tensor<1x2x5x5xf32>
  %b = "onnx.conv"(%x, %w2, %none) {pads = array<i64: 0, 0, 0, 0>, kernel_shape = array<i64: 1, 1>, dilations = array<i64: 2, 2>} : (tensor<1x3x5x5xf32>, tensor<4x3x1x1xf32>, none) -> tensor<1x4x5x5xf32>
  %c = "onnx.concat"(%a, %b) {axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x2x5x5xf32>, tensor<1x4x5x5xf32>) -> tensor<1x6x5x5xf32>
  %y = "onnx.conv"(%c, %w3, %none) {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x6x5x5xf32>, tensor<1x6x3x3xf32>, none) -> tensor<1x1x5x5xf32>
  return %y : tensor<1x1x5x5xf32>
}
