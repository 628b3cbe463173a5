"""Tests of `onnxc.targets.cpu.outline`: a long function split into private parts computes what
the unsplit one computes (against `onnx.reference`, static and dynamic batch), the parts keep
`noinline` down to the LLVM dialect, and what must be left alone is left alone."""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.importers import import_model
from onnxc.targets.cpu import jit
from onnxc.targets.cpu.outline import DEFAULT_MAX_OPS, DYNAMIC_MAX_OPS, OutlineStats, has_dynamic_shapes, outline_function, outline_functions, unshare_generators
from onnxc.targets.cpu.pipeline import CpuPipelineOptions, bufferize, lower_to_llvm, lower_to_vector, runtime_libraries
from onnxc.transforms.named_pipelines import lower_onnx_module

LAYERS = 9
WIDTH = 16


def chain_model(batch: int | str, layers: int = LAYERS, width: int = WIDTH) -> onnx.ModelProto:
    """`layers` x (MatMul by a constant, Add a constant, Relu), plus a skip Add from the input to
    the last layer (a value read far from where it is made)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        w, b = f"w{i}", f"b{i}"
        inits.append(numpy_helper.from_array((rng.standard_normal((width, width)) / 4).astype(np.float32), w))
        inits.append(numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), b))
        nodes += [
            helper.make_node("MatMul", [x, w], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", b], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
        ]
        x = f"r{i}"
    nodes.append(helper.make_node("Add", [x, "x"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def lowered_stats(model: onnx.ModelProto, max_ops: int | None, dedupe: bool = False) -> tuple[ir.Module, OutlineStats]:
    """The model at the vector stage, outlined with `max_ops` (None: not outlined), and what
    the outlining did."""
    module = import_model(model)
    lower_onnx_module(module, "linalg")
    stats = OutlineStats()
    with module.context:
        lower_to_vector(module, outline_max_ops=0)  # outlined below, after tiling
        if max_ops is not None:
            stats = outline_functions(module, max_ops, dedupe=dedupe)
            assert module.operation.verify()
    return module, stats


def lowered(model: onnx.ModelProto, max_ops: int | None) -> tuple[ir.Module, int]:
    """The model at the vector stage, outlined with `max_ops`; returns the parts made."""
    module, stats = lowered_stats(model, max_ops)
    return module, stats.parts


def run(module: ir.Module, x: np.ndarray) -> np.ndarray:
    sig = jit.select_entry(module, None)
    # Threaded code (the default options use every core) calls the thread runtime: loaded
    # into the process globally, as the JIT does.
    for lib in runtime_libraries(CpuPipelineOptions()):
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    with module.context:
        bufferize(module)
        lower_to_llvm(module)
        engine = ExecutionEngine(module, opt_level=2, shared_libs=jit.runtime_libraries())
    (y,) = jit.CompiledFunction(sig, engine, module)(x)
    return y


@pytest.mark.parametrize("batch", [3, "N"])
def test_outlined_chain_matches_reference(batch: int | str) -> None:
    model = chain_model(batch)
    x = np.random.default_rng(1).standard_normal((3, WIDTH)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    module, parts = lowered(model, max_ops=2)
    assert parts >= 3  # several parts, so values cross more than one boundary
    names = [ir.StringAttr(op.operation.attributes["sym_name"]).value for op in module.body.operations]
    assert sum(n.startswith("main_graph__part") or "__part" in n for n in names) == parts
    np.testing.assert_allclose(run(module, x), want, rtol=1e-5, atol=1e-6)


def test_parts_stay_noinline_in_llvm() -> None:
    module, parts = lowered(chain_model(3), max_ops=2)
    assert parts >= 3
    with module.context:
        bufferize(module)
        lower_to_llvm(module)
    flagged = [op for op in module.body.operations if op.operation.name == "llvm.func" and "__part" in ir.StringAttr(op.operation.attributes["sym_name"]).value]
    assert len(flagged) == parts
    for op in flagged:
        assert "passthrough" in op.operation.attributes
        assert [ir.StringAttr(a).value for a in ir.ArrayAttr(op.operation.attributes["passthrough"])] == ["noinline"]


def test_dynamic_shapes_take_shorter_parts() -> None:
    """The default part size (`outline_functions` without `max_ops`): twelve layers are one
    function when static (36 region ops, under 2 x DEFAULT_MAX_OPS) but are split with a dynamic
    batch (60 region ops, parts of DYNAMIC_MAX_OPS), which bounds how far bufferization's value
    bounds analysis follows a dynamic size (outline.py); the parts compute what the model does."""
    fixed, _ = lowered_stats(chain_model(4, layers=12), None)
    dynamic, _ = lowered_stats(chain_model("n", layers=12), None)
    heavy = []
    for module in (fixed, dynamic):
        fn = module.body.operations[0].operation
        heavy.append(sum(1 for op in fn.regions[0].blocks[0].operations if len(op.operation.regions)))
    assert heavy[0] <= 2 * DEFAULT_MAX_OPS and heavy[1] > 2 * DYNAMIC_MAX_OPS
    assert [has_dynamic_shapes(m.body.operations[0].operation) for m in (fixed, dynamic)] == [False, True]
    with fixed.context:
        assert outline_functions(fixed).parts == 0
    with dynamic.context:
        assert outline_functions(dynamic).parts >= heavy[1] // DYNAMIC_MAX_OPS
    model = chain_model("n", layers=12)
    x = np.random.default_rng(2).standard_normal((5, WIDTH)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(run(dynamic, x), want, rtol=1e-5, atol=1e-6)


def test_a_shared_view_of_an_empty_does_not_cross_parts() -> None:
    """Compile fuzzer seed 403 case 2370: SoftmaxCrossEntropyLoss (mean, weights, ignore_index)
    with every dim symbolic lowers to one function of 22 region ops, cut in parts of
    DYNAMIC_MAX_OPS. An `expand_shape` of a dynamic `tensor.empty` was the destination of a
    reduction in one part and of a loop in the next: the first part returned both (one buffer),
    the second wrote into it, and the loss came out 4.52 instead of 1.79. `unshare_empties`
    gives each user its own empty and view; checked against onnx.reference."""
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "y", "w"], ["z", "log_prob"], ignore_index=1, reduction="mean")
    graph = helper.make_graph(
        [node], "sce",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n3", "n5", "n2"]),
         helper.make_tensor_value_info("y", TensorProto.INT64, ["n3", "n2"]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, ["n5"])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("log_prob", TensorProto.FLOAT, ["n3", "n5", "n2"])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((3, 5, 2)).astype(np.float32), "y": np.array([[0, 1], [1, 3], [4, 1]], np.int64),
             "w": rng.uniform(0.5, 1.5, 5).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)
    got = onnxc.compile(model).run(feeds)
    np.testing.assert_allclose(got["z"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["log_prob"], want[1], rtol=1e-5, atol=1e-6)
    module, stats = lowered_stats(model, None)
    with module.context:
        assert outline_functions(module).parts >= 2  # the case needs parts, or it tests nothing


def test_short_function_is_left_alone() -> None:
    module, parts = lowered(chain_model(3), max_ops=64)
    assert parts == 0
    assert [op.operation.name for op in module.body.operations] == ["func.func"]


def test_multi_block_function_is_left_alone() -> None:
    src = """
    func.func @f(%a: f32, %c: i1) -> f32 {
      cf.cond_br %c, ^b1, ^b2
    ^b1:
      return %a : f32
    ^b2:
      return %a : f32
    }"""
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = False
        module = ir.Module.parse(src)
        assert outline_function(module.body.operations[0].operation, max_ops=1) == 0


def test_max_ops_must_be_positive() -> None:
    module, _ = lowered(chain_model(3), max_ops=None)
    with pytest.raises(ValueError, match="max_ops"):
        outline_function(module.body.operations[0].operation, max_ops=0)


# --- repeated layers: periodic groups, lifted weights, merged parts ------------------------------


def _parts(module: ir.Module) -> list[str]:
    return [n for op in module.body.operations if "__part" in (n := ir.StringAttr(op.operation.attributes["sym_name"]).value)]


@pytest.mark.parametrize("batch", [5, "N"])
def test_repeated_layers_merge_into_one_part(batch: int | str) -> None:
    """40 layers of the same shape with other weights: the groups are cut at the same place in
    every layer, the weights become arguments, the equal parts merge (far fewer functions than
    groups remain), and the merged code computes what onnx.reference does, each layer with its
    own weights."""
    model = chain_model(batch, layers=40, width=32)
    x = np.random.default_rng(3).standard_normal((5, 32)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    module, stats = lowered_stats(model, max_ops=8, dedupe=True)
    assert stats.parts >= 5 and stats.merged >= stats.parts // 2, stats
    assert len(_parts(module)) == stats.parts - stats.merged
    np.testing.assert_allclose(run(module, x), want, rtol=1e-4, atol=1e-5)


def test_parts_with_other_structure_do_not_merge() -> None:
    """Layers of two widths alternate: a part of one width never stands in for the other."""
    rng = np.random.default_rng(4)
    nodes, inits, x = [], [], "x"
    for i in range(24):
        n_in, n_out = (16, 24) if i % 2 == 0 else (24, 16)
        inits.append(numpy_helper.from_array((rng.standard_normal((n_in, n_out)) / 4).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [f"t{i}"])]
        x = f"t{i}"
    graph = helper.make_graph(
        nodes, "alt",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 16])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [3, 16])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    xv = rng.standard_normal((3, 16)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": xv})
    module, stats = lowered_stats(model, max_ops=4, dedupe=True)
    assert stats.merged > 0
    np.testing.assert_allclose(run(module, xv), want, rtol=1e-4, atol=1e-5)


def test_shared_fill_is_unshared() -> None:
    """One zero fill that two loops accumulate into (their iter_args) becomes one fill per loop,
    so each accumulates in place into its own instead of into a copy of a shared one; a zero
    tensor that slices only read stays shared, and so does a fill of a value read from data."""
    src = """
    func.func @f(%a: tensor<4x4xf32>, %v: f32) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<2x2xf32>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<4x4xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
      %l1 = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %f) -> tensor<4x4xf32> {
        %s = tensor.insert %z into %acc[%i, %i] : tensor<4x4xf32>
        scf.yield %s : tensor<4x4xf32>
      }
      %l2 = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %f) -> tensor<4x4xf32> {
        %s = tensor.insert %z into %acc[%i, %c0] : tensor<4x4xf32>
        scf.yield %s : tensor<4x4xf32>
      }
      %r = tensor.extract_slice %f[0, 0] [2, 2] [1, 1] : tensor<4x4xf32> to tensor<2x2xf32>
      %g = linalg.fill ins(%v : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
      %m1 = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %g) -> tensor<4x4xf32> {
        scf.yield %acc : tensor<4x4xf32>
      }
      %m2 = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %g) -> tensor<4x4xf32> {
        scf.yield %acc : tensor<4x4xf32>
      }
      %sum = arith.addf %l1, %l2 : tensor<4x4xf32>
      %msum = arith.addf %m1, %m2 : tensor<4x4xf32>
      %all = arith.addf %sum, %msum : tensor<4x4xf32>
      return %all, %l2, %r : tensor<4x4xf32>, tensor<4x4xf32>, tensor<2x2xf32>
    }"""
    with ir.Context():
        module = ir.Module.parse(src)
        fn = module.body.operations[0].operation
        assert unshare_generators(fn) == 1  # %f for one of its loops; %g reads %v: data
        assert module.operation.verify()
        body = fn.regions[0].blocks[0]
        zero_fills = [op.operation for op in body.operations if op.operation.name == "linalg.fill" and not isinstance(op.operation.operands[0].owner, ir.Block)]
        assert len(zero_fills) == 2
        loops = [op.operation for op in body.operations if op.operation.name == "scf.for"][:2]
        assert {loop.operands[3].owner for loop in loops} == set(zero_fills)
        readers = [op.operation for op in body.operations if op.operation.name == "tensor.extract_slice"]
        assert readers[0].operands[0].owner in zero_fills


def test_part_never_returns_a_view_beside_its_source() -> None:
    """A part that makes a value and a reshape of it, both read by later parts, returns the value
    only; the caller reshapes the returned buffer. Returning both gave the caller two owned
    memrefs of one buffer after bufferization, and deallocation freed it while the other was still
    read (ShuffleNet's AveragePool beside a packed grouped convolution answered 4% off)."""
    ew = "#map = affine_map<(d0) -> (d0)>"
    gen = """%{r} = linalg.generic {{indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]}}
          ins(%{a}, %{b} : tensor<24xf32>, tensor<24xf32>) outs(%e : tensor<24xf32>) {{
        ^bb0(%p: f32, %q: f32, %o: f32):
          %s = arith.{op} %p, %q : f32
          linalg.yield %s : f32
        }} -> tensor<24xf32>"""
    src = f"""{ew}
    func.func @f(%x: tensor<24xf32>) -> (tensor<24xf32>, tensor<4x6xf32>) {{
      %e = tensor.empty() : tensor<24xf32>
      {gen.format(r="a", a="x", b="x", op="addf")}
      %v = tensor.expand_shape %a [[0, 1]] output_shape [4, 6] : tensor<24xf32> into tensor<4x6xf32>
      {gen.format(r="b", a="a", b="x", op="mulf")}
      {gen.format(r="c", a="a", b="b", op="addf")}
      {gen.format(r="d", a="c", b="x", op="subf")}
      {gen.format(r="g", a="d", b="a", op="mulf")}
      {gen.format(r="h", a="g", b="c", op="addf")}
      %w = tensor.collapse_shape %v [[0, 1]] : tensor<4x6xf32> into tensor<24xf32>
      {gen.format(r="k", a="h", b="w", op="addf")}
      return %k, %v : tensor<24xf32>, tensor<4x6xf32>
    }}"""
    x = np.arange(24, dtype=np.float32) / 7 - 1
    a = x + x
    c = a + a * x
    h = (c - x) * a + c
    with ir.Context():
        module = ir.Module.parse(src)
        fn = module.body.operations[0].operation
        assert outline_function(fn, max_ops=2) >= 3
        assert module.operation.verify()
        for op in module.body.operations:
            ret = list(op.regions[0].blocks[0].operations)[-1]
            if "__part" in ir.StringAttr(op.attributes["sym_name"]).value:
                returned = [v.owner.name for v in ret.operands if isinstance(v, ir.OpResult)]
                assert "tensor.expand_shape" not in returned and "tensor.collapse_shape" not in returned
        sig = jit.select_entry(module, None)
        bufferize(module)
        lower_to_llvm(module)
        engine = ExecutionEngine(module, opt_level=2, shared_libs=jit.runtime_libraries())
        k, v = jit.CompiledFunction(sig, engine, module)(x)
    np.testing.assert_allclose(k, h + a, rtol=1e-6)
    np.testing.assert_allclose(v, a.reshape(4, 6), rtol=1e-6)


def _layers_reading_constants_in_caller_order(layers: int, width: int, rng: np.random.Generator) -> tuple[str, list[tuple[np.ndarray, np.ndarray]]]:
    """A function of `layers` equal layers, y = relu(x * a + b) + x, whose constants a and b are
    defined in the caller in the order a, b for even layers and b, a for odd ones (a caller's
    definition order has nothing to do with a layer's structure: ResNet-50's residual blocks
    read their input and shortcut from earlier parts in either order)."""
    ident = "affine_map<(d0) -> (d0)>"
    t = f"tensor<{width}xf32>"
    consts, body, weights = [], [], []
    x = "%x"
    for i in range(layers):
        a = rng.standard_normal(width).astype(np.float32)
        b = rng.standard_normal(width).astype(np.float32)
        weights.append((a, b))
        dense = {n: f"%{n}{i} = arith.constant dense<[{', '.join(repr(float(v)) for v in arr)}]> : {t}" for n, arr in (("a", a), ("b", b))}
        consts += [dense["a"], dense["b"]] if i % 2 == 0 else [dense["b"], dense["a"]]

        def generic(out: str, ins: list[str], expr: str) -> None:
            args = ", ".join(f"%v{k}: f32" for k in range(len(ins))) + ", %o: f32"
            maps = ", ".join([ident] * (len(ins) + 1))
            body.append(f"%e_{out} = tensor.empty() : {t}\n  %{out} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [\"parallel\"]}} "
                        f"ins({', '.join(ins)} : {', '.join([t] * len(ins))}) outs(%e_{out} : {t}) {{\n  ^bb0({args}):\n    {expr}\n  }} -> {t}")

        generic(f"m{i}", [x, f"%a{i}"], "%r = arith.mulf %v0, %v1 : f32\n    linalg.yield %r : f32")
        generic(f"s{i}", [f"%m{i}", f"%b{i}"], "%r = arith.addf %v0, %v1 : f32\n    linalg.yield %r : f32")
        generic(f"r{i}", [f"%s{i}"], "%z = arith.constant 0.0 : f32\n    %r = arith.maximumf %v0, %z : f32\n    linalg.yield %r : f32")
        generic(f"y{i}", [f"%r{i}", x], "%r = arith.addf %v0, %v1 : f32\n    linalg.yield %r : f32")
        x = f"%y{i}"
    text = (f"func.func @f(%x: {t}) -> {t} attributes {{llvm.emit_c_interface}} {{\n  " + "\n  ".join(consts + body)
            + f"\n  return {x} : {t}\n}}")
    return text, weights


def test_layers_merge_whatever_order_the_caller_defines_their_inputs_in() -> None:
    """A part's arguments come in the order the part first reads them, not the order the caller
    defines them: equal layers whose weights the caller defines in alternating orders merge into
    one part (they did not: ResNet-50 kept 13 of its 17 parts, now 9), and the merged code still
    reads each layer's own weights."""
    rng = np.random.default_rng(7)
    layers, width = 8, 16
    text, weights = _layers_reading_constants_in_caller_order(layers, width, rng)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        stats = outline_functions(module, 4, dedupe=True)
        assert module.operation.verify()
        assert stats.parts == layers and stats.merged == layers - 1, stats
        assert len(_parts(module)) == 1
        x = rng.standard_normal(width).astype(np.float32)
        want = x
        for a, b in weights:
            want = np.maximum(want * a + b, 0) + want
        np.testing.assert_allclose(run(module, x), want, rtol=1e-5, atol=1e-6)


def _function_of(op: ir.Operation) -> str:
    while op.name != "func.func":
        op = op.parent
    return ir.StringAttr(op.attributes["sym_name"]).value


def test_bonded_ops_land_in_one_part_and_an_early_producer_moves_to_its_user() -> None:
    """Bonds (a convolution and the consumer it is tiled with, `pipeline.fusion_bonds`) are never
    cut apart: a bond from layer 1 to layer 3 puts both, and what lies between, in one part. A
    bonded producer defined far ahead of its user (an initializer fill near the top of the
    function) first moves next to its user, so it does not hold every part in between together."""
    rng = np.random.default_rng(8)
    layers, width = 8, 16
    text, weights = _layers_reading_constants_in_caller_order(layers, width, rng)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        fn = module.body.operations[0].operation
        body = fn.regions[0].blocks[0]
        generics = [op.operation for op in body.operations if op.operation.name == "linalg.generic"]
        m = generics[0::4]  # each layer: m = x * a, s = m + b, r = relu(s), y = r + x
        y = generics[3::4]
        b6 = generics[4 * 6 + 1].operands[1]
        # An early producer: layer 6's 2 * b6 (an add of b6 to itself) at the top of the
        # function, after the constants, read only by layer 6's multiply.
        first = next(op.operation for op in body.operations if op.operation.name != "arith.constant")
        early = generics[4 * 6 + 1].clone(ip=ir.InsertionPoint(first))
        early.operands[0] = b6
        early.operands[1] = b6
        consumer = m[6]
        consumer.operands[1] = early.results[0]
        bonds = [(m[1], y[3]), (early, consumer)]
        outline_function(fn, 4, bonds=bonds)
        assert module.operation.verify()
        assert _function_of(m[1]) == _function_of(y[3]) == _function_of(m[2])
        assert _function_of(early) == _function_of(consumer)
        assert _function_of(m[0]) != _function_of(m[1])
        assert len({_function_of(op) for op in m}) == layers - 2  # layers 1-3 share a part
        x = rng.standard_normal(width).astype(np.float32)
        want = x
        for i, (a, b) in enumerate(weights):
            want = np.maximum(want * (2 * b if i == 6 else a) + b, 0) + want
        np.testing.assert_allclose(run(module, x), want, rtol=1e-5, atol=1e-6)
