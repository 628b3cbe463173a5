"""Tests of the ONNX-level passes: onnx-upgrade-ops, onnx-shape-inference, onnx-constant-fold and
onnx-canonicalize.

Numerics are checked end to end against `onnx.reference.ReferenceEvaluator`: a model is built
with onnx.helper, imported, transformed, exported again, and both models are run on the same
random inputs (where the reference has no implementation of an old opset's semantics, the
expected values are computed with numpy from the spec's definition).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

from onnxc.dialect import onnx_context, verify_onnx
from onnxc.dialect.optable import OPS
from onnxc.importers.exporter import export_model
from onnxc.importers.onnx_importer import import_model
from onnxc.transforms import onnx_utils as U
from onnxc.transforms.onnx_canonicalize import OnnxCanonicalizePass
from onnxc.transforms.onnx_constant_fold import Folder, OnnxConstantFoldPass
from onnxc.transforms.onnx_shape_inference import OnnxShapeInferencePass, infer_shapes
from onnxc.transforms.onnx_upgrade_ops import _ADAPTERS, _DROPPABLE, OnnxUpgradeOpsPass, Upgrader, is_newest, next_version
from onnxc.transforms.pass_base import PassFailure
from onnxc.transforms.registry import get_pass_class

RNG = np.random.default_rng(0)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           opset: int, inits: list[onnx.TensorProto] | None = None) -> onnx.ModelProto:  # fmt: skip
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, shape: list | None, elem: int = TP.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _onnx_ops(module: ir.Module) -> list[ir.Operation]:
    return U.collect_ops(module.operation, U.is_onnx_op)


def _check(model: onnx.ModelProto, module: ir.Module, feeds: dict[str, np.ndarray], expected: list[np.ndarray] | None = None) -> None:
    """The module passes the ONNX verifier and, exported, computes what the model (or `expected`)
    says. (The Python verifier, not `operation.verify()`: IRDL in LLVM 22 requires all values of a
    variadic operand or result to have one type, which Split/Concat with different sizes break
    already on import; see the dialect's open problem.)"""
    assert verify_onnx(module.operation) == []
    got = ReferenceEvaluator(export_model(module)).run(None, feeds)
    if expected is None:
        expected = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


# --- onnx-upgrade-ops ---------------------------------------------------------------------------------

X = RNG.standard_normal((2, 3, 4)).astype(np.float32)


def _softmax2d(x: np.ndarray, axis: int) -> np.ndarray:
    """Softmax-1/11: coerce to 2-D at `axis`, normalize the rows."""
    flat = x.reshape(int(np.prod(x.shape[:axis])), -1)
    e = np.exp(flat - flat.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).reshape(x.shape)


_A4 = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
_B1 = RNG.standard_normal((3,)).astype(np.float32)
_BN = [RNG.random(3).astype(np.float32) + d for d in (0.0, 0.0, 0.0, 0.5)]
_XB = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
_BN_EXPECTED = (_XB - _BN[2][None, :, None, None]) / np.sqrt(_BN[3][None, :, None, None] + 1e-5) * _BN[0][None, :, None, None] + _BN[1][None, :, None, None]
_BN_INPUTS = [_vi("x", [2, 3, 4, 4])] + [_vi(n, [3]) for n in "sbmv"]
_BN_FEEDS = {"x": _XB, **dict(zip("sbmv", _BN))}

def _bilinear_asymmetric(x: np.ndarray, sh: int, sw: int) -> np.ndarray:
    """Upsample-7/9 and Resize-10 `linear` (asymmetric coordinates, edge clamped), from the spec."""
    _, _, h, w = x.shape
    ys = np.minimum(np.arange(h * sh) / sh, h - 1)
    xs = np.minimum(np.arange(w * sw) / sw, w - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    wy, wx = (ys - y0)[:, None], (xs - x0)[None, :]
    at = lambda yi, xi: x[:, :, yi][:, :, :, xi]  # noqa: E731
    return ((1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) + wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1))).astype(np.float32)


_X4 = RNG.standard_normal((2, 4, 3, 3)).astype(np.float32)
_GN = [helper.make_tensor("s", TP.FLOAT, [2], [0.5, -1.5]), helper.make_tensor("b", TP.FLOAT, [2], [0.25, 2.0])]
_SCALES = [helper.make_tensor("s", TP.FLOAT, [4], [1, 1, 2, 2])]

