"""Run the ONNX backend test suite on onnxc and write what passes: the conformance report, the op
support table and the expected-failure list, from one run so that they always agree.

    python -m onnxc.tools.gen_conformance                # full run on both cores, rewrite everything
    python -m onnxc.tools.gen_conformance --only 'conv'  # re-run matching cases, keep the rest
    python -m onnxc.tools.gen_conformance --docs-only    # rewrite the docs from the existing list
    python -m onnxc.tools.gen_conformance --check        # cheap: are the three files up to date?

What it writes (all with a DO-NOT-EDIT header):

- `test/python/backend_xfails.py`: `XFAILS` (test name pattern -> reason, applied as strict
  expected failures by `test/python/test_backend.py`), `EXCLUDES` (cases that crash the process or
  run past the time limit; not run at all, each with its reason) and `RUN_INFO` (when, how long).
- `docs/conformance.md`: passes per group and per op, the overall count and percentage, and every
  failing case with the first line of its reason; beside the CPU, a column per GPU target (Vulkan
  run, CUDA PTX assembled, CUDA run) over the float node cases, counted from the expected-failure
  lists of `test_gpu_backend_vulkan.py` and `test_gpu_backend_cuda.py` (`gpu_columns`), so that a
  change to either list needs `--docs-only` as a change to this one does.
- `docs/ops.md`: per op and version of the dialect's op table: imported (the dialect has the op),
  verified (node tests of that version get through import and verification), lowered (the
  lowering registry `onnxc.transforms.lowering.common.PATTERNS` has a pattern for it), tested
  (node tests of that version passing).

How the run works: the parent builds the suite once with `onnx.backend.test.BackendTest` (no
expected failures applied) and forks one worker per job; workers run the cases the parent hands
them one at a time and report status, failure stage and reason as JSON lines. The parent forks a
new worker when one dies (an MLIR assertion aborts the process) or runs past `--timeout`, and
records that case as a crash or timeout with the native error line from the worker's stderr; those
become `EXCLUDES`, because under pytest they would take the whole process down.

`--check` never runs the suite: it rebuilds both documents from `backend_xfails.py`, the op table
and the lowering registry and compares them with the files; it also checks that every XFAILS and
EXCLUDES entry names a case of the suite. The expensive truth check is the test suite itself:
expected failures are strict there (an unexpected pass fails), so the list cannot rot.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import re
import select
import sys
import tempfile
import time
import traceback
import unittest
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

# --------------------------------------------------------------------------------------- layout

REPO = Path(__file__).resolve().parents[1]
XFAILS_PATH = REPO / "test" / "python" / "backend_xfails.py"
CONFORMANCE_PATH = REPO / "docs" / "conformance.md"
OPS_PATH = REPO / "docs" / "ops.md"
COMMAND = "python -m onnxc.tools.gen_conformance"

#: Report groups, in report order: what a case is, from the onnx loader's kind and its name.
GROUPS: tuple[str, ...] = ("node", "node-expanded", "simple", "pytorch-converted", "pytorch-operator", "light")
_KIND_GROUP = {"simple": "simple", "pytorch-converted": "pytorch-converted", "pytorch-operator": "pytorch-operator", "real": "light"}

#: Failure stages, in pipeline order. A case's stage is where it stopped.
#: `error`: another OnnxcError; `bug`: an exception that is not an OnnxcError escaped.
STAGES: tuple[str, ...] = ("import", "onnx-passes", "lower", "codegen", "run", "result", "error", "bug", "crash", "timeout", "skip")

#: Seconds a case may take in a generator run before it counts as a timeout (and is excluded).
DEFAULT_TIMEOUT_S = 240.0
#: The test suite's safety net against hangs: longer than DEFAULT_TIMEOUT_S, so a case the
#: generator kept is never killed for being a little slower on another machine.
PYTEST_TIME_LIMIT_S = 600.0


def _check_checkout() -> None:
    if not (REPO / "test" / "python").is_dir():
        raise SystemExit(f"gen_conformance works in an onnxc checkout; {REPO} has no test/python")


# ------------------------------------------------------------------------------------- the suite


@dataclasses.dataclass(frozen=True)
class Case:
    """One case of the suite on the CPU: its unittest name, class, group and the ops it tests."""

    name: str  # test_abs_cpu
    test_class: str  # OnnxBackendNodeModelTest
    group: str
    ops: tuple[tuple[str, str, int], ...] = ()  # (domain, op_type, opset) of the op(s) under test


def _load_expectations(path: Path = XFAILS_PATH) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """XFAILS, EXCLUDES and RUN_INFO of a backend_xfails.py (empty when the file does not exist)."""
    if not path.exists():
        return {}, {}, {}
    spec = importlib.util.spec_from_file_location("_onnxc_backend_xfails", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(getattr(mod, "XFAILS", {})), dict(getattr(mod, "EXCLUDES", {})), dict(getattr(mod, "RUN_INFO", {}))


def _with_time_limit(fn: Any, seconds: float) -> Any:
    """Wrap a test method so that a case running past `seconds` ends the process (faulthandler
    prints where it hung): a hung native call cannot be interrupted any other way, and under
    pytest-xdist the dead worker is reported as a failure of that case and replaced."""
    import faulthandler
    import functools

    @functools.wraps(fn)  # keeps unittest's skip / expected-failure markers
    def limited(*args: Any, **kwargs: Any) -> Any:
        faulthandler.dump_traceback_later(seconds, exit=True)
        try:
            return fn(*args, **kwargs)
        finally:
            faulthandler.cancel_dump_traceback_later()

    return limited


# ------------------------------------------------------------------ cases checked by property

#: Cases whose expected outputs are one draw of numpy's random generator (`np.random.binomial`,
#: `np.random.uniform` under `np.random.seed(0)`): no compiler reproduces that stream, and the
#: spec promises no particular numbers even for a seeded op. These cases run onnxc and check what
#: the spec does fix instead of comparing values (`check_by_property`); the report lists them as
#: passing "checked by property (random)". Case name -> the op's property family.
PROPERTY_CHECKS: dict[str, str] = {
    "test_bernoulli_cpu": "Bernoulli",
    "test_bernoulli_double_cpu": "Bernoulli",
    "test_bernoulli_double_expanded_cpu": "Bernoulli",
    "test_bernoulli_expanded_cpu": "Bernoulli",
    "test_bernoulli_seed_cpu": "Bernoulli",
    "test_bernoulli_seed_expanded_cpu": "Bernoulli",
    "test_training_dropout_cpu": "Dropout",
    "test_training_dropout_default_cpu": "Dropout",
    "test_training_dropout_default_mask_cpu": "Dropout",
    "test_training_dropout_mask_cpu": "Dropout",
}

#: What is checked, per family (the report prints these sentences).
PROPERTY_TEXT: dict[str, str] = {
    "Bernoulli": "every output's dtype and shape are the reference's; every value is 0 or 1, 0 where p = 0 and 1 "
    "where p = 1; the number of ones is within 6 standard deviations of sum(p); a seeded op gives the same "
    "output from two separate compilations",
    "Dropout": "every output's dtype and shape are the reference's; the mask is boolean; output = x * mask / (1 - ratio) "
    "(without a mask output: every non-zero output is x / (1 - ratio)); the number of kept elements is within 6 "
    "standard deviations of n * (1 - ratio); the seeded op gives the same outputs from two separate compilations",
}

#: Sigmas a count may stray from its expectation (a correct generator fails about once in 5e8 runs).
_SIGMAS = 6.0


def _node_case(name: str) -> Any:
    """The onnx loader's TestCase of node test `name` (without `_cpu`); onnx builds the node
    tests once per process, so this is a lookup."""
    from onnx.backend.test.loader import load_model_tests

    for t in load_model_tests(kind="node"):
        if t.name == name:
            return t
    raise KeyError(f"no node test named {name}")


def _has_seed(graph: Any) -> bool:
    """Whether a node of `graph` (or of its subgraphs) has a `seed` attribute."""
    for node in graph.node:
        for a in node.attribute:
            if a.name == "seed":
                return True
            if a.g.node and _has_seed(a.g):
                return True
    return False


def _close_count(count: float, mean: float, var: float, what: str) -> None:
    bound = _SIGMAS * var**0.5 + 1.0
    assert abs(count - mean) <= bound, f"{what}: {count:g}, expected {mean:g} +- {bound:.3g} ({_SIGMAS:g} sigma)"


def _check_bernoulli(inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
    import numpy as np

    p = np.asarray(inputs[0], dtype=np.float64)
    y = np.asarray(outputs[0])
    yf = y.astype(np.float64)
    assert np.all((yf == 0) | (yf == 1)), f"values other than 0 and 1: {np.unique(yf)[:8]}"
    assert np.all(yf[p == 0] == 0), "a one where p = 0"
    assert np.all(yf[p == 1] == 1), "a zero where p = 1"
    _close_count(float(yf.sum()), float(p.sum()), float((p * (1 - p)).sum()), "number of ones")


def _check_dropout(inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
    import numpy as np

    x = np.asarray(inputs[0])
    ratio = float(np.asarray(inputs[1])) if len(inputs) > 1 else 0.5
    training = bool(np.asarray(inputs[2])) if len(inputs) > 2 else False
    y = np.asarray(outputs[0])
    if len(outputs) > 1:
        assert outputs[1].dtype == np.bool_, f"mask dtype {outputs[1].dtype}, not bool"
        mask = np.asarray(outputs[1])
    else:
        mask = y != 0
    if not training or ratio == 0:
        np.testing.assert_array_equal(y, x, err_msg="not training (or ratio 0): output must be the input")
        assert np.all(mask[x != 0]), "not training (or ratio 0): every element is kept"
        return
    assert ratio < 1, f"ratio {ratio} >= 1 is not a dropout the spec defines"
    scale = np.float64(1.0) / (1.0 - ratio)
    want = np.where(mask, x.astype(np.float64) * scale, 0.0)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-6, atol=0, err_msg="output != x * mask / (1 - ratio)")
    nz = x != 0  # where x is 0 the mask cannot be read off an output without one
    n = int(nz.sum())
    _close_count(float(mask[nz].sum()), n * (1 - ratio), n * ratio * (1 - ratio), "kept elements")


_FAMILY_CHECKS = {"Bernoulli": _check_bernoulli, "Dropout": _check_dropout}


def check_by_property(name: str, family: str, backend: Any) -> None:
    """Run suite case `name` on `backend` (`onnxc.backend`) and check `PROPERTY_TEXT[family]`
    instead of comparing with the reference's draw; an AssertionError says which property failed."""
    import numpy as np
    import onnx.numpy_helper

    case = _node_case(name.removesuffix("_cpu"))
    seeded = _has_seed(case.model.graph)
    rep = backend.prepare(case.model, "CPU")
    again = backend.prepare(case.model, "CPU") if seeded else None
    for inputs, refs in case.data_sets:
        inputs = [onnx.numpy_helper.to_array(a) if isinstance(a, onnx.TensorProto) else a for a in inputs]
        refs = [onnx.numpy_helper.to_array(a) if isinstance(a, onnx.TensorProto) else a for a in refs]
        outs = [np.asarray(o) for o in rep.run(inputs)]
        assert len(outs) == len(refs), f"property check (random): {len(outs)} outputs, the reference has {len(refs)}"
        for i, (o, r) in enumerate(zip(outs, refs)):
            assert o.dtype == r.dtype, f"property check (random): output {i} has dtype {o.dtype}, the reference {r.dtype}"
            assert o.shape == r.shape, f"property check (random): output {i} has shape {o.shape}, the reference {r.shape}"
        try:
            _FAMILY_CHECKS[family](inputs, outs)
        except AssertionError as exc:
            raise AssertionError(f"property check (random) of {family}: {exc}") from None
        if again is not None:
            for i, (o, o2) in enumerate(zip(outs, again.run(inputs))):
                np.testing.assert_array_equal(o, np.asarray(o2), err_msg=f"property check (random): seeded output {i} differs between two compilations")


