// RUN: onnx-opt %s -p 'builtin.module(convert-onnx-to-linalg,canonicalize)' | filecheck %s
// A declared static result whose dim the lowering knows only at run time: the run-time check
// records a contradiction, and the tensor.cast to the declared size is built inside an scf.if on
// that size (runtime_checks.guarded_cast). Why: canonicalization folds a tensor.cast in the
// producer's block into the producer (the Neg's generic became tensor<4xf32>, its input cast to
// 4 elements), whose loops then ran to the declared size over the run-time buffer before the
// check. After canonicalize the producer keeps its dynamic type; the consumer reads the guarded
// value.

// CHECK-LABEL: func.func @neg
// CHECK: %[[N:.+]] = linalg.generic {{.*}} ins(%{{.+}} : tensor<?xf32>) outs(%{{.+}} : tensor<?xf32>)
// CHECK: arith.negf
// CHECK: } -> tensor<?xf32>
// CHECK: scf.if
// CHECK: } {onnxc.runtime_check = "{\22id\22: 1, {{.*}}result 0 has the run-time shape {shape}, the model declares (4,)
// CHECK: %[[G:.+]] = scf.if %{{.+}} -> (tensor<4xf32>) {
// CHECK-NEXT: %[[C:.+]] = tensor.cast %[[N]] : tensor<?xf32> to tensor<4xf32>
// CHECK-NEXT: scf.yield %[[C]] : tensor<4xf32>
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[E:.+]] = tensor.empty() : tensor<4xf32>
// CHECK-NEXT: scf.yield %[[E]] : tensor<4xf32>
// CHECK-NEXT: } {onnxc.guarded_cast}
// CHECK: linalg.generic {{.*}} ins(%[[G]] : tensor<4xf32>)
// CHECK: arith.maximumf
func.func @neg(%a: tensor<?xf32>) -> tensor<4xf32> {
  %0 = "onnx.neg"(%a) : (tensor<?xf32>) -> tensor<4xf32>
  %1 = "onnx.relu"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
