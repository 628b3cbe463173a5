// RUN: onnx-opt %s -p convert-onnx-to-linalg,layout-propagation,canonicalize | filecheck %s

// Squeeze-excite (EfficientNet): a Conv's output times a per-channel scale [1, C, 1, 1] that is
// itself channels-last after propagation (GlobalAveragePool -> 1x1 Conv -> Sigmoid). When the
// Mul moves to NHWC and reads the scale's NHWC source [1, 1, 1, C], that operand keeps its
// broadcast over H and W (map (0, 0, 0, d3)), not the identity (which did not verify: an
// operand of 1x1x1x4 read by loops of 1x5x5x4).
// CHECK-DAG: #[[BCAST:.+]] = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, d3)>
// CHECK-LABEL: func.func @squeeze_excite
// CHECK: linalg.generic {indexing_maps = [#{{.+}}, #[[BCAST]], #{{.+}}]
// CHECK-SAME: ins(%{{.+}}, %{{.+}} : tensor<1x5x5x4xf32>, tensor<1x1x1x4xf32>) outs(%{{.+}} : tensor<1x5x5x4xf32>)
// CHECK: arith.mulf
// CHECK: linalg.transpose {{.+}} permutation = [0, 3, 1, 2]
func.func @squeeze_excite(%x: tensor<1x4x5x5xf32>) -> tensor<1x4x5x5xf32> {
  %w = "onnx.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> tensor<4x4x3x3xf32>
  %w1 = "onnx.constant"() {value = dense<0.25> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %none = "onnx.none"() : () -> none
  %a = "onnx.conv"(%x, %w, %none) {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x4x5x5xf32>, tensor<4x4x3x3xf32>, none) -> tensor<1x4x5x5xf32>
  %p = "onnx.global_average_pool"(%a) : (tensor<1x4x5x5xf32>) -> tensor<1x4x1x1xf32>
  %c = "onnx.conv"(%p, %w1, %none) : (tensor<1x4x1x1xf32>, tensor<4x4x1x1xf32>, none) -> tensor<1x4x1x1xf32>
  %s = "onnx.sigmoid"(%c) : (tensor<1x4x1x1xf32>) -> tensor<1x4x1x1xf32>
  %m = "onnx.mul"(%a, %s) : (tensor<1x4x5x5xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x5x5xf32>
  return %m : tensor<1x4x5x5xf32>
}
