"""Tests of `onnxc.compile`: binding inputs by position and name, the checks made before native
code runs, initializer defaults, unsigned and scalar inputs, and models with sequence inputs and
outputs (specialized per call structure). Numerics against onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.compiler import InputError


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture(scope="module")
def add_model() -> tuple[onnx.ModelProto, onnxc.compiler.CompiledModel]:
    m = _model(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [helper.make_tensor_value_info("a", T.FLOAT, ["N", 3]), helper.make_tensor_value_info("b", T.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("c", T.FLOAT, ["N", 3])],
    )
    return m, onnxc.compile(m)


def test_positional_and_named_inputs_and_dynamic_dims(add_model) -> None:
    m, cm = add_model
    for n in (1, 4):
        a, b = np.random.rand(n, 3).astype(np.float32), np.random.rand(n, 3).astype(np.float32)
        expected = ReferenceEvaluator(m).run(None, {"a": a, "b": b})[0]
        np.testing.assert_allclose(cm(a, b)[0], expected, rtol=1e-6)
        np.testing.assert_allclose(cm(b=b, a=a)[0], expected, rtol=1e-6)
        np.testing.assert_allclose(cm.run({"a": a, "b": b})["c"], expected, rtol=1e-6)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((np.zeros((2, 3), np.float64), np.zeros((2, 3), np.float32)), {}, "input 'a' must have dtype float32, got float64"),
        ((np.zeros((2, 3, 1), np.float32), np.zeros((2, 3), np.float32)), {}, "input 'a' must have rank 2"),
        ((np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)), {}, "input 'a' dim 1 must be 3"),
        ((np.zeros((2, 3), np.float32), np.zeros((5, 3), np.float32)), {}, "is 'N' = 5, but input 'a' bound 'N' = 2"),
        ((np.zeros((2, 3), np.float32),), {}, "missing input(s): b"),
        ((), {"a": np.zeros((2, 3), np.float32), "bb": 1}, "the model has no input 'bb'"),
    ],
)
def test_bad_inputs_are_refused_before_native_code(add_model, args, kwargs, message) -> None:
    _, cm = add_model
    with pytest.raises(InputError) as info:
        cm(*args, **kwargs)
    assert message in str(info.value)


def test_inputs_with_initializer_defaults_and_unsigned_and_scalars() -> None:
    bias = onnx.numpy_helper.from_array(np.array([1, 2, 3], np.uint8), "bias")
    m = _model(
        [helper.make_node("Add", ["x", "bias"], ["y"]), helper.make_node("Mul", ["y", "k"], ["z"])],
        [helper.make_tensor_value_info("x", T.UINT8, [3]), helper.make_tensor_value_info("bias", T.UINT8, [3]),
         helper.make_tensor_value_info("k", T.UINT8, [])],
        [helper.make_tensor_value_info("z", T.UINT8, [3])],
        [bias],
    )
    cm = onnxc.compile(m)
    x = np.array([250, 10, 20], np.uint8)
    k = np.array(3, np.uint8)
    (z,) = cm(x=x, k=k)  # bias omitted: its initializer is used
    assert z.dtype == np.uint8
    np.testing.assert_array_equal(z, ReferenceEvaluator(m).run(None, {"x": x, "bias": bias_array(bias), "k": k})[0])
    (z2,) = cm(x=x, bias=np.zeros(3, np.uint8), k=k)  # overridden default ([1] for the scalar k is refused: test_robustness)
    np.testing.assert_array_equal(z2, (x * 3).astype(np.uint8))


def bias_array(t: onnx.TensorProto) -> np.ndarray:
    return onnx.numpy_helper.to_array(t)


def test_sequence_inputs_and_outputs_specialize_per_structure() -> None:
    m = _model(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0), helper.make_node("SequenceInsert", ["s", "x"], ["s2"])],
        [helper.make_tensor_sequence_value_info("s", T.FLOAT, None), helper.make_tensor_value_info("x", T.FLOAT, [2])],
        [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_sequence_value_info("s2", T.FLOAT, None)],
    )
    cm = onnxc.compile(m)
    x = np.array([7, 8], np.float32)
    for seq in ([np.ones(2, np.float32), np.arange(3, dtype=np.float32)], [np.arange(4, dtype=np.float32)]):
        y, s2 = cm(seq, x)
        ref_y, ref_s2 = ReferenceEvaluator(m).run(None, {"s": seq, "x": x})
        np.testing.assert_array_equal(y, ref_y)
        assert len(s2) == len(ref_s2)
        for got, want in zip(s2, ref_s2):
            np.testing.assert_array_equal(got, want)


def test_compile_from_a_path_reads_external_data_from_the_model_folder(tmp_path) -> None:
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).random((64, 64), dtype=np.float32), "w")
    m = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 64])],
        [w],
    )
    expected_w = onnx.numpy_helper.to_array(w)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    x = np.random.default_rng(1).random((2, 64), dtype=np.float32)
    np.testing.assert_allclose(onnxc.compile(path)(x)[0], x @ expected_w, rtol=1e-5)


def test_compile_from_a_path_parses_the_file_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compile hands the ModelProto it parsed to the importer with the model's folder instead
    of the path (the importer parsed the file a second time: 0.7 s of BERT-base's compile), and
    external data still resolves inside that folder."""
    w = onnx.numpy_helper.from_array(np.random.default_rng(2).random((8, 8), dtype=np.float32), "w")
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [helper.make_tensor_value_info("x", T.FLOAT, [2, 8])],
               [helper.make_tensor_value_info("y", T.FLOAT, [2, 8])], [w])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    from onnxc.importers import external_data

    loads = []
    real_load, real_mapped = onnx.load, external_data._parse_mapped
    monkeypatch.setattr(onnx, "load", lambda *a, **k: loads.append(str(a[0])) or real_load(*a, **k))
    monkeypatch.setattr(external_data, "_parse_mapped", lambda p, size: loads.append(str(p)) or real_mapped(p, size))
    x = np.random.default_rng(3).random((2, 8), dtype=np.float32)
    np.testing.assert_allclose(onnxc.compile(path, cache_dir=False)(x)[0], x @ onnx.numpy_helper.to_array(w), rtol=1e-5)
    assert loads == [str(path)]


