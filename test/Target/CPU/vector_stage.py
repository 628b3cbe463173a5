# RUN: %PYTHON %s | filecheck %s
"""The CPU pipeline's named stages: after `lower_to_vector` the IR holds vector ops and no
linalg ops (matmul, elementwise with dynamic shapes -> masked vectors); after `bufferize`
functions take memrefs; after `lower_to_llvm` only the LLVM dialect is left."""

from mlir import ir

from onnxc.targets.cpu import CpuPipelineOptions, bufferize, lower_to_llvm, lower_to_vector

SRC = """
func.func @mm(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) -> tensor<16x64xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x64xf32>) -> tensor<16x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<16x32xf32>, tensor<32x64xf32>)
                     outs(%f : tensor<16x64xf32>) -> tensor<16x64xf32>
  return %r : tensor<16x64xf32>
}
func.func @relu(%a: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %d0 = tensor.dim %a, %c0 : tensor<?x?xf32>
  %d1 = tensor.dim %a, %c1 : tensor<?x?xf32>
  %e = tensor.empty(%d0, %d1) : tensor<?x?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<?x?xf32>) outs(%e : tensor<?x?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %z : f32
    linalg.yield %m : f32
  } -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
"""

with ir.Context():
    m = ir.Module.parse(SRC)
    # An AVX-512 target CPU (16 f32 lanes, 8x32 packed matmul tile) and one thread, so the
    # output does not depend on the machine running the test.
    lower_to_vector(m, CpuPipelineOptions(target_cpu="x86-64-v4", threads=1))
    print(m)
    # The matmul is data-tiled: A packed into 8-row panels, B into 32-column panels, one
    # 8x32 accumulator tile per (m1, n1) step, then unpacked.
    # CHECK-LABEL: func.func @mm
    # CHECK-NOT: linalg.
    # CHECK: scf.for
    # CHECK: vector.transfer_read {{.*}} vector<8x16xf32>
    # CHECK: vector.contract {{.*}} : vector<1x1x8x1xf32>, vector<1x1x32x1xf32> into vector<1x1x8x32xf32>
    # CHECK: vector.transfer_write
    # CHECK-LABEL: func.func @relu
    # CHECK-NOT: linalg.
    # CHECK: vector.create_mask
    # CHECK: vector.transfer_read {{.*}} : tensor<1x?xf32>, vector<1x16xf32>
    # CHECK: arith.maximumf {{.*}} : vector<1x16xf32>
    # CHECK-NOT: linalg.
    bufferize(m)
    print(m)
    # CHECK-LABEL: func.func @mm(%arg0: memref<16x32xf32>, %arg1: memref<32x64xf32>) -> memref<16x64xf32>
    # CHECK: memref.alloc
    # CHECK-LABEL: func.func @relu(%arg0: memref<?x?xf32>) -> memref<?x?xf32>
    lower_to_llvm(m)
    print(m)
    # CHECK-LABEL: llvm.func @mm(
    # The packed tile contraction is an outer product (contracts_to_outer_products): FMAs of a
    # broadcast A element and a 32-wide B row (LLVM's backend splits each into two 512-bit
    # FMAs), no per-element products or reductions.
    # CHECK-NOT: llvm.intr.vector.reduce.fadd
    # CHECK: llvm.intr.fmuladd({{.*}}) : (vector<32xf32>, vector<32xf32>, vector<32xf32>) -> vector<32xf32>
    # CHECK-NOT: llvm.intr.vector.reduce.fadd
    # CHECK-LABEL: llvm.func @_mlir_ciface_mm
    # CHECK-LABEL: llvm.func @relu(
    # CHECK: llvm.intr.masked.load
    # CHECK-NOT: builtin.unrealized_conversion_cast

# Two threads: the packed matmul's row panels are split by an scf.forall, which becomes an
# omp.parallel region of OpenMP (the default thread runtime where libiomp5 is installed, as the
# project's dependencies do) or tasks of MLIR's async runtime.
for runtime in ("openmp", "async"):
    with ir.Context():
        m = ir.Module.parse(SRC)
        opts = CpuPipelineOptions(target_cpu="x86-64-v4", threads=2, thread_runtime=runtime)
        lower_to_vector(m, opts)
        print(m)
        bufferize(m)
        lower_to_llvm(m, opts)
        print(m)
# CHECK-LABEL: func.func @mm
# CHECK: scf.forall (%{{.*}}) in (2)
# CHECK: vector.contract
# CHECK: scf.forall.in_parallel
# CHECK-LABEL: llvm.func @mm(
# CHECK: omp.parallel num_threads
# CHECK: omp.wsloop
# CHECK-NOT: mlirAsyncRuntime
# CHECK-LABEL: func.func @mm
# CHECK: scf.forall (%{{.*}}) in (2)
# CHECK-LABEL: llvm.func @mm(
# CHECK-NOT: omp.parallel
# CHECK: llvm.call @mlirAsyncRuntime
