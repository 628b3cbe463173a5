// RUN: onnx-opt %s --split-input-file -p onnx-upgrade-ops 2>/dev/null | filecheck %s
// RUN: not onnx-opt %s --split-input-file -p 'onnx-upgrade-ops{strict=true}' 2>&1 | filecheck %s --check-prefix=STRICT

// Attributes that became inputs: ReduceSum-1's axes (input at 13), Unsqueeze-1's axes (13),
// Slice-1's starts/ends/axes (10), TopK-1's k (10).
// CHECK-LABEL: func.func @attrs_to_inputs
// CHECK: %[[AX:.*]] = "onnx.constant"() {value = dense<1> : tensor<1xi64>}
// CHECK: "onnx.reduce_sum"(%arg0, %[[AX]]) {keepdims = 0 : i64}
// CHECK: %[[UA:.*]] = "onnx.constant"() {value = dense<0> : tensor<1xi64>}
// CHECK: "onnx.unsqueeze"(%arg0, %[[UA]])
// CHECK: %[[ST:.*]] = "onnx.constant"() {value = dense<1> : tensor<1xi64>}
// CHECK: %[[EN:.*]] = "onnx.constant"() {value = dense<3> : tensor<1xi64>}
// CHECK: %[[SA:.*]] = "onnx.constant"() {value = dense<2> : tensor<1xi64>}
// CHECK: "onnx.slice"(%arg0, %[[ST]], %[[EN]], %[[SA]], %{{.*}}) : (tensor<2x3x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, none)
// CHECK: %[[K:.*]] = "onnx.constant"() {value = dense<2> : tensor<1xi64>}
// CHECK: "onnx.top_k"(%arg0, %[[K]]) {axis = 1 : i64}
func.func @attrs_to_inputs(%x: tensor<2x3x4xf32>) -> (tensor<2x4xf32>, tensor<1x2x3x4xf32>, tensor<2x3x2xf32>, tensor<2x2x4xf32>, tensor<2x2x4xi64>) {
  %0 = "onnx.reduce_sum_v1"(%x) {axes = array<i64: 1>, keepdims = 0 : i64} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  %1 = "onnx.unsqueeze_v1"(%x) {axes = array<i64: 0>} : (tensor<2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %2 = "onnx.slice_v1"(%x) {starts = array<i64: 1>, ends = array<i64: 3>, axes = array<i64: 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x2xf32>
  %3:2 = "onnx.top_k_v1"(%x) {k = 2 : i64, axis = 1 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x2x4xf32>, tensor<2x2x4xi64>)
  return %0, %1, %2, %3#0, %3#1 : tensor<2x4xf32>, tensor<1x2x3x4xf32>, tensor<2x3x2xf32>, tensor<2x2x4xf32>, tensor<2x2x4xi64>
}

// -----

// Legacy broadcasting with an axis: B gets trailing unit dims, then numpy broadcasting applies.
// consumed_inputs (Relu-1) carries no meaning and goes.
// CHECK-LABEL: func.func @legacy_broadcast
// CHECK: %[[A:.*]] = "onnx.constant"() {value = dense<[1, 2]> : tensor<2xi64>}
// CHECK: %[[U:.*]] = "onnx.unsqueeze"(%arg1, %[[A]]) : (tensor<3xf32>, tensor<2xi64>) -> tensor<3x1x1xf32>
// CHECK: %[[S:.*]] = "onnx.add"(%arg0, %[[U]]) : (tensor<2x3x4x5xf32>, tensor<3x1x1xf32>)
// CHECK: "onnx.relu"(%[[S]]) : (tensor<2x3x4x5xf32>) -> tensor<2x3x4x5xf32>
func.func @legacy_broadcast(%a: tensor<2x3x4x5xf32>, %b: tensor<3xf32>) -> tensor<2x3x4x5xf32> {
  %0 = "onnx.add_v6"(%a, %b) {broadcast = 1 : i64, axis = 1 : i64} : (tensor<2x3x4x5xf32>, tensor<3xf32>) -> tensor<2x3x4x5xf32>
  %1 = "onnx.relu_v1"(%0) {consumed_inputs = array<i64: 0>} : (tensor<2x3x4x5xf32>) -> tensor<2x3x4x5xf32>
  return %1 : tensor<2x3x4x5xf32>
}

// -----

// Softmax-11 over a middle axis coerced the input to 2-D; Softmax-13 does not, so the upgrade
// flattens, normalizes the last axis and reshapes back. Over the last axis it only renames.
// CHECK-LABEL: func.func @softmax
// CHECK: %[[SH:.*]] = "onnx.shape"(%arg0)
// CHECK: %[[F:.*]] = "onnx.flatten"(%arg0) {axis = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
// CHECK: %[[M:.*]] = "onnx.softmax"(%[[F]]) {axis = -1 : i64}
// CHECK: "onnx.reshape"(%[[M]], %[[SH]])
// CHECK: "onnx.softmax"(%arg0) {axis = -1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
func.func @softmax(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %0 = "onnx.softmax_v1"(%x) {axis = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %1 = "onnx.softmax_v1"(%x) {axis = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %0, %1 : tensor<2x3x4xf32>, tensor<2x3x4xf32>
}

// -----

// Pad-2's pads/value attributes and Clip-6's min/max become inputs of the input's type.
// CHECK-LABEL: func.func @pad_clip
// CHECK: %[[P:.*]] = "onnx.constant"() {value = dense<[0, 1, 0, 1]> : tensor<4xi64>}
// CHECK: %[[V:.*]] = "onnx.constant"() {value = dense<2.500000e+00> : tensor<f32>}
// CHECK: "onnx.pad"(%arg0, %[[P]], %[[V]], %{{.*}}) {mode = "constant"}
// CHECK: %[[LO:.*]] = "onnx.constant"() {value = dense<-1.000000e+00> : tensor<f32>}
// CHECK: %[[HI:.*]] = "onnx.constant"() {value = dense<1.000000e+00> : tensor<f32>}
// CHECK: "onnx.clip"(%arg0, %[[LO]], %[[HI]])
func.func @pad_clip(%x: tensor<2x3xf32>) -> (tensor<2x5xf32>, tensor<2x3xf32>) {
  %0 = "onnx.pad_v2"(%x) {pads = array<i64: 0, 1, 0, 1>, value = 2.5 : f32, mode = "constant"} : (tensor<2x3xf32>) -> tensor<2x5xf32>
  %1 = "onnx.clip_v6"(%x) {min = -1.0 : f32, max = 1.0 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0, %1 : tensor<2x5xf32>, tensor<2x3xf32>
}

// -----

// Erf-9 took integers; Erf-13 does not: the op stays (a warning, or with strict an error).
// CHECK-LABEL: func.func @not_upgradable
// CHECK: "onnx.erf_v9"
// STRICT: onnx-upgrade-ops.mlir:{{[0-9]+}}:8: error: Erf erf_v9 -> erf: operand #0 ('input') has type tensor(int32)
func.func @not_upgradable(%x: tensor<4xi32>) -> tensor<4xi32> {
  %0 = "onnx.erf_v9"(%x) : (tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// In a model importing opset 6, PRelu's [C] slope applies per channel (PRelu-7 and later
// broadcast numpy-style), so the slope gets trailing unit dims before the upgrade; the module's
// opset is raised to what the upgraded ops need.
// CHECK: module attributes {onnx.opset_import = {{\[\[}}"", {{[1-9][0-9]}}]]}
// CHECK-LABEL: func.func @prelu_opset6
// CHECK: %[[U:.*]] = "onnx.unsqueeze"(%arg1, %{{.*}}) : (tensor<3xf32>, tensor<2xi64>) -> tensor<3x1x1xf32>
// CHECK: "onnx.prelu"(%arg0, %[[U]])
module attributes {onnx.opset_import = [["", 6]]} {
  func.func @prelu_opset6(%x: tensor<2x3x4x5xf32>, %s: tensor<3xf32>) -> tensor<2x3x4x5xf32> {
    %0 = "onnx.prelu_v6"(%x, %s) : (tensor<2x3x4x5xf32>, tensor<3xf32>) -> tensor<2x3x4x5xf32>
    return %0 : tensor<2x3x4x5xf32>
  }
}
