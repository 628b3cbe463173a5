"""Tests of `onnxc.targets.backends` (issue 12): discovery (built-ins and entry-point plug-ins),
the ONNXIFI-style interface (reference counting, compatibility, graph I/O checks, futures),
measured figures and their cache, the `onnx-partition` pass's subgraph algorithm, and
partitioned execution checked against `onnx.reference`."""

from __future__ import annotations

import json
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnxc.targets import backends as B
from onnxc.targets.backends import measure
from onnxc.transforms.onnx_partition import form_subgraphs, is_acyclic_contraction

RTOL, ATOL = 1e-3, 1e-7


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One figures cache for the test session: each backend is measured once, not per test."""
    return tmp_path_factory.mktemp("figures")


@pytest.fixture(autouse=True)
def cache_dir(session_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tests measure into the session's cache folder, never the user's ~/.cache."""
    monkeypatch.setenv("ONNXC_CACHE_DIR", str(session_cache))
    return session_cache


def single(op: str, inputs: list[tuple[str, int, list[int]]], out: tuple[int, list[int]], **attrs: object) -> onnx.ModelProto:
    """A single-node model `op(inputs...) -> y` with typed inputs (what compatibility takes)."""
    node = helper.make_node(op, [n for n, _, _ in inputs], ["y"], **attrs)
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs], [helper.make_tensor_value_info("y", out[0], out[1])]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def vulkan_present() -> bool:
    """Whether a Vulkan compute device exists here (lavapipe after tools/install_system_deps.sh)."""
    try:
        from onnxc.targets.vulkan import vulkan_context

        vulkan_context()
        return True
    except Exception:  # noqa: BLE001 - VulkanUnavailable, or the package missing entirely
        return False


# ------------------------------------------------------------------------------ discovery


def test_cpu_always_discovered_and_vulkan_iff_device() -> None:
    names = [b.name for b in B.backends(plugins=False)]
    assert names[0] == "cpu"
    assert ("vulkan" in names) == vulkan_present()
    assert "cuda" not in names or __import__("onnxc.targets.cuda", fromlist=["x"]).cuda_device_count() > 0


def _fake_distribution(root: Path, body: str, entry: str = "fakeaccel = fake_accel_plugin:make") -> None:
    (root / "fake_accel_plugin.py").write_text(textwrap.dedent(body))
    dist = root / "fake_accel_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-accel-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[onnxc.backends]\n{entry}\n")


FAKE_PLUGIN = """
    import numpy as np
    import onnx
    from onnx.reference import ReferenceEvaluator
    from onnxc.targets.backends import Backend, BackendInfo, BackendError, Compatibility, Figure, Support

    ACCEPTED = {"Add", "Mul"}
    CLAIMED = set()  # ops it says it supports but refuses at init_graph (a lying or buggy driver)
    BROKEN = False  # compatibility queries raise
    MACS = 1.0e15
    LINK = 1.0e13
    STARTS = []

    class FakeAccel(Backend):
        name = "fakeaccel"

        def info(self):
            d = Figure(MACS, "declared")
            link = Figure(LINK, "declared")
            return BackendInfo("fakeaccel", "ACME", "1.0", "simulated", "accelerator", {"f32": d}, link, link, link,
                               1 << 30, ("f32",))

        def _startup(self):
            STARTS.append("start")

        def _shutdown(self):
            STARTS.append("stop")

        def compatibility(self, node_or_model):
            if BROKEN:
                raise RuntimeError("driver crashed")
            nodes = [node_or_model] if isinstance(node_or_model, onnx.NodeProto) else list(node_or_model.graph.node)
            bad = [n.op_type for n in nodes if n.op_type not in ACCEPTED | CLAIMED]
            if bad:
                return Compatibility(Support.UNSUPPORTED, f"fakeaccel runs only {sorted(ACCEPTED)}, not {bad}")
            return Compatibility(Support.SUPPORTED)

        def _compile_graph(self, model):
            if any(n.op_type not in ACCEPTED for n in model.graph.node):
                raise BackendError("fakeaccel: unsupported op")
            ref = ReferenceEvaluator(model)
            names = [i.name for i in model.graph.input]
            def run(*arrays):
                RUNS.append([n.op_type for n in model.graph.node])
                return ref.run(None, dict(zip(names, arrays)))
            return run

    RUNS = []

    def make():
        return FakeAccel()
"""


