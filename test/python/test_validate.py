"""Model validation: each check has a model that fails it, and the message names the element.

Every invalid model here is built from a valid one with one defect, so each test also shows that
the valid starting point passes (`test_valid_models_pass`). The messages must name the node (name or
index), op type, domain and opset; a model with several defects reports all of them.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from onnxc.importers.config import ImportConfig
from onnxc.importers.errors import ImportError_
from onnxc.importers.validate import topological_order, validate_model

CFG = ImportConfig()


def model(nodes, inputs=None, outputs=None, inits=(), opset=18, ir=None, functions=(), extra_opsets=()):
    inputs = inputs if inputs is not None else [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])]
    outputs = outputs if outputs is not None else [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])]
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets], functions=list(functions))
    if ir is not None:
        m.ir_version = ir
    return m


def relu(name="r", i="x", o="y"):
    return helper.make_node("Relu", [i], [o], name=name)


def problems(m, cfg=CFG) -> list[str]:
    return validate_model(m, cfg)


def one(m, *fragments: str, cfg=CFG) -> str:
    """The single problem of `m`, which must contain every fragment."""
    ps = problems(m, cfg)
    assert len(ps) == 1, ps
    for f in fragments:
        assert f in ps[0], (f, ps[0])
    return ps[0]


def test_valid_models_pass() -> None:
    assert problems(model([relu()])) == []
    w = onnx.numpy_helper.from_array(__import__("numpy").ones((3, 3), "float32"), "w")
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], inits=[w])
    assert problems(m) == []


def test_ir_version() -> None:
    one(model([relu()], ir=2), "IR version 2")
    one(model([relu()], ir=onnx.IR_VERSION + 1), f"IR version {onnx.IR_VERSION + 1}", "allow_newer_opset")
    assert problems(model([relu()], ir=onnx.IR_VERSION + 1), ImportConfig(allow_newer_opset=True)) == []


def test_opset_newer_than_schemas() -> None:
    newest = onnx.defs.onnx_opset_version()
    one(model([relu()], opset=newest + 1), f"opset {newest + 1}", "newer than the installed schemas")
    assert problems(model([relu()], opset=newest + 1), ImportConfig(allow_newer_opset=True)) == []


def test_domain_not_imported() -> None:
    n = helper.make_node("LabelEncoder", ["x"], ["y"], name="enc", domain="ai.onnx.ml", keys_strings=["a"], values_int64s=[1])
    one(model([n]), "Node 'enc' (LabelEncoder, domain ai.onnx.ml)", "does not import")


def test_undefined_input() -> None:
    one(model([helper.make_node("Add", ["x", "nope"], ["y"], name="add")]), "Node 'add' (Add, domain ai.onnx, opset 18)", "'nope'")


def test_unnamed_node_uses_index() -> None:
    m = model([relu("", "x", "t"), helper.make_node("Add", ["t", "ghost"], ["y"])])
    one(m, "Node #1 (Add, domain ai.onnx, opset 18)", "'ghost'")


def test_omitted_optional_input_is_fine() -> None:
    n = helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")
    hi = onnx.numpy_helper.from_array(__import__("numpy").float32(1.0), "hi")
    assert problems(model([n], inits=[hi])) == []


def test_duplicate_output() -> None:
    one(model([relu("a", "x", "y"), relu("b", "x", "y")]), "'y' is defined twice")
    one(model([relu("a", "x", "x"), relu("b", "x", "y")]), "'x' is defined twice", "graph input")


def test_initializer_as_input_default_is_fine() -> None:
    x0 = onnx.numpy_helper.from_array(__import__("numpy").zeros((2, 3), "float32"), "x")
    assert problems(model([relu()], inits=[x0])) == []


def test_unknown_op() -> None:
    one(model([helper.make_node("Frobnicate", ["x"], ["y"], name="f")]), "Node 'f' (Frobnicate, domain ai.onnx, opset 18)",
        "not an operator")  # fmt: skip
    # Gelu exists since opset 20: at opset 18 there is no version to bind to.
    one(model([helper.make_node("Gelu", ["x"], ["y"], name="g")]), "Node 'g' (Gelu", "no version at opset 18", "first version is 20")


def test_input_count() -> None:
    one(model([helper.make_node("Add", ["x"], ["y"], name="add")]), "Node 'add' (Add, domain ai.onnx, opset 18)", "has 1 inputs", "takes 2")
    one(model([helper.make_node("Relu", ["x", "x"], ["y"], name="r")]), "has 2 inputs")
    one(model([helper.make_node("Concat", [], ["y"], name="c", axis=0)]), "Node 'c' (Concat", "has 0 inputs", "1 or more")


def test_output_count() -> None:
    one(model([helper.make_node("Relu", ["x"], ["y", "z"], name="r")]), "Node 'r' (Relu", "has 2 outputs")


def test_required_input_left_empty() -> None:
    one(model([helper.make_node("Add", ["x", ""], ["y"], name="add")]), "Node 'add'", "required input 'B'")


def test_missing_required_attribute() -> None:
    one(model([helper.make_node("Concat", ["x", "x"], ["y"], name="cat")]), "Node 'cat' (Concat, domain ai.onnx, opset 18)",
        "required attribute 'axis'")  # fmt: skip


def test_wrong_attribute_type() -> None:
    n = helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=1.5)
    one(model([n]), "Node 'cat' (Concat", "attribute 'axis' is FLOAT", "wants INT")


def test_unknown_attribute() -> None:
    one(model([helper.make_node("Relu", ["x"], ["y"], name="r", alpha=1.0)]), "Node 'r' (Relu", "'alpha'", "does not define")


def test_negative_and_absurd_dims() -> None:
    one(model([relu()], inputs=[helper.make_tensor_value_info("x", T.FLOAT, [2, -3])]), "input 'x'", "negative dimension -3")
    big = [2**20, 2**20, 2**20]
    one(model([relu()], inputs=[helper.make_tensor_value_info("x", T.FLOAT, big)]), "input 'x'", "more than 2^40")


def test_bad_element_type() -> None:
    one(model([relu()], inputs=[helper.make_tensor_value_info("x", 99, [2])]), "element type 99")


def test_tensor_data_size() -> None:
    t = helper.make_tensor("w", T.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    t.float_data.append(5.0)
    one(model([relu()], inits=[t]), "initializer 'w'", "5 float_data entries")
    c = helper.make_node("Constant", [], ["y"], name="k", value=onnx.TensorProto(name="v", data_type=T.INT64, dims=[3], int64_data=[1, 2]))
    one(model([c], inputs=[]), "attribute 'value' of Node 'k' (Constant", "2 int64_data entries")


def test_non_utf8_strings() -> None:
    t = helper.make_tensor("s", T.STRING, [1], [b"\xff\xfe"])
    one(model([relu()], inits=[t]), "initializer 's'", "not UTF-8")
    n = helper.make_node("Cast", ["x"], ["y"], name="c", to=T.FLOAT)
    n.attribute.append(helper.make_attribute("round_mode", b"\xffbad"))
    assert any("not UTF-8" in p for p in problems(model([n], opset=23)))


def test_undefined_graph_output() -> None:
    one(model([relu("r", "x", "t")]), "graph output 'y'")


def test_three_problems_reported_together() -> None:
    m = model(
        [
            helper.make_node("Add", ["x", "ghost"], ["t"], name="add"),  # undefined input
            helper.make_node("Concat", ["t"], ["u"], name="cat"),  # missing required attribute
            helper.make_node("Relu", ["u"], ["y"], name="r", beta=2),  # unknown attribute
        ]
    )
    ps = problems(m)
    assert len(ps) == 3, ps
    assert any("Node 'add' (Add, domain ai.onnx, opset 18)" in p and "'ghost'" in p for p in ps)
    assert any("Node 'cat' (Concat, domain ai.onnx, opset 18)" in p and "'axis'" in p for p in ps)
    assert any("Node 'r' (Relu, domain ai.onnx, opset 18)" in p and "'beta'" in p for p in ps)


def _if_node(then_nodes, name="cond", outer_out="y"):
    then_g = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("t_out", T.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", T.FLOAT, None)])  # fmt: skip
    return helper.make_node("If", ["c"], [outer_out], name=name, then_branch=then_g, else_branch=else_g)


def test_subgraph_scopes() -> None:
    c = helper.make_tensor_value_info("c", T.BOOL, [])
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 3])
    ok = model([_if_node([helper.make_node("Neg", ["x"], ["t_out"], name="neg")])], inputs=[c, x])
    assert problems(ok) == []  # captures 'x' from the outer scope
    bad = model([_if_node([helper.make_node("Neg", ["zz"], ["t_out"], name="neg")])], inputs=[c, x])
    one(bad, "Node 'neg' (Neg, domain ai.onnx, opset 18) in graph 'then'", "'zz'")
    shadow = model([_if_node([helper.make_node("Neg", ["x"], ["x"], name="neg"), helper.make_node("Identity", ["x"], ["t_out"])])],
                   inputs=[c, x])  # fmt: skip
    assert any("already visible from an outer scope" in p for p in problems(shadow))
    wrong = model([_if_node([helper.make_node("Concat", ["x"], ["t_out"], name="inner_cat")])], inputs=[c, x])
    one(wrong, "Node 'inner_cat' (Concat", "in graph 'then'", "'axis'")


def _function(nodes, inputs=("a",), outputs=("b",), attributes=(), opset=18, name="F"):
    return helper.make_function("local", name, list(inputs), list(outputs), nodes,
                                [helper.make_opsetid("", opset)], attributes=list(attributes))  # fmt: skip


def test_functions() -> None:
    f = _function([helper.make_node("Relu", ["a"], ["b"])])
    call = helper.make_node("F", ["x"], ["y"], name="call", domain="local")
    local = helper.make_opsetid("local", 1)
    assert problems(model([call], functions=[f], extra_opsets=[local])) == []
    bad_body = _function([helper.make_node("Concat", ["a"], ["b"], name="fc")])
    one(model([call], functions=[bad_body], extra_opsets=[local]), "Node 'fc' (Concat, domain ai.onnx, opset 18) in function 'local.F'",
        "'axis'")  # fmt: skip
    ref = helper.make_node("LeakyRelu", ["a"], ["b"], name="lr")
    ref.attribute.append(onnx.AttributeProto(name="alpha", type=AP_FLOAT, ref_attr_name="slope"))
    one(model([call], functions=[_function([ref])], extra_opsets=[local]), "refers to 'slope'")
    assert problems(model([call], functions=[_function([ref], attributes=["slope"])], extra_opsets=[local])) == []
    too_many = helper.make_node("F", ["x", "x"], ["y"], name="call", domain="local")
    one(model([too_many], functions=[f], extra_opsets=[local]), "Node 'call' (F, domain local", "at most 1")
    rec = _function([helper.make_node("F", ["a"], ["b"], domain="local")])
    assert any("recursively" in p for p in problems(model([call], functions=[rec], extra_opsets=[local])))


AP_FLOAT = onnx.AttributeProto.FLOAT


def test_ref_attr_outside_function() -> None:
    n = helper.make_node("LeakyRelu", ["x"], ["y"], name="lr")
    n.attribute.append(onnx.AttributeProto(name="alpha", type=AP_FLOAT, ref_attr_name="slope"))
    one(model([n]), "Node 'lr'", "only allowed inside functions")


def test_validation_runs_in_import() -> None:
    """import_model reports the validator's problems as one ImportError_."""
    from onnxc.importers import import_model

    m = model([helper.make_node("Add", ["x", "ghost"], ["t"], name="add"), helper.make_node("Concat", ["t"], ["y"], name="cat")])
    with pytest.raises(ImportError_) as info:
        import_model(m)
    text = str(info.value)
    assert "'ghost'" in text and "'axis'" in text