UPGRADE_CASES = {
    "groupnorm_per_group_18": (_model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)], [_vi("x", [2, 4, 3, 3])], [_vi("y", [2, 4, 3, 3])], 18, _GN),
                               {"x": _X4}, None),  # fmt: skip
    "upsample_linear_9": (_model([helper.make_node("Upsample", ["x", "s"], ["y"], mode="linear")], [_vi("x", [2, 4, 3, 3])], [_vi("y", [2, 4, 6, 6])], 9, _SCALES),
                          {"x": _X4}, [_bilinear_asymmetric(_X4, 2, 2)]),  # fmt: skip
    "upsample_attr_7": (_model([helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=[1.0, 1.0, 2.0, 3.0])], [_vi("x", [2, 4, 3, 3])], [_vi("y", [2, 4, 6, 9])], 7),
                        {"x": _X4}, [_X4.repeat(2, axis=2).repeat(3, axis=3)]),  # fmt: skip
    "resize_linear_10": (_model([helper.make_node("Resize", ["x", "s"], ["y"], mode="linear")], [_vi("x", [2, 4, 3, 3])], [_vi("y", [2, 4, 6, 6])], 10, _SCALES),
                         {"x": _X4}, [_bilinear_asymmetric(_X4, 2, 2)]),  # fmt: skip
    "selu_old_defaults_1": (_model([helper.make_node("Selu", ["x"], ["y"])], [_vi("x", [2, 4, 3, 3])], [_vi("y", [2, 4, 3, 3])], 1),
                            {"x": _X4}, [np.where(_X4 > 0, 1.0507 * _X4, 1.0507 * 1.6732 * (np.exp(_X4) - 1)).astype(np.float32)]),  # fmt: skip
    "concat_default_axis_1": (_model([helper.make_node("Concat", ["x", "x"], ["y"])], [_vi("x", [2, 4, 3, 3])], [_vi("y", [2, 8, 3, 3])], 1),
                              {"x": _X4}, [np.concatenate([_X4, _X4], 1)]),  # fmt: skip
    "dropout_float_mask_6": (_model([helper.make_node("Dropout", ["x"], ["y", "m"], is_test=1)], [_vi("x", [2, 4, 3, 3])], [_vi("y", [2, 4, 3, 3]), _vi("m", [2, 4, 3, 3])], 6),
                             {"x": _X4}, [_X4, np.ones_like(_X4)]),  # fmt: skip
    "reduce_sum_axes_11": (_model([helper.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)], [_vi("x", [2, 3, 4])], [_vi("y", [2, 4])], 11), {"x": X}, None),
    "reduce_mean_axes_13": (_model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[0, 2])], [_vi("x", [2, 3, 4])], [_vi("y", [1, 3, 1])], 13), {"x": X}, None),
    "softmax_middle_axis_11": (_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], 11), {"x": X}, [_softmax2d(X, 1)]),
    "softmax_default_axis_1": (_model([helper.make_node("Softmax", ["x"], ["y"])], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], 1), {"x": X}, [_softmax2d(X, 1)]),
    "logsoftmax_last_axis_11": (_model([helper.make_node("LogSoftmax", ["x"], ["y"], axis=2)], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], 11), {"x": X}, [np.log(_softmax2d(X, 2))]),
    "hardmax_11": (_model([helper.make_node("Hardmax", ["x"], ["y"], axis=1)], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], 11), {"x": X},
                   [np.eye(12, dtype=np.float32)[X.reshape(2, 12).argmax(1)].reshape(2, 3, 4)]),  # fmt: skip
    "slice_attrs_9": (_model([helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[3], axes=[2])], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 2])], 9), {"x": X}, None),
    "pad_attrs_10": (_model([helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 0, 1, 0], value=2.5)], [_vi("x", [2, 3, 4])], [_vi("y", [2, 5, 4])], 10), {"x": X}, None),
    "clip_attrs_10": (_model([helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.5)], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], 10), {"x": X}, None),
    "split_attr_11": (_model([helper.make_node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3])], [_vi("x", [2, 3, 4])], [_vi("a", [2, 3, 1]), _vi("b", [2, 3, 3])], 11), {"x": X}, None),
    "split_even_11": (_model([helper.make_node("Split", ["x"], ["a", "b"], axis=2)], [_vi("x", [2, 3, 4])], [_vi("a", [2, 3, 2]), _vi("b", [2, 3, 2])], 11), {"x": X}, None),
    "squeeze_unsqueeze_11": (_model([helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]), helper.make_node("Squeeze", ["u"], ["y"], axes=[0])],
                                    [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], 11), {"x": X}, None),  # fmt: skip
    "topk_attr_9": (_model([helper.make_node("TopK", ["x"], ["v", "i"], k=2, axis=1)], [_vi("x", [2, 3, 4])], [_vi("v", [2, 2, 4]), _vi("i", [2, 2, 4], TP.INT64)], 9), {"x": X}, None),
    "reshape_attr_4": (_model([helper.make_node("Reshape", ["x"], ["y"], shape=[6, 4])], [_vi("x", [2, 3, 4])], [_vi("y", [6, 4])], 4), {"x": X}, [X.reshape(6, 4)]),
    "cast_6": (_model([helper.make_node("Cast", ["x"], ["y"], to=TP.INT32)], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4], TP.INT32)], 6), {"x": X}, None),
    "dropout_ratio_11": (_model([helper.make_node("Dropout", ["x"], ["y"], ratio=0.3)], [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], 11), {"x": X}, None),
    "upsample_to_resize_9": (_model([helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")], [_vi("x", [1, 2, 3, 3])], [_vi("y", [1, 2, 6, 6])], 9,
                                    [helper.make_tensor("s", TP.FLOAT, [4], [1, 1, 2, 2])]), {"x": X.reshape(1, 2, 3, 4)[..., :3]}, None),  # fmt: skip
    "add_legacy_broadcast_axis_6": (_model([helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)], [_vi("a", [2, 3, 4, 5]), _vi("b", [3])], [_vi("y", [2, 3, 4, 5])], 6),
                                    {"a": _A4, "b": _B1}, [_A4 + _B1[None, :, None, None]]),  # fmt: skip
    "mul_legacy_broadcast_suffix_5": (_model([helper.make_node("Mul", ["a", "b"], ["y"], broadcast=1)], [_vi("a", [2, 3, 4, 5]), _vi("b", [4, 5])], [_vi("y", [2, 3, 4, 5])], 5),
                                      {"a": _A4, "b": _A4[0, 0]}, [_A4 * _A4[0, 0]]),  # fmt: skip
    "gemm_broadcast_6": (_model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], broadcast=1)], [_vi("a", [3, 4]), _vi("b", [4, 5]), _vi("c", [5])], [_vi("y", [3, 5])], 6),
                         {"a": _A4[0, 0, :3, :4].copy(), "b": _A4[0, 0].copy(), "c": _A4[1, 1, 1].copy()}, [_A4[0, 0, :3, :4] @ _A4[0, 0] + _A4[1, 1, 1]]),  # fmt: skip
    "batchnorm_7": (_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-5)], _BN_INPUTS, [_vi("y", [2, 3, 4, 4])], 7),
                    _BN_FEEDS, [_BN_EXPECTED]),  # fmt: skip
    "batchnorm_is_test_5": (_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-5, is_test=1, consumed_inputs=[0, 0, 0, 1, 1])],
                                   _BN_INPUTS, [_vi("y", [2, 3, 4, 4])], 5), _BN_FEEDS, [_BN_EXPECTED]),  # fmt: skip
}


