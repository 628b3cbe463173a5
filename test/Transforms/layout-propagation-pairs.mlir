// RUN: onnx-opt %s --split-input-file -p layout-propagation | filecheck %s

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

// -----

// Left alone: a generic that reads loop indices (they would change meaning), and one with another
// full-size operand in the old layout (it would be read across the new one).
// CHECK-LABEL: func.func @kept
// CHECK: %[[T:.+]] = linalg.transpose
// CHECK: linalg.generic {{.+}} ins(%[[T]] : tensor<3x2xf32>)
// CHECK: linalg.index 0
// CHECK: linalg.generic {{.+}} ins(%[[T]], %arg1 : tensor<3x2xf32>, tensor<3x2xf32>)
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @kept(%x: tensor<2x3xf32>, %y: tensor<3x2xf32>) -> (tensor<3x2xf32>, tensor<3x2xf32>) {
  %e = tensor.empty() : tensor<3x2xf32>
  %t = linalg.transpose ins(%x : tensor<2x3xf32>) outs(%e : tensor<3x2xf32>) permutation = [1, 0]
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%t : tensor<3x2xf32>) outs(%e : tensor<3x2xf32>) {
  ^bb0(%in: f32, %out: f32):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i32
    %f = arith.sitofp %c : i32 to f32
    %s = arith.addf %in, %f : f32
    linalg.yield %s : f32
  } -> tensor<3x2xf32>
  %b = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%t, %y : tensor<3x2xf32>, tensor<3x2xf32>) outs(%e : tensor<3x2xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %s = arith.addf %in, %in2 : f32
    linalg.yield %s : f32
  } -> tensor<3x2xf32>
  return %a, %b : tensor<3x2xf32>, tensor<3x2xf32>
}
