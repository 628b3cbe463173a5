// RUN: not onnx-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: not onnx-opt %s 2>&1 | filecheck %s --check-prefix=WHOLE
// A parse error is reported as file:line:col with the line number of the original file, also
// inside a later chunk, and never as a Python traceback. The other chunks still run.

// CHECK-NOT: Traceback
// CHECK: malformed.mlir:[[# @LINE + 7]]:8: error: custom op 'foo' is unknown
// CHECK-NOT: Traceback
// CHECK: malformed.mlir:[[# @LINE + 18]]:10: error: use of undeclared SSA value name
// CHECK-NOT: Traceback
// CHECK: func.func @good
// WHOLE: malformed.mlir:[[# @LINE + 2]]:8: error: custom op 'foo' is unknown
func.func @bad() {
  %x = foo
  return
}

// -----

func.func @good() {
  return
}

// -----

func.func @undeclared() -> i32 {
  return %nope : i32
}
