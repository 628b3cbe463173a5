"""The compile-level fuzzer (`onnxc.tools.fuzz_compile`) at CI size: mutated node-test models must
compile and match `onnx.reference`, or be refused with an `OnnxcError`; never an abort, a raw
exception or a wrong answer (issue 11). `ONNXC_COMPILE_FUZZ_CASES=N` runs N cases instead.

The long run: `nice -n 15 python -m onnxc.tools.fuzz_compile --cases 100000 --seed S --workers 1
--jit-opt-level 0 --minutes M --json out.json` (the report is rewritten every `--flush-s` seconds).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxc.tools import fuzz_compile as fz

CASES = int(os.environ.get("ONNXC_COMPILE_FUZZ_CASES", "100"))


def test_compile_fuzz_finds_no_bug(tmp_path: Path) -> None:
    out = tmp_path / "fuzz.json"
    # --minutes bounds the run on a loaded machine: cases not started by then are not counted.
    cmd = [sys.executable, "-m", "onnxc.tools.fuzz_compile", "--cases", str(CASES), "--seed", "0", "--minutes", "2.5", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["cases"] >= min(CASES, 40), report  # the run did a useful amount of work
    assert sum(report["counts"].values()) == report["cases"]
    bugs = "\n".join(f"case {b['index']} {b['base']} {b['mutation']} ({b['change']}): {b['cls']}: {b['why']}" for b in report["bugs"] if b["cls"] in fz.BUGS)
    assert proc.returncode == 0 and not bugs, bugs or proc.stdout[-2000:]


def test_compile_fuzz_on_vulkan_finds_no_bug(tmp_path: Path) -> None:
    """The same cases through the GPU mapping on the Vulkan target (lavapipe in CI, `--target
    vulkan`): refusals are `OnnxcError`s naming what they refuse, answers match."""
    from test_gpu_vulkan import _vulkan_or_skip

    _vulkan_or_skip()
    out = tmp_path / "fuzz.json"
    cmd = [sys.executable, "-m", "onnxc.tools.fuzz_compile", "--cases", str(CASES), "--seed", "0", "--minutes", "2.5", "--target", "vulkan", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["target"] == "vulkan" and report["cases"] >= min(CASES, 40), report
    assert report["counts"].get("ok", 0) > 0, report  # some cases ran on the device, not all refused
    bugs = "\n".join(f"case {b['index']} {b['base']} {b['mutation']} ({b['change']}): {b['cls']}: {b['why']}" for b in report["bugs"] if b["cls"] in fz.BUGS)
    assert proc.returncode == 0 and not bugs, bugs or proc.stdout[-2000:]


def test_mutations_are_deterministic_and_keep_models_parseable() -> None:
    bases = fz.base_cases()[:40]
    a = fz.make_cases(30, 7, bases)
    b = fz.make_cases(30, 7, bases)
    assert [(c.base, c.mutation, c.detail, c.model) for c in a] == [(c.base, c.mutation, c.detail, c.model) for c in b]
    for c in a:
        onnx.load_from_string(c.model)  # parseable: the mutations push into the compiler, not the parser


def test_worker_classifies_outcomes() -> None:
    """The classification itself: a valid model is `ok`, a bad perm is `refused` (before the fix it
    aborted the worker: `abort`), and a wrong feed dtype is `refused` at run time."""
    def case(node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> fz.Case:
        g = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [h.make_tensor_value_info("y", T.FLOAT, None)])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
        return fz.Case(0, "t", "attribute", "", m.SerializeToString(), feeds)

    x = np.ones((2, 3), np.float32)
    assert fz.run_case(case(h.make_node("Transpose", ["x"], ["y"], perm=[1, 0]), {"x": x}))["cls"] == "ok"
    assert fz.run_case(case(h.make_node("Transpose", ["x"], ["y"], perm=[1, 1]), {"x": x}))["cls"] == "refused"
    assert fz.run_case(case(h.make_node("Relu", ["x"], ["y"]), {"x": x.astype(np.float64)}))["cls"] == "refused"


def test_second_opinion_where_the_reference_is_wrong() -> None:
    """BatchNormalization-9 with one output: onnx.reference applies the momentum default to batch
    statistics; onnxc (inference) agrees with onnxruntime, so the case is `ok`, not `wrong`. A
    model onnxc computes right is never reclassified: the comparison is still made."""
    import pytest

    pytest.importorskip("onnxruntime")
    g = h.make_graph(
        [h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])] + [h.make_tensor_value_info(n, T.FLOAT, [3]) for n in "sbmv"],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
    )  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = 8
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32), **{n: rng.uniform(0.5, 1.5, 3).astype(np.float32) for n in "sbmv"}}
    r = fz.run_case(fz.Case(0, "t", "opset", "", m.SerializeToString(), feeds))
    assert r == {"cls": "ok", "detail": "onnx.reference differs, onnxruntime agrees"}, r
    who, outs = fz.second_opinion(m, feeds)
    assert who == "onnxruntime" and outs[0].shape == (2, 3, 4)


def test_resize_negative_axes_are_normalized_for_the_references() -> None:
    """Fuzz seed 301 case 3966: Resize `axes = [2, -1]` with sizes [1, 3], not_larger, on a
    1x1x2x4 input. onnx.reference refuses the negative axis and onnxruntime ignores it (1x1x1x4);
    onnxc's 1x1x1x2 is what both give for the same model with axes [2, 3], which the second
    opinion is asked about, so the case is `ok`."""
    pytest.importorskip("onnxruntime")
    node = h.make_node("Resize", ["X", "", "", "sizes"], ["Y"], mode="nearest", axes=[2, -1], keep_aspect_ratio_policy="not_larger")
    g = h.make_graph([node], "g", [h.make_tensor_value_info("X", T.FLOAT, [1, 1, 2, 4])], [h.make_tensor_value_info("Y", T.FLOAT, None)],
                     initializer=[onnx.numpy_helper.from_array(np.array([1, 3], np.int64), "sizes")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 19)], ir_version=9)
    feeds = {"X": np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)}
    who, outs = fz.second_opinion(m, feeds)
    assert who == "onnxruntime" and outs[0].shape == (1, 1, 1, 2) and outs[0].ravel().tolist() == [0.0, 2.0]
    assert [list(a.ints) for a in m.graph.node[0].attribute if a.name == "axes"] == [[2, -1]]  # a copy was changed
    r = fz.run_case(fz.Case(0, "t", "attribute", "", m.SerializeToString(), feeds))
    assert r["cls"] == "ok", r


def test_docs_section_is_generated_from_reports(tmp_path: Path) -> None:
    report = {"seed": 3, "cases": 5, "counts": {"ok": 3, "refused": 1, "wrong": 1}, "by_mutation": {"rank:ok": 3, "rank:refused": 1, "feed:wrong": 1},
              "bugs": [{"index": 4, "base": "test_x", "mutation": "feed", "change": "feed x", "cls": "wrong", "why": "output 'y'"}]}  # fmt: skip
    doc = tmp_path / "r.md"
    doc.write_text(f"intro\n{fz.DOCS_BEGIN}\nold\n{fz.DOCS_END}\noutro\n")
    fz.write_docs(doc, [report], "abc123")
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith("\noutro\n") and "old" not in text
    assert "| 3 | abc123 | 5 | 3 | 1 | 0 | 0 | 1 | 0 |" in text  # seed, commit, cases, ok, refused, raw, abort, wrong, timeout
    assert "| 3 | rank | 3 | 1 | 0 | 0 | 0 | 0 |" in text and "- seed 3 case 4: test_x, feed (feed x): **wrong** output 'y'" in text
    # Runs of a long record keep the commit each ran on, and their own per-mutation rows.
    newer = {**report, "seed": 4, "by_mutation": {"rank:ok": 2}}
    fz.write_docs(doc, [report, newer], ["abc123", "def456"])
    text = doc.read_text()
    assert "| 3 | abc123 | 5 |" in text and "| 4 | def456 | 5 |" in text
    assert "| 3 | rank | 3 | 1 | 0 | 0 | 0 | 0 |" in text and "| 4 | rank | 2 | 0 | 0 | 0 | 0 | 0 |" in text
    with pytest.raises(ValueError, match="1 commits for 2 runs"):
        fz.render_docs([report, newer], ["abc123"])
    fz.write_docs(doc, [{**report, "drawn": 9, "duplicates": 2, "seconds": 2.5, "jit_opt_level": 0, "workers": 1, "unverified": 1,
                         "unverified_bases": {"test_y": 1}}], "abc123")  # fmt: skip
    assert ("- seed 3: 9 cases drawn, 2 of them duplicates of earlier ones (not run), stopped early (time limit or interrupted); jit_opt_level 0, "
            "1 worker(s), 2.5 s, 2.0 cases/s; 1 `ok` cases unverified (onnx.reference and onnxruntime both refuse): test_y (1).") in doc.read_text()


def test_identical_cases_run_once_and_one_model_compiles_once() -> None:
    """`case_key` tells identical draws apart from cases that differ only in a feed, and a worker
    (`run_case(reuse=True)`) runs a model's cases on one compile: a refused call (a wrong feed)
    leaves the compiled model answering the next, valid one right."""
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)]).SerializeToString()
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    bad = fz.Case(0, "t", "feed", "", m, {"x": x.astype(np.float64)})
    good = fz.Case(1, "t", "feed", "", m, {"x": x})
    assert fz.case_key(good) == fz.case_key(fz.Case(2, "t", "feed", "", m, {"x": x.copy()}))
    assert fz.case_key(good) != fz.case_key(bad) != fz.case_key(fz.Case(3, "t", "feed", "", m, {"x": x.reshape(3, 2)}))
    fz._LAST_COMPILED.clear()
    assert fz.run_case(bad, 0, reuse=True)["cls"] == "refused"
    first = fz._LAST_COMPILED[0][2]
    assert fz.run_case(good, 0, reuse=True) == {"cls": "ok", "detail": ""}
    assert fz._LAST_COMPILED[0][2] is first  # not compiled again
    fz._LAST_COMPILED.clear()


def test_where_the_reference_refuses_onnxruntime_decides() -> None:
    """A model onnx.reference cannot run (GatherElements with indices smaller than the data on a
    dim other than the axis: its ValueError) is compared with onnxruntime instead of being
    counted `ok` unseen; a wrong answer there is `wrong`; one neither runs is `unverified`."""
    import pytest

    pytest.importorskip("onnxruntime")
    g = h.make_graph([h.make_node("GatherElements", ["d", "i"], ["y"], axis=-1)], "g",
                     [h.make_tensor_value_info("d", T.FLOAT, [3, 3]), h.make_tensor_value_info("i", T.INT32, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 8
    feeds = {"d": np.arange(9, dtype=np.float32).reshape(3, 3), "i": np.array([[-1, -2, 0], [2, 0, 0]], np.int32)}
    case = fz.Case(0, "t", "attribute", "", m.SerializeToString(), feeds)
    assert fz.run_case(case) == {"cls": "ok", "detail": "reference refused: ValueError, onnxruntime agrees"}
    import onnxc

    real = onnxc.compile

    def off_by_one(model: onnx.ModelProto, **kw: object) -> object:  # a compiler that answers wrong
        compiled = real(model, **kw)

        class Wrong:
            def run(self, f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
                return {k: v + 1 for k, v in compiled.run(f).items()}

        return Wrong()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(onnxc, "compile", off_by_one)
        r = fz.run_case(case)
    assert r["cls"] == "wrong" and "onnx.reference refused: ValueError; onnxruntime answered" in r["detail"], r
    r = fz.report(0, [(fz.Case(0, "b", "rank", "", b"", {}), {"cls": "ok", "detail": "reference refused: IndexError; unverified"})])
    assert r["unverified"] == 1 and r["unverified_bases"] == {"b": 1}


def test_comparison_tolerance_follows_the_output_scale() -> None:
    """An entry that is 0 in one implementation and 2e-5 in another is the same answer where the
    output reaches 952 (float32 rounding of an STFT), not where it is at most 1."""
    want = np.array([952.0, 0.0], np.float32)
    assert fz._same(np.array([952.0, 2.2e-5], np.float32), want)
    assert not fz._same(np.array([1.0, 2.2e-5], np.float32), np.array([1.0, 0.0], np.float32))
    assert not fz._same(np.array([952.0, 0.01], np.float32), want)


def test_fully_symbolic_flexattention_compiles_within_the_case_limit(tmp_path: Path) -> None:
    """Fuzz seed 402 cases 10683 and 47952: FlexAttention with every input dim symbolic (equal
    sizes share a name) ran past the fuzzer's 120 s per case (150 s alone: value-bounds
    comparisons through the guarded casts' `scf.if` and the broadcast sizes' `arith.select`
    chains of one unsplit function, see outline.DYNAMIC_MAX_OPS; 3 s since). Run as the fuzzer
    runs a case, in a worker under its time limit, and checked against onnx.reference."""
    import pickle

    for name in ("test_flexattention_fp16", "test_flexattention_diff_head_sizes"):
        base, model, feeds = next(b for b in fz.base_cases() if b[0] == name)
        m = onnx.ModelProto()
        m.CopyFrom(model)
        for vi in m.graph.input:
            for d in vi.type.tensor_type.shape.dim:
                d.dim_param = f"n{d.dim_value}"  # clears dim_value: the size becomes a shared name
        path = tmp_path / f"{name}.pkl"
        path.write_bytes(pickle.dumps(fz.Case(0, base, "partly_symbolic", "every input dim symbolic", m.SerializeToString(), feeds)))
        worker = fz.Worker(6 << 30, jit_opt_level=0)
        try:
            r = worker.run(str(path), timeout=120.0)
        finally:
            worker.stop()
        assert r["cls"] == "ok", (name, r)


def test_float16_inputs_are_also_compared_computed_in_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuzz seed 407 case 3797: cubic GridSample of a float32 X with a float16 grid.
    onnx.reference computes the cubic weights from the float16 grid values in float16 and
    answered 1.7533 where float64 gives 1.75582 (onnxc's answer); onnxruntime did not run that
    model (GridSample-20's mode name at opset 17, now refused by onnxc too). With no second
    opinion the case is `ok` because onnxc matches the reference run on the same grid values as
    float32 (the widened reference is a second check of the same comparison, so a float16
    model onnxc gets wrong stays `wrong`)."""
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 3, 2)
    grid = np.array([[[[-1, -1], [-0.5, -0.5], [-0.2, -0.2], [0, 0]], [[0, 0], [-0.2, -0.2], [0.5, 0.5], [1, 1]]]], np.float16)
    node = h.make_node("GridSample", ["X", "Grid"], ["Y"], mode="cubic")
    g = h.make_graph([node], "g", [h.make_tensor_value_info("X", T.FLOAT, [1, 1, 3, 2]), h.make_tensor_value_info("Grid", T.FLOAT16, [1, 2, 4, 2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)], ir_version=9)
    feeds = {"X": x, "Grid": grid}
    from onnx.reference import ReferenceEvaluator

    plain = ReferenceEvaluator(m).run(None, feeds)[0]
    widened = fz._widened_reference(m, feeds)
    assert widened is not None and fz._first_difference(m, {"Y": widened[0]}, [plain]) is not None  # the float16 discrepancy
    monkeypatch.setattr(fz, "second_opinion", lambda model, feeds: None)
    r = fz.run_case(fz.Case(0, "t", "elem_type", "", m.SerializeToString(), feeds))
    assert r == {"cls": "ok", "detail": "onnx.reference differs in float16, agrees from the same values in float32"}, r
    no_half = h.make_model(h.make_graph([h.make_node("Relu", ["X"], ["Y"])], "g", [h.make_tensor_value_info("X", T.FLOAT, [2])],
                                        [h.make_tensor_value_info("Y", T.FLOAT, None)]), opset_imports=[h.make_opsetid("", 20)])
    assert fz._widened_reference(no_half, {"X": np.ones(2, np.float32)}) is None


class _Exit:
    """Unpickled in the worker, it ends the process the way an abort does (no reply)."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return (os._exit, (134,))


def test_an_abort_reports_what_its_worker_ran_before(tmp_path) -> None:
    """Aborts that did not recur when their case ran alone: the report carries the indices of
    the cases the dead worker's process ran before (its `history`), which `--replay` runs again
    in one process; a restarted worker starts a new history."""
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    w = fz.Worker(6 << 30, 0)
    try:
        for i in (7, 9):
            path = tmp_path / f"c{i}.pkl"
            path.write_bytes(pickle.dumps(fz.Case(i, "t", "feed", "", m, {"x": np.ones(2, np.float32)})))
            assert w.run(str(path), 60, i)["cls"] == "ok"
        bomb = tmp_path / "bomb.pkl"
        bomb.write_bytes(pickle.dumps(_Exit()))
        r = w.run(str(bomb), 60, 11)
        assert r["cls"] == "abort" and r["history"] == [7, 9] and "after 2 earlier case(s)" in r["detail"], r
        assert w.run(str(tmp_path / "c7.pkl"), 60, 7)["cls"] == "ok" and w.history == [7]
    finally:
        w.stop()


def test_robustness_doc_is_generated_from_the_kept_reports() -> None:
    """docs/robustness.md's generated section is what `--docs docs/robustness.md --from-json
    docs/fuzz_runs/*.json` writes: the reports of the runs are kept in the repository (each with
    the commit it ran on), so the section can be regenerated and checked, and a new run's report
    is added beside them."""
    root = Path(__file__).resolve().parents[2]
    reports = sorted((json.loads(p.read_text()) for p in (root / "docs" / "fuzz_runs").glob("seed*.json")), key=lambda r: r["seed"])
    assert reports and all(r.get("commit") for r in reports)
    text = (root / "docs" / "robustness.md").read_text()
    section = text[text.index(fz.DOCS_BEGIN) : text.index(fz.DOCS_END) + len(fz.DOCS_END)]
    assert section == fz.render_docs(reports), "run: python -m onnxc.tools.fuzz_compile --docs docs/robustness.md --from-json docs/fuzz_runs/*.json"
