"""Ops whose output size depends on the data (transforms/lowering/data_dependent.py, and Compress
and TopK with a run-time k in indexing.py), compiled by onnxc and compared exactly with
`onnx.reference` (integer and selection outputs: no tolerance).

Covered: results of run-time size returned at the compiled function's boundary (including
empty ones), such results consumed by later ops inside the model (the detection
post-processing pattern: NonZero -> Transpose -> GatherND, NonMaxSuppression -> Gather), one
compiled model run on inputs giving different output sizes, and dynamic input shapes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnxc.compiler import compile as onnxc_compile

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _vi(name: str, dtype: int, shape: list[int | str | None] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto] | None = None, opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "data_dependent", inputs, outputs, inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(model)
    return model


def _check(model: onnx.ModelProto, *feed_sets: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Compile once, run every feed set, compare every output exactly with onnx.reference."""
    f = onnxc_compile(model)
    ref = ReferenceEvaluator(model)
    names = [i.name for i in model.graph.input]
    results = []
    for feeds in feed_sets:
        got = f(*feeds)
        want = ref.run(None, dict(zip(names, feeds)))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape, (g.shape, w.shape)
            assert g.dtype == w.dtype, (g.dtype, w.dtype)
            np.testing.assert_array_equal(g, w)
        results.append(got)
    return results


# --- NonZero ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype,np_dtype", [(F32, np.float32), (TensorProto.INT32, np.int32), (TensorProto.BOOL, np.bool_)], ids=["f32", "i32", "bool"]
)
def test_nonzero_sizes_vary_per_run(dtype: int, np_dtype: type) -> None:
    model = _model([helper.make_node("NonZero", ["x"], ["y"])], [_vi("x", dtype, [3, 4])], [_vi("y", I64, [2, None])])
    rng = np.random.default_rng(0)
    dense = (rng.random((3, 4)) > 0.5).astype(np_dtype)
    (a,), (b,), (c,) = _check(model, [dense], [np.zeros((3, 4), np_dtype)], [np.ones((3, 4), np_dtype)])
    assert a.shape[1] == int(np.count_nonzero(dense)) and b.shape == (2, 0) and c.shape == (2, 12)


def test_nonzero_dynamic_rank3_and_nan() -> None:
    model = _model([helper.make_node("NonZero", ["x"], ["y"])], [_vi("x", F32, ["a", 2, "b"])], [_vi("y", I64, [3, None])])
    x = np.array([[[0, np.nan, 0]], [[-0.0, 2, 0]]], np.float32).reshape(2, 1, 3).repeat(2, axis=1)
    _check(model, [x], [np.zeros((1, 2, 5), np.float32)])