@pytest.fixture
def fake_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A plug-in distribution on sys.path, found only through its entry_points.txt."""
    root = tmp_path / "site"
    root.mkdir()
    _fake_distribution(root, FAKE_PLUGIN)
    monkeypatch.syspath_prepend(str(root))
    yield root
    sys.modules.pop("fake_accel_plugin", None)


def test_plugin_discovered_through_entry_points(fake_plugin: Path) -> None:
    eps = B.plugin_entry_points()
    assert [e.name for e in eps] == ["fakeaccel"]
    assert "fake_accel_plugin" not in sys.modules  # declared, not imported, until backends()
    found = {b.name: b for b in B.backends()}
    assert "fakeaccel" in found and found["cpu"] is not None
    info = found["fakeaccel"].info()
    assert info.macs["f32"] == B.Figure(1.0e15, "declared") and info.vendor == "ACME"


def test_broken_plugin_is_skipped_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "site"
    root.mkdir()
    _fake_distribution(root, "def make():\n    raise RuntimeError('no device driver')\n")
    monkeypatch.syspath_prepend(str(root))
    try:
        with pytest.warns(UserWarning, match="fakeaccel.*failed to load.*no device driver"):
            names = [b.name for b in B.backends()]
        assert names[0] == "cpu" and "fakeaccel" not in names
    finally:
        sys.modules.pop("fake_accel_plugin", None)


def test_get_backend_unknown_names_the_present_ones() -> None:
    with pytest.raises(B.BackendError, match=r"no backend 'tpu'.*backends: cpu"):
        B.get_backend("tpu", B.backends(plugins=False))


# --------------------------------------------------------------- lifetime and graph handles


def test_reference_counting_and_lazy_init(fake_plugin: Path) -> None:
    b = B.get_backend("fakeaccel")
    mod = sys.modules["fake_accel_plugin"]
    assert not b.started and mod.STARTS == []
    b.init()
    b.init()
    assert b.references == 2 and mod.STARTS == ["start"]
    b.release()
    assert b.started
    b.release()
    assert not b.started and mod.STARTS == ["start", "stop"]
    with pytest.raises(B.BackendError, match="released more often"):
        b.release()


def test_graph_io_checks_name_the_tensor_and_run_returns_a_future() -> None:
    cpu = B.get_backend("cpu", B.backends(plugins=False))
    model = single("Add", [("a", TensorProto.FLOAT, [2, 3]), ("b", TensorProto.FLOAT, [2, 3])], (TensorProto.FLOAT, [2, 3]))
    g = cpu.init_graph(model)
    assert cpu.references == 1
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(B.BackendError, match="input 'b' is not bound"):
        g.set_graph_io({"a": a})
    with pytest.raises(B.BackendError, match=r"input 'b': shape \(3, 2\), the graph expects 2x3"):
        g.set_graph_io({"a": a, "b": a.reshape(3, 2)})
    with pytest.raises(B.BackendError, match="input 'b': element type float64"):
        g.set_graph_io({"a": a, "b": a.astype(np.float64)})
    with pytest.raises(B.BackendError, match="'c' is not an input"):
        g.set_graph_io({"a": a, "b": a, "c": a})
    with pytest.raises(B.BackendError, match="before set_graph_io"):
        g.run_graph()
    out = np.zeros((2, 3), np.float32)
    g.set_graph_io({"a": a, "b": a + 1}, {"y": out})
    result = g.run_graph().result(timeout=60)
    np.testing.assert_allclose(result["y"], 2 * a + 1, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, 2 * a + 1, rtol=RTOL, atol=ATOL)  # bound output written in place
    g.release_graph()
    assert cpu.references == 0
    with pytest.raises(B.BackendError, match="released"):
        g.run_graph()


# --------------------------------------------------------------------------- compatibility


def test_cpu_compatibility_from_the_lowering_precheck() -> None:
    cpu = B.get_backend("cpu", B.backends(plugins=False))
    add = single("Add", [("a", TensorProto.FLOAT, [4]), ("b", TensorProto.FLOAT, [4])], (TensorProto.FLOAT, [4]))
    assert cpu.compatibility(add).support is B.Support.SUPPORTED
    # A string Add has no lowering: the pre-check's reason comes back.
    sadd = single("Add", [("a", TensorProto.STRING, [4]), ("b", TensorProto.STRING, [4])], (TensorProto.STRING, [4]))
    answer = cpu.compatibility(sadd)
    assert answer.support is B.Support.UNSUPPORTED and answer.reason
    custom = helper.make_node("Frobnicate", ["a"], ["y"], domain="com.acme")
    assert cpu.compatibility(custom).support is B.Support.UNSUPPORTED
    assert cpu.compatibility(helper.make_node("Add", ["a", "b"], ["y"])).support is B.Support.PARTIAL


@pytest.mark.skipif(not vulkan_present(), reason="no Vulkan device (run tools/install_system_deps.sh for lavapipe)")
def test_vulkan_compatibility_asks_the_target() -> None:
    vk = B.get_backend("vulkan", B.backends(plugins=False))
    add = single("Add", [("a", TensorProto.FLOAT, [4]), ("b", TensorProto.FLOAT, [4])], (TensorProto.FLOAT, [4]))
    assert vk.compatibility(add).support is B.Support.SUPPORTED, vk.compatibility(add).reason
    # f64 buffers: lavapipe has shaderFloat64, so the Vulkan target takes them as the CPU does.
    add64 = single("Add", [("a", TensorProto.DOUBLE, [4]), ("b", TensorProto.DOUBLE, [4])], (TensorProto.DOUBLE, [4]))
    cpu = B.get_backend("cpu", B.backends(plugins=False))
    assert cpu.compatibility(add64).support is B.Support.SUPPORTED
    assert vk.compatibility(add64).support is B.Support.SUPPORTED, vk.compatibility(add64).reason
    # A string Add: the target's own pre-check refuses it, with a reason.
    sadd = single("Add", [("a", TensorProto.STRING, [4]), ("b", TensorProto.STRING, [4])], (TensorProto.STRING, [4]))
    answer = vk.compatibility(sadd)
    assert answer.support is B.Support.UNSUPPORTED and answer.reason


# -------------------------------------------------------------------------- figures


def test_cpu_figures_measured_once_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxc.targets.backends import builtin

    cache_dir = tmp_path / "own"
    monkeypatch.setenv("ONNXC_CACHE_DIR", str(cache_dir))
    builtin._cpu_info.cache_clear()  # the process-wide CpuBackend info: measure into this folder
    info = B.get_backend("cpu", B.backends(plugins=False)).info()
    assert info.macs["f32"].value > 0 and info.memory_bandwidth.value > 0
    assert info.macs["f32"].provenance.startswith("measured ")
    stored = json.loads((cache_dir / measure.CACHE_FILE).read_text())
    assert measure.machine_key() in stored
    # A second call reads the file: measuring again would fail here.
    monkeypatch.setattr(measure, "measure_cpu", lambda: pytest.fail("measured twice"))
    again = measure.cpu_figures()
    assert again["macs"]["f32"].value == info.macs["f32"].value


# ------------------------------------------------------------------- partition algorithm


@st.composite
def dags(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]], set[int]]:
    n = draw(st.integers(1, 14))
    edges = [(u, v) for v in range(n) for u in range(v) if draw(st.booleans()) and draw(st.booleans())]
    eligible = {u for u in range(n) if draw(st.booleans())}
    return n, edges, eligible


@settings(max_examples=300, deadline=None)
@given(dags())
def test_subgraphs_are_connected_and_keep_the_graph_acyclic(dag: tuple[int, list[tuple[int, int]], set[int]]) -> None:
    n, edges, eligible = dag
    groups = form_subgraphs(n, edges, eligible)
    assert sorted(x for g in groups for x in g) == sorted(eligible)
    assert is_acyclic_contraction(n, edges, groups)
    for g in groups:  # weakly connected through edges inside the group
        members, reached, stack = set(g), {g[0]}, [g[0]]
        while stack:
            u = stack.pop()
            for a, b in edges:
                for x, y in ((a, b), (b, a)):
                    if x == u and y in members and y not in reached:
                        reached.add(y)
                        stack.append(y)
        assert reached == members


def test_diamond_with_foreign_middle_is_split() -> None:
    # 0 -> 1 -> 2 and 0 -> 2; node 1 not eligible: {0, 2} would be a cycle through 1.
    groups = form_subgraphs(3, [(0, 1), (1, 2), (0, 2)], {0, 2})
    assert groups == [[0], [2]]
    assert not is_acyclic_contraction(3, [(0, 1), (1, 2), (0, 2)], [[0, 2]])


# ------------------------------------------------------------------ partitioned execution


def mixed_model() -> onnx.ModelProto:
    """x*w + b -> Relu -> *2 -> +x -> Tanh: the fake accelerator takes Add and Mul only."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 64], np.random.default_rng(1).standard_normal(64 * 64).astype(np.float32))
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["m"], name="mul0"),
        helper.make_node("Add", ["m", "x"], ["a"], name="add0"),
        helper.make_node("Relu", ["a"], ["r"], name="relu0"),
        helper.make_node("Mul", ["r", "two"], ["m2"], name="mul1"),
        helper.make_node("Add", ["m2", "x"], ["a2"], name="add1"),
        helper.make_node("Tanh", ["a2"], ["y"], name="tanh0"),
    ]
    g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64]), helper.make_tensor_value_info("r", TensorProto.FLOAT, [64, 64])],
                          [w, two])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_partitioned_run_matches_reference(fake_plugin: Path) -> None:
    from onnxc.targets.backends.partition import decision_table, partition, run_partitioned

    found = B.backends()
    model = mixed_model()
    p = partition(model, found)
    by_backend = {d.backend for d in p.decisions}
    assert "fakeaccel" in by_backend, decision_table(p)
    # The accelerator's subgraphs hold only the ops it accepts; Relu and Tanh run on the CPU.
    for d in p.decisions:
        if d.backend == "fakeaccel":
            assert all(n.startswith(("onnx.add", "onnx.mul")) for n in d.nodes), d
    mod = sys.modules["fake_accel_plugin"]
    x = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    got = run_partitioned(model, {"x": x}, found)
    want = dict(zip(["y", "r"], ReferenceEvaluator(model).run(None, {"x": x})))
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL)
    assert mod.RUNS and all(set(r) <= {"Add", "Mul"} for r in mod.RUNS)


