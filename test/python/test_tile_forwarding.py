"""`forward_tile_writes`: a whole tile written and read back is forwarded, and a write that a
later write of the same tile overwrites goes, but only where nothing between them may write the
tile (forwarding) or read it (dead writes); a fused convolution keeps one store per output tile
and its values."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.compiler import lower
from onnxc.targets.cpu.pipeline import CpuPipelineOptions
from onnxc.targets.cpu.tile_forwarding import forward_tile_writes
from onnxc.transforms.onnx_utils import collect_ops

_SOURCE = """
func.func @fused(%in: memref<16xf32>, %bias: vector<1x1x4x8xf32>) -> memref<2x4x8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %f0 = arith.constant 0.0 : f32
  %out = memref.alloc() : memref<2x4x8xf32>
  %tile = memref.subview %out[1, 0, 0] [1, 4, 8] [1, 1, 1] : memref<2x4x8xf32> to memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>>
  %t4 = memref.expand_shape %tile [[0, 1], [2], [3]] output_shape [1, 1, 4, 8] : memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>> into memref<1x1x4x8xf32, strided<[32, 32, 8, 1], offset: 32>>
  vector.transfer_write %bias, %t4[%c0, %c0, %c0, %c0] {in_bounds = [true, true, true, true]} : vector<1x1x4x8xf32>, memref<1x1x4x8xf32, strided<[32, 32, 8, 1], offset: 32>>
  %acc0 = vector.transfer_read %tile[%c0, %c0, %c0], %f0 {in_bounds = [true, true, true]} : memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>>, vector<1x4x8xf32>
  %acc = scf.for %k = %c0 to %c4 step %c1 iter_args(%a = %acc0) -> (vector<1x4x8xf32>) {
    %x = memref.load %in[%k] : memref<16xf32>
    %xv = vector.broadcast %x : f32 to vector<1x4x8xf32>
    %s = arith.addf %a, %xv : vector<1x4x8xf32>
    scf.yield %s : vector<1x4x8xf32>
  }
  vector.transfer_write %acc, %tile[%c0, %c0, %c0] {in_bounds = [true, true, true]} : vector<1x4x8xf32>, memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>>
  %r = vector.transfer_read %tile[%c0, %c0, %c0], %f0 {in_bounds = [true, true, true]} : memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>>, vector<1x4x8xf32>
  %m = arith.maximumf %r, %r : vector<1x4x8xf32>
  vector.transfer_write %m, %tile[%c0, %c0, %c0] {in_bounds = [true, true, true]} : vector<1x4x8xf32>, memref<1x4x8xf32, strided<[32, 8, 1], offset: 32>>
  return %out : memref<2x4x8xf32>
}

func.func @aliased(%buf: memref<4x8xf32>, %other: memref<4x8xf32>, %v: vector<4x8xf32>, %w: vector<4x8xf32>) -> vector<4x8xf32> {
  %c0 = arith.constant 0 : index
  %f0 = arith.constant 0.0 : f32
  vector.transfer_write %v, %buf[%c0, %c0] {in_bounds = [true, true]} : vector<4x8xf32>, memref<4x8xf32>
  %seen = vector.transfer_read %other[%c0, %c0], %f0 {in_bounds = [true, true]} : memref<4x8xf32>, vector<4x8xf32>
  vector.transfer_write %w, %buf[%c0, %c0] {in_bounds = [true, true]} : vector<4x8xf32>, memref<4x8xf32>
  memref.copy %other, %buf : memref<4x8xf32> to memref<4x8xf32>
  %back = vector.transfer_read %buf[%c0, %c0], %f0 {in_bounds = [true, true]} : memref<4x8xf32>, vector<4x8xf32>
  %sum = arith.addf %seen, %back : vector<4x8xf32>
  return %sum : vector<4x8xf32>
}
"""


def _count(fn: ir.OpView, name: str) -> int:
    return len(collect_ops(fn.operation, lambda op: op.name == name))


def test_one_store_per_tile_and_nothing_across_a_possible_alias() -> None:
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_SOURCE)
        forward_tile_writes(module)
        module.operation.verify()
        fused, aliased = module.body.operations
        # The bias and the accumulators reach the epilogue in registers: one write, no read.
        assert _count(fused, "vector.transfer_write") == 1
        assert _count(fused, "vector.transfer_read") == 0
        # %buf is an argument that %other may alias: the first write may be read through
        # %other, and the copy may change %buf before the last read: all stay.
        assert _count(aliased, "vector.transfer_write") == 2
        assert _count(aliased, "vector.transfer_read") == 2


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_expansion_writes_each_tile_once(threads: int) -> None:
    """MobileNetV2's first expansion (1x1 Conv 16 -> 96 + bias + Clip): after bufferization one
    `vector.transfer_write` per output tile loop (the full tiles and the peeled remainder), and
    the values match onnx.reference."""
    rng = np.random.default_rng(2)
    inits = [nh.from_array(rng.uniform(-0.3, 0.3, (96, 16, 1, 1)).astype(np.float32), "w"),
             nh.from_array(rng.uniform(-0.5, 0.5, (96,)).astype(np.float32), "b"),
             nh.from_array(np.array(0.0, np.float32), "lo"), nh.from_array(np.array(6.0, np.float32), "hi")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], "exp",
        [helper.make_tensor_value_info("x", TP.FLOAT, [1, 16, 28, 28])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, 96, 28, 28])], initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, 16, 28, 28)).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = onnxc.compile(model, threads=threads, cache_dir=False)(x=x)
    np.testing.assert_allclose(np.asarray(got[0]), expected, rtol=1e-4, atol=1e-5)
    module = lower(model, "bufferize", options=CpuPipelineOptions(threads=threads))
    reads_of_output = 0

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal reads_of_output
        if op.name == "vector.transfer_read" and ir.MemRefType(op.operands[0].type).shape[-1] == 16 \
                and "arith.maximumf" in {u.owner.name for u in op.results[0].uses}:
            reads_of_output += 1  # the Clip reading the convolution's tile back from memory
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    assert reads_of_output == 0