def test_nonzero_feeds_later_ops() -> None:
    """x[NonZero(x > t)] through Transpose and GatherND, then a sum of the selected values: the
    dynamically sized intermediate is consumed inside the compiled function."""
    nodes = [
        helper.make_node("Greater", ["x", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx"], ["vals"]),
        helper.make_node("ReduceSum", ["vals"], ["s"], keepdims=0),
    ]
    model = _model(nodes, [_vi("x", F32, [4, 5]), _vi("t", F32, [])], [_vi("vals", F32, [None]), _vi("s", F32, [])])
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    _check(model, [x, np.array(0.5, np.float32)], [x, np.array(10.0, np.float32)])


# --- Compress and TopK (indexing.py) with run-time conditions and k ---------------------------------


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_runtime_condition(axis: int | None) -> None:
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("Compress", ["x", "c"], ["y"], **attrs)
    out_shape = [None] if axis is None else [None, None]
    model = _model([node], [_vi("x", F32, [3, 4]), _vi("c", TensorProto.BOOL, [None])], [_vi("y", F32, out_shape)])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    n = 12 if axis is None else x.shape[axis]
    _check(model, [x, np.arange(n) % 2 == 0], [x, np.zeros(n, bool)], [x, np.array([False, True])])


def test_topk_runtime_k_feeds_gather() -> None:
    nodes = [
        helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1),
        helper.make_node("Gather", ["labels", "i"], ["picked"]),
    ]
    model = _model(nodes, [_vi("x", F32, [2, 6]), _vi("k", I64, [1]), _vi("labels", I64, [6])], [_vi("v", F32, [2, None]), _vi("picked", I64, [2, None])])
    x = np.random.default_rng(2).standard_normal((2, 6)).astype(np.float32)
    labels = np.arange(100, 106, dtype=np.int64)
    _check(model, [x, np.array([3]), labels], [x, np.array([0]), labels], [x, np.array([6]), labels])


# --- Unique ----------------------------------------------------------------------------------------

UNIQUE_OUTS = ["y", "indices", "inverse", "counts"]


def _unique_model(dtype: int, in_shape: list[int | str | None], y_shape: list[int | str | None], **attrs: object) -> onnx.ModelProto:
    node = helper.make_node("Unique", ["x"], UNIQUE_OUTS, **attrs)
    outs = [_vi("y", dtype, y_shape)] + [_vi(n, I64, [None]) for n in UNIQUE_OUTS[1:]]
    return _model([node], [_vi("x", dtype, in_shape)], outs)


def _unique_first_seen(x: np.ndarray, axis: int | None) -> list[np.ndarray]:
    """Unique with sorted=0 from numpy's sorted np.unique, reordered by first occurrence.
    (onnx.reference's own reordering takes along axis 0 whatever the axis, and indexes an
    unflattened input by flat indices: wrong for axis != 0 and for inputs of rank > 1.)"""
    y, idx, inv, cnt = np.unique(x, True, True, True, axis=axis)
    order = np.argsort(idx)
    where = np.empty_like(order)
    where[order] = np.arange(len(order))
    src = x.reshape(-1) if axis is None else x
    return [np.take(src, idx[order], axis=0 if axis is None else axis), idx[order].astype(np.int64), where[inv.reshape(-1)].astype(np.int64), cnt[order].astype(np.int64)]


@pytest.mark.parametrize("sorted_", [1, 0])
def test_unique_flattened(sorted_: int) -> None:
    model = _unique_model(TensorProto.INT32, ["n"], [None], sorted=sorted_)
    _check(model, [np.array([3, 1, 3, -2, 1, 7, 3], np.int32)], [np.array([5], np.int32)], [np.zeros(6, np.int32)])
    x = np.array([[2.5, -1, 2.5], [0, -1, 9]], np.float32)
    model = _unique_model(F32, [2, 3], [None], sorted=sorted_)
    if sorted_:
        _check(model, [x])
    else:
        for g, w in zip(onnxc_compile(model)(x), _unique_first_seen(x, None)):
            np.testing.assert_array_equal(g, w)


BASE_3D = np.array([[[1, 2], [3, 4], [1, 2]], [[0, 0], [1, 1], [0, 0]], [[1, 2], [3, 4], [1, 2]], [[5, 5], [5, 5], [5, 5]]], np.float32)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unique_along_axis(axis: int) -> None:
    _check(_unique_model(F32, [4, 3, 2], [None, None, None], axis=axis, sorted=1), [BASE_3D])
    got = onnxc_compile(_unique_model(F32, [4, 3, 2], [None, None, None], axis=axis, sorted=0))(BASE_3D)
    for g, w in zip(got, _unique_first_seen(BASE_3D, axis)):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


# --- NonMaxSuppression -------------------------------------------------------------------------------


def _nms_model(n_inputs: int, center: int = 0) -> onnx.ModelProto:
    names = ["boxes", "scores", "max_out", "iou", "score_thr"][:n_inputs]
    node = helper.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)
    types = [_vi("boxes", F32, ["b", "n", 4]), _vi("scores", F32, ["b", "c", "n"]), _vi("max_out", I64, [1]), _vi("iou", F32, [1]), _vi("score_thr", F32, [1])]
    return _model([node], types[:n_inputs], [_vi("sel", I64, [None, 3])])


def _random_boxes(rng: np.random.Generator, b: int, n: int, center: bool) -> np.ndarray:
    xy = rng.uniform(0, 10, (b, n, 2))
    wh = rng.uniform(0.5, 4, (b, n, 2))
    if center:
        return np.concatenate([xy, wh], axis=2).astype(np.float32)
    # corner format [y1, x1, y2, x2], some boxes with flipped corners
    y1x1, y2x2 = xy, xy + wh
    flip = rng.random((b, n, 1)) < 0.3
    return np.where(flip, np.concatenate([y2x2, y1x1], 2), np.concatenate([y1x1, y2x2], 2)).astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
def test_nms_random_boxes(center: int) -> None:
    rng = np.random.default_rng(3)
    model = _nms_model(5, center)
    feeds = []
    for b, c, n in ((1, 1, 6), (2, 3, 20), (1, 2, 1)):
        boxes = _random_boxes(rng, b, n, bool(center))
        scores = rng.random((b, c, n)).astype(np.float32)
        scores[..., ::4] = 0.5  # ties: the lower box index goes first
        for max_out, iou, thr in ((3, 0.3, 0.2), (100, 0.0, 0.0), (0, 0.5, 0.0), (5, 0.7, 0.9)):
            feeds.append([boxes, scores, np.array([max_out]), np.array([iou], np.float32), np.array([thr], np.float32)])
    results = _check(model, *feeds)
    assert len({r[0].shape[0] for r in results}) > 3  # the output size really varies


