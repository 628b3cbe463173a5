// RUN: onnx-opt %s -p layout-propagation | filecheck %s

// transpose(transpose(x)) with inverse permutations is x; other pairs compose into one.
// CHECK-LABEL: func.func @pairs
// CHECK: %[[T:.+]] = linalg.transpose ins(%arg0 : tensor<2x3x4xf32>) outs(%{{.+}} : tensor<3x4x2xf32>) permutation = [1, 2, 0]
// CHECK-NOT: linalg.transpose
// CHECK: return %arg0, %[[T]]
func.func @pairs(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<3x4x2xf32>) {
  %e0 = tensor.empty() : tensor<2x4x3xf32>
  %t0 = linalg.transpose ins(%x : tensor<2x3x4xf32>) outs(%e0 : tensor<2x4x3xf32>) permutation = [0, 2, 1]
  %e1 = tensor.empty() : tensor<2x3x4xf32>
  %t1 = linalg.transpose ins(%t0 : tensor<2x4x3xf32>) outs(%e1 : tensor<2x3x4xf32>) permutation = [0, 2, 1]
  %e2 = tensor.empty() : tensor<3x4x2xf32>
  %t2 = linalg.transpose ins(%t0 : tensor<2x4x3xf32>) outs(%e2 : tensor<3x4x2xf32>) permutation = [2, 1, 0]
  return %t1, %t2 : tensor<2x3x4xf32>, tensor<3x4x2xf32>
}
