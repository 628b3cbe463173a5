# RUN: %PYTHON %s | filecheck %s
"""`unroll_strided_transfers`: a short in-bounds 1-D transfer whose vector walks a non-contiguous
memref dim (the pixels of one channel in a channels-last row, the form the direct convolution's
outer product reads) becomes one `memref.load` per lane and a `vector.from_elements` (a write:
`vector.extract` + `memref.store` per lane), where `convert-vector-to-scf` would emit a loop of
dynamic-position inserts. Contiguous, masked, possibly out-of-bounds, broadcast and long
transfers stay; the result runs the same as the transfer it replaced."""

import ctypes

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir.passmanager import PassManager
from mlir.runtime import get_ranked_memref_descriptor

from onnxc.targets.cpu.strided_transfers import unroll_strided_transfers

SRC = """
func.func @pixels(%row: memref<1x5x64xf32>, %out: memref<5xf32>, %c: index) attributes {llvm.emit_c_interface} {
  %z = arith.constant 0 : index
  %p = arith.constant 0.0 : f32
  %s = memref.subview %row[0, 0, %c] [1, 5, 1] [1, 1, 1] : memref<1x5x64xf32> to memref<5xf32, strided<[64], offset: ?>>
  %v = vector.transfer_read %s[%z], %p {in_bounds = [true]} : memref<5xf32, strided<[64], offset: ?>>, vector<5xf32>
  vector.store %v, %out[%z] : memref<5xf32>, vector<5xf32>
  return
}
func.func @column(%m: memref<4x3xf32>, %in: memref<4xf32>) attributes {llvm.emit_c_interface} {
  %z = arith.constant 0 : index
  %one = arith.constant 1 : index
  %v = vector.load %in[%z] : memref<4xf32>, vector<4xf32>
  vector.transfer_write %v, %m[%z, %one] {in_bounds = [true], permutation_map = affine_map<(d0, d1) -> (d0)>} : vector<4xf32>, memref<4x3xf32>
  return
}
func.func @contiguous(%m: memref<8xf32>) -> vector<8xf32> {
  %z = arith.constant 0 : index
  %p = arith.constant 0.0 : f32
  %v = vector.transfer_read %m[%z], %p {in_bounds = [true]} : memref<8xf32>, vector<8xf32>
  return %v : vector<8xf32>
}
func.func @maybe_out_of_bounds(%m: memref<?x64xf32>, %i: index) -> vector<5xf32> {
  %z = arith.constant 0 : index
  %p = arith.constant 0.0 : f32
  %v = vector.transfer_read %m[%i, %z], %p {permutation_map = affine_map<(d0, d1) -> (d0)>} : memref<?x64xf32>, vector<5xf32>
  return %v : vector<5xf32>
}
func.func @long(%m: memref<64x2xf32>) -> vector<64xf32> {
  %z = arith.constant 0 : index
  %p = arith.constant 0.0 : f32
  %v = vector.transfer_read %m[%z, %z], %p {in_bounds = [true], permutation_map = affine_map<(d0, d1) -> (d0)>} : memref<64x2xf32>, vector<64xf32>
  return %v : vector<64xf32>
}
"""

with ir.Context():
    m = ir.Module.parse(SRC)
    print("unrolled:", unroll_strided_transfers(m))
    assert m.operation.verify()
    print(m)
    # Run the two rewritten functions: the lanes are the elements the transfers addressed.
    PassManager.parse(
        "builtin.module(func.func(convert-vector-to-scf{full-unroll=true target-rank=1}),expand-strided-metadata,"
        "lower-affine,convert-scf-to-cf,convert-vector-to-llvm,finalize-memref-to-llvm,convert-arith-to-llvm,"
        "convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)"
    ).run(m.operation)
    engine = ExecutionEngine(m, opt_level=2)

row = np.arange(5 * 64, dtype=np.float32).reshape(1, 5, 64)
out = np.zeros(5, np.float32)
engine.invoke("pixels", ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(row))),
              ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(out))), ctypes.pointer(ctypes.c_int64(7)))
assert out.tolist() == row[0, :, 7].tolist(), out
mat = np.zeros((4, 3), np.float32)
vec = np.array([1, 2, 3, 4], np.float32)
engine.invoke("column", ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(mat))),
              ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(vec))))
assert mat[:, 1].tolist() == [1, 2, 3, 4] and not mat[:, [0, 2]].any(), mat
print("ran: ok")

# CHECK: unrolled: 2
# CHECK-LABEL: func.func @pixels
# CHECK-NOT: vector.transfer_read
# CHECK-COUNT-5: memref.load
# CHECK: vector.from_elements {{.*}} : vector<5xf32>
# CHECK-LABEL: func.func @column
# CHECK-NOT: vector.transfer_write
# CHECK-COUNT-4: memref.store
# CHECK-LABEL: func.func @contiguous
# CHECK: vector.transfer_read
# CHECK-LABEL: func.func @maybe_out_of_bounds
# CHECK: vector.transfer_read
# CHECK-LABEL: func.func @long
# CHECK: vector.transfer_read
# CHECK: ran: ok
