// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// Loop becomes scf.while over (iteration, condition, carried values); float8 tensors are the
// i8 bytes that store them, converted with integer arithmetic; axes given at run time select
// among static reductions with scf.if.

// CHECK-LABEL: func.func @loop(
// CHECK-SAME: %{{.+}}: tensor<i64>, %{{.+}}: tensor<3xf32>) -> tensor<3xf32>
// CHECK: scf.while (%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) : (i64, i1, tensor<3xf32>) -> (i64, i1, tensor<3xf32>)
// CHECK: arith.cmpi slt
// CHECK: scf.condition
// CHECK: arith.addf
// CHECK: scf.yield
func.func @loop(%m: tensor<i64>, %x: tensor<3xf32>) -> tensor<3xf32> {
  %none = "onnx.none"() : () -> none
  %0 = "onnx.loop_v21"(%m, %none, %x) ({
  ^bb0(%i: tensor<i64>, %c: tensor<i1>, %acc: tensor<3xf32>):
    %1 = "onnx.add"(%acc, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    gpu.yield %c, %1 : tensor<i1>, tensor<3xf32>
  }) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, none, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// CHECK-LABEL: func.func @to_float8(
// CHECK-SAME: %{{.+}}: tensor<4xf32>) -> tensor<4xi8>
// CHECK: arith.bitcast {{.*}} : f32 to i32
// CHECK: math.roundeven
// CHECK: arith.trunci {{.*}} : i32 to i8
func.func @to_float8(%x: tensor<4xf32>) -> tensor<4xf8E4M3FN> {
  %0 = "onnx.cast"(%x) {to = 17 : i64} : (tensor<4xf32>) -> tensor<4xf8E4M3FN>
  return %0 : tensor<4xf8E4M3FN>
}

// -----

// CHECK-LABEL: func.func @runtime_axes(
// CHECK-SAME: -> tensor<?xf32>
// CHECK: arith.shli
// CHECK: scf.if
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["reduction", "parallel"]
// CHECK: } else {
// CHECK: iterator_types = ["parallel", "reduction"]
func.func @runtime_axes(%x: tensor<2x3xf32>, %axes: tensor<1xi64>) -> tensor<?xf32> {
  %0 = "onnx.reduce_sum"(%x, %axes) {keepdims = 0 : i64} : (tensor<2x3xf32>, tensor<1xi64>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}
