// RUN: onnx-opt %s --split-input-file -p layout-propagation | filecheck %s

// A ShuffleNet channel shuffle between channels-last layers: NHWC -> NCHW, Reshape [N, g, C/g, H, W],
// Transpose of the two channel factors, Reshape back, NCHW -> NHWC. The first transpose moves down
// through the expand and folds with the shuffle; the last moves up through the collapse and folds
// too: one transpose of the channels-last view [N, H, W, g, C/g] is left.
// CHECK-LABEL: func.func @channel_shuffle
// CHECK: %[[E:.+]] = tensor.expand_shape %arg0 {{\[\[}}0], [1], [2], [3, 4]] output_shape [1, 2, 3, 4, 6] : tensor<1x2x3x24xf32> into tensor<1x2x3x4x6xf32>
// CHECK: %[[T:.+]] = linalg.transpose ins(%[[E]] : tensor<1x2x3x4x6xf32>) outs(%{{.+}} : tensor<1x2x3x6x4xf32>) permutation = [0, 1, 2, 4, 3]
// CHECK: %[[C:.+]] = tensor.collapse_shape %[[T]] {{\[\[}}0], [1], [2], [3, 4]] : tensor<1x2x3x6x4xf32> into tensor<1x2x3x24xf32>
// CHECK-NOT: linalg.transpose
// CHECK: return %[[C]]
func.func @channel_shuffle(%x: tensor<1x2x3x24xf32>) -> tensor<1x2x3x24xf32> {
  %e0 = tensor.empty() : tensor<1x24x2x3xf32>
  %nchw = linalg.transpose ins(%x : tensor<1x2x3x24xf32>) outs(%e0 : tensor<1x24x2x3xf32>) permutation = [0, 3, 1, 2]
  %split = tensor.expand_shape %nchw [[0], [1, 2], [3], [4]] output_shape [1, 4, 6, 2, 3] : tensor<1x24x2x3xf32> into tensor<1x4x6x2x3xf32>
  %e1 = tensor.empty() : tensor<1x6x4x2x3xf32>
  %shuffled = linalg.transpose ins(%split : tensor<1x4x6x2x3xf32>) outs(%e1 : tensor<1x6x4x2x3xf32>) permutation = [0, 2, 1, 3, 4]
  %merged = tensor.collapse_shape %shuffled [[0], [1, 2], [3], [4]] : tensor<1x6x4x2x3xf32> into tensor<1x24x2x3xf32>
  %e2 = tensor.empty() : tensor<1x2x3x24xf32>
  %nhwc = linalg.transpose ins(%merged : tensor<1x24x2x3xf32>) outs(%e2 : tensor<1x2x3x24xf32>) permutation = [0, 2, 3, 1]
  return %nhwc : tensor<1x2x3x24xf32>
}

// -----

// Left alone: an expand whose result no transpose consumes (moving the transpose would not fold it
// away), and a collapse of a value that is not a transpose.
// CHECK-LABEL: func.func @no_fold
// CHECK: %[[T:.+]] = linalg.transpose ins(%arg0 : tensor<1x2x3x24xf32>)
// CHECK: tensor.expand_shape %[[T]]
// CHECK: %[[C:.+]] = tensor.collapse_shape %arg1
// CHECK: linalg.transpose ins(%[[C]] : tensor<1x24x2x3xf32>)
func.func @no_fold(%x: tensor<1x2x3x24xf32>, %y: tensor<1x4x6x2x3xf32>) -> (tensor<1x4x6x2x3xf32>, tensor<1x2x3x24xf32>) {
  %e0 = tensor.empty() : tensor<1x24x2x3xf32>
  %nchw = linalg.transpose ins(%x : tensor<1x2x3x24xf32>) outs(%e0 : tensor<1x24x2x3xf32>) permutation = [0, 3, 1, 2]
  %split = tensor.expand_shape %nchw [[0], [1, 2], [3], [4]] output_shape [1, 4, 6, 2, 3] : tensor<1x24x2x3xf32> into tensor<1x4x6x2x3xf32>
  %merged = tensor.collapse_shape %y [[0], [1, 2], [3], [4]] : tensor<1x4x6x2x3xf32> into tensor<1x24x2x3xf32>
  %e2 = tensor.empty() : tensor<1x2x3x24xf32>
  %nhwc = linalg.transpose ins(%merged : tensor<1x24x2x3xf32>) outs(%e2 : tensor<1x2x3x24xf32>) permutation = [0, 2, 3, 1]
  return %split, %nhwc : tensor<1x4x6x2x3xf32>, tensor<1x2x3x24xf32>
}

// -----

// An elementwise op of a transposed value and a [1, 1, H, W] operand (an AveragePool's divisor)
// runs in the transpose's source layout: the operand's non-unit dims keep their order, so it is
// read as a broadcast over channels there, not across the layout.
// CHECK-LABEL: func.func @unit_channel_operand
// (The transposed value is computed: a model input's boundary transpose is never pushed.)
// CHECK: %[[X:.+]] = linalg.fill
// CHECK: %[[D:.+]] = linalg.generic {indexing_maps = [#{{.+}}, #[[BC:.+]], #{{.+}}]{{.+}} ins(%[[X]], %arg0 : tensor<1x2x3x4xf32>, tensor<1x1x2x3xf32>)
// CHECK: linalg.transpose ins(%[[D]] : tensor<1x2x3x4xf32>)
#m0 = affine_map<(d0, d1, d2, d3) -> (0, d1, d2, d3)>
#m1 = affine_map<(d0, d1, d2, d3) -> (0, 0, d2, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @unit_channel_operand(%n: tensor<1x1x2x3xf32>, %v: f32) -> tensor<1x4x2x3xf32> {
  %ex = tensor.empty() : tensor<1x2x3x4xf32>
  %x = linalg.fill ins(%v : f32) outs(%ex : tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %e0 = tensor.empty() : tensor<1x4x2x3xf32>
  %t = linalg.transpose ins(%x : tensor<1x2x3x4xf32>) outs(%e0 : tensor<1x4x2x3xf32>) permutation = [0, 3, 1, 2]
  %e1 = tensor.empty() : tensor<1x4x2x3xf32>
  %d = linalg.generic {indexing_maps = [#m0, #m1, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%t, %n : tensor<1x4x2x3xf32>, tensor<1x1x2x3xf32>) outs(%e1 : tensor<1x4x2x3xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %q = arith.divf %a, %b : f32
    linalg.yield %q : f32
  } -> tensor<1x4x2x3xf32>
  return %d : tensor<1x4x2x3xf32>
}
