// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// Random ops become one parallel generic per op computing Philox4x32-10 in arith ops on the
// element's counter (its linear index): 32x32->64 multiplies by the Philox constants
// 0xD2511F53 = 3528531795 and 0xCD9E8D57 = 3449720151 as i64 products, key xors; no ONNX op and
// no call remains.

// CHECK-LABEL: func.func @uniform
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]{{.*}} outs(%{{.+}} : tensor<4x8xf32>)
// CHECK: linalg.index 0
// CHECK: linalg.index 1
// CHECK: arith.constant 3528531795 : i64
// CHECK: arith.muli %{{.+}}, %{{.+}} : i64
// CHECK: arith.constant 3449720151 : i64
// CHECK: arith.xori
// CHECK: arith.uitofp
// CHECK: linalg.yield
// CHECK-NOT: onnx.
// CHECK-NOT: call
func.func @uniform() -> tensor<4x8xf32> {
  %0 = "onnx.random_uniform"() {seed = 1.000000e+00 : f32, shape = array<i64: 4, 8>} : () -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Bernoulli reads its probabilities (dynamic length) and compares a uniform with them.
// CHECK-LABEL: func.func @bernoulli
// CHECK: linalg.generic {{.*}}ins(%{{.+}} : tensor<?xf32>) outs(%{{.+}} : tensor<?xf32>)
// CHECK: arith.cmpf olt
// CHECK: arith.uitofp %{{.+}} : i1 to f32
func.func @bernoulli(%p: tensor<?xf32>) -> tensor<?xf32> {
  %0 = "onnx.bernoulli"(%p) {seed = 2.000000e+00 : f32} : (tensor<?xf32>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

// Training-mode Dropout with a run-time ratio and mode: 1 / (1 - ratio) once outside the loop,
// data and mask from one generic.
// CHECK-LABEL: func.func @dropout
// CHECK: arith.divf %{{.+}}, %{{.+}} : f64
// CHECK: %{{.+}}:2 = linalg.generic
// CHECK-SAME: outs(%{{.+}}, %{{.+}} : tensor<3x5xf32>, tensor<3x5xi1>)
// CHECK: arith.cmpf oge
func.func @dropout(%x: tensor<3x5xf32>, %r: tensor<f32>, %t: tensor<i1>) -> (tensor<3x5xf32>, tensor<3x5xi1>) {
  %0, %1 = "onnx.dropout"(%x, %r, %t) {seed = 3 : i64} : (tensor<3x5xf32>, tensor<f32>, tensor<i1>) -> (tensor<3x5xf32>, tensor<3x5xi1>)
  return %0, %1 : tensor<3x5xf32>, tensor<3x5xi1>
}