@pytest.mark.parametrize("case", sorted(UPGRADE_CASES))
def test_upgrade_numerics(case: str) -> None:
    """Old-opset model -> import -> onnx-upgrade-ops -> export computes what the original does, and
    every op ends at its newest version."""
    model, feeds, expected = UPGRADE_CASES[case]
    module = import_model(model)
    with module.context:
        upgrader = Upgrader()
        upgrader.run(module.operation)
    assert upgrader.failures == []
    assert upgrader.upgraded >= 1
    for op in _onnx_ops(module):
        info = U.info_of(op)
        assert info is None or is_newest(info), op.name
    exported = export_model(module)
    assert exported.opset_import[0].version > model.opset_import[0].version
    assert exported.ir_version >= onnx.helper.find_min_ir_version_for(list(exported.opset_import), ignore_unknown=True)
    _check(model, module, feeds, expected)


def test_upgrade_every_transition_has_a_rule() -> None:
    """Every step between two dialect versions of an operator is either an adapter or a generic
    rename that the signatures allow (attributes dropped only when meaningless, inputs only
    appended)."""
    transitions = 0
    for info in OPS:
        dst = next_version(info)
        if dst is None:
            continue
        transitions += 1
        if (dst.op_type, dst.since_versions[0]) in _ADAPTERS:
            continue
        dropped = [a.name for a in info.attributes if dst.attr(a.name) is None and a.name not in _DROPPABLE]
        assert not dropped, f"{info.name} -> {dst.name} drops {dropped} without an adapter"
        kinds = [a.name for a in info.attributes if dst.attr(a.name) is not None and a.default is not None and dst.attr(a.name).kind != a.kind]
        assert not kinds, f"{info.name} -> {dst.name} changes the kind of {kinds} without an adapter"
        variadic = bool(dst.inputs) and dst.inputs[-1].option == "variadic"
        assert variadic or len(info.inputs) <= len(dst.inputs), f"{info.name} -> {dst.name} loses inputs"
    assert transitions > 380