# ------------------------------------------------------------------------------------ topological order


def _graph(nodes, inputs=("x",)):
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info(i, T.FLOAT, None) for i in inputs], [])


def test_order_kept_when_valid() -> None:
    g = _graph([relu("a", "x", "t"), relu("b", "t", "u"), relu("c", "x", "v")])
    assert topological_order(g, set()) == [0, 1, 2]


def test_order_sorted_and_stable() -> None:
    # d uses c's output; c is given last. Independent nodes keep their given order.
    g = _graph([relu("d", "u", "y"), relu("a", "x", "t"), relu("c", "t", "u"), relu("e", "x", "z")])
    assert topological_order(g, set()) == [1, 2, 0, 3]


def test_order_respects_subgraph_captures() -> None:
    c = helper.make_tensor_value_info("c", T.BOOL, [])
    g = helper.make_graph(
        [_if_node([helper.make_node("Neg", ["late"], ["t_out"])]), relu("producer", "x", "late")], "g",
        [c, helper.make_tensor_value_info("x", T.FLOAT, None)], [],
    )  # fmt: skip
    assert topological_order(g, set()) == [1, 0]


def test_order_outer_names_impose_nothing() -> None:
    g = _graph([relu("a", "outer", "t")], inputs=())
    assert topological_order(g, {"outer"}) == [0]


