// RUN: onnx-opt %s -o %t && filecheck %s < %t
// RUN: onnx-opt < %s | filecheck %s
// RUN: onnx-opt - < %s | filecheck %s
// RUN: cat %s | onnx-opt -p cse -o %t.stdin && filecheck %s --input-file %t.stdin
// RUN: sed -e 's/%%a)/%%missing)/' %s | not onnx-opt 2>&1 | filecheck %s --check-prefix=STDIN
// `-o` writes the result to a file; without an input file (or with `-`) onnx-opt reads stdin,
// and names it `<stdin>` in diagnostics.

// CHECK: func.func @f(%arg0: tensor<2xf32>) -> tensor<2xf32>
// STDIN: <stdin>:[[# @LINE + 2]]:{{[0-9]+}}: error: use of undeclared SSA value name
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}
