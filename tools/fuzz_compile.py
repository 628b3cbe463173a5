"""A compile-level fuzzer: mutate ONNX node-test models, compile and run them, classify what happens.

`python -m onnxc.tools.fuzz_compile --cases N --seed S [--workers 2] [--jit-opt-level 0] [--target vulkan] [--minutes M]
[--json out.json [--flush-s 60]] [--verbose]`

Why: the importer's fuzzer (test/python/test_import_fuzz.py) mutates bytes and fields, so most of
its models never reach the compiler. This one starts from the models of onnx's backend node tests
(built in memory by `onnx.backend.test.case.node.collect_testcases`, with their inputs) and makes
small, plausible edits that keep the model parseable and push it into the passes and the lowering
(issue 11):

- `attribute`: an INT/INTS attribute of a node gets another value (out of range, negative, a
  permuted or shortened list);
- `elem_type`: a graph input gets another element type (its data is cast);
- `rank`: a graph input gets one dim more or fewer (its data is reshaped);
- `symbolic`: every dim of every graph input becomes a `dim_param` (the static result is the
  reference); `partly_symbolic`: a random subset of them does, or all do with dims of equal size
  sharing a name;
- `opset`: the model's default-domain opset changes;
- `initializer`: a graph input becomes an initializer whose data is shorter than its dims;
- `feed`: the model is unchanged but run with an input of the wrong shape or dtype.

Each case runs in a worker process (a pool of `--workers`, 2 by default), so an abort (an MLIR
assertion: SIGABRT) kills only the worker: it is counted, and the worker restarted. Outcomes:

- `ok`: compiled, ran, and matches `onnx.reference`; where the reference refuses the model,
  matches onnxruntime (`second_opinion`), or neither runs it: counted `unverified` in the report
  (onnxc accepted what both reject; listed per base model for review);
- `refused`: an `OnnxcError` (a clean diagnostic) at compile or run time;
- `raw` (bug): any other exception escaping onnxc;
- `abort` (bug): the worker died;
- `wrong` (bug): the outputs differ from `onnx.reference`'s on the same model and inputs (and
  from onnxruntime's where it runs), or the reference refuses and onnxruntime answers otherwise;
- `timeout`: the case ran past `--timeout` seconds (the worker is restarted).

The exit status is 1 when any bug class is non-zero. Cases are chosen deterministically from the
seed, so `--seed S --only K` replays case K; an abort's report lists the cases its worker ran
before (`history`), and `--seed S --replay I,J,...,K` runs such a sequence in one worker.
`--docs docs/robustness.md --from-json docs/fuzz_runs/*.json` writes the counts of the runs whose
reports are kept in docs/fuzz_runs/ (each names the commit it ran on) into that file's
generated section (without --from-json: this run's counts alone).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pickle
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx

MUTATIONS = ("attribute", "elem_type", "rank", "symbolic", "partly_symbolic", "opset", "initializer", "feed")
BUGS = ("raw", "abort", "wrong")
# Node tests whose outputs are random or depend on state the reference does not share.
_SKIP = ("random", "bernoulli", "dropout", "multinomial", "training", "_expanded", "test_optional", "sequence", "loop", "scan", "if_")
_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.INT8, onnx.TensorProto.INT32,
          onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.BOOL)  # fmt: skip


@dataclasses.dataclass
class Case:
    """One mutated model and the inputs to run it with."""

    index: int
    base: str  # the node test it came from
    mutation: str
    detail: str
    model: bytes
    feeds: dict[str, np.ndarray]


# --------------------------------------------------------------------------------------------- cases


def base_cases() -> list[tuple[str, onnx.ModelProto, dict[str, np.ndarray]]]:
    """(name, model, feeds) of every node test with plain tensor inputs, sorted by name."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    for c in cases:
        if any(s in c.name for s in _SKIP) or not c.data_sets:
            continue
        m = c.model
        inputs, _ = c.data_sets[0]
        if len(inputs) != len(m.graph.input) or any(vi.type.WhichOneof("value") != "tensor_type" for vi in m.graph.input):
            continue
        if any(vi.type.WhichOneof("value") != "tensor_type" for vi in m.graph.output):
            continue
        feeds = {vi.name: np.asarray(a) for vi, a in zip(m.graph.input, inputs)}
        if any(a.dtype == object for a in feeds.values()):
            continue
        out.append((c.name, m, feeds))
    out.sort(key=lambda t: t[0])
    return out


def _np_type(elem: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))


