"""Models in the patterns real exporters produce, compiled by onnxc and compared with onnxruntime
(and `onnx.reference`): the conformance issue's regressions, one test per pattern.

Boolean constant tensors (attention masks). torch.onnx writes causal masks as bool initializers,
or computes them from constants (`Trilu` of ones, `Expand` of a scalar `True`) which constant
folding turns into bool constants. Above the importer's resource threshold (1 KiB) such a
constant is a `dense_resource` blob; the CPU target stores bool buffers as bytes and once failed
to retype those blobs, so a 64x64 mask stopped compilation with a raw MLIR verifier error
("'memref.global' op initial value element expected to be of type 'i8', but was of type 'i1'")
while an 8x8 one (dense elements) worked. Both sizes are checked for each way of making a mask,
alone under a `Where` and inside a masked-softmax attention block.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import models as M
from onnxc.compiler import compile as onnxc_compile

MASK_KINDS = ("initializer", "splat", "trilu", "expand_trilu")
NEG = np.float32(-1e9)


def _mask_nodes(kind: str, s: int, out: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Nodes and initializers producing a bool [s, s] causal (or all-true) mask named `out`."""
    if kind == "initializer":
        return [], [numpy_helper.from_array(np.tril(np.ones((s, s), dtype=bool)), out)]
    if kind == "splat":
        return [], [numpy_helper.from_array(np.ones((s, s), dtype=bool), out)]
    if kind == "trilu":
        ones = numpy_helper.from_array(np.ones((s, s), dtype=bool), "ones")
        return [helper.make_node("Trilu", ["ones"], [out], upper=0)], [ones]
    if kind == "expand_trilu":
        one = numpy_helper.from_array(np.array([[True]]), "one")
        shape = numpy_helper.from_array(np.array([s, s], dtype=np.int64), "mask_shape")
        return [
            helper.make_node("Expand", ["one", "mask_shape"], ["full"]),
            helper.make_node("Trilu", ["full"], [out], upper=0),
        ], [one, shape]
    raise AssertionError(kind)


def _where_model(kind: str, s: int) -> onnx.ModelProto:
    """y = Where(mask, x, -1e9) for x of shape [2, s, s]."""
    nodes, inits = _mask_nodes(kind, s, "mask")
    inits.append(numpy_helper.from_array(np.array(NEG), "neg"))
    nodes.append(helper.make_node("Where", ["mask", "x", "neg"], ["y"]))
    graph = helper.make_graph(
        nodes, "masked_where",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, s, s])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, s, s])],
        inits,
    )  # fmt: skip
    return M.make_model(graph, 17)


