"""The per-op index (`onnxc.transforms.op_table`): one row per dialect op, and nothing registered
in the three per-op tables (lowering patterns, shape/value rules, upgrade adapters) is lost or
unreachable from it."""

from __future__ import annotations

from pathlib import Path

from onnxc.dialect.table import all_ops
from onnxc.transforms import onnx_shape_inference as shapes
from onnxc.transforms import onnx_upgrade_ops as upgrades
from onnxc.transforms.lowering.common import PATTERNS
from onnxc.transforms.op_table import op_table, source_of, find_test_files

ROOT = Path(__file__).resolve().parents[2]


def test_one_row_per_dialect_op() -> None:
    table = op_table()
    assert len(table) == len(all_ops())
    assert {e.info.name for e in table.values()} == {i.name for i in all_ops()}
    for (domain, op_type, (first, last)), e in table.items():
        assert (domain, op_type) == (e.info.domain, e.info.op_type)
        assert (first, last) == (e.info.since_versions[0], e.info.since_versions[-1])


def test_every_registration_is_reachable() -> None:
    """An adapter keyed by a version no op has, a shape rule or a pattern for an op type the
    dialect does not know, would never run: each must appear in some row."""
    table = op_table().values()
    adapters = {(e.info.op_type, v) for e in table for v in e.adapters}
    assert set(upgrades._ADAPTERS) <= adapters, set(upgrades._ADAPTERS) - adapters
    types = {e.info.op_type for e in table}
    assert set(shapes._SHAPE_RULES) <= types and set(shapes._VALUE_RULES) <= types
    assert set(PATTERNS) <= {(e.info.domain, e.info.op_type) for e in table}


def test_rows_point_at_the_registrations() -> None:
    table = op_table()
    scans = [e for k, e in table.items() if k[:2] == ("", "Scan")]
    # control_flow.py declares Scan's lowering for version 9 and newer (Scan-8 has a batch axis).
    assert all(e.lowers_directly == (e.info.since_version >= 9) for e in scans)
    assert any(not e.lowers_directly for e in scans) and any(e.lowers_directly for e in scans)
    matmul = table[("", "MatMul", (13, 13))]
    assert (source_of(matmul.lowering) or "").startswith("transforms/lowering/matmul.py:")
    reshape = next(e for k, e in table.items() if k[:2] == ("", "Reshape") and 5 in e.info.since_versions)
    assert 5 in reshape.adapters and (source_of(reshape.adapters[5]) or "").startswith("transforms/onnx_upgrade_ops.py:")
    assert (source_of(reshape.shape_rule) or "").startswith("transforms/onnx_shape_inference.py:")
    label = table[("ai.onnx.ml", "LabelEncoder", (4, 4))]
    assert (source_of(label.lowering) or "").startswith("transforms/lowering/strings.py:") and label.lowers_directly
    castmap = table[("ai.onnx.ml", "CastMap", (1, 1))]
    assert castmap.lowering is None and not castmap.lowers_directly


def test_find_test_files_finds_lit_and_pytest_files() -> None:
    table = op_table()
    rows = [table[("", "MatMul", (13, 13))]]
    found = find_test_files(rows, ROOT / "test")[rows[0].key]
    assert any(p.endswith(".mlir") for p in found) and any(p.endswith(".py") for p in found), found