def mutate(rng: random.Random, model: onnx.ModelProto, feeds: dict[str, np.ndarray], kind: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], str] | None:
    """A mutated copy of (model, feeds) of the given kind, with a description; None if the kind
    does not apply to this model."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    f = {k: v.copy() for k, v in feeds.items()}
    g = m.graph
    if kind in ("elem_type", "rank", "feed") and not len(g.input):
        return None
    if kind == "attribute":
        spots = [(n, a) for n in g.node for a in n.attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
        if not spots:
            return None
        node, a = rng.choice(spots)
        if a.type == onnx.AttributeProto.INT:
            a.i = rng.choice([a.i + 1, a.i - 1, -a.i - 1, a.i + 3, 0, -1, 7])
            return m, f, f"{node.op_type}.{a.name} = {a.i}"
        vals = list(a.ints)
        choice = rng.randrange(4)
        if choice == 0 and vals:
            rng.shuffle(vals)
            vals[rng.randrange(len(vals))] += rng.choice([-4, -1, 1, 4])
        elif choice == 1:
            vals = vals[:-1]
        elif choice == 2:
            vals = vals + [rng.choice([0, 1, -1, 5])]
        else:
            vals = [v if rng.random() < 0.5 else rng.choice([0, -1, 2, 9]) for v in vals]
        del a.ints[:]
        a.ints.extend(vals)
        return m, f, f"{node.op_type}.{a.name} = {vals}"
    if kind == "elem_type":
        vi = rng.choice(list(g.input))
        new = rng.choice([t for t in _TYPES if t != vi.type.tensor_type.elem_type])
        vi.type.tensor_type.elem_type = new
        with np.errstate(all="ignore"):  # NaN/inf cast to an integer type: any value will do
            f[vi.name] = f[vi.name].astype(_np_type(new))
        return m, f, f"input {vi.name} -> {onnx.TensorProto.DataType.Name(new)}"
    if kind == "rank":
        vi = rng.choice(list(g.input))
        a = f[vi.name]
        if rng.random() < 0.5 or a.ndim == 0:
            a = a.reshape((1,) + a.shape)
        elif a.shape[0] == 1 or a.ndim == 1:
            a = a.reshape(a.shape[1:]) if a.shape[0] == 1 else a.reshape((1,) + a.shape)
        else:
            a = a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:])
        f[vi.name] = a
        shape = vi.type.tensor_type.shape
        shape.ClearField("dim")
        for d in a.shape:
            shape.dim.add().dim_value = d
        return m, f, f"input {vi.name} -> shape {list(a.shape)}"
    if kind in ("symbolic", "partly_symbolic"):
        dims = [(vi, j, d) for vi in g.input for j, d in enumerate(vi.type.tensor_type.shape.dim)]
        if not dims and kind == "partly_symbolic":
            return None
        # symbolic: each dim its own name. partly_symbolic: "some", a random non-empty subset
        # (static and dynamic dims meet in one op), or "shared", every dim symbolic with dims of
        # equal size sharing a name (the compiler may use the equality: broadcasts, shape checks).
        mode = "every" if kind == "symbolic" else rng.choice(("some", "shared"))
        pick = [rng.random() < 0.5 for _ in dims] if mode == "some" else [True] * len(dims)
        if dims and not any(pick):
            pick[rng.randrange(len(pick))] = True
        for (vi, j, d), p in zip(dims, pick):
            if p and d.HasField("dim_value"):
                d.dim_param = f"n{d.dim_value}" if mode == "shared" else f"{vi.name}_d{j}"
        for vi in g.output:
            vi.type.tensor_type.ClearField("shape")
        del g.value_info[:]
        which = "every input dim" if mode != "some" else f"input dims {[f'{vi.name}[{j}]' for (vi, j, _), p in zip(dims, pick) if p]}"
        return m, f, f"{which} symbolic" + (" (equal sizes share a name)" if mode == "shared" else "")
    if kind == "opset":
        entry = next((e for e in m.opset_import if e.domain in ("", "ai.onnx")), None)
        if entry is None:
            return None
        entry.version = rng.choice([v for v in (7, 9, 11, 13, 15, 17, 18, 19, 21) if v != entry.version])
        m.ir_version = max(m.ir_version, 8)
        return m, f, f"opset -> {entry.version}"
    if kind == "initializer":
        cands = [vi for vi in g.input if f[vi.name].size > 1]
        if not cands:
            return None
        vi = rng.choice(cands)
        a = f.pop(vi.name)
        t = onnx.numpy_helper.from_array(a.reshape(-1)[:-1].copy(), vi.name)
        del t.dims[:]
        t.dims.extend(a.shape)  # the dims ask for one element more than the data holds
        g.initializer.append(t)
        keep = [x for x in g.input if x.name != vi.name]
        del g.input[:]
        g.input.extend(keep)
        return m, f, f"initializer {vi.name} one element short"
    if kind == "feed":
        name = rng.choice(list(f))
        a = f[name]
        how = rng.randrange(4)
        if how == 0:
            other = rng.choice([t for t in _TYPES if _np_type(t) != a.dtype])
            with np.errstate(all="ignore"):
                f[name] = a.astype(_np_type(other))
            return m, f, f"feed {name} as {f[name].dtype}"
        if how == 1:
            f[name] = np.concatenate([a.reshape(-1), a.reshape(-1)[:1]]) if a.size else np.zeros(3, a.dtype)
        elif how == 2:
            f[name] = a.reshape((1,) + a.shape)
        elif a.ndim and a.shape[0] > 1:
            f[name] = a[:-1]
        else:
            f[name] = np.concatenate([a, a]) if a.ndim else a.reshape(1, 1)
        return m, f, f"feed {name} with shape {f[name].shape}"
    raise ValueError(kind)


def make_cases(n: int, seed: int, bases: list[tuple[str, onnx.ModelProto, dict[str, np.ndarray]]]) -> list[Case]:
    """`n` cases, each from a base model and a mutation drawn from `random.Random(seed, index)`.

    A quarter of the cases get a second mutation of another kind on top of the first (a symbolic
    model fed a wrong dtype, an attribute change at another opset...): single mutations of the
    node tests repeat (100,000 draws held about 41,000 distinct cases), pairs rarely do. The
    case's `mutation` is the first kind; its detail names both."""
    out = []
    for i in range(n):
        rng = random.Random(f"{seed}:{i}")
        for _ in range(20):
            name, model, feeds = rng.choice(bases)
            kind = rng.choice(MUTATIONS)
            got = mutate(rng, model, feeds, kind)
            if got is not None:
                m, f, detail = got
                if rng.random() < 0.25:
                    then = rng.choice([k for k in MUTATIONS if k != kind])
                    more = mutate(rng, m, f, then)
                    if more is not None:
                        m, f, detail = more[0], more[1], f"{detail}; then {then}: {more[2]}"
                out.append(Case(i, name, kind, detail, m.SerializeToString(), f))
                break
    return out


