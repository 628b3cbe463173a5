// RUN: not onnx-opt %s -p 'canonicalize,one-shot-bufferize' 2>&1 | filecheck %s
// A native pass that fails reports its errors at the op's file:line:col, then the failing pass
// (the native pieces it may be, when MLIR does not say which) and the command that reproduces the
// failure. Nothing is printed on stdout.

// CHECK-NOT: Traceback
// CHECK: pass-failure.mlir:[[# @LINE + 7]]:8: error: op was not bufferized
// CHECK-NEXT: pass-failure.mlir:[[# @LINE + 6]]:8: note: see current operation: {{.*}}"onnx.relu"
// CHECK-NEXT: note: in pass 'one of canonicalize,one-shot-bufferize'
// CHECK-NEXT: note: reproduce with: onnx-opt {{.*}}pass-failure.mlir --pass-pipeline='builtin.module(canonicalize,one-shot-bufferize)'
// CHECK-NOT: module
// CHECK-NOT: Traceback
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}
