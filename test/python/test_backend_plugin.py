"""The example vendor plug-in (examples/onnxc-sim-accelerator) through the whole flow (issue 12 item 6).

How it is "installed": a `.dist-info` folder is written in a temporary site folder with the
entry points the example's own pyproject.toml declares (read with tomllib, so a typo there
fails here), and the example's `src/` goes on the path: exactly what `pip install` leaves
behind, without building a wheel (this machine has no `wheel` package and no network).
`importlib.metadata` then finds it like any installed distribution.

What is checked: discovery (with and without a device, in-process and in a fresh interpreter),
per-node compatibility answers (ops and data types), partition decisions that follow the
declared MACs and link bandwidth, fallback when the device refuses a graph at init (too little
device memory), results equal to the CPU target's, and the transfers the device counted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.targets import backends as B
from onnxc.targets.backends import Support

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "onnxc-sim-accelerator"
RTOL, ATOL = 1e-3, 1e-6


def install(site: Path) -> Path:
    """Write the example's distribution metadata into `site` (see the module doc); returns the
    folder to put on the path besides `site` (the example's sources)."""
    meta = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    dist = site / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    lines = []
    for group, entries in meta["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {value}" for name, value in entries.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return EXAMPLE / "src"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONNXC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "figures"))


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The plug-in installed (metadata + sources on sys.path); yields a function returning the
    present backends (optionally with `ONNXC_SIM_ACCEL_*` settings) without Vulkan, so the
    decisions depend on the declared figures and the CPU's only."""
    src = install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for key in list(os.environ):
        if key.startswith("ONNXC_SIM_ACCEL_"):
            monkeypatch.delenv(key)

    def present(**settings: float) -> list[B.Backend]:
        for k, v in settings.items():
            monkeypatch.setenv(f"ONNXC_SIM_ACCEL_{k.upper()}", str(v))
        return [b for b in B.backends() if b.name != "vulkan"]

    yield present
    for name in [m for m in sys.modules if m.startswith("onnxc_sim_accelerator")]:
        sys.modules.pop(name)