def _erf_int_module() -> ir.Module:
    ctx = onnx_context()
    with ctx:
        return ir.Module.parse(
            'func.func @f(%x: tensor<4xi32>) -> tensor<4xi32> {\n'
            '  %0 = "onnx.erf_v9"(%x) : (tensor<4xi32>) -> tensor<4xi32>\n'
            "  return %0 : tensor<4xi32>\n}"
        )


def test_upgrade_unsupported_warns_or_fails() -> None:
    """An op the newest version cannot take (Erf on integers) stays, with a warning; strict fails."""
    module = _erf_int_module()
    with pytest.warns(UserWarning, match="Erf erf_v9 -> erf"):
        OnnxUpgradeOpsPass().run(module.operation)
    assert [op.name for op in _onnx_ops(module)] == ["onnx.erf_v9"]
    with pytest.raises(PassFailure, match="tensor\\(int32\\)"):
        OnnxUpgradeOpsPass(strict=True).run(_erf_int_module().operation)


def test_upgrade_keeps_opset_when_ops_are_left_behind() -> None:
    """The module's opset is raised only when every op of the domain reached its newest version."""
    # Erf-9 on int32 has no newer version that allows it; Relu (float: Relu-6 allows no int32) upgrades.
    model = _model(
        [helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Relu", ["f"], ["y"])],
        [_vi("x", [4], TP.INT32), _vi("f", [4], TP.FLOAT)],
        [_vi("e", [4], TP.INT32), _vi("y", [4], TP.FLOAT)],
        9,
    )
    module = import_model(model)
    with module.context, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        OnnxUpgradeOpsPass().run(module.operation)
    assert export_model(module).opset_import[0].version == 9


# --- onnx-shape-inference -------------------------------------------------------------------------------


def _attention_reshape_model() -> onnx.ModelProto:
    """A transformer-style head split with a dynamic batch and sequence: x[B,S,16] @ W -> reshape to
    [B, S, 2, 8] with the target computed from Shape(x), transpose, and flatten back with -1.
    value_info is stripped, so only the passes know the intermediate types."""
    c = lambda name, vals: helper.make_tensor(name, TP.INT64, [len(vals)], vals)  # noqa: E731
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["t"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax"], ["bu"]),
        helper.make_node("Unsqueeze", ["t", "ax"], ["tu"]),
        helper.make_node("Concat", ["bu", "tu", "heads", "dim"], ["shape4"], axis=0),
        helper.make_node("Reshape", ["h", "shape4"], ["r"]),
        helper.make_node("Transpose", ["r"], ["rt"], perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["bu", "minus1"], ["shape2"], axis=0),
        helper.make_node("Reshape", ["rt", "shape2"], ["y"]),
    ]
    inits = [
        helper.make_tensor("w", TP.FLOAT, [16, 16], RNG.standard_normal(256).astype(np.float32)),
        helper.make_tensor("i0", TP.INT64, [], [0]),
        helper.make_tensor("i1", TP.INT64, [], [1]),
        c("ax", [0]), c("heads", [2]), c("dim", [8]), c("minus1", [-1]),
    ]
    return _model(nodes, [_vi("x", ["B", "S", 16])], [_vi("y", None)], 17, inits)


def test_shape_inference_dynamic_reshape_chain() -> None:
    """Every value of the head-split model gets a rank; the reshape targets' dims follow from
    Shape -> Gather -> Concat, and numerics are unchanged."""
    model = _attention_reshape_model()
    module = import_model(model)
    with module.context, ir.Location.unknown():
        # Forget what the importer's onnx inference found, so the pass has to find it.
        for op in _onnx_ops(module):
            if op.name == "onnx.constant":
                continue
            for r in op.results:
                if U.is_tensor_type(r.type):
                    r.set_type(ir.UnrankedTensorType.get(U.element_type_of(r.type)))
        conflicts = infer_shapes(module.operation)
    assert conflicts == []
    types = {U.info_of(op).op_type: str(op.results[0].type) for op in _onnx_ops(module) if U.info_of(op) is not None}
    assert types["MatMul"] == "tensor<?x?x16xf32>"
    assert types["Transpose"] == "tensor<?x2x?x8xf32>"
    reshapes = [str(op.results[0].type) for op in _onnx_ops(module) if op.name.startswith("onnx.reshape")]
    assert reshapes == ["tensor<?x?x2x8xf32>", "tensor<?x?xf32>"]
    for op in _onnx_ops(module):
        for r in op.results:
            assert not isinstance(r.type, ir.UnrankedTensorType), op.name
    x = RNG.standard_normal((3, 5, 16)).astype(np.float32)
    _check(model, module, {"x": x})


def test_shape_inference_pass_through_registry_and_options() -> None:
    """The registry names the pass; options parse from `pass{...}` strings."""
    cls = get_pass_class("onnx-shape-inference")
    assert cls is OnnxShapeInferencePass
    p = cls.from_options({"strict": "true", "max-value-elements": "8"})
    assert p == OnnxShapeInferencePass(strict=True, max_value_elements=8)
    assert get_pass_class("onnx-constant-fold").from_options({"size-limit": "4"}) == OnnxConstantFoldPass(size_limit=4)


def test_shape_inference_strict_reports_contradiction() -> None:
    """A declared static size that contradicts inference is kept; strict fails naming the op."""
    ctx = onnx_context()
    with ctx:
        module = ir.Module.parse(
            "func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x5xf32> {\n"
            '  %0 = "onnx.mat_mul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x5xf32>\n'
            "  return %0 : tensor<2x5xf32>\n}"
        )
        assert infer_shapes(module.operation)  # reported, not fatal
        assert "2x5" in str(module)
        with pytest.raises(PassFailure, match="MatMul.*dim 1 is declared 5 but inferred 4"):
            OnnxShapeInferencePass(strict=True).run(module.operation)


def test_shape_inference_loop_scan_output() -> None:
    """A Loop's scan output gets the body's value shape under a leading dynamic dim."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],  # fmt: skip
        "body",
        [_vi("i", [], TP.INT64), _vi("cond_in", [], TP.BOOL), _vi("acc_in", None)],
        [_vi("cond_out", [], TP.BOOL), _vi("acc_out", None), _vi("scan", None)],
        initializer=[helper.make_tensor("one", TP.FLOAT, [2], [1.0, 1.0])],
    )
    model = _model([helper.make_node("Loop", ["n", "c", "a0"], ["a", "scans"], body=body)],
                   [_vi("n", [], TP.INT64), _vi("c", [], TP.BOOL), _vi("a0", [2])], [_vi("a", None), _vi("scans", None)], 17)  # fmt: skip
    module = import_model(model)
    with module.context:
        infer_shapes(module.operation)
    loop = next(op for op in _onnx_ops(module) if op.name.startswith("onnx.loop"))
    assert str(loop.results[1].type) == "tensor<?x2xf32>"
    feeds = {"n": np.array(3, np.int64), "c": np.array(True), "a0": np.zeros(2, np.float32)}
    _check(model, module, feeds)


# --- onnx-constant-fold ---------------------------------------------------------------------------------


def test_constant_fold_numerics_and_size_limit() -> None:
    """Weight preprocessing (Transpose, Cast, Mul of initializers) folds; the result matches the
    reference; with a small size_limit nothing bigger than it is produced."""
    w = RNG.standard_normal((4, 3)).astype(np.float16)
    nodes = [
        helper.make_node("Cast", ["w"], ["wf"], to=TP.FLOAT),
        helper.make_node("Transpose", ["wf"], ["wt"], perm=[1, 0]),
        helper.make_node("Mul", ["wt", "k"], ["ws"]),
        helper.make_node("MatMul", ["x", "ws"], ["y"]),
    ]
    inits = [helper.make_tensor("w", TP.FLOAT16, [4, 3], w.reshape(-1).tolist()), helper.make_tensor("k", TP.FLOAT, [], [0.5])]
    model = _model(nodes, [_vi("x", ["N", 3])], [_vi("y", ["N", 4])], 17, inits)
    module = import_model(model)
    with module.context, ir.Location.unknown():
        folder = Folder(1 << 16)
        for op in _onnx_ops(module):
            folder.visit(op)
        folder.erase_dead_constants()
    assert folder.folded == 3
    assert [U.info_of(op).op_type for op in _onnx_ops(module)] == ["Constant", "MatMul"]
    _check(model, module, {"x": RNG.standard_normal((2, 3)).astype(np.float32)})

    limited = import_model(model)
    OnnxConstantFoldPass(size_limit=8).run(limited.operation)
    assert "Transpose" in [U.info_of(op).op_type for op in _onnx_ops(limited)]


def test_constant_fold_shape_of_static_and_reference_ops() -> None:
    """Shape of a static value, Range and ConstantOfShape fold; values match the reference."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ReduceProd", ["s"], ["n"], keepdims=0),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TP.FLOAT),
        helper.make_node("Reshape", ["rf", "s"], ["rr"]),
        helper.make_node("Add", ["x", "rr"], ["y"]),
    ]
    inits = [helper.make_tensor("zero", TP.INT64, [], [0]), helper.make_tensor("one", TP.INT64, [], [1])]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])], 17, inits)
    module = import_model(model)
    OnnxConstantFoldPass().run(module.operation)
    assert [U.info_of(op).op_type for op in _onnx_ops(module)] == ["Constant", "Add"]
    _check(model, module, {"x": RNG.standard_normal((2, 3)).astype(np.float32)})


