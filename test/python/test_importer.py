"""Tests of the importer's behaviour beyond the backend-suite round trip: errors (reported together,
naming the node), tensors as `dense_resource`, sparse initializers, models read from files with
external data, shape-inference fallback, and the expansion of schema functions across the suite."""

from __future__ import annotations

import pathlib
import warnings

import numpy as np
import onnx
import onnx.helper as oh
import onnx.parser
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from onnxc.importers import ImportConfig, ImportError_, export_model, import_model
from onnxc.importers.onnx_importer import decode_model_version, sanitize_symbol


def _ops(module) -> list[str]:
    return [op.name for op in module.body.operations[0].regions[0].blocks[0].operations]


def test_corrupt_bytes_are_an_import_error() -> None:
    data = oh.make_model(oh.make_graph([], "g", [], [])).SerializeToString()
    with pytest.raises(ImportError_, match="not a valid ONNX"):
        import_model(b"\xff\xff\xff" + data[:5])


def test_newer_ir_version_is_refused() -> None:
    m = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) { y = Relu(x) }')
    m.ir_version = onnx.IR_VERSION + 1
    with pytest.raises(ImportError_, match=f"IR version {onnx.IR_VERSION + 1} is newer"):
        import_model(m)


def test_all_problems_reported_together() -> None:
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) {
      a = Relu(undefined_value)
      y = Add(x)
    }""")
    with pytest.raises(ImportError_) as info:
        import_model(m)
    assert len(info.value.problems) >= 2, info.value.problems
    text = str(info.value)
    assert "undefined_value" in text and "Add" in text


def test_unknown_op_of_a_known_domain() -> None:
    m = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[2] x) => (float[2] y) { y = NoSuchOp(x) }')
    with pytest.raises(ImportError_, match="NoSuchOp"):
        import_model(m)


def test_large_tensor_becomes_dense_resource_and_round_trips() -> None:
    w = np.arange(600, dtype=np.float32).reshape(20, 30)
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 20])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 30])],
                          [numpy_helper.from_array(w, "w")])  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    module = import_model(model, ImportConfig(resource_threshold=1024))
    assert "dense_resource<" in str(module)
    small = import_model(model, ImportConfig(resource_threshold=1 << 20))
    assert "dense_resource<" not in str(small)
    x = np.ones((2, 20), np.float32)
    back = export_model(module)
    np.testing.assert_array_equal(ReferenceEvaluator(back).run(None, {"x": x})[0], x @ w)


def test_sparse_initializer_round_trips() -> None:
    values = numpy_helper.from_array(np.array([5.0, 7.0], np.float32), "s")
    indices = numpy_helper.from_array(np.array([1, 4], np.int64), "")
    sparse = oh.make_sparse_tensor(values, indices, [6])
    graph = oh.make_graph([oh.make_node("Add", ["x", "s"], ["y"])], "g",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [6])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [6])])  # fmt: skip
    graph.sparse_initializer.append(sparse)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    module = import_model(model)
    assert "sparse_value" in str(module)
    back = export_model(module)
    assert len(back.graph.sparse_initializer) == 1 and back.graph.sparse_initializer[0].values.name == "s"
    # (onnx.reference cannot run sparse initializers: compare the tensor itself)
    got = back.graph.sparse_initializer[0]
    assert list(got.dims) == [6]
    np.testing.assert_array_equal(numpy_helper.to_array(got.values), [5, 7])
    np.testing.assert_array_equal(numpy_helper.to_array(got.indices).reshape(-1), [1, 4])


def test_model_file_with_external_data(tmp_path: pathlib.Path) -> None:
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])],
                          [numpy_helper.from_array(w, "w")])  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="weights.bin", size_threshold=0)
    module = import_model(tmp_path / "m.onnx")
    back = export_model(module)
    x = np.ones((1, 64), np.float32)
    np.testing.assert_allclose(ReferenceEvaluator(back).run(None, {"x": x})[0], x @ w, rtol=1e-6)


def test_shape_inference_is_optional() -> None:
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 3] x) => (float[3, 2] y) { t = Relu(x)
      y = Transpose(t) }""")
    with_inference = import_model(m)
    without = import_model(m, ImportConfig(run_shape_inference=False))
    assert "tensor<2x3xf32>" in str(with_inference).split("onnx.relu")[1].splitlines()[0]
    # Without inference the schema still gives the element type (rank unknown).
    assert "tensor<*xf32>" in str(without).split("onnx.relu")[1].splitlines()[0]


