"""`onnxc.InferenceSession` and `onnxc.compile(model, target="auto" | [targets])` (issue 12 item 4).

What: the onnxruntime-shaped API (NodeArg names/shapes/types, `run(output_names, feeds)`,
provider names), the two ways of choosing backends (the roofline for "auto", onnxruntime's
preference order for a list), the fallback chain when a backend refuses a subgraph at compile
time or fails to initialize (a warning naming the nodes, the next choice runs them), and CPU +
Vulkan execution of the ONNX backend suite's model tests with results equal to the CPU target.

The accelerators here are two plug-in backends of a throwaway distribution put on sys.path
(found through its entry_points.txt, as an installed plug-in is); they run graphs with
`onnx.reference`, so a wrong placement or a lost transfer shows as a wrong answer. Expected
values come from `onnx.reference.ReferenceEvaluator`, the suite's stored outputs, or the CPU
target, never from the code under test.
"""

from __future__ import annotations

import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.errors import OnnxcError

RTOL, ATOL = 1e-3, 1e-7

PLUGIN = """
    import onnx
    from onnx.reference import ReferenceEvaluator
    from onnxc.targets.backends import Backend, BackendError, BackendInfo, Compatibility, Figure, Support

    CONFIG = {"acc1": {"link": 1.0e13, "refuse": False, "dead": False, "mute": False},
              "acc2": {"link": 1.0e13, "refuse": False, "dead": False, "mute": False}}
    RUNS = []

    class Acc(Backend):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def info(self):
            c = CONFIG[self.name]
            if c["mute"]:
                raise RuntimeError("firmware not loaded")
            peak, link = Figure(1.0e15, "declared"), Figure(c["link"], "declared")
            return BackendInfo(self.name, "ACME", "1.0", "simulated", "accelerator", {"f32": peak}, link, link, link, 1 << 30, ("f32",))

        def _startup(self):
            if CONFIG[self.name]["dead"]:
                raise RuntimeError(f"{self.name}: device lost")

        def compatibility(self, node_or_model):
            nodes = [node_or_model] if isinstance(node_or_model, onnx.NodeProto) else list(node_or_model.graph.node)
            bad = [n.op_type for n in nodes if n.op_type not in ("Add", "Mul")]
            return Compatibility(Support.UNSUPPORTED, f"not {bad}") if bad else Compatibility(Support.SUPPORTED)

        def _compile_graph(self, model):
            if CONFIG[self.name]["refuse"]:
                raise BackendError(f"{self.name}: out of on-chip memory")
            ref = ReferenceEvaluator(model)
            names = [i.name for i in model.graph.input]
            def run(*arrays):
                RUNS.append((self.name, [n.op_type for n in model.graph.node]))
                return ref.run(None, dict(zip(names, arrays)))
            return run

    def make():
        return [Acc("acc1"), Acc("acc2")]
"""


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Figures are measured into a folder of this test session, never the user's ~/.cache."""
    monkeypatch.setenv("ONNXC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "figures"))


@pytest.fixture
def accels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The plug-in module (its CONFIG and RUNS), found only through its distribution's entry point."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "two_accels.py").write_text(textwrap.dedent(PLUGIN))
    dist = root / "two_accels-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: two-accels\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[onnxc.backends]\ntwo = two_accels:make\n")
    monkeypatch.syspath_prepend(str(root))
    import importlib

    mod = importlib.import_module("two_accels")
    yield mod
    sys.modules.pop("two_accels", None)


def chain_model(batch: int | str = 64) -> onnx.ModelProto:
    """x -> Add -> Mul -> Relu -> Add -> y (Add/Mul are what the accelerators take)."""
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add0"),
        helper.make_node("Mul", ["a", "x"], ["m"], name="mul0"),
        helper.make_node("Relu", ["m"], ["r"], name="relu0"),
        helper.make_node("Add", ["r", "x"], ["y"], name="add1"),
    ]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 64])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(ReferenceEvaluator(model).run(None, feeds))


def x64() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)


# ------------------------------------------------------------------- the onnxruntime surface


