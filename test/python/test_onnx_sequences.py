"""Numerics of `onnx-eliminate-sequences` end to end: models that build and consume sequences and
optionals of compile-time structure, compiled for the CPU, against `onnx.reference`.

The pass is put into the ONNX-level pipeline here (after the second `onnx-upgrade-ops`, where it
belongs) unless the pipeline already has it, so these tests hold before and after the lead wires it
in. Beside the numerics: sequences whose structure is not known are left for the lowering's check
to report, never half rewritten.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.errors import OnnxcError
from onnxc.importers import import_model
from onnxc.transforms import named_pipelines
from onnxc.transforms.onnx_sequences import eliminate_sequences
from onnxc.transforms.onnx_utils import collect_ops

PASS = ("onnx-eliminate-sequences", {})
F = TensorProto.FLOAT
I64 = TensorProto.INT64


@pytest.fixture(autouse=True)
def _pipeline_with_pass(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    passes = list(named_pipelines.ONNX_LEVEL_PASSES)
    if PASS not in passes:
        upgrades = [i for i, (name, _) in enumerate(passes) if name == "onnx-upgrade-ops"]
        passes.insert(upgrades[-1] + 1 if upgrades else 0, PASS)
    monkeypatch.setattr(named_pipelines, "ONNX_LEVEL_PASSES", tuple(passes))
    monkeypatch.setattr(named_pipelines.run_onnx_passes, "__defaults__", (tuple(passes),))
    yield


def _model(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[Any], opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


class _OnnxRuntime:
    """onnxruntime as the oracle, for what onnx.reference 1.23 gets wrong: its SequenceInsert
    maps position n (the back, per the spec) to the front; its SequenceMap binds only one
    sequence plus tensors, or exactly two sequences; its Optional of a tensor comes back as a
    list. onnxruntime 1.31 refuses IR 14, so the model is written at IR 10 (opset 21 needs no
    newer)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        ort = pytest.importorskip("onnxruntime")
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        copy.ir_version = 10
        self.session = ort.InferenceSession(copy.SerializeToString(), providers=["CPUExecutionProvider"])

    def run(self, _: None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, feeds)


def _check(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], *more_feeds: dict[str, np.ndarray], oracle: str = "reference"
) -> onnxc.CompiledModel:
    """Compile once, run each feed set, compare every output with onnx.reference (or onnxruntime)."""
    compiled = onnxc.compile(model)
    ref = ReferenceEvaluator(model) if oracle == "reference" else _OnnxRuntime(model)
    for f in (feeds, *more_feeds):
        want = ref.run(None, f)
        got = compiled(**f)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, err_msg=f"feeds {f}")
    return compiled


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_split_then_concat_on_a_new_axis() -> None:
    """SplitToSequence without `split` (keepdims=0) then ConcatFromSequence(new_axis=1, axis=-1):
    a transpose, the way exporters write an unstack/stack pair."""
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=-1, new_axis=1),
        helper.make_node("SequenceLength", ["s"], ["n"]),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [3, 4, 2])],
        [helper.make_tensor_value_info("y", F, [4, 2, 3]), helper.make_tensor_value_info("n", I64, [])],
    )
    _check(model, {"x": _rand(3, 4, 2)})