def _use_property_checks(bt: Any) -> None:
    """Replace the value comparison of the `PROPERTY_CHECKS` cases of `bt` by `check_by_property`."""
    items = getattr(bt, "_test_items", None)  # private; if it changes, these cases compare values again
    if not isinstance(items, dict):
        return
    for category in items.values():
        for name, family in PROPERTY_CHECKS.items():
            if name in category:
                category[name].func = _property_test(name, family, bt.backend)


def _property_test(name: str, family: str, backend: Any) -> Any:
    def test(test_self: unittest.TestCase) -> None:  # noqa: ARG001 - unittest's self
        check_by_property(name, family, backend)

    test.__name__ = name
    test.__doc__ = f"{name}: checked by property (random): {PROPERTY_TEXT[family]}."
    return test


def build_backend_test(
    parent_module: str,
    xfails: Mapping[str, str] | None = None,
    excludes: Mapping[str, str] | None = None,
    time_limit_s: float | None = None,
) -> Any:
    """`onnx.backend.test.BackendTest(onnxc.backend, parent_module)` restricted to the CPU.

    `xfails`/`excludes` map test name patterns (regular expressions, `re.search`) to reasons and
    are applied with `BackendTest.xfail` / `.exclude`. The CUDA copies of every case are dropped
    rather than skipped (onnxc's backend supports only the CPU), so counts are of real cases.
    Light models write their generated test data under ONNX_HOME, which defaults to a folder in
    the temporary directory here so that runs never touch ~/.onnx.
    """
    import onnx.backend.test

    import onnxc.backend

    os.environ.setdefault("ONNX_HOME", os.path.join(tempfile.gettempdir(), "onnxc-onnx-home"))
    import warnings

    with warnings.catch_warnings():
        # The node-test generators compute their expected outputs with numpy and warn about
        # overflowing casts and log(0): noise, not about onnxc.
        warnings.simplefilter("ignore", RuntimeWarning)
        bt = onnx.backend.test.BackendTest(onnxc.backend, parent_module)
    items = getattr(bt, "_test_items", None)  # private; if it changes, CUDA cases stay as skips
    if isinstance(items, dict):
        for category in items.values():
            for name in [n for n in category if not n.endswith("_cpu")]:
                del category[name]
    _use_property_checks(bt)  # random ops: what the spec fixes, not numpy's draw
    for pattern in (excludes or {}):
        bt.exclude(pattern)
    for pattern in (xfails or {}):
        bt.xfail(pattern)
    if time_limit_s:
        cases = bt.test_cases
        for cls in cases.values():
            for attr in [a for a in vars(cls) if a.startswith("test_")]:
                setattr(cls, attr, _with_time_limit(getattr(cls, attr), time_limit_s))
        bt._onnxc_cases = cases  # noqa: SLF001 - test_cases builds new classes on every access
    return bt


def suite_cases(bt: Any) -> dict[str, type[unittest.TestCase]]:
    """The TestCase classes of a suite from `build_backend_test` (the wrapped ones if wrapped)."""
    return getattr(bt, "_onnxc_cases", None) or bt.test_cases


def _node_ops(model: Any) -> tuple[tuple[str, str, int], ...]:
    opsets = {(o.domain if o.domain != "ai.onnx" else ""): o.version for o in model.opset_import}
    seen: list[tuple[str, str, int]] = []
    for node in model.graph.node:
        dom = node.domain if node.domain != "ai.onnx" else ""
        key = (dom, node.op_type, opsets.get(dom, 0))
        if key not in seen:
            seen.append(key)
    return tuple(seen)


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def catalog() -> list[Case]:
    """Every CPU case of the suite with its group and, for node tests, the op(s) it tests.

    A node test's ops are the top-level nodes of its model; an `_expanded` test (the op's function
    body) is counted for the op of the test it expands.
    """
    import onnx
    from onnx.backend.test.loader import load_model_tests

    cases: list[Case] = []
    node_ops: dict[str, tuple[tuple[str, str, int], ...]] = {}
    nodes = load_model_tests(kind="node")
    for t in nodes:
        if not _EXPANDED.search(t.name) and t.model is not None:
            node_ops[t.name] = _node_ops(t.model)
    for t in nodes:
        expanded = bool(_EXPANDED.search(t.name))
        base = _EXPANDED.sub("", t.name)
        ops = node_ops.get(base, ()) if expanded else node_ops.get(t.name, ())
        cases.append(Case(t.name + "_cpu", "OnnxBackendNodeModelTest", "node-expanded" if expanded else "node", ops))
    onnx_root = Path(onnx.__file__).resolve().parent.parent
    for kind, cls in (("simple", "Simple"), ("pytorch-converted", "PyTorchConverted"), ("pytorch-operator", "PyTorchOperator"), ("real", "Real")):
        for t in load_model_tests(kind=kind):
            cases.append(Case(t.name + "_cpu", f"OnnxBackend{cls}ModelTest", _KIND_GROUP[kind]))
    return cases


