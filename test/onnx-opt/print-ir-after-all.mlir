// RUN: onnx-opt %s -p 'onnx-verify,canonicalize,func.func(cse)' --mlir-print-ir-after-all 2>&1 | filecheck %s
// The IR is printed after every pass, onnxc's Python passes included, in pipeline order; nested
// passes print the op they ran on. The final IR follows on stdout.

// CHECK: // -----// IR Dump After OnnxVerifyPass (onnx-verify) //----- //
// CHECK-NEXT: module {
// CHECK: arith.constant 0 : i32
// CHECK: // -----// IR Dump After Canonicalizer (canonicalize) //----- //
// CHECK-NEXT: module {
// CHECK-NOT: arith.constant
// CHECK: // -----// IR Dump After CSE (cse) //----- //
// CHECK-NEXT: func.func @f
// CHECK: module {
// CHECK-NEXT: func.func @f
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %c0 = arith.constant 0 : i32
  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}
