# RUN: %PYTHON %s | filecheck %s
"""Workgroup-memory promotion of a contraction's operands (`map_to_gpu`, then the CUDA target's
`lower_to_ptx`): the K loop steps by the device's `matmul_k_tile`; each step the workgroup's
threads copy the A and B slices into `#gpu.address_space<workgroup>` buffers (chunk loops of
the workgroup's shape, one barrier after both copies), and the register tiles read from them, with
a barrier after the compute before the next step overwrites the buffers. Shapes divide no tile
(37x50 @ 50x70): the buffers have the static bound, the partial tiles use their leading part.
In PTX the buffers are `.shared` arrays and the barriers `bar.sync`."""

from mlir import ir

from onnxc.targets.cuda import CudaOptions, lower_to_ptx, ptx_of
from onnxc.targets.gpu import device_for, map_to_gpu

MATMUL = """
func.func @mm(%a: tensor<37x50xf32>, %b: tensor<50x70xf32>) -> tensor<37x70xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<37x70xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<37x70xf32>) -> tensor<37x70xf32>
  %r = linalg.matmul ins(%a, %b : tensor<37x50xf32>, tensor<50x70xf32>) outs(%f : tensor<37x70xf32>) -> tensor<37x70xf32>
  return %r : tensor<37x70xf32>
}
"""

# CHECK-LABEL: GPU
# Vulkan's table: 16x32 block tile, 2x2 per thread (16x8 threads), K-step 16.
# CHECK: gpu.func @mm_kernel({{.*}}) kernel attributes {known_block_size = array<i32: 16, 8, 1>, known_grid_size = array<i32: 3, 3, 1>}
# The fill of the workgroup's output tile, then a barrier before the K loop.
# CHECK: linalg.generic
# CHECK-SAME: iterator_types = ["parallel", "parallel"]
# CHECK: gpu.barrier
# CHECK: scf.for %[[K:.*]] = %c0 to %c50 step %c16
# CHECK: %[[A:.*]] = memref.alloc() {{.*}}: memref<16x16xf32, #gpu.address_space<workgroup>>
# CHECK: %[[AV:.*]] = memref.subview %[[A]][0, 0]
# CHECK: scf.for
# CHECK: scf.for
# CHECK: linalg.copy {{.*}}outs(%{{.*}} : memref<?x?xf32, strided<[16, 1], offset: ?>, #gpu.address_space<workgroup>>)
# No barrier between the A and B copies (different buffers, nothing reads them yet).
# CHECK-NOT: gpu.barrier
# CHECK: %[[B:.*]] = memref.alloc() {{.*}}: memref<16x32xf32, #gpu.address_space<workgroup>>
# CHECK-NOT: gpu.barrier
# CHECK: linalg.copy {{.*}}outs(%{{.*}} : memref<?x?xf32, strided<[32, 1], offset: ?>, #gpu.address_space<workgroup>>)
# CHECK-NOT: gpu.barrier
# CHECK: }
# CHECK-NEXT: }
# CHECK-NEXT: gpu.barrier
# The register tile reads both operands from workgroup memory, then a barrier ends the step.
# A whole 2x2 tile over a whole K-step (all but the threads at the matrix's edge and the last
# step) takes the static twin (`_full_tile_versions`): a 2x2 accumulator in registers, K
# outermost; a partial one the original, on the dynamic views.
# CHECK: %[[AT:.*]] = memref.subview %[[AV]]
# CHECK: scf.if
# CHECK: memref.alloca() : memref<2x2xf32>
# CHECK: linalg.generic
# CHECK-SAME: iterator_types = ["reduction", "parallel", "parallel"]
# CHECK-SAME: ins(%{{.*}}, %{{.*}} : memref<2x16xf32, strided<[16, 1], offset: ?>, #gpu.address_space<workgroup>>, memref<16x2xf32, strided<[32, 1], offset: ?>, #gpu.address_space<workgroup>>) outs(%{{.*}} : memref<2x2xf32>)
# CHECK: } else {
# CHECK: linalg.generic
# CHECK-SAME: iterator_types = ["parallel", "parallel", "reduction"]
# CHECK-SAME: ins(%[[AT]], %{{.*}} : memref<?x?xf32, strided<[16, 1], offset: ?>, #gpu.address_space<workgroup>>, memref<?x?xf32, strided<[32, 1], offset: ?>, #gpu.address_space<workgroup>>)
# CHECK: gpu.barrier
# CHECK-NEXT: }
# CHECK-NEXT: gpu.return

# CHECK-LABEL: PTX
# sm_80's table: 32x64 block tile of 4x4 register tiles (16x8 threads), K-step 32: (32 + 64) x 32 floats
# of shared memory; 128 threads at 128 registers each: 4 blocks per SM (.minnctapersm).
# CHECK: .maxntid 16, 8, 1
# CHECK: .minnctapersm 4
# CHECK-DAG: .shared .align {{[0-9]+}} .b8 {{.*}}[4096];
# CHECK-DAG: .shared .align {{[0-9]+}} .b8 {{.*}}[8192];
# CHECK: st.shared.b32
# CHECK: bar.sync 0;
# CHECK: ld.shared.b32
# The multiply-adds are fused (cuda.lowering.fuse_multiply_adds): one rounding per step.
# CHECK-NOT: mul.rn.f32
# CHECK: fma.rn.f32

with ir.Context():
    m = ir.Module.parse(MATMUL)
    map_to_gpu(m, device_for("vulkan"))
    print("GPU")
    print(m)
    m = ir.Module.parse(MATMUL)
    map_to_gpu(m, device_for("sm_80"))
    lower_to_ptx(m, CudaOptions("sm_80", "+ptx80"))
    print("PTX")
    for text in ptx_of(m).values():
        print(text)