# --------------------------------------------------------------------------------------------- worker


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    want = np.asarray(want)
    got = np.asarray(got)
    if got.shape != want.shape:
        return False
    if want.dtype.kind in "fc" or got.dtype.kind in "fc":
        w = want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        finite = np.abs(w[np.isfinite(w)]) if w.size else np.zeros(0)
        # atol grows with the output's scale (1e-6 of its largest magnitude): a float32 sum's
        # rounding is relative to the terms, so an entry that is 0 in one implementation is
        # 2e-5 in another where the output reaches 952 (STFT; onnxruntime against onnxc).
        atol = 1e-5 + 1e-6 * (float(finite.max()) if finite.size else 0.0)
        return bool(np.allclose(got.astype(w.dtype), w, rtol=1e-3, atol=atol, equal_nan=True))
    if want.dtype == object:
        return bool(np.array_equal(got, want))
    return bool(np.array_equal(got.astype(np.int64), want.astype(np.int64)))


#: The last model this process compiled: (sha1 of its bytes, jit_opt_level, CompiledModel).
_LAST_COMPILED: list[tuple[str, int, Any]] = []


def run_case(case: Case, jit_opt_level: int = 3, reuse: bool = False, target: str = "cpu") -> dict[str, str]:
    """Compile and run one case in this process: {'cls': outcome, 'detail': why}.

    `jit_opt_level` is the CPU target's `CpuPipelineOptions.jit_opt_level` (LLVM's optimization
    level in the JIT): every onnxc pass, check and lowering runs the same at any level; 0 skips
    LLVM's optimizer (the fuzzer tests answers, not speed). With `reuse`, a case whose model
    bytes equal the previous case's runs on that case's `CompiledModel` instead of compiling it
    again (the `feed` mutation runs one model with several wrong inputs: the compiled code is the
    same, and a model called again after a refused call must still answer right). `target`:
    "cpu", or "vulkan" (the GPU mapping run on a Vulkan device, lavapipe here: a refusal must
    still be an `OnnxcError`, a wrong answer is still a bug)."""
    import warnings

    import onnxc
    from onnxc.errors import OnnxcError
    from onnxc.targets.cpu.pipeline import CpuPipelineOptions

    warnings.simplefilter("ignore")
    model = onnx.load_from_string(case.model)
    digest = hashlib.sha1(case.model).hexdigest()
    try:
        if reuse and _LAST_COMPILED and _LAST_COMPILED[0][:2] == (digest, jit_opt_level):
            compiled = _LAST_COMPILED[0][2]
        else:
            _LAST_COMPILED.clear()  # the old model's JIT code is freed before the next compile
            if target == "cpu":
                compiled = onnxc.compile(model, options=CpuPipelineOptions(jit_opt_level=jit_opt_level))
            else:
                compiled = onnxc.compile(model, target=target)
            if reuse:
                _LAST_COMPILED.append((digest, jit_opt_level, compiled))
        got = compiled.run(case.feeds)
    except OnnxcError as exc:
        return {"cls": "refused", "detail": str(exc).splitlines()[0][:300]}
    except Exception as exc:  # noqa: BLE001 - any other exception escaping onnxc is the bug class counted
        return {"cls": "raw", "detail": f"{type(exc).__name__}: {str(exc)[:500]}"}
    try:
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(model).run(None, case.feeds)
    except Exception as exc:  # noqa: BLE001 - the reference refuses the model: ask onnxruntime
        second = second_opinion(model, case.feeds)
        if second is None:  # nobody else computes it: counted apart (`unverified`) for review
            return {"cls": "ok", "detail": f"reference refused: {type(exc).__name__}; unverified"}
        bad = _first_difference(model, got, second[1])
        if bad is None:
            return {"cls": "ok", "detail": f"reference refused: {type(exc).__name__}, {second[0]} agrees"}
        return {"cls": "wrong", "detail": f"{bad} (onnx.reference refused: {type(exc).__name__}; {second[0]} answered)"}
    bad = _first_difference(model, got, want)
    if bad is None:
        return {"cls": "ok", "detail": ""}
    second = second_opinion(model, case.feeds)
    if second is not None and _first_difference(model, got, second[1]) is None:
        return {"cls": "ok", "detail": f"onnx.reference differs, {second[0]} agrees"}
    widened = _widened_reference(model, case.feeds)
    if widened is not None and _first_difference(model, got, widened) is None:
        return {"cls": "ok", "detail": "onnx.reference differs in float16, agrees from the same values in float32"}
    return {"cls": "wrong", "detail": bad}


