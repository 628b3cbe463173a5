# RUN: %PYTHON %s | filecheck %s
"""Two fixes found by compiling BERT-base for Vulkan (2026-11-29).

1. A transformer projection, [1, seq, hidden] x [hidden, out] (the generic the MatMul lowering
   builds: a unit batch loop and the token loop are both m loops), gets the contraction plan
   (`_is_plain_contraction` ignores loops of extent 1): register tiles and the K loop over
   promoted A and B slices, as a 2-D matmul, where it was a reduction with one workgroup per
   output element and a tree over k.
2. `_partials_to_workgroup_memory` gives a thread forall inside a workgroup whose shared output
   is a `tensor.empty` a workgroup buffer of its own, even when the empty is defined outside the
   workgroup (CSE had left one there for several kernels' partials, and bufferization made it a
   global alloc inside the kernel, which neither lowering accepts)."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu
from onnxc.targets.gpu.mapping import _partials_to_workgroup_memory

PROJECTION = """
func.func @proj(%x: tensor<1x64x48xf32>, %w: tensor<48x40xf32>) -> tensor<1x64x40xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x64x40xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x64x40xf32>) -> tensor<1x64x40xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (k, n)>,
                                        affine_map<(b, m, n, k) -> (b, m, n)>],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<1x64x48xf32>, tensor<48x40xf32>) outs(%f : tensor<1x64x40xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<1x64x40xf32>
  return %r : tensor<1x64x40xf32>
}
"""

# Vulkan's table: 16x32 block tiles of 16x8 threads (4 x 2 workgroups), the K loop by 16 over
# promoted slices.
# CHECK-LABEL: gpu.func @proj_kernel
# CHECK-SAME: known_block_size = array<i32: 16, 8, 1>, known_grid_size = array<i32: 2, 4, 1>
# CHECK: scf.for %{{.*}} = %c0 to %c48 step %c16
# CHECK: memref.alloc() {{.*}}: memref<1x16x16xf32, #gpu.address_space<workgroup>>
# CHECK: memref.alloc() {{.*}}: memref<16x32xf32, #gpu.address_space<workgroup>>
# CHECK: iterator_types = ["parallel", "parallel", "parallel", "reduction"]
# CHECK-SAME: #gpu.address_space<workgroup>>, memref<{{.*}}#gpu.address_space<workgroup>>)
# CHECK: gpu.return

PARTIALS = """
func.func @partials(%x: tensor<4x256xf32>) -> tensor<4x64xf32> {
  %z = arith.constant 0.0 : f32
  %out = tensor.empty() : tensor<4x64xf32>
  %shared = tensor.empty() : tensor<64xf32>
  %r = scf.forall (%i) in (4) shared_outs(%o = %out) -> (tensor<4x64xf32>) {
    %p = scf.forall (%t) in (64) shared_outs(%q = %shared) -> (tensor<64xf32>) {
      %one = tensor.empty() : tensor<1xf32>
      %v = linalg.fill ins(%z : f32) outs(%one : tensor<1xf32>) -> tensor<1xf32>
      scf.forall.in_parallel {
        tensor.parallel_insert_slice %v into %q[%t] [1] [1] : tensor<1xf32> into tensor<64xf32>
      }
    } {mapping = [#gpu.thread<x>]}
    %row = tensor.expand_shape %p [[0, 1]] output_shape [1, 64] : tensor<64xf32> into tensor<1x64xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %row into %o[%i, 0] [1, 64] [1, 1] : tensor<1x64xf32> into tensor<4x64xf32>
    }
  } {mapping = [#gpu.block<x>]}
  return %r : tensor<4x64xf32>
}
"""

# CHECK-LABEL: func.func @partials
# CHECK: scf.forall
# CHECK-NEXT: %[[WG:.*]] = bufferization.alloc_tensor() {memory_space = #gpu.address_space<workgroup>} : tensor<64xf32>
# CHECK-NEXT: scf.forall (%{{.*}}) in (64) shared_outs(%{{.*}} = %[[WG]])
# CHECK: {mapping = [#gpu.thread<x>]}
# CHECK: {mapping = [#gpu.block<x>]}

with ir.Context():
    m = ir.Module.parse(PROJECTION)
    map_to_gpu(m, device_for("vulkan"))
    print(m)
    m = ir.Module.parse(PARTIALS)
    _partials_to_workgroup_memory(m)
    print(m)
