# RUN: %PYTHON %s | filecheck %s
"""Tensor cores on the CUDA path (`map_to_gpu(..., mma_types)`, then `lower_to_ptx`): a
contraction of whole tiles runs in a workgroup of 2x2 warps (32 lanes on x, warps on y) over a
32x32 output tile; each K-step's operands are promoted to workgroup memory as on the SIMT path,
then each warp's 16x16 tile is cut into static m16n8 pieces that upstream's
`rewrite_matmul_as_mma_sync` turns into `nvgpu.mma.sync` (f16 operands accumulated in f16:
m16n8k16; f32 operands as tf32: m16n8k4). In PTX: `mma.sync.aligned`."""

from mlir import ir

from onnxc.targets.cuda import CudaOptions, lower_to_ptx, ptx_of
from onnxc.targets.gpu import device_for, map_to_gpu


def matmul(t: str) -> str:
    return f"""
func.func @mm_{t}(%a: tensor<64x96x{t}>, %b: tensor<96x64x{t}>) -> tensor<64x64x{t}> {{
  %z = arith.constant 0.0 : {t}
  %e = tensor.empty() : tensor<64x64x{t}>
  %f = linalg.fill ins(%z : {t}) outs(%e : tensor<64x64x{t}>) -> tensor<64x64x{t}>
  %r = linalg.matmul ins(%a, %b : tensor<64x96x{t}>, tensor<96x64x{t}>) outs(%f : tensor<64x64x{t}>) -> tensor<64x64x{t}>
  return %r : tensor<64x64x{t}>
}}
"""


# CHECK-LABEL: GPU f16
# 32 lanes x 4 warps per workgroup, 2x2 workgroups of 32x32.
# CHECK: gpu.func @mm_f16_kernel({{.*}}) kernel attributes {known_block_size = array<i32: 32, 4, 1>, known_grid_size = array<i32: 2, 2, 1>}
# CHECK: scf.for %{{.*}} = %c0 to %c96 step %c32
# CHECK: memref.alloc() {{.*}}: memref<32x32xf16, #gpu.address_space<workgroup>>
# CHECK-NOT: gpu.barrier
# CHECK: memref.alloc() {{.*}}: memref<32x32xf16, #gpu.address_space<workgroup>>
# CHECK: gpu.barrier
# Each warp: m16 x n8 pieces, k16 steps, reading the workgroup buffers.
# CHECK: memref.load {{.*}} : memref<16x16xf16, strided<[32, 1], offset: ?>, #gpu.address_space<workgroup>>
# CHECK: nvgpu.mma.sync({{.*}}) {mmaShape = [16, 8, 16]} : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf16>) -> vector<2x2xf16>
# CHECK: gpu.barrier
# CHECK-NOT: linalg.matmul

# CHECK-LABEL: PTX f16
# CHECK: mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16

# CHECK-LABEL: GPU f32
# CHECK: nvgpu.mma.sync({{.*}}) {mmaShape = [16, 8, 4], tf32Enabled} : (vector<2x1xf32>, vector<1x1xf32>, vector<2x2xf32>) -> vector<2x2xf32>

# CHECK-LABEL: PTX f32
# CHECK: mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32

with ir.Context():
    for t, kinds in (("f16", {"f16"}), ("f32", {"tf32"})):
        m = ir.Module.parse(matmul(t))
        map_to_gpu(m, device_for("sm_80"), frozenset(kinds))
        print(f"GPU {t}")
        print(m)
        lower_to_ptx(m, CudaOptions("sm_80", "+ptx80"))
        print(f"PTX {t}")
        for text in ptx_of(m).values():
            print(text)
