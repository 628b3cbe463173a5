"""`onnxc partition` (tools/partition.py): the decision table, the partitioned ONNX and MLIR, overrides.

The backends are the CPU and the two simulated accelerators of test_session.py's plug-in (fixture
`accels`), so the decisions do not depend on this machine's devices. The partitioned ONNX model
is checked by onnx's checker and run by `onnx.reference` against the original model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from test_session import accels, cache_dir, chain_model  # noqa: F401 - fixtures used by name

from onnxc.tools.driver import main


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), str(path))
    return path


def table_rows(text: str) -> list[list[str]]:
    """The decision table's rows (after its header) split on runs of 2+ spaces."""
    import re

    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("subgraph"))
    return [re.split(r"\s{2,}", line.strip()) for line in lines[head + 1:] if line.strip() and not line.startswith("wrote")]


def test_table_and_partitioned_onnx_compute_the_model(accels, model_path: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    out = tmp_path / "parted.onnx"
    assert main(["partition", str(model_path), "--backends", "acc1,cpu", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("backends: cpu, acc1 (roofline)")
    rows = table_rows(text)
    # Add/Mul -> acc1 (a fast device, fast link), Relu -> CPU, the last Add -> acc1.
    assert [(r[0], r[-1]) for r in rows] == [("0", "acc1"), ("1", "cpu"), ("2", "acc1")], text
    assert "onnx.add#0 (add0), onnx.mul#1 (mul0)" in rows[0][1]
    written = onnx.load(str(out))
    onnx.checker.check_model(written, full_check=True)
    backends = [(f.name, {p.key: p.value for p in f.metadata_props}["onnxc.backend"]) for f in written.functions]
    assert backends == [("subgraph_0", "acc1"), ("subgraph_1", "cpu"), ("subgraph_2", "acc1")]
    assert [n.domain for n in written.graph.node] == ["onnxc.partition"] * 3
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(ReferenceEvaluator(written).run(None, {"x": x})[0], ReferenceEvaluator(chain_model()).run(None, {"x": x})[0], rtol=1e-6)


def test_slow_link_keeps_everything_on_the_cpu_unless_forced(accels, model_path: Path, capsys) -> None:  # noqa: F811
    accels.CONFIG["acc1"]["link"] = accels.CONFIG["acc2"]["link"] = 1.0e3
    assert main(["partition", str(model_path)]) == 0
    assert {r[-1] for r in table_rows(capsys.readouterr().out)} == {"cpu"}
    assert main(["partition", str(model_path), "--backend", "acc2", "--deny", "add1"]) == 0
    text = capsys.readouterr().out
    assert "forced in this order: acc2" in text
    rows = table_rows(text)
    assert [(r[1].split(",")[0], r[-1]) for r in rows] == [("onnx.add#0 (add0)", "acc2"), ("onnx.relu#2 (relu0)", "cpu")], text
    assert main(["partition", str(model_path), "--backend", "acc1", "--allow", "Mul"]) == 0
    rows = table_rows(capsys.readouterr().out)
    assert [r[1] for r in rows if r[-1] == "acc1"] == ["onnx.mul#1 (mul0)"]


def test_emit_mlir_prints_the_annotated_module(accels, model_path: Path, capsys) -> None:  # noqa: F811
    assert main(["partition", str(model_path), "--emit", "mlir", "--backends", "acc1"]) == 0
    captured = capsys.readouterr()
    assert "subgraph" in captured.err and "onnxc.partition" not in captured.err  # the table goes to stderr
    assert 'onnxc.backend = "acc1"' in captured.out and 'onnxc.backend = "cpu"' in captured.out
    assert "onnxc.backend_profiles" in captured.out


def test_errors_name_the_problem(accels, model_path: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    assert main(["partition", str(model_path), "--backends", "tpu"]) == 1
    assert "no backend 'tpu' on this machine (backends: cpu" in capsys.readouterr().err
    assert main(["partition", str(tmp_path / "missing.onnx")]) == 1
    assert "no model file" in capsys.readouterr().err
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "if",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    assert main(["partition", str(path), "-o", str(tmp_path / "if_parted.onnx")]) == 1
    assert "If/Loop/Scan is not implemented" in capsys.readouterr().err
