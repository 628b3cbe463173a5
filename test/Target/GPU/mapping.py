# RUN: %PYTHON %s | filecheck %s
"""The GPU mapping stage (`onnxc.targets.gpu.map_to_gpu`): an elementwise chain becomes one
kernel with one element per thread and the innermost loop on thread x; a matmul becomes one
kernel whose fill is fused into it, with a register tile per thread; a tensor.insert_slice (a Pad)
becomes a copy kernel writing through a static subview of the destination."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu

ELEMENTWISE = """
func.func @chain(%a: tensor<8x100xf32>, %b: tensor<100xf32>) -> tensor<8x100xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x100xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<8x100xf32>, tensor<100xf32>) outs(%e : tensor<8x100xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<8x100xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<8x100xf32>) outs(%e : tensor<8x100xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.maximumf %x, %z : f32
    linalg.yield %r : f32
  } -> tensor<8x100xf32>
  return %t : tensor<8x100xf32>
}
"""

# CHECK-LABEL: func.func @chain
# The two elementwise ops are fused: one launch, 100 threads along x (the innermost loop), one
# row per workgroup on y (128 threads / 100 leaves 1), 8 workgroups.
# CHECK: gpu.launch_func @chain_kernel::@chain_kernel blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in
# CHECK-NOT: gpu.launch_func
# CHECK: gpu.module @chain_kernel
# CHECK: gpu.func @chain_kernel({{.*}}) kernel attributes {known_block_size = array<i32: 100, 1, 1>, known_grid_size = array<i32: 1, 8, 1>}
# CHECK: gpu.block_id y
# CHECK: gpu.thread_id x
# CHECK: arith.addf
# CHECK: arith.maximumf

MATMUL = """
func.func @mm(%a: tensor<37x50xf32>, %b: tensor<50x70xf32>) -> tensor<37x70xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<37x70xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<37x70xf32>) -> tensor<37x70xf32>
  %r = linalg.matmul ins(%a, %b : tensor<37x50xf32>, tensor<50x70xf32>) outs(%f : tensor<37x70xf32>) -> tensor<37x70xf32>
  return %r : tensor<37x70xf32>
}
"""

# CHECK-LABEL: func.func @mm
# The fill is fused into the matmul's kernel: a single launch. Vulkan's table: 16x32 output tile
# per workgroup, 2x2 per thread -> 16x8 threads; ceil(37/16) x ceil(70/32) = 3x3 workgroups.
# CHECK: gpu.launch_func @mm_kernel::@mm_kernel
# CHECK-NOT: gpu.launch_func
# CHECK: gpu.func @mm_kernel({{.*}}) kernel attributes {known_block_size = array<i32: 16, 8, 1>, known_grid_size = array<i32: 3, 3, 1>}
# CHECK: gpu.thread_id x
# CHECK: gpu.thread_id y
# CHECK: linalg.generic
# CHECK-SAME: iterator_types = ["parallel", "parallel"]
# 37 and 70 divide no tile: a whole 2x2 tile takes a static twin (registers, K outermost), the
# edge's partial tiles the original (`_full_tile_versions`).
# CHECK: scf.if
# CHECK: linalg.generic
# CHECK-SAME: iterator_types = ["reduction", "parallel", "parallel"]
# CHECK-SAME: outs(%{{.*}} : memref<2x2xf32>)
# CHECK: arith.mulf
# CHECK: arith.addf
# CHECK: } else {
# CHECK: linalg.generic
# CHECK-SAME: iterator_types = ["parallel", "parallel", "reduction"]

PAD = """
func.func @pad(%a: tensor<4x6xf32>) -> tensor<6x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<6x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<6x8xf32>) -> tensor<6x8xf32>
  %r = tensor.insert_slice %a into %f[1, 1] [4, 6] [1, 1] : tensor<4x6xf32> into tensor<6x8xf32>
  return %r : tensor<6x8xf32>
}
"""

# CHECK-LABEL: func.func @pad
# The fill kernel, then a copy kernel given a static subview of the padded buffer.
# CHECK: gpu.launch_func @pad_kernel::@pad_kernel
# CHECK: %[[VIEW:.*]] = memref.subview %{{.*}}[1, 1] [4, 6] [1, 1] : memref<6x8xf32> to memref<4x6xf32, strided<[8, 1], offset: 9>>
# CHECK: gpu.launch_func @pad_kernel_0::@pad_kernel {{.*}} args(%{{.*}} : memref<4x6xf32>, %[[VIEW]] : memref<4x6xf32, strided<[8, 1], offset: 9>>)
# No host-side copy: the host function ends right after the copy kernel's launch.
# CHECK-NOT: memref.copy
# CHECK: return

ROWSUM = """
func.func @rowsum(%a: tensor<6x1000xf32>) -> tensor<6xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<6xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<6xf32>) -> tensor<6xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%a : tensor<6x1000xf32>) outs(%f : tensor<6xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %x, %o : f32
    linalg.yield %s : f32
  } -> tensor<6xf32>
  return %r : tensor<6xf32>
}
"""

# CHECK-LABEL: func.func @rowsum
# A tree per row: 6 workgroups of 128 threads; each thread sums a chunk of 8 into its slot of a
# workgroup buffer, a barrier, then thread 0 combines the 128 partials.
# CHECK: gpu.launch_func @rowsum_kernel::@rowsum_kernel blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in
# CHECK: gpu.func @rowsum_kernel({{.*}}) kernel attributes {known_block_size = array<i32: 128, 1, 1>, known_grid_size = array<i32: 6, 1, 1>}
# CHECK: %[[PARTIALS:.*]] = memref.alloc() {{.*}}: memref<1x128xf32, #gpu.address_space<workgroup>>
# CHECK: gpu.thread_id x
# CHECK: linalg.fill
# CHECK: linalg.generic
# CHECK-SAME: iterator_types = ["parallel", "reduction"]
# CHECK: gpu.barrier
# CHECK: scf.if
# CHECK: linalg.reduce ins(%[[PARTIALS]] : memref<1x128xf32, #gpu.address_space<workgroup>>)

MM_EVEN = """
func.func @mm_even(%a: tensor<32x48xf32>, %b: tensor<48x64xf32>) -> tensor<32x64xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<32x64xf32>) -> tensor<32x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<32x48xf32>, tensor<48x64xf32>) outs(%f : tensor<32x64xf32>) -> tensor<32x64xf32>
  return %r : tensor<32x64xf32>
}
"""

# CHECK-LABEL: func.func @mm_even
# Tiles that divide the shape: each thread's 2x2 accumulator is private (an alloca), copied in
# once before the K loop (_hoist_private_accumulators), accumulated over each K-step of the
# promoted operands (promotion.py) with the K loop outermost in the tile (_reductions_outermost:
# the tile's A column and B row are loaded once per k), and copied out once after the loop.
# CHECK: gpu.func @mm_even_kernel
# CHECK: %[[ACC:.*]] = memref.alloca() : memref<2x2xf32>
# CHECK-NEXT: linalg.copy {{.*}}ins(%{{.*}} : memref<2x2xf32, strided<[64, 1], offset: ?>>) outs(%[[ACC]] : memref<2x2xf32>)
# CHECK-NEXT: scf.for
# CHECK-NOT: linalg.copy {{.*}}outs(%[[ACC]]
# CHECK: linalg.generic
# CHECK-SAME: iterator_types = ["reduction", "parallel", "parallel"]
# CHECK-SAME: outs(%[[ACC]] : memref<2x2xf32>)
# CHECK: gpu.barrier
# CHECK-NEXT: }
# CHECK-NEXT: linalg.copy {{.*}}ins(%[[ACC]] : memref<2x2xf32>)
# CHECK-NEXT: gpu.return

SPLIT = """
func.func @split(%a: tensor<2x6xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %l = tensor.extract_slice %a[0, 0] [2, 3] [1, 1] : tensor<2x6xf32> to tensor<2x3xf32>
  %r = tensor.extract_slice %a[0, 3] [2, 3] [1, 1] : tensor<2x6xf32> to tensor<2x3xf32>
  return %l, %r : tensor<2x3xf32>, tensor<2x3xf32>
}
"""

# CHECK-LABEL: func.func @split
# Returned slices (a Split) are copied by kernels reading strided subviews of the input: the
# host does no memref.copy (it would have to copy a strided view into each result).
# CHECK-NOT: memref.copy
# CHECK: %[[L:.*]] = memref.subview %arg0[0, 0] [2, 3] [1, 1] : memref<2x6xf32> to memref<2x3xf32, strided<[6, 1]>>
# CHECK: gpu.launch_func @split_kernel::@split_kernel {{.*}} args(%[[L]] : memref<2x3xf32, strided<[6, 1]>>
# CHECK: %[[R:.*]] = memref.subview %arg0[0, 3] [2, 3] [1, 1] : memref<2x6xf32> to memref<2x3xf32, strided<[6, 1], offset: 3>>
# CHECK: gpu.launch_func @split_kernel_0::@split_kernel {{.*}} args(%[[R]] : memref<2x3xf32, strided<[6, 1], offset: 3>>
# CHECK-NOT: memref.copy
# CHECK: return

with ir.Context():
    for src in (ELEMENTWISE, MATMUL, PAD, ROWSUM, MM_EVEN, SPLIT):
        m = ir.Module.parse(src)
        map_to_gpu(m, device_for("vulkan"))
        print(m)
