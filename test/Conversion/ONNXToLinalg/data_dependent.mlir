// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// Outputs sized at run time. NonZero: count (a reduction generic), allocate that many columns,
// fill in one scf.for nest (tensor.insert under scf.if). NonMaxSuppression: rows written into a
// static upper bound, the result is the extract_slice of the rows written.

// CHECK-LABEL: func.func @nonzero
// CHECK: %[[CNT:.+]] = linalg.generic {{.*}}iterator_types = ["reduction", "reduction"]
// CHECK: %[[N:.+]] = arith.index_cast %{{.+}} : i64 to index
// CHECK: %[[OUT:.+]] = tensor.empty(%[[N]]) : tensor<2x?xi64>
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.if
// CHECK: tensor.insert
// CHECK: return %{{.+}} : tensor<2x?xi64>
func.func @nonzero(%x: tensor<3x4xf32>) -> tensor<2x?xi64> {
  %0 = "onnx.non_zero"(%x) : (tensor<3x4xf32>) -> tensor<2x?xi64>
  return %0 : tensor<2x?xi64>
}

// -----

// CHECK-LABEL: func.func @nms
// CHECK: tensor.empty() : tensor<24x3xi64>
// CHECK: %[[R:.+]]:2 = scf.for
// CHECK: tensor.extract_slice %[[R]]#0[0, 0] [%[[R]]#1, 3] [1, 1] : tensor<24x3xi64> to tensor<?x3xi64>
func.func @nms(%b: tensor<2x4x4xf32>, %s: tensor<2x3x4xf32>, %m: tensor<1xi64>, %i: tensor<1xf32>) -> tensor<?x3xi64> {
  %none = "onnx.none"() : () -> none
  %0 = "onnx.non_max_suppression"(%b, %s, %m, %i, %none) : (tensor<2x4x4xf32>, tensor<2x3x4xf32>, tensor<1xi64>, tensor<1xf32>, none) -> tensor<?x3xi64>
  return %0 : tensor<?x3xi64>
}
