# RUN: %PYTHON %s | filecheck %s
"""`lower_strided_copies`: a `memref.copy` between strided views (into a padded buffer's
interior, a slice of a concatenation) becomes loops over the outer dims around 1-D vector
transfers of each row, 64 elements at a time; copies it cannot move as vectors (a strided
innermost dim, i1, dynamic shapes) become `linalg.copy`; copies between identity layouts stay
(`memcpy`)."""

from mlir import ir

from onnxc.targets.cpu.pipeline import lower_strided_copies

SRC = """
func.func @pad_interior(%src: memref<4x24xf32>, %dst: memref<6x26xf32>) {
  %v = memref.subview %dst[1, 1] [4, 24] [1, 1] : memref<6x26xf32> to memref<4x24xf32, strided<[26, 1], offset: 27>>
  memref.copy %src, %v : memref<4x24xf32> to memref<4x24xf32, strided<[26, 1], offset: 27>>
  return
}
func.func @long_rows(%src: memref<2x1000xf32>, %dst: memref<2x1077xf32>) {
  %v = memref.subview %dst[0, 0] [2, 1000] [1, 1] : memref<2x1077xf32> to memref<2x1000xf32, strided<[1077, 1]>>
  memref.copy %src, %v : memref<2x1000xf32> to memref<2x1000xf32, strided<[1077, 1]>>
  return
}
func.func @medium_rows(%src: memref<200xf32, strided<[1], offset: 8>>, %dst: memref<200xf32, strided<[1], offset: 4>>) {
  memref.copy %src, %dst : memref<200xf32, strided<[1], offset: 8>> to memref<200xf32, strided<[1], offset: 4>>
  return
}
func.func @strided_innermost(%src: memref<4x8xf32>, %dst: memref<4x16xf32>) {
  %v = memref.subview %dst[0, 0] [4, 8] [1, 2] : memref<4x16xf32> to memref<4x8xf32, strided<[16, 2]>>
  memref.copy %src, %v : memref<4x8xf32> to memref<4x8xf32, strided<[16, 2]>>
  return
}
func.func @bools(%src: memref<4x8xi1>, %dst: memref<4x10xi1>) {
  %v = memref.subview %dst[0, 1] [4, 8] [1, 1] : memref<4x10xi1> to memref<4x8xi1, strided<[10, 1], offset: 1>>
  memref.copy %src, %v : memref<4x8xi1> to memref<4x8xi1, strided<[10, 1], offset: 1>>
  return
}
func.func @dynamic(%src: memref<?x8xf32>, %dst: memref<?x8xf32, strided<[10, 1]>>) {
  memref.copy %src, %dst : memref<?x8xf32> to memref<?x8xf32, strided<[10, 1]>>
  return
}
func.func @contiguous(%src: memref<4x8xf32>, %dst: memref<4x8xf32>) {
  memref.copy %src, %dst : memref<4x8xf32> to memref<4x8xf32>
  return
}
"""

with ir.Context():
    m = ir.Module.parse(SRC)
    lower_strided_copies(m)
    assert m.operation.verify()
    print(m)

# One loop over the 4 rows, one transfer of the whole 24-element row.
# CHECK-LABEL: func.func @pad_interior
# CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
# CHECK: %[[V:.*]] = vector.transfer_read %arg0[%[[I]], %{{.*}}], %{{.*}} {in_bounds = [true]} : memref<4x24xf32>, vector<24xf32>
# CHECK: vector.transfer_write %[[V]], %{{.*}}[%[[I]], %{{.*}}] {in_bounds = [true]} : vector<24xf32>, memref<4x24xf32, strided<[26, 1], offset: 27>>
# CHECK-NOT: memref.copy
# CHECK: return

# A 1000-element row: a loop over its 15 whole chunks of 64, then the last 40 elements.
# CHECK-LABEL: func.func @long_rows
# CHECK: scf.for
# CHECK: scf.for
# CHECK: vector.transfer_read {{.*}} vector<64xf32>
# CHECK: vector.transfer_write {{.*}} vector<64xf32>
# CHECK: vector.transfer_read {{.*}} vector<40xf32>
# CHECK: vector.transfer_write {{.*}} vector<40xf32>
# CHECK-NOT: memref.copy
# CHECK: return

# A 200-element row: three chunks unrolled, then the last 8.
# CHECK-LABEL: func.func @medium_rows
# CHECK-NOT: scf.for
# CHECK-COUNT-3: vector.transfer_write {{.*}} vector<64xf32>
# CHECK: vector.transfer_write {{.*}} vector<8xf32>
# CHECK: return

# CHECK-LABEL: func.func @strided_innermost
# CHECK: linalg.copy
# CHECK-LABEL: func.func @bools
# CHECK: linalg.copy
# CHECK-LABEL: func.func @dynamic
# CHECK: linalg.copy
# CHECK-LABEL: func.func @contiguous
# CHECK: memref.copy
