// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// Run-time checks (transforms/lowering/runtime_checks.py): Gather indices are range-checked by a
// min and a max reduction before the gather; a failure is recorded in @__onnxc_status by an
// scf.if whose onnxc.runtime_check attribute describes the check (its id is the module's count).

// CHECK: onnxc.runtime_checks_count = 1
// CHECK: memref.global "private" @__onnxc_status : memref<16xi64> = dense<0>
// CHECK-LABEL: func.func @gather
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction"]
// CHECK: arith.minsi
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction"]
// CHECK: arith.maxsi
// CHECK: scf.if
// CHECK: memref.get_global @__onnxc_status : memref<16xi64>
// CHECK: memref.store
// CHECK: } {onnxc.runtime_check = "{\22id\22: 1, {{.*}}index {index} is out of range for axis 1 of the data's shape {shape}
// CHECK: linalg.generic
// CHECK: tensor.extract
func.func @gather(%d: tensor<3x4xf32>, %i: tensor<2xi64>) -> tensor<3x2xf32> {
  %0 = "onnx.gather"(%d, %i) {axis = 1 : i64} : (tensor<3x4xf32>, tensor<2xi64>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// A declared static result whose dims the lowering knows only at run time (a Reshape target fed
// as an input): each such dim is compared with the declared size before the tensor.cast.
// CHECK: onnxc.runtime_checks_count = 3
// CHECK-LABEL: func.func @reshape
// CHECK: } {onnxc.runtime_check = "{\22id\22: 1, {{.*}}the run-time target shape {target} has {count} elements
// CHECK: } {onnxc.runtime_check = "{\22id\22: 2, {{.*}}the run-time target shape {target} has a dim below -1
// CHECK: tensor.reshape
// CHECK: arith.cmpi eq
// CHECK: scf.if
// CHECK: } {onnxc.runtime_check = "{\22id\22: 3, {{.*}}result 0 has the run-time shape {shape}, the model declares (2, 3)
// CHECK: tensor.cast %{{.+}} : tensor<?x?xf32> to tensor<2x3xf32>
func.func @reshape(%a: tensor<3x2xf32>, %s: tensor<2xi64>) -> tensor<2x3xf32> {
  %0 = "onnx.reshape"(%a, %s) : (tensor<3x2xf32>, tensor<2xi64>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
