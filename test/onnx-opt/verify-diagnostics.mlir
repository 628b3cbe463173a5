// RUN: onnx-opt %s --split-input-file --verify-diagnostics
// RUN: onnx-opt %s --split-input-file --verify-diagnostics -p onnx-verify
// Every way of placing an expected diagnostic (`@+N`, `@-N`, `@above`, `@below`, on the line
// itself), notes, and the Python ONNX verifier's errors.

func.func @plus() {
  // expected-error @+1 {{custom op 'foo' is unknown}}
  %x = foo
  return
}

// -----

func.func @minus() {
  %x = foo
  // expected-error @-1 {{custom op 'foo' is unknown}}
  return
}

// -----

func.func @above_below() {
  %x = foo
  // expected-error @above {{custom op 'foo' is unknown}}
  return
}

// -----

func.func @below() {
  // expected-error @below {{custom op 'foo' is unknown}}
  %x = foo
  return
}

// -----

func.func @same_line() {
  %x = foo // expected-error {{custom op 'foo' is unknown}}
  return
}

// -----

func.func @note(%a: i32) -> i32 {
  // expected-note @+1 {{previously defined here}}
  %x = arith.addi %a, %a : i32
  // expected-error @+1 {{redefinition of SSA value '%x'}}
  %x = arith.addi %a, %a : i32
  return %x : i32
}

// -----

func.func @onnx_verifier(%a: tensor<2xf32>) {
  // expected-error-re @+1 {{'onnx.relu' op result #0 ('Y') has type tensor({{double|float64}}){{.*}}bound T}}
  %0 = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf64>
  return
}
