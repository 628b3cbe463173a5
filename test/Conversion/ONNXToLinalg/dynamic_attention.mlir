// RUN: onnx-opt %s --split-input-file -p "convert-onnx-to-linalg,cse" | filecheck %s
// Dynamic-axes attention as exporters write it lowers like its static twin (issue 8): shape values
// computed by Shape/Gather/Unsqueeze/Concat are followed to the dims they are (shape_ops.shape_elements),
// so sizes keep their sources (dim_sources) and the broadcast and MatMul lowerings see equal dims.
// (cse merges the lowering's repeated tensor.dim ops, so a size is one SSA name.)

// x.view(b, -1, 3, 4) of [b, s, 12]: an expand_shape sized by x's own dims (no tensor.reshape, no
// run-time count); q and k^T from it have one batch source, so QK^T is a linalg.batch_matmul over
// the collapsed [b*3] batch, expanded back.
// CHECK-LABEL: func.func @heads
// CHECK-NOT: tensor.reshape
// CHECK: %[[B:.+]] = tensor.dim %arg0, %c0
// CHECK: %[[S:.+]] = tensor.dim %arg0, %c1
// CHECK: tensor.expand_shape %arg0 {{\[}}[0], [1], [2, 3]] output_shape [%[[B]], %[[S]], 3, 4] : tensor<?x?x12xf32> into tensor<?x?x3x4xf32>
// CHECK: tensor.collapse_shape {{.*}} {{\[}}[0, 1], [2], [3]] : tensor<?x3x?x4xf32> into tensor<?x?x4xf32>
// CHECK: linalg.batch_matmul
// CHECK: tensor.expand_shape {{.*}} {{\[}}[0, 1], [2], [3]] output_shape {{.*}} into tensor<?x3x?x?xf32>
// CHECK-NOT: tensor.reshape
func.func @heads(%arg0: tensor<?x?x12xf32> {onnx.dim_params = ["batch", "seq", ""], onnx.name = "x"}) -> tensor<?x3x?x?xf32> {
  %0 = "onnx.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %1 = "onnx.constant"() {value = dense<0> : tensor<1xi64>} : () -> tensor<1xi64>
  %2 = "onnx.constant"() {value = dense<-1> : tensor<1xi64>} : () -> tensor<1xi64>
  %3 = "onnx.constant"() {value = dense<3> : tensor<1xi64>} : () -> tensor<1xi64>
  %4 = "onnx.constant"() {value = dense<4> : tensor<1xi64>} : () -> tensor<1xi64>
  %5 = "onnx.shape"(%arg0) : (tensor<?x?x12xf32>) -> tensor<3xi64>
  %6 = "onnx.gather"(%5, %0) {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %7 = "onnx.unsqueeze"(%6, %1) : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %8 = "onnx.concat"(%7, %2, %3, %4) {axis = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %9 = "onnx.reshape"(%arg0, %8) : (tensor<?x?x12xf32>, tensor<4xi64>) -> tensor<?x?x3x4xf32>
  %10 = "onnx.transpose"(%9) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x3x4xf32>) -> tensor<?x3x?x4xf32>
  %11 = "onnx.transpose"(%9) {perm = array<i64: 0, 2, 3, 1>} : (tensor<?x?x3x4xf32>) -> tensor<?x3x4x?xf32>
  %12 = "onnx.mat_mul"(%10, %11) : (tensor<?x3x?x4xf32>, tensor<?x3x4x?xf32>) -> tensor<?x3x?x?xf32>
  return %12 : tensor<?x3x?x?xf32>
}

// -----

// Two inputs whose dims share dim_params (input_ids and attention_mask): the entry checks that
// they agree (a run-time error naming both inputs), after which they are one source and the Add
// is a plain elementwise generic (no run-time-index reads).
// CHECK-LABEL: func.func @shared
// CHECK-SAME: attributes {onnxc.shared_dims_checked}
// CHECK: scf.if
// CHECK: onnxc.runtime_check = "{{.*}}input 'mask2' dim 0 is 'batch' = {mine}, but input 'mask' dim 0 is 'batch' = {theirs}
// CHECK: scf.if
// CHECK: onnxc.runtime_check = "{{.*}}input 'mask2' dim 1 is 'seq'
// CHECK: linalg.generic {{.*}}ins(%arg0, %arg1 : tensor<?x?xf32>, tensor<?x?xf32>)
// CHECK-NOT: linalg.index
// CHECK: return
func.func @shared(%arg0: tensor<?x?xf32> {onnx.dim_params = ["batch", "seq"], onnx.name = "mask"}, %arg1: tensor<?x?xf32> {onnx.dim_params = ["batch", "seq"], onnx.name = "mask2"}) -> tensor<?x?xf32> {
  %0 = "onnx.add"(%arg0, %arg1) : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// -----

// Range(0, Shape(x)[1], 1) is sized by x's dim itself; a positional table sliced to that length
// is min(seq, 16) rows, which broadcasts against seq only when equal: checked (1 or the size),
// then the Add reads both at the loop index (no linalg.index, no tensor.extract).
// CHECK-LABEL: func.func @positions
// CHECK: %[[S:.+]] = tensor.dim %arg0, %c1
// CHECK: tensor.empty(%[[S]]) : tensor<?xi64>
// CHECK: %[[N:.+]] = arith.minsi %[[S]], %c16 : index
// CHECK: tensor.extract_slice %{{.+}}[0, 0] [%[[N]], 12] [1, 1] : tensor<16x12xf32> to tensor<?x12xf32>
// CHECK: onnxc.runtime_check = "{{.*}}add_pos{{.*}}do not broadcast
// CHECK: linalg.generic
// CHECK-NOT: linalg.index
// CHECK-NOT: tensor.extract %
// CHECK: arith.addf
// CHECK: return
func.func @positions(%arg0: tensor<?x?x12xf32> {onnx.dim_params = ["batch", "seq", ""], onnx.name = "x"}) -> (tensor<?xi64>, tensor<?x?x12xf32>) {
  %0 = "onnx.none"() : () -> none
  %1 = "onnx.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %2 = "onnx.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %3 = "onnx.constant"() {value = dense<0> : tensor<1xi64>} : () -> tensor<1xi64>
  %4 = "onnx.constant"() {value = dense<0.5> : tensor<16x12xf32>} : () -> tensor<16x12xf32>
  %5 = "onnx.shape"(%arg0) : (tensor<?x?x12xf32>) -> tensor<3xi64>
  %6 = "onnx.gather"(%5, %2) {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %7 = "onnx.unsqueeze"(%6, %3) : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %8 = "onnx.range"(%1, %6, %2) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %9 = "onnx.slice"(%4, %3, %7, %3, %0) : (tensor<16x12xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, none) -> tensor<?x?xf32>
  %10 = "onnx.add"(%arg0, %9) : (tensor<?x?x12xf32>, tensor<?x?xf32>) -> tensor<?x?x12xf32> loc("add_pos"("Add"))
  return %8, %10 : tensor<?xi64>, tensor<?x?x12xf32>
}
