"""`bench/models.py --peers`: IREE's CPU backend as a third runtime next to onnxruntime.

The IREE path runs for real on a tiny model the test builds (a convolution, ReLU and MatMul):
imported with iree-import-onnx, compiled by IREE for llvm-cpu, run on its local-task device at
one thread in its own child process, its outputs checked against onnxruntime at the bench's
tolerance, its numbers in the row and the table. A model IREE cannot compile is reported in the
row (never a crash), a failed or mismatched IREE row stays out of the IREE geomean, and `--peers`
without IREE installed exits with one line saying how to install it. Speed is never asserted.

IREE is the `peers` extra, which the README's test command installs; where it is missing the tests
that run it skip with that reason. IREE's compiler is never imported into this process (its MLIR
bindings and the upstream ones onnxc uses cannot share one), only into the bench's children.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    """bench/models.py as a module (its folder is scripts, and test/python has a models.py too)."""
    spec = importlib.util.spec_from_file_location("onnxc_bench_models_cli", ROOT / "bench" / "models.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


bench = _bench()
needs_iree = pytest.mark.skipif(bool(bench.peers_missing()), reason=f"IREE not installed: {bench.peers_missing()}")
QUICK_ARGS = ["--threads", "1", "--rounds", "1", "--warmup", "1", "--repeat", "3", "--budget", "0.05", "--timeout", "300"]


def _tiny_model(path: Path) -> Path:
    """Conv 3x3 (3 -> 4 channels) + Relu, flattened, MatMul to 5 outputs + Relu; random weights."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b")
    m = numpy_helper.from_array(rng.standard_normal((4 * 6 * 6, 5)).astype(np.float32) * 0.1, "m")
    shape = numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["y0"]),
        helper.make_node("Relu", ["y0"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], initializer=[w, b, m, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@needs_iree
def test_peers_runs_iree_and_checks_it_against_onnxruntime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    model = _tiny_model(tmp_path / "tiny.onnx")
    rows = []
    real = bench.bench_one
    monkeypatch.setattr(bench, "bench_one", lambda *a, **k: rows.append(real(*a, **k)) or rows[-1])
    assert bench.main(["--models", str(model), "--peers", *QUICK_ARGS]) == 0
    (row,) = rows
    assert row.errors == [] and row.check == "ok", (row.errors, row.check)
    assert row.iree_errors == [] and row.iree_check == "ok" and row.iree_status == "ok", (row.iree_errors, row.iree_check)
    assert row.iree_ms[1] > 0 and row.iree_compile_s > 0 and row.iree_rss_mb > 0
    assert row.iree_ratio(1, None) == pytest.approx(row.onnxc_ms[1] / row.iree_ms[1])
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.startswith("model "))
    for col in ("IREE compile s", "IREE 1t ms", "onnxc/IREE 1t", "IREE MB", "IREE check"):
        assert col in head, head
    assert "onnxc/IREE over 1 model(s): 1 thread" in out, out
    body = next(line for line in out.splitlines() if line.startswith("tiny.onnx "))
    assert body.split()[-2:] == ["ok", "ok"], body


@needs_iree
def test_a_model_iree_cannot_compile_is_reported_not_raised(tmp_path: Path) -> None:
    # ai.onnx.ml ops are onnxruntime's, not in IREE's ONNX importer's conversions.
    node = helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml", norm="MAX")
    graph = helper.make_graph([node], "ml", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)], ir_version=8)
    path = tmp_path / "ml.onnx"
    onnx.save(model, path)
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.ones((2, 4), np.float32))
    args = bench.parse_args(["--peers", *QUICK_ARGS])
    r = bench._run_child("iree", 1, path, feeds, tmp_path, args, False)
    assert "error" in r and r["error"].startswith("iree: ") and "IREE compile failed" in r["error"], r


def test_table_reports_iree_failures_and_leaves_them_out_of_the_iree_geomean() -> None:
    ok = bench.Row("a", "", ort_ms={1: 2.0}, onnxc_ms={1: 1.0}, check="ok", iree_ms={1: 4.0}, iree_check="ok",
                   compile_s=1.0, iree_compile_s=2.0)
    failed = bench.Row("b", "", ort_ms={1: 2.0}, onnxc_ms={1: 2.0}, check="ok",
                       iree_errors=["iree: RuntimeError: IREE compile failed: error: failed to legalize"])
    wrong = bench.Row("c", "", ort_ms={1: 2.0}, onnxc_ms={1: 2.0}, check="ok", iree_ms={1: 1.0},
                      iree_check="MISMATCH (relative error 1.0e-01 > 0.0001)")
    lines = bench.table_lines([ok, failed, wrong], [1], True, markdown=False, peers=True)
    text = "\n".join(lines)
    assert lines[0].split()[:4] == ["model", "compile", "s", "IREE"]
    assert [ln.split()[-1] for ln in lines[2:5]] == ["ok", "failed", "MISMATCH"]
    assert "b: iree: failed (RuntimeError: IREE compile failed: error: failed to legalize)" in text
    assert "c: iree: MISMATCH (relative error" in text
    # onnxc/onnxruntime counts all three; onnxc/IREE only `a` (1.0 / 4.0).
    assert lines[-1] == ("geomean onnxc/onnxruntime over 3 model(s): 1 thread 0.79x; onnxc/IREE over 1 model(s): "
                         "1 thread 0.25x (2 without a matching onnxc and IREE result, left out)"), lines[-1]
    md = bench.table_lines([ok], [1], True, markdown=True, peers=True)
    assert md[0].startswith("| model | compile s | IREE compile s | onnxc 1t ms |") and md[1].endswith("|---|---|")
    # Without --peers the table is the two-runtime one.
    assert "IREE" not in "\n".join(bench.table_lines([ok], [1], True, markdown=False))


def test_peers_without_iree_says_how_to_install(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.startswith("iree") else real(name, *a))
    assert bench.main(["--models", "resnet_small", "--peers", *QUICK_ARGS]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["--peers needs IREE (iree-base-compiler is not installed): pip install -c constraints.txt -e '.[peers]'"], err


def test_write_doc_with_peers_has_the_iree_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = bench.parse_args(["--peers", "--iree-flag=--iree-opt-level=O3", *QUICK_ARGS])
    monkeypatch.setattr(bench, "DOC", tmp_path / "performance.md")  # never the real docs/performance.md
    row = bench.Row("a", "", ort_ms={1: 2.0}, onnxc_ms={1: 1.0}, check="ok", iree_ms={1: 4.0}, iree_check="ok")
    bench.write_doc(bench.table_lines([row], [1], True, markdown=True, peers=True), args, True, [bench._iree_header(args)])
    text = (tmp_path / "performance.md").read_text()
    assert "# Performance: onnxc against onnxruntime and IREE" in text
    assert "| IREE 1t ms | onnxc/IREE 1t |" in text and "`onnxc/IREE Nt`" in text
    assert "--iree-llvmcpu-target-cpu=host --iree-opt-level=O3" in text and "--task_topology_group_count=N" in text
    assert "onnxc/IREE over 1 model(s): 1 thread 0.25x" in text
