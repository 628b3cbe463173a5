"""`onnxc.transforms.lowering.dim_sources`: dynamic dims with one source are the same size, and the
broadcast lowering uses it (no run-time-index gather for `x * Sigmoid(x)` with a dynamic batch),
with answers equal to `onnx.reference` for inputs of several batch sizes."""

from __future__ import annotations

import numpy as np
import onnx
from mlir import ir
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.dialect import onnx_context
from onnxc.transforms.lowering.dim_sources import dim_source, same_size

IR = """
func.func @f(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x1x4xf32>) {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %x, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%d) : tensor<?x4xf32>
  %t = linalg.copy ins(%x : tensor<?x4xf32>) outs(%e : tensor<?x4xf32>) -> tensor<?x4xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
       ins(%t : tensor<?x4xf32>) outs(%e : tensor<?x4xf32>) {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %a : f32
  } -> tensor<?x4xf32>
  %dt = tensor.dim %t, %c0 : tensor<?x4xf32>
  %ex = tensor.expand_shape %g [[0, 1], [2]] output_shape [%dt, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
  return %g, %ex : tensor<?x4xf32>, tensor<?x1x4xf32>
}
"""


def test_dims_traced_to_the_argument() -> None:
    with onnx_context(), ir.Location.unknown():
        module = ir.Module.parse(IR)
        fn = module.body.operations[0]
        x, y = fn.regions[0].blocks[0].arguments
        ret = list(fn.regions[0].blocks[0].operations)[-1]
        g, ex = ret.operands
        # generic -> its init -> tensor.empty(tensor.dim %x) -> %x; expand_shape -> dim of the copy -> %x
        assert dim_source(g, 0) == ("dim", x, 0)
        assert dim_source(ex, 0) == ("dim", x, 0)
        assert same_size((g, 0), (ex, 0))
        assert same_size((g, 0), (x, 0))
        assert not same_size((g, 0), (y, 0))  # another argument: not provably equal
        assert not same_size((g, 1), (x, 1))  # static 4s: the caller handles static dims itself


def _silu_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 5, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3, 3, 3], np.linspace(-1, 1, 81, dtype=np.float32))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("GlobalAveragePool", ["m"], ["p"]),
        helper.make_node("Mul", ["m", "p"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "silu_se", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_silu_with_dynamic_batch_is_plain_elementwise_and_right() -> None:
    model = _silu_model()
    compiled = onnxc.compile(model, threads=1, keep_ir=True, cache_dir=False)
    linalg = compiled.modules["linalg"]
    assert "linalg.index" not in linalg and "tensor.extract " not in linalg, "a broadcast read at run-time indices"
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 3, 5, 5)).astype(np.float32)
        (want,) = ref.run(None, {"x": x})
        got = compiled.run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)


RESHAPE_IR = """
func.func @r(%x: tensor<?x8xf32>, %y: tensor<?x8xf32>, %n: index) -> (tensor<?x?x4xf32>, tensor<?x?x4xf32>) {
  %c0 = arith.constant 0 : index
  %four = arith.constant 4 : i64
  %d = tensor.dim %x, %c0 : tensor<?x8xf32>
  %a = arith.index_cast %d : index to i64
  %b = arith.index_cast %n : index to i64
  %shape = tensor.from_elements %a, %b, %four : tensor<3xi64>
  %rx = tensor.reshape %x(%shape) : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x4xf32>
  %ry = tensor.reshape %y(%shape) : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x4xf32>
  return %rx, %ry : tensor<?x?x4xf32>, tensor<?x?x4xf32>
}
"""


def test_reshape_dims_traced_through_the_shape_elements() -> None:
    with onnx_context(), ir.Location.unknown():
        module = ir.Module.parse(RESHAPE_IR)
        block = module.body.operations[0].regions[0].blocks[0]
        x, y, n = block.arguments
        rx, ry = list(block.operations)[-1].operands
        assert dim_source(rx, 0) == ("dim", x, 0)  # index_cast(tensor.dim %x, 0)
        assert dim_source(ry, 1) == ("size", n, 0)
        assert same_size((rx, 1), (ry, 1))  # one shape tensor: the same sizes
        assert same_size((ry, 0), (x, 0))
        assert not same_size((ry, 0), (y, 0))  # the reshape's size, not its input's


SHARED_IR = """
func.func @s(%x: tensor<?x?xf32> {onnx.dim_params = ["batch", "seq"], onnx.name = "x"},
             %m: tensor<?x?xi64> {onnx.dim_params = ["batch", "seq"], onnx.name = "m"},
             %z: tensor<?xf32> {onnx.dim_params = ["other"], onnx.name = "z"}) {
  return
}
"""


