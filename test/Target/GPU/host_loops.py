# RUN: %PYTHON %s | filecheck %s
"""Host-side loops with a constant trip count (a recurrence: Scan, RNN directions) are unrolled
after bufferization (`_unroll_host_loops`), so every kernel launch sits at the top level of the
host function in order; the buffer carried between iterations becomes plain values, and a slice
that is reshaped on the host is copied by a kernel first (`_copy_host_slices`)."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu

SRC = """
func.func @scan(%init: tensor<f32>, %x: tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %e = tensor.empty() : tensor<3xf32>
  %r:2 = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %init, %ys = %e) -> (tensor<f32>, tensor<3xf32>) {
    %s = tensor.extract_slice %x[%i] [1] [1] : tensor<3xf32> to tensor<1xf32>
    %v = tensor.collapse_shape %s [] : tensor<1xf32> into tensor<f32>
    %o = tensor.empty() : tensor<f32>
    %sum = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>, affine_map<() -> ()>], iterator_types = []}
        ins(%acc, %v : tensor<f32>, tensor<f32>) outs(%o : tensor<f32>) {
    ^bb0(%a: f32, %b: f32, %out: f32):
      %t = arith.addf %a, %b : f32
      linalg.yield %t : f32
    } -> tensor<f32>
    %w = tensor.expand_shape %sum [] output_shape [1] : tensor<f32> into tensor<1xf32>
    %ys2 = tensor.insert_slice %w into %ys[%i] [1] [1] : tensor<1xf32> into tensor<3xf32>
    scf.yield %sum, %ys2 : tensor<f32>, tensor<3xf32>
  }
  return %r#0, %r#1 : tensor<f32>, tensor<3xf32>
}
"""

# CHECK-LABEL: func.func @scan
# CHECK-NOT: scf.for
# Iteration i: a kernel copies x[i] out of its strided view, one adds it to the carried sum
# (the initial value first, then the previous iteration's buffer), one stores y[i].
# CHECK: args(%{{[a-z_0-9]+}} : memref<1xf32, strided<[1]>>, %{{[a-z_0-9]+}} : memref<1xf32>)
# CHECK: args(%arg0 : memref<f32>, %{{[a-z_0-9]+}} : memref<f32>, %[[S0:[a-z_0-9]+]] : memref<1xf32>)
# CHECK: args(%[[S0]] : memref<1xf32>, %{{[a-z_0-9]+}} : memref<1xf32, strided<[1]>>)
# CHECK: args(%{{[a-z_0-9]+}} : memref<1xf32, strided<[1], offset: 1>>, %{{[a-z_0-9]+}} : memref<1xf32>)
# CHECK: args(%[[A1:[a-z_0-9]+]] : memref<f32>, %{{[a-z_0-9]+}} : memref<f32>, %[[S1:[a-z_0-9]+]] : memref<1xf32>)
# CHECK: args(%[[S1]] : memref<1xf32>, %{{[a-z_0-9]+}} : memref<1xf32, strided<[1], offset: 1>>)
# CHECK: args(%{{[a-z_0-9]+}} : memref<1xf32, strided<[1], offset: 2>>, %{{[a-z_0-9]+}} : memref<1xf32>)
# CHECK: args(%{{[a-z_0-9]+}} : memref<f32>, %{{[a-z_0-9]+}} : memref<f32>, %[[S2:[a-z_0-9]+]] : memref<1xf32>)
# CHECK: args(%[[S2]] : memref<1xf32>, %{{[a-z_0-9]+}} : memref<1xf32, strided<[1], offset: 2>>)
# CHECK-NOT: scf.for
# CHECK: return

with ir.Context():
    m = ir.Module.parse(SRC)
    map_to_gpu(m, device_for("vulkan"))
    print(m)
