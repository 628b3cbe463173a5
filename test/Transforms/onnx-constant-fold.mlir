// RUN: onnx-opt %s --split-input-file -p onnx-constant-fold | filecheck %s
// RUN: onnx-opt %s --split-input-file -p 'onnx-constant-fold{size-limit=4}' | filecheck %s --check-prefix=LIMIT

// A chain of ops on constants folds in one pass (Transpose, then Add of the result); the
// constants it used are erased, and the function's result type becomes the folded one.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: -> tensor<2x3xf32>
// CHECK-NEXT: %[[C:.*]] = "onnx.constant"() {value = dense<{{\[\[}}2.000000e+00, 4.000000e+00, 6.000000e+00], [3.000000e+00, 5.000000e+00, 7.000000e+00]]> : tensor<2x3xf32>}
// CHECK-NEXT: return %[[C]]
// LIMIT-LABEL: func.func @chain
// LIMIT: "onnx.transpose"
// LIMIT: "onnx.add"
func.func @chain() -> tensor<*xf32> {
  %w = "onnx.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>} : () -> tensor<3x2xf32>
  %one = "onnx.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %t = "onnx.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<*xf32>
  %a = "onnx.add"(%t, %one) : (tensor<*xf32>, tensor<f32>) -> tensor<*xf32>
  return %a : tensor<*xf32>
}

// -----

// Shape of a statically shaped value folds without its value; Gather on the folded shape too.
// CHECK-LABEL: func.func @shape
// CHECK-NEXT: %[[S:.*]] = "onnx.constant"() {value = dense<3> : tensor<i64>}
// CHECK-NEXT: return %[[S]]
func.func @shape(%x: tensor<2x3x4xf32>) -> tensor<*xi64> {
  %s = "onnx.shape"(%x) : (tensor<2x3x4xf32>) -> tensor<*xi64>
  %i = "onnx.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %g = "onnx.gather"(%s, %i) {axis = 0 : i64} : (tensor<*xi64>, tensor<i64>) -> tensor<*xi64>
  return %g : tensor<*xi64>
}

// -----

// ConstantOfShape becomes a splat of any size (one element in MLIR), even above the limit.
// CHECK-LABEL: func.func @splat
// CHECK: "onnx.constant"() {value = dense<2.500000e+00> : tensor<1000x1000xf32>}
// LIMIT-LABEL: func.func @splat
// LIMIT: "onnx.constant"() {value = dense<2.500000e+00> : tensor<1000x1000xf32>}
func.func @splat() -> tensor<*xf32> {
  %s = "onnx.constant"() {value = dense<[1000, 1000]> : tensor<2xi64>} : () -> tensor<2xi64>
  %z = "onnx.constant_of_shape"(%s) {value = dense<2.5> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<*xf32>
  return %z : tensor<*xf32>
}

// -----

// Ops with a non-constant input, random ops and ops with subgraphs are left alone.
// CHECK-LABEL: func.func @not_foldable
// CHECK: "onnx.add"
// CHECK: "onnx.random_normal"
func.func @not_foldable(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %c = "onnx.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %a = "onnx.add"(%x, %c) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %r = "onnx.random_normal"() {shape = array<i64: 2>} : () -> tensor<2xf32>
  return %a, %r : tensor<2xf32>, tensor<2xf32>
}

// -----

// Integer shape arithmetic as exported models do it: Concat, Mul, Reshape of a constant.
// CHECK-LABEL: func.func @int_math
// CHECK-NEXT: %[[R:.*]] = "onnx.constant"() {value = dense<{{\[\[}}0, 1, 2], [3, 4, 5]]> : tensor<2x3xi32>}
// CHECK-NEXT: return %[[R]]
func.func @int_math() -> tensor<*xi32> {
  %d = "onnx.constant"() {value = dense<[0, 1, 2, 3, 4, 5]> : tensor<6xi32>} : () -> tensor<6xi32>
  %a = "onnx.constant"() {value = dense<[2]> : tensor<1xi64>} : () -> tensor<1xi64>
  %b = "onnx.constant"() {value = dense<[3]> : tensor<1xi64>} : () -> tensor<1xi64>
  %s = "onnx.concat"(%a, %b) {axis = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1xi64>, tensor<1xi64>) -> tensor<*xi64>
  %r = "onnx.reshape"(%d, %s) : (tensor<6xi32>, tensor<*xi64>) -> tensor<*xi32>
  return %r : tensor<*xi32>
}

// -----

// CastLike of a constant folds although its second input is an argument: only that input's
// element type is read (function bodies write `CastLike(c, X)` for their constants).
// CHECK-LABEL: func.func @cast_like_of_constant
// CHECK-NEXT: %[[C:.*]] = "onnx.constant"() {value = dense<-1.000000e+00> : tensor<f32>}
// CHECK-NEXT: return %[[C]]
func.func @cast_like_of_constant(%x: tensor<?x3xf32>) -> tensor<*xf32> {
  %c = "onnx.constant"() {value = dense<-1> : tensor<i64>} : () -> tensor<i64>
  %r = "onnx.cast_like"(%c, %x) : (tensor<i64>, tensor<?x3xf32>) -> tensor<*xf32>
  return %r : tensor<*xf32>
}
