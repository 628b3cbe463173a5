"""The `onnxc` driver CLI, run as a subprocess the way users run it.

Covers `onnxc compile --emit` for every stage (IR text, object file, shared library), `onnxc run`
on a model and on a library from `--emit lib` (no recompilation), inputs by name / position /
generated, `--output-dir`, `--check` against onnxruntime and against `onnx.reference` (when
onnxruntime refuses the model or is missing: forced with a stand-in `onnxruntime` package, so the
tests do not depend on which onnxruntime release is installed), tolerance failures (exit 2), and bad input and
unsupported models (exit 1, one message, no traceback). Expected outputs come from
`onnx.reference.ReferenceEvaluator`, never from onnxc.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

DRIVER = [sys.executable, "-m", "onnxc.tools.driver"]


def onnxc(*args: str | os.PathLike[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the driver; `python -m` so the test does not depend on the venv's bin on PATH."""
    return subprocess.run([*DRIVER, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300, env=env)


#: Stand-ins for the `onnxruntime` package, put first on PYTHONPATH of the driver's process: one
#: whose InferenceSession refuses every model the way onnxruntime refuses one (an exception whose
#: first line says why), one that cannot be imported. With them the fallback to onnx.reference is
#: forced by construction; a real onnxruntime refuses different models from release to release
#: (1.31 refused IR version 14, 1.32 accepts it), which once turned CI red with no change in onnxc.
_REFUSING_ORT = """
__version__ = "0.0+refusing-stand-in"
class SessionOptions:
    log_severity_level = 0
class InferenceSession:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : stand-in refuses every model\\nsecond line")
"""
_MISSING_ORT = 'raise ImportError("No module named onnxruntime (stand-in)")\n'


def _stub_env(tmp: Path, source: str) -> dict[str, str]:
    """The environment of a driver process that imports `source` as `onnxruntime`."""
    pkg = tmp / "onnxruntime"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(source)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _mlp(ir_version: int | None = None, seed: int = 1) -> onnx.ModelProto:
    """y = relu(x @ W + b) with random weights; z = y * 2 (two outputs)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "B")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "B"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["y"]),
        helper.make_node("Mul", ["y", "two"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        [w, b, two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("driver")
    onnx.save(_mlp(8), d / "mlp.onnx")
    onnx.save(_mlp(onnx.IR_VERSION), d / "mlp_new_ir.onnx")  # the newest IR version onnx writes
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    np.save(d / "x.npy", x)
    (want_y, want_z) = ReferenceEvaluator(_mlp()).run(None, {"x": x})
    np.save(d / "want_y.npy", want_y)
    np.save(d / "want_z.npy", want_z)
    return d


@pytest.mark.parametrize("stage,marker", [("onnx", "onnx.mat_mul"), ("linalg", "linalg."), ("vector", "vector."), ("llvm", "llvm.func")])
def test_compile_emits_ir(work: Path, stage: str, marker: str) -> None:
    r = onnxc("compile", work / "mlp.onnx", "--target", "cpu", "--emit", stage)
    assert r.returncode == 0, r.stderr
    assert marker in r.stdout
    if stage != "onnx":
        # No ONNX op is left (IRDL ops print in generic form, their names quoted); attributes
        # such as `onnx.name` on arguments may stay.
        assert not re.search(r'"onnx(_\w+)?\.\w+"', r.stdout)


def test_compile_ir_to_file(work: Path) -> None:
    out = work / "mlp.linalg.mlir"
    r = onnxc("compile", work / "mlp.onnx", "--emit", "linalg", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "linalg." in out.read_text() and r.stdout == ""


def test_compile_obj(work: Path) -> None:
    out = work / "mlp.o"
    r = onnxc("compile", work / "mlp.onnx", "--emit", "obj", "-o", out)
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    assert data[:4] == b"\x7fELF" and b"_mlir_ciface_" in data


def test_run_matches_reference_and_saves_outputs(work: Path) -> None:
    outdir = work / "outs"
    r = onnxc("run", work / "mlp.onnx", "--input", f"x={work / 'x.npy'}", "--output-dir", outdir)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^y: shape \[2, 3\] float32 ", r.stdout, re.M) and re.search(r"^z: shape \[2, 3\] float32 ", r.stdout, re.M)
    np.testing.assert_allclose(np.load(outdir / "y.npy"), np.load(work / "want_y.npy"), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.load(outdir / "z.npy"), np.load(work / "want_z.npy"), rtol=1e-5, atol=1e-6)
    # positional input: the same result
    r2 = onnxc("run", work / "mlp.onnx", "--input", work / "x.npy", "--output-dir", work / "outs2")
    assert r2.returncode == 0, r2.stderr
    np.testing.assert_array_equal(np.load(work / "outs2" / "y.npy"), np.load(outdir / "y.npy"))


def test_run_generates_missing_inputs_deterministically(work: Path) -> None:
    a = onnxc("run", work / "mlp.onnx", "--seed", "7", "--output-dir", work / "gen_a")
    b = onnxc("run", work / "mlp.onnx", "--seed", "7", "--output-dir", work / "gen_b")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert "generated random inputs (seed 7): x: float32 [2x4]" in a.stderr
    np.testing.assert_array_equal(np.load(work / "gen_a" / "y.npy"), np.load(work / "gen_b" / "y.npy"))


def test_check_against_onnxruntime(work: Path) -> None:
    r = onnxc("run", work / "mlp.onnx", "--input", f"x={work / 'x.npy'}", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check against onnxruntime" in r.stdout
    assert re.search(r"^  y: max abs diff \S+, max rel diff \S+  ok$", r.stdout, re.M)
    assert re.search(r"^  z: max abs diff \S+, max rel diff \S+  ok$", r.stdout, re.M)


def test_check_falls_back_to_reference_when_onnxruntime_refuses(work: Path, tmp_path: Path) -> None:
    r = onnxc("run", work / "mlp.onnx", "--check", env=_stub_env(tmp_path, _REFUSING_ORT))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check against onnx.reference" in r.stdout
    assert "stand-in refuses every model" in r.stderr  # refused by the stand-in, not broken by it
    assert re.search(r"^  y: max abs diff \S+, max rel diff \S+  ok$", r.stdout, re.M), r.stdout


def test_check_fallback_names_why_onnxruntime_refused(work: Path, tmp_path: Path) -> None:
    # The reason is onnxruntime's own first line, not a generic "failed".
    r = onnxc("run", work / "mlp.onnx", "--check", env=_stub_env(tmp_path, _REFUSING_ORT))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "onnxruntime refused the model: [ONNXRuntimeError] : 1 : FAIL : stand-in refuses every model" in r.stderr
    assert "second line" not in r.stderr and "Traceback" not in r.stderr


def test_check_falls_back_to_reference_without_onnxruntime(work: Path, tmp_path: Path) -> None:
    r = onnxc("run", work / "mlp.onnx", "--check", env=_stub_env(tmp_path, _MISSING_ORT))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check against onnx.reference" in r.stdout
    assert "onnxruntime is not installed" in r.stderr


def test_check_model_of_newest_ir_version(work: Path) -> None:
    # Whichever reference takes it (onnxruntime if this release accepts IR onnx.IR_VERSION, else
    # onnx.reference), the check runs and passes.
    r = onnxc("run", work / "mlp_new_ir.onnx", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^check against (onnxruntime \S+|onnx\.reference)", r.stdout, re.M), r.stdout


def test_check_fails_beyond_tolerance(work: Path) -> None:
    # A library of one model checked against another model with other weights: the outputs
    # must differ, and the driver must say so with exit status 2.
    other = _mlp(8, seed=5)
    onnx.save(other, work / "mlp_other.onnx")
    lib = work / "mlp_for_check.so"
    r = onnxc("compile", work / "mlp.onnx", "--emit", "lib", "-o", lib)
    assert r.returncode == 0, r.stderr
    r = onnxc("run", lib, "--input", f"x={work / 'x.npy'}", "--check", "--model", work / "mlp_other.onnx")
    assert r.returncode == 2, r.stdout + r.stderr
    assert re.search(r"^  y: max abs diff \S+, max rel diff \S+  FAIL \(\d+ of 6 elements beyond rtol=0.001, atol=1e-05\)$", r.stdout, re.M), r.stdout
    assert "Traceback" not in r.stderr and "beyond tolerance" in r.stderr
    # Loose enough tolerances accept the same difference.
    r = onnxc("run", lib, "--input", f"x={work / 'x.npy'}", "--check", "--model", work / "mlp_other.onnx", "--rtol", "1e9", "--atol", "1e9")
    assert r.returncode == 0, r.stdout + r.stderr


def test_lib_runs_without_recompiling(work: Path) -> None:
    lib = work / "mlp.so"
    r = onnxc("compile", work / "mlp.onnx", "--emit", "lib", "-o", lib)
    assert r.returncode == 0, r.stderr
    for side in ("mlp.so.json", "mlp.so.h", "mlp.so.onnx.json"):
        assert (work / side).exists()
    r = onnxc("run", lib, "--input", f"x={work / 'x.npy'}", "--output-dir", work / "lib_out", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    np.testing.assert_allclose(np.load(work / "lib_out" / "y.npy"), np.load(work / "want_y.npy"), rtol=1e-5, atol=1e-6)
    # No recompilation: with the compiler entry points broken, running the library still works.
    code = (
        "import sys, onnxc, onnxc.compiler\n"
        "def boom(*a, **k): raise SystemExit('the compiler was called')\n"
        "onnxc.compile = onnxc.compiler.compile = onnxc.compiler.lower = boom\n"
        "from onnxc.tools.driver import main\n"
        f"sys.exit(main(['run', {str(lib)!r}, '--input', 'x={work / 'x.npy'}']))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "y: shape [2, 3] float32" in r.stdout


def test_errors_are_one_message(work: Path) -> None:
    cases = [
        (["run", work / "missing.onnx"], "no such file"),
        (["run", work / "x.npy"], "not an ONNX model"),
        (["run", work / "mlp.onnx", "--input", f"nope={work / 'x.npy'}"], "has no input 'nope'"),
        (["run", work / "mlp.onnx", "--input", f"x={work / 'want_y.npy'}"], "input 'x'"),
        (["compile", work / "mlp.onnx", "--target", "tpu"], "unknown target 'tpu'"),
    ]
    for args, message in cases:
        r = onnxc(*args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert r.stderr.startswith("onnxc: error: "), r.stderr


def test_unsupported_ops_listed_together(work: Path) -> None:
    # Two nodes no lowering handles (MaxRoiPool has none), in one model: both named in one message.
    nodes = [
        helper.make_node("MaxRoiPool", ["x", "rois"], ["a"], pooled_shape=[2, 2], name="roi_a"),
        helper.make_node("MaxRoiPool", ["x", "rois"], ["b"], pooled_shape=[1, 1], name="roi_b"),
    ]
    graph = helper.make_graph(
        nodes,
        "rois",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4]), helper.make_tensor_value_info("rois", TensorProto.FLOAT, [1, 5])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 1, 2, 2]), helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 1, 1, 1])],
    )
    path = work / "rois.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]), path)
    r = onnxc("compile", path, "--emit", "linalg")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "roi_a" in r.stderr and "roi_b" in r.stderr and "MaxRoiPool" in r.stderr, r.stderr


def test_dynamic_input_must_be_given(work: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    )
    path = work / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    r = onnxc("run", path)
    assert r.returncode == 1 and "dynamic shape" in r.stderr and "--input x=" in r.stderr
    x = np.array([[-1, 2, -3], [4, -5, 6], [0.5, -0.5, 0]], np.float32)
    np.save(work / "dyn_x.npy", x)
    r = onnxc("run", path, "--input", f"x={work / 'dyn_x.npy'}", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "y: shape [3, 3] float32" in r.stdout


# --- pass-manager flags (the same driver as onnx-opt) ----------------------------------------------


def _relu_file(work: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    path = work / "relu_flags.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_print_ir_after_and_timing_flags(work: Path) -> None:
    path = _relu_file(work)
    r = onnxc("compile", path, "--emit", "vector", "--print-ir-after", "convert-onnx-to-linalg,cpu-to-vector", "--timing")
    assert r.returncode == 0, r.stderr
    headers = [line for line in r.stderr.splitlines() if "IR Dump After" in line]
    assert headers == [
        "// -----// IR Dump After ConvertOnnxToLinalgPass (convert-onnx-to-linalg) //----- //",
        "// -----// IR Dump After CpuToVectorPass (cpu-to-vector) //----- //",
    ]
    assert "Execution time report" in r.stderr and "CpuToVectorPass" in r.stderr
    assert "vector.transfer_read" in r.stdout and "IR Dump" not in r.stdout
    r = onnxc("run", path, "--mlir-print-ir-after-all")
    assert r.returncode == 0, r.stderr
    assert "IR Dump After OnnxUpgradeOpsPass (onnx-upgrade-ops)" in r.stderr and "IR Dump After CpuToLLVMPass (cpu-to-llvm)" in r.stderr
    r = onnxc("compile", path, "--emit", "linalg", "--print-ir-after", "cpu-to-vektor")
    assert r.returncode == 1 and "no pass 'cpu-to-vektor'" in r.stderr and "Traceback" not in r.stderr


def test_unknown_target_and_failing_pass_notes(work: Path) -> None:
    path = _relu_file(work)
    r = onnxc("compile", path, "--target", "tpu")
    assert r.returncode == 1 and "unknown target 'tpu' (targets: cpu" in r.stderr
    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    custom = work / "custom_flags.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]), custom)
    r = onnxc("compile", custom, "--emit", "linalg")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "Frobnicate" in r.stderr
    assert "note: in pass 'convert-onnx-to-linalg'" in r.stderr
    assert f"note: reproduce with: onnx-opt {custom} --pass-pipeline='builtin.module(onnx-to-linalg)'" in r.stderr


def test_emit_choices_come_from_the_target(work: Path) -> None:
    path = _relu_file(work)
    r = onnxc("compile", path, "--emit", "spirv")
    assert r.returncode == 1 and "--emit spirv: target 'cpu' emits onnx, linalg, vector, bufferize, llvm, obj, lib" in r.stderr


def test_threads_and_target_cpu_flags(work: Path) -> None:
    # --threads and --target-cpu reach the CPU options for the JIT path and for libraries; the
    # values are checked before any work, each with a one-line error.
    r = onnxc("run", work / "mlp.onnx", "--input", f"x={work / 'x.npy'}", "--threads", "2", "--target-cpu", "x86-64-v3", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    lib = work / "mlp_v3.so"
    r = onnxc("compile", work / "mlp.onnx", "--emit", "lib", "-o", lib, "--target-cpu", "x86-64-v3", "--threads", "1")
    assert r.returncode == 0, r.stderr
    r = onnxc("run", lib, "--input", f"x={work / 'x.npy'}", "--output-dir", work / "v3_out")
    assert r.returncode == 0, r.stdout + r.stderr
    np.testing.assert_allclose(np.load(work / "v3_out" / "y.npy"), np.load(work / "want_y.npy"), rtol=1e-5, atol=1e-6)
    for flags, message in ((["--threads", "0"], "threads must be an integer >= 1"), (["--target-cpu", "pentium-pro"], "unknown target CPU 'pentium-pro'")):
        r = onnxc("run", work / "mlp.onnx", *flags)
        assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