# --- onnx-canonicalize -------------------------------------------------------------------------------------


def test_canonicalize_numerics() -> None:
    """Identity/Dropout/Cast no-ops and dead branches go; the model computes the same."""
    nodes = [
        helper.make_node("Identity", ["x"], ["i"]),
        helper.make_node("Dropout", ["i"], ["d"]),
        helper.make_node("Cast", ["d"], ["c"], to=TP.FLOAT),
        helper.make_node("Relu", ["c"], ["dead"]),
        helper.make_node("Constant", [], ["k"], value_floats=[1.0, 2.0, 3.0]),
        helper.make_node("Add", ["c", "k"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])], 17)
    module = import_model(model)
    OnnxCanonicalizePass().run(module.operation)
    assert [U.info_of(op).op_type for op in _onnx_ops(module)] == ["Constant", "Add"]
    assert list(_onnx_ops(module)[0].attributes.keys()) == ["value"]
    _check(model, module, {"x": RNG.standard_normal((2, 3)).astype(np.float32)})


def test_canonicalize_sparse_constant() -> None:
    """A sparse_value Constant (opset 17: `onnx.constant_v13`) becomes a dense `value`."""
    sp = helper.make_sparse_tensor(onnx.numpy_helper.from_array(np.array([1.5, 2.5], np.float32), "v"),
                                   onnx.numpy_helper.from_array(np.array([1, 5], np.int64), "i"), [2, 3])  # fmt: skip
    nodes = [helper.make_node("Constant", [], ["c"], sparse_value=sp), helper.make_node("Add", ["x", "c"], ["y"])]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])], 17)
    module = import_model(model)
    OnnxCanonicalizePass().run(module.operation)
    const = _onnx_ops(module)[0]
    assert list(const.attributes.keys()) == ["value"]
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    dense = np.zeros(6, np.float32)
    dense[[1, 5]] = [1.5, 2.5]
    _check(model, module, {"x": x}, [x + dense.reshape(2, 3)])


