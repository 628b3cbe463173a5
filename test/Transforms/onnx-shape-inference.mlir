// RUN: onnx-opt %s --split-input-file -p onnx-shape-inference | filecheck %s

// Elementwise broadcasting keeps a dynamic dim, MatMul and Transpose follow; the function's
// result type is refined with the returned value.
// CHECK-LABEL: func.func @broadcast
// CHECK-SAME: -> tensor<?x4x5xf32>
// CHECK: "onnx.add"{{.*}} -> tensor<?x4xf32>
// CHECK: "onnx.mat_mul"{{.*}} -> tensor<?x5xf32>
// CHECK: "onnx.transpose"{{.*}} -> tensor<5x?xf32>
// CHECK: "onnx.unsqueeze"{{.*}} -> tensor<?x1x5xf32>
// CHECK: "onnx.expand"{{.*}} -> tensor<?x4x5xf32>
func.func @broadcast(%x: tensor<?x4xf32>, %b: tensor<1x4xf32>, %w: tensor<4x5xf32>) -> tensor<*xf32> {
  %0 = "onnx.add"(%x, %b) : (tensor<?x4xf32>, tensor<1x4xf32>) -> tensor<*xf32>
  %1 = "onnx.mat_mul"(%0, %w) : (tensor<*xf32>, tensor<4x5xf32>) -> tensor<*xf32>
  %2 = "onnx.transpose"(%1) {perm = array<i64: 1, 0>} : (tensor<*xf32>) -> tensor<*xf32>
  %ax = "onnx.constant"() {value = dense<[1]> : tensor<1xi64>} : () -> tensor<1xi64>
  %3 = "onnx.unsqueeze"(%1, %ax) : (tensor<*xf32>, tensor<1xi64>) -> tensor<*xf32>
  %s = "onnx.constant"() {value = dense<[1, 4, 1]> : tensor<3xi64>} : () -> tensor<3xi64>
  %4 = "onnx.expand"(%3, %s) : (tensor<*xf32>, tensor<3xi64>) -> tensor<*xf32>
  return %4 : tensor<*xf32>
}

// -----