def test_constant_positions() -> None:
    """Construct, Insert and Erase at constant positions (negative ones too), At and Length."""
    c = lambda name, v: helper.make_node("Constant", [], [name], value=helper.make_tensor(name, I64, [], [v]))  # noqa: E731
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s0"]),
        c("m1", -1),
        c("m3", -3),
        c("one", 1),
        helper.make_node("SequenceInsert", ["s0", "d", "m1"], ["s1"]),  # [a, b, d, c]
        helper.make_node("SequenceErase", ["s1", "m3"], ["s2"]),  # [a, d, c]
        helper.make_node("SequenceInsert", ["s2", "b"], ["s3"]),  # [a, d, c, b]
        helper.make_node("SequenceErase", ["s3"], ["s4"]),  # [a, d, c]
        helper.make_node("SequenceAt", ["s4", "one"], ["y1"]),
        helper.make_node("SequenceAt", ["s3", "m1"], ["y2"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s4"], ["cat"], axis=0),
    ]
    vi = lambda n: helper.make_tensor_value_info(n, F, [2, 3])  # noqa: E731
    model = _model(
        nodes,
        [vi("a"), vi("b"), vi("c"), vi("d")],
        [vi("y1"), vi("y2"), helper.make_tensor_value_info("n", I64, []), helper.make_tensor_value_info("cat", F, [6, 3])],
    )
    _check(model, {k: _rand(2, 3, seed=i) for i, k in enumerate("abcd")})


def test_scalar_and_list_split_sizes() -> None:
    """A scalar `split` (pieces of 4, 4, 2) and a 1-D one (1, 5, 4), read back by position and
    concatenated again."""
    nodes = [
        helper.make_node("Constant", [], ["four"], value=helper.make_tensor("four", I64, [], [4])),
        helper.make_node("Constant", [], ["sizes"], value=helper.make_tensor("sizes", I64, [3], [1, 5, 4])),
        helper.make_node("Constant", [], ["last"], value=helper.make_tensor("last", I64, [], [-1])),
        helper.make_node("SplitToSequence", ["x", "four"], ["s"], axis=1),
        helper.make_node("SequenceAt", ["s", "last"], ["tail"]),
        helper.make_node("SplitToSequence", ["x", "sizes"], ["t"], axis=-1),
        helper.make_node("ConcatFromSequence", ["t"], ["back"], axis=1),
        helper.make_node("SequenceLength", ["s"], ["n"]),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [3, 10])],
        [
            helper.make_tensor_value_info("tail", F, [3, 2]),
            helper.make_tensor_value_info("back", F, [3, 10]),
            helper.make_tensor_value_info("n", I64, []),
        ],
    )
    _check(model, {"x": _rand(3, 10)})


def test_runtime_split_sizes() -> None:
    """A 1-D `split` input of static length 2 whose values come at run time: the pieces are cut at
    run-time offsets (read back by position and concatenated again, for several splits, an empty
    piece included); sizes that do not add up to the dim, or a negative one, raise a run-time
    check naming the node."""
    nodes = [
        helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1, name="cut"),
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", I64, [], [1])),
        helper.make_node("SequenceAt", ["s", "one"], ["second"]),
        helper.make_node("ConcatFromSequence", ["s"], ["back"], axis=1),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [3, 6]), helper.make_tensor_value_info("split", I64, [2])],
        [helper.make_tensor_value_info("second", F, [3, None]), helper.make_tensor_value_info("back", F, [3, 6])],
    )
    x = _rand(3, 6)
    feeds = [{"x": x, "split": np.array(sp, np.int64)} for sp in ([2, 4], [5, 1], [6, 0])]
    compiled = _check(model, *feeds)
    for bad in ([2, 2], [7, -1]):
        with pytest.raises(OnnxcError, match=r"node 'cut'.*split sizes .* do not add up"):
            compiled(x=x, split=np.array(bad, np.int64))


def test_runtime_positions() -> None:
    """Insert, Erase and At at positions given at run time (as overridable initializers are),
    across the valid ranges, negative ones and the insert-at-the-back position n included."""
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s0"]),
        helper.make_node("SequenceInsert", ["s0", "d", "pi"], ["s1"]),
        helper.make_node("SequenceErase", ["s1", "pe"], ["s2"]),
        helper.make_node("SequenceAt", ["s2", "pa"], ["y"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["all"], axis=0, new_axis=1),
    ]
    vi = lambda n: helper.make_tensor_value_info(n, F, [2])  # noqa: E731
    pos = lambda n: helper.make_tensor_value_info(n, I64, [])  # noqa: E731
    model = _model(
        nodes,
        [vi("a"), vi("b"), vi("c"), vi("d"), pos("pi"), pos("pe"), pos("pa")],
        [vi("y"), helper.make_tensor_value_info("all", F, [3, 2])],
    )
    tensors = {k: _rand(2, seed=i) for i, k in enumerate("abcd")}
    feeds = [
        {**tensors, "pi": np.array(pi, np.int64), "pe": np.array(pe, np.int64), "pa": np.array(pa, np.int64)}
        for pi, pe, pa in [(0, 0, 0), (3, -1, 2), (-3, 2, -1), (1, -4, -3), (-1, 3, 1), (2, 1, -2)]
    ]
    _check(model, *feeds, oracle="onnxruntime")