def test_session_describes_io_like_onnxruntime(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((4,), np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Shape", ["s"], ["shape"])]
    g = helper.make_graph(
        nodes, "io",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", None, 4]), helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", None, 4]), helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
        [w],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "io.onnx"
    onnx.save(model, str(path))
    sess = onnxc.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [(a.name, a.shape, a.type) for a in sess.get_inputs()] == [("x", ["batch", None, 4], "tensor(float)")]
    assert [(a.name, a.shape, a.type) for a in sess.get_outputs()] == [
        ("s", ["batch", None, 4], "tensor(float)"), ("shape", [3], "tensor(int64)")]
    assert [a.name for a in sess.get_overridable_initializers()] == ["w"]
    assert sess.get_providers() == ["cpu"]
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    shape, s = sess.run(["shape", "s"], {"x": x})
    want_s, want_shape = reference(model, {"x": x, "w": np.ones((4,), np.float32)})
    np.testing.assert_array_equal(shape, want_shape)
    np.testing.assert_allclose(s, want_s, rtol=RTOL, atol=ATOL)
    # The initializer may be overridden by feeding it, as in onnxruntime.
    two = np.full((4,), 2.0, np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x, "w": two})[0], reference(model, {"x": x, "w": two})[0], rtol=RTOL, atol=ATOL)
    with pytest.raises(OnnxcError, match="no output 'z'.*outputs: s, shape"):
        sess.run(["z"], {"x": x})
    with pytest.raises(OnnxcError, match="missing input.*x"):
        sess.run(None, {})
    with pytest.raises(OnnxcError, match="input 'x' must have dtype float32"):
        sess.run(None, {"x": x.astype(np.float64)})


def test_provider_names_and_absent_providers() -> None:
    from onnxc.session import provider_backend_name

    assert provider_backend_name("CPUExecutionProvider") == "cpu"
    assert provider_backend_name("CUDAExecutionProvider") == "cuda"
    assert provider_backend_name(("VulkanExecutionProvider", {})) == "vulkan"
    assert provider_backend_name("vulkan") == "vulkan"
    assert onnxc.get_available_providers()[0] == "cpu"
    with pytest.warns(UserWarning, match="provider 'tpu' is not available on this machine"):
        sess = onnxc.InferenceSession(chain_model(), providers=["TPUExecutionProvider"])
    assert sess.get_providers() == ["cpu"]  # the CPU is always the last resort
    np.testing.assert_allclose(sess.run(None, {"x": x64()})[0], reference(chain_model(), {"x": x64()})[0], rtol=RTOL, atol=ATOL)


def test_compile_auto_refuses_single_target_options() -> None:
    with pytest.raises(OnnxcError, match="threads: not supported with target='auto'"):
        onnxc.compile(chain_model(), target="auto", threads=2)
    with pytest.raises(OnnxcError, match="providers/targets must be a non-empty list"):
        onnxc.compile(chain_model(), target=[])


def test_sequence_outputs_run_whole_on_the_cpu() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("SequenceConstruct", ["r", "x"], ["seq"])]
    g = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.warns(UserWarning, match="sequence or optional inputs/outputs: it runs whole on the CPU"):
        sess = onnxc.InferenceSession(model)
    assert sess.get_outputs()[0].type == "seq(tensor(float))" and sess.get_providers() == ["cpu"]
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    got = sess.run(None, {"x": x})[0]
    assert len(got) == 2
    np.testing.assert_array_equal(got[0], np.maximum(x, 0))
    np.testing.assert_array_equal(got[1], x)


# ---------------------------------------------------------------- placement and fallbacks


def test_auto_follows_the_roofline_and_a_list_the_preference_order(accels) -> None:
    model = chain_model()
    want = reference(model, {"x": x64()})[0]
    # "auto": a fast device with a fast link takes the Add/Mul subgraph; the roofline picks one.
    fast = onnxc.compile(model, target="auto")
    assert {b for n, b in fast.placement.items() if "relu" not in n} <= {"acc1", "acc2"}
    assert fast.placement["onnx.relu#2 (relu0)"] == "cpu"
    np.testing.assert_allclose(fast(x64())[0], want, rtol=RTOL, atol=ATOL)
    # A slow link: "auto" keeps everything on the CPU ...
    accels.CONFIG["acc1"]["link"] = accels.CONFIG["acc2"]["link"] = 1.0e3
    assert set(onnxc.compile(model, target="auto").placement.values()) == {"cpu"}
    # ... a preference list does not: onnxruntime's order, first listed backend that supports a node.
    for order in (["acc2", "acc1", "cpu"], ["acc1", "acc2"]):
        accels.RUNS.clear()
        m = onnxc.compile(model, target=order)
        placed = m.placement
        assert placed["onnx.add#0 (add0)"] == placed["onnx.mul#1 (mul0)"] == placed["onnx.add#3 (add1)"] == order[0], placed
        assert placed["onnx.relu#2 (relu0)"] == "cpu"
        np.testing.assert_allclose(m(x64())[0], want, rtol=RTOL, atol=ATOL)
        assert {name for name, _ in accels.RUNS} == {order[0]}
    # The CPU first keeps every node on the CPU.
    assert set(onnxc.compile(model, target=["cpu", "acc1"]).placement.values()) == {"cpu"}


