// RUN: not onnx-opt %s 2>&1 | filecheck %s --check-prefix=REJECT
// RUN: onnx-opt %s --allow-unregistered-dialect | filecheck %s
// RUN: not onnx-opt %s --allow-unregistered-dialect -p one-shot-bufferize 2>&1 | filecheck %s --check-prefix=NOTE
// Operations of unknown dialects are rejected unless --allow-unregistered-dialect is given; the
// reproduce note of a failing pipeline repeats the flag.

// REJECT: unregistered-dialect.mlir:[[# @LINE + 5]]:20: error: operation being parsed with an unregistered dialect
// CHECK: "mystery.op"(%arg0) : (tensor<2xf32>) -> tensor<2xf32>
// NOTE: error: op was not bufferized
// NOTE: note: reproduce with: onnx-opt {{.*}}unregistered-dialect.mlir --allow-unregistered-dialect --pass-pipeline='builtin.module(one-shot-bufferize)'
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %r = "mystery.op"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}
