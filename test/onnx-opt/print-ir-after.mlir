// RUN: onnx-opt %s -p 'onnx-verify,canonicalize,cse' --mlir-print-ir-after=canonicalize 2>&1 | filecheck %s
// RUN: onnx-opt %s -p 'onnx-verify,canonicalize,cse' --mlir-print-ir-after=onnx-verify,cse 2>&1 | filecheck %s --check-prefix=TWO
// RUN: onnx-opt %s -p 'onnx-verify,cse' --mlir-timing 2>&1 | filecheck %s --check-prefix=TIMING
// RUN: not onnx-opt %s -p 'onnx-verify,cse' --mlir-print-ir-after=canonicalise 2>&1 | filecheck %s --check-prefix=UNKNOWN
// --mlir-print-ir-after prints the IR only after the named passes (onnxc or upstream), in pipeline
// order; --mlir-timing prints MLIR's timing report with onnxc's passes in it; a name that is not
// in the pipeline is an error, not silence.

// CHECK-NOT: IR Dump After OnnxVerifyPass
// CHECK: // -----// IR Dump After canonicalize (canonicalize) //----- //
// CHECK-NEXT: module {
// CHECK-NOT: arith.constant
// CHECK-NOT: IR Dump After
// CHECK: module {
// CHECK-NEXT: func.func @f

// TWO: // -----// IR Dump After OnnxVerifyPass (onnx-verify) //----- //
// TWO: arith.constant 0 : i32
// TWO: // -----// IR Dump After cse (cse) //----- //
// TWO-NOT: IR Dump After

// TIMING: Execution time report
// TIMING: OnnxVerifyPass
// TIMING: CSE

// UNKNOWN: onnx-opt: error: print-ir-after: no pass 'canonicalise' in the pipeline 'onnx-verify,cse' (its passes: onnx-verify, cse)
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %c0 = arith.constant 0 : i32
  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}
