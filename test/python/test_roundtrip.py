"""Round trip of the ONNX backend test suite through the importer and the exporter.

For every model of the suite (the node tests, built in memory from `onnx.backend.test.case.node`; the
model tests built in memory from `onnx.backend.test.case.model`; and the `simple`,
`pytorch-converted`, `pytorch-operator` and `light` data folders shipped in the onnx wheel):

1. import -> export -> import gives identical IR (printed with locations), and
2. the exported model gives the same outputs as the original under `onnx.reference.ReferenceEvaluator`
   on the test's inputs (bit for bit: both run the same reference kernels, so any difference means the
   exported model is not the same model).

Where the reference evaluator cannot run the *original* model (it lacks a kernel, e.g. Pillow for
ImageDecoder or the deprecated Scatter), step 2 is skipped with that reason; step 1 still ran.
"""

from __future__ import annotations

import functools
import pathlib
import re
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from onnxc.importers import export_model, import_context, import_model
from onnxc.importers.config import ImportConfig

DATA = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data"
CONFIG = ImportConfig(warn_custom_ops=False)
# Ops whose outputs are random: only shapes and types can agree.
RANDOM_OPS = {"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"}
# The light models (real CNN layer sizes) take minutes each in the pure-Python reference evaluator;
# only the small ones are evaluated, the others are checked for IR identity alone.
LIGHT_EVALUATED = {"light_squeezenet", "light_shufflenet"}


@functools.lru_cache(maxsize=1)
def _context() -> Any:
    return import_context()


@functools.lru_cache(maxsize=1)
def _node_cases() -> dict[str, Any]:
    from onnx.backend.test.case import model as model_cases
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = {c.name: c for c in node_cases.collect_testcases(None)}
        cases.update({c.name: c for c in model_cases.collect_testcases() if c.model is not None})
    return cases


def _dir_cases() -> list[str]:
    out = []
    for folder in ("simple", "pytorch-converted", "pytorch-operator"):
        out += sorted(f"{folder}/{p.name}" for p in (DATA / folder).iterdir() if (p / "model.onnx").is_file())
    out += sorted(f"light/{p.stem}" for p in (DATA / "light").glob("*.onnx"))
    return out


def _read_value(path: pathlib.Path, vi: onnx.ValueInfoProto) -> Any:
    """An input/output .pb of a data folder, as the reference evaluator takes it."""
    kind = vi.type.WhichOneof("value")
    data = path.read_bytes()
    if kind == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if kind == "optional_type":
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    if kind == "map_type":
        mp = onnx.MapProto()
        mp.ParseFromString(data)
        return numpy_helper.to_dict(mp)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


def _feed(value: Any) -> Any:
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_feed(v) for v in value]
    return value


def _assert_same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        if a.dtype.kind == "O":
            assert np.array_equal(a, b), where
        else:
            # bit for bit (NaN payloads and -0.0 included; ml_dtypes' float8 have no NaN-aware compare)
            assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), f"{where}: {a!r} vs {b!r}"
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: {type(b).__name__} of {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b or (a is None and b is None), f"{where}: {a!r} vs {b!r}"


def _run(model: onnx.ModelProto, inputs: dict[str, Any]) -> list[Any]:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, inputs)


def _uses_random(model: onnx.ModelProto) -> bool:
    nodes = list(model.graph.node) + [n for f in model.functions for n in f.node]
    return any(n.op_type in RANDOM_OPS for n in nodes)


def _canonical_resources(text: str) -> str:
    """Rename `dense_resource` blob keys by order of first use: MLIR uniques blob keys per context
    (`t_w_0`, then `t_w_1` when the same tensor is imported again), so keys are not model content."""
    keys: dict[str, str] = {}
    for key in re.findall(r"dense_resource<([^>]+)>", text):
        keys.setdefault(key, f"blob{len(keys)}")
    if not keys:
        return text
    pattern = re.compile("|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True)).join([r"(?<![\w.$])(", r")(?![\w.$])"]))
    return pattern.sub(lambda m: keys[m.group(1)], text)


def _round_trip(model: onnx.ModelProto | str) -> onnx.ModelProto:
    """Step 1: import, export, import again; the two modules print identically. Returns the export."""
    ctx = _context()
    first = import_model(model, CONFIG, context=ctx)
    text = _canonical_resources(first.operation.get_asm(enable_debug_info=True, assume_verified=True))
    exported = export_model(first)
    second = import_model(exported, CONFIG, context=ctx)
    again = _canonical_resources(second.operation.get_asm(enable_debug_info=True, assume_verified=True))
    if again != text:
        import difflib

        diff = "\n".join(list(difflib.unified_diff(text.splitlines(), again.splitlines(), lineterm="", n=1))[:40])
        pytest.fail(f"import(export(import(m))) differs from import(m):\n{diff}")
    return exported


def _compare(original: onnx.ModelProto, exported: onnx.ModelProto, data_sets: list[tuple[dict[str, Any], Any]]) -> None:
    """Step 2: the same outputs under the reference evaluator."""
    for inputs, _ in data_sets:
        try:
            want = _run(original, inputs)
        except Exception as exc:  # the reference evaluator's own gap, not the round trip's
            pytest.skip(f"IR identity checked; onnx.reference cannot run the original model ({type(exc).__name__}: {str(exc)[:120]})")
        got = _run(exported, inputs)
        assert len(want) == len(got)
        if _uses_random(original):
            for i, (a, b) in enumerate(zip(want, got)):
                assert np.asarray(a).shape == np.asarray(b).shape and np.asarray(a).dtype == np.asarray(b).dtype, f"output {i}"
            continue
        for i, (a, b) in enumerate(zip(want, got)):
            _assert_same(a, b, f"output {i}")


@pytest.mark.parametrize("name", sorted(_node_cases()))
def test_node_case(name: str) -> None:
    case = _node_cases()[name]
    exported = _round_trip(case.model)
    graph_inputs = [vi.name for vi in case.model.graph.input]
    data = [(dict(zip(graph_inputs, [_feed(v) for v in inputs])), outputs) for inputs, outputs in case.data_sets or []]
    _compare(case.model, exported, data)


@pytest.mark.parametrize("case", _dir_cases())
def test_data_folder(case: str) -> None:
    folder, name = case.split("/")
    if folder == "light":
        path = DATA / folder / f"{name}.onnx"
    else:
        path = DATA / folder / name / "model.onnx"
    original = onnx.load(str(path))
    exported = _round_trip(str(path))
    if folder == "light":
        if name not in LIGHT_EVALUATED:
            pytest.skip("IR identity checked; the pure-Python reference evaluator takes minutes on this CNN's full-size convolutions")
        inits = {t.name for t in original.graph.initializer}
        rng = np.random.default_rng(0)
        inputs = {}
        for vi in original.graph.input:
            if vi.name in inits:
                continue
            shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
            inputs[vi.name] = rng.standard_normal(shape).astype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
        _compare(original, exported, [(inputs, None)])
        return
    inits = {t.name for t in original.graph.initializer}
    real_inputs = [vi for vi in original.graph.input if vi.name not in inits]
    data = []
    for ds in sorted((path.parent).glob("test_data_set_*")):
        inputs = {}
        for i, vi in enumerate(real_inputs):
            p = ds / f"input_{i}.pb"
            if p.is_file():
                inputs[vi.name] = _read_value(p, vi)
        data.append((inputs, None))
    _compare(original, exported, data)