def test_runtime_positions_over_elements_of_different_shapes() -> None:
    """The same at run-time positions over elements of different lengths ([2], [3], [4], and a
    [1] inserted; the insert position one-element 1-D as the backend suite passes it): the
    element at each index is chosen by an If chain (a Where cannot choose between shapes), so
    each output's shape is decided at run time."""
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s0"]),
        helper.make_node("SequenceInsert", ["s0", "d", "pi"], ["s1"]),
        helper.make_node("SequenceErase", ["s1", "pe"], ["s2"]),
        helper.make_node("SequenceAt", ["s2", "pa"], ["y"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["all"], axis=0),
    ]
    sizes = {"a": 2, "b": 3, "c": 4, "d": 1}
    model = _model(
        nodes,
        [helper.make_tensor_value_info(k, F, [n]) for k, n in sizes.items()]
        + [helper.make_tensor_value_info("pi", I64, [1]), helper.make_tensor_value_info("pe", I64, []), helper.make_tensor_value_info("pa", I64, [])],
        [helper.make_tensor_value_info("y", F, [None]), helper.make_tensor_value_info("all", F, [None])],
    )
    tensors = {k: _rand(n, seed=i) for i, (k, n) in enumerate(sizes.items())}
    feeds = [
        {**tensors, "pi": np.array([pi], np.int64), "pe": np.array(pe, np.int64), "pa": np.array(pa, np.int64)}
        for pi, pe, pa in [(0, 0, 0), (3, -1, 2), (-3, 2, -1), (1, -4, -3), (-1, 3, 1), (2, 1, -2)]
    ]
    _check(model, *feeds, oracle="onnxruntime")  # onnx.reference inserts at the front for position n


def test_sequence_map_with_outer_value() -> None:
    """SequenceMap over two sequences and a tensor; the body also reads a value of the graph
    around it. Unrolled per element, then stacked."""
    body = helper.make_graph(
        [helper.make_node("Add", ["e", "f"], ["s"]), helper.make_node("Mul", ["s", "w"], ["m"]), helper.make_node("Sub", ["m", "k"], ["o"])],
        "body",
        [helper.make_tensor_value_info("e", F, [3]), helper.make_tensor_value_info("f", F, [3]), helper.make_tensor_value_info("w", F, [3])],
        [helper.make_tensor_value_info("o", F, [3])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["k"]),
        helper.make_node("SplitToSequence", ["p"], ["s1"], axis=0, keepdims=0),
        helper.make_node("SplitToSequence", ["q"], ["s2"], axis=0, keepdims=0),
        helper.make_node("SequenceMap", ["s1", "s2", "x"], ["r"], body=body),
        helper.make_node("ConcatFromSequence", ["r"], ["y"], axis=0, new_axis=1),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("p", F, [4, 3]), helper.make_tensor_value_info("q", F, [4, 3]), helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("y", F, [4, 3])],
        opset=21,
    )
    _check(model, {"p": _rand(4, 3, seed=1), "q": _rand(4, 3, seed=2), "x": _rand(3, seed=3)}, oracle="onnxruntime")


