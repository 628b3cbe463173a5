// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// MatMul/Gemm use linalg's named ops where they fit, a contraction generic otherwise; Conv 2-D
// is linalg.conv_2d_nhwc_hwcf after explicit padding; pools are window generics.

// CHECK-LABEL: func.func @matmul_2d
// CHECK: %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<2x4xf32>)
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<2x3xf32>, tensor<3x4xf32>) outs(%[[Z]] : tensor<2x4xf32>)
func.func @matmul_2d(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = "onnx.mat_mul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// CHECK-LABEL: func.func @batch_matmul
// CHECK: linalg.batch_matmul
func.func @batch_matmul(%a: tensor<5x2x3xf32>, %b: tensor<5x3x4xf32>) -> tensor<5x2x4xf32> {
  %0 = "onnx.mat_mul"(%a, %b) : (tensor<5x2x3xf32>, tensor<5x3x4xf32>) -> tensor<5x2x4xf32>
  return %0 : tensor<5x2x4xf32>
}

// -----

// Rank 4 with equal batch dims (attention's heads): one batch_matmul over the collapsed batch.
// CHECK-LABEL: func.func @attention_scores
// CHECK: tensor.collapse_shape %{{.+}} {{\[\[}}0, 1], [2], [3]] : tensor<1x6x197x64xf32> into tensor<6x197x64xf32>
// CHECK: tensor.collapse_shape %{{.+}} {{\[\[}}0, 1], [2], [3]] : tensor<1x6x64x197xf32> into tensor<6x64x197xf32>
// CHECK: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<6x197x64xf32>, tensor<6x64x197xf32>)
// CHECK: tensor.expand_shape %{{.+}} {{\[\[}}0, 1], [2], [3]] output_shape [1, 6, 197, 197]
// CHECK-NOT: linalg.generic
func.func @attention_scores(%q: tensor<1x6x197x64xf32>, %kt: tensor<1x6x64x197xf32>) -> tensor<1x6x197x197xf32> {
  %0 = "onnx.mat_mul"(%q, %kt) : (tensor<1x6x197x64xf32>, tensor<1x6x64x197xf32>) -> tensor<1x6x197x197xf32>
  return %0 : tensor<1x6x197x197xf32>
}

// -----

// Broadcast batch dims: a generic with a reduction loop, the size-1 batch dim read at 0.
// CHECK-DAG: affine_map<(d0, d1, d2, d3, d4) -> (d0, 0, d2, d4)>
// CHECK-DAG: affine_map<(d0, d1, d2, d3, d4) -> (d1, d4, d3)>
// CHECK-LABEL: func.func @matmul_broadcast
// CHECK: iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]
// CHECK-SAME: outs(%{{.+}} : tensor<?x5x3x2xf32>)
func.func @matmul_broadcast(%a: tensor<?x1x3x4xf32>, %b: tensor<5x4x2xf32>) -> tensor<?x5x3x2xf32> {
  %0 = "onnx.mat_mul"(%a, %b) : (tensor<?x1x3x4xf32>, tensor<5x4x2xf32>) -> tensor<?x5x3x2xf32>
  return %0 : tensor<?x5x3x2xf32>
}

// -----

// CHECK-LABEL: func.func @gemm
// CHECK: linalg.transpose
// CHECK: linalg.matmul
// CHECK: arith.mulf
// CHECK: arith.addf
func.func @gemm(%a: tensor<3x2xf32>, %b: tensor<3x4xf32>, %c: tensor<4xf32>) -> tensor<2x4xf32> {
  %0 = "onnx.gemm"(%a, %b, %c) {transA = 1 : i64, alpha = 5.000000e-01 : f32} : (tensor<3x2xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// Conv runs channels-last (conv.py): NCHW -> NHWC, padding on H and W, HWCF filter, back.
// CHECK-LABEL: func.func @conv
// CHECK: linalg.transpose ins(%{{.+}} : tensor<1x3x8x8xf32>) outs(%{{.+}} : tensor<1x8x8x3xf32>) permutation = [0, 2, 3, 1]
// CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[0, 1, 1, 0] [1, 8, 8, 3] [1, 1, 1, 1] : tensor<1x8x8x3xf32> into tensor<1x10x10x3xf32>
// CHECK: linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
// CHECK-SAME: -> tensor<1x4x4x4xf32>
// CHECK: linalg.transpose ins(%{{.+}} : tensor<1x4x4x4xf32>) outs(%{{.+}} : tensor<1x4x4x4xf32>) permutation = [0, 3, 1, 2]
func.func @conv(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x4x4x4xf32> {
  %0 = "onnx.conv"(%x, %w, %b) {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
  return %0 : tensor<1x4x4x4xf32>
}

// -----

// 2-D float MaxPool runs channels-last too (pooling.py).
// CHECK-LABEL: func.func @maxpool
// CHECK: arith.constant 0xFF800000 : f32
// CHECK: linalg.transpose ins(%{{.+}} : tensor<1x3x8x8xf32>) outs(%{{.+}} : tensor<1x8x8x3xf32>) permutation = [0, 2, 3, 1]
// CHECK: linalg.pooling_nhwc_max {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
// CHECK-SAME: ins(%{{.+}}, %{{.+}} : tensor<1x8x8x3xf32>, tensor<2x2xf32>) outs(%{{.+}} : tensor<1x4x4x3xf32>)
// CHECK: linalg.transpose ins(%{{.+}} : tensor<1x4x4x3xf32>) outs(%{{.+}} : tensor<1x3x4x4xf32>) permutation = [0, 3, 1, 2]
func.func @maxpool(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  %0, %1 = "onnx.max_pool"(%x) {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x3x8x8xf32>) -> (tensor<1x3x4x4xf32>, none)
  return %0 : tensor<1x3x4x4xf32>
}
