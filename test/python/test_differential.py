"""Differential tests: onnxc's CPU results against onnxruntime (and `onnx.reference`) on whole models.

Models (built in `models.py` with seeded random weights, or shipped in the onnx wheel):
- a ResNet-style CNN, static batch 1 and a dynamic batch run at 2;
- a transformer encoder layer with a dynamic sequence length, in two variants (opset-20 Gelu with
  a [batch, 1, seq, seq] mask and constant reshape shapes; the Erf formula at opset 17 with a
  [batch, 1, 1, seq] key-padding mask and reshape shapes computed from Shape(x)), each compiled
  once and run at two sequence lengths;
- the nine `light` models of the onnx wheel with seeded random inputs. Their weights are one
  constant, so most of them output a uniform 0.001 from their final Softmax whatever the input;
  the Softmax's input (the logits) is compared too (`light_model(expose_logits=True)`), which
  still depends on every layer.

The comparison (`compare`): for onnxc's output `a` and the reference `b` (onnxruntime first; the
small models also against `onnx.reference.ReferenceEvaluator`, a second independent opinion),

    tau = max(1e-2 * max_j |b_j|, 1e-6)
    rel = max_i |a_i - b_i| / max(|b_i|, tau)
    abs = max_i |a_i - b_i|

and a case passes when rel <= 1e-4 (shapes equal, and a and b are non-finite at the same places
with the same values). So elements at least tau in size must agree to 1e-4 relative, and smaller
ones (where float32 cancellation makes a relative figure meaningless) to 1e-4 * tau absolute:
an absolute floor tied to the output's own scale, and to 1e-10 for an output that is all near 0.
Why 1e-2: every pair of implementations (onnxc, onnxruntime, onnx.reference) differs by about
1e-6 absolute on the encoder's LayerNormalization outputs (one float32 ulp at their scale of 4),
which on elements near 0 is a large relative figure: with tau at 1e-3 of the largest output,
onnxruntime and onnx.reference themselves reach 6.8e-5 (1.2e-4 with other inputs), and with
1e-4 onnxc reaches 2.4e-4; with 1e-2 every pair stays under 2.1e-5.

Each test prints its largest differences and onnxc's compile and run times, wall and CPU
(`pytest -s` or `-rP` shows them; `bench/differential_report.py` prints them all as a table).

A case that onnxc cannot lower yet is an `xfail(strict=True)` whose reason lists the problems of
onnxc's pre-check (`EXPECTED_PROBLEMS`); the test checks that the problems are exactly those, so a
marker goes stale loudly (a strict XPASS when everything lands, a failure naming the new set when
part of it does) and must then be edited to match.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import pytest

import models as M
from onnxc.compiler import CompiledModel, InputError, compile as onnxc_compile
from onnxc.errors import DiagnosticsError

pytest.importorskip("onnxruntime")
import onnxruntime as ort  # noqa: E402

RTOL = 1e-4
TAU_FRACTION = 1e-2
TAU_MIN = 1e-6


# ----------------------------------------------------------------------------------------------
# Comparison


@dataclass(frozen=True)
class Diff:
    """The largest differences between one output and its reference (see the module docstring)."""

    rel: float
    abs: float
    tau: float
    scale: float  # max |b|

    def __str__(self) -> str:
        return f"max rel {self.rel:.3g} (tau {self.tau:.3g}), max abs {self.abs:.3g}, max |ref| {self.scale:.3g}"


def compare(a: np.ndarray, b: np.ndarray, what: str) -> Diff:
    """Check `a` against reference `b`; raise AssertionError naming `what` unless rel <= RTOL."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape}, reference {b.shape}"
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype}, reference {b.dtype}"
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    fin_a, fin_b = np.isfinite(a64), np.isfinite(b64)
    bad = (fin_a != fin_b) | (~fin_b & ~(a64 == b64) & ~(np.isnan(a64) & np.isnan(b64)))
    assert not bad.any(), f"{what}: non-finite mismatch at {np.argwhere(bad)[:5].tolist()}: {a64[bad][:5]} vs {b64[bad][:5]}"
    if not fin_b.any():
        return Diff(0.0, 0.0, TAU_MIN, 0.0)
    d = np.abs(a64[fin_b] - b64[fin_b])
    mag = np.abs(b64[fin_b])
    scale = float(mag.max())
    tau = max(TAU_FRACTION * scale, TAU_MIN)
    ratio = d / np.maximum(mag, tau)
    diff = Diff(float(ratio.max()), float(d.max()), tau, scale)
    if diff.rel > RTOL:
        i = int(ratio.argmax())
        raise AssertionError(f"{what}: {diff} > {RTOL} at flat index {i}: onnxc {a64[fin_b][i]!r}, reference {b64[fin_b][i]!r}")
    return diff