def _attention_model(kind: str, s: int, d: int = 16) -> onnx.ModelProto:
    """Single-head causal attention: softmax(Where(mask, q k^T / sqrt(d), -inf-ish)) v, with the
    Q/K/V projections of torch's exporters (MatMul by weights) and a bool mask constant."""
    rng = np.random.default_rng(7)
    nodes, inits = _mask_nodes(kind, s, "mask")
    for name in ("wq", "wk", "wv"):
        inits.append(numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), name))
    inits.append(numpy_helper.from_array(np.array(1.0 / np.sqrt(d), dtype=np.float32), "scale"))
    inits.append(numpy_helper.from_array(np.array(NEG), "neg"))
    nodes += [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        helper.make_node("Mul", ["qk", "scale"], ["scores"]),
        helper.make_node("Where", ["mask", "scores", "neg"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "causal_attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, s, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, s, d])],
        inits,
    )  # fmt: skip
    return M.make_model(graph, 17)


def _references(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs when it is installed, else onnx.reference's."""
    try:
        import onnxruntime as ort
    except ImportError:
        return ReferenceEvaluator(model).run(None, feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("size", [8, 64], ids=["dense", "resource"])
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_bool_constant_mask_where(kind: str, size: int) -> None:
    """A bool mask constant of either attribute kind selects exactly as the reference does."""
    model = _where_model(kind, size)
    x = np.random.default_rng(0).standard_normal((2, size, size)).astype(np.float32)
    (got,) = onnxc_compile(model)(x)
    (want,) = _references(model, {"x": x})
    np.testing.assert_array_equal(got, want)
    # Not vacuous: the causal masks really mask something.
    if kind != "splat":
        assert (got == NEG).sum() == 2 * size * (size - 1) // 2


@pytest.mark.parametrize("kind", ["initializer", "expand_trilu"])
def test_bool_constant_mask_attention(kind: str) -> None:
    """Causal attention with a 64x64 bool mask constant (a `dense_resource` blob) matches."""
    model = _attention_model(kind, 64)
    x = np.random.default_rng(1).standard_normal((2, 64, 16)).astype(np.float32)
    (got,) = onnxc_compile(model)(x)
    (want,) = _references(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # Row 0 attends to position 0 only: its output is v[0], independent of later positions.
    x2 = x.copy()
    x2[:, 1:, :] += 1.0
    (got2,) = onnxc_compile(model)(x2)
    np.testing.assert_allclose(got2[:, 0], got[:, 0], rtol=1e-5, atol=1e-6)


# --- masks whose size follows a dynamic sequence length ---------------------------------------------

MAX_POSITIONS = 128  # the classic exporter's causal buffer ([1, 1, max, max] bool, 16 KiB: a blob)


def _i64(name: str, value: list[int] | int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=np.int64), name)


def _dynamic_mask_nodes(kind: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str, bool]:
    """(nodes, initializers, mask name, whether the mask marks the masked positions) for a
    causal mask over x's dim 2 (the sequence), in three exporter patterns:
    - "sliced_buffer": GPT-2 as torch's classic exporter writes it, a bool buffer sliced to
      [:, :, :seq, :seq] with the sequence length from Shape;
    - "constant_of_shape_trilu": ConstantOfShape(True) of [seq, seq] then Trilu;
    - "range_compare": Range(seq) compared with itself transposed (dynamo's pattern), true
      where the key is in the future."""
    seq = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Slice", ["shape", "i2", "i3"], ["seq1"])]
    inits = [_i64("i0", [0]), _i64("i1", [1]), _i64("i2", [2]), _i64("i3", [3])]
    if kind == "sliced_buffer":
        buf = np.tril(np.ones((MAX_POSITIONS, MAX_POSITIONS), dtype=bool)).reshape(1, 1, MAX_POSITIONS, MAX_POSITIONS)
        inits.append(numpy_helper.from_array(buf, "bias"))
        nodes = [
            helper.make_node("Slice", ["bias", "i0", "seq1", "i2", "i1"], ["rows"]),
            helper.make_node("Slice", ["rows", "i0", "seq1", "i3", "i1"], ["mask"]),
        ]
        return seq + nodes, inits, "mask", False
    if kind == "constant_of_shape_trilu":
        nodes = [
            helper.make_node("Concat", ["seq1", "seq1"], ["square"], axis=0),
            helper.make_node("ConstantOfShape", ["square"], ["ones"], value=helper.make_tensor("v", TensorProto.BOOL, [1], [True])),
            helper.make_node("Trilu", ["ones"], ["mask"], upper=0),
        ]
        return seq + nodes, inits, "mask", False
    if kind == "range_compare":
        inits += [_i64("zero", 0), _i64("one", 1)]
        nodes = [
            helper.make_node("Squeeze", ["seq1", "i0"], ["n"]),
            helper.make_node("Range", ["zero", "n", "one"], ["pos"]),
            helper.make_node("Unsqueeze", ["pos", "i1"], ["col"]),
            helper.make_node("Unsqueeze", ["pos", "i0"], ["row"]),
            helper.make_node("Greater", ["row", "col"], ["future"]),
        ]
        return seq + nodes, inits, "future", True
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["sliced_buffer", "constant_of_shape_trilu", "range_compare"])
def test_dynamic_causal_mask(kind: str) -> None:
    """softmax(masked x x^T) with dynamic batch and sequence axes, compiled once and run at two
    sequence lengths."""
    nodes, inits, mask, marks_future = _dynamic_mask_nodes(kind)
    inits.append(numpy_helper.from_array(np.array(np.finfo(np.float32).min, dtype=np.float32), "neg"))
    where = ["mask_in", "neg", "scores"] if marks_future else ["mask_in", "scores", "neg"]
    where[0] = mask
    nodes += [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["x", "xt"], ["scores"]),
        helper.make_node("Where", where, ["masked"]),
        helper.make_node("Softmax", ["masked"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "dynamic_causal",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, "seq", "seq"])],
        inits,
    )  # fmt: skip
    model = M.make_model(graph, 17)
    compiled = onnxc_compile(model)
    rng = np.random.default_rng(2)
    for batch, seq in ((1, 5), (2, 17)):
        x = rng.standard_normal((batch, 2, seq, 8)).astype(np.float32)
        (got,) = compiled(x)
        (want,) = _references(model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        assert np.all(np.triu(got[0, 0], 1) == 0)  # causal: nothing attends to the future


# --- detection post-processing -----------------------------------------------------------------------


def _detection_postprocess_model() -> onnx.ModelProto:
    """The post-processing torchvision-style detectors export: per-box best class score
    (ReduceMax/ArgMax), a score threshold through NonZero + Gather, a run-time top-k of the
    survivors (TopK with k = min(k_max, count)), NonMaxSuppression over them, and Gather of the
    kept boxes, scores and labels. Every intermediate after NonZero has a data-dependent size."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)  # noqa: E731
    inits = [
        i64("ax0", [0]), i64("ax1", [1]), i64("k_max", [20]), i64("max_out", [8]), i64("col2", 2),
        numpy_helper.from_array(np.array(0.3, dtype=np.float32), "score_thr"),
        numpy_helper.from_array(np.array([0.45], dtype=np.float32), "iou"),
    ]  # fmt: skip
    nodes = [
        helper.make_node("ReduceMax", ["scores"], ["best"], axes=[1], keepdims=0),  # [N]
        helper.make_node("ArgMax", ["scores"], ["label"], axis=1, keepdims=0),  # [N]
        helper.make_node("Greater", ["best", "score_thr"], ["keep"]),
        helper.make_node("NonZero", ["keep"], ["nz"]),  # [1, M]
        helper.make_node("Squeeze", ["nz", "ax0"], ["cand"]),  # [M]
        helper.make_node("Gather", ["best", "cand"], ["cand_scores"]),
        helper.make_node("Shape", ["cand"], ["m"]),
        helper.make_node("Min", ["m", "k_max"], ["k"]),
        helper.make_node("TopK", ["cand_scores", "k"], ["top_scores", "top_pos"]),
        helper.make_node("Gather", ["cand", "top_pos"], ["top_idx"]),  # box ids
        helper.make_node("Gather", ["boxes", "top_idx"], ["top_boxes"]),  # [K, 4]
        helper.make_node("Unsqueeze", ["top_boxes", "ax0"], ["nms_boxes"]),  # [1, K, 4]
        helper.make_node("Unsqueeze", ["top_scores", "ax0"], ["s1"]),
        helper.make_node("Unsqueeze", ["s1", "ax0"], ["nms_scores"]),  # [1, 1, K]
        helper.make_node("NonMaxSuppression", ["nms_boxes", "nms_scores", "max_out", "iou"], ["sel"]),
        helper.make_node("Gather", ["sel", "col2"], ["kept_pos"], axis=1),
        helper.make_node("Gather", ["top_boxes", "kept_pos"], ["det_boxes"]),
        helper.make_node("Gather", ["top_scores", "kept_pos"], ["det_scores"]),
        helper.make_node("Gather", ["top_idx", "kept_pos"], ["det_idx"]),
        helper.make_node("Gather", ["label", "det_idx"], ["det_labels"]),
    ]
    graph = helper.make_graph(
        nodes, "detection_postprocess",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 5])],
        [helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, [None, 4]),
         helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, [None]),
         helper.make_tensor_value_info("det_labels", TensorProto.INT64, [None])],
        inits,
    )  # fmt: skip
    return M.make_model(graph, 17)


def test_detection_postprocess() -> None:
    """Compiled once, run on box sets giving different numbers of survivors at every stage
    (including none), compared exactly with the reference."""
    model = _detection_postprocess_model()
    compiled = onnxc_compile(model)
    rng = np.random.default_rng(6)
    sizes = []
    for n, scale in ((50, 1.0), (5, 1.0), (30, 0.2)):
        xy = rng.uniform(0, 40, (n, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(4, 16, (n, 2))], axis=1).astype(np.float32)
        scores = (rng.random((n, 5)) * scale).astype(np.float32)
        got = compiled(boxes, scores)
        want = _references(model, {"boxes": boxes, "scores": scores})
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
        sizes.append(got[0].shape[0])
    assert sizes[0] > 0 and sizes[-1] == 0