def test_refusal_at_compile_time_falls_back_along_the_preference_order(accels) -> None:
    model = chain_model()
    accels.CONFIG["acc2"]["refuse"] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = onnxc.InferenceSession(model, providers=["acc2", "acc1", "CPUExecutionProvider"])
    texts = sorted(str(w.message) for w in caught)
    assert len(texts) == 2, texts  # one per subgraph acc2 was given: {add0, mul0} and {add1}
    assert texts[0].startswith("backend 'acc2' failed on nodes onnx.add#0 (add0), onnx.mul#1 (mul0) (BackendError: acc2: out of on-chip memory); trying backend 'acc1' next"), texts
    assert texts[1].startswith("backend 'acc2' failed on nodes onnx.add#3 (add1)"), texts
    assert sess.get_providers() == ["acc1", "cpu"]
    accels.RUNS.clear()
    np.testing.assert_allclose(sess.run(None, {"x": x64()})[0], reference(model, {"x": x64()})[0], rtol=RTOL, atol=ATOL)
    assert accels.RUNS and {name for name, _ in accels.RUNS} == {"acc1"}
    # Both refuse: the CPU runs everything, one warning per refusal, never a failed compile.
    accels.CONFIG["acc1"]["refuse"] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = onnxc.compile(model, target=["acc2", "acc1"])
    texts = [str(w.message) for w in caught]
    assert any("'acc2' failed" in t and "trying backend 'acc1' next" in t for t in texts), texts
    assert any("'acc1' failed" in t and "running them on the CPU" in t for t in texts), texts
    assert {s.backend for s in m.partitioned.steps} == {"cpu"}
    np.testing.assert_allclose(m(x64())[0], reference(model, {"x": x64()})[0], rtol=RTOL, atol=ATOL)


def test_auto_falls_back_to_the_next_best_estimate(accels) -> None:
    accels.CONFIG["acc2"]["link"] = 1.0e14  # acc2 is the roofline's first choice, acc1 (also faster than the CPU) the next
    first = onnxc.compile(chain_model(), target="auto")
    assert first.placement["onnx.add#0 (add0)"] == "acc2"
    assert first.partitioned.partition.decisions[0].fallbacks == ("acc1", "cpu")
    accels.CONFIG["acc2"]["refuse"] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = onnxc.compile(chain_model(), target="auto")
    assert any("'acc2' failed on nodes onnx.add#0 (add0)" in str(w.message) and "trying backend 'acc1' next" in str(w.message) for w in caught)
    assert m.placement["onnx.add#0 (add0)"] == "acc1"
    np.testing.assert_allclose(m(x64())[0], reference(chain_model(), {"x": x64()})[0], rtol=RTOL, atol=ATOL)


def test_failure_at_backend_init_falls_back(accels) -> None:
    accels.CONFIG["acc1"]["dead"] = True
    with pytest.warns(UserWarning, match=r"backend 'acc1' failed on nodes .*device lost.*trying backend 'acc2' next"):
        m = onnxc.compile(chain_model(), target=["acc1", "acc2"])
    assert {s.backend for s in m.partitioned.steps} == {"acc2", "cpu"}
    np.testing.assert_allclose(m(x64())[0], reference(chain_model(), {"x": x64()})[0], rtol=RTOL, atol=ATOL)


def test_a_backend_without_figures_gets_no_nodes(accels) -> None:
    accels.CONFIG["acc1"]["mute"] = True
    with pytest.warns(UserWarning, match=r"backend 'acc1' failed to give its figures \(RuntimeError: firmware not loaded\); it gets no nodes"):
        m = onnxc.compile(chain_model(), target=["acc1", "acc2"])
    assert {s.backend for s in m.partitioned.steps} == {"acc2", "cpu"}
    np.testing.assert_allclose(m(x64())[0], reference(chain_model(), {"x": x64()})[0], rtol=RTOL, atol=ATOL)