def test_nms_optional_inputs() -> None:
    """Trailing inputs omitted (onnx.reference fails on these: onnxruntime is the oracle)."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(4)
    boxes = _random_boxes(rng, 1, 8, False)
    scores = rng.random((1, 2, 8)).astype(np.float32)
    for n, extra in ((2, []), (3, [np.array([4])]), (4, [np.array([4]), np.array([0.2], np.float32)])):
        model = _nms_model(n)
        feeds = [boxes, scores, *extra]
        (got,) = onnxc_compile(model)(*feeds)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (want,) = sess.run(None, dict(zip([i.name for i in model.graph.input], feeds)))
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        assert n == 2 or got.shape[0] > 0  # without max_output_boxes_per_class nothing is selected


def test_nms_selection_feeds_gather() -> None:
    """Detection post-processing: the selected box indices (column 2) gather the boxes."""
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou"], ["sel"]),
        helper.make_node("Gather", ["sel", "two"], ["box_idx"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["boxes2d"]),
        helper.make_node("Gather", ["boxes2d", "box_idx"], ["kept"], axis=0),
    ]
    inits = [helper.make_tensor("two", I64, [], [2]), helper.make_tensor("zero", I64, [1], [0])]
    model = _model(
        nodes,
        [_vi("boxes", F32, [1, 10, 4]), _vi("scores", F32, [1, 1, 10]), _vi("max_out", I64, [1]), _vi("iou", F32, [1])],
        [_vi("kept", F32, [None, 4])],
        inits,
    )
    rng = np.random.default_rng(5)
    boxes = _random_boxes(rng, 1, 10, False)
    scores = rng.random((1, 1, 10)).astype(np.float32)
    _check(model, [boxes, scores, np.array([10]), np.array([0.1], np.float32)], [boxes, scores, np.array([2]), np.array([0.9], np.float32)])


def test_unique_nan_is_one_value_sorted_last() -> None:
    """np.unique's conventions: NaNs count as one value, sorted after every number."""
    model = _unique_model(F32, [7], [None], sorted=1)
    x = np.array([2.0, np.nan, -1.0, np.nan, 2.0, np.inf, 0.0], np.float32)
    got = onnxc_compile(model)(x)
    want = np.unique(x, True, True, True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_nms_refuses_inconsistent_shapes() -> None:
    from onnxc.errors import OnnxcError

    node = helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"])
    for boxes_shape, scores_shape in (([1, 5, 4], [1, 2, 6]), ([1, 5, "c"], [1, 2, 5]), ([2, 5, 4], [1, 2, 5])):
        model = _model([node], [_vi("boxes", F32, boxes_shape), _vi("scores", F32, scores_shape)], [_vi("sel", I64, [None, 3])])
        with pytest.raises(OnnxcError, match="NonMaxSuppression"):
            onnxc_compile(model)


def test_empty_inputs_give_empty_outputs() -> None:
    """Zero-size inputs: every phase runs zero times and the results have size 0."""
    nz = _model([helper.make_node("NonZero", ["x"], ["y"])], [_vi("x", F32, ["n", 3])], [_vi("y", I64, [2, None])])
    _check(nz, [np.zeros((0, 3), np.float32)])
    _check(_unique_model(F32, ["n"], [None]), [np.zeros(0, np.float32)])
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=0)
    comp = _model([node], [_vi("x", F32, ["n", 2]), _vi("c", TensorProto.BOOL, ["m"])], [_vi("y", F32, [None, 2])])
    _check(comp, [np.zeros((0, 2), np.float32), np.zeros(0, bool)], [np.ones((3, 2), np.float32), np.zeros(0, bool)])


def test_nms_constant_maximum_bounds_the_rows() -> None:
    """A constant max_output_boxes_per_class (as exporters write it) sizes the row bound:
    batches * classes * min(max, boxes) rows, here every one of them filled."""
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou"], ["sel"])
    inits = [helper.make_tensor("max_out", I64, [1], [2]), helper.make_tensor("iou", F32, [1], [0.5])]
    model = _model([node], [_vi("boxes", F32, [2, 6, 4]), _vi("scores", F32, [2, 3, 6])], [_vi("sel", I64, [None, 3])], inits)
    rng = np.random.default_rng(8)
    boxes = _random_boxes(rng, 2, 6, False) * np.float32(5)  # spread out: little overlap
    (sel,) = _check(model, [boxes, rng.random((2, 3, 6)).astype(np.float32)])[0]
    assert sel.shape == (12, 3)
