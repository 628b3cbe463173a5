# RUN: %PYTHON %s | filecheck %s
"""`dedupe_kernels`: identical kernels (a model's repeated layers) become one `gpu.module`, every
`gpu.launch_func` pointing at it; kernels that differ in anything but their names (here the op,
or the tensor's size and hence the grid) stay apart."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu

LAYERS = """
#id = affine_map<(i, j) -> (i, j)>
func.func @layers(%x: tensor<64x32xf32>, %w: tensor<64x32xf32>, %y: tensor<16x32xf32>)
    -> (tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<16x32xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x32xf32>
  %relu_x = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<64x32xf32>) outs(%e : tensor<64x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  } -> tensor<64x32xf32>
  %exp_x = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<64x32xf32>) outs(%e : tensor<64x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = math.exp %a : f32
    linalg.yield %m : f32
  } -> tensor<64x32xf32>
  %relu_w = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<64x32xf32>) outs(%e : tensor<64x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  } -> tensor<64x32xf32>
  %e2 = tensor.empty() : tensor<16x32xf32>
  %relu_y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<16x32xf32>) outs(%e2 : tensor<16x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  } -> tensor<16x32xf32>
  return %relu_x, %exp_x, %relu_w, %relu_y : tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<16x32xf32>
}
"""

# The two 64x32 Relus share a kernel; the Exp and the 16x32 Relu have their own.
# CHECK-LABEL: func.func @layers
# CHECK: gpu.launch_func @[[RELU:[a-z_0-9]+]]::@{{.*}} blocks in (%{{.*}}, %c16, %{{.*}}) {{.*}} args(%arg0
# CHECK: gpu.launch_func @[[EXP:[a-z_0-9]+]]::@{{.*}} args(%arg0
# CHECK: gpu.launch_func @[[RELU]]::@{{.*}} args(%arg1
# CHECK: gpu.launch_func @[[SMALL:[a-z_0-9]+]]::@{{.*}} blocks in (%{{.*}}, %c4, %{{.*}}) {{.*}} args(%arg2
# CHECK-DAG: gpu.module @[[RELU]] {
# CHECK-DAG: gpu.module @[[EXP]] {
# CHECK-DAG: gpu.module @[[SMALL]] {
# CHECK-NOT: gpu.module

with ir.Context():
    m = ir.Module.parse(LAYERS)
    map_to_gpu(m, device_for("vulkan"))
    print(m)