def test_inputs_sharing_a_dim_param_are_one_source_only_once_checked() -> None:
    """Two arguments whose dims share a dim_param name: one source after the entry check that
    `check_shared_dim_params` emits (and marks the function with), not before."""
    from onnxc.transforms.lowering.dim_sources import SHARED_DIMS_CHECKED, check_shared_dim_params

    with onnx_context(), ir.Location.unknown():
        module = ir.Module.parse(SHARED_IR)
        fn = module.body.operations[0]
        block = fn.regions[0].blocks[0]
        x, m, z = block.arguments
        assert not same_size((m, 0), (x, 0))  # a name alone proves nothing
        with ir.InsertionPoint.at_block_begin(block):
            check_shared_dim_params(fn.operation, "@s")
        assert SHARED_DIMS_CHECKED in fn.attributes
        assert dim_source(m, 0) == ("dim", x, 0) and dim_source(m, 1) == ("dim", x, 1)
        assert same_size((m, 1), (x, 1))
        assert not same_size((m, 0), (x, 1))  # batch is not seq
        assert not same_size((z, 0), (x, 0))  # another name
        checks = [op for op in block.operations if op.operation.name == "scf.if"]
        assert len(checks) == 2  # batch and seq of m against x's
        assert "input 'm' dim 0 is 'batch'" in str(checks[0].attributes["onnxc.runtime_check"])


CLAMP_IR = """
func.func @c(%x: tensor<?x8xf32>, %table: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %d = tensor.dim %x, %c0 : tensor<?x8xf32>
  %n = arith.minsi %d, %c16 : index
  %slice = tensor.extract_slice %table[0, 0] [%n, 8] [1, 1] : tensor<16x8xf32> to tensor<?x8xf32>
  %m1 = arith.minsi %d, %c1 : index
  %one = tensor.extract_slice %table[0, 0] [%m1, 8] [1, 1] : tensor<16x8xf32> to tensor<?x8xf32>
  %e = tensor.empty(%d) : tensor<?x8xf32>
  return %slice, %one, %e : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
}
"""


def test_a_size_clamped_to_a_constant_broadcasts_only_when_equal() -> None:
    """table[:min(seq, 16)] against [seq]: min(seq, 16) is 1 exactly when seq is, so the two
    broadcast only when equal; min(seq, 1) is 1 whatever seq: no such conclusion."""
    from onnxc.transforms.lowering.dim_sources import equal_or_invalid, index_source, is_size_of

    with onnx_context(), ir.Location.unknown():
        module = ir.Module.parse(CLAMP_IR)
        block = module.body.operations[0].regions[0].blocks[0]
        x, _ = block.arguments
        sliced, one, e = list(block.operations)[-1].operands
        assert dim_source(sliced, 0)[0] == "size"  # the slice's size operand, min(d, 16)
        assert equal_or_invalid((x, 0), (sliced, 0)) == (x, 0)
        assert equal_or_invalid((sliced, 0), (x, 0)) == (x, 0)  # either order: the unclamped one
        assert equal_or_invalid((x, 0), (one, 0)) is None
        assert not same_size((x, 0), (sliced, 0))
        d = next(op for op in block.operations if op.operation.name == "tensor.dim").result  # %x's dim 0
        assert index_source(d) == ("dim", x, 0)
        assert is_size_of(d, e, 0) and not is_size_of(d, sliced, 0)


LOOP_IR = """
func.func @l(%x: tensor<?x4xf32>, %v: f32) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %d = tensor.dim %x, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%d) : tensor<?x4xf32>
  %kept = scf.for %i = %c0 to %d step %c1 iter_args(%acc = %e) -> (tensor<?x4xf32>) {
    %w = tensor.insert %v into %acc[%i, %c0] : tensor<?x4xf32>
    scf.yield %w : tensor<?x4xf32>
  }
  %grown = scf.for %i = %c0 to %d step %c1 iter_args(%acc = %e) -> (tensor<?x4xf32>) {
    %n = tensor.dim %acc, %c0 : tensor<?x4xf32>
    %n1 = arith.addi %n, %c1 : index
    %bigger = tensor.empty(%n1) : tensor<?x4xf32>
    scf.yield %bigger : tensor<?x4xf32>
  }
  return %kept, %grown : tensor<?x4xf32>, tensor<?x4xf32>
}
"""


def test_loop_carried_tensor_keeps_its_init_size_only_when_the_body_does() -> None:
    """An scf.for result has its init's dims when the body yields the carried tensor at the size it
    got (tensor.insert into it: TopK's result buffer); a body that yields another size does not."""
    with onnx_context(), ir.Location.unknown():
        module = ir.Module.parse(LOOP_IR)
        block = module.body.operations[0].regions[0].blocks[0]
        x, _ = block.arguments
        kept, grown = list(block.operations)[-1].operands
        assert dim_source(kept, 0) == ("dim", x, 0)
        assert same_size((kept, 0), (x, 0))
        assert not same_size((grown, 0), (x, 0))
