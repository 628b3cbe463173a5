# RUN: %PYTHON %s | filecheck %s
"""`lower_kernels_to_loops` (both emitters' first step) replaces `arith.remf` in kernels by an
exact fmod: |b| doubled up to |a| (first scf.while), then |a| reduced by the halving multiples
(second scf.while), the sign of a restored, NaN for b = 0, infinite a or a NaN operand. A GPU
frem may be `a - b * trunc(a / b)` (Mesa), wrong for an infinite b or a large quotient."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu
from onnxc.targets.gpu.mapping import lower_kernels_to_loops

SRC = """
func.func @fmod(%a: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<64xf32> {
  %e = tensor.empty() : tensor<64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                       iterator_types = ["parallel"]}
      ins(%a, %b : tensor<64xf32>, tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.remf %x, %y : f32
    linalg.yield %m : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}
"""

# CHECK: gpu.func @fmod_kernel
# CHECK-NOT: arith.remf
# CHECK: %[[AA:.*]] = math.absf %[[A:.*]] : f32
# CHECK: %[[AB:.*]] = math.absf %[[B:.*]] : f32
# CHECK: %[[S:.*]] = scf.while (%{{.*}} = %[[AB]]) : (f32) -> f32
# CHECK: arith.cmpf ole
# CHECK: scf.condition
# CHECK: arith.mulf
# CHECK: %[[R:.*]]:2 = scf.while (%{{.*}} = %[[AA]], %{{.*}} = %[[S]]) : (f32, f32) -> (f32, f32)
# CHECK: arith.cmpf oge
# CHECK: arith.subf
# CHECK: %[[SIGNED:.*]] = math.copysign %[[R]]#0, %[[A]] : f32
# CHECK: arith.cmpf uno, %[[A]], %[[B]]
# CHECK: arith.select %{{.*}}, %cst{{.*}}, %[[SIGNED]] : f32
# CHECK-NOT: arith.remf

with ir.Context():
    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("vulkan"))
    lower_kernels_to_loops(m)
    print(m)
