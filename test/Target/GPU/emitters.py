# RUN: %PYTHON %s | filecheck %s
"""The two emitters after the GPU mapping: Vulkan SPIR-V (`lower_to_spirv`, stopped before
serialization, then serialized) and CUDA PTX (`lower_to_ptx`)."""

from mlir import ir

from onnxc.targets.cuda import CudaOptions, lower_to_ptx, ptx_of
from onnxc.targets.gpu import device_for, map_to_gpu
from onnxc.targets.vulkan import lower_to_spirv, spirv_binaries

SRC = """
func.func @softplus(%a: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<4x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<4x64xf32>) outs(%e : tensor<4x64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %ex = math.exp %x : f32
    %s = arith.addf %ex, %one : f32
    %l = math.log %s : f32
    linalg.yield %l : f32
  } -> tensor<4x64xf32>
  return %r : tensor<4x64xf32>
}
"""

# CHECK-LABEL: SPIR-V
# The kernel's spirv.module sits inside its gpu.module (what the serializer needs), with the
# workgroup size of the launch as LocalSize and 32-bit indices; math.exp/log become GLSL ops.
# CHECK: gpu.module @softplus_kernel
# CHECK: spirv.module @__spv__softplus_kernel Logical GLSL450
# CHECK: spirv.GlobalVariable @softplus_kernel_arg_0 bind(0, 0)
# CHECK: spirv.GlobalVariable @softplus_kernel_arg_1 bind(0, 1)
# CHECK: spirv.GL.Exp
# CHECK: spirv.GL.Log
# CHECK: spirv.EntryPoint "GLCompute" @softplus_kernel
# CHECK: spirv.ExecutionMode @softplus_kernel "LocalSize", 64, 2, 1
# CHECK-LABEL: serialized
# CHECK: softplus_kernel: SPIR-V magic 0x7230203
# CHECK-LABEL: PTX
# CHECK: gpu.binary @softplus_kernel [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx80">
# CHECK: .target sm_90
# CHECK: .visible .entry softplus_kernel(
# CHECK: ex2.approx

with ir.Context():
    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("vulkan"))
    lower_to_spirv(m, serialize=False)
    print("SPIR-V")
    print(m)

    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("vulkan"))
    lower_to_spirv(m)
    print("serialized")
    for name, words in spirv_binaries(m).items():
        print(f"{name}: SPIR-V magic {hex(int.from_bytes(words[:4], 'little'))}")

    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("sm_90"))
    lower_to_ptx(m, CudaOptions("sm_90", "+ptx80"))
    print("PTX")
    for op in m.body.operations:
        if op.operation.name == "gpu.binary":
            print(str(op)[:200])
    for ptx in ptx_of(m).values():
        print(ptx)
