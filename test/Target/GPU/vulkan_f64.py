# RUN: %PYTHON %s | filecheck %s
"""`lower_to_spirv` (the `gpu-to-spirv` stage) on an f64 kernel: math.floor, exp, log and sin on
f64, which upstream's GLSL patterns do not convert (16/32-bit only; GLSL.std.450 has no 64-bit
Exp, Log or Sin), become arith code (`f64_math.f64_math_to_arith`: floor exactly, through an i64
round trip with the sign kept through the bits; exp, log, sin by range reduction and
polynomials), the module declares the Float64 capability, and every kernel asks for IEEE
infinities and NaNs (`SignedZeroInfNanPreserve` for 32 and 64 bits, SPV_KHR_float_controls)."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu
from onnxc.targets.vulkan import lower_to_spirv

SRC = """
func.func @floor64(%a: tensor<64xf64>) -> tensor<64xf64> {
  %e = tensor.empty() : tensor<64xf64>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%a : tensor<64xf64>) outs(%e : tensor<64xf64>) {
  ^bb0(%x: f64, %o: f64):
    %f = math.floor %x : f64
    %x1 = math.exp %f : f64
    %l = math.log %x1 : f64
    %s = math.sin %l : f64
    linalg.yield %s : f64
  } -> tensor<64xf64>
  return %r : tensor<64xf64>
}
"""

# CHECK: spirv.module @__spv__floor64_kernel Logical GLSL450 requires #spirv.vce<v1.0, [{{.*}}Float64{{.*}}SignedZeroInfNanPreserve{{.*}}], [{{.*}}SPV_KHR_float_controls{{.*}}]>
# CHECK-NOT: math.
# CHECK-NOT: spirv.GL.{{Floor|Exp|Log|Sin}}
# CHECK: spirv.ConvertFToS %{{.*}} : f64 to i64
# CHECK: spirv.ConvertSToF %{{.*}} : i64 to f64
# CHECK: spirv.Bitcast %{{.*}} : f64 to i64
# exp's 2^k: an exponent field shifted into place and read as f64
# CHECK: spirv.ShiftLeftLogical
# CHECK: spirv.Bitcast %{{.*}} : i64 to f64
# log's s = f / (2 + f)
# CHECK: spirv.FDiv %{{.*}} : f64
# CHECK: spirv.ExecutionMode @floor64_kernel "LocalSize"
# CHECK-DAG: spirv.ExecutionMode @floor64_kernel "SignedZeroInfNanPreserve", 32
# CHECK-DAG: spirv.ExecutionMode @floor64_kernel "SignedZeroInfNanPreserve", 64

with ir.Context():
    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("vulkan"))
    lower_to_spirv(m, serialize=False)
    print(m)