def test_cycle_named() -> None:
    g = _graph([relu("a", "x", "t"), helper.make_node("Add", ["t", "w"], ["u"], name="b"), relu("c", "u", "w")])
    with pytest.raises(ImportError_) as info:
        topological_order(g, set())
    text = str(info.value)
    assert "cycle" in text and "node 'b' [Add]" in text and "node 'c' [Relu]" in text and "node 'a'" not in text


def test_external_data_checked_with_base_dir(tmp_path) -> None:
    """Given the model's folder, every external data problem is reported, none read."""
    import os

    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\x00" * 24)
    (model_dir / "w.bin").write_bytes(b"\x00" * 24)
    os.symlink(tmp_path / "secret.bin", model_dir / "link.bin")

    def ext(name: str, location: str, **keys: str) -> onnx.TensorProto:
        t = onnx.TensorProto(name=name, data_type=T.FLOAT, dims=[2, 3], data_location=T.EXTERNAL)
        for k, v in {"location": location, **keys}.items():
            t.external_data.add(key=k, value=v)
        return t

    inits = [ext("up", "../secret.bin"), ext("abs", "/etc/passwd"), ext("link", "link.bin"), ext("eof", "w.bin", offset="8"),
             ext("good", "w.bin")]  # fmt: skip
    m = model([relu()], inits=inits)
    assert problems(m) == []  # without a folder, external data is checked at import
    ps = validate_model(m, CFG, base_dir=model_dir)
    assert len(ps) == 4, ps
    for name, why in (("up", "'..'"), ("abs", "absolute path"), ("link", "outside the model's folder"), ("eof", "16 bytes of external data")):
        assert any(f"initializer '{name}'" in p and why in p for p in ps), (name, ps)


