// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// 2-D float convolutions and pools run channels-last (conv.py, pooling.py); constant filters are
// rearranged at compile time, so no transpose of a filter is left.

// Depthwise (group = channels): HWC filter constant, linalg.depthwise_conv_2d_nhwc_hwc.
// CHECK-LABEL: func.func @depthwise
// CHECK: linalg.transpose ins(%arg0 : tensor<1x4x6x6xf32>) outs(%{{.+}} : tensor<1x6x6x4xf32>) permutation = [0, 2, 3, 1]
// CHECK: %[[W:.+]] = arith.constant dense<5.000000e-01> : tensor<3x3x4xf32>
// CHECK-NOT: linalg.transpose
// CHECK: %[[B:.+]] = linalg.broadcast ins(%{{.+}} : tensor<4xf32>) outs(%{{.+}} : tensor<1x6x6x4xf32>) dimensions = [0, 1, 2]
// CHECK: %[[Y:.+]] = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%{{.+}}, %[[W]] : tensor<1x8x8x4xf32>, tensor<3x3x4xf32>) outs(%[[B]] : tensor<1x6x6x4xf32>)
// CHECK: linalg.transpose ins(%[[Y]] : tensor<1x6x6x4xf32>) outs(%{{.+}} : tensor<1x4x6x6xf32>) permutation = [0, 3, 1, 2]
func.func @depthwise(%x: tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32> {
  %w = "onnx.constant"() {value = dense<0.5> : tensor<4x1x3x3xf32>} : () -> tensor<4x1x3x3xf32>
  %b = "onnx.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>
  %y = "onnx.conv"(%x, %w, %b) {group = 4 : i64, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  return %y : tensor<1x4x6x6xf32>
}

// -----

// Depthwise with a channel multiplier: HWCM filter, the (C, M) result dims merged to C*M.
// CHECK-LABEL: func.func @depthwise_multiplier
// CHECK: linalg.depthwise_conv_2d_nhwc_hwcm {{.+}} ins(%{{.+}}, %{{.+}} : tensor<1x5x5x2xf32>, tensor<3x3x2x3xf32>) outs(%{{.+}} : tensor<1x3x3x2x3xf32>)
// CHECK: tensor.collapse_shape %{{.+}} {{\[\[}}0], [1], [2], [3, 4]] : tensor<1x3x3x2x3xf32> into tensor<1x3x3x6xf32>
func.func @depthwise_multiplier(%x: tensor<1x2x5x5xf32>) -> tensor<1x6x3x3xf32> {
  %w = "onnx.constant"() {value = dense<1.0> : tensor<6x1x3x3xf32>} : () -> tensor<6x1x3x3xf32>
  %none = "onnx.none"() : () -> none
  %y = "onnx.conv"(%x, %w, %none) {group = 2 : i64} : (tensor<1x2x5x5xf32>, tensor<6x1x3x3xf32>, none) -> tensor<1x6x3x3xf32>
  return %y : tensor<1x6x3x3xf32>
}

// -----

// Two groups: one conv_2d_nhwc_hwcf per group on channel slices, inserted into the output.
// CHECK-LABEL: func.func @grouped
// CHECK: tensor.extract_slice %{{.+}}[0, 0, 0, 0] [1, 5, 5, 2]
// CHECK: linalg.conv_2d_nhwc_hwcf {{.+}} -> tensor<1x3x3x3xf32>
// CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[0, 0, 0, 0] [1, 3, 3, 3]
// CHECK: tensor.extract_slice %{{.+}}[0, 0, 0, 2] [1, 5, 5, 2]
// CHECK: linalg.conv_2d_nhwc_hwcf {{.+}} -> tensor<1x3x3x3xf32>
// CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[0, 0, 0, 3] [1, 3, 3, 3]
func.func @grouped(%x: tensor<1x4x5x5xf32>) -> tensor<1x6x3x3xf32> {
  %w = "onnx.constant"() {value = dense<1.0> : tensor<6x2x3x3xf32>} : () -> tensor<6x2x3x3xf32>
  %none = "onnx.none"() : () -> none
  %y = "onnx.conv"(%x, %w, %none) {group = 2 : i64} : (tensor<1x4x5x5xf32>, tensor<6x2x3x3xf32>, none) -> tensor<1x6x3x3xf32>
  return %y : tensor<1x6x3x3xf32>
}

// -----

// A filter given at run time is rearranged at run time (reshape + transpose to HWCF).
// CHECK-LABEL: func.func @runtime_filter
// CHECK: linalg.transpose ins(%{{.+}} : tensor<6x4x3x3xf32>) outs(%{{.+}} : tensor<3x3x4x6xf32>) permutation = [2, 3, 1, 0]
// CHECK: linalg.conv_2d_nhwc_hwcf
func.func @runtime_filter(%x: tensor<1x4x5x5xf32>, %w: tensor<6x4x3x3xf32>) -> tensor<1x6x3x3xf32> {
  %none = "onnx.none"() : () -> none
  %y = "onnx.conv"(%x, %w, %none) : (tensor<1x4x5x5xf32>, tensor<6x4x3x3xf32>, none) -> tensor<1x6x3x3xf32>
  return %y : tensor<1x6x3x3xf32>
}

// -----

// GlobalAveragePool reduces H and W of an NHWC view (channels innermost), then back to NCHW.
// CHECK-LABEL: func.func @global_avg
// CHECK: linalg.transpose ins(%arg0 : tensor<2x8x5x5xf32>) outs(%{{.+}} : tensor<2x5x5x8xf32>) permutation = [0, 2, 3, 1]
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction", "reduction", "parallel"]
// CHECK: linalg.transpose ins(%{{.+}} : tensor<2x1x1x8xf32>) outs(%{{.+}} : tensor<2x8x1x1xf32>) permutation = [0, 3, 1, 2]
func.func @global_avg(%x: tensor<2x8x5x5xf32>) -> tensor<2x8x1x1xf32> {
  %y = "onnx.global_average_pool"(%x) : (tensor<2x8x5x5xf32>) -> tensor<2x8x1x1xf32>
  return %y : tensor<2x8x1x1xf32>
}