def test_partition_follows_the_declared_link_bandwidth(fake_plugin: Path) -> None:
    from onnxc.targets.backends.partition import decision_table, partition

    found = B.backends()
    mod = sys.modules["fake_accel_plugin"]
    fast = partition(mixed_model(), found)
    assert "fakeaccel" in {d.backend for d in fast.decisions}, decision_table(fast)
    mod.LINK = 1.0e3  # a link of 1 KB/s: moving 16 KiB costs seconds, the CPU keeps everything
    slow = partition(mixed_model(), found)
    assert {d.backend for d in slow.decisions} == {"cpu"}, decision_table(slow)


def test_refusal_at_init_falls_back_to_the_cpu_with_a_warning(fake_plugin: Path) -> None:
    from onnxc.targets.backends.partition import partition, run_partitioned

    found = B.backends()
    mod = sys.modules["fake_accel_plugin"]
    mod.CLAIMED = {"Relu", "Tanh"}
    p = partition(mixed_model(), found)
    assert any(d.backend == "fakeaccel" and any(n.startswith("onnx.relu") for n in d.nodes) for d in p.decisions)
    x = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    with pytest.warns(UserWarning, match=r"backend 'fakeaccel' failed on nodes .*onnx\.relu.*running them on the CPU"):
        got = run_partitioned(mixed_model(), {"x": x}, found)
    want = dict(zip(["y", "r"], ReferenceEvaluator(mixed_model()).run(None, {"x": x})))
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL)


