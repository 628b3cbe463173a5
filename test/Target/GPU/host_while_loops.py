# RUN: %PYTHON %s | filecheck %s
"""A host-side `scf.while` that only counts (condition `cmpi slt %i, bound` with a constant start,
bound and step: what Scan-8's batch loop lowers to through Loop) becomes an `scf.for` with
constant bounds (`_counted_whiles_to_for`), which `_unroll_host_loops` then unrolls like any
other host loop; the counter's uses read the induction variable and its result the last count.
A while whose bound is not a constant, or whose condition does more than compare, is left alone
(the host program refuses it later, naming the op)."""

from mlir import ir

from onnxc.targets.gpu import device_for, map_to_gpu
from onnxc.targets.gpu.mapping import _counted_whiles_to_for

SRC = """
func.func @count(%x: tensor<4xf32>) -> (tensor<4xf32>, i64) {
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %c3 = arith.constant 3 : i64
  %r:2 = scf.while (%i = %c0, %acc = %x) : (i64, tensor<4xf32>) -> (i64, tensor<4xf32>) {
    %go = arith.cmpi slt, %i, %c3 : i64
    scf.condition(%go) %i, %acc : i64, tensor<4xf32>
  } do {
  ^bb0(%i: i64, %acc: tensor<4xf32>):
    %f = arith.sitofp %i : i64 to f32
    %e = tensor.empty() : tensor<4xf32>
    %s = linalg.generic {indexing_maps = [affine_map<(d) -> (d)>, affine_map<(d) -> (d)>], iterator_types = ["parallel"]}
        ins(%acc : tensor<4xf32>) outs(%e : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %t = arith.addf %a, %f : f32
      linalg.yield %t : f32
    } -> tensor<4xf32>
    %n = arith.addi %i, %c1 : i64
    scf.yield %n, %s : i64, tensor<4xf32>
  }
  return %r#1, %r#0 : tensor<4xf32>, i64
}

func.func @unbounded(%x: tensor<4xf32>, %bound: i64) -> tensor<4xf32> {
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %r:2 = scf.while (%i = %c0, %acc = %x) : (i64, tensor<4xf32>) -> (i64, tensor<4xf32>) {
    %go = arith.cmpi slt, %i, %bound : i64
    scf.condition(%go) %i, %acc : i64, tensor<4xf32>
  } do {
  ^bb0(%i: i64, %acc: tensor<4xf32>):
    %n = arith.addi %i, %c1 : i64
    scf.yield %n, %acc : i64, tensor<4xf32>
  }
  return %r#1 : tensor<4xf32>
}
"""

# The rewrite alone: a for over 0..3 carrying the tensor, the counter cast from the induction
# variable, the counter's result the constant 3.
# CHECK-LABEL: func.func @count
# CHECK-NOT: scf.while
# CHECK: %[[FOR:.*]] = scf.for %[[IV:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %arg0) -> (tensor<4xf32>)
# CHECK: %[[I:.*]] = arith.index_cast %[[IV]] : index to i64
# CHECK: arith.sitofp %[[I]] : i64 to f32
# CHECK: linalg.generic {{.*}} ins(%[[ACC]] : tensor<4xf32>)
# CHECK: scf.yield
# CHECK: %[[LAST:.*]] = arith.constant 3 : i64
# CHECK: return %[[FOR]], %[[LAST]] : tensor<4xf32>, i64
# CHECK-LABEL: func.func @unbounded
# CHECK: scf.while

# Through the whole mapping: no loop left on the host, one kernel launch per iteration.
# CHECK-LABEL: func.func @count
# CHECK-NOT: scf.while
# CHECK-NOT: scf.for
# CHECK: gpu.launch_func
# CHECK: gpu.launch_func
# CHECK: gpu.launch_func
# CHECK-NOT: gpu.launch_func
# CHECK: return

with ir.Context():
    m = ir.Module.parse(SRC)
    _counted_whiles_to_for(m)
    print(m)
    m = ir.Module.parse(SRC.split("func.func @unbounded")[0])
    map_to_gpu(m, device_for("vulkan"))
    print(m)