def test_deny_and_allow_lists(accels) -> None:
    opts = onnxc.SessionOptions(deny_nodes=["mul0"])
    sess = onnxc.InferenceSession(chain_model(), sess_options=opts, providers=["acc1"])
    placed = sess.model.placement
    assert placed["onnx.mul#1 (mul0)"] == "cpu" and placed["onnx.add#0 (add0)"] == "acc1"
    from onnxc.session import compile_heterogeneous

    only = compile_heterogeneous(chain_model(), ["acc1"], allow_nodes=["Mul"]).placement
    assert only["onnx.mul#1 (mul0)"] == "acc1" and only["onnx.add#0 (add0)"] == only["onnx.add#3 (add1)"] == "cpu"
    np.testing.assert_allclose(sess.run(None, {"x": x64()})[0], reference(chain_model(), {"x": x64()})[0], rtol=RTOL, atol=ATOL)


def test_release_gives_the_backends_back(accels) -> None:
    m = onnxc.compile(chain_model(), target=["acc1"])
    held = {s.graph.backend for s in m.partitioned.steps}
    on_acc1 = sum(s.backend == "acc1" for s in m.partitioned.steps)
    assert on_acc1 == 2 and any(b.name == "acc1" and b.references == on_acc1 for b in held)  # a reference per graph
    m.release()
    assert all(b.references == 0 for b in held)


def test_dynamic_batch_runs_at_several_sizes(accels) -> None:
    model = chain_model("N")
    m = onnxc.compile(model, target=["acc1", "cpu"])
    for n in (1, 5):
        x = np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(m(x)[0], reference(model, {"x": x})[0], rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------- CPU + Vulkan on the suite's models


def _vulkan_present() -> bool:
    try:
        from onnxc.targets.vulkan import vulkan_context

        vulkan_context()
        return True
    except Exception:  # noqa: BLE001 - VulkanUnavailable, or the package missing
        return False


#: Suite models that Vulkan rightly takes no node of, and why (the rest must run on Vulkan).
CPU_ONLY: dict[str, str] = {}  # none now: f64 data (test_operator_add_broadcast) runs on Vulkan with shaderFloat64


def _model_tests() -> list[tuple[str, Path]]:
    """A slice of the backend suite's model tests with tensor I/O: `simple`, `pytorch-converted`
    and `pytorch-operator` ones (no pooling: its lowering aborts on some cases, see
    test_gpu_backend_vulkan.py)."""
    import onnx.backend.test

    root = Path(onnx.backend.test.__file__).parent / "data"
    simple = ["test_sign_model", "test_single_relu_model", "test_shrink", "test_expand_shape_model2", "test_expand_shape_model3"]
    converted = ["test_Linear", "test_Conv2d", "test_ConstantPad2d", "test_BatchNorm2d_eval", "test_Softmax", "test_PReLU_2d", "test_GLU", "test_PixelShuffle"]
    operator = ["test_operator_basic", "test_operator_addmm", "test_operator_index", "test_operator_add_broadcast", "test_operator_symbolic_override_nested"]
    return ([(n, root / "simple" / n) for n in simple] + [(n, root / "pytorch-converted" / n) for n in converted]
            + [(n, root / "pytorch-operator" / n) for n in operator])


def _data_sets(case: Path, model: onnx.ModelProto) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    out = []
    for d in sorted(case.glob("test_data_set_*")):
        def read(prefix: str) -> list[np.ndarray]:
            arrays = []
            for f in sorted(d.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1])):
                t = onnx.TensorProto()
                t.ParseFromString(f.read_bytes())
                arrays.append(numpy_helper.to_array(t))
            return arrays

        out.append((read("input"), read("output")))
    return out


@pytest.mark.skipif(not _vulkan_present(), reason="no Vulkan device (tools/install_system_deps.sh installs lavapipe)")
@pytest.mark.parametrize("name,case", _model_tests(), ids=[n for n, _ in _model_tests()])
def test_suite_model_on_vulkan_and_cpu_equals_the_cpu_target(name: str, case: Path) -> None:
    model = onnx.load(str(case / "model.onnx"))
    cpu = onnxc.compile(model, target="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        het = onnxc.compile(model, target=["vulkan", "cpu"])
    fell = [str(w.message) for w in caught if "failed on nodes" in str(w.message)]
    assert not fell, fell  # what Vulkan said it supports, it compiled
    assert isinstance(het, onnxc.session.HeterogeneousModel)
    used = {s.backend for s in het.partitioned.steps}
    assert used == ({"cpu"} if name in CPU_ONLY else {"vulkan"}), used  # no node Vulkan takes is left behind
    for inputs, outputs in _data_sets(case, model):
        want = cpu(*inputs)
        got = het(*inputs)
        for g, w, stored in zip(got, want, outputs):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=1e-5)
            np.testing.assert_allclose(g, stored, rtol=RTOL, atol=1e-5)