def test_decision_table_lists_every_subgraph(fake_plugin: Path) -> None:
    from onnxc.targets.backends.partition import decision_table, partition

    p = partition(mixed_model(), B.backends())
    lines = decision_table(p).splitlines()
    assert lines[0].split()[:2] == ["subgraph", "nodes"] and "backend" in lines[0]
    assert len(lines) == 1 + len(p.decisions)
    assert sum(len(d.nodes) for d in p.decisions) == 6  # every node in exactly one subgraph
    assert [d.id for d in p.decisions] == list(range(len(p.decisions)))


@pytest.mark.skipif(not vulkan_present(), reason="no Vulkan device (run tools/install_system_deps.sh for lavapipe)")
def test_heterogeneous_cpu_and_vulkan_matches_reference() -> None:
    """Vulkan forced (on lavapipe the roofline rightly keeps everything on the CPU): the f32 ops
    run on Vulkan, the f64 branch (which the Vulkan target refuses) on the CPU."""
    from onnxc.targets.backends.partition import partition, run_partitioned

    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Cast", ["r"], ["d"], to=TensorProto.DOUBLE),
        helper.make_node("Sqrt", ["d"], ["s"]),
        helper.make_node("Cast", ["s"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["c", "r"], ["y"]),
    ]
    g = helper.make_graph(nodes, "het", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    found = B.backends(plugins=False)
    figures = B.get_backend("vulkan", found).info()
    assert figures.macs["f32"].value > 0 and figures.host_to_device.value > 0
    assert figures.macs["f32"].provenance.startswith("measured ")
    p = partition(model, found, force="vulkan")
    placed = {n.split("#")[0]: d.backend for d in p.decisions for n in d.nodes}
    assert placed["onnx.add"] == placed["onnx.mul"] == "vulkan" and placed["onnx.sqrt"] == "cpu", placed
    x = np.random.default_rng(4).standard_normal((8, 16)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: Vulkan must really run its subgraphs
        got = run_partitioned(model, {"x": x}, found, force="vulkan")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got["y"], want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("attrs", "options", "message"),
    [
        ("", "", "has no 'onnxc.backend_profiles'"),
        ("{onnxc.backend_profiles = {a = {mem_bw = 1.0 : f64}}}", "", "exactly one profile 'host'"),
        ("{onnxc.backend_profiles = {cpu = {host, mem_bw = 1.0 : f64}}}", "{backends=tpu}", "unknown backend"),
        ("{onnxc.backend_profiles = {cpu = {host, mem_bw = 1.0 : f64}}}", "{force=tpu}", "force=tpu: no such backend"),
        ("{onnxc.backend_profiles = {cpu = {host}}}", "", "mem_bw"),
    ],
)
def test_partition_pass_refuses_bad_figures(attrs: str, options: str, message: str) -> None:
    from mlir import ir

    from onnxc.dialect import onnx_context
    from onnxc.errors import OnnxcError
    from onnxc.transforms.pipeline import run_pipeline

    text = f"""module attributes {attrs} {{
      func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {{
        %a = "onnx.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
        return %a : tensor<4xf32>
      }}
    }}""".replace("attributes  {", "{")
    with onnx_context():
        module = ir.Module.parse(text)
        with pytest.raises(OnnxcError, match=message):
            run_pipeline(module, "onnx-partition" + options, reraise=True)


def test_partitioned_model_compiles_once_runs_many_with_dynamic_batch(fake_plugin: Path) -> None:
    from onnxc.targets.backends.partition import PartitionedModel

    nodes = [helper.make_node("Mul", ["x", "x"], ["m"]), helper.make_node("Sigmoid", ["m"], ["s"]), helper.make_node("Add", ["s", "x"], ["y"])]
    g = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4096])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4096])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    compiled = PartitionedModel(model, B.backends())
    try:
        assert {s.backend for s in compiled.steps} >= {"fakeaccel", "cpu"}
        ref = ReferenceEvaluator(model)
        for n in (1, 3):
            x = np.random.default_rng(n).standard_normal((n, 4096)).astype(np.float32)
            np.testing.assert_allclose(compiled.run({"x": x})["y"], ref.run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)
        with pytest.raises(B.BackendError, match="input 'x' is not fed"):
            compiled.run({})
    finally:
        compiled.release()
    assert all(b.references == 0 for b in {s.graph.backend for s in compiled.steps})