def test_loop_building_a_list_is_unrolled() -> None:
    """A Loop with a constant trip count and a constant-true condition that appends to a
    sequence (the SequenceMap schema function's shape) and has a scan output: unrolled, the list
    concatenated, the scan outputs stacked."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["x", "fi"], ["scaled"]),
            helper.make_node("SequenceInsert", ["acc", "scaled"], ["acc_out"]),
            helper.make_node("Add", ["scaled", "x"], ["scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_sequence_value_info("acc", F, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_sequence_value_info("acc_out", F, None),
            helper.make_tensor_value_info("scan", F, [2]),
        ],
    )
    nodes = [
        helper.make_node("Constant", [], ["m"], value=helper.make_tensor("m", I64, [], [4])),
        helper.make_node("Constant", [], ["t"], value=helper.make_tensor("t", TensorProto.BOOL, [], [True])),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("Loop", ["m", "t", "empty"], ["final", "scans"], body=body),
        helper.make_node("ConcatFromSequence", ["final"], ["y"], axis=0, new_axis=1),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [4, 2]), helper.make_tensor_value_info("scans", F, [4, 2])],
    )
    _check(model, {"x": _rand(2)})


def test_if_yielding_sequences() -> None:
    """An If with a runtime condition whose branches build sequences of one length (elements of
    different shapes per branch) becomes an If yielding the elements; both branches are run."""
    then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["neg"]), helper.make_node("SequenceConstruct", ["neg", "y"], ["s"])],
        "then", [], [helper.make_tensor_sequence_value_info("s", F, None)],
    )  # fmt: skip
    other = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["y", "x"], ["s2"])], "else", [], [helper.make_tensor_sequence_value_info("s2", F, None)]
    )
    nodes = [
        helper.make_node("If", ["c"], ["seq"], then_branch=then, else_branch=other),
        helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=0),
        helper.make_node("SequenceLength", ["seq"], ["n"]),
    ]
    model = _model(
        nodes,
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", F, [2]),
            helper.make_tensor_value_info("y", F, [3]),
        ],
        [helper.make_tensor_value_info("cat", F, [5]), helper.make_tensor_value_info("n", I64, [])],
    )
    x, y = _rand(2, seed=1), _rand(3, seed=2)
    _check(model, {"c": np.array(True), "x": x, "y": y}, {"c": np.array(False), "x": x, "y": y})


def test_optionals() -> None:
    """Optional(x) is present, Optional(type=...) absent, a plain tensor present; getting the
    element of a present optional is the tensor."""
    tensor_type = helper.make_tensor_type_proto(F, [2, 2])
    nodes = [
        helper.make_node("Optional", ["x"], ["o"]),
        helper.make_node("Optional", [], ["empty"], type=tensor_type),
        helper.make_node("OptionalHasElement", ["o"], ["h1"]),
        helper.make_node("OptionalHasElement", ["empty"], ["h2"]),
        helper.make_node("OptionalHasElement", ["x"], ["h3"]),
        helper.make_node("OptionalGetElement", ["o"], ["g"]),
        helper.make_node("Neg", ["g"], ["y"]),
    ]
    b = lambda n: helper.make_tensor_value_info(n, TensorProto.BOOL, [])  # noqa: E731
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 2])],
        [b("h1"), b("h2"), b("h3"), helper.make_tensor_value_info("y", F, [2, 2])],
    )
    _check(model, {"x": _rand(2, 2)}, oracle="onnxruntime")


def test_optional_sequence() -> None:
    """An optional holding a sequence: presence, then the sequence's elements through it."""
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
        helper.make_node("Optional", ["s"], ["o"]),
        helper.make_node("OptionalHasElement", ["o"], ["h"]),
        helper.make_node("OptionalGetElement", ["o"], ["g"]),
        helper.make_node("Identity", ["g"], ["g2"]),
        helper.make_node("ConcatFromSequence", ["g2"], ["y"], axis=0),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("a", F, [2]), helper.make_tensor_value_info("b", F, [3])],
        [helper.make_tensor_value_info("h", TensorProto.BOOL, []), helper.make_tensor_value_info("y", F, [5])],
    )
    _check(model, {"a": _rand(2, seed=1), "b": _rand(3, seed=2)}, oracle="onnxruntime")


def test_runtime_index_over_different_shapes_becomes_an_if_chain() -> None:
    """A runtime position into elements of different shapes: no Where can choose between them,
    so the pass builds an If per candidate (its result's dim dynamic); the sequence ops are gone
    and the compiled model picks the right element for each index, negative ones included."""
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s"], name="build"),
        helper.make_node("SequenceAt", ["s", "p"], ["y"], name="pick"),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("a", F, [2]), helper.make_tensor_value_info("b", F, [3]), helper.make_tensor_value_info("p", I64, [])],
        [helper.make_tensor_value_info("y", F, [None])],
    )
    module = import_model(model)
    with module.context:
        eliminate_sequences(module.operation)
    assert not [op.name for op in collect_ops(module.operation) if op.name.startswith("onnx.sequence")]
    assert [op.name for op in collect_ops(module.operation) if op.name == "onnx.if"] == ["onnx.if"]
    tensors = {"a": _rand(2), "b": _rand(3, seed=1)}
    _check(model, *[{**tensors, "p": np.array(p, np.int64)} for p in (0, 1, -1, -2)])


def test_elements_of_different_ranks_are_left_for_the_lowering_check() -> None:
    """A runtime position into elements of different ranks: no If can join their types, so the
    pass keeps the sequence ops, and compiling reports them by name."""
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s"], name="build"),
        helper.make_node("SequenceAt", ["s", "p"], ["picked"], name="pick"),
        helper.make_node("Shape", ["picked"], ["y"]),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("a", F, [2]), helper.make_tensor_value_info("b", F, [3, 2]), helper.make_tensor_value_info("p", I64, [])],
        [helper.make_tensor_value_info("y", I64, [None])],
    )
    module = import_model(model)
    with module.context:
        eliminate_sequences(module.operation)
    left = sorted(op.name for op in collect_ops(module.operation) if op.name.startswith("onnx.sequence"))
    assert left == ["onnx.sequence_at", "onnx.sequence_construct"]
    with pytest.raises(OnnxcError, match="pick"):
        onnxc.compile(model)


