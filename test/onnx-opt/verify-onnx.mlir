// RUN: not onnx-opt %s 2>&1 | filecheck %s
// RUN: onnx-opt %s --no-verify-onnx | filecheck %s --check-prefix=NOVERIFY
// After parsing, onnx-opt runs the Python ONNX verifier (type constraints IRDL cannot state);
// --no-verify-onnx skips it.

// CHECK: verify-onnx.mlir:[[# @LINE + 3]]:8: error: 'onnx.relu' op result #0 ('Y') has type
// NOVERIFY: "onnx.relu"(%arg0) : (tensor<2xf32>) -> tensor<2xf64>
func.func @f(%a: tensor<2xf32>) -> tensor<2xf64> {
  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf64>
  return %r : tensor<2xf64>
}