# ------------------------------------------------------------------------------------ classifying


def _strip_location(line: str) -> str:
    """Drop a leading `loc(...)` (with nested parentheses) and the `: ` after it."""
    line = line.strip()
    if not line.startswith("loc("):
        return line
    depth = 0
    for i, ch in enumerate(line):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return line[i + 1 :].lstrip(": ").strip()
    return line


def _one_line(text: str, limit: int = 240) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _assertion_reason(msg: str) -> str:
    """The useful lines of a numpy assertion: what differs and by how much, not the arrays."""
    keep: list[str] = []
    for line in msg.splitlines():
        s = line.strip()
        if not s:
            continue
        if re.match(r"^(x|y|ACTUAL|DESIRED):", s) or s.startswith(("Max relative", "First ", "Mismatch at")):
            if s.startswith(("ACTUAL: dtype", "DESIRED: dtype")):
                keep.append(s)
                continue
            break
        keep.append(s)
    return "; ".join(keep) or "assertion failed"


def classify(exc: BaseException) -> tuple[str, str]:
    """(stage, reason) of a case that raised `exc`."""
    from onnxc.errors import OnnxcError

    name = type(exc).__name__
    module = type(exc).__module__ or ""
    msg = str(exc)
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    if isinstance(exc, AssertionError):
        return "result", "wrong result: " + _assertion_reason(msg)
    problems = getattr(exc, "problems", None)
    headline = getattr(exc, "headline", lines[0] if lines else "")
    detail = ""
    if problems:
        detail = _strip_location(problems[0]) + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
    elif len(lines) > 1:
        # MLIR pass failures say "Failure while executing pass pipeline:" and then the
        # diagnostic ("loc(...): error: what"): that diagnostic is the reason.
        errors = [ln.split("error:", 1)[1].strip() for ln in lines[1:] if "error:" in ln]
        detail = errors[0] if errors else _strip_location(lines[1])
    # "convert-onnx-to-linalg: 3 problem(s), nothing lowered:" -> "convert-onnx-to-linalg"; the
    # count is in the "(+N more)" suffix already.
    tool, sep, rest = headline.partition(": ")
    if sep and re.match(r"^\d+ [\w ]+\(s\)", rest):
        headline = tool
    text = f"{headline.rstrip(':')}: {detail}" if detail else headline
    if name in ("ModelImportError", "ImportError_"):
        stage = "import"
    elif "convert-onnx-to-linalg" in msg or name == "LoweringError":
        stage = "lower"
    elif name in ("PassFailure", "PipelineError", "PipelineFailure"):
        stage = "onnx-passes" if any(p in msg for p in ("onnx-upgrade", "onnx-shape", "onnx-constant", "onnx-canonical")) else "codegen"
    elif name in ("CpuTargetError", "CpuPipelineError") or module.startswith("mlir"):
        stage = "codegen"
    elif name in ("InputError", "ArgumentError"):
        stage = "run"
    elif module.startswith("onnxc.transforms.lowering"):
        stage = "lower"
    elif module.startswith("onnxc.transforms"):
        stage = "onnx-passes"
    elif isinstance(exc, OnnxcError):
        stage = "error"
    else:
        # Anything that is not an onnxc error escaping is a bug in onnxc (or the backend).
        return "bug", _one_line(f"{name}: {lines[0] if lines else ''}")
    return stage, _one_line(text)


_NATIVE_ERROR = re.compile(r"(Assertion .* failed|LLVM ERROR:.*|terminate called.*|what\(\): .*|Fatal Python error: \w+.*|error: .*)")


def _native_reason(stderr_tail: str) -> str:
    """The native error line of a dead worker's stderr, with the innermost Python frame when
    faulthandler printed one (it names the onnxc function that was running)."""
    lines = stderr_tail.splitlines()
    for i, line in enumerate(lines):
        m = _NATIVE_ERROR.search(line)
        if m:
            text = m.group(1)
            for later in lines[i + 1 :]:
                f = re.search(r'File "([^"]+)", line (\d+) in (\S+)', later)
                if f:
                    text += f" in {f.group(3)} ({Path(f.group(1)).name}:{f.group(2)})"
                    break
            return _one_line(text, 200)
    return "no message on stderr"


# -------------------------------------------------------------------------------------- the worker