def test_models_with_subgraphs_run_whole_on_the_cpu(fake_plugin: Path) -> None:
    from onnxc.targets.backends.partition import run_partitioned

    then = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    g = helper.make_graph(nodes, "iff", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = np.array([1, -2, 3, -4], np.float32)
    with pytest.warns(UserWarning, match="If/Loop/Scan"):
        got = run_partitioned(model, {"x": x}, B.backends())
    np.testing.assert_allclose(got["y"], ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)


@st.composite
def random_modules(draw: st.DrawFn) -> tuple[str, list[list[str]]]:
    """A random DAG of binary ONNX ops over one tensor type, with random backend marks."""
    n = draw(st.integers(2, 12))
    lines, marks = [], []
    for i in range(n):
        a = draw(st.integers(-1, i - 1))
        b = draw(st.integers(-1, i - 1))
        accepted = ["cpu"] + [x for x in ("acc", "gpu") if draw(st.booleans())]
        marks.append(accepted)
        va, vb = (f"%v{a}" if a >= 0 else "%x"), (f"%v{b}" if b >= 0 else "%x")
        attr = ", ".join(f'"{m}"' for m in accepted)
        lines.append(f'%v{i} = "onnx.add"({va}, {vb}) {{onnxc.accepted_by = [{attr}]}} : (tensor<65536xf32>, tensor<65536xf32>) -> tensor<65536xf32>')
    body = "\n".join(lines)
    text = f"""module attributes {{onnxc.backend_profiles = {{
        cpu = {{host, macs = {{f32 = 1.0e10 : f64}}, mem_bw = 1.0e10 : f64}},
        acc = {{macs = {{f32 = 1.0e13 : f64}}, mem_bw = 1.0e12 : f64, h2d_bw = 1.0e11 : f64, d2h_bw = 1.0e11 : f64}},
        gpu = {{macs = {{f32 = 1.0e12 : f64}}, mem_bw = 3.0e11 : f64, h2d_bw = 3.0e10 : f64, d2h_bw = 3.0e10 : f64}}}}}} {{
      func.func @f(%x: tensor<65536xf32>) -> tensor<65536xf32> {{
        {body}
        return %v{n - 1} : tensor<65536xf32>
      }}
    }}"""
    return text, marks


@settings(max_examples=40, deadline=None)
@given(random_modules())
def test_partition_pass_on_random_graphs(case: tuple[str, list[list[str]]]) -> None:
    """Every node lands in exactly one subgraph, on a backend that accepts it; subgraphs are
    numbered in an order that runs every producer's subgraph before its consumers'; the
    contracted graph is acyclic."""
    from mlir import ir

    from onnxc.dialect import onnx_context
    from onnxc.transforms.pipeline import run_pipeline

    text, marks = case
    with onnx_context():
        module = ir.Module.parse(text)
        run_pipeline(module, "onnx-partition", reraise=True)
        f = module.body.operations[0]
        ops = [op for op in f.regions[0].blocks[0].operations if op.operation.name == "onnx.add"]
        sub = [ir.IntegerAttr(op.attributes["onnxc.subgraph"]).value for op in ops]
        backend = [ir.StringAttr(op.attributes["onnxc.backend"]).value for op in ops]
        edges = []
        pos = {}
        for i, op in enumerate(ops):
            pos[op.result.get_name()] = i
            for v in op.operands:
                if isinstance(v, ir.OpResult):
                    edges.append((pos[v.get_name()], i))
    for i in range(len(ops)):
        assert backend[i] in marks[i]
    for u, v in edges:
        assert sub[u] <= sub[v]  # run order respects data flow
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(sub):
        groups.setdefault(g, []).append(i)
    assert all(len({backend[i] for i in g}) == 1 for g in groups.values())
    assert is_acyclic_contraction(len(ops), edges, list(groups.values()))


def test_model_local_functions_are_inlined_and_partitioned(fake_plugin: Path) -> None:
    from onnxc.targets.backends.partition import partition, run_partitioned

    fn = helper.make_function("local", "Sq", ["a"], ["b"], [helper.make_node("Mul", ["a", "a"], ["b"])], [helper.make_opsetid("", 18)])
    g = helper.make_graph([helper.make_node("Sq", ["x"], ["y"], domain="local"), helper.make_node("Relu", ["y"], ["z"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])], [helper.make_tensor_value_info("z", TensorProto.FLOAT, [256, 256])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)], functions=[fn])
    found = B.backends()
    placed = {n.split("#")[0]: d.backend for d in partition(model, found).decisions for n in d.nodes}
    assert placed == {"onnx.mul": "fakeaccel", "onnx.relu": "cpu"}
    x = np.random.default_rng(5).standard_normal((256, 256)).astype(np.float32)
    got = run_partitioned(model, {"x": x}, found)
    np.testing.assert_allclose(got["z"], ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)