def test_compare_rejects_and_accepts() -> None:
    """The comparison itself: what must pass passes, what must fail fails."""
    b = np.array([1.0, -2.0, 1e-9, 0.0], np.float32)
    assert compare(b.copy(), b, "same").rel == 0.0
    # 5e-5 relative on large elements, 1e-8 absolute on tiny ones (tau = 0.02): within bounds.
    ok = b * np.float32(1 + 5e-5) + np.float32(1e-8)
    assert compare(ok, b, "close").rel <= RTOL
    with pytest.raises(AssertionError, match="max rel"):
        compare(b * np.float32(1 + 3e-4), b, "relative")
    with pytest.raises(AssertionError, match="max rel"):
        compare(b + np.array([0, 0, 1e-5, 0], np.float32), b, "absolute floor")
    with pytest.raises(AssertionError, match="non-finite"):
        compare(np.array([np.nan, 1], np.float32), np.array([0, 1], np.float32), "nan")
    with pytest.raises(AssertionError, match="shape"):
        compare(b[:2], b, "shape")


# ----------------------------------------------------------------------------------------------
# References


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """An onnxruntime CPU session, one thread (deterministic, and polite to pytest-xdist)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3  # errors only
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def reference_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """`onnx.reference.ReferenceEvaluator`'s outputs in graph order."""
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feeds))


# ----------------------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    """One model, the feeds to run it with (several runs of one compiled model), and whether
    `onnx.reference` is fast enough to ask too."""

    name: str
    build: Callable[[], onnx.ModelProto]
    feeds: Callable[[onnx.ModelProto], list[dict[str, np.ndarray]]]
    second_opinion: bool = True
    # Extra checks on the compiled model after the differential runs (given the feeds).
    after: Callable[[CompiledModel, list[dict[str, np.ndarray]]], None] | None = None
    timings: dict[str, float] = field(default_factory=dict)


def _one_feed(seed: int = 0, **dims: int) -> Callable[[onnx.ModelProto], list[dict[str, np.ndarray]]]:
    return lambda model: [M.random_feeds(model, seed=seed, dims=dims)]


def _encoder_feeds(mask: str, seqs: tuple[int, ...] = (7, 12), batch: int = 2) -> Callable[[onnx.ModelProto], list[dict[str, np.ndarray]]]:
    def make(model: onnx.ModelProto) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng(1)
        return [
            {"x": rng.standard_normal((batch, s, M.D_MODEL)).astype(np.float32), "mask": M.attention_mask(rng, batch, s, mask)}
            for s in seqs
        ]

    return make


def _seq_mismatch_refused(compiled: CompiledModel, feeds: list[dict[str, np.ndarray]]) -> None:
    """The encoder's `seq` is one dim: x and mask that disagree on it are refused before native
    code runs (the runs above showed that two lengths work from one compiled model)."""
    short, long_ = feeds[0], feeds[-1]
    assert short["x"].shape[1] != long_["x"].shape[1]
    with pytest.raises(InputError, match="seq"):
        compiled.run({"x": short["x"], "mask": long_["mask"]})


# The light models, most expensive first (onnxc compile + run CPU seconds measured on 21 Nov:
# densenet121 76, inception_v2 20, shufflenet 19, inception_v1 15, vgg19 15, resnet50 12,
# squeezenet 7, zfnet512 2, bvlc_alexnet 2), so that pytest-xdist starts the long ones first.
LIGHT_ORDER = (
    "densenet121",
    "inception_v2",
    "shufflenet",
    "inception_v1",
    "vgg19",
    "resnet50",
    "squeezenet",
    "zfnet512",
    "bvlc_alexnet",
)
assert sorted(LIGHT_ORDER) == sorted(M.LIGHT_MODELS)

CASES: dict[str, Case] = {
    c.name: c
    for c in [
        # The light models are 224x224 ImageNet networks: onnx.reference would take minutes.
        Case(f"light_{n}", lambda n=n: M.light_model(n, expose_logits=True), _one_feed(), second_opinion=False)
        for n in LIGHT_ORDER
    ]
    + [
        Case("resnet_b1", lambda: M.resnet_stack(batch=1), _one_feed()),
        Case("resnet_dynbatch_b2", lambda: M.resnet_stack(batch="N"), _one_feed(N=2)),
        Case(
            "encoder_gelu_op",
            lambda: M.transformer_encoder("op", mask="full"),
            _encoder_feeds("full"),
            after=_seq_mismatch_refused,
        ),
        Case(
            "encoder_gelu_erf",
            lambda: M.transformer_encoder("erf", mask="keys", shape_from_input=True),
            _encoder_feeds("keys"),
            after=_seq_mismatch_refused,
        ),
    ]
}

# What onnxc's pre-check reports per case today (see `problem_keys`); empty = expected to pass.
# Keep in step with the lowering: the test fails when the reported set differs from this one.
EXPECTED_PROBLEMS: dict[str, tuple[str, ...]] = {}


_PROBLEM = re.compile(r"(?P<op>\w+) \(opset \d+, [\w.]+\)(?: node '.*?')?: (?P<reason>.*)$")


def problem_keys(err: DiagnosticsError) -> tuple[str, ...]:
    """The distinct problems of a pre-check error without locations and node names: the op type
    alone for "no lowering for <op>", else "<op>: <reason>" (the whole line if unparsed)."""
    keys = set()
    for line in err.problems:
        m = _PROBLEM.search(line)
        if m is None:
            keys.add(line)
        elif m["reason"] == f"no lowering for {m['op']}":
            keys.add(m["op"])
        else:
            keys.add(f"{m['op']}: {m['reason']}")
    return tuple(sorted(keys))


def test_problem_keys() -> None:
    """Pre-check lines reduce to op types (or op: reason) without locations and node names."""
    err = DiagnosticsError(
        "convert-onnx-to-linalg: 3 problem(s), nothing lowered:",
        [
            """loc("n1"("Conv")): Conv (opset 1, onnx.conv_v1) node 'n1': no lowering for Conv""",
            """loc("n2"("Conv")): Conv (opset 1, onnx.conv_v1) node 'n2': no lowering for Conv""",
            """loc("x"): LRN (opset 1, onnx.lrn_v1): input 0 is unranked (tensor<*xf32>); run onnx-shape-inference first""",
            "@main: argument 0 is unranked (tensor<*xf32>)",
        ],
    )
    assert problem_keys(err) == (
        "@main: argument 0 is unranked (tensor<*xf32>)",
        "Conv",
        "LRN: input 0 is unranked (tensor<*xf32>); run onnx-shape-inference first",
    )


def _params() -> list:
    params = []
    for name in CASES:
        expected = EXPECTED_PROBLEMS.get(name, ())
        marks = []
        if expected:
            marks.append(
                pytest.mark.xfail(strict=True, raises=DiagnosticsError, reason="not lowered yet: " + "; ".join(expected))
            )
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def compile_case(case: Case, model: onnx.ModelProto) -> CompiledModel:
    """onnxc.compile, timed; a pre-check failure must list exactly the expected problems."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        compiled = onnxc_compile(model, target="cpu")
    except DiagnosticsError as err:
        got = problem_keys(err)
        expected = EXPECTED_PROBLEMS.get(case.name, ())
        if got != expected:
            raise AssertionError(
                f"{case.name}: onnxc reports {got}, EXPECTED_PROBLEMS says {expected}: update the marker\n{err}"
            ) from err
        raise
    case.timings["compile_s"] = time.perf_counter() - t0
    case.timings["compile_cpu_s"] = time.process_time() - c0
    return compiled