// Shape -> Gather -> Unsqueeze -> Concat -> Reshape: the batch and sequence dims stay dynamic,
// the head split is static.
// CHECK-LABEL: func.func @heads
// CHECK: "onnx.shape"{{.*}} -> tensor<3xi64>
// CHECK: "onnx.gather"{{.*}} -> tensor<i64>
// CHECK: "onnx.concat"{{.*}} -> tensor<4xi64>
// CHECK: "onnx.reshape"{{.*}} -> tensor<?x?x8x64xf32>
func.func @heads(%x: tensor<?x?x512xf32>) -> tensor<*xf32> {
  %s = "onnx.shape"(%x) : (tensor<?x?x512xf32>) -> tensor<*xi64>
  %i0 = "onnx.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %i1 = "onnx.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %b = "onnx.gather"(%s, %i0) {axis = 0 : i64} : (tensor<*xi64>, tensor<i64>) -> tensor<*xi64>
  %t = "onnx.gather"(%s, %i1) {axis = 0 : i64} : (tensor<*xi64>, tensor<i64>) -> tensor<*xi64>
  %ax = "onnx.constant"() {value = dense<[0]> : tensor<1xi64>} : () -> tensor<1xi64>
  %bu = "onnx.unsqueeze"(%b, %ax) : (tensor<*xi64>, tensor<1xi64>) -> tensor<1xi64>
  %tu = "onnx.unsqueeze"(%t, %ax) : (tensor<*xi64>, tensor<1xi64>) -> tensor<1xi64>
  %h = "onnx.constant"() {value = dense<[8]> : tensor<1xi64>} : () -> tensor<1xi64>
  %d = "onnx.constant"() {value = dense<[64]> : tensor<1xi64>} : () -> tensor<1xi64>
  %sh = "onnx.concat"(%bu, %tu, %h, %d) {axis = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<*xi64>
  %r = "onnx.reshape"(%x, %sh) : (tensor<?x?x512xf32>, tensor<*xi64>) -> tensor<*xf32>
  return %r : tensor<*xf32>
}

// -----

// Reshape to [batch, -1]: the -1 is solved symbolically (batch*8*64 / batch = 512), so the
// flattened dim is static although the batch is not.
// CHECK-LABEL: func.func @flatten_batch
// CHECK: "onnx.reshape"{{.*}} -> tensor<?x512xf32>
func.func @flatten_batch(%x: tensor<?x8x64xf32>) -> tensor<*xf32> {
  %s = "onnx.shape"(%x) {end = 1 : i64} : (tensor<?x8x64xf32>) -> tensor<1xi64>
  %m = "onnx.constant"() {value = dense<[-1]> : tensor<1xi64>} : () -> tensor<1xi64>
  %sh = "onnx.concat"(%s, %m) {axis = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1xi64>, tensor<1xi64>) -> tensor<*xi64>
  %r = "onnx.reshape"(%x, %sh) : (tensor<?x8x64xf32>, tensor<*xi64>) -> tensor<*xf32>
  return %r : tensor<*xf32>
}

// -----

// Named dims recorded by the importer (`onnx.dim_params`) are shared symbols: %y's first dim is
// %x's, so the -1 of the Reshape solves to 4.
// CHECK-LABEL: func.func @dim_params
// CHECK: "onnx.reshape"{{.*}} -> tensor<?x4xf32>
func.func @dim_params(%x: tensor<?x4xf32> {onnx.dim_params = ["N", ""]}, %y: tensor<?x2x2xf32> {onnx.dim_params = ["N", "", ""]}) -> tensor<*xf32> {
  %s = "onnx.shape"(%x) {end = 1 : i64} : (tensor<?x4xf32>) -> tensor<1xi64>
  %m = "onnx.constant"() {value = dense<[-1]> : tensor<1xi64>} : () -> tensor<1xi64>
  %sh = "onnx.concat"(%s, %m) {axis = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1xi64>, tensor<1xi64>) -> tensor<*xi64>
  %r = "onnx.reshape"(%y, %sh) : (tensor<?x2x2xf32>, tensor<*xi64>) -> tensor<*xf32>
  return %r : tensor<*xf32>
}

// -----

// Convolution and pooling output sizes come from onnx's own inference.
// CHECK-LABEL: func.func @conv
// CHECK: "onnx.conv"{{.*}} -> tensor<?x16x32x32xf32>
// CHECK: "onnx.max_pool"{{.*}} -> (tensor<?x16x16x16xf32>, none)
// CHECK: "onnx.global_average_pool"{{.*}} -> tensor<?x16x1x1xf32>
// CHECK: "onnx.flatten"{{.*}} -> tensor<?x16xf32>
func.func @conv(%x: tensor<?x3x32x32xf32>, %w: tensor<16x3x3x3xf32>) -> tensor<*xf32> {
  %n = "onnx.none"() : () -> none
  %c = "onnx.conv"(%x, %w, %n) {pads = array<i64: 1, 1, 1, 1>} : (tensor<?x3x32x32xf32>, tensor<16x3x3x3xf32>, none) -> tensor<*xf32>
  %p:2 = "onnx.max_pool"(%c) {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<*xf32>) -> (tensor<*xf32>, none)
  %g = "onnx.global_average_pool"(%p#0) : (tensor<*xf32>) -> tensor<*xf32>
  %f = "onnx.flatten"(%g) : (tensor<*xf32>) -> tensor<*xf32>
  return %f : tensor<*xf32>
}

// -----

// Slice with constant bounds: a static dim is computed, a dynamic one taken whole stays itself.
// CHECK-LABEL: func.func @slice
// CHECK: "onnx.slice"{{.*}} -> tensor<?x2xf32>
func.func @slice(%x: tensor<?x10xf32>) -> tensor<*xf32> {
  %st = "onnx.constant"() {value = dense<[0, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %en = "onnx.constant"() {value = dense<[9223372036854775807, 6]> : tensor<2xi64>} : () -> tensor<2xi64>
  %ax = "onnx.constant"() {value = dense<[0, 1]> : tensor<2xi64>} : () -> tensor<2xi64>
  %sp = "onnx.constant"() {value = dense<[1, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %r = "onnx.slice"(%x, %st, %en, %ax, %sp) : (tensor<?x10xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<*xf32>
  return %r : tensor<*xf32>
}

// -----

// ConstantOfShape and Expand with a target computed from a shape (the PyTorch pattern
// Where(Equal(shape, -1), 1, shape)): the symbols are sizes, so Equal(dim, -1) is false.
// CHECK-LABEL: func.func @expand_where
// CHECK: "onnx.constant_of_shape"{{.*}} -> tensor<?x3xf32>
// CHECK: "onnx.where"{{.*}} -> tensor<2xi64>
// CHECK: "onnx.expand"{{.*}} -> tensor<?x3xf32>
func.func @expand_where(%x: tensor<?x3xf32>, %y: tensor<1x3xf32>) -> (tensor<*xf32>, tensor<*xf32>) {
  %s = "onnx.shape"(%x) : (tensor<?x3xf32>) -> tensor<*xi64>
  %z = "onnx.constant_of_shape"(%s) {value = dense<0.0> : tensor<1xf32>} : (tensor<*xi64>) -> tensor<*xf32>
  %m = "onnx.constant"() {value = dense<-1> : tensor<i64>} : () -> tensor<i64>
  %one = "onnx.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %eq = "onnx.equal"(%s, %m) : (tensor<*xi64>, tensor<i64>) -> tensor<*xi1>
  %t = "onnx.where"(%eq, %one, %s) : (tensor<*xi1>, tensor<i64>, tensor<*xi64>) -> tensor<*xi64>
  %e = "onnx.expand"(%y, %t) : (tensor<1x3xf32>, tensor<*xi64>) -> tensor<*xf32>
  return %z, %e : tensor<*xf32>, tensor<*xf32>
}

// -----

// If: the result keeps what both branches agree on.
// CHECK-LABEL: func.func @if_merge
// CHECK: "onnx.if"
// CHECK: }) {{.*}}: (tensor<i1>) -> tensor<?x4xf32>
func.func @if_merge(%c: tensor<i1>, %a: tensor<2x4xf32>, %b: tensor<3x4xf32>) -> tensor<*xf32> {
  %r = "onnx.if"(%c) ({
    %0 = "onnx.relu"(%b) : (tensor<3x4xf32>) -> tensor<*xf32>
    gpu.yield %0 : tensor<*xf32>
  }, {
    %1 = "onnx.relu"(%a) : (tensor<2x4xf32>) -> tensor<*xf32>
    gpu.yield %1 : tensor<*xf32>
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<*xf32>
  return %r : tensor<*xf32>
}

// -----

// A declared type is never made less precise, and a contradicting inference keeps it.
// CHECK-LABEL: func.func @keep_declared
// CHECK: "onnx.relu"{{.*}} -> tensor<2x3xf32>
func.func @keep_declared(%x: tensor<?x3xf32>) -> tensor<2x3xf32> {
  %0 = "onnx.relu"(%x) : (tensor<?x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// Shape arithmetic: merging the last two dims (Mul of two gathered dims) keeps the product
// symbolic, so the Reshape of the same tensor back to [b, s, h*d] has static h*d = 512.
// CHECK-LABEL: func.func @merge_heads
// CHECK: "onnx.mul"{{.*}} -> tensor<1xi64>
// CHECK: "onnx.reshape"{{.*}} -> tensor<?x?x512xf32>
func.func @merge_heads(%x: tensor<?x?x8x64xf32>) -> tensor<*xf32> {
  %s = "onnx.shape"(%x) : (tensor<?x?x8x64xf32>) -> tensor<4xi64>
  %st0 = "onnx.constant"() {value = dense<[0]> : tensor<1xi64>} : () -> tensor<1xi64>
  %st2 = "onnx.constant"() {value = dense<[2]> : tensor<1xi64>} : () -> tensor<1xi64>
  %st3 = "onnx.constant"() {value = dense<[3]> : tensor<1xi64>} : () -> tensor<1xi64>
  %e4 = "onnx.constant"() {value = dense<[4]> : tensor<1xi64>} : () -> tensor<1xi64>
  %n = "onnx.none"() : () -> none
  %bs = "onnx.slice"(%s, %st0, %st2, %n, %n) : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>, none, none) -> tensor<*xi64>
  %h = "onnx.slice"(%s, %st2, %st3, %n, %n) : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>, none, none) -> tensor<*xi64>
  %d = "onnx.slice"(%s, %st3, %e4, %n, %n) : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>, none, none) -> tensor<1xi64>
  %hd = "onnx.mul"(%h, %d) : (tensor<*xi64>, tensor<1xi64>) -> tensor<*xi64>
  %t = "onnx.transpose"(%x) {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x?x8x64xf32>) -> tensor<*xf32>
  %sh = "onnx.concat"(%bs, %hd) {axis = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<*xi64>, tensor<*xi64>) -> tensor<*xi64>
  %r = "onnx.reshape"(%t, %sh) : (tensor<*xf32>, tensor<*xi64>) -> tensor<*xf32>
  return %r : tensor<*xf32>
}

// -----

// Size, Range and ConstantOfShape driven by known values; Tile by a constant.
// CHECK-LABEL: func.func @values
// CHECK: "onnx.size"{{.*}} -> tensor<i64>
// CHECK: "onnx.range"{{.*}} -> tensor<6xi64>
// CHECK: "onnx.tile"{{.*}} -> tensor<4x?xf32>
func.func @values(%x: tensor<2x3xf32>, %y: tensor<2x?xf32>) -> (tensor<*xi64>, tensor<*xf32>) {
  %n = "onnx.size"(%x) : (tensor<2x3xf32>) -> tensor<*xi64>
  %z = "onnx.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %o = "onnx.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %r = "onnx.range"(%z, %n, %o) : (tensor<i64>, tensor<*xi64>, tensor<i64>) -> tensor<*xi64>
  %rep = "onnx.constant"() {value = dense<[2, 3]> : tensor<2xi64>} : () -> tensor<2xi64>
  %t = "onnx.tile"(%y, %rep) : (tensor<2x?xf32>, tensor<2xi64>) -> tensor<*xf32>
  return %r, %t : tensor<*xi64>, tensor<*xf32>
}

// -----

// An If whose condition is known from shapes (Size(x) == 6) takes its result shape from the
// branch it will take, even when the branches disagree on the rank.
// CHECK-LABEL: func.func @if_known_condition
// CHECK: "onnx.equal"{{.*}} -> tensor<i1>
// CHECK: "onnx.if"
// CHECK: : (tensor<i1>) -> tensor<2x3xf32>
func.func @if_known_condition(%x: tensor<2x3xf32>) -> tensor<*xf32> {
  %n = "onnx.size"(%x) : (tensor<2x3xf32>) -> tensor<*xi64>
  %six = "onnx.constant"() {value = dense<6> : tensor<i64>} : () -> tensor<i64>
  %c = "onnx.equal"(%n, %six) : (tensor<*xi64>, tensor<i64>) -> tensor<*xi1>
  %r = "onnx.if"(%c) ({
    %f = "onnx.flatten"(%x) {axis = 0 : i64} : (tensor<2x3xf32>) -> tensor<*xf32>
    gpu.yield %f : tensor<*xf32>
  }, {
    %e = "onnx.relu"(%x) : (tensor<2x3xf32>) -> tensor<*xf32>
    gpu.yield %e : tensor<*xf32>
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<*xi1>) -> tensor<*xf32>
  return %r : tensor<*xf32>
}

// -----

// Model-local functions (private, called with func.call) are inferred before their callers; a
// refined callee signature updates its call sites, and the caller continues from there.
// CHECK-LABEL: func.func @caller
// CHECK-SAME: -> tensor<2x3xf32>
// CHECK: call @callee(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: "onnx.relu"{{.*}} -> tensor<2x3xf32>
// CHECK-LABEL: func.func private @callee
// CHECK-SAME: -> tensor<2x3xf32>
func.func @caller(%x: tensor<2x3xf32>) -> tensor<*xf32> {
  %0 = func.call @callee(%x) : (tensor<2x3xf32>) -> tensor<*xf32>
  %1 = "onnx.relu"(%0) : (tensor<*xf32>) -> tensor<*xf32>
  return %1 : tensor<*xf32>
}
func.func private @callee(%x: tensor<2x3xf32>) -> tensor<*xf32> {
  %0 = "onnx.neg"(%x) : (tensor<2x3xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

// A reduction over axes known only at run time keeps the rank when keepdims=1.
// CHECK-LABEL: func.func @reduce_runtime_axes
// CHECK: "onnx.reduce_sum"{{.*}} -> tensor<?x1x?xf32>
func.func @reduce_runtime_axes(%x: tensor<2x1x4xf32>, %axes: tensor<?xi64>) -> tensor<*xf32> {
  %r = "onnx.reduce_sum"(%x, %axes) {keepdims = 1 : i64} : (tensor<2x1x4xf32>, tensor<?xi64>) -> tensor<*xf32>
  return %r : tensor<*xf32>
}