def single(op: str, dtype: int, shapes: list[list[int]], out: list[int], **attrs: object) -> onnx.ModelProto:
    names = [f"i{k}" for k in range(len(shapes))]
    g = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], op,
                          [helper.make_tensor_value_info(n, dtype, s) for n, s in zip(names, shapes)],
                          [helper.make_tensor_value_info("y", dtype, out)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def mlp(n: int = 256) -> onnx.ModelProto:
    """MatMul + Add + Relu (the device's ops) then Softmax (not one): x[n, n] -> y."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32) / n, "w")
    b = numpy_helper.from_array(rng.standard_normal((n,)).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def placement(backends: list[B.Backend], model: onnx.ModelProto) -> dict[str, str]:
    from onnxc.targets.backends.partition import partition

    return {n.split(" ")[-1].strip("()"): d.backend for d in partition(model, backends).decisions for n in d.nodes}


# ----------------------------------------------------------------------------- discovery


def test_discovered_through_its_entry_point_with_declared_figures(sim) -> None:
    assert [e.name for e in B.plugin_entry_points()] == ["simaccel"]
    assert "onnxc_sim_accelerator" not in sys.modules  # declared, not imported, until discovery
    found = {b.name: b for b in sim()}
    info = found["simaccel"].info()
    assert info.device_kind == "accelerator" and info.vendor == "onnxc examples"
    assert info.macs["f32"] == B.Figure(50.0e12, "declared") and info.host_to_device == B.Figure(16.0e9, "declared")
    assert info.dtypes == ("f32", "f16")
    assert {b.name for b in sim(devices=2)} >= {"simaccel", "simaccel1"}
    assert [b.name for b in sim(devices=0)] == ["cpu"]  # no device: not listed, no error


def test_discovery_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """What a user sees after installing the plug-in: a new process lists it (and not without a device)."""
    src = install(tmp_path / "site")
    code = "from onnxc.targets.backends import backends; print([b.name for b in backends()])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(src), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120).stdout
    assert "'simaccel'" in out and out.startswith("['cpu'")
    env["ONNXC_SIM_ACCEL_DEVICES"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120).stdout
    assert "simaccel" not in out


# ------------------------------------------------------------------------- compatibility


@pytest.mark.parametrize(
    ("model", "support", "reason"),
    [
        (single("Add", TensorProto.FLOAT, [[4], [4]], [4]), Support.SUPPORTED, ""),
        (single("MatMul", TensorProto.FLOAT16, [[4, 4], [4, 4]], [4, 4]), Support.SUPPORTED, ""),
        (single("Add", TensorProto.INT64, [[4], [4]], [4]), Support.UNSUPPORTED, "float32/float16 only: 'i0' is INT64"),
        (single("Add", TensorProto.DOUBLE, [[4], [4]], [4]), Support.UNSUPPORTED, "'y' is DOUBLE"),
        (single("Softmax", TensorProto.FLOAT, [[4]], [4]), Support.UNSUPPORTED, "no kernel for Softmax"),
        (single("Conv", TensorProto.FLOAT, [[1, 4, 8, 8], [4, 2, 3, 3]], [1, 4, 6, 6], group=2), Support.UNSUPPORTED, "ungrouped Conv only"),
    ],
    ids=["add-f32", "matmul-f16", "add-i64", "add-f64", "softmax", "grouped-conv"],
)
def test_compatibility_per_node(sim, model: onnx.ModelProto, support: Support, reason: str) -> None:
    dev = B.get_backend("simaccel", sim())
    answer = dev.compatibility(model)
    assert answer.support is support and reason in answer.reason, answer


def test_bare_nodes_are_judged_by_op_type(sim) -> None:
    dev = B.get_backend("simaccel", sim())
    assert dev.compatibility(helper.make_node("Relu", ["x"], ["y"])).support is Support.PARTIAL
    assert dev.compatibility(helper.make_node("LSTM", ["x"], ["y"])).support is Support.UNSUPPORTED


def test_partition_marks_each_node_with_the_backends_that_take_it(sim) -> None:
    from onnxc.targets.backends.partition import partition
    from onnxc.transforms.onnx_partition import ACCEPTED_ATTR
    from mlir import ir

    p = partition(mlp(), sim())
    with p.module.context:
        marks = {}
        for op in p.module.body.operations[0].regions[0].blocks[0].operations:
            if ACCEPTED_ATTR in op.attributes:
                marks[op.name] = [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes[ACCEPTED_ATTR])]
    assert marks == {"onnx.mat_mul": ["cpu", "simaccel"], "onnx.add": ["cpu", "simaccel"], "onnx.relu": ["cpu", "simaccel"], "onnx.softmax": ["cpu"]}


# -------------------------------------------------------------------------- decisions


#: A device far beyond any CPU (the CPU's figures are measured on this machine, so the
#: decisions below must not hinge on how fast it is): only the changed figure decides.
FAST = {"macs_f32": 1e18, "memory_bandwidth": 1e16, "link": 1e16}


def test_decisions_follow_the_declared_figures(sim) -> None:
    model = mlp()
    fast = placement(sim(**FAST), model)
    assert fast == {"mm": "simaccel", "bias": "simaccel", "relu": "simaccel", "softmax": "cpu"}, fast
    # The same device behind a 1 KB/s link: moving 256 KiB costs minutes, the CPU keeps everything.
    assert set(placement(sim(**{**FAST, "link": 1e3}), model).values()) == {"cpu"}
    # A fast link but a device of 1 kMAC/s: no gain either.
    assert set(placement(sim(**{**FAST, "macs_f32": 1e3}), model).values()) == {"cpu"}
    # Back to the fast figures: offloaded again (the answers are not cached across figures).
    assert placement(sim(**FAST), model) == fast


# ---------------------------------------------------------------------- execution


def test_results_equal_the_cpu_target_and_transfers_are_counted(sim) -> None:
    model = mlp()
    x = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
    sim(**FAST)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        het = onnxc.compile(model, target="auto")
    assert {s.backend for s in het.partitioned.steps} == {"simaccel", "cpu"}, [str(w.message) for w in caught]
    dev = next(s.graph.backend for s in het.partitioned.steps if s.backend == "simaccel")
    assert dev.opened == 1 and dev.stats.weight_bytes >= 256 * 256 * 4
    got = het(x)[0]
    want = onnxc.compile(model, target="cpu")(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)
    # One run: x in (256 KiB), Relu's output out (256 KiB); the weights are not moved again.
    assert (dev.stats.runs, dev.stats.h2d_copies, dev.stats.d2h_copies) == (1, 1, 1)
    assert dev.stats.h2d_bytes == dev.stats.d2h_bytes == 256 * 256 * 4
    het(x)
    assert dev.stats.runs == 2 and dev.stats.h2d_bytes == 2 * 256 * 256 * 4


def test_refusal_at_init_falls_back_to_the_cpu(sim) -> None:
    """Every node fits, the whole subgraph does not (512 KiB of device memory): the device refuses
    it at init, onnxc warns naming the nodes and the CPU runs them."""
    model = mlp()
    x = np.random.default_rng(2).standard_normal((256, 256)).astype(np.float32)
    sim(memory=1 << 19)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        het = onnxc.compile(model, target=["simaccel", "cpu"])
    texts = [str(w.message) for w in caught]
    assert any("backend 'simaccel' failed on nodes onnx.mat_mul#0 (mm), onnx.add#1 (bias), onnx.relu#2 (relu)" in t
               and "needs" in t and "running them on the CPU" in t for t in texts), texts
    assert {s.backend for s in het.partitioned.steps} == {"cpu"}
    np.testing.assert_allclose(het(x)[0], onnxc.compile(model, target="cpu")(x)[0], rtol=1e-5, atol=1e-7)


def test_session_with_the_plugin_provider(sim) -> None:
    sim()
    model = mlp(64)
    sess = onnxc.InferenceSession(model, providers=["simaccel", "CPUExecutionProvider"])
    assert sess.get_providers() == ["simaccel", "cpu"]
    x = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)


# ------------------------------------------------------- every op of the backend suite


SWEEP = """
import json, sys, warnings
warnings.simplefilter("ignore")  # the case builders divide by zero on purpose
from onnx.backend.test.case import node
import onnxc
from onnxc.errors import OnnxcError
from onnxc.targets.backends import backends

cases = {}
for c in node.collect_testcases(None):
    if "_expanded" not in c.name and c.model.graph.node:
        cases.setdefault(c.model.graph.node[0].op_type, c)
found = {b.name: b for b in backends()}
out = {}
for op, c in sorted(cases.items()):
    values = list(c.model.graph.input) + list(c.model.graph.output)
    row = {"case": c.name, "tensor_io": all(v.type.HasField("tensor_type") for v in values),
           "types": sorted({v.type.tensor_type.elem_type for v in values if v.type.HasField("tensor_type")}),
           "group": next((a.i for a in c.model.graph.node[0].attribute if a.name == "group"), 1)}
    for name in ("cpu", "simaccel"):
        a = found[name].compatibility(c.model)
        row[name] = [a.support.value, a.reason]
    if row["cpu"][0] != "supported" and row["tensor_io"]:
        try:
            onnxc.compile(c.model)
            row["compiles"] = True
        except OnnxcError:
            row["compiles"] = False
    out[op] = row
print(json.dumps(out))
"""


def test_every_op_of_the_backend_suite_gets_an_answer_per_backend(tmp_path: Path) -> None:
    """The first node case of every op type of the ONNX backend suite, asked of the CPU and of
    the simulated accelerator (in a child process: a crash there is a failure here, not a dead
    test session). Every answer is a verdict with a reason when negative; the CPU's refusals
    agree with `onnxc.compile` (a tensor model the CPU backend refuses, onnxc.compile refuses
    too); the accelerator's follow its documented subset (ops of SUPPORTED_OPS, float32/float16
    tensors, ungrouped Conv), checked against the case's own types."""
    src = install(tmp_path / "site")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONNXC_SIM_ACCEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(src), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SWEEP], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    rows = json.loads(done.stdout)
    assert len(rows) > 150  # every op type of the suite, not a slice
    sys.path.insert(0, str(src))
    try:
        from onnxc_sim_accelerator import SUPPORTED_OPS, SUPPORTED_TYPES
    finally:
        sys.path.remove(str(src))
    for op, row in rows.items():
        for name in ("cpu", "simaccel"):
            verdict, reason = row[name]
            assert verdict in ("supported", "unsupported", "partially supported"), (op, name, row)
            assert verdict == "supported" or reason, (op, name, row)
        if "compiles" in row:
            assert not row["compiles"], f"{op}: the CPU backend refuses {row['case']} ({row['cpu'][1]}) but onnxc.compile takes it"
        takes = op in SUPPORTED_OPS and row["tensor_io"] and set(row["types"]) <= set(SUPPORTED_TYPES) and row["group"] == 1
        assert (row["simaccel"][0] == "supported") == takes, (op, row)
    cpu_no = sorted(op for op, row in rows.items() if row["cpu"][0] != "supported")
    assert "Add" not in cpu_no and "Conv" not in cpu_no and "MatMul" not in cpu_no, cpu_no
