// RUN: onnx-opt %s --split-input-file -p canonicalize | filecheck %s
// Each `// -----` chunk is parsed and transformed on its own; the outputs are joined by the
// same marker, in order.

// CHECK-LABEL: func.func @first
// CHECK-NOT: arith.constant
// CHECK: return %arg0
func.func @first(%a: i32) -> i32 {
  %c0 = arith.constant 0 : i32
  %r = arith.addi %a, %c0 : i32
  return %r : i32
}

// CHECK: // -----
// -----

// CHECK-LABEL: func.func @second
// CHECK: "onnx.relu"
func.func @second(%a: tensor<2xf32>) -> tensor<2xf32> {
  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}

// CHECK: // -----
// -----

// The same symbol in two chunks is fine: each chunk is a module of its own.
// CHECK-LABEL: func.func @first
func.func @first() {
  return
}
