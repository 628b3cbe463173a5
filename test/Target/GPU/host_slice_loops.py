# RUN: %PYTHON %s | filecheck %s
"""The GPU mapping stage on a host loop that only picks slices (what Compress lowers to once
specialization has made its condition a constant and computed its count on the CPU): the loop
(constant bounds, no linalg op) is unrolled on tensors (`mapping._slice_loop`), the per-row
conditions fold, and each selected row becomes a copy kernel into a static subview of the
result; no scf.for or scf.if is left on the host."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu
from onnxc.targets.gpu.host import Launch, host_program

SRC = """
func.func @pick(%x: tensor<3x2xf32>) -> tensor<2x2xf32> {
  %cond = arith.constant dense<[false, true, true]> : tensor<3xi1>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %e = tensor.empty() : tensor<2x2xf32>
  %r:2 = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %e, %n = %c0) -> (tensor<2x2xf32>, index) {
    %p = tensor.extract %cond[%i] : tensor<3xi1>
    %s:2 = scf.if %p -> (tensor<2x2xf32>, index) {
      %row = tensor.extract_slice %x[%i, 0] [1, 2] [1, 1] : tensor<3x2xf32> to tensor<1x2xf32>
      %ins = tensor.insert_slice %row into %acc[%n, 0] [1, 2] [1, 1] : tensor<1x2xf32> into tensor<2x2xf32>
      %n1 = arith.addi %n, %c1 : index
      scf.yield %ins, %n1 : tensor<2x2xf32>, index
    } else {
      scf.yield %acc, %n : tensor<2x2xf32>, index
    }
    scf.yield %s#0, %s#1 : tensor<2x2xf32>, index
  }
  return %r#0 : tensor<2x2xf32>
}
"""

# CHECK-LABEL: func.func @pick
# CHECK-NOT: scf.for
# CHECK-NOT: scf.if
# CHECK: gpu.launch_func
# CHECK: gpu.launch_func
# CHECK: return
# CHECK: kernels: 2
# CHECK: sources: [(0, 2), (0, 4)]

with ir.Context():
    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("vulkan"))
    print(m)
    program = host_program(m)
    launches = [s for s in program.steps if isinstance(s, Launch)]
    print(f"kernels: {len(launches)}")
    # each copy reads row 1 then row 2 of x (buffer 0): element offsets 2 and 4
    print("sources:", [(s.args[0], s.layouts[0].offset) for s in launches])
