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
