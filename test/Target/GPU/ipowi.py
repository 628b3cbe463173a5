# RUN: %PYTHON %s | filecheck %s
"""`lower_kernels_to_loops` (both emitters' first step) replaces `math.ipowi` in kernels, which
neither the SPIR-V nor the NVVM conversion lowers, by exponentiation by squaring: an scf.while
over (result, base, exponent) that multiplies the result by the base on odd exponents, squares
the base and halves the exponent; a negative exponent selects 1, +-1 (base -1, by parity) or 0."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu
from onnxc.targets.gpu.mapping import lower_kernels_to_loops

SRC = """
func.func @ipow(%a: tensor<64xi32>, %b: tensor<64xi32>) -> tensor<64xi32> {
  %e = tensor.empty() : tensor<64xi32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                       iterator_types = ["parallel"]}
      ins(%a, %b : tensor<64xi32>, tensor<64xi32>) outs(%e : tensor<64xi32>) {
  ^bb0(%x: i32, %y: i32, %o: i32):
    %p = math.ipowi %x, %y : i32
    linalg.yield %p : i32
  } -> tensor<64xi32>
  return %r : tensor<64xi32>
}
"""

# CHECK: gpu.func @ipow_kernel
# CHECK-NOT: math.ipowi
# CHECK: %[[L:.*]]:3 = scf.while (%{{.*}} = %{{.*}}, %{{.*}} = %[[A:.*]], %{{.*}} = %[[B:.*]]) : (i32, i32, i32) -> (i32, i32, i32)
# CHECK: arith.cmpi sgt
# CHECK: scf.condition
# CHECK: arith.muli
# CHECK: arith.muli
# CHECK: arith.shrui
# CHECK: %[[NEG:.*]] = arith.cmpi slt, %[[B]], %{{.*}} : i32
# CHECK: arith.select %[[NEG]], %{{.*}}, %[[L]]#0 : i32
# CHECK-NOT: math.ipowi

with ir.Context():
    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("vulkan"))
    lower_kernels_to_loops(m)
    print(m)
