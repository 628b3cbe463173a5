// RUN: onnx-opt %s --split-input-file --verify-diagnostics
// Every kind of error the ONNX dialect's verifiers report: IRDL's checks in C++ (arity, required
// attributes) and the Python verifier's (type constraints, attribute kinds, optional operands).

func.func @type_binding(%a: tensor<2xf32>, %b: tensor<2xi64>) {
  // expected-error @+1 {{operand #1 ('B') has type tensor(int64), but operand #0 ('A') bound T to tensor(float)}}
  %0 = "onnx.add"(%a, %b) : (tensor<2xf32>, tensor<2xi64>) -> tensor<2xf32>
  return
}

// -----

func.func @result_binding(%a: tensor<2xf32>) {
  // expected-error @+1 {{result #0 ('Y') has type tensor(double), but operand #0 ('X') bound T to tensor(float)}}
  %0 = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf64>
  return
}

// -----

func.func @disallowed_type(%a: tensor<2xi1>) {
  // expected-error @+2 {{operand #0 ('X') has type tensor(bool) (tensor<2xi1>), not allowed for T}}
  // expected-error @+1 {{result #0 ('Y') has type tensor(bool) (tensor<2xi1>), not allowed for T}}
  %0 = "onnx.relu"(%a) : (tensor<2xi1>) -> tensor<2xi1>
  return
}

// -----

func.func @literal_type(%a: tensor<2xf32>, %s: tensor<1xi32>) {
  // expected-error @+1 {{operand #1 ('shape') must be tensor(int64), got tensor(int32)}}
  %0 = "onnx.reshape"(%a, %s) : (tensor<2xf32>, tensor<1xi32>) -> tensor<2xf32>
  return
}

// -----

func.func @none_for_required(%a: tensor<2xf32>) {
  %n = "onnx.none"() : () -> none
  // expected-error @+1 {{operand #1 ('B') is required but is none}}
  %0 = "onnx.add"(%a, %n) : (tensor<2xf32>, none) -> tensor<2xf32>
  return
}

// -----

func.func @variadic_min_arity() {
  // expected-error @+1 {{operand 'inputs' is variadic with at least 1 value(s), got 0}}
  %0 = "onnx.concat"() {axis = 0 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<2xf32>
  return
}

// -----

func.func @attribute_kind(%a: tensor<2xf32>) {
  // expected-error @+1 {{attribute 'axis' must be INT, got FLOAT}}
  %0 = "onnx.softmax"(%a) {axis = 1.0 : f32} : (tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @unknown_attribute(%a: tensor<2xf32>) {
  // expected-error @+1 {{has unknown attribute 'alpha'}}
  %0 = "onnx.relu"(%a) {alpha = 1.0 : f32} : (tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @arity(%a: tensor<2xf32>) {
  // expected-error @+1 {{expects exactly 2 operands, but got 1}}
  %0 = "onnx.add"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @missing_required_attribute(%a: tensor<2xf32>) {
  // expected-error @+1 {{attribute "to" is expected but not provided}}
  %0 = "onnx.cast"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

// Variadic operands are 16 independently typed IRDL slots and a tail (see DEVELOPERS.md);
// the segment sizes say how the values fill them.
func.func @variadic_segments_required(%a: tensor<2xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{'operandSegmentSizes' attribute is expected but not provided}}
  %0 = "onnx.concat"(%a, %b) {axis = 0 : i64} : (tensor<2xf32>, tensor<3xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @custom_without_domain(%a: tensor<2xf32>) {
  // expected-error @+1 {{attribute "domain" is expected but not provided}}
  %0 = "onnx.custom"(%a) {op_type = "Foo", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>) -> tensor<2xf32>
  return
}
