# RUN: %PYTHON %s | filecheck %s
"""`gpu-nvvm-prepare` (`prepare_for_nvvm`) holds bool buffers as bytes (`bool_buffers_as_bytes`):
the host function's and the kernel's i1 memrefs become i8 memrefs, kernel loads are truncated to
i1 and stores widened, so that no i1 load or store reaches the NVVM lowering (MemRefToLLVM
asserts on them, which killed the process)."""

from mlir import ir

from onnxc.targets.cuda.lowering import prepare_for_nvvm
from onnxc.targets.gpu import device_for, map_to_gpu

SRC = """
func.func @less(%a: tensor<64xf32>, %b: tensor<64xf32>, %m: tensor<64xi1>) -> tensor<64xi1> {
  %e = tensor.empty() : tensor<64xi1>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                       iterator_types = ["parallel"]}
      ins(%a, %b, %m : tensor<64xf32>, tensor<64xf32>, tensor<64xi1>) outs(%e : tensor<64xi1>) {
  ^bb0(%x: f32, %y: f32, %k: i1, %o: i1):
    %c = arith.cmpf olt, %x, %y : f32
    %d = arith.andi %c, %k : i1
    linalg.yield %d : i1
  } -> tensor<64xi1>
  return %r : tensor<64xi1>
}
"""

# CHECK: func.func @less(%{{.*}}: memref<64xf32>, %{{.*}}: memref<64xf32>, %{{.*}}: memref<64xi8>) -> memref<64xi8>
# CHECK: memref.alloc() {{.*}}: memref<64xi8>
# CHECK: gpu.func @less_kernel(%{{.*}}: memref<64xf32>, %{{.*}}: memref<64xf32>, %{{.*}}: memref<64xi8>, %{{.*}}: memref<64xi8>)
# CHECK: %[[BYTE:.*]] = memref.load %{{.*}} : memref<64xi8>
# CHECK: %[[BIT:.*]] = arith.trunci %[[BYTE]] : i8 to i1
# CHECK: arith.andi %{{.*}}, %[[BIT]] : i1
# CHECK: %[[WIDE:.*]] = arith.extui %{{.*}} : i1 to i8
# CHECK: memref.store %[[WIDE]], %{{.*}} : memref<64xi8>
# CHECK-NOT: xi1>

with ir.Context():
    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("sm_80"))
    prepare_for_nvvm(m)
    print(m)

# A bool constant (a causal mask) becomes a byte global with the same values.
# CHECK-LABEL: GLOBAL
# CHECK: memref.global "private" constant @mask : memref<2x3xi8> = dense<{{\[}}[1, 0, 1], [0, 0, 1]]>
# CHECK: memref.global "private" constant @ones : memref<4xi8> = dense<1>
# CHECK: memref.get_global @mask : memref<2x3xi8>

from onnxc.targets.cuda.lowering import bool_buffers_as_bytes

GLOBALS = """
memref.global "private" constant @mask : memref<2x3xi1> = dense<[[true, false, true], [false, false, true]]>
memref.global "private" constant @ones : memref<4xi1> = dense<true>
func.func @f() -> (memref<2x3xi1>, memref<4xi1>) {
  %0 = memref.get_global @mask : memref<2x3xi1>
  %1 = memref.get_global @ones : memref<4xi1>
  return %0, %1 : memref<2x3xi1>, memref<4xi1>
}
"""

print("GLOBAL")
with ir.Context(), ir.Location.unknown():
    m = ir.Module.parse(GLOBALS)
    bool_buffers_as_bytes(m)
    assert m.operation.verify()
    print(m)
