// RUN: not onnx-opt %s --split-input-file -p onnx-validate-attributes 2>&1 | filecheck %s
// RUN: not onnx-opt %s --split-input-file -p onnx-validate-attributes 2>&1 | filecheck %s --check-prefix=OK

// Every problem of a module is reported at once, each naming the node, op type, domain, opset
// and the attribute at fault.
// CHECK: Node 'cat' (Concat, domain ai.onnx, opset 18): attribute 'axis' = 5 is out of range [-2, 1] for input 'inputs' of rank 2.
// CHECK: Node 'tr' (Transpose, domain ai.onnx, opset 18): attribute 'perm' = [0, 0, 1] is not a permutation of 0..2
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @bad(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %c: tensor<2x3x4xf32>) -> (tensor<*xf32>, tensor<*xf32>) {
    %0 = "onnx.concat"(%a, %b) {axis = 5 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<*xf32> loc("cat"("Concat"))
    %1 = "onnx.transpose"(%c) {perm = array<i64: 0, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<*xf32> loc("tr"("Transpose"))
    return %0, %1 : tensor<*xf32>, tensor<*xf32>
  }
}

// -----

// Convolution: pads of the wrong length, a zero stride, and a group that does not match the
// channels (8 input channels, weight W[1] = 4 per group x group 3).
// CHECK: Node 'conv' (Conv, domain ai.onnx, opset 18): attribute 'group' = 3
// CHECK-SAME: W[1] = 4 per group x group 3 = 12
// CHECK: Node 'conv' (Conv, domain ai.onnx, opset 18): attribute 'pads' = [1, 1] has 2 entries; input 'X' of rank 4 has 2 spatial dims, so 4 are needed.
// CHECK: Node 'conv' (Conv, domain ai.onnx, opset 18): attribute 'strides' = [1, 0] has entries below 1.
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @conv(%x: tensor<1x8x5x5xf32>, %w: tensor<6x4x3x3xf32>) -> tensor<*xf32> {
    %n = "onnx.none"() : () -> none
    %0 = "onnx.conv"(%x, %w, %n) {group = 3 : i64, pads = array<i64: 1, 1>, strides = array<i64: 1, 0>} : (tensor<1x8x5x5xf32>, tensor<6x4x3x3xf32>, none) -> tensor<*xf32> loc("conv"("Conv"))
    return %0 : tensor<*xf32>
  }
}

// -----

// Constant index inputs are checked too: Squeeze axes out of range, Split sizes that do not sum
// to the dim.
// CHECK: Node 'sq' (Squeeze, domain ai.onnx, opset 18): input 'axes' = [3] has axes [3] out of range [-2, 1] for the input 'data' of rank 2.
// CHECK: Node 'sp' (Split, domain ai.onnx, opset 18): input 'split' = [1, 1] sums to 2, but dim 0 of input 'input' is 4.
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @inputs(%x: tensor<1x4xf32>, %y: tensor<4x2xf32>) -> (tensor<*xf32>, tensor<*xf32>, tensor<*xf32>) {
    %axes = "onnx.constant"() {value = dense<[3]> : tensor<1xi64>} : () -> tensor<1xi64>
    %0 = "onnx.squeeze"(%x, %axes) : (tensor<1x4xf32>, tensor<1xi64>) -> tensor<*xf32> loc("sq"("Squeeze"))
    %s = "onnx.constant"() {value = dense<[1, 1]> : tensor<2xi64>} : () -> tensor<2xi64>
    %1:2 = "onnx.split"(%y, %s) {axis = 0 : i64, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x2xf32>, tensor<2xi64>) -> (tensor<*xf32>, tensor<*xf32>) loc("sp"("Split"))
    return %0, %1#0, %1#1 : tensor<*xf32>, tensor<*xf32>, tensor<*xf32>
  }
}

// -----

// Valid attributes pass unchanged: the chunk is printed back (the run fails for the others).
// OK-LABEL: func.func @good
// OK: "onnx.transpose"(%arg0) {perm = array<i64: 2, 0, 1>}
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @good(%c: tensor<2x3x4xf32>) -> tensor<*xf32> {
    %1 = "onnx.transpose"(%c) {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<*xf32> loc("tr"("Transpose"))
    return %1 : tensor<*xf32>
  }
}

// -----

// Flags (0 or 1 in the spec) with another value are refused: onnxc and onnx.reference read them
// differently.
// CHECK: Node 'mod' (Mod, domain ai.onnx, opset 18): attribute 'fmod' = -1 must be one of [0, 1].
module attributes {onnx.opset_import = [["", 18]]} {
  func.func @flags(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<*xf32> {
    %0 = "onnx.mod"(%a, %b) {fmod = -1 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<*xf32> loc("mod"("Mod"))
    return %0 : tensor<*xf32>
  }
}
