// RUN: onnx-opt %s --mlir-print-debuginfo | filecheck %s
// RUN: onnx-opt %s --split-input-file --mlir-print-debuginfo | filecheck %s --check-prefix=SPLIT
// --mlir-print-debuginfo prints locations named after the input file, with the line numbers of
// the original file also in later chunks.

// CHECK: "onnx.relu"(%arg0) : (tensor<2xf32>) -> tensor<2xf32> loc(#[[LOC:loc[0-9]*]])
// CHECK: #[[LOC]] = loc("{{.*}}debuginfo.mlir":[[# @LINE + 4]]:8)
// SPLIT: // -----
// SPLIT: = loc("{{.*}}debuginfo.mlir":[[# @LINE + 9]]:8)
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

func.func @g(%a: tensor<2xf32>) -> tensor<2xf32> {
  %r = "onnx.neg"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}
