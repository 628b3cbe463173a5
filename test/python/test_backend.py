"""The ONNX backend test suite on onnxc's CPU target, and the backend protocol itself.

What: `onnx.backend.test.BackendTest(onnxc.backend, __name__)` over every case of the suite that
the onnx wheel carries: node tests (built in memory, with their `_expanded` variants), `simple`,
`pytorch-converted`, `pytorch-operator` and the `light` models (CPU only: the CUDA copies are
dropped). The expected failures are `backend_xfails.py` (generated with the reasons by
`python -m onnxc.tools.gen_conformance`); they are strict: unittest's expectedFailure that passes
is an "unexpected success", which pytest reports as a failure, so the list cannot go stale.
`EXCLUDES` (cases that kill the process or run past the time limit) are skipped with their reason.
A case running past ONNXC_BACKEND_TIMEOUT seconds (default 600) ends its process with a traceback
(under pytest-xdist the worker is replaced and the case reported failed) rather than hanging CI.

Beside the suite: the backend protocol (`prepare`/`run`/`run_model`/`run_node`/`supports_device`),
its errors, and `gen_conformance --check` (the generated docs agree with the list, the op table
and the lowering registry).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxc.backend
from onnxc.errors import OnnxcError
from onnxc.tools import gen_conformance


def _expectations() -> tuple[dict[str, str], dict[str, str]]:
    # Loaded by path: works whatever pytest's import mode and rootdir are.
    path = Path(__file__).with_name("backend_xfails.py")
    spec = importlib.util.spec_from_file_location("backend_xfails", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.XFAILS), dict(mod.EXCLUDES)


XFAILS, EXCLUDES = _expectations()

backend_test = gen_conformance.build_backend_test(
    __name__,
    xfails=XFAILS,
    excludes=EXCLUDES,
    time_limit_s=float(os.environ.get("ONNXC_BACKEND_TIMEOUT", gen_conformance.PYTEST_TIME_LIMIT_S)),
)
globals().update(gen_conformance.suite_cases(backend_test))


# --- the backend protocol ------------------------------------------------------------------------


def _add_relu_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]), helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_prepare_and_run_match_reference() -> None:
    model = _add_relu_model()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
    rep = onnxc.backend.prepare(model, "CPU")
    for got in (rep.run([a, b]), rep.run({"a": a, "b": b}), onnxc.backend.run_model(model, [a, b])):
        assert len(got) == 1
        np.testing.assert_allclose(got[0], want, rtol=1e-6)
    assert rep.run([a, b])["y"].shape == (2, 3)  # outputs are also reachable by name


def test_run_node_builds_a_model() -> None:
    x = np.array([[1.0, -2.0], [3.5, 0.25]], dtype=np.float32)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
    (got,) = onnxc.backend.run_node(node, [x])
    np.testing.assert_array_equal(got, x.T)
    (got,) = onnxc.backend.run_node(node, [x], outputs_info=[(np.float32, (2, 2))], opset_version=13)
    np.testing.assert_array_equal(got, x.T)


def test_supports_only_cpu() -> None:
    assert onnxc.backend.supports_device("CPU")
    assert onnxc.backend.supports_device("CPU:0")
    assert not onnxc.backend.supports_device("CUDA")
    with pytest.raises(OnnxcError, match="device 'CUDA' is not supported"):
        onnxc.backend.prepare(_add_relu_model(), "CUDA")


def test_errors_are_onnxc_errors() -> None:
    rep = onnxc.backend.prepare(_add_relu_model())
    with pytest.raises(OnnxcError, match="input 'a'"):
        rep.run([np.zeros((3, 3), np.float32), np.zeros(3, np.float32)])
    with pytest.raises(OnnxcError, match="dtype"):
        rep.run([np.zeros((2, 3), np.float64), np.zeros(3, np.float32)])
    # An op type no schema knows: the importer names the node.
    node = helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(OnnxcError, match="NoSuchOp"):
        onnxc.backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_suite_is_cpu_only_and_complete() -> None:
    cases = gen_conformance.suite_cases(backend_test)
    names = {n for cls in cases.values() for n in vars(cls) if n.startswith("test_")}
    assert names and all(n.endswith("_cpu") for n in names)
    catalog = {c.name for c in gen_conformance.catalog()}
    assert names == catalog  # the report counts exactly what pytest runs


def test_generated_files_are_up_to_date() -> None:
    """`gen_conformance --check`: docs agree with backend_xfails.py, the op table and the lowering
    registry, and every entry names a case. (Whether the entries are *true* is what the strict
    expected failures of the suite above check.)"""
    assert gen_conformance.main(["--check"]) == 0
