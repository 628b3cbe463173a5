# RUN: %PYTHON %s | filecheck %s
"""Host-side copies that involve a strided view become copy kernels (`_host_copies_to_kernels`):
here bufferization must save a column slice of a buffer before an insert_slice overwrites it,
and copy the inserted values into the slice; the host runs only whole-buffer copies."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu

SRC = """
func.func @hostcopy(%a: tensor<4x4xf32>) -> (tensor<4x8xf32>, tensor<4x4xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %s = tensor.extract_slice %f[0, 0] [4, 4] [1, 1] : tensor<4x8xf32> to tensor<4x4xf32>
  %i = tensor.insert_slice %a into %f[0, 0] [4, 4] [1, 1] : tensor<4x4xf32> into tensor<4x8xf32>
  %e2 = tensor.empty() : tensor<4x4xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<4x4xf32>) outs(%e2 : tensor<4x4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.addf %x, %x : f32
    linalg.yield %r : f32
  } -> tensor<4x4xf32>
  return %i, %g : tensor<4x8xf32>, tensor<4x4xf32>
}
"""

# CHECK-LABEL: func.func @hostcopy
# CHECK: %[[VIEW:.*]] = memref.subview %{{.*}}[0, 0] [4, 4] [1, 1] : memref<4x8xf32> to memref<4x4xf32, strided<[8, 1]>>
# The saved slice: a kernel copies the strided view into a whole buffer.
# CHECK: gpu.launch_func @hostcopy_kernel_0::@hostcopy_kernel {{.*}} args(%[[VIEW]] : memref<4x4xf32, strided<[8, 1]>>, %{{.*}} : memref<4x4xf32>)
# CHECK-NOT: memref.copy %{{.*}}strided
# The inserted values: a kernel copies them into the strided view.
# CHECK: gpu.launch_func @hostcopy_kernel_2::@hostcopy_kernel {{.*}} args(%{{.*}} : memref<4x4xf32>, %[[VIEW]] : memref<4x4xf32, strided<[8, 1]>>)
# CHECK-NOT: memref.copy %{{.*}}strided
# CHECK: return
# CHECK: gpu.func @hostcopy_kernel(%{{.*}}: memref<4x4xf32, strided<[8, 1]>>, %{{.*}}: memref<4x4xf32>)
# CHECK: gpu.thread_id
# CHECK: linalg.copy

with ir.Context():
    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("vulkan"))
    print(m)