def test_non_utf8_names() -> None:
    """protobuf hands invalid UTF-8 in string fields back as bytes; the validator names the field."""
    data = model([relu("r")]).SerializeToString().replace(b"\x1a\x01r", b"\x1a\x01\xff")
    m = onnx.ModelProto()
    m.ParseFromString(data)
    assert isinstance(m.graph.node[0].name, bytes)
    one(m, "model.graph.node[0].name", "not valid UTF-8")


def test_opset_import_required() -> None:
    m = model([relu()])
    del m.opset_import[:]
    ps = problems(m)
    assert any("imports no opset" in p for p in ps) and any("does not import" in p for p in ps), ps


def test_ir3_initializers_are_inputs() -> None:
    import numpy as np

    w = onnx.numpy_helper.from_array(np.ones((3, 3), "float32"), "w")
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], inits=[w], ir=3, opset=8)
    one(m, "initializer 'w' is not a graph input", "IR version 3")
    m.graph.input.append(helper.make_tensor_value_info("w", T.FLOAT, [3, 3]))
    assert problems(m) == []


def test_report_is_capped() -> None:
    from onnxc.importers.validate import MAX_PROBLEMS

    nodes = [helper.make_node("Add", ["x", f"ghost{i}"], [f"t{i}"], name=f"n{i}") for i in range(MAX_PROBLEMS + 50)]
    ps = problems(model(nodes + [relu("r", "x", "y")]))
    assert len(ps) == MAX_PROBLEMS + 1 and ps[-1] == "50 more problems are not listed."


# --- type constraints: errors by default, warnings when lenient (issue 11) ---------------------------


def _add_int8_double() -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info("a", T.INT8, [2]), helper.make_tensor_value_info("b", T.DOUBLE, [2])],
        [helper.make_tensor_value_info("y", T.DOUBLE, [2])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_type_constraint_violation_is_an_error_by_default() -> None:
    """Add(int8, double) once only warned, and lowering then built invalid IR (a raw MLIRError)."""
    from onnxc.importers import import_model

    assert ImportConfig().strict_verify
    with pytest.raises(ImportError_) as info:
        import_model(_add_int8_double())
    text = str(info.value)
    assert 'loc("add"("Add"))' in text and "operand #1 ('B') has type tensor(double)" in text


def test_lenient_config_warns_instead() -> None:
    from onnxc.importers import import_model

    config = ImportConfig.lenient()
    assert not config.strict_verify and config.validate  # only the strictness changes
    with pytest.warns(UserWarning, match="breaks the ONNX dialect's rules"):
        assert import_model(_add_int8_double(), config) is not None
