// RUN: not onnx-opt %s --verify-diagnostics 2>&1 | filecheck %s
// --verify-diagnostics fails, with a message per problem, when an expected diagnostic is not
// produced and when a diagnostic that nobody expected is.

// CHECK-NOT: Traceback
// CHECK-DAG: verify-diagnostics-failure.mlir:[[# @LINE + 4]]:6: error: expected error "this message never comes" was not produced
// CHECK-DAG: verify-diagnostics-failure.mlir:[[# @LINE + 4]]:8: error: unexpected error: custom op 'foo' is unknown
func.func @f() {
  // A designator for a line that has no error.
  // expected-error @+1 {{this message never comes}}
  %x = foo
  return
}
