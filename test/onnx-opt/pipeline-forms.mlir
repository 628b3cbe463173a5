// RUN: onnx-opt %s -p 'canonicalize{max-iterations=3 region-simplify=disabled},func.func(cse)' | filecheck %s
// RUN: onnx-opt %s -p 'canonicalize{max-iterations=3 region-simplify=disabled},func.func(cse)' > %t.short
// RUN: onnx-opt %s --pass-pipeline='builtin.module(canonicalize{max-iterations=3 region-simplify=disabled},func.func(cse))' > %t.long
// RUN: diff %t.short %t.long
// `-p a,b` and `--pass-pipeline='builtin.module(a,b)'` are the same pipeline; options in braces
// and nested anchors pass through to MLIR. (IRDL ops declare no memory effects, so CSE leaves the
// two `onnx.relu` alone; it merges the pure `arith.muli`s.)

// CHECK-LABEL: func.func @f
// CHECK-NEXT: %[[M:.*]] = arith.muli %arg1, %arg1 : i32
// CHECK-NEXT: %[[S:.*]] = arith.addi %[[M]], %[[M]] : i32
// CHECK-NEXT: "onnx.relu"(%arg0)
// CHECK-NEXT: "onnx.relu"(%arg0)
func.func @f(%a: tensor<2xf32>, %i: i32) -> (tensor<2xf32>, tensor<2xf32>, i32) {
  %c0 = arith.constant 0 : i32
  %m1 = arith.muli %i, %i : i32
  %m2 = arith.muli %i, %i : i32
  %s = arith.addi %m1, %m2 : i32
  %r1 = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  %r2 = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %r1, %r2, %s : tensor<2xf32>, tensor<2xf32>, i32
}