def _widened_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    """onnx.reference's outputs for ``model`` with its float16/bfloat16 graph inputs declared and
    fed as float32 (the same values, exactly), or None (no such input, or the widened model does
    not run). Why: the reference computes in the inputs' type, so a float16 grid made
    GridSample's cubic weights 2.6e-3 off (1.7533 where float64 gives 1.75582, onnxc's answer;
    fuzz seed 407 case 3797, where onnxruntime does not run the model): onnxc, which computes
    such inputs in float32, must agree with the widened model instead."""
    narrow = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    names = {vi.name for vi in model.graph.input if vi.type.tensor_type.elem_type in narrow}
    if not names:
        return None
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    for vi in wide.graph.input:
        if vi.name in names:
            vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    try:
        from onnx.reference import ReferenceEvaluator

        fed = {k: (np.asarray(v).astype(np.float32) if k in names else v) for k, v in feeds.items()}
        return ReferenceEvaluator(wide).run(None, fed)
    except Exception:  # noqa: BLE001 - the widened model breaks a type constraint: no opinion
        return None


def _first_difference(model: onnx.ModelProto, got: dict[str, np.ndarray], want: list[np.ndarray]) -> str | None:
    """Why onnxc's outputs differ from `want` (the first output that does), or None."""
    for vi, w in zip(model.graph.output, want):
        g = got.get(vi.name)
        if g is None or not _same(g, w):
            shape = None if g is None else np.asarray(g).shape
            return f"output '{vi.name}': got shape {shape}, reference {np.asarray(w).shape}"
    return None


