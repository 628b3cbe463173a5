"""Dynamic-axes attention lowers like its static twin (issue 8, item 8), and stays right.

What: an attention block written as exporters write it with dynamic `batch`/`seq` axes: head
reshapes whose targets come from Shape/Gather/Unsqueeze/Concat with a -1, a relative position
bias from Range(0, seq), a key-padding mask from a second input sharing the `batch`/`seq`
dim_params, a positional table sliced to the sequence length (Whisper), Softmax, and the QK^T / PV
MatMuls. Checked: its linalg has the static twin's two `linalg.batch_matmul`s and, like the
static twin, no generic reading its operands at run-time indices (`tensor.extract` inside a
`linalg.generic`); its answers equal onnx.reference's at two (batch, seq) sizes with one compile;
inputs that break the shared dim_params, and a sequence longer than the positional table, get
clear errors, not answers.

Why: the compiler proves the dims equal (traced shape values, dim_params checked at the entry,
`min(seq, table)` broadcast only when equal); each proof is a place where a wrong assumption
would give a wrong answer, so the error paths are tested beside the fast path.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.compiler import InputError, lower
from onnxc.targets.cpu.runtime_checks import RuntimeCheckError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
# batch_matmuls and generics reading at run-time indices, as the benchmark reports them
from dynamic_shapes import linalg_counts as _linalg_counts  # noqa: E402

D, H, TABLE = 16, 2, 16
DH = D // H


def _attention_model() -> onnx.ModelProto:
    """x [batch, seq, D] float and mask [batch, seq] int64 (1 attend, 0 padding) -> y [batch, seq, D]."""
    rng = np.random.default_rng(0)

    def init(name: str, shape: tuple[int, ...], scale: float = 0.3) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, shape, (scale * rng.standard_normal(shape)).astype(np.float32).ravel())

    def ints(name: str, values: list[int]) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)

    inits = [init("table", (TABLE, D)), init("wq", (D, D)), init("wk", (D, D)), init("wv", (D, D)), init("wo", (D, D)), init("slope", (H, 1, 1))]
    inits += [
        helper.make_tensor("i0", TensorProto.INT64, [], [0]),
        helper.make_tensor("i1", TensorProto.INT64, [], [1]),
        ints("ax0", [0]),
        ints("minus1", [-1]),
        ints("heads", [H]),
        ints("hdim", [DH]),
        ints("dmodel", [D]),
        ints("ax12", [1, 2]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("big", TensorProto.FLOAT, [], [-1e4]),
    ]
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "i0"], ["b0"], axis=0),
        n("Unsqueeze", ["b0", "ax0"], ["b"]),
        n("Gather", ["shape", "i1"], ["s0"], axis=0),
        n("Unsqueeze", ["s0", "ax0"], ["s"]),
        # Whisper: a positional table cut to the sequence length, added to the input.
        n("Slice", ["table", "ax0", "s", "ax0"], ["pos"]),
        n("Add", ["x", "pos"], ["hx"], name="add_pos"),
        n("MatMul", ["hx", "wq"], ["q"]),
        n("MatMul", ["hx", "wk"], ["k"]),
        n("MatMul", ["hx", "wv"], ["v"]),
        # x.view(b, -1, heads, head_dim) as exporters write it.
        n("Concat", ["b", "minus1", "heads", "hdim"], ["heads_shape"], axis=0),
        n("Reshape", ["q", "heads_shape"], ["q4"]),
        n("Reshape", ["k", "heads_shape"], ["k4"]),
        n("Reshape", ["v", "heads_shape"], ["v4"]),
        n("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        n("MatMul", ["qh", "kt"], ["scores"], name="qk"),
        # T5: a relative position bias over Range(0, seq).
        n("Range", ["i0", "s0", "i1"], ["r"]),
        n("Unsqueeze", ["r", "ax0"], ["r_row"]),
        n("Unsqueeze", ["r", "i1"], ["r_col"]),
        n("Sub", ["r_row", "r_col"], ["rel"]),
        n("Abs", ["rel"], ["dist"]),
        n("Cast", ["dist"], ["distf"], to=TensorProto.FLOAT),
        n("Mul", ["slope", "distf"], ["bias3"]),
        n("Unsqueeze", ["bias3", "ax0"], ["bias"]),
        # The key-padding mask of the second input, [batch, 1, 1, seq].
        n("Unsqueeze", ["mask", "ax12"], ["mask4"]),
        n("Cast", ["mask4"], ["maskf"], to=TensorProto.FLOAT),
        n("Sub", ["one", "maskf"], ["inv"]),
        n("Mul", ["inv", "big"], ["madd"]),
        n("Add", ["scores", "bias"], ["sb"]),
        n("Add", ["sb", "madd"], ["sm"], name="add_mask"),
        n("Softmax", ["sm"], ["p"], axis=-1),
        n("MatMul", ["p", "vh"], ["ctx"], name="pv"),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Concat", ["b", "minus1", "dmodel"], ["merge_shape"], axis=0),
        n("Reshape", ["ctx_t", "merge_shape"], ["merged"]),
        n("MatMul", ["merged", "wo"], ["o"]),
        n("Sigmoid", ["o"], ["gate"]),
        n("Mul", ["o", "gate"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "attention",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", D]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _pinned(model: onnx.ModelProto, batch: int, seq: int) -> onnx.ModelProto:
    """The static twin: the inputs' dim_params set to sizes (the graph's shape computations stay)."""
    static = onnx.ModelProto()
    static.CopyFrom(model)
    for vi in static.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.dim_value = {"batch": batch, "seq": seq}[d.dim_param]
    return static


def _feeds(batch: int, seq: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq - seq // 3 :] = 0  # the last sentence right-padded: the mask matters
    return {"x": rng.standard_normal((batch, seq, D)).astype(np.float32), "mask": mask}


def test_dynamic_attention_lowers_like_its_static_twin() -> None:
    model = _attention_model()
    dynamic = _linalg_counts(model)
    static = _linalg_counts(_pinned(model, 2, 6))
    assert static == {"batch_matmul": 2, "gathers": 0}, static  # what the twin gets: the goal
    assert dynamic == static, f"dynamic {dynamic} vs static {static}"


def test_dynamic_attention_matches_the_reference_at_two_sizes() -> None:
    model = _attention_model()
    compiled = onnxc.compile(model, threads=1, cache_dir=False)
    ref = ReferenceEvaluator(model)
    for batch, seq in ((1, 5), (3, 12)):
        feeds = _feeds(batch, seq)
        (want,) = ref.run(None, feeds)
        got = compiled.run(feeds)["y"]
        assert got.shape == want.shape == (batch, seq, D)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)


def test_inputs_breaking_a_shared_dim_param_get_a_clear_error() -> None:
    """x's and mask's `batch` (and `seq`) are one size by the model's declaration, which the
    lowering relies on: the Python API refuses other sizes before the call, and the compiled
    function itself (a caller without that check) reports them, naming both inputs."""
    compiled = onnxc.compile(_attention_model(), threads=1, cache_dir=False)
    x = _feeds(2, 6)["x"]
    short_mask = np.ones((1, 6), np.int64)
    with pytest.raises(InputError, match="batch"):
        compiled.run({"x": x, "mask": short_mask})
    with pytest.raises(RuntimeCheckError, match=r"input 'mask' dim 0 is 'batch' = 1, but input 'x' dim 0 is 'batch' = 2"):
        compiled.function(x, short_mask)
    with pytest.raises(RuntimeCheckError, match=r"input 'mask' dim 1 is 'seq' = 4, but input 'x' dim 1 is 'seq' = 6"):
        compiled.function(x, np.ones((2, 4), np.int64))
    feeds = _feeds(2, 6)  # after the errors a valid call is right
    (want,) = ReferenceEvaluator(_attention_model()).run(None, feeds)
    (got,) = compiled.function(feeds["x"], feeds["mask"])
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)


def test_a_sequence_longer_than_the_positional_table_is_an_error() -> None:
    """`x + table[:seq]` broadcasts only when seq fits the table: read at the loop index after a
    run-time check, so a longer sequence is the reference's broadcast error, not an answer."""
    model = _attention_model()
    compiled = onnxc.compile(model, threads=1, cache_dir=False)
    feeds = _feeds(1, TABLE + 3)
    with pytest.raises(Exception):  # the reference refuses it as well
        ReferenceEvaluator(model).run(None, feeds)
    with pytest.raises(RuntimeCheckError, match=r"node 'add_pos'.*do not broadcast"):
        compiled.run(feeds)
    feeds = _feeds(2, TABLE)  # the longest that fits
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-3, atol=1e-5)