def run_case(case: Case) -> list[tuple[str, str, Diff]]:
    """Compile the case once, run every feed, compare each output with onnxruntime (and with
    onnx.reference where asked); returns (run label, reference, Diff) per output and reference."""
    model = case.build()
    compiled = compile_case(case, model)
    sess = ort_session(model)
    names = [o.name for o in model.graph.output]
    results = []
    case.timings["run_s"] = case.timings["run_cpu_s"] = case.timings["ort_run_cpu_s"] = 0.0
    all_feeds = case.feeds(model)
    for k, feeds in enumerate(all_feeds):
        label = f"run {k} " + ",".join(f"{n}{list(v.shape)}" for n, v in feeds.items())
        t0, c0 = time.perf_counter(), time.process_time()
        got = compiled.run(feeds)
        case.timings["run_s"] += time.perf_counter() - t0
        case.timings["run_cpu_s"] += time.process_time() - c0
        c0 = time.process_time()
        refs = {"onnxruntime": sess.run(names, feeds)}
        case.timings["ort_run_cpu_s"] += time.process_time() - c0
        if case.second_opinion:
            refs["onnx.reference"] = reference_run(model, feeds)
        for ref_name, ref_outs in refs.items():
            for name, ref in zip(names, ref_outs):
                results.append((f"{label} {name}", ref_name, compare(got[name], ref, f"{case.name} {label} {name} vs {ref_name}")))
    if case.after is not None:
        case.after(compiled, all_feeds)
    return results


@pytest.mark.parametrize("case_name", _params())
def test_against_onnxruntime(case_name: str) -> None:
    """onnxc's outputs match onnxruntime's (and onnx.reference's) within RTOL (module docstring)."""
    case = CASES[case_name]
    for label, ref_name, diff in run_case(case):
        print(f"{case_name}: {label} vs {ref_name}: {diff}")
    t = case.timings
    print(
        f"{case_name}: onnxc compile {t['compile_s']:.2f} s ({t['compile_cpu_s']:.2f} s CPU), "
        f"run {t['run_s']:.3f} s ({t['run_cpu_s']:.3f} s CPU; onnxruntime's first run {t['ort_run_cpu_s']:.3f} s CPU)"
    )