class _Recorder(unittest.TestResult):
    """Keeps the exception itself (the text form loses the type and the DiagnosticsError lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.exc: BaseException | None = None
        self.skip_reason: str | None = None

    def addError(self, test: Any, err: Any) -> None:  # noqa: N802 - unittest API
        super().addError(test, err)
        self.exc = err[1]

    def addFailure(self, test: Any, err: Any) -> None:  # noqa: N802 - unittest API
        super().addFailure(test, err)
        self.exc = err[1]

    def addSkip(self, test: Any, reason: str) -> None:  # noqa: N802 - unittest API
        super().addSkip(test, reason)
        self.skip_reason = reason


def run_case(cls: type[unittest.TestCase], name: str) -> dict[str, Any]:
    """Run one case; return {status: pass|fail|skip, stage, reason, seconds}."""
    rec = _Recorder()
    t0 = time.perf_counter()
    cls(name).run(rec)
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - t0, 3)}
    if rec.exc is not None:
        try:
            stage, reason = classify(rec.exc)
        except Exception:  # noqa: BLE001 - a classifier bug must not lose the case
            stage, reason = "error", _one_line(traceback.format_exception_only(type(rec.exc), rec.exc)[-1])
        out.update(status="fail", stage=stage, reason=reason)
    elif rec.skip_reason is not None:
        out.update(status="skip", reason=rec.skip_reason)
    else:
        out.update(status="pass")
    return out


def _suite_classes() -> dict[str, type[unittest.TestCase]]:
    """case name -> its TestCase class, for the suite with no expectations applied."""
    classes: dict[str, type[unittest.TestCase]] = {}
    for cls in suite_cases(build_backend_test("onnxc_conformance")).values():
        for attr in vars(cls):
            if attr.startswith("test_"):
                classes[attr] = cls
    return classes


def _worker_loop(classes: Mapping[str, type[unittest.TestCase]], cmd_fd: int, res_fd: int, err_path: str) -> None:
    """A forked worker: run the case names read from `cmd_fd`, write one JSON line each to `res_fd`.
    What the cases print goes to `err_path` (with markers, so a crash can be attributed)."""
    err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(err, 1)
    os.dup2(err, 2)
    sys.stdout = sys.stderr = open(err, "w", buffering=1, closefd=False)  # noqa: SIM115
    import faulthandler

    faulthandler.enable(file=sys.stderr)  # a segfault then says where it happened
    cmds = os.fdopen(cmd_fd, "r", buffering=1)
    res = os.fdopen(res_fd, "w", buffering=1)
    for line in cmds:
        name = line.strip()
        if not name:
            continue
        print(f"=== START {name}", flush=True)
        if name not in classes:
            out: dict[str, Any] = {"status": "fail", "stage": "error", "reason": "no such case in the suite", "seconds": 0.0}
        else:
            out = run_case(classes[name], name)
        out["name"] = name
        res.write(json.dumps(out) + "\n")


# -------------------------------------------------------------------------------------- the parent


@dataclasses.dataclass
class _Worker:
    pid: int
    cmd: Any  # text file writing case names
    res_fd: int
    err_path: str
    buf: str = ""
    case: str | None = None
    started: float = 0.0
    err_offset: int = 0


def _spawn(classes: Mapping[str, type[unittest.TestCase]], err_dir: str, n: int) -> _Worker:
    """Fork a worker. The suite is built once in the parent (4-5 s of node-test generation), so a
    worker replacing a crashed one starts at once; the parent itself never compiles anything, so
    no MLIR context or thread exists at fork time."""
    err_path = os.path.join(err_dir, f"worker{n}.err")
    cmd_r, cmd_w = os.pipe()
    res_r, res_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the worker
        code = 0
        try:
            os.close(cmd_w)
            os.close(res_r)
            _worker_loop(classes, cmd_r, res_w, err_path)
        except BaseException:  # noqa: BLE001 - report, then leave without running the parent's code
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(cmd_r)
    os.close(res_w)
    return _Worker(pid, os.fdopen(cmd_w, "w", buffering=1), res_r, err_path)


def _stderr_since(w: _Worker) -> str:
    try:
        with open(w.err_path, errors="replace") as f:
            f.seek(w.err_offset)
            return f.read()[-20000:]
    except OSError:
        return ""


def _exit_text(pid: int) -> str:
    """How a dead worker ended (` by SIGSEGV`, ` with status 1`), reaping it."""
    import signal

    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return ""
    if os.WIFSIGNALED(status):
        try:
            return f" by {signal.Signals(os.WTERMSIG(status)).name}"
        except ValueError:
            return f" by signal {os.WTERMSIG(status)}"
    return f" with status {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else ""


def _reap(w: _Worker) -> None:
    import signal

    try:
        os.kill(w.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(w.pid, 0)
    except ChildProcessError:
        pass
    for f in (w.cmd,):
        try:
            f.close()
        except OSError:
            pass
    try:
        os.close(w.res_fd)
    except OSError:
        pass


def run_suite(names: Sequence[str], jobs: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S, progress: TextIO | None = sys.stderr) -> dict[str, dict[str, Any]]:
    """Run `names` on `jobs` forked workers; return name -> result (see `run_case`), with crashes
    and timeouts recorded as failures of stage `crash` / `timeout`."""
    classes = _suite_classes()
    pending = list(names)
    results: dict[str, dict[str, Any]] = {}
    err_dir = tempfile.mkdtemp(prefix="onnxc-conformance-")
    spawned = 0

    def new_worker() -> _Worker:
        nonlocal spawned
        w = _spawn(classes, err_dir, spawned)
        spawned += 1
        assign(w)
        return w

    def assign(w: _Worker) -> None:
        if pending:
            w.case = pending.pop(0)
            w.started = time.monotonic()
            w.err_offset = os.path.getsize(w.err_path) if os.path.exists(w.err_path) else 0
            try:
                w.cmd.write(w.case + "\n")
                w.cmd.flush()
            except BrokenPipeError:
                pass  # it died; the EOF on its result pipe records the crash
        else:
            w.case = None

    def retire(w: _Worker, status: str) -> None:
        if w.case is not None:
            if status == "timeout":
                reason = f"ran past the {timeout_s:.0f} s limit"
            else:
                reason = f"the process died{_exit_text(w.pid)} ({_native_reason(_stderr_since(w))})"
            results[w.case] = {"name": w.case, "status": "fail", "stage": status, "reason": reason, "seconds": round(time.monotonic() - w.started, 3)}
            w.case = None
        _reap(w)

    workers = [new_worker() for _ in range(max(1, min(jobs, len(pending))))]
    t_start = last_report = time.monotonic()
    while len(results) < len(names):
        by_fd = {w.res_fd: w for w in workers}
        readable, _, _ = select.select(list(by_fd), [], [], 1.0)
        for fd in readable:
            w = by_fd[fd]
            chunk = os.read(fd, 65536).decode(errors="replace")
            if not chunk:  # EOF: the worker died
                retire(w, "crash")
                workers[workers.index(w)] = new_worker()
                continue
            w.buf += chunk
            while "\n" in w.buf:
                line, w.buf = w.buf.split("\n", 1)
                try:
                    res = json.loads(line)
                except json.JSONDecodeError:
                    continue
                results[res["name"]] = res
                assign(w)
        now = time.monotonic()
        for i, w in enumerate(workers):
            if w.case is not None and now - w.started > timeout_s:
                retire(w, "timeout")
                workers[i] = new_worker()
        if progress is not None and now - last_report > 30:
            last_report = now
            fails = sum(1 for r in results.values() if r["status"] != "pass")
            print(f"  {len(results)}/{len(names)} cases, {fails} failing, {now - t_start:.0f} s", file=progress, flush=True)
    for w in workers:
        _reap(w)  # idle; a sibling may hold a copy of its command pipe, so EOF would not reach it
    return results


# ------------------------------------------------------------------------------------ the outputs


def _pattern(name: str) -> str:
    return "^" + re.escape(name) + "$"


def _name_of(pattern: str) -> str:
    """The case name of a generated `^name$` pattern (hand-written patterns are returned as is)."""
    if pattern.startswith("^") and pattern.endswith("$"):
        return re.sub(r"\\(.)", r"\1", pattern[1:-1])
    return pattern


def failing_cases(cases: Sequence[Case], xfails: Mapping[str, str], excludes: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """name -> (kind: xfail|exclude, reason) for every case an entry matches."""
    out: dict[str, tuple[str, str]] = {}
    entries = [(p, "exclude", r) for p, r in excludes.items()] + [(p, "xfail", r) for p, r in xfails.items()]
    # Generated entries are exact names (`^name$`): look those up, search only the others.
    exact: dict[str, tuple[str, str]] = {}
    searched: list[tuple[re.Pattern[str], str, str]] = []
    for p, kind, reason in entries:
        if p.startswith("^") and p.endswith("$") and re.escape(_name_of(p)) == p[1:-1]:
            exact.setdefault(_name_of(p), (kind, reason))
        else:
            searched.append((re.compile(p), kind, reason))
    for case in cases:
        if case.name in exact:
            out[case.name] = exact[case.name]
            continue
        for rx, kind, reason in searched:
            if rx.search(case.name):
                out[case.name] = (kind, reason)
                break
    return out


def _stage_of(reason: str) -> str:
    head = reason.split(":", 1)[0]
    return head if head in STAGES else "error"


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.1f}%" if d else "-"


# ------------------------------------------------------------------ reasons that need a sentence

#: Failing cases whose first error line does not say why the case cannot pass: case name ->
#: (stage, a piece of the raw first line, the explanation written into backend_xfails.py instead).
#: An explanation is used only while the case still fails at that stage with that raw line, so a
#: case that starts failing differently shows its new error, not a stale sentence.
EXPLANATIONS: dict[str, tuple[str, str, str]] = {
    "test_affine_grid_2d_align_corners_expanded_cpu": ("lower", "Squeeze without axes of a tensor with dynamic dims", "data-dependent rank: the expanded function takes N from the run-time `size` input (Expand to [size[0], 2, 3], then GatherElements on theta), so a later Squeeze without axes drops that dim or not depending on whether size[0] == 1; the rank of every value after it is decided at run time, which a statically ranked lowering cannot represent (the AffineGrid op itself lowers: test_affine_grid_2d*_cpu pass)"),
    "test_affine_grid_2d_expanded_cpu": ("lower", "Squeeze without axes of a tensor with dynamic dims", "data-dependent rank: the expanded function takes N from the run-time `size` input (Expand to [size[0], 2, 3], then GatherElements on theta), so a later Squeeze without axes drops that dim or not depending on whether size[0] == 1; the rank of every value after it is decided at run time, which a statically ranked lowering cannot represent (the AffineGrid op itself lowers: test_affine_grid_2d*_cpu pass)"),
    "test_affine_grid_3d_align_corners_expanded_cpu": ("lower", "the branches yield ranks 0 and 1", "data-dependent rank: with align_corners the expanded function computes each step with an If on the run-time size (D == 1) whose branches yield a scalar and a 1-D tensor, so the rank of the result is decided at run time, which a statically ranked lowering cannot represent (the AffineGrid op itself lowers: test_affine_grid_3d*_cpu pass)"),
    "test_dft_inverse_cpu": ("result", "Mismatched elements: 10 / 200", "the expected output holds float32 FFT rounding (numpy 2 runs pocketfft on complex64: 1.9e-7 where the exact inverse is 0, on the Nyquist bin), above the case's atol 1e-7; onnxc computes the DFT in f64 and is within 4e-15 of the exact value"),
    "test_dft_inverse_opset19_cpu": ("result", "Mismatched elements: 10 / 200", "the expected output holds float32 FFT rounding (numpy 2 runs pocketfft on complex64: 1.9e-7 where the exact inverse is 0, on the Nyquist bin), above the case's atol 1e-7; onnxc computes the DFT in f64 and is within 4e-15 of the exact value"),
    # Sequences and optionals whose structure is decided at run time: onnx-eliminate-sequences turns
    # sequences of known structure into tensors; onnxc has no run-time sequence representation
    # (a list of tensors of run-time length and per-element shapes, in the generated code and at
    # the compiled function's boundary).
    "test_loop13_seq_cpu": ("onnx-passes", "a sequence whose length is not known when compiling", "output 'seq_res': run-time sequence length: the Loop's trip count and condition are graph inputs and every iteration inserts into the carried sequence, so the output holds trip-count elements (5 here) of growing shape; onnxc unrolls only loops of constant trip count and has no run-time sequence representation"),
    "test_loop16_seq_none_cpu": ("bug", "Unable to compare expected type", "the suite's runner cannot compare this case's expected output: `assert_similar_outputs` recurses into the sequence's elements and takes len() of the first, a rank-0 tensor (array(0.)), which raises TypeError for any backend; onnxc's output is right (six elements 0. (rank 0), [1], [1, 2], ..., [1..5], equal to the expected ones: the trip count and condition are bound per call's values, and the Loop unrolled)"),
    "test_sequence_insert_at_front_cpu": ("onnx-passes", "a sequence whose length is not known when compiling", "output 'output_sequence': run-time element placement: the insert position is a graph input (int64[1]) and the input sequence's elements differ in shape ([4], [3], [2]), so which tensor lands at each index is decided at run time; a tensor-level select (the Where chains onnx-eliminate-sequences builds, for rank-0 positions over elements of one static type) cannot choose between shapes, and onnxc has no run-time sequence representation"),
    "test_split_to_sequence_1_cpu": ("onnx-passes", "a sequence whose length is not known when compiling", "output 'seq': run-time sequence length: the split size is a scalar graph input, so the number of pieces (ceil(6 / split)) is decided at run time; onnxc has no run-time sequence representation"),
    "test_split_to_sequence_2_cpu": ("onnx-passes", "a sequence whose length is not known when compiling", "output 'seq': run-time piece sizes: the split is an int64[2] graph input, so the length (2) is known but not the pieces' sizes, and onnx-eliminate-sequences builds pieces only for constant sizes (pieces at run-time offsets, Slice at the CumSum of the split with a run-time check that the sizes add up to the axis, are not built)"),
    "test_sequence_model1_cpu": ("lower", "no lowering for SequenceEmpty", "run-time element placement: `pos` and `pos_at` are graph inputs (their initializers are defaults a caller may override) and the elements differ in shape (2x3x4, 1x3x4, 3x3x4), so SequenceInsert at a run-time position and SequenceAt at a run-time index cannot be replaced by tensors (the Where chains of onnx-eliminate-sequences need one static element type) and the sequence ops reach the lowering, which has no sequence type"),
    "test_if_opt_cpu": ("onnx-passes", "an optional whose presence is not known when compiling", "output 'sequence': run-time presence: the If's condition is a graph input and one branch yields an empty optional, the other an optional holding a sequence, so whether the output exists is decided at run time; the compiled function returns tensors only (optional results are flattened where their presence is known when compiling) and onnxc has no run-time optional or sequence representation"),
}


def explain(name: str, stage: str, raw: str) -> str:
    """The reason written for failing case `name`: its `EXPLANATIONS` sentence while it still
    fails at that stage with that raw first line, else the raw line."""
    entry = EXPLANATIONS.get(name)
    if entry is not None and entry[0] == stage and entry[1] in raw:
        return entry[2]
    return raw


def render_xfails(cases: Sequence[Case], results: Mapping[str, Mapping[str, Any]], run_info: Mapping[str, Any]) -> str:
    """The text of backend_xfails.py for these results."""
    xf: list[tuple[str, str]] = []
    ex: list[tuple[str, str]] = []
    for case in sorted(cases, key=lambda c: c.name):
        r = results.get(case.name)
        if r is None or r["status"] == "pass":
            continue
        if r["status"] == "skip":  # skipped by the runner itself: not a pass, so not run here either
            ex.append((case.name, f"skip: {r.get('reason', '')}"))
            continue
        reason = f"{r.get('stage', 'error')}: {explain(case.name, r.get('stage', 'error'), r.get('reason', ''))}"
        (ex if r.get("stage") in ("crash", "timeout") else xf).append((case.name, reason))
    lines = [
        '"""Expected failures of the ONNX backend test suite on onnxc\'s CPU target.',
        "",
        f"DO NOT EDIT: generated by `{COMMAND}` from a run of the whole suite, together with",
        "docs/conformance.md and docs/ops.md. `test_backend.py` applies XFAILS as strict expected",
        "failures (a case that starts passing fails the suite: regenerate) and skips EXCLUDES, the",
        "cases that kill the process or run past the time limit. Each reason is `stage: first line`,",
        "stage being where the case stopped (import, onnx-passes, lower, codegen, run, result, error,",
        "bug: a non-onnxc exception escaped, crash, timeout).",
        '"""',
        "",
        "# fmt: off",
        f"RUN_INFO: dict[str, object] = {json.dumps(dict(run_info), indent=4, sort_keys=True)}",
        "",
        "#: Test name pattern (re.search) -> why it fails.",
        "XFAILS: dict[str, str] = {",
    ]
    lines += [f"    {json.dumps(_pattern(n))}: {json.dumps(r)}," for n, r in xf]
    lines += ["}", "", "#: Test name pattern -> why it is not run at all.", "EXCLUDES: dict[str, str] = {"]
    lines += [f"    {json.dumps(_pattern(n))}: {json.dumps(r)}," for n, r in ex]
    lines += ["}", ""]
    return "\n".join(lines)