# --- function boundaries (bind_boundary) -----------------------------------------------------------


def _run_bound(model: onnx.ModelProto, feeds: list[Any]) -> tuple[list[Any], list[Any]]:
    """Specialize `model` to the structure of `feeds` (lists for sequences, None for absent
    optionals) with `bind_boundary`, compile, run with the flattened arrays, regroup the outputs."""
    from onnxc.targets.cpu import compile_module
    from onnxc.transforms.onnx_sequences import OptLayout, SeqLayout, bind_boundary
    from onnxc.transforms.onnx_utils import mlir_element_type, ranked_type

    def layout(value: Any, tp: onnx.TypeProto) -> Any:
        kind = tp.WhichOneof("value")
        if kind == "sequence_type":
            return SeqLayout(tuple(layout(v, tp.sequence_type.elem_type) for v in value))
        if kind == "optional_type":
            return OptLayout(None if value is None else layout(value, tp.optional_type.elem_type))
        return ranked_type(list(np.shape(value)), mlir_element_type(np.asarray(value).dtype))

    def leaves(value: Any) -> list[np.ndarray]:
        if value is None:
            return []
        return [x for v in value for x in leaves(v)] if isinstance(value, list) else [np.asarray(value)]

    def regroup(lay: Any, arrays: list[np.ndarray]) -> Any:
        if isinstance(lay, SeqLayout):
            return [regroup(e, arrays) for e in lay.elements]
        if isinstance(lay, OptLayout):
            return None if lay.value is None else regroup(lay.value, arrays)
        return arrays.pop(0)

    module = import_model(model)
    with module.context:
        layouts = [
            None if i.type.WhichOneof("value") == "tensor_type" else layout(v, i.type) for v, i in zip(feeds, model.graph.input)
        ]
        out_layouts = bind_boundary(module.operation, layouts)
    named_pipelines.lower_onnx_module(module, "linalg")
    results = list(compile_module(module)(*[x for v in feeds for x in leaves(v)]))
    got = [regroup(lay, results) for lay in out_layouts]
    return got, out_layouts


def _assert_nested_close(got: Any, want: Any) -> None:
    if want is None:
        assert got is None
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_nested_close(g, w)
    else:
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_bind_boundary_sequences_in_and_out() -> None:
    """A sequence input (3 elements given at run time) gets an element inserted at a runtime
    position and is returned, with its length: one compiled specialization per structure."""
    from onnxc.transforms.onnx_sequences import SeqLayout

    nodes = [
        helper.make_node("SequenceInsert", ["s", "t", "p"], ["out"]),
        helper.make_node("SequenceLength", ["s"], ["n"]),
        helper.make_node("SequenceMap", ["out"], ["doubled"], body=helper.make_graph(
            [helper.make_node("Add", ["e", "e"], ["d"])], "body",
            [helper.make_tensor_value_info("e", F, None)], [helper.make_tensor_value_info("d", F, None)])),
    ]  # fmt: skip
    model = _model(
        nodes,
        [
            helper.make_tensor_sequence_value_info("s", F, None),
            helper.make_tensor_value_info("t", F, [2]),
            helper.make_tensor_value_info("p", I64, []),
        ],
        [
            helper.make_tensor_sequence_value_info("out", F, None),
            helper.make_tensor_value_info("n", I64, []),
            helper.make_tensor_sequence_value_info("doubled", F, None),
        ],
    )
    elems = [_rand(2, seed=i) for i in range(3)]
    t = _rand(2, seed=9)
    for p in (0, -1, 2):
        feeds = [elems, t, np.array(p, np.int64)]
        got, layouts = _run_bound(model, feeds)
        want = ReferenceEvaluator(model).run(None, dict(zip(["s", "t", "p"], feeds)))
        _assert_nested_close(got, [list(w) if isinstance(w, list) else w for w in want])
        assert isinstance(layouts[0], SeqLayout) and len(layouts[0].elements) == 4