def test_full_onnx_pipeline_on_old_dynamic_model() -> None:
    """upgrade -> canonicalize -> shape inference -> fold -> canonicalize on an opset-9 model with
    a dynamic batch: everything ends newest, ranked, and numerically the same."""
    nodes = [
        helper.make_node("Unsqueeze", ["x"], ["u"], axes=[1]),
        helper.make_node("Slice", ["u"], ["s"], starts=[0], ends=[2], axes=[2]),
        helper.make_node("Identity", ["s"], ["si"]),
        helper.make_node("Shape", ["si"], ["sh"]),
        helper.make_node("Cast", ["sh"], ["shf"], to=TP.FLOAT),
        helper.make_node("ReduceSum", ["si"], ["y"], axes=[2], keepdims=1),
        helper.make_node("Softmax", ["y"], ["z"], axis=2),
    ]
    model = _model(nodes, [_vi("x", ["N", 4])], [_vi("z", None)], 9)
    module = import_model(model)
    with module.context, warnings.catch_warnings():
        warnings.simplefilter("error")
        for p in (OnnxUpgradeOpsPass(), OnnxCanonicalizePass(), OnnxShapeInferencePass(), OnnxConstantFoldPass(), OnnxCanonicalizePass()):
            p.run(module.operation)
    for op in _onnx_ops(module):
        info = U.info_of(op)
        assert info is None or is_newest(info)
        for r in op.results:
            assert not isinstance(r.type, ir.UnrankedTensorType)
    assert "Identity" not in [U.info_of(op).op_type for op in _onnx_ops(module) if U.info_of(op)]
    _check(model, module, {"x": RNG.standard_normal((5, 4)).astype(np.float32)})