def test_custom_op_output_without_any_type_is_a_clear_error() -> None:
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17, "acme": 1]>
    g (float[2] x) => (float[2] y) { t = acme.Foo(x)
      y = Relu(x) }""")
    with pytest.raises(ImportError_, match="type of output 't' is unknown"):
        import_model(m, ImportConfig(warn_custom_ops=False))


def test_helpers() -> None:
    assert decode_model_version(0x0001000200000159) == "1.2.345"
    assert decode_model_version(42) is None
    assert sanitize_symbol("torch-jit export") == "torch_jit_export"
    assert sanitize_symbol("") == "main_graph" and sanitize_symbol("1x") == "_1x"


@pytest.mark.parametrize("inline", [False, True])
def test_inline_functions_option(inline: bool) -> None:
    m = onnx.parser.parse_model("""
    <ir_version: 10, opset_import: ["" : 18, "local": 1]>
    g (float[2] x) => (float[2] y) { y = local.Double(x) }
    <domain: "local", opset_import: ["" : 18]>
    Double (A) => (B) { B = Add(A, A) }""")
    module = import_model(m, ImportConfig(inline_functions=inline))
    assert ("func.call" in _ops(module)) != inline
    x = np.array([1.5, -2], np.float32)
    np.testing.assert_array_equal(ReferenceEvaluator(export_model(module)).run(None, {"x": x})[0], 2 * x)


def test_expand_schema_functions_over_the_node_suite() -> None:
    """Every node test whose op has a schema function body: expand it, export, and compare with the
    suite's expected outputs (the body is a different computation: tolerance, not bit equality)."""
    from onnx.backend.test.case import node as node_cases

    from onnxc.importers import import_context
    from onnxc.transforms.expand_schema_functions import expand_schema_functions

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = [c for c in node_cases.collect_testcases(None) if not c.name.endswith("_expanded")]
        ctx = import_context()
        expanded = 0
        for c in cases:
            if any(n.op_type in ("Bernoulli", "RandomUniformLike", "RandomNormalLike") for n in c.model.graph.node):
                continue  # random outputs
            module = import_model(c.model, ImportConfig(warn_custom_ops=False), context=ctx)
            if expand_schema_functions(module.operation) == 0:
                continue
            expanded += 1
            exported = export_model(module)
            names = [vi.name for vi in exported.graph.input]
            for inputs, outputs in c.data_sets:
                feeds = [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in inputs]
                got = ReferenceEvaluator(exported).run(None, dict(zip(names, feeds)))
                for want, have in zip(outputs, got):
                    want = numpy_helper.to_array(want) if isinstance(want, onnx.TensorProto) else want
                    w, h = np.asarray(want), np.asarray(have)
                    assert w.shape == h.shape, c.name
                    if w.dtype.kind in "fcV":  # V: ml_dtypes (bfloat16, float8)
                        np.testing.assert_allclose(h.astype(np.float64), w.astype(np.float64), rtol=1e-3, atol=1e-4, err_msg=c.name)
                    else:
                        np.testing.assert_array_equal(h, w, err_msg=c.name)
    assert expanded >= 400, expanded


def test_imported_module_is_verified_and_findings_name_the_node() -> None:
    """A model whose declared output type contradicts its op's type constraint passes structural
    validation but breaks the dialect's rules: the import-time verifier reports it at the node."""
    from onnx import TensorProto, helper

    from onnxc.importers import ImportConfig, ImportError_, import_model

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    finding = """loc("r"("Relu")): 'onnx.relu' op result #0 ('Y') has type tensor(int64), but operand #0 ('X') bound T to tensor(float)"""
    for config in (ImportConfig(strict_verify=True), None):  # strict is the default
        with pytest.raises(ImportError_) as info:
            import_model(model, config)
        assert finding in str(info.value)
    with pytest.warns(UserWarning) as caught:  # lenient: a warning listing every finding
        import_model(model, ImportConfig.lenient())
    assert any(finding in str(w.message) for w in caught)
    import_model(model, ImportConfig(verify=False))  # the check can be turned off
