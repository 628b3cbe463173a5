"""The lowerings added for the backend suite's remaining ops (issue 10), beyond the suite's own
cases: dynamic batch/sequence/spatial dims and the attribute combinations the suite does not
reach, each checked against `onnx.reference.ReferenceEvaluator` (the spec's reference) through
`onnxc.backend`. Ops: LinearAttention, Det, TensorScatter, MaxUnpool, RoiAlign, DeformConv,
STFT, MelWeightMatrix, Resize with antialias; and the pre-check's refusals (a clean diagnostic,
no MLIR error).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import onnxc.backend
from onnxc.errors import OnnxcError


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], n_out: int, opset: int, inits: list[onnx.TensorProto] | None = None, out_t: int = TP.FLOAT) -> onnx.ModelProto:
    outs = [helper.make_tensor_value_info(n, out_t, None) for n in nodes[-1].output[:n_out]]
    g = helper.make_graph(nodes, "g", inputs, outs, initializer=inits or [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model: onnx.ModelProto, feeds_list: list[dict[str, np.ndarray]], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    rep = onnxc.backend.prepare(model, "CPU")
    for feeds in feeds_list:
        want = ReferenceEvaluator(model).run(None, feeds)
        got = rep.run([feeds[i.name] for i in model.graph.input])
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _vi(name: str, shape: list[int | str] | None, t: int = TP.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, t, shape)


RNG = np.random.default_rng(0)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_dynamic_batch_and_tokens(rule: str) -> None:
    """GQA (8 query heads on 4 kv heads), a past state, per-key decay; B and T dynamic."""
    names = ["q", "k", "v", "past", "decay" if "gated" in rule else "", "beta" if "delta" in rule else ""]
    ins = [_vi("q", ["B", "T", 64]), _vi("k", ["B", "T", 32]), _vi("v", ["B", "T", 32]), _vi("past", ["B", 4, 8, 8])]
    if "gated" in rule:
        ins.append(_vi("decay", ["B", "T", 32]))
    if "delta" in rule:
        ins.append(_vi("beta", ["B", "T", 4]))
    node = helper.make_node("LinearAttention", names, ["o", "s"], q_num_heads=8, kv_num_heads=4, update_rule=rule)
    feeds = []
    for b, t in [(1, 3), (2, 1)]:
        f = {"q": _f32(b, t, 64), "k": _f32(b, t, 32, scale=0.3), "v": _f32(b, t, 32), "past": _f32(b, 4, 8, 8)}
        if "gated" in rule:
            f["decay"] = -np.abs(_f32(b, t, 32))
        if "delta" in rule:
            f["beta"] = RNG.random((b, t, 4)).astype(np.float32)
        feeds.append(f)
    _check(_model([node], ins, 2, 27), feeds)


def test_det_dynamic_batch_singular_and_pivoting() -> None:
    node = helper.make_node("Det", ["x"], ["y"])
    x = _f32(2, 3, 5, 5)
    x[0, 0, :, 0] = 0.0  # singular
    x[1, 2, 0, 0] = 0.0  # the first pivot must come from another row
    _check(_model([node], [_vi("x", ["A", "B", "N", "N"])], 1, 22), [{"x": x}, {"x": _f32(1, 1, 1, 1)}])


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_dynamic_lengths(mode: str) -> None:
    node = helper.make_node("TensorScatter", ["p", "u", "w"], ["y"], mode=mode)
    ins = [_vi("p", ["B", 2, "M", 3]), _vi("u", ["B", 2, "S", 3]), _vi("w", ["B"], TP.INT64)]
    feeds = [
        {"p": _f32(2, 2, 6, 3), "u": _f32(2, 2, 3, 3), "w": np.array([0, 3], np.int64)},
        {"p": _f32(3, 2, 4, 3), "u": _f32(3, 2, 0, 3), "w": np.array([1, 2, 0], np.int64)},  # an empty update
        {"p": _f32(2, 2, 5, 3), "u": _f32(2, 2, 4, 3), "w": np.array([3, 1] if mode == "circular" else [1, 0], np.int64)},
    ]
    _check(_model([node], ins, 1, 24), feeds, rtol=0, atol=0)


def test_max_unpool_dynamic_with_output_shape() -> None:
    kw = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    pool = _model([helper.make_node("MaxPool", ["x"], ["p", "i"], **kw)], [_vi("x", None)], 2, 22)
    nodes = [helper.make_node("MaxUnpool", ["p", "i", "s"], ["y"], **kw), helper.make_node("MaxUnpool", ["p", "i"], ["z"], **kw)]
    ins = [_vi("p", ["N", 2, "H", "W"]), _vi("i", ["N", 2, "H", "W"], TP.INT64), _vi("s", [4], TP.INT64)]
    g = helper.make_graph(nodes, "g", ins, [_vi("y", None), _vi("z", None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    feeds = []
    for n, h, w in [(1, 5, 5), (2, 7, 9)]:
        p, i = ReferenceEvaluator(pool).run(None, {"x": _f32(n, 2, h, w)})
        feeds.append({"p": p, "i": i, "s": np.array([n, 2, h + 1, w], np.int64)})
    _check(model, feeds, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
def test_roi_align_runtime_sampling_grid(mode: str, ctm: str) -> None:
    """sampling_ratio 0: the grid per ROI is computed at run time (a reversed box samples nothing)."""
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], mode=mode, coordinate_transformation_mode=ctm, output_height=3, output_width=2, sampling_ratio=0, spatial_scale=0.5)
    ins = [_vi("x", ["N", "C", "H", "W"]), _vi("r", ["R", 4]), _vi("b", ["R"], TP.INT64)]
    r = (RNG.random((4, 4)) * np.array([22, 18, 22, 18]) - 2).astype(np.float32)
    r[0] = [4, 4, 1, 1]
    _check(_model([node], ins, 1, 22), [{"x": _f32(2, 3, 9, 11), "r": r, "b": np.array([0, 1, 1, 0], np.int64)}])


def test_deform_conv_groups_strides_dilations_mask_bias() -> None:
    kw = {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2], "group": 2, "offset_group": 2}
    ins = [_vi("X", ["N", 4, "H", "W"]), _vi("W", [6, 2, 3, 2]), _vi("O", ["N", 24, "OH", "OW"]), _vi("B", [6]), _vi("M", ["N", 12, "OH", "OW"])]
    node = helper.make_node("DeformConv", ["X", "W", "O", "B", "M"], ["Y"], **kw)
    feeds = []
    for n, h, w in [(1, 5, 6), (2, 7, 5)]:
        oh, ow = (h + 3 - 3) // 2 + 1, (w + 1 - 3) + 1
        feeds.append({"X": _f32(n, 4, h, w), "W": _f32(6, 2, 3, 2), "O": _f32(n, 24, oh, ow, scale=2.0), "B": _f32(6), "M": RNG.random((n, 12, oh, ow)).astype(np.float32)})
    _check(_model([node], ins, 1, 22), feeds)


@pytest.mark.parametrize("onesided,complex_in,window", [(0, True, True), (1, False, True), (0, False, False)])
def test_stft_runtime_frames(onesided: int, complex_in: bool, window: bool) -> None:
    names = ["x", "s", "w" if window else "", "l"]
    ins = [_vi("x", ["B", "N", 2 if complex_in else 1]), _vi("s", [], TP.INT64)] + ([_vi("w", ["L"])] if window else []) + [_vi("l", [], TP.INT64)]
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    f = {"x": _f32(2, 50, 2 if complex_in else 1), "s": np.array(7, np.int64), "l": np.array(12, np.int64)}
    if window:
        f["w"] = RNG.random(12).astype(np.float32)
    _check(_model([node], ins, 1, 17), [f], atol=1e-4)


@pytest.mark.parametrize("out_type", [TP.FLOAT, TP.DOUBLE])
def test_mel_weight_matrix(out_type: int) -> None:
    node = helper.make_node("MelWeightMatrix", list("abcde"), ["y"], output_datatype=out_type)
    ins = [_vi(n, [], TP.INT64) for n in "abc"] + [_vi(n, [], TP.FLOAT) for n in "de"]
    feeds = []
    for args in [(10, 512, 16000, 20.0, 8000.0), (40, 1024, 22050, 0.0, 11025.0)]:
        feeds.append({**{n: np.array(v, np.int64) for n, v in zip("abc", args[:3])}, **{n: np.array(v, np.float32) for n, v in zip("de", args[3:])}})
    _check(_model([node], ins, 1, 17, out_t=out_type), feeds, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_antialias_constant_scales(mode: str, exclude_outside: int) -> None:
    """Constant scales (the suite feeds them at run time), downsampling one axis, upsampling one."""
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode, antialias=1, exclude_outside=exclude_outside)
    scales = nh.from_array(np.array([1, 1, 0.37, 1.5], np.float32), "s")
    _check(_model([node], [_vi("x", [1, 2, 9, 13])], 1, 19, [scales]), [{"x": _f32(1, 2, 9, 13)}])


@pytest.mark.parametrize(
    "node,inputs,expect",
    [
        (helper.make_node("LinearAttention", ["q", "k", "v"], ["o", "s"], q_num_heads=2, kv_num_heads=2), [_vi("q", [1, 2, 8]), _vi("k", [1, 2, 8]), _vi("v", [1, 2, 8])], "requires the decay input"),
        (helper.make_node("LinearAttention", ["q", "k", "v"], ["o", "s"], q_num_heads=3, kv_num_heads=2, update_rule="linear"), [_vi("q", [1, 2, 9]), _vi("k", [1, 2, 8]), _vi("v", [1, 2, 8])], "positive multiple"),
        (helper.make_node("Det", ["x"], ["y"]), [_vi("x", [2, 3])], "not square"),
        (helper.make_node("DeformConv", ["x", "w", "o"], ["y"]), [_vi("x", [1, 1, 3, 3, 3]), _vi("w", [1, 1, 2, 2, 2]), _vi("o", [1, 24, 2, 2, 2])], "only 2-D"),
    ],
    ids=["la_missing_decay", "la_heads", "det_nonsquare", "deform_3d"],
)
def test_precheck_refusals_are_diagnostics(node: onnx.NodeProto, inputs: list[onnx.ValueInfoProto], expect: str) -> None:
    opset = 27 if node.op_type == "LinearAttention" else 22
    model = _model([node], inputs, len(node.output), opset)
    with pytest.raises(OnnxcError, match=expect):
        onnxc.backend.prepare(model, "CPU")


@pytest.mark.parametrize("mode,weights", [("TF", False), ("IDF", True), ("TFIDF", True)])  # the reference fails on IDF/TFIDF without weights
@pytest.mark.parametrize("min_gram,max_gram,skip", [(1, 3, 2), (2, 3, 0), (1, 1, 3)])
def test_tfidf_vectorizer_grams_skips_weights(mode: str, weights: bool, min_gram: int, max_gram: int, skip: int) -> None:
    """Uni-, bi- and trigrams (an unloaded size keeps its ids), skips, the three weightings;
    a dynamic batch and int32 tokens."""
    pool = [1, 2, 3, 4, 1, 2, 2, 3, 3, 1, 1, 2, 3, 2, 3, 1]  # 4 unigrams, 3 bigrams, 2 trigrams
    attrs = {"mode": mode, "min_gram_length": min_gram, "max_gram_length": max_gram, "max_skip_count": skip, "ngram_counts": [0, 4, 10], "ngram_indexes": [8, 0, 1, 2, 3, 4, 5, 6, 7], "pool_int64s": pool}
    if weights:
        attrs["weights"] = [0.5 + i for i in range(9)]
    node = helper.make_node("TfIdfVectorizer", ["X"], ["Y"], **attrs)
    x = RNG.integers(1, 5, size=(3, 11)).astype(np.int32)
    _check(_model([node], [_vi("X", ["B", 11], TP.INT32)], 1, 9), [{"X": x}, {"X": x[:1]}], rtol=0, atol=0)


def test_flex_attention_with_score_mod_expands_through_its_schema_body() -> None:
    """FlexAttention has no direct lowering: expand-schema-functions hands its score_mod subgraph
    to onnx's body builder (a GRAPH attribute), which inlines it; GQA heads, a soft cap."""
    s_in = helper.make_tensor_value_info("s", TP.FLOAT, None)
    cap = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value_float=5.0), helper.make_node("Div", ["s", "c"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]), helper.make_node("Mul", ["t", "c"], ["o"])],
        "cap", [s_in], [helper.make_tensor_value_info("o", TP.FLOAT, None)],
        value_info=[helper.make_tensor_value_info("c", TP.FLOAT, []), helper.make_tensor_value_info("d", TP.FLOAT, None), helper.make_tensor_value_info("t", TP.FLOAT, None)],
    )
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", score_mod=cap)
    g = helper.make_graph([node], "g", [_vi("Q", [1, 4, 5, 8]), _vi("K", [1, 2, 7, 8]), _vi("V", [1, 2, 7, 8])], [_vi("Y", None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    _check(model, [{"Q": _f32(1, 4, 5, 8, scale=3.0), "K": _f32(1, 2, 7, 8), "V": _f32(1, 2, 7, 8)}])


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_modes_missing_values_aggregates(aggregate: int) -> None:
    """Two trees (one of them a single leaf), every comparison mode, NaN features with and
    without `missing_value_tracks_true`, the four aggregates; a dynamic batch."""
    # tree 0: nodes 0..4 (modes LEQ, LT, GTE, GT, EQ on features 0/1); node 5 NEQ; tree 1: node 6, a leaf.
    attrs = {
        "n_targets": 2, "aggregate_function": aggregate, "post_transform": 0, "tree_roots": [0, 6],
        "nodes_modes": nh.from_array(np.array([0, 1, 2, 3, 4, 5, 0], np.uint8), "m"),
        "nodes_splits": nh.from_array(np.array([0.5, -0.2, 0.1, 1.0, 0.0, 0.3, 0.0], np.float32), "s"),
        "nodes_featureids": [0, 1, 1, 0, 1, 0, 0],
        "nodes_truenodeids": [1, 3, 0, 1, 2, 4, 5], "nodes_trueleafs": [0, 1, 1, 1, 1, 1, 1],
        "nodes_falsenodeids": [2, 4, 5, 0, 3, 6, 5], "nodes_falseleafs": [0, 0, 0, 1, 1, 1, 1],
        "nodes_missing_value_tracks_true": [1, 0, 0, 1, 0, 0, 0],
        "leaf_targetids": [0, 1, 0, 1, 0, 1, 0], "leaf_weights": nh.from_array(np.array([1.5, -2.0, 3.0, 0.25, 7.0, -1.0, 0.5], np.float32), "w"),
    }
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    g = helper.make_graph([node], "g", [_vi("X", ["N", 2])], [_vi("Y", None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])
    x = _f32(9, 2)
    x[0, 0], x[1, 1], x[2] = np.nan, np.nan, [0.3, 0.0]
    _check(model, [{"X": x}, {"X": x[:2]}])


def _membership_forest(roots: list[int], order: list[int]) -> onnx.ModelProto:
    """onnx's set-membership test forest (node 0: x <= 11; nodes 1, 2: set membership), its nodes
    stored in `order` (order[k] is where the test's node k is stored), with trees at `roots`."""
    pos = {k: order.index(k) for k in range(3)}
    modes, t_ids, t_leaf = [0, 6, 6], [1, 0, 1], [0, 1, 1]
    f_ids, f_leaf = [2, 2, 3], [1, 0, 1]
    stored = sorted(range(3), key=lambda k: pos[k])
    member_sets = {1: [1.2, 3.7, 8.0, 9.0], 2: [12.0, 7.0]}
    members = [v for k in stored if modes[k] == 6 for v in member_sets[k] + [np.nan]]
    node_id = lambda k, leaf, i: i if leaf else pos[i]  # noqa: E731 - leaf ids index the leaves
    attrs = {
        "n_targets": 4, "aggregate_function": 1, "post_transform": 0, "tree_roots": [pos[r] for r in roots],
        "nodes_modes": nh.from_array(np.array([modes[k] for k in stored], np.uint8), "m"),
        "nodes_splits": nh.from_array(np.array([11.0 if k == 0 else 0.0 for k in stored], np.float32), "s"),
        "nodes_featureids": [0, 0, 0],
        "nodes_truenodeids": [node_id(k, t_leaf[k], t_ids[k]) for k in stored], "nodes_trueleafs": [t_leaf[k] for k in stored],
        "nodes_falsenodeids": [node_id(k, f_leaf[k], f_ids[k]) for k in stored], "nodes_falseleafs": [f_leaf[k] for k in stored],
        "membership_values": nh.from_array(np.array(members, np.float32), "mv"),
        "leaf_targetids": [0, 1, 2, 3], "leaf_weights": nh.from_array(np.array([1, 10, 1000, 100], np.float32), "w"),
    }
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    g = helper.make_graph([node], "g", [_vi("X", [6, 1])], [_vi("Y", None)])
    return helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])


_MEMBERSHIP_X = np.array([[1.2], [3.4], [-0.12], [np.nan], [12], [7]], np.float32)


def test_tree_ensemble_member_sets_follow_nodes_modes_order() -> None:
    """membership_values gives its sets to the BRANCH_MEMBER nodes in nodes_modes order (the
    schema; onnxruntime agrees). A second tree rooted at a member node of the first (fuzz seed
    405 case 18327) made the lowering hand that node the next set on its second visit: onnxc
    answered [0, 0, 0, 200] for x = 1.2 where onnxruntime answers [2, 0, 0, 0] (both trees end
    in leaf 0). onnx.reference refuses that model, so onnxruntime is the check here; the
    one-tree model is also checked against the reference."""
    ort = pytest.importorskip("onnxruntime")
    _check(_membership_forest([0], [0, 1, 2]), [{"X": _MEMBERSHIP_X}])
    model = _membership_forest([0, 1], [0, 1, 2])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": _MEMBERSHIP_X})[0]
    got = onnxc.backend.prepare(model, "CPU").run([_MEMBERSHIP_X])[0]
    np.testing.assert_allclose(got, want)
    assert got[0].tolist() == [2, 0, 0, 0]


def test_tree_ensemble_member_sets_refused_where_schema_and_reference_differ() -> None:
    """Member nodes stored in another order than the walk meets them: the schema gives the
    first-stored node the first set, onnx.reference the first-met one; onnxc refuses rather
    than answer by one of the two readings. Stored in walk order, the same forest runs."""
    _check(_membership_forest([0], [0, 1, 2]), [{"X": _MEMBERSHIP_X}])
    with pytest.raises(OnnxcError, match="BRANCH_MEMBER nodes in another order"):
        onnxc.backend.prepare(_membership_forest([0], [0, 2, 1]), "CPU")


@pytest.mark.parametrize(("feats", "x_dims", "message"), [
    ([-1, 0, 0], [3, 2], "nodes_featureids must not be negative"),
    ([0, 2, 0], [3, 2], "reads column 2 of an X with 2 columns"),
])
def test_tree_ensemble_feature_ids_must_index_x(feats: list[int], x_dims: list[int], message: str) -> None:
    """A feature id indexes X's columns: -1 read the element before each row (onnx.reference
    reads the last column, numpy's negative index; fuzz seed 407 case 6446), and an id past a
    static column count read the next row. Both are refused, naming why."""
    model = _membership_forest([0], [0, 1, 2])
    node = model.graph.node[0]
    for a in node.attribute:
        if a.name == "nodes_featureids":
            del a.ints[:]
            a.ints.extend(feats)
    model.graph.input[0].CopyFrom(_vi("X", x_dims))
    with pytest.raises(OnnxcError, match=message):
        onnxc.backend.prepare(model, "CPU")


def test_tree_ensemble_feature_ids_checked_at_run_time() -> None:
    """With a run-time column count the largest feature id is checked when the model runs."""
    from onnxc.targets.cpu.runtime_checks import RuntimeCheckError

    model = _membership_forest([0], [0, 1, 2])
    for a in model.graph.node[0].attribute:
        if a.name == "nodes_featureids":
            del a.ints[:]
            a.ints.extend([0, 1, 0])
    model.graph.input[0].CopyFrom(_vi("X", ["N", "F"]))
    rep = onnxc.backend.prepare(model, "CPU")
    with pytest.raises(RuntimeCheckError, match="the trees read column 1 of an X with 1 columns"):
        rep.run([_MEMBERSHIP_X])
    x2 = np.concatenate([_MEMBERSHIP_X, _MEMBERSHIP_X[::-1]], axis=1)
    np.testing.assert_allclose(rep.run([x2])[0], ReferenceEvaluator(model).run(None, {"X": x2})[0])