F = TensorProto.FLOAT
COMPAT_CASES = [
    single("Add", [("a", F, [3, 5]), ("b", F, [5])], (F, [3, 5])),
    single("MatMul", [("a", F, [4, 6]), ("b", F, [6, 3])], (F, [4, 3])),
    single("Softmax", [("a", F, [2, 7])], (F, [2, 7]), axis=-1),
    single("Transpose", [("a", F, [2, 3, 4])], (F, [4, 2, 3]), perm=[2, 0, 1]),
    single("ReduceMax", [("a", F, [3, 4])], (F, []), keepdims=0),
    single("Add", [("a", TensorProto.DOUBLE, [4]), ("b", TensorProto.DOUBLE, [4])], (TensorProto.DOUBLE, [4])),
]


@pytest.mark.parametrize("backend_name", ["cpu", "vulkan"])
def test_supported_means_it_compiles_and_computes_right(backend_name: str) -> None:
    """A compatibility answer is a promise: every node a backend calls supported must initialize
    on it and match onnx.reference; an unsupported one must say why."""
    found = B.backends(plugins=False)
    if backend_name not in {b.name for b in found}:
        pytest.skip(f"no {backend_name} device here")
    backend = B.get_backend(backend_name, found)
    rng = np.random.default_rng(6)
    supported = 0
    for model in COMPAT_CASES:
        answer = backend.compatibility(model)
        if answer.support is not B.Support.SUPPORTED:
            assert answer.reason, model.graph.node[0].op_type
            continue
        supported += 1
        feeds = {}
        for v in model.graph.input:
            shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
            feeds[v.name] = rng.standard_normal(shape).astype(onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
        graph = backend.init_graph(model)
        try:
            graph.set_graph_io(feeds)
            got = graph.run_graph().result()["y"]
        finally:
            graph.release_graph()
        np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, feeds)[0], rtol=RTOL, atol=ATOL, err_msg=model.graph.node[0].op_type)
    assert supported >= 2  # the elementwise Add and the MatMul, at least


