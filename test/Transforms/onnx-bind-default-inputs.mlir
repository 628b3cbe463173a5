// RUN: onnx-opt %s --split-input-file -p onnx-bind-default-inputs | filecheck %s

// A graph input with an initializer (`onnx.default`) becomes a constant of its default at the
// initializer's location and leaves the signature; the other inputs keep their order and names.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<2xf32> {onnx.name = "x"}, %arg1: tensor<2xf32> {onnx.name = "y"}) -> tensor<2xf32>
// CHECK-NEXT: %[[W:.*]] = "onnx.constant"() {value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>}
// CHECK-NEXT: %[[A:.*]] = "onnx.add"(%arg0, %[[W]])
// CHECK-NEXT: %[[M:.*]] = "onnx.mul"(%[[A]], %arg1)
// CHECK-NEXT: return %[[M]]
func.func @main(%x: tensor<2xf32> {onnx.name = "x"},
                %w: tensor<2xf32> {onnx.name = "w", onnx.default = dense<[1.0, 2.0]> : tensor<2xf32>},
                %y: tensor<2xf32> {onnx.name = "y"}) -> tensor<2xf32> {
  %a = "onnx.add"(%x, %w) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %m = "onnx.mul"(%a, %y) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %m : tensor<2xf32>
}

// -----

// Without defaults the function is unchanged.
// CHECK-LABEL: func.func @plain
// CHECK-SAME: (%arg0: tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT: return %arg0
func.func @plain(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
