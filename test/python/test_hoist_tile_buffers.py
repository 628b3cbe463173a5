"""`hoist_tile_buffers`: per-tile scratch buffers move out of sequential loops, never out of a
thread's forall body, and never when the buffer leaves its block; compiled models that have
such buffers (a convolution fused with its epilogue) still match onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.compiler import lower
from onnxc.targets.cpu.hoist_tile_buffers import hoist_tile_buffers
from onnxc.targets.cpu.pipeline import CpuPipelineOptions

_SOURCE = """
func.func @nest(%out: memref<4x2x8xf32>, %v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  scf.forall (%t) in (2) {
    scf.for %i = %c0 to %c4 step %c1 {
      scf.for %j = %c0 to %c2 step %c1 {
        %a = memref.alloc() : memref<8xf32>
        linalg.fill ins(%v : f32) outs(%a : memref<8xf32>)
        %row = memref.subview %out[%i, %j, 0] [1, 1, 8] [1, 1, 1] : memref<4x2x8xf32> to memref<8xf32, strided<[1], offset: ?>>
        memref.copy %a, %row : memref<8xf32> to memref<8xf32, strided<[1], offset: ?>>
        memref.dealloc %a : memref<8xf32>
      }
    }
  }
  return
}

func.func @escapes(%n: index) -> memref<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %init = memref.alloc() : memref<8xf32>
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> (memref<8xf32>) {
    %a = memref.alloc() : memref<8xf32>
    memref.copy %acc, %a : memref<8xf32> to memref<8xf32>
    scf.yield %a : memref<8xf32>
  }
  return %r : memref<8xf32>
}
"""


def _parents(op: ir.Operation) -> list[str]:
    names, parent = [], op.parent
    while parent is not None:
        names.append(parent.name)
        parent = parent.parent
    return names


def test_buffer_leaves_the_sequential_loops_but_not_the_forall() -> None:
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_SOURCE)
        assert hoist_tile_buffers(module) == 1
        nest, escapes = (op for op in module.body.operations)
        allocs = [op for op in _walk(nest) if op.name == "memref.alloc"]
        assert len(allocs) == 1 and _parents(allocs[0])[0] == "scf.forall"
        dealloc = next(op for op in _walk(nest) if op.name == "memref.dealloc")
        assert dealloc.block == allocs[0].block  # freed after the loop, in the thread's body
        # The yielded buffer stays where it is: it is the next iteration's accumulator.
        inner = [op for op in _walk(escapes) if op.name == "memref.alloc" and _parents(op)[0] == "scf.for"]
        assert len(inner) == 1
        module.operation.verify()


def _walk(root: ir.OpView) -> list[ir.Operation]:
    out: list[ir.Operation] = []
    root.operation.walk(lambda op: out.append(op) or ir.WalkResult.ADVANCE)
    return out


def _conv_block() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    w = nh.from_array(rng.uniform(-0.5, 0.5, (32, 3, 3, 3)).astype(np.float32), "w")
    b = nh.from_array(rng.uniform(-0.5, 0.5, (32,)).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "stem",
        [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 58, 58])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, 32, 29, 29])], initializer=[w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_convolution_allocates_its_tile_once(threads: int) -> None:
    """MobileNetV2's stem (Conv + bias + Relu fused): no `memref.alloc` is left inside an
    `scf.for` after bufferization, and the values match onnx.reference."""
    model = _conv_block()
    module = lower(model, "bufferize", options=CpuPipelineOptions(threads=threads))
    in_loops = [op for op in _walk(module) if op.name == "memref.alloc" and "scf.for" in _parents(op)]
    assert not in_loops
    x = np.random.default_rng(0).standard_normal((1, 3, 58, 58)).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = onnxc.compile(model, threads=threads, cache_dir=False)(x=x)
    np.testing.assert_allclose(np.asarray(got[0]), expected, rtol=1e-4, atol=1e-5)
