# RUN: %PYTHON %s | filecheck %s
"""`gpu-map` refuses a module that calls the CPU host runtime (string, image and regex ops lower
to calls of functions without a body), naming the ONNX node from the call's location, before
any mapping step (it failed with an internal IndexError on the declaration)."""

from mlir import ir

from onnxc.targets.gpu import GpuMappingError, device_for, map_to_gpu

SRC = """
func.func private @onnxc_str_change_case(i64, i32, i64) -> i64
func.func @upper(%x: tensor<2xi64>) -> tensor<2xi64> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : i32
  %p = arith.constant 0 : i64
  %e = tensor.extract %x[%c0] : tensor<2xi64>
  %r = func.call @onnxc_str_change_case(%e, %c2, %p) : (i64, i32, i64) -> i64 loc("sn"("StringNormalizer"))
  %t = tensor.insert %r into %x[%c0] : tensor<2xi64>
  return %t : tensor<2xi64>
}
"""

# CHECK: refused: node 'sn' (StringNormalizer): calls the CPU host runtime (@onnxc_str_change_case
# CHECK-SAME: the GPU targets (cuda, vulkan) do not take it

with ir.Context():
    m = ir.Module.parse(SRC)
    try:
        map_to_gpu(m, device_for("sm_80"))
        print("mapped")
    except GpuMappingError as e:
        print("refused:", e)