# --- one driver: instrumentation, failures, targets ------------------------------------------------


def _relu_model() -> onnx.ModelProto:
    return _model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])],
    )


def _headers(text: str) -> list[str]:
    return [line for line in text.splitlines() if "IR Dump After" in line]


def test_print_ir_after_named_passes_and_timing(capfd) -> None:
    """print_ir_after prints after exactly the named passes of both stages (ONNX-level and the
    target's), in pipeline order; timing prints MLIR's report naming onnxc's passes."""
    m = _relu_model()
    cm = onnxc.compile(m, print_ir_after=("convert-onnx-to-linalg", "cpu-bufferize"), timing=True)
    x = np.array([[1, -2, 3], [-1, 0, 5]], np.float32)
    np.testing.assert_array_equal(cm(x)[0], ReferenceEvaluator(m).run(None, {"x": x})[0])
    err = capfd.readouterr().err
    assert _headers(err) == [
        "// -----// IR Dump After ConvertOnnxToLinalgPass (convert-onnx-to-linalg) //----- //",
        "// -----// IR Dump After CpuBufferizePass (cpu-bufferize) //----- //",
    ]
    after_linalg, after_bufferize = err.split("IR Dump After CpuBufferizePass")
    assert "linalg.generic" in after_linalg and "memref<2x3xf32>" not in after_linalg.split("IR Dump After")[1]
    assert "memref<2x3xf32>" in after_bufferize
    assert err.count("Execution time report") == 2  # one per pass manager: ONNX stage, target
    for name in ("OnnxShapeInferencePass", "ConvertOnnxToLinalgPass", "CpuToVectorPass", "CpuToLLVMPass"):
        assert name in err


def test_print_ir_after_all_covers_every_stage(capfd) -> None:
    onnxc.compile(_relu_model(), print_ir_after_all=True)
    headers = _headers(capfd.readouterr().err)
    assert headers[0] == "// -----// IR Dump After OnnxUpgradeOpsPass (onnx-upgrade-ops) //----- //"
    assert headers[-1] == "// -----// IR Dump After CpuToLLVMPass (cpu-to-llvm) //----- //"
    assert "// -----// IR Dump After CSE (cse) //----- //" in headers


def test_print_ir_after_an_unknown_pass_is_an_error() -> None:
    with pytest.raises(onnxc.errors.OnnxcError, match="no pass 'cpu-to-vektor' in the pipeline of target 'cpu'"):
        onnxc.compile(_relu_model(), print_ir_after=["cpu-to-vektor"])