def _by_property(cases: Iterable[Case], failing: Mapping[str, tuple[str, str]]) -> list[Case]:
    """The passing cases that are checked by property (`PROPERTY_CHECKS`), not by value."""
    return [c for c in cases if c.name in PROPERTY_CHECKS and c.name not in failing]


def _group_table(cases: Sequence[Case], failing: Mapping[str, tuple[str, str]]) -> list[str]:
    rows = ["| group | cases | pass | of which by property | fail | not run | pass % |", "|---|---:|---:|---:|---:|---:|---:|"]
    tot = [0, 0, 0, 0, 0]
    for g in GROUPS:
        gc = [c for c in cases if c.group == g]
        n = len(gc)
        fx = sum(1 for c in gc if failing.get(c.name, ("",))[0] == "xfail")
        ex = sum(1 for c in gc if failing.get(c.name, ("",))[0] == "exclude")
        p = n - fx - ex
        bp = len(_by_property(gc, failing))
        for i, v in enumerate((n, p, bp, fx, ex)):
            tot[i] += v
        rows.append(f"| {g} | {n} | {p} | {bp} | {fx} | {ex} | {_pct(p, n)} |")
    rows.append(f"| **all** | **{tot[0]}** | **{tot[1]}** | **{tot[2]}** | **{tot[3]}** | **{tot[4]}** | **{_pct(tot[1], tot[0])}** |")
    return rows


def _op_key(domain: str, op_type: str) -> str:
    return f"{domain}::{op_type}" if domain else op_type