def test_run_graph_returns_before_the_outputs_are_ready() -> None:
    import threading

    gate = threading.Event()

    class Slow(B.Backend):
        name = "slow"

        def info(self) -> B.BackendInfo:
            one = B.Figure(1.0, "declared")
            return B.BackendInfo("slow", "test", "0", "none", "accelerator", {"f32": one}, one, one, one, 0, ("f32",))

        def compatibility(self, node_or_model: object) -> B.Compatibility:
            return B.Compatibility(B.Support.SUPPORTED)

        def _compile_graph(self, model: onnx.ModelProto):  # type: ignore[no-untyped-def]
            def run(a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
                assert gate.wait(30)
                return [a + b]

            return run

    model = single("Add", [("a", TensorProto.FLOAT, [2]), ("b", TensorProto.FLOAT, [2])], (TensorProto.FLOAT, [2]))
    backend = Slow()
    g = backend.init_graph(model)
    g.set_graph_io({"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)})
    first, second = g.run_graph(), g.run_graph()
    assert not first.done() and not second.done()  # queued, not run inline
    gate.set()
    np.testing.assert_array_equal(second.result(timeout=30)["y"], [2, 2])
    assert first.done()  # one queue per backend: in submission order
    g.release_graph()
    assert not backend.started


def test_pin_host_keeps_named_nodes_on_the_cpu(fake_plugin: Path) -> None:
    from onnxc.targets.backends.partition import partition

    found = B.backends()
    free = {n: d.backend for d in partition(mixed_model(), found).decisions for n in d.nodes}
    assert free["onnx.add#1 (add0)"] == "fakeaccel", free
    pinned = {n: d.backend for d in partition(mixed_model(), found, pin_host=["add0"]).decisions for n in d.nodes}
    assert pinned["onnx.add#1 (add0)"] == "cpu" and pinned["onnx.add#4 (add1)"] == "fakeaccel", pinned


@pytest.mark.skipif(not vulkan_present(), reason="no Vulkan device (run tools/install_system_deps.sh for lavapipe)")
def test_sample_cnn_on_vulkan_matches_reference() -> None:
    """The shipped sample CNN (Conv, Relu, MaxPool, Gemm, Softmax...) with Vulkan forced."""
    from onnxc.targets.backends.partition import run_partitioned

    root = Path(__file__).resolve().parents[2] / "models"
    model = onnx.load(root / "sample.onnx")
    x = np.load(root / "sample_input.npy")
    name = model.graph.input[0].name
    found = B.backends(plugins=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_partitioned(model, {name: x}, found, force="vulkan")
    want = ReferenceEvaluator(model).run(None, {name: x})
    for (k, g), w in zip(got.items(), want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=k)


def _cuda_present() -> bool:
    from onnxc.targets.cuda import cuda_device_count

    return cuda_device_count() > 0


@pytest.mark.skipif(not _cuda_present(), reason="no NVIDIA GPU (no libcuda.so.1 or no device): the CUDA backend needs one")
def test_heterogeneous_cpu_and_cuda_matches_reference() -> None:
    """The CUDA backend (a GPU's figures measured through its own graphs) with the shipped sample
    CNN forced onto it: every subgraph placed on CUDA, run there (no fallback), against onnx.reference."""
    from onnxc.targets.backends.partition import partition, run_partitioned

    found = B.backends(plugins=False)
    figures = B.get_backend("cuda", found).info()
    assert figures.macs["f32"].value > 0 and figures.macs["f32"].provenance.startswith("measured ")
    root = Path(__file__).resolve().parents[2] / "models"
    model = onnx.load(root / "sample.onnx")
    x = np.load(root / "sample_input.npy")
    name = model.graph.input[0].name
    assert {d.backend for d in partition(model, found, force="cuda").decisions} == {"cuda"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: CUDA must really run its subgraphs
        got = run_partitioned(model, {name: x}, found, force="cuda")
    want = ReferenceEvaluator(model).run(None, {name: x})
    for (k, g), w in zip(got.items(), want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=k)


def test_a_failing_compatibility_query_costs_the_backend_its_nodes_not_the_run(fake_plugin: Path) -> None:
    from onnxc.targets.backends.partition import partition

    found = B.backends()
    sys.modules["fake_accel_plugin"].BROKEN = True
    with pytest.warns(UserWarning, match="'fakeaccel' failed a compatibility query.*driver crashed"):
        p = partition(mixed_model(), found)
    assert {d.backend for d in p.decisions} <= {"cpu", "vulkan"}


def test_profiles_json_feeds_the_pass(fake_plugin: Path, tmp_path: Path) -> None:
    from mlir import ir

    from onnxc.dialect import onnx_context
    from onnxc.errors import OnnxcError
    from onnxc.targets.backends.partition import profiles_json
    from onnxc.transforms.pipeline import run_pipeline

    found = [b for b in B.backends() if b.name in ("cpu", "fakeaccel")]
    figures = tmp_path / "figures.json"
    figures.write_text(profiles_json(found))
    assert json.loads(figures.read_text())["fakeaccel"]["macs"] == {"f32": 1.0e15}
    text = """module {
      func.func @f(%x: tensor<65536xf32>) -> tensor<65536xf32> {
        %a = "onnx.add"(%x, %x) : (tensor<65536xf32>, tensor<65536xf32>) -> tensor<65536xf32>
        return %a : tensor<65536xf32>
      }
    }"""
    with onnx_context():
        module = ir.Module.parse(text)
        run_pipeline(module, f"onnx-partition{{profiles={figures}}}", reraise=True)
        add = module.body.operations[0].regions[0].blocks[0].operations[0]
        assert ir.StringAttr(add.attributes["onnxc.backend"]).value == "fakeaccel"
        (tmp_path / "bad.json").write_text('{"cpu": {"host": true}}')
        with pytest.raises(OnnxcError, match=r"bad.json: backend 'cpu': bad or missing figure 'mem_bw'"):
            run_pipeline(ir.Module.parse(text), f"onnx-partition{{profiles={tmp_path / 'bad.json'}}}", reraise=True)