def test_failing_pass_keeps_its_error_and_names_itself_with_a_reproducer(tmp_path) -> None:
    """An op the lowering lacks: the conversion's own DiagnosticsError reaches the caller, with
    notes naming the pass and the onnx-opt command, and that command reproduces the failure."""
    import subprocess
    import sys
    from pathlib import Path

    from onnxc.errors import DiagnosticsError

    m = _model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Frobnicate", ["r"], ["y"], domain="com.example")],
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])],
    )
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    path = tmp_path / "custom.onnx"
    onnx.save(m, str(path))
    with pytest.warns(UserWarning), pytest.raises(DiagnosticsError) as info:
        onnxc.compile(str(path))
    assert "Frobnicate" in str(info.value)
    notes = info.value.__notes__
    assert notes[0] == "in pass 'convert-onnx-to-linalg'"
    assert notes[1] == f"reproduce with: onnx-opt {path} --pass-pipeline='builtin.module(onnx-to-linalg)'"
    onnx_opt = Path(sys.executable).parent / "onnx-opt"
    argv = [str(onnx_opt), str(path), "--pass-pipeline=builtin.module(onnx-to-linalg)"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Frobnicate" in r.stderr and "Traceback" not in r.stderr


def test_lower_and_onnx_opt_run_the_same_stage_pipelines(tmp_path) -> None:
    """`lower(model, 'vector')` and `onnx-opt model -p onnx-to-vector` print the same IR: one
    registry, one driver."""
    import subprocess
    import sys
    from pathlib import Path

    m = _model(
        [helper.make_node("MatMul", ["a", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        [helper.make_tensor_value_info("a", T.FLOAT, [4, 8]), helper.make_tensor_value_info("b", T.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", T.FLOAT, [4, 16])],
    )
    path = tmp_path / "mm.onnx"
    onnx.save(m, str(path))
    ours = str(onnxc.compiler.lower(str(path), "vector"))
    onnx_opt = Path(sys.executable).parent / "onnx-opt"
    r = subprocess.run([str(onnx_opt), str(path), "-p", "onnx-to-vector"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "vector.contract" in ours or "vector.fma" in ours or "vector.outerproduct" in ours
    assert r.stdout.strip() == ours.strip()


def test_targets_registry_and_option_checks() -> None:
    from onnxc.targets import available_targets, get_target
    from onnxc.targets.base import TargetError
    from onnxc.targets.cpu import CpuPipelineOptions, CpuToVectorPass
    from onnxc.transforms.pipeline import PythonStep, expand

    assert "cpu" in available_targets()
    cpu = get_target("cpu")
    assert cpu.name == "cpu" and cpu.stages == ("vector", "bufferize", "llvm")
    with pytest.raises(TargetError, match="unknown target 'tpu' \\(targets: .*cpu"):
        get_target("tpu")
    with pytest.raises(TargetError, match="jit_opt_level must be 0, 1, 2 or 3, got 7"):
        cpu.options(CpuPipelineOptions(jit_opt_level=7))
    with pytest.raises(TargetError, match="matmul_tile"):
        cpu.options(CpuPipelineOptions(matmul_tile=(8, 0, 1)))
    with pytest.raises(TargetError, match="max_partial_elements must be a non-negative int"):
        cpu.options(CpuPipelineOptions(max_partial_elements=-1))
    with pytest.raises(TargetError, match="takes options of type CpuPipelineOptions, got dict"):
        cpu.options({"vectorize": False})
    with pytest.raises(TargetError, match="no stage 'gpu'"):
        cpu.pipeline(None, stop_after="gpu")
    # The options survive the trip through pipeline text unchanged.
    opts = CpuPipelineOptions(vectorize=False, matmul_tile=(4, 16, 1), max_sequential_reduction=0, jit_opt_level=1)
    text = cpu.pipeline(opts)
    assert text.startswith("cpu-to-vector{") and ",cpu-bufferize,cpu-to-llvm{" in text  # the stages that read options carry them
    first = expand(text)[0]
    assert isinstance(first, PythonStep) and first.pass_ == CpuToVectorPass(opts)
    assert cpu.pipeline(None, stop_after="vector") == "cpu-to-vector"
    with pytest.raises(onnxc.errors.OnnxcError, match="has no option 'vectorise'"):
        expand("cpu-to-vector{vectorise=false}")


def test_compile_takes_the_target_options_under_either_name() -> None:
    from onnxc.targets.cpu import CpuPipelineOptions

    m = _relu_model()
    x = np.array([[1, -2, 3], [-1, 0, 5]], np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    for kwargs in ({"options": CpuPipelineOptions(vectorize=False)}, {"cpu_options": CpuPipelineOptions(vectorize=False)}):
        np.testing.assert_array_equal(onnxc.compile(m, **kwargs)(x)[0], want)
    with pytest.raises(onnxc.errors.OnnxcError, match="not both"):
        onnxc.compile(m, options=CpuPipelineOptions(), cpu_options=CpuPipelineOptions())


def test_backend_passes_compile_options_on_and_names_the_known_ones() -> None:
    import onnxc.backend
    from onnxc.targets.cpu import CpuPipelineOptions

    m = _relu_model()
    x = np.array([[1, -2, 3], [-1, 0, 5]], np.float32)
    rep = onnxc.backend.OnnxcBackend.prepare(m, options=CpuPipelineOptions(vectorize=False))
    np.testing.assert_array_equal(rep.run([x])[0], np.maximum(x, 0))
    with pytest.raises(onnxc.errors.OnnxcError, match="unknown option\\(s\\) threadz \\(known: cache_dir, cpu_options, keep_ir, options"):
        onnxc.backend.OnnxcBackend.prepare(m, threadz=2)


def test_compile_threads_and_target_cpu_keywords() -> None:
    """`threads`/`target_cpu` override the target's options; bad values and options a target
    lacks are OnnxcErrors naming them."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    import onnxc
    from onnxc.errors import OnnxcError

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 48])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = rng.standard_normal((37, 64)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    for kwargs in ({"threads": 1}, {"threads": 2}, {"target_cpu": "znver3"}, {"target_cpu": "x86-64-v4", "threads": 2}):
        (got,) = onnxc.compile(model, **kwargs)(x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(kwargs))
    for kwargs, message in (({"threads": 0}, "threads"), ({"target_cpu": "nope"}, "nope")):
        with pytest.raises(OnnxcError, match=message):
            onnxc.compile(model, **kwargs)