def _resize_axes_normalized(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``model`` with each Resize's negative `axes` counted from the front (the same model: the
    spec accepts [-r, r-1]), where its input is fed (its rank known). Why: onnxruntime 1.32
    ignores a negative axis under keep_aspect_ratio_policy (`axes = [2, -1]` on a 1x1x2x4 input
    with sizes [1, 3], not_larger: it returned 1x1x1x4, against its own inferred 1x1x1x2, and
    1x1x1x2 for axes [2, 3]) and onnx.reference refuses one; fuzz seed 301 case 3966."""
    if not any(n.op_type == "Resize" and any(a.name == "axes" and any(i < 0 for i in a.ints) for a in n.attribute) for n in model.graph.node):
        return model  # nothing to change: no copy
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.op_type != "Resize" or node.input[0] not in feeds:
            continue
        rank = np.asarray(feeds[node.input[0]]).ndim
        for attr in node.attribute:
            if attr.name == "axes" and any(a < 0 for a in attr.ints):
                fixed = [a + rank if -rank <= a < 0 else a for a in attr.ints]
                del attr.ints[:]
                attr.ints.extend(fixed)
    return out


def second_opinion(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[str, list[np.ndarray]] | None:
    """Another implementation's outputs where onnxc and `onnx.reference` disagree: (who, outputs).

    Why: onnx.reference is wrong in places the mutations reach, and a disagreement there is not
    onnxc's bug. Seen (onnx 1.23): BatchNormalization-9..13 applies its `momentum` default to
    batch statistics even with one output (inference); Unique with sorted=0 takes the first
    occurrences along axis 0 whatever the axis (and from the unflattened input without one);
    QuantizeLinear casts +-inf to int32 (undefined in numpy; the spec saturates); NLLLoss and
    SoftmaxCrossEntropyLoss index the input with an out-of-range target (-1 once ignore_index
    changes) instead of treating it as undefined. onnxruntime (IR version capped at 10, the
    newest it reads) is asked first; for QuantizeLinear to an integer type, which onnxruntime
    lacks at the newest opsets, the reference again with +-inf clipped to a finite value that
    saturates the same way. Both are asked about the model with Resize's negative `axes` made
    non-negative (`_resize_axes_normalized`). None when neither applies or both fail."""
    model = _resize_axes_normalized(model, feeds)
    try:
        import onnxruntime as ort  # noqa: PLC0415 - optional: only where the reference disagrees
    except ImportError:
        ort = None
    if ort is not None:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.ir_version = min(m.ir_version, 10)
        try:
            opts = ort.SessionOptions()
            opts.log_severity_level = 4
            sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            return "onnxruntime", sess.run(None, feeds)
        except Exception:  # noqa: BLE001 - onnxruntime refuses the model or the opset: no opinion
            pass
    ops = {n.op_type for n in model.graph.node}
    if ops == {"QuantizeLinear"} and len(model.graph.node) == 1:
        node = model.graph.node[0]
        x = node.input[0]
        if x in feeds and feeds[x].dtype.kind == "f" and not np.isfinite(feeds[x]).all():
            f = dict(feeds)
            # In float64 (a float16 x cannot hold a big enough finite value), +-inf becomes a value
            # whose quotient by the smallest scale (2^24) saturates every integer type QuantizeLinear
            # has and still fits the int32 the reference casts to.
            scale = feeds.get(node.input[1]) if len(node.input) > 1 else None
            smallest = float(np.min(np.abs(scale))) if scale is not None and scale.size else 1.0
            big = 2.0**24 * smallest
            x64 = feeds[x].astype(np.float64)
            f[x] = np.where(np.isposinf(x64), big, np.where(np.isneginf(x64), -big, x64))
            try:
                from onnx.reference import ReferenceEvaluator

                return "onnx.reference with +-inf clipped", ReferenceEvaluator(model).run(None, f)
            except Exception:  # noqa: BLE001 - no opinion
                return None
    return None


def worker_main(jit_opt_level: int = 3, target: str = "cpu") -> None:
    """Read case file paths from stdin, one per line; write one JSON result line per case."""
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        with open(path, "rb") as fh:
            case = pickle.load(fh)
        reused = bool(_LAST_COMPILED) and _LAST_COMPILED[0][:2] == (hashlib.sha1(case.model).hexdigest(), jit_opt_level)
        result = run_case(case, jit_opt_level, reuse=True, target=target)
        if reused and result["cls"] in BUGS:  # a replay (`--only`) compiles afresh: say so
            result["detail"] += " [on the model compiled for the previous case]"
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


class Worker:
    """A worker process; restarted when it dies (an abort) or a case times out.

    `history` holds the indices of the cases the current process ran before the running one: an
    abort's report carries them (the last `HISTORY` of them), because three aborts so far did not
    happen when their case ran alone (a fresh process refused it cleanly), so what crashed
    depends on what the process did before; `--replay` runs such a sequence in one process."""

    HISTORY = 2000

    def __init__(self, limit_bytes: int, jit_opt_level: int = 3, target: str = "cpu") -> None:
        self.limit_bytes = limit_bytes
        self.jit_opt_level = jit_opt_level
        self.target = target
        self.proc: subprocess.Popen[str] | None = None
        self.history: list[int] = []

    def _start(self) -> subprocess.Popen[str]:
        def limits() -> None:
            import resource

            os.nice(10)
            # The data segment, not the address space: LLVM's JIT reserves far more address space
            # than it uses, and an RLIMIT_AS of 6 GB made it abort on healthy models.
            resource.setrlimit(resource.RLIMIT_DATA, (self.limit_bytes, self.limit_bytes))

        env = dict(os.environ, PYTHONWARNINGS="ignore")
        return subprocess.Popen(
            [sys.executable, "-m", "onnxc.tools.fuzz_compile", "--worker", "--jit-opt-level", str(self.jit_opt_level), "--target", self.target],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=limits, env=env,
        )  # fmt: skip

    def run(self, path: str, timeout: float, index: int | None = None) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
            self.history = []
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(path + "\n")
        proc.stdin.flush()
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            self.stop()
            return {"cls": "timeout", "detail": f"over {timeout:.0f} s"}
        if not box or not box[0]:
            code = proc.wait()
            self.proc = None
            return {"cls": "abort", "detail": f"worker exit status {code} after {len(self.history)} earlier case(s)",
                    "history": self.history[-self.HISTORY:]}  # fmt: skip
        if index is not None:
            self.history.append(index)
        return json.loads(box[0])

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def case_key(case: Case) -> str:
    """A digest of what a case runs: the model's bytes and every feed's name, dtype, shape and
    data. Two draws of the same mutation of the same model (the `symbolic` "every dim" mutation
    of a model is always the same) have the same key."""
    digest = hashlib.sha1(case.model)
    for name in sorted(case.feeds):
        a = np.ascontiguousarray(case.feeds[name])
        digest.update(f"|{name}|{a.dtype.str}|{a.shape}|".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def report(seed: int, results: list[tuple[Case, dict[str, str]]], duplicates: int = 0, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report of a run: counts per outcome and per mutation, and the bug cases."""
    counts = Counter(r["cls"] for _, r in results)
    # Timeouts are listed too (not a bug class: a slow case on a loaded machine), so they can be
    # replayed (`--only`).
    bugs = [{"index": c.index, "base": c.base, "mutation": c.mutation, "change": c.detail, "cls": r["cls"], "why": r["detail"],
             **({"history": r["history"]} if "history" in r else {})}
            for c, r in results if r["cls"] in BUGS or r["cls"] == "timeout"]  # fmt: skip
    by_mutation = Counter(f"{c.mutation}:{r['cls']}" for c, r in results)
    # `ok` cases no implementation but onnxc's would compute (both references refused): not a
    # bug class (onnxc may accept what they reject), listed per base model for review.
    unverified = Counter(c.base for c, r in results if r["cls"] == "ok" and r["detail"].endswith("unverified"))
    return {"seed": seed, "cases": len(results), "counts": dict(counts), "by_mutation": dict(sorted(by_mutation.items())),
            "duplicates": duplicates, "unverified": sum(unverified.values()), "unverified_bases": dict(unverified.most_common()),
            **(extra or {}), "bugs": sorted(bugs, key=lambda b: b["index"])}  # fmt: skip


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` through a temporary name (a reader never sees half a report)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _checkout_commit() -> str:
    """The short commit of the onnxc checkout this runs from (a report names the code it tested),
    or "" outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def fuzz(n: int, seed: int, workers: int = 2, timeout: float = 120.0, only: int | None = None,
         deadline: float | None = None, limit_bytes: int = 6 << 30, log: Any = None, jit_opt_level: int = 3,
         json_path: Path | None = None, flush_s: float = 60.0, pause_file: Path | None = None,
         replay: list[int] | None = None, target: str = "cpu") -> dict[str, Any]:  # fmt: skip
    """Run `n` drawn cases (or just case `only`) on `workers` workers; stop starting cases after
    `deadline` (time.time()). Returns counts and the bug cases.

    A case whose model and feeds equal an earlier case's (`case_key`) is not run again: it is
    counted in `duplicates`, not in `cases`, so the counts are of distinct models and inputs.
    With `json_path` the report so far is written there every `flush_s` seconds (a long run
    stopped early keeps its counts) and at the end.

    While `pause_file` exists no case starts (the ones running finish): a long run on a shared
    machine steps aside for a benchmark without its cases timing out, as stopping the processes
    with SIGSTOP would make them (the per-case timeout is wall-clock time)."""
    bases = base_cases()
    if replay:
        # One worker runs these cases in this order (an abort's history, then its case), repeats
        # and all: what the dead worker's process did.
        drawn = {c.index: c for c in make_cases(max(replay) + 1, seed, bases)}
        sequence = [drawn[i] for i in replay]
        n, workers = len(sequence), 1
    cases = sequence if replay else make_cases(n, seed, bases)
    if only is not None:
        cases = [c for c in cases if c.index == only]
    seen: set[str] = set()
    # Cases of one model (bytes equal: the `feed` mutations of a base model, say) are queued
    # together, in the order of the first one drawn, so a worker compiles the model once
    # (`run_case(reuse=True)`); the order of the models stays the drawn one.
    groups: dict[str, list[Case]] = {}
    for c in cases:
        k = case_key(c)
        if replay:
            groups.setdefault(str(len(groups)), []).append(c)
        elif k not in seen:
            seen.add(k)
            groups.setdefault(hashlib.sha1(c.model).hexdigest(), []).append(c)
    unique = [c for group in groups.values() for c in group]
    duplicates = len(cases) - len(unique)
    tmp = Path(tempfile.mkdtemp(prefix="onnxc_fuzz_"))
    todo: queue.Queue[list[Case]] = queue.Queue()
    for group in groups.values():
        todo.put(group)
    results: list[tuple[Case, dict[str, str]]] = []
    lock = threading.Lock()
    start = time.time()
    last_flush = [start]
    paused = [0.0]  # seconds a worker waited on `pause_file`, summed over workers

    commit = _checkout_commit()

    def extra() -> dict[str, Any]:
        return {"drawn": len(cases), "target": target, "jit_opt_level": jit_opt_level, "workers": workers, "seconds": round(time.time() - start, 1),
                "paused_worker_s": round(paused[0], 1), **({"commit": commit} if commit else {})}  # fmt: skip

    def wait_while_paused() -> None:
        while pause_file is not None and pause_file.exists():
            time.sleep(1.0)
            with lock:
                paused[0] += 1.0

    def drive() -> None:
        w = Worker(limit_bytes, jit_opt_level, target)
        try:
            while deadline is None or time.time() < deadline:
                try:
                    group = todo.get_nowait()
                except queue.Empty:
                    return
                for c in group:
                    wait_while_paused()
                    if deadline is not None and time.time() >= deadline:
                        return
                    path = tmp / f"case{c.index}.pkl"
                    path.write_bytes(pickle.dumps(c))
                    r = w.run(str(path), timeout, c.index)
                    path.unlink()
                    with lock:
                        results.append((c, r))
                        if log is not None:
                            print(f"[{len(results)}] case {c.index} {c.base} {c.mutation} ({c.detail}): {r['cls']} {r['detail'][:160]}", file=log, flush=True)
                        if json_path is not None and time.time() - last_flush[0] >= flush_s:
                            last_flush[0] = time.time()
                            _write_json(json_path, report(seed, results, duplicates, {**extra(), "partial": True}))
        finally:
            w.stop()

    threads = [threading.Thread(target=drive) for _ in range(max(1, workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = report(seed, results, duplicates, extra())
    if json_path is not None:
        _write_json(json_path, out)
    return out


DOCS_BEGIN, DOCS_END = "<!-- fuzz_compile:begin (generated: python -m onnxc.tools.fuzz_compile --docs) -->", "<!-- fuzz_compile:end -->"


def render_docs(reports: list[dict[str, Any]], commit: str | list[str] | None = None) -> str:
    """The generated section of docs/robustness.md: one row per run (seed, the commit it ran on,
    cases, outcome counts), the outcomes per mutation of each run, and every bug case with its
    reason. `commit`: one for every run, or one per run (runs of a long record ran on different
    code, and an older run's figures must keep theirs); None: each report's own `commit`."""
    classes = ("ok", "refused", *BUGS, "timeout")
    if commit is None:
        commits = [str(r.get("commit", "")) for r in reports]
    else:
        commits = [commit] * len(reports) if isinstance(commit, str) else list(commit)
    if len(commits) != len(reports):
        raise ValueError(f"{len(commits)} commits for {len(reports)} runs")
    lines = [DOCS_BEGIN, "", "Runs (`python -m onnxc.tools.fuzz_compile --seed S --cases N`; the commit each ran on):", ""]
    lines += ["| seed | commit | cases | " + " | ".join(classes) + " |", "|---|---|---|" + "---|" * len(classes)]
    for r, c in zip(reports, commits):
        lines.append(f"| {r['seed']} | {c} | {r['cases']} | " + " | ".join(str(r["counts"].get(k, 0)) for k in classes) + " |")
    lines += ["", "| seed | mutation | " + " | ".join(classes) + " |", "|---|---|" + "---|" * len(classes)]
    for r in reports:
        per: dict[str, Counter[str]] = {}
        for key, n in r["by_mutation"].items():
            mutation, cls = key.split(":")
            per.setdefault(mutation, Counter())[cls] += n
        for mutation in sorted(per):
            lines.append(f"| {r['seed']} | {mutation} | " + " | ".join(str(per[mutation].get(k, 0)) for k in classes) + " |")
    lines.append("")
    for r in reports:  # what the table does not say: draws, duplicates, unverified answers, speed
        if "drawn" not in r:
            continue
        rate = f", {r['cases'] / r['seconds']:.1f} cases/s" if r.get("seconds") else ""
        lines.append(f"- seed {r['seed']}: {r['drawn']} cases drawn, {r.get('duplicates', 0)} of them duplicates of earlier ones "
                     f"(not run){', stopped early (time limit or interrupted)' if r['cases'] + r.get('duplicates', 0) < r['drawn'] else ''}; "
                     f"jit_opt_level {r.get('jit_opt_level', 3)}, {r.get('workers', '?')} worker(s), {r.get('seconds', '?')} s{rate}; "
                     f"{r.get('unverified', 0)} `ok` cases unverified (onnx.reference and onnxruntime both refuse)"
                     + (": " + ", ".join(f"{b} ({n})" for b, n in list(r.get("unverified_bases", {}).items())[:12]) if r.get("unverified") else "") + ".")  # fmt: skip
    bugs = [(r["seed"], b) for r in reports for b in r["bugs"]]
    lines += ["", f"Bug and timeout cases ({len(bugs)}):" if bugs else "No bug case.", ""]
    for seed, b in bugs:
        lines.append(f"- seed {seed} case {b['index']}: {b['base']}, {b['mutation']} ({b['change']}): **{b['cls']}** {b['why']}")
    return "\n".join(lines + ["", DOCS_END])


def write_docs(path: Path, reports: list[dict[str, Any]], commit: str | list[str] | None = None) -> None:
    """Replace the generated section of `path` (between DOCS_BEGIN and DOCS_END)."""
    text = path.read_text()
    start, end = text.index(DOCS_BEGIN), text.index(DOCS_END) + len(DOCS_END)
    path.write_text(text[:start] + render_docs(reports, commit) + text[end:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m onnxc.tools.fuzz_compile", description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    p.add_argument("--minutes", type=float, default=None, help="stop starting cases after this many minutes")
    p.add_argument("--only", type=int, default=None, help="replay one case index")
    p.add_argument("--json", type=Path, default=None, help="write the counts and bug cases here")
    p.add_argument("--verbose", action="store_true", help="print every case's outcome")
    p.add_argument("--docs", type=Path, default=None, help="write the runs' counts into this file's generated section")
    p.add_argument("--from-json", type=Path, nargs="*", default=None, help="with --docs: the reports of earlier runs instead of a run")
    p.add_argument("--commit", nargs="*", default=None,
                   help="with --docs: the commit the runs were made on (one, or one per --from-json report; default: each report's own)")
    p.add_argument("--jit-opt-level", type=int, default=3, choices=(0, 1, 2, 3),
                   help="the CPU target's LLVM optimization level (CpuPipelineOptions.jit_opt_level); 0 compiles fastest")
    p.add_argument("--target", default="cpu", choices=("cpu", "vulkan"),
                   help="the target the cases compile for (vulkan: the GPU mapping on a Vulkan device, lavapipe here)")
    p.add_argument("--flush-s", type=float, default=60.0, help="with --json: write the report so far this often (seconds)")
    p.add_argument("--pause-file", type=Path, default=None, help="no case starts while this file exists (to make room for a benchmark)")
    p.add_argument("--replay", default=None, help="case indices (comma separated: an abort's history, then its index) run in this order in one worker process")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker_main(args.jit_opt_level, args.target)
        return 0
    if args.docs is not None and args.from_json:
        commits = None if not args.commit else (args.commit[0] if len(args.commit) == 1 else args.commit)
        reports = sorted((json.loads(f.read_text()) for f in args.from_json), key=lambda r: r["seed"])
        write_docs(args.docs, reports, commits)
        return 0
    deadline = None if args.minutes is None else time.time() + 60 * args.minutes
    out = fuzz(args.cases, args.seed, args.workers, args.timeout, args.only, deadline, log=sys.stderr if args.verbose else None,
               jit_opt_level=args.jit_opt_level, json_path=args.json, flush_s=args.flush_s, pause_file=args.pause_file,
               replay=[int(i) for i in args.replay.split(",")] if args.replay else None, target=args.target)  # fmt: skip
    print(json.dumps({k: out[k] for k in ("seed", "cases", "duplicates", "seconds", "counts")}))
    for b in out["bugs"]:
        print(f"{'BUG ' if b['cls'] in BUGS else ''}{b['cls']}: case {b['index']} ({b['base']}, {b['mutation']}: {b['change']}): {b['why']}")
    if args.docs is not None:
        write_docs(args.docs, [out], args.commit[0] if args.commit else "")
    return 1 if any(out["counts"].get(k, 0) for k in BUGS) else 0


if __name__ == "__main__":
    sys.exit(main())
