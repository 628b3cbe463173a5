"""A slice of the ONNX node suite with every input dim symbolic, against the same models with static
dims (issue 11, item 2: dynamic dims are correct by construction).

Each case is a node-test model (built in memory by onnx) whose graph inputs get `dim_param`s for
every dim, with the output shapes and value_info cleared: the compile fuzzer's `symbolic` mutation
(`onnxc.tools.fuzz_compile.mutate`). The symbolic model is run on the node test's own inputs and
must give what the static model gives (onnxc), and what `onnx.reference` gives. Where onnxc
refuses the static model, the symbolic one must be refused too (or be right): never a wrong answer.

The slice is one node test per op type, every `STRIDE`-th op type in name order, and the `EXTRA`
cases that once failed (about fifty cases, under a minute on two cores); `ONNXC_SYMBOLIC_ALL=1` runs every node test. Expected
failures are listed in `XFAILS` with their reasons (strict: one that starts passing fails).
"""

from __future__ import annotations

import os
import random
import warnings

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.errors import OnnxcError
from onnxc.tools import fuzz_compile as fz

STRIDE = 4

_LEN = "refused: the length of a 1-D shape-like input (axes, starts, values) is made symbolic too, and the lowering needs it static"
#: node test -> why its symbolic variant is refused where the static one compiles (a clean
#: diagnostic each; none is a wrong answer).
XFAILS: dict[str, str] = {
    "test_basic_conv_with_padding": "refused: Conv needs static input channels per group (W's dim 1)",
    "test_onehot_negative_indices": "refused: OneHot's values must have a static length of 2",
    "test_reduce_l1_default_axes_keepdims_example": _LEN,
    "test_reduce_max_bool_inputs": _LEN,
    "test_reduce_sum_default_axes_keepdims_example": _LEN,
    "test_resize_downsample_scales_cubic": "refused: Resize is not lowered with dynamic input dims",
    "test_slice": _LEN,
    "test_squeeze": _LEN,
    "test_unsqueeze_axis_0": _LEN,
    "test_basic_deform_conv_with_padding": "refused: DeformConv needs W of static dims",
    "test_stft": "refused: STFT needs the signal's last dim (1 or 2) static",
}


def _slice() -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bases = fz.base_cases()
    if os.environ.get("ONNXC_SYMBOLIC_ALL"):
        return [name for name, _, _ in bases]
    first: dict[str, str] = {}
    for name, model, _ in bases:
        first.setdefault(model.graph.node[0].op_type if len(model.graph.node) else "", name)
    return [first[op] for op in sorted(first)][::STRIDE] + [n for n in EXTRA if n not in first.values()]


#: Cases that once gave wrong answers with symbolic dims (the compile fuzzer): always in the slice.
EXTRA = (
    "test_attention_4d_with_qk_matmul_softmax",  # onnx inferred qk_matmul_output's last dim as 0
    "test_attention_3d_with_past_and_present_qk_matmul_softmax",
    "test_attention_4d_attn_mask_4d_causal",  # the (2,1,4,4) mask broadcast over heads
    "test_matmul_4d",
)


_BASES: dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]] = {}


def _base(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    if not _BASES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _BASES.update({n: (m, f) for n, m, f in fz.base_cases()})
    return _BASES[name]


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | OnnxcError:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return onnxc.compile(model, cache_dir=False).run(feeds)
    except OnnxcError as exc:
        return exc


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=XFAILS[n])) if n in XFAILS else n for n in _slice()])
def test_symbolic_dims_match_static(name: str) -> None:
    model, feeds = _base(name)
    symbolic, feeds2, _ = fz.mutate(random.Random(0), model, feeds, "symbolic")  # type: ignore[misc]
    static = _run(model, feeds)
    dynamic = _run(symbolic, feeds2)
    if isinstance(dynamic, OnnxcError):
        assert isinstance(static, OnnxcError), f"refused with symbolic dims only: {str(dynamic).splitlines()[:3]}"
        return
    outputs = [vi.name for vi in model.graph.output]
    if not isinstance(static, OnnxcError):
        for o in outputs:
            assert dynamic[o].shape == static[o].shape, (o, dynamic[o].shape, static[o].shape)
            assert fz._same(dynamic[o], static[o]), o
    try:
        want = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - the reference refuses the model: the static result decides
        return
    bad = fz._first_difference(model, dynamic, want)
    if bad is not None:
        second = fz.second_opinion(model, feeds)
        assert second is not None and fz._first_difference(model, dynamic, second[1]) is None, bad


def _shared_dynamic_destination_model(matmuls: int) -> onnx.ModelProto:
    """The smallest piece of the Whisper encoder's wrong answer with dynamic axes: two head splits
    (Reshape to [batch, seq, 4, 4] by one run-time shape, Transpose) far apart in one function.
    Their destinations are the same dynamic ``tensor.empty`` after CSE; ``matmuls`` MatMuls between
    them make the CPU target outline the function into parts (more than 64 region ops)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([4, 4], np.int64), "heads")]
    nodes = [
        helper.make_node("Shape", ["x"], ["batch_seq"], start=0, end=2),
        helper.make_node("Concat", ["batch_seq", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["xq"]),
        helper.make_node("Transpose", ["xq"], ["q"], perm=[0, 2, 1, 3]),
    ]
    y = "x"
    for i in range(matmuls):
        inits.append(numpy_helper.from_array((rng.standard_normal((16, 16)) / 4).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [y, f"w{i}"], [f"m{i}"]))
        y = f"m{i}"
    nodes += [helper.make_node("Reshape", [y, "target"], ["yk"]), helper.make_node("Transpose", ["yk"], ["k"], perm=[0, 2, 1, 3])]
    graph = helper.make_graph(
        nodes,
        "shared_dynamic_destination",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])],
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, None), helper.make_tensor_value_info("k", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shared_dynamic_destination_across_outlined_parts() -> None:
    """q must not be overwritten by k: checked against onnx.reference for two batch/seq sizes."""
    model = _shared_dynamic_destination_model(70)
    compiled = onnxc.compile(model, cache_dir=False)
    ref = ReferenceEvaluator(model)
    for batch, seq in ((2, 3), (1, 5)):
        x = np.random.default_rng(batch).standard_normal((batch, seq, 16), dtype=np.float32)
        got = compiled.run({"x": x})
        for name, want in zip(("q", "k"), ref.run(None, {"x": x})):
            np.testing.assert_allclose(got[name], want, rtol=1e-3, atol=1e-5, err_msg=name)
