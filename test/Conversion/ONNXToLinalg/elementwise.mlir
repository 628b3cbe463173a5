// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// Elementwise ops become one linalg.generic each, with numpy broadcasting in the indexing maps
// and dynamic dims from tensor.dim; unsigned element types become signless with unsigned ops.

// CHECK-DAG: #[[ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[ROW:.+]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @add_broadcast(
// CHECK-SAME: %[[A:.+]]: tensor<?x3xf32>, %[[B:.+]]: tensor<3xf32>) -> tensor<?x3xf32>
// CHECK: %[[D:.+]] = tensor.dim %[[A]], %{{.+}} : tensor<?x3xf32>
// CHECK: %[[E:.+]] = tensor.empty(%[[D]]) : tensor<?x3xf32>
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ID]]], iterator_types = ["parallel", "parallel"]} ins(%[[A]], %[[B]] : tensor<?x3xf32>, tensor<3xf32>) outs(%[[E]] : tensor<?x3xf32>)
// CHECK: arith.addf
// CHECK-NOT: onnx.
func.func @add_broadcast(%a: tensor<?x3xf32>, %b: tensor<3xf32>) -> tensor<?x3xf32> {
  %0 = "onnx.add"(%a, %b) : (tensor<?x3xf32>, tensor<3xf32>) -> tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}

// -----

// A static size-1 dim broadcasts through a constant 0 in the map.
// CHECK: affine_map<(d0, d1) -> (0, d1)>
// CHECK-LABEL: func.func @size_one
// CHECK: arith.mulf
func.func @size_one(%a: tensor<4x3xf32>, %b: tensor<1x3xf32>) -> tensor<4x3xf32> {
  %0 = "onnx.mul"(%a, %b) : (tensor<4x3xf32>, tensor<1x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// CHECK-LABEL: func.func @unsigned(
// CHECK-SAME: tensor<4xi8>, %{{.+}}: tensor<4xi8>) -> tensor<4xi1>
// CHECK: arith.divui
// CHECK: arith.cmpi ult
// CHECK: arith.uitofp {{.*}} : i8 to f32
func.func @unsigned(%a: tensor<4xui8>, %b: tensor<4xui8>) -> tensor<4xi1> {
  %0 = "onnx.div"(%a, %b) : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
  %1 = "onnx.less"(%0, %b) : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xi1>
  %2 = "onnx.cast"(%0) {to = 1 : i64} : (tensor<4xui8>) -> tensor<4xf32>
  return %1 : tensor<4xi1>
}

// -----

// f16 transcendental functions are computed in f32.
// CHECK-LABEL: func.func @exp_f16
// CHECK: arith.extf {{.*}} : f16 to f32
// CHECK: math.exp {{.*}} : f32
// CHECK: arith.truncf {{.*}} : f32 to f16
func.func @exp_f16(%a: tensor<8xf16>) -> tensor<8xf16> {
  %0 = "onnx.exp"(%a) : (tensor<8xf16>) -> tensor<8xf16>
  return %0 : tensor<8xf16>
}

// -----

// CHECK-LABEL: func.func @where_clip
// CHECK: arith.select
// CHECK: arith.maximumf
// CHECK: arith.minimumf
func.func @where_clip(%c: tensor<2x3xi1>, %x: tensor<2x3xf32>, %y: tensor<3xf32>, %lo: tensor<f32>, %hi: tensor<f32>) -> tensor<2x3xf32> {
  %0 = "onnx.where"(%c, %x, %y) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = "onnx.clip"(%0, %lo, %hi) : (tensor<2x3xf32>, tensor<f32>, tensor<f32>) -> tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}