def test_bind_boundary_optionals() -> None:
    """Optional inputs given present or absent; an optional output keeps the presence."""
    from onnxc.transforms.onnx_sequences import OptLayout

    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [3]))
    nodes = [
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
        helper.make_node("Identity", ["o"], ["same"]),
    ]
    model = _model(
        nodes,
        [helper.make_value_info("o", opt)],
        [helper.make_tensor_value_info("has", TensorProto.BOOL, []), helper.make_value_info("same", opt)],
        opset=18,
    )
    x = _rand(3)
    got, layouts = _run_bound(model, [x])
    assert bool(got[0]) is True and isinstance(layouts[1], OptLayout)
    np.testing.assert_array_equal(got[1], x)
    got, layouts = _run_bound(model, [None])
    assert bool(got[0]) is False and got[1] is None and layouts[1] == OptLayout(None)


def test_bind_boundary_reports_unknown_outputs() -> None:
    """An output sequence whose length depends on a runtime value cannot be flattened: the error
    names the output."""
    from onnxc.transforms.onnx_sequences import BoundaryError, bind_boundary

    model = _model(
        [helper.make_node("SplitToSequence", ["x", "k"], ["parts"])],
        [helper.make_tensor_value_info("x", F, [6]), helper.make_tensor_value_info("k", I64, [])],
        [helper.make_tensor_sequence_value_info("parts", F, None)],
    )
    module = import_model(model)
    with pytest.raises(BoundaryError, match="output 'parts'"):
        bind_boundary(module.operation, [None, None])


# --- structures decided by input values (StructuredModel's value specialization) -----------------


def _same_nested(got: Any, want: Any) -> None:
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _same_nested(g, w)
        return
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    assert np.asarray(got).shape == np.asarray(want).shape


def test_sequence_length_decided_by_input_values() -> None:
    """A Loop whose trip count and condition are graph inputs builds a sequence (one growing Slice
    per iteration), and a scalar `split` input decides how many pieces SplitToSequence cuts: the
    structure is known only with those values, so the model is compiled per value (the inputs
    become constants) and each call gets its own length, checked against onnxruntime; calls with
    a value seen before reuse its compiled function."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", I64, [1], [1])),
            helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", I64, [1], [0])),
            helper.make_node("Unsqueeze", ["i", "zero"], ["i1"]),
            helper.make_node("Add", ["i1", "one"], ["end"]),
            helper.make_node("Slice", ["x", "zero", "end"], ["piece"]),
            helper.make_node("SequenceInsert", ["seq_in", "piece"], ["seq_out"]),
        ],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_sequence_value_info("seq_out", F, None)],
    )  # fmt: skip
    nodes = [
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("Loop", ["m", "cond", "empty"], ["grown"], body=body),
        helper.make_node("SplitToSequence", ["x", "k"], ["pieces"]),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [5]), helper.make_tensor_value_info("m", I64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []), helper.make_tensor_value_info("k", I64, [])],
        [helper.make_tensor_sequence_value_info("grown", F, None), helper.make_tensor_sequence_value_info("pieces", F, None)],
    )  # fmt: skip
    compiled = onnxc.compile(model)
    ort = _OnnxRuntime(model)
    x = _rand(5)
    calls = [(3, True, 2), (1, True, 5), (4, False, 1), (3, True, 2)]
    for m, cond, k in calls:
        feeds = {"x": x, "m": np.array(m, np.int64), "cond": np.array(cond), "k": np.array(k, np.int64)}
        got = compiled(**feeds)
        _same_nested(got, ort.run(None, feeds))
    assert len(compiled._cache) == 3  # three distinct values, the fourth call reused the first


def test_value_specializations_are_capped() -> None:
    """Past MAX_VALUE_SPECIALIZATIONS distinct values a call is refused with an OnnxcError rather
    than compiling without end."""
    model = _model(
        [helper.make_node("SplitToSequence", ["x", "k"], ["pieces"])],
        [helper.make_tensor_value_info("x", F, [6]), helper.make_tensor_value_info("k", I64, [])],
        [helper.make_tensor_sequence_value_info("pieces", F, None)],
    )
    compiled = onnxc.compile(model)
    compiled.MAX_VALUE_SPECIALIZATIONS = 2
    x = _rand(6)
    for k in (1, 2):
        assert len(compiled(x=x, k=np.array(k, np.int64))[0]) == -(-6 // k)
    with pytest.raises(OnnxcError, match="depends on input values"):
        compiled(x=x, k=np.array(3, np.int64))