#: CPU failure stages that the GPU targets share (the linalg module is their input).
_BEFORE_LINALG = ("import", "onnx-passes", "lower")


@dataclasses.dataclass(frozen=True)
class GpuColumn:
    """One GPU target's share of the suite, as its test module defines it: the cases it runs (the
    float node cases, `test_gpu_backend_vulkan.CASES`, named as the CPU cases are) and its strict
    expected failures with their reasons (the test module's XFAILS list: a listed case that passes
    fails that test, so the counts here cannot drift from what CI checks)."""

    target: str  # column header
    what: str  # what "pass" means for it, one sentence
    test: str  # the test file and function
    cases: frozenset[str]
    xfails: Mapping[str, str]

    def failing(self, cpu_failing: Mapping[str, tuple[str, str]]) -> dict[str, str]:
        """Case -> reason of the cases of the column that do not pass: its expected failures, and
        the cases that stop on the CPU before linalg (import, ONNX passes, lowering: the
        target-independent stages, which the GPU tests skip saying so)."""
        out = {n: r for n, r in self.xfails.items() if n in self.cases}
        for n in sorted(self.cases & set(cpu_failing)):
            if _stage_of(cpu_failing[n][1]) in _BEFORE_LINALG:
                out.setdefault(n, "does not lower to linalg, on the CPU either (skipped): " + cpu_failing[n][1])
        return out


def gpu_columns() -> list[GpuColumn]:
    """The Vulkan and CUDA columns, read from `test/python/test_gpu_backend_{vulkan,cuda}.py`."""
    test_dir = REPO / "test" / "python"
    added = str(test_dir) not in sys.path
    if added:  # the test modules import their neighbours (test_gpu_cuda's ptxas fixture)
        sys.path.insert(0, str(test_dir))
    try:
        modules = {}
        for name in ("test_gpu_backend_vulkan", "test_gpu_backend_cuda"):
            if name not in sys.modules:  # registered before it runs: the CUDA module imports the Vulkan one
                spec = importlib.util.spec_from_file_location(name, test_dir / f"{name}.py")
                assert spec is not None and spec.loader is not None
                sys.modules[name] = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(sys.modules[name])
            modules[name] = sys.modules[name]
    finally:
        if added:
            sys.path.remove(str(test_dir))
    vulkan, cuda = modules["test_gpu_backend_vulkan"], modules["test_gpu_backend_cuda"]
    names = frozenset(c.name + "_cpu" for c in vulkan.CASES)

    def cpu_names(xfails: Mapping[str, str]) -> dict[str, str]:
        return {n + "_cpu": r for n, r in xfails.items()}

    return [
        GpuColumn("Vulkan", "compiled with `onnxc.compile(model, target=\"vulkan\")`, run on lavapipe in CI and compared with the "
                  "expected outputs at the case's tolerances", "test_gpu_backend_vulkan.py::test_node_case_on_vulkan",
                  names, cpu_names(vulkan.XFAILS)),
        GpuColumn("CUDA PTX", "lowered to PTX and every kernel module assembled by NVIDIA's ptxas for sm_80 and sm_90 without "
                  "spills, in CI (no GPU needed)", "test_gpu_backend_cuda.py::test_node_case_assembles_for_cuda",
                  names, cpu_names(cuda.XFAILS)),
        GpuColumn("CUDA run", "compiled with `onnxc.compile(model, target=\"cuda\")` and run on an NVIDIA GPU, compared at the "
                  "case's tolerances (skipped, saying so, on a machine without one: CI; last run on an H200, 2026-11-28, before "
                  "Compress ran on the GPU targets and the float16 and loss cases joined the slice: those 74 cases are counted from the "
                  "list, not from a run)",
                  "test_gpu_backend_cuda.py::test_node_case_runs_on_cuda", names, cpu_names(cuda.RUN_XFAILS)),
    ]


def _target_table(cases: Sequence[Case], failing: Mapping[str, tuple[str, str]], gpus: Sequence[GpuColumn],
                  gpu_failing: Sequence[Mapping[str, str]]) -> list[str]:
    """The per-target table: the CPU over the suite, each GPU column over its cases, with its
    failing cases `gpu_failing` (`GpuColumn.failing`, one per column)."""
    rows = ["| target | cases | pass | fail | pass % | what a pass is |", "|---|---:|---:|---:|---:|---|"]
    n = len(cases)
    rows.append(f"| CPU | {n} | {n - len(failing)} | {len(failing)} | {_pct(n - len(failing), n)} | every case of the suite, "
                "compiled with `onnxc.compile` and run (`test_backend.py`) |")
    for g, gf in zip(gpus, gpu_failing):
        k, f = len(g.cases), len(gf)
        rows.append(f"| {g.target} | {k} | {k - f} | {f} | {_pct(k - f, k)} | float node cases, {g.what} (`{g.test}`) |")
    return rows


