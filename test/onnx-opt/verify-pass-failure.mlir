// RUN: onnx-opt %s --split-input-file --verify-diagnostics --no-verify-onnx -p onnx-verify,one-shot-bufferize
// Errors of failing passes, native (one-shot-bufferize) and Python (onnx-verify), are matched by
// expected-error like parse errors; the run then succeeds.

func.func @native(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{op was not bufferized}}
  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

func.func @python(%a: tensor<2xf32>) -> tensor<2xf64> {
  // expected-error @+1 {{'onnx.relu' op result #0 ('Y') has type tensor(double)}}
  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf64>
  return %r : tensor<2xf64>
}
