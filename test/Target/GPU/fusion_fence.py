# RUN: %PYTHON %s | filecheck %s
"""Contractions are kept out of elementwise fusion (`_fused_elementwise`): a GELU-like
producer (Erf) of a MatMul behind a reshape, as in a transformer's FFN, stays a kernel of its
own, and the MatMul keeps the contraction plan (promoted K-steps). Fused, the Erf was
recomputed for every output column and the MatMul, no longer a plain contraction, got one
workgroup per output element."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu

FFN = """
#id = affine_map<(b, m, k) -> (b, m, k)>
func.func @ffn(%x: tensor<1x16x32xf32>, %w: tensor<32x24xf32>) -> tensor<1x16x24xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x16x32xf32>
  %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<1x16x32xf32>) outs(%e : tensor<1x16x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.erf %a : f32
    %p = arith.mulf %a, %t : f32
    linalg.yield %p : f32
  } -> tensor<1x16x32xf32>
  %c = tensor.collapse_shape %g [[0, 1], [2]] : tensor<1x16x32xf32> into tensor<16x32xf32>
  %o = tensor.empty() : tensor<16x24xf32>
  %f = linalg.fill ins(%z : f32) outs(%o : tensor<16x24xf32>) -> tensor<16x24xf32>
  %r = linalg.matmul ins(%c, %w : tensor<16x32xf32>, tensor<32x24xf32>) outs(%f : tensor<16x24xf32>) -> tensor<16x24xf32>
  %y = tensor.expand_shape %r [[0, 1], [2]] output_shape [1, 16, 24] : tensor<16x24xf32> into tensor<1x16x24xf32>
  return %y : tensor<1x16x24xf32>
}
"""

# CHECK-LABEL: func.func @ffn
# CHECK-COUNT-2: gpu.launch_func
# CHECK-NOT: gpu.launch_func
# The Erf kernel: elementwise, no reduction loop.
# CHECK: gpu.func @ffn_kernel(
# CHECK-NOT: scf.for
# CHECK: math.erf
# CHECK: gpu.return
# The MatMul kernel: K-steps of 16 over promoted slices, and no Erf in it.
# CHECK: gpu.func @ffn_kernel(
# CHECK-NOT: math.erf
# CHECK: scf.for %{{.*}} = %c0 to %c32 step %c16
# CHECK: #gpu.address_space<workgroup>
# CHECK-NOT: math.erf
# CHECK: gpu.return

with ir.Context():
    m = ir.Module.parse(FFN)
    map_to_gpu(m, device_for("vulkan"))
    print(m)
