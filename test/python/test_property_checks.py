"""The backend suite's checks by property for random ops (`PROPERTY_CHECKS` in
tools/gen_conformance.py): they pass onnxc's outputs and outputs built from the spec's formulas, and
they fail on outputs that break a property (so a case reported as "checked by property" was
checked). The suite itself runs them through `test_backend.py`; this file checks the checker.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import onnxc.backend
from onnxc.tools import gen_conformance as g

# The node-test generators (numpy) warn about log(0) and overflowing casts while onnx builds the suite.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _bernoulli(p: np.ndarray, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(p.shape) < p).astype(np.float64)


def test_every_property_case_exists_and_has_a_family() -> None:
    names = {c.name for c in g.catalog()}
    assert set(g.PROPERTY_CHECKS) <= names
    assert set(g.PROPERTY_CHECKS.values()) == set(g.PROPERTY_TEXT)


def test_bernoulli_accepts_a_correct_draw_and_rejects_broken_ones() -> None:
    p = np.concatenate([np.zeros(50), np.ones(50), np.linspace(0.05, 0.95, 400)])
    y = _bernoulli(p, 0)
    g._check_bernoulli([p], [y])
    bad: list[tuple[np.ndarray, str]] = [
        (np.where(np.arange(p.size) == 7, 2.0, y), "other than 0 and 1"),
        (np.where(p == 0, 1.0, y), "a one where p = 0"),
        (np.where(p == 1, 0.0, y), "a zero where p = 1"),
        (np.where((p > 0) & (p < 1), 0.0, y), "number of ones"),  # a generator stuck at 0
    ]
    for out, match in bad:
        with pytest.raises(AssertionError, match=match):
            g._check_bernoulli([p], [out])


def _dropout(x: np.ndarray, ratio: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    mask = np.random.default_rng(seed).random(x.shape) >= ratio
    return (x * mask / np.float32(1 - ratio)).astype(x.dtype), mask


def test_dropout_accepts_the_spec_formula_and_rejects_broken_outputs() -> None:
    x = np.random.default_rng(1).standard_normal((20, 30)).astype(np.float32)
    r, t = np.float32(0.75), np.bool_(True)
    y, mask = _dropout(x, 0.75, 2)
    g._check_dropout([x, r, t], [y, mask])
    g._check_dropout([x, r, t], [y])  # no mask output: read off the non-zero outputs
    cases: list[tuple[list[np.ndarray], str]] = [
        ([x * mask, mask], "x \\* mask / \\(1 - ratio\\)"),  # forgot the scale
        ([y, ~mask], "x \\* mask / \\(1 - ratio\\)"),  # mask does not match the output
        ([np.zeros_like(y), np.zeros_like(mask)], "kept elements"),  # drops everything
        ([x / np.float32(0.25), np.ones_like(mask)], "kept elements"),  # keeps everything
        ([y, mask.astype(np.uint8)], "mask dtype"),
    ]
    for outs, match in cases:
        with pytest.raises(AssertionError, match=match):
            g._check_dropout([x, r, t], outs)
    g._check_dropout([x, r, np.bool_(False)], [x, np.ones_like(mask)])  # inference: the identity
    with pytest.raises(AssertionError, match="must be the input"):
        g._check_dropout([x, r, np.bool_(False)], [y, mask])


class _Rep:
    def __init__(self, outs: list[np.ndarray]) -> None:
        self.outs = outs

    def run(self, inputs: Any) -> list[np.ndarray]:
        return self.outs


class _FakeBackend:
    """Returns fixed outputs (to show what check_by_property rejects beyond the family checks)."""

    def __init__(self, *runs: list[np.ndarray]) -> None:
        self.runs = list(runs)

    def prepare(self, model: Any, device: str) -> _Rep:
        return _Rep(self.runs.pop(0))


def test_check_by_property_on_onnxc_and_on_wrong_outputs() -> None:
    for name, family in g.PROPERTY_CHECKS.items():
        g.check_by_property(name, family, onnxc.backend)  # what the suite runs
    case = g._node_case("test_bernoulli_seed")
    (x,) = case.data_sets[0][0]
    ones = np.ones(x.shape, np.float32)
    with pytest.raises(AssertionError, match="dtype float64, the reference float32"):
        g.check_by_property("test_bernoulli_seed_cpu", "Bernoulli", _FakeBackend([ones.astype(np.float64)], [ones.astype(np.float64)]))
    with pytest.raises(AssertionError, match="shape"):
        g.check_by_property("test_bernoulli_seed_cpu", "Bernoulli", _FakeBackend([ones[:3]], [ones[:3]]))
    draw = (x > 0.5).astype(np.float32)
    with pytest.raises(AssertionError, match="differs between two compilations"):
        g.check_by_property("test_bernoulli_seed_cpu", "Bernoulli", _FakeBackend([draw], [1 - draw]))


def test_the_report_marks_them() -> None:
    cases = g.catalog()
    text = g.render_conformance(cases, {}, {})
    assert "## Checked by property (random)" in text
    for name in g.PROPERTY_CHECKS:
        assert f"| `{name}` |" in text
    assert "| Bernoulli † |" in text
    failing = {n: ("xfail", "result: x") for n in g.PROPERTY_CHECKS}
    assert "## Checked by property" not in g.render_conformance(cases, failing, {})  # a failing one is not listed as checked


def test_explanations_replace_only_the_failure_they_explain() -> None:
    names = {c.name for c in g.catalog()}
    assert set(g.EXPLANATIONS) <= names
    name = "test_split_to_sequence_1_cpu"
    stage, marker, sentence = g.EXPLANATIONS[name]
    assert g.explain(name, stage, f"output 'seq': {marker}") == sentence
    assert g.explain(name, "lower", f"output 'seq': {marker}") == f"output 'seq': {marker}"  # another stage
    assert g.explain(name, stage, "a new error") == "a new error"  # another failure shows itself
    assert g.explain("test_abs_cpu", "result", "wrong result") == "wrong result"
    cases = [c for c in g.catalog() if c.name in (name, "test_abs_cpu")]
    text = g.render_xfails(cases, {name: {"status": "fail", "stage": stage, "reason": f"output 'seq': {marker}"}, "test_abs_cpu": {"status": "pass"}}, {})
    assert f"{stage}: {sentence}" in text and "test_abs_cpu" not in text