def render_conformance(cases: Sequence[Case], failing: Mapping[str, tuple[str, str]], run_info: Mapping[str, Any],
                       gpus: Sequence[GpuColumn] = ()) -> str:
    """The text of docs/conformance.md; `gpus`: the GPU targets' columns (`gpu_columns()`)."""
    total = len(cases)
    passed = total - len(failing)
    out = [
        "<!-- DO NOT EDIT: generated by `python -m onnxc.tools.gen_conformance` (see tools/gen_conformance.py). -->",
        "",
        "# ONNX backend test suite: onnxc on the CPU" + (", Vulkan and CUDA" if gpus else ""),
        "",
        f"**{passed} of {total} cases pass ({_pct(passed, total)}).** The suite is onnx's own "
        "(`onnx.backend.test.BackendTest`) over `onnxc.backend`: node tests built in memory (with their "
        "`_expanded` function-body variants), and the `simple`, `pytorch-converted`, `pytorch-operator` and "
        "`light` model groups shipped in the onnx wheel. Each case compiles the model with `onnxc.compile` "
        "(import, ONNX-level passes, convert-onnx-to-linalg, vectorize, LLVM JIT) and compares with the "
        "suite's reference outputs.",
        "",
    ]
    info = dict(run_info)
    if info:
        bits = []
        if "date" in info:
            bits.append(f"run on {info['date']}")
        if "onnx" in info:
            bits.append(f"onnx {info['onnx']}")
        if "wall_s" in info:
            bits.append(f"{info['wall_s']} s wall time on {info.get('jobs', '?')} worker(s)")
        if "only" in info:
            bits.append(f"last partial re-run: `--only {info['only']}`")
        out += ["Last run: " + ", ".join(bits) + ".", ""]
    gpu_failing = [g.failing(failing) for g in gpus]
    if gpus:
        out += [
            "## Per target",
            "",
            "The GPU targets run the float node cases (float32, float64 or float16 data, bool beside them, int64 where it is index "
            "data; no `_expanded` variants, which repeat the same kernels): "
            f"{len(gpus[0].cases)} of the suite's {sum(1 for c in cases if c.group == 'node')} node cases. Their failures "
            "are listed, with reasons, under \"Failing cases on the GPU targets\".",
            "",
            *_target_table(cases, failing, gpus, gpu_failing),
            "",
        ]
    out += ["## Per group", ""] + _group_table(cases, failing) + [""]
    stages: dict[str, int] = defaultdict(int)
    for kind, reason in failing.values():
        stages[_stage_of(reason)] += 1
    if failing:
        out += ["Failures by the stage they stop at:", "", "| stage | cases |", "|---|---:|"]
        out += [f"| {s} | {stages[s]} |" for s in STAGES if stages.get(s)]
        out += [""]
    # per op, node tests only (model tests exercise many ops at once)
    per_op: dict[str, list[int]] = {}
    for c in cases:
        if c.group not in ("node", "node-expanded"):
            continue
        for dom, op_type, _ in c.ops:
            row = per_op.setdefault(_op_key(dom, op_type), [0, 0, 0, 0])
            i = 0 if c.group == "node" else 2
            row[i] += 1
            if c.name not in failing:
                row[i + 1] += 1
    # per op and GPU target: [cases, passes] of each column
    per_op_gpu: dict[str, list[list[int]]] = {}
    for c in cases:
        if c.group != "node":
            continue
        for dom, op_type, _ in c.ops:
            counts = per_op_gpu.setdefault(_op_key(dom, op_type), [[0, 0] for _ in gpus])
            for g, gf, count in zip(gpus, gpu_failing, counts):
                if c.name in g.cases:
                    count[0] += 1
                    count[1] += c.name not in gf
    out += [
        "## Per op (node tests)",
        "",
        "Node tests counted for the op at the top of their model; `_expanded` tests (the op's function body, run "
        "through the ops it is made of) for the op they expand."
        + (" GPU columns: the op's float node cases on that target (`-`: none of its cases is a float case)." if gpus else ""),
        "",
        "| op | node pass / cases | expanded pass / cases |" + "".join(f" {g.target} pass / cases |" for g in gpus),
        "|---|---:|---:|" + "---:|" * len(gpus),
    ]
    property_ops = {_op_key(dom, op_type) for c in _by_property(cases, failing) for dom, op_type, _ in c.ops}
    for op in sorted(per_op, key=str.lower):
        n, p, en, ep = per_op[op]
        exp = f"{ep} / {en}" if en else "-"
        mark = "" if p == n and ep == en else " ✗"
        mark += " †" if op in property_ops else ""
        gpu_cells = "".join(f" {cp} / {cn} |" if cn else " - |" for cn, cp in per_op_gpu.get(op, [[0, 0] for _ in gpus]))
        out.append(f"| {op}{mark} | {p} / {n} | {exp} |{gpu_cells}")
    if property_ops:
        out += ["", "† some of the op's passing cases are checked by property (random), not by value: see below."]
    checked = sorted(_by_property(cases, failing), key=lambda c: c.name)
    if checked:
        out += [
            "",
            "## Checked by property (random)",
            "",
            f"{len(checked)} passing cases are checked by property instead of by value: their expected outputs are "
            "one draw of numpy's random generator, which no compiler reproduces (the spec fixes no numbers, even for a "
            "seeded op; onnxc's ops draw from a Philox generator, `transforms/lowering/random.py`). The suite runs "
            "onnxc on the case's inputs and checks what the spec does fix (`PROPERTY_CHECKS` in "
            "`tools/gen_conformance.py`; the distributions themselves are tested on large samples in "
            "`test/python/test_random_ops.py`):",
            "",
        ]
        families = sorted({PROPERTY_CHECKS[c.name] for c in checked})
        out += [f"- **{f}**: {PROPERTY_TEXT[f]}." for f in families]
        out += ["", "| case | op | checked by property (random) |", "|---|---|---|"]
        out += [f"| `{c.name}` | {PROPERTY_CHECKS[c.name]} | ✓ |" for c in checked]
    out += ["", "## Failing cases", "", f"{len(failing)} cases, with the stage they stop at and the first line of the reason "
            "(the same list is `test/python/backend_xfails.py`).", ""]
    for g in GROUPS:
        gf = sorted((c for c in cases if c.group == g and c.name in failing), key=lambda c: c.name)
        if not gf:
            continue
        out += [f"### {g} ({len(gf)})", "", "| case | reason |", "|---|---|"]
        for c in gf:
            kind, reason = failing[c.name]
            r = reason.replace("|", "\\|")
            out.append(f"| `{c.name}` | {'(not run) ' if kind == 'exclude' else ''}{r} |")
        out.append("")
    if gpus:
        out += ["## Failing cases on the GPU targets", "",
                "Expected failures of each GPU test (strict, but for the random draws, which can match by chance), with "
                "the reason written beside each in the test file.", ""]
        for g, gf in zip(gpus, gpu_failing):
            out += [f"### {g.target} ({len(gf)})", ""]
            if not gf:
                out += ["None: every case passes.", ""]
                continue
            out += ["| case | reason |", "|---|---|"]
            out += [f"| `{n.removesuffix('_cpu')}` | {_one_line(r).replace('|', chr(92) + '|')} |" for n, r in sorted(gf.items())]
            out.append("")
    return "\n".join(out)


def _has_pass(name: str) -> bool:
    from onnxc.transforms.registry import get_pass_class

    try:
        return get_pass_class(name) is not None
    except Exception:  # noqa: BLE001 - a broken pass module must not break the report
        return False


def _lowering_registry() -> tuple[dict[tuple[str, str], int], bool, bool]:
    """(domain, op_type) -> oldest since_version lowered; whether onnx-upgrade-ops and
    expand-schema-functions are registered."""
    try:
        from onnxc.transforms.lowering import load_patterns
        from onnxc.transforms.lowering.common import PATTERNS
    except ImportError:
        return {}, False, False
    load_patterns()
    return {k: p.min_version for k, p in PATTERNS.items()}, _has_pass("onnx-upgrade-ops"), _has_pass("expand-schema-functions")


def _code_links(entry: Any, tests: Sequence[str], max_tests: int = 3) -> str:
    """The `code` cell of docs/ops.md: links (relative to docs/) to an op's lowering, shape/value
    rules and upgrade adapters, then up to `max_tests` test files naming it. Links name the file
    and function, not the line, so the document changes only when the pieces move."""
    from onnxc.transforms.op_table import source_of

    if entry is None:
        return ""

    def link(label: str, fn: Any) -> str | None:
        where = source_of(fn)
        if where is None:
            return None
        path = where.rsplit(":", 1)[0]
        name = getattr(fn, "__name__", label)
        return f"[{label}](../{path} \"{name}\")"

    parts = [link("lower", entry.lowering), link("shape", entry.shape_rule), link("value", entry.value_rule)]
    parts += [link(f"v{v}", fn) for v, fn in entry.adapters.items()]
    parts += [f"[{Path(t).name}](../{t})" for t in tests[:max_tests]]
    if len(tests) > max_tests:
        parts.append(f"+{len(tests) - max_tests} tests")
    return " ".join(p for p in parts if p)


#: What a row of the table cannot say: (domain, op type) -> a note printed under the tables.
OP_NOTES: dict[tuple[str, str], str] = {
    ("", "ImageDecoder"): "decoded at run time through Pillow (a call out of the JIT's code; AOT libraries refuse "
    "the op). Formats: those of the installed Pillow's build; the pinned wheel (constraints.txt) reads BMP, JPEG, "
    "JPEG 2000, PNG, PNM (PBM/PGM/PPM), TIFF and WebP (`python -c \"import PIL.features; PIL.features.pilinfo()\"` "
    "lists a build's codecs: JPEG 2000 needs openjpeg, WebP libwebp). RGB/BGR give 3 channels and Grayscale 1 "
    "whatever the file stores; undecodable bytes give the spec's empty [0, 0, C] output with a warning (an error "
    "where the model declares a non-empty output size).",
    ("", "Bernoulli"): "draws from a Philox generator in the generated code; the backend cases are checked by "
    "property (docs/conformance.md).",
    ("", "Dropout"): "training mode draws its mask from a Philox generator in the generated code; those backend "
    "cases are checked by property (docs/conformance.md).",
}


