# RUN: %PYTHON %s | filecheck %s
"""Register-tiled convolutions (`conv_plan`): each thread computes a tile of neighbouring output
positions times neighbouring output channels, accumulated in a private buffer (registers), the
window and input-channel loops outermost, so every loaded input feeds a row of the tile and
every loaded filter value a column of it.

The `vulkan_cpu` table (a Vulkan driver on the CPU: conv thread tile 4x4, block tile 32x32, 128
threads): an 8x8x16 output gets 4x4 tiles, 2 threads along the width (8 / 4), 4 along the
channels (16 / 4), and the height fills the workgroup (all 8 rows: 64 threads), one workgroup.
GPU tables keep one output per thread (register tiles were slower on an H200)."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu

CONV = """
func.func @conv(%x: tensor<1x10x10x8xf32>, %w: tensor<3x3x8x16xf32>) -> tensor<1x8x8x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x8x8x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %r = linalg.conv_2d_nhwc_hwcf ins(%x, %w : tensor<1x10x10x8xf32>, tensor<3x3x8x16xf32>) outs(%f : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  return %r : tensor<1x8x8x16xf32>
}
"""

# CHECK-LABEL: gpu.func @conv_kernel
# CHECK-SAME: known_block_size = array<i32: 4, 2, 8>, known_grid_size = array<i32: 1, 1, 1>
# The thread's input window (3 rows, 4 + 3 - 1 columns), filter columns and output tile.
# CHECK: memref.subview {{.*}} [1, 3, 6, 8] [1, 1, 1, 1]
# CHECK: memref.subview {{.*}} [3, 3, 8, 4] [1, 1, 1, 1]
# CHECK: %[[TILE:.*]] = memref.subview {{.*}} [1, 1, 4, 4] [1, 1, 1, 1]
# CHECK: %[[ACC:.*]] = memref.alloca() : memref<1x1x4x4xf32>
# CHECK: linalg.copy {{.*}} ins(%[[TILE]] {{.*}} outs(%[[ACC]]
# CHECK: iterator_types = ["reduction", "reduction", "reduction", "parallel", "parallel", "parallel", "parallel"]
# CHECK-SAME: outs(%[[ACC]] : memref<1x1x4x4xf32>)
# CHECK: linalg.copy {{.*}} ins(%[[ACC]] {{.*}} outs(%[[TILE]]
# No barrier: the kernel has no workgroup memory.
# CHECK-NOT: gpu.barrier
# CHECK: gpu.return

DEPTHWISE = """
func.func @depthwise(%x: tensor<1x9x9x16xf32>, %w: tensor<3x3x16xf32>) -> tensor<1x7x7x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x7x7x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x7x7x16xf32>) -> tensor<1x7x7x16xf32>
  %r = linalg.depthwise_conv_2d_nhwc_hwc ins(%x, %w : tensor<1x9x9x16xf32>, tensor<3x3x16xf32>) outs(%f : tensor<1x7x7x16xf32>) -> tensor<1x7x7x16xf32>
  return %r : tensor<1x7x7x16xf32>
}
"""

# A depthwise convolution: the channel loop is a depth loop (no output channels). A width of 7
# has no power-of-two tile up to 4 but 1, so the thread takes all 7 positions (a divisor of at
# most twice the table's 4) times 4 channels: 4 threads along the channels, 1 along the width,
# and the 7 rows of the height.
# CHECK-LABEL: gpu.func @depthwise_kernel
# CHECK-SAME: known_block_size = array<i32: 4, 1, 7>, known_grid_size = array<i32: 1, 1, 1>
# CHECK: memref.alloca() : memref<1x1x7x4xf32>
# CHECK: iterator_types = ["reduction", "reduction", "parallel", "parallel", "parallel", "parallel"]

# The GPU table (`vulkan`, as CUDA's): one output per thread, no register tile.
# CHECK-LABEL: gpu.func @conv_kernel
# CHECK-SAME: known_block_size = array<i32: 16, 8, 1>
# CHECK: memref.alloca() : memref<1x1x1x1xf32>

with ir.Context():
    for src, device in ((CONV, "vulkan_cpu"), (DEPTHWISE, "vulkan_cpu"), (CONV, "vulkan")):
        m = ir.Module.parse(src)
        map_to_gpu(m, device_for(device))
        print(m)
