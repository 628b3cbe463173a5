// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// Reductions are reduction generics followed by tensor.expand_shape for keepdims; shape ops
// become tensor view ops; constants are arith.constant (unsigned ones rebuilt as signless).

// CHECK-DAG: #[[ID3:.+]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[RED:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-LABEL: func.func @reduce_sum_keepdims
// CHECK: linalg.generic {indexing_maps = [#[[ID3]], #[[RED]]], iterator_types = ["parallel", "reduction", "parallel"]}
// CHECK: arith.addf
// CHECK: tensor.expand_shape %{{.+}} {{\[\[}}0, 1], [2]] output_shape [%{{.+}}, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
func.func @reduce_sum_keepdims(%x: tensor<?x3x4xf32>) -> tensor<?x1x4xf32> {
  %axes = "onnx.constant"() {value = dense<[1]> : tensor<1xi64>} : () -> tensor<1xi64>
  %0 = "onnx.reduce_sum"(%x, %axes) : (tensor<?x3x4xf32>, tensor<1xi64>) -> tensor<?x1x4xf32>
  return %0 : tensor<?x1x4xf32>
}

// -----

// CHECK-LABEL: func.func @softmax
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: arith.divf
func.func @softmax(%x: tensor<2x5xf32>) -> tensor<2x5xf32> {
  %0 = "onnx.softmax"(%x) : (tensor<2x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

// CHECK-LABEL: func.func @shapes
// CHECK: linalg.transpose ins(%{{.+}} : tensor<2x3x4xf32>) outs(%{{.+}} : tensor<4x2x3xf32>) permutation = [2, 0, 1]
// CHECK: tensor.collapse_shape %{{.+}} {{\[\[}}0], [1, 2]] : tensor<4x2x3xf32> into tensor<4x6xf32>
// CHECK: tensor.expand_shape
// CHECK: tensor.extract_slice %{{.+}}[1, 0, 0] [2, 4, 6] [1, 1, 1]
func.func @shapes(%x: tensor<2x3x4xf32>) -> tensor<2x4x6xf32> {
  %0 = "onnx.transpose"(%x) {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %s = "onnx.constant"() {value = dense<[0, -1]> : tensor<2xi64>} : () -> tensor<2xi64>
  %1 = "onnx.reshape"(%0, %s) : (tensor<4x2x3xf32>, tensor<2xi64>) -> tensor<4x6xf32>
  %a = "onnx.constant"() {value = dense<[0]> : tensor<1xi64>} : () -> tensor<1xi64>
  %2 = "onnx.unsqueeze"(%1, %a) : (tensor<4x6xf32>, tensor<1xi64>) -> tensor<1x4x6xf32>
  %3 = "onnx.concat"(%2, %2, %2) {axis = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1x4x6xf32>) -> tensor<3x4x6xf32>
  %st = "onnx.constant"() {value = dense<[1]> : tensor<1xi64>} : () -> tensor<1xi64>
  %en = "onnx.constant"() {value = dense<[9]> : tensor<1xi64>} : () -> tensor<1xi64>
  %none = "onnx.none"() : () -> none
  %4 = "onnx.slice"(%3, %st, %en, %a, %none) : (tensor<3x4x6xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, none) -> tensor<2x4x6xf32>
  return %4 : tensor<2x4x6xf32>
}

// -----

// CHECK-LABEL: func.func @unsigned_constant() -> tensor<2xi8>
// CHECK: arith.constant dense<[1, -56]> : tensor<2xi8>
func.func @unsigned_constant() -> tensor<2xui8> {
  %0 = "onnx.constant"() {value = dense<[1, 200]> : tensor<2xui8>} : () -> tensor<2xui8>
  return %0 : tensor<2xui8>
}

// -----

// CHECK-LABEL: func.func @if
// CHECK: %[[C:.+]] = tensor.extract %{{.+}}[] : tensor<i1>
// CHECK: scf.if %[[C]] -> (tensor<3xf32>)
// CHECK: arith.addf
// CHECK: scf.yield
// CHECK: } else {
// CHECK: arith.negf
func.func @if(%c: tensor<i1>, %x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "onnx.if"(%c) ({
    %1 = "onnx.neg"(%x) : (tensor<3xf32>) -> tensor<3xf32>
    gpu.yield %1 : tensor<3xf32>
  }, {
    %2 = "onnx.add"(%x, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    gpu.yield %2 : tensor<3xf32>
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