def render_ops(cases: Sequence[Case], failing: Mapping[str, tuple[str, str]]) -> str:
    """The text of docs/ops.md: per op version of the table, imported/verified/lowered/tested."""
    from onnxc.dialect import all_ops
    from onnxc.dialect.table import lookup

    lowered, upgrade, expand = _lowering_registry()
    from onnxc.transforms.op_table import find_test_files, op_table

    table = op_table()
    test_files = find_test_files(table.values(), REPO / "test")
    # node tests per dialect op (by the version each test's opset binds to)
    tests: dict[str, list[tuple[Case, bool]]] = defaultdict(list)
    for c in cases:
        if c.group != "node":
            continue
        for dom, op_type, opset in c.ops:
            info = lookup(op_type, dom, opset)
            if info is not None:
                tests[info.full_name].append((c, c.name not in failing))
    by_type: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for info in all_ops():
        by_type[(info.domain, info.op_type)].append(info)
    n_rows = n_low = n_tested = n_pass_ops = 0
    body: list[str] = []
    domains = sorted({d for d, _ in by_type}, key=lambda d: (d != "", d))
    for domain in domains:
        body += [
            "",
            f"## {domain or 'ai.onnx'}",
            "",
            "| op | versions | dialect op | imported | verified | lowered | tested | code |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for (dom, op_type), infos in sorted(((k, v) for k, v in by_type.items() if k[0] == domain), key=lambda kv: kv[0][1].lower()):
            for info in sorted(infos, key=lambda i: -i.since_version):
                n_rows += 1
                vers = ", ".join(str(v) for v in info.since_versions)
                imported = "✓" + (" (deprecated)" if info.deprecated else "")
                ts = tests.get(info.full_name, [])
                if ts:
                    past_import = [t for t, ok in ts if ok or _stage_of(failing[t.name][1]) not in ("import",)]
                    verified = "✓" if past_import else "✗ " + _one_line(failing[ts[0][0].name][1], 80).replace("|", "\\|")
                else:
                    verified = "·"
                lo = lowered.get((dom, op_type))
                if lo is None and expand and info.has_function:
                    low = "✓ via function body"
                    n_low += 1
                elif lo is None:
                    low = "✗"
                elif info.since_version >= lo:
                    low = "✓"
                    n_low += 1
                elif upgrade:
                    low = f"✓ via upgrade to v{lo}+"
                    n_low += 1
                else:
                    low = f"✗ (v{lo}+ only)"
                if ts:
                    n_tested += 1
                    ok = sum(1 for _, p in ts if p)
                    n_pass_ops += ok == len(ts)
                    tested = f"{ok} / {len(ts)}"
                else:
                    tested = "·"
                key = (info.domain, info.op_type, (info.since_versions[0], info.since_versions[-1]))
                code = _code_links(table.get(key), test_files.get(key, []))
                body.append(f"| {op_type} | {vers} | `{info.full_name}` | {imported} | {verified} | {low} | {tested} | {code} |")
    head = [
        "<!-- DO NOT EDIT: generated by `python -m onnxc.tools.gen_conformance` (see tools/gen_conformance.py). -->",
        "",
        "# ONNX op support in onnxc",
        "",
        "One row per op of the ONNX dialect (one dialect op stands for every ONNX version with the same "
        "signature; the newest first). Columns:",
        "",
        "- **imported**: the dialect has the op, so the importer builds it (every row).",
        "- **verified**: node tests of this version get through import and verification (IRDL plus the "
        "Python verifier); `·` when no node test binds to this version.",
        "- **lowered**: `convert-onnx-to-linalg` has a pattern for the op (the registry "
        "`onnxc.transforms.lowering.common.PATTERNS`); older versions are lowered after `onnx-upgrade-ops` "
        "brings them to the oldest version the pattern handles; ops without a pattern whose schema defines a "
        "function body are lowered through it (`expand-schema-functions`).",
        "- **tested**: node tests of the ONNX backend suite binding to this version that pass on the CPU, "
        "of those that exist (`docs/conformance.md` lists the failures).",
        "- **code**: where the op's pieces live, from the one per-op table `onnxc.transforms.op_table` "
        "(keyed by domain, op type and version range): its lowering (`lower`), onnxc's own shape and value "
        "rules (`shape`, `value`), the upgrade adapters into its versions (`vN`), and test files naming it.",
        "",
        f"{n_rows} dialect ops; {n_low} lowered; {n_tested} exercised by node tests, {n_pass_ops} of them passing all.",
    ]
    notes = ["", "## Notes", ""] + [f"- **{_op_key(d, o)}**: {text}" for (d, o), text in sorted(OP_NOTES.items(), key=lambda kv: kv[0][1].lower())]
    return "\n".join(head + body + notes) + "\n"


# ---------------------------------------------------------------------------------------- main


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path.relative_to(REPO)}")


def check(cases: Sequence[Case]) -> list[str]:
    """Problems with the three generated files (empty when they agree with each other and with
    the op table and lowering registry)."""
    problems: list[str] = []
    if not XFAILS_PATH.exists():
        return [f"{XFAILS_PATH.relative_to(REPO)} is missing: run `{COMMAND}`"]
    xfails, excludes, run_info = _load_expectations()
    names = [c.name for c in cases]
    for kind, entries in (("XFAILS", xfails), ("EXCLUDES", excludes)):
        for pattern in entries:
            try:
                rx = re.compile(pattern)
            except re.error as exc:
                problems.append(f"{kind} pattern {pattern!r} is not a regular expression ({exc})")
                continue
            if not any(rx.search(n) for n in names):
                problems.append(f"{kind} pattern {pattern!r} matches no case of the suite")
            if not entries[pattern].strip():
                problems.append(f"{kind} pattern {pattern!r} has no reason")
    failing = failing_cases(cases, xfails, excludes)
    conformance = render_conformance(cases, failing, run_info, gpu_columns())
    for path, text in ((CONFORMANCE_PATH, conformance), (OPS_PATH, render_ops(cases, failing))):
        rel = path.relative_to(REPO)
        if not path.exists():
            problems.append(f"{rel} is missing")
        elif path.read_text() != text:
            problems.append(f"{rel} is out of date (op table, lowering registry or {XFAILS_PATH.name} changed)")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry; see the module docstring."""
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check that the generated files are up to date (no run)")
    ap.add_argument("--docs-only", action="store_true", help="rewrite the docs from the existing backend_xfails.py (no run)")
    ap.add_argument("--only", metavar="REGEX", help="re-run only matching cases; keep the other cases' results")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2, help="worker processes (default: all cores)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per case before it counts as a timeout")
    args = ap.parse_args(argv)
    _check_checkout()
    import warnings

    warnings.simplefilter("ignore")  # the node-test generators warn about overflowing casts
    cases = catalog()
    if args.check:
        problems = check(cases)
        for p in problems:
            print(f"gen_conformance --check: {p}", file=sys.stderr)
        if problems:
            print(f"run `{COMMAND}` (full run) or `{COMMAND} --docs-only` (docs only) to regenerate", file=sys.stderr)
            return 1
        print("gen_conformance --check: backend_xfails.py, docs/conformance.md and docs/ops.md are up to date")
        return 0
    xfails, excludes, run_info = _load_expectations()
    if not args.docs_only:
        import onnx

        names = [c.name for c in cases]
        old_failing = failing_cases(cases, xfails, excludes)
        if args.only:
            rx = re.compile(args.only)
            names = [n for n in names if rx.search(n)]
        print(f"running {len(names)} cases on {args.jobs} worker(s)...", file=sys.stderr)
        t0 = time.monotonic()
        results = run_suite(names, args.jobs, args.timeout)
        wall = time.monotonic() - t0
        if args.only:
            merged: dict[str, dict[str, Any]] = {}
            for c in cases:
                if c.name in results:
                    merged[c.name] = results[c.name]
                elif c.name in old_failing:
                    kind, reason = old_failing[c.name]
                    stage, _, text = reason.partition(": ")
                    merged[c.name] = {"status": "fail", "stage": stage, "reason": text}
                else:
                    merged[c.name] = {"status": "pass"}
            results = merged
            run_info = dict(run_info)
            run_info["only"] = args.only
        else:
            slow = sorted(((r.get("seconds", 0.0), n) for n, r in results.items()), reverse=True)[:10]
            run_info = {
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "onnx": onnx.__version__,
                "jobs": args.jobs,
                "wall_s": round(wall),
                "cases_run": len(names),
                "slowest": [[n, s] for s, n in slow],
            }
        _write(XFAILS_PATH, render_xfails(cases, results, run_info))
        xfails, excludes, run_info = _load_expectations()
        print(f"ran {len(names)} cases in {wall:.0f} s", file=sys.stderr)
    failing = failing_cases(cases, xfails, excludes)
    _write(CONFORMANCE_PATH, render_conformance(cases, failing, run_info, gpu_columns()))
    _write(OPS_PATH, render_ops(cases, failing))
    total = len(cases)
    print(f"{total - len(failing)} of {total} cases pass ({_pct(total - len(failing), total)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