def _reshape_model(target_nodes: list[onnx.NodeProto], target: str, out_dims: list[str | int | None]) -> onnx.ModelProto:
    """Reshape of x [b, s, 12] to a target computed by `target_nodes` (`bb` is Shape(x)[0:1])."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)
    consts = [
        helper.make_tensor("i0", TensorProto.INT64, [], [0]),
        helper.make_tensor("ax0", TensorProto.INT64, [1], [0]),
        helper.make_tensor("m1", TensorProto.INT64, [1], [-1]),
        helper.make_tensor("c3", TensorProto.INT64, [1], [3]),
        helper.make_tensor("c4", TensorProto.INT64, [1], [4]),
        helper.make_tensor("c5", TensorProto.INT64, [1], [5]),
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "i0"], ["b0"], axis=0),
        helper.make_node("Unsqueeze", ["b0", "ax0"], ["bb"]),
        *target_nodes,
        helper.make_node("Reshape", ["x", target], ["y"], name="r"),
    ]
    graph = helper.make_graph(nodes, "reshape", [x], [y], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "parts, out_dims, views",
    [
        (["bb", "m1", "c3", "c4"], ["b", "s", 3, 4], True),  # [b, s, 12] -> [b, s, 3, 4]: an expand_shape
        (["bb", "m1"], ["b", None], True),  # -> [b, s * 12]: a collapse_shape
        (["zero", "c4", "m1"], ["b", 4, None], False),  # 0 copies b; [b, 4, 3s]: provably the count, no grouping
        (["bb", "m1", "c5"], ["b", None, 5], False),  # 5 does not divide 12: computed and checked at run time
    ],
)
def test_traced_reshape_targets(parts: list[str], out_dims: list[str | int | None], views: bool) -> None:
    """A target traced to dims and constants is a view when its sizes provably match the input's;
    otherwise the run-time computation and its checks stay, with the same answers and errors."""
    model = _reshape_model([helper.make_node("Concat", parts, ["t"], axis=0)], "t", out_dims)
    text = str(lower(model, "linalg"))
    assert ("tensor.reshape" not in text) == views, text
    compiled = onnxc.compile(model, threads=1, cache_dir=False)
    ref = ReferenceEvaluator(model)
    for b, s in ((1, 5), (2, 7)):  # 2 x 7 x 12 is no multiple of 2 x 5: the last case's error
        x = np.random.default_rng(b).standard_normal((b, s, 12)).astype(np.float32)
        try:
            (want,) = ref.run(None, {"x": x})
        except ValueError:  # numpy refuses the reshape in the reference: so must onnxc
            with pytest.raises(RuntimeCheckError, match="node 'r'"):
                compiled.run({"x": x})
            continue
        got = compiled.run({"x": x})["y"]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_expand_to_a_traced_shape_of_its_own_batch() -> None:
    """Expand(x [b, 1, 4], Concat(Shape(x)[0:1], [3, 4])): the target's first dim is x's own
    batch, so x is read at the loop index there (no run-time-index generic, no max), and the
    answers equal the reference's at two batches."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    consts = [helper.make_tensor("i0", TensorProto.INT64, [], [0]), helper.make_tensor("ax0", TensorProto.INT64, [1], [0]),
              helper.make_tensor("rest", TensorProto.INT64, [2], [3, 4])]  # fmt: skip
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "i0"], ["b0"], axis=0),
        helper.make_node("Unsqueeze", ["b0", "ax0"], ["bb"]),
        helper.make_node("Concat", ["bb", "rest"], ["t"], axis=0),
        helper.make_node("Expand", ["x", "t"], ["y"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "expand", [x], [y], consts), opset_imports=[helper.make_opsetid("", 17)])
    assert _linalg_counts(model)["gathers"] == 0
    compiled = onnxc.compile(model, threads=1, cache_dir=False)
    for b in (1, 3):
        xv = np.random.default_rng(b).standard_normal((b, 1, 4)).astype(np.float32)
        (want,) = ReferenceEvaluator(model).run(None, {"x": xv})
        np.testing.assert_array_equal(compiled.run({"x": xv})["y"], want)