def test_shape_inference_scan_outputs() -> None:
    """Scan: the body sees one slice of each scan input; the scan output stacks the body's values
    along the sequence (here static: 5) and the state keeps its shape."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body",
        [_vi("s_in", None), _vi("x_t", None)],
        [_vi("s_out", None), _vi("y_t", None)],
    )
    model = _model([helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1)],
                   [_vi("s0", [3]), _vi("xs", [5, 3])], [_vi("s", None), _vi("ys", None)], 17)  # fmt: skip
    module = import_model(model)
    with module.context:
        infer_shapes(module.operation)
    scan = next(op for op in _onnx_ops(module) if op.name.startswith("onnx.scan"))
    assert [str(r.type) for r in scan.results] == ["tensor<3xf32>", "tensor<5x3xf32>"]
    feeds = {"s0": np.zeros(3, np.float32), "xs": RNG.standard_normal((5, 3)).astype(np.float32)}
    _check(model, module, feeds)


def test_shape_inference_ml_regressor() -> None:
    """ai.onnx.ml ops onnx has no inference for get shape rules: LinearRegressor is [N, targets]."""
    node = helper.make_node("LinearRegressor", ["x"], ["y"], domain="ai.onnx.ml", coefficients=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], intercepts=[0.5, -0.5], targets=2)
    graph = helper.make_graph([node], "g", [_vi("x", ["N", 3])], [_vi("y", None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    module = import_model(model)
    with module.context:
        infer_shapes(module.operation)
    op = next(op for op in _onnx_ops(module) if op.name.startswith("onnx_ml.linear_regressor"))
    assert str(op.results[0].type) == "tensor<?x2xf32>"
    _check(model, module, {"x": RNG.standard_normal((4, 3)).astype(np.float32)})


def test_shape_inference_keeps_variadic_tail_uniform() -> None:
    """Values in the tail of a variadic group (past the independently typed slots) must share one
    type in IRDL; shape inference refines the others but leaves the tail as declared, so the
    module still verifies."""
    from mlir.dialects import func

    from onnxc.dialect import onnx_op

    ctx = onnx_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        i64 = ir.IntegerType.get_signless(64)
        unranked = ir.UnrankedTensorType.get(i64)
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("f", ir.FunctionType.get([], [unranked]))
            with ir.InsertionPoint(fn.add_entry_block()):
                parts = []
                for k in range(20):
                    c = U.make_constant(np.arange(k % 3 + 1, dtype=np.int64))
                    parts.append(onnx_op("Identity", [c], [unranked]).result)
                cat = onnx_op("Concat", parts, [unranked], {"axis": 0})
                func.ReturnOp([cat.result])
        assert module.operation.verify()
        infer_shapes(module.operation)
        assert module.operation.verify()
        assert str(cat.results[0].type) == "tensor<39xi64>"  # 6 * (1 + 2 + 3) + 1 + 2


# --- the models shipped with onnx, at old opsets ----------------------------------------------------

_SHIPPED = [
    "pytorch-converted/test_BatchNorm2d_eval", "pytorch-converted/test_ConstantPad2d", "pytorch-converted/test_GLU_dim",
    "pytorch-converted/test_Linear", "pytorch-converted/test_LogSoftmax", "pytorch-converted/test_Softmin",
    "pytorch-converted/test_log_softmax_dim3", "pytorch-converted/test_AvgPool1d_stride", "pytorch-converted/test_PoissonNLLLLoss_no_reduce",
    "pytorch-operator/test_operator_clip", "pytorch-operator/test_operator_index", "pytorch-operator/test_operator_chunk",
    "pytorch-operator/test_operator_reduced_mean_keepdim", "pytorch-operator/test_operator_reduced_sum", "pytorch-operator/test_operator_pow",
    "pytorch-operator/test_operator_add_size1_right_broadcast", "pytorch-converted/test_PReLU_1d_multiparam",
    "pytorch-converted/test_PReLU_3d_multiparam",
]  # fmt: skip


def _shipped_case(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[np.ndarray]]:
    import os

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", name)
    model = onnx.load(os.path.join(folder, "model.onnx"))

    def read(kind: str) -> list[np.ndarray]:
        out, i = [], 0
        while os.path.exists(path := os.path.join(folder, "test_data_set_0", f"{kind}_{i}.pb")):
            t = onnx.TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            out.append(onnx.numpy_helper.to_array(t))
            i += 1
        return out

    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    return model, dict(zip(names, read("input"))), read("output")


@pytest.mark.parametrize("name", _SHIPPED)
def test_shipped_old_opset_models(name: str) -> None:
    """pytorch-converted/-operator models of opset 6-9 (legacy broadcast, BatchNormalization-6,
    Softmax-1 coercion, attribute-to-input changes...): every op ends newest after the four ONNX
    passes, and the result matches the outputs stored beside the model."""
    model, feeds, expected = _shipped_case(name)
    module = import_model(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for p in (OnnxUpgradeOpsPass(), OnnxShapeInferencePass(), OnnxConstantFoldPass(), OnnxCanonicalizePass()):
            p.run(module.operation)
    for op in _onnx_ops(module):
        info = U.info_of(op)
        assert info is None or is_newest(info), op.name
    exported = export_model(module)
    onnx.checker.check_model(exported)
    assert exported.ir_version >= onnx.helper.find_min_ir_version_for(list(exported.opset_import), ignore_unknown=True)
    got = ReferenceEvaluator(exported).run(None, feeds)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-4)


def test_upgrade_scan8_batch_axis_becomes_loop() -> None:
    """Scan-8 (leading batch axis) becomes a Loop over the batch around a Scan-9 with the same
    body. Expected values from numpy (the reference has no Scan-8). `onnx.reference` concatenates
    Loop scan outputs along axis 0 instead of stacking them (the spec stacks), which leaves the
    data in the same order, so its results are compared after reshaping."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body",
        [_vi("s_in", [2]), _vi("x_t", [2])],
        [_vi("s_out", [2]), _vi("y_t", [2])],
    )
    node = helper.make_node("Scan", ["", "s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1)
    model = _model([node], [_vi("s0", [3, 2]), _vi("xs", [3, 4, 2])], [_vi("s", [3, 2]), _vi("ys", [3, 4, 2])], 8)
    module = import_model(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OnnxUpgradeOpsPass().run(module.operation)
    names = [op.name for op in _onnx_ops(module)]
    assert "onnx.loop" in names and "onnx.scan" in names and "onnx.scan_v8" not in names
    assert verify_onnx(module.operation) == []
    s0 = RNG.standard_normal((3, 2)).astype(np.float32)
    xs = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    expected = [s0 + xs.sum(1), s0[:, None, :] + np.cumsum(xs, axis=1)]
    got = ReferenceEvaluator(export_model(module)).run(None, {"s0": s0, "xs": xs})
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g).reshape(e.shape), e, rtol=1e-5, atol=1e-6)
