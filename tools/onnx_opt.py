"""`onnx-opt`: mlir-opt for onnxc. Reads ONNX-dialect IR (or an `.onnx` model), runs a pipeline
that mixes onnxc's Python passes with upstream MLIR passes, and prints the result.

It exists because MLIR's own `mlir-opt` cannot run Python passes: the pipeline is split by
`onnxc.transforms.pipeline`. The flags follow mlir-opt so that lit tests read the same:
`--pass-pipeline`, `-p` (xDSL's short list form), `--split-input-file`, `--verify-diagnostics`,
`--mlir-print-ir-after-all`, `--mlir-print-debuginfo`, `--allow-unregistered-dialect`, `-o`.

Every problem is reported as `file:line:col: error: message` (line numbers of the original file,
also with `--split-input-file`) and exit status 1; a Python traceback is never shown unless
`ONNXC_TRACEBACK=1` is set, because a traceback is a bug report, not a diagnostic.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import inspect
import io
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Sequence, TextIO

from mlir import ir

from onnxc.errors import OnnxcError
from onnxc.transforms import registry
from onnxc.transforms.pipeline import (
    Diagnostic,
    Pipeline,
    PipelineFailure,
    build_pipeline,
    canonical_pipeline,
    Instrumentation,
    collect_diagnostics,
    file_line_col,
    reproduce_command,
)

PROG = "onnx-opt"
SPLIT_MARKER = "// -----"
# mlir-opt splits on the marker; we require it alone on its line so that IR dumps
# (`// -----// IR Dump After ...`) fed back in are not split in the middle.
_SPLIT_LINE = re.compile(r"^[ \t]*// -----[ \t]*$", re.MULTILINE)
# The buffer name `ir.Module.parse` gives every location; replaced by the input's name.
_PARSE_BUFFER = "-"


# ----------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Run onnxc and upstream MLIR passes on ONNX-dialect IR (like mlir-opt).",
        epilog="Any upstream MLIR pass may be named in a pipeline next to onnxc's passes; "
        "`--list-passes` lists onnxc's own. mlir-opt's single-dash spellings "
        "(-split-input-file, -pass-pipeline=...) work too.",
        # `--split` must not silently mean `--split-input-file`.
        allow_abbrev=False,
    )
    p.add_argument("input", nargs="?", default="-", help="input .mlir or .onnx file ('-' for stdin, the default)")
    p.add_argument("-o", dest="output", default="-", metavar="FILE", help="output file ('-' for stdout)")
    p.add_argument("--pass-pipeline", "-pass-pipeline", metavar="PIPELINE", help="textual pipeline, e.g. 'builtin.module(onnx-verify,canonicalize)'")
    p.add_argument("-p", dest="passes", metavar="PASSES", help="comma-separated passes, e.g. 'onnx-verify,cse'")
    p.add_argument("--split-input-file", "-split-input-file", action="store_true", help=f"process each '{SPLIT_MARKER}'-separated chunk on its own")
    p.add_argument("--verify-diagnostics", "-verify-diagnostics", action="store_true", help="check emitted diagnostics against 'expected-*' comments")
    p.add_argument("--mlir-print-ir-after-all", "-mlir-print-ir-after-all", action="store_true", help="print the IR after every pass (to stderr)")
    p.add_argument(
        "--mlir-print-ir-after",
        "-mlir-print-ir-after",
        "--print-ir-after",
        dest="print_ir_after",
        action="append",
        metavar="PASS",
        help="print the IR after the named pass (repeat, or comma-separate names)",
    )
    p.add_argument("--mlir-timing", "-mlir-timing", "--timing", dest="mlir_timing", action="store_true", help="print MLIR's pass timing report")
    p.add_argument("--mlir-print-debuginfo", "-mlir-print-debuginfo", action="store_true", help="print locations with the IR")
    p.add_argument("--mlir-print-op-generic", "-mlir-print-op-generic", action="store_true", help="print operations in the generic form")
    p.add_argument("--mlir-disable-threading", "-mlir-disable-threading", action="store_true", help="run passes on one thread")
    p.add_argument("--allow-unregistered-dialect", "-allow-unregistered-dialect", action="store_true", help="accept operations of unknown dialects")
    p.add_argument(
        "--no-verify-onnx",
        dest="verify_onnx",
        action="store_false",
        help="skip the Python ONNX verifier that runs on the input after parsing",
    )
    p.add_argument("--list-passes", action="store_true", help="list onnxc's passes and their options, then exit")
    p.add_argument("--version", action="store_true", help="print the versions of onnxc and MLIR, then exit")
    return p


def _version() -> str:
    def v(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    return f"{PROG} (onnxc {v('onnxc')}) with MLIR Python bindings {v('xtc-mlir-python-bindings')}"


def list_passes(out: TextIO) -> None:
    """Print every registered onnxc pass (its summary, then its options with types and defaults)
    and every named pipeline (its summary and the text it stands for)."""
    _register_target_passes()
    out.write("onnxc passes:\n")
    for name in registry.pass_names():
        named = registry.get_pipeline(name)
        if named is not None:
            out.write(f"  {name:<28} {named.summary} (pipeline)\n")
            out.write(f"      = {named.text}\n")
            continue
        try:
            cls = registry.get_pass_class(name)
        except (ImportError, AttributeError) as e:
            out.write(f"  {name:<28} (cannot be loaded: {e})\n")
            continue
        if cls is None:
            continue
        out.write(f"  {name:<28} {cls.summary()}\n")
        for f in cls.options():
            out.write(f"      --{f.name.replace('_', '-')}=<{_type_name(f)}>  default: {_default_text(f)}")
            help_text = f.metadata.get("help") if f.metadata else None
            out.write(f"  {help_text}\n" if help_text else "\n")
    out.write(
        "\nAny upstream MLIR pass or pass pipeline (canonicalize, cse, one-shot-bufferize, ...) is accepted\n"
        "as well, with its options in braces; `mlir-opt --help` lists them.\n"
    )


def _register_target_passes() -> None:
    """Add the code-generation targets' stage passes (`cpu-to-vector`, ...) to the registry:
    importing `onnxc.targets` registers them (it imports no target code)."""
    import onnxc.targets  # noqa: F401 - imported for its registrations


def _type_name(f: dataclasses.Field) -> str:  # type: ignore[type-arg]
    t = f.type
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


def _default_text(f: dataclasses.Field) -> str:  # type: ignore[type-arg]
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return repr(f.default_factory())  # type: ignore[misc]
    return "(required)"


# ----------------------------------------------------------------------------------------------
# Input


@dataclasses.dataclass
class Chunk:
    """One unit of work: text whose line numbers are those of the original file, or an imported module."""

    first_line: int  # 1-based line of the original file where the chunk starts
    text: str = ""  # padded with newlines so that line numbers match the original file
    module: ir.Module | None = None  # already imported (an .onnx input)


def split_chunks(text: str, split: bool) -> list[Chunk]:
    """Split `text` at `// -----` lines (when `split`), keeping the original line numbers."""
    if not split:
        return [Chunk(1, text)]
    chunks: list[Chunk] = []
    start = 0
    line = 1
    for m in _SPLIT_LINE.finditer(text):
        body = text[start : m.start()]
        chunks.append(Chunk(line, "\n" * (line - 1) + body))
        line += body.count("\n") + 1  # the chunk's lines and the marker's line
        start = m.end() + 1 if m.end() < len(text) and text[m.end()] == "\n" else m.end()
    chunks.append(Chunk(line, "\n" * (line - 1) + text[start:]))
    return chunks


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise OnnxcError(f"cannot read '{path}': {e.strerror if isinstance(e, OSError) else e}") from None


def _import_onnx(path: str, ctx: ir.Context) -> ir.Module:
    """Import an `.onnx` model through `onnxc.importers.import_model` (loaded only when needed)."""
    try:
        from onnxc.importers import import_model  # type: ignore[attr-defined]
    except ImportError as e:
        raise OnnxcError(f"cannot read '{path}': the ONNX importer (onnxc.importers.import_model) is not available: {e}") from None
    if not Path(path).is_file():
        raise OnnxcError(f"cannot read '{path}': no such file")
    params = inspect.signature(import_model).parameters
    kwargs = {"context": ctx} if "context" in params else {}
    result = import_model(path, **kwargs)
    module = getattr(result, "module", result)  # a Module, or a result object holding one
    if not isinstance(module, ir.Module):
        raise OnnxcError(f"onnxc.importers.import_model returned {type(result).__name__}, not an MLIR module")
    return module


# ----------------------------------------------------------------------------------------------
# Processing


@dataclasses.dataclass
class ChunkResult:
    """What processing one chunk produced."""

    output: str | None  # the printed IR, None when the chunk failed
    diagnostics: list[Diagnostic]
    pipeline_failed: bool = False
    failed_pass: str | None = None  # the failing pass, when the pipeline failed and it is known
    tracebacks: list[str] = dataclasses.field(default_factory=list)


def _rename_locations(root: ir.Operation, old: str, new: str) -> None:
    """Replace the file name `old` by `new` in the plain file locations of ops and block arguments.

    `ir.Module.parse` names its buffer "-"; mlir-opt names locations after the input file, and
    `--mlir-print-debuginfo` output should read the same.
    """

    def fix(loc: ir.Location) -> ir.Location | None:
        if loc.is_a_file() and loc.filename == old:
            return ir.Location.file(new, loc.start_line, loc.start_col, context=loc.context)
        return None

    def visit(op: ir.Operation) -> ir.WalkResult:
        new_loc = fix(op.location)
        if new_loc is not None:
            op.location = new_loc
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    new_arg_loc = fix(arg.location)
                    if new_arg_loc is not None:
                        arg.set_location(new_arg_loc)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)


def _verify_onnx(module: ir.Module) -> list[Diagnostic]:
    """The Python ONNX verifier's findings as error diagnostics (none if it is not available)."""
    try:
        from onnxc.dialect.verifier import verify_onnx
    except ImportError:
        return []
    return [Diagnostic("error", f"'{e.op_name}' op {e.message}", e.location) for e in verify_onnx(module.operation)]


def process_chunk(
    chunk: Chunk, ctx: ir.Context, pipeline: Pipeline | None, args: argparse.Namespace, name: str
) -> ChunkResult:
    """Parse (or take) the chunk's module, verify it, run the pipeline and print the result."""
    diagnostics: list[Diagnostic] = []
    module = chunk.module
    if module is None:
        with collect_diagnostics(ctx) as found:
            try:
                module = ir.Module.parse(chunk.text, context=ctx)
            except ir.MLIRError:
                module = None
        diagnostics += found
        if module is None:
            return ChunkResult(None, diagnostics)
        if args.mlir_print_debuginfo:
            _rename_locations(module.operation, _PARSE_BUFFER, name)
    if args.verify_onnx:
        errors = _verify_onnx(module)
        if errors:
            return ChunkResult(None, diagnostics + errors)
    if pipeline is not None:
        try:
            diagnostics += pipeline.run(module)
        except PipelineFailure as e:
            return ChunkResult(
                None, diagnostics + e.diagnostics, pipeline_failed=True, failed_pass=e.failed_pass, tracebacks=e.tracebacks
            )
    out = io.StringIO()
    module.operation.print(
        enable_debug_info=args.mlir_print_debuginfo,
        print_generic_op_form=args.mlir_print_op_generic,
        assume_verified=True,  # parsing and the pass manager verified it
        file=out,
    )
    out.write("\n")
    return ChunkResult(out.getvalue(), diagnostics)


# ----------------------------------------------------------------------------------------------
# --verify-diagnostics


_EXPECTED = re.compile(
    r"expected-(error|note|remark|warning)(-re)? *(@([+-][0-9]+|above|below|unknown))? *\{\{(.*)\}\}$"
)


@dataclasses.dataclass
class Expected:
    """One `expected-<severity> @<where> {{text}}` designator."""

    severity: str
    line: int | None  # the line the diagnostic must be on; None for @unknown
    text: str
    regex: re.Pattern[str] | None
    at: tuple[int, int]  # line and column of the designator itself
    matched: bool = False

    def matches(self, message: str) -> bool:
        return bool(self.regex.search(message)) if self.regex is not None else self.text in message


def _designator_regex(text: str) -> re.Pattern[str]:
    """`-re` designators: literal text with `{{regex}}` blocks, as in MLIR and FileCheck."""
    parts: list[str] = []
    rest = text
    while "{{" in rest:
        before, _, after = rest.partition("{{")
        block, sep, rest = after.partition("}}")
        if not sep:
            raise OnnxcError(f"unterminated '{{{{' in expected-*-re designator: {text}")
        parts += [re.escape(before), "(" + block + ")"]
    parts.append(re.escape(rest))
    return re.compile("".join(parts))


def parse_expectations(text: str) -> list[Expected]:
    """Every designator in `text`, with MLIR's rules for `@+N`, `@-N`, `@above`, `@below`."""
    found: list[Expected] = []
    lines = text.split("\n")
    last_plain = 0  # 0-based index of the last line without a designator
    pending_below: list[Expected] = []
    for i, raw in enumerate(lines):
        m = _EXPECTED.search(raw.rstrip())
        if not m:
            for e in pending_below:
                e.line = i + 1
            pending_below.clear()
            last_plain = i
            continue
        severity, is_re, _, where, body = m.groups()
        try:
            regex = _designator_regex(body) if is_re else None
        except re.error as err:
            raise OnnxcError(f"line {i + 1}: invalid regex in expected-{severity}-re: {err}") from None
        e = Expected(severity, i + 1, body, regex, (i + 1, m.start() + 1))
        if where is None:
            pass
        elif where[0] in "+-":
            e.line = i + 1 + int(where)
        elif where == "unknown":
            e.line = None
        elif where == "above":
            e.line = last_plain + 1
        else:  # below: the next line that holds no designator
            e.line = len(lines)
            pending_below.append(e)
        found.append(e)
    return found


def verify_diagnostics(
    diagnostics: list[Diagnostic], expected: list[Expected], name: str
) -> list[str]:
    """Match emitted diagnostics (and their notes) against the designators; return the problems."""
    problems: list[str] = []
    flat: list[Diagnostic] = []
    for d in diagnostics:
        flat.append(d)
        # mlir-opt turns `printOpOnDiagnostic` off when verifying; the bindings cannot, so the
        # note it would have added is dropped here instead.
        flat.extend(n for n in d.notes if not n.message.startswith("see current operation:"))
    for d in flat:
        where = file_line_col(d.location)
        in_input = where is not None and where[0] in (_PARSE_BUFFER, name)
        line = where[1] if where is not None else None
        near_miss: Expected | None = None
        hit = False
        for e in expected:
            if e.matched:
                continue
            if where is None:
                if e.line is not None:
                    continue
            elif not in_input or e.line != line:
                continue
            if e.matches(d.message):
                if e.severity == d.severity:
                    e.matched = True
                    hit = True
                    break
                near_miss = e
        if hit:
            continue
        if near_miss is not None:
            problems.append(
                f"{name}:{near_miss.at[0]}:{near_miss.at[1]}: error: '{d.severity}' diagnostic emitted "
                f"when expecting a '{near_miss.severity}'"
            )
        else:
            shown = Diagnostic("error", f"unexpected {d.severity}: {d.message}", d.location)
            problems.append(shown.format({_PARSE_BUFFER: name}))
    for e in expected:
        if not e.matched:
            problems.append(f"{name}:{e.at[0]}:{e.at[1]}: error: expected {e.severity} \"{e.text}\" was not produced")
    return problems


# ----------------------------------------------------------------------------------------------
# Driver


def _reproduce_note(args: argparse.Namespace, pipeline_text: str) -> str:
    flags: list[str] = []
    if args.split_input_file:
        flags.append("--split-input-file")
    if args.allow_unregistered_dialect:
        flags.append("--allow-unregistered-dialect")
    if not args.verify_onnx:
        flags.append("--no-verify-onnx")
    return "note: reproduce with: " + reproduce_command(args.input, pipeline_text, tuple(flags))


def _run(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.version:
        print(_version())
        return 0
    if args.list_passes:
        list_passes(sys.stdout)
        return 0
    if args.pass_pipeline is not None and args.passes is not None:
        raise OnnxcError("give the pipeline either as --pass-pipeline or as -p, not both")
    pipeline_text = args.pass_pipeline if args.pass_pipeline is not None else args.passes
    name = "<stdin>" if args.input == "-" else args.input
    rename = {_PARSE_BUFFER: name}

    from onnxc.dialect import onnx_context

    ctx = onnx_context()
    ctx.allow_unregistered_dialects = args.allow_unregistered_dialect
    if args.mlir_disable_threading:
        ctx.enable_multithreading(False)

    if args.input.endswith(".onnx"):
        if args.split_input_file or args.verify_diagnostics:
            raise OnnxcError("--split-input-file and --verify-diagnostics need a textual .mlir input")
        module = _import_onnx(args.input, ctx)
        ctx = module.context
        chunks = [Chunk(1, module=module)]
    else:
        chunks = split_chunks(_read_input(args.input), args.split_input_file)

    pipeline = None
    if pipeline_text is not None and pipeline_text.strip():
        _register_target_passes()
        instrumentation = Instrumentation(
            print_ir_after_all=args.mlir_print_ir_after_all,
            print_ir_after=tuple(n for item in args.print_ir_after or () for n in item.split(",") if n),
            print_debuginfo=args.mlir_print_debuginfo,
            timing=args.mlir_timing,
        )
        pipeline = build_pipeline(pipeline_text, ctx, instrumentation=instrumentation)

    outputs: list[str] = []
    ok = True
    for chunk in chunks:
        # The Python verifier and passes build types and attributes with the ambient context.
        with ctx:
            result = process_chunk(chunk, ctx, pipeline, args, name)
        outputs.append(result.output or "")
        if args.verify_diagnostics:
            problems = verify_diagnostics(result.diagnostics, parse_expectations(chunk.text), name)
            for p in problems:
                print(p, file=sys.stderr)
            ok = ok and not problems
            continue
        for d in result.diagnostics:
            print(d.format(rename), file=sys.stderr)
        if result.output is None:
            ok = False
            if result.pipeline_failed:
                if not any(d.severity == "error" for d in result.diagnostics):
                    print(f"{name}: error: a pass failed without reporting an error", file=sys.stderr)
                if result.failed_pass:
                    # As onnxc.compile's errors do: the pass, then the command.
                    print(f"note: in pass '{result.failed_pass}'", file=sys.stderr)
                print(_reproduce_note(args, pipeline_text or ""), file=sys.stderr)
            if os.environ.get("ONNXC_TRACEBACK"):
                for tb in result.tracebacks:
                    print(tb, file=sys.stderr)
    text = (SPLIT_MARKER + "\n").join(outputs)
    if args.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    elif ok:
        try:
            Path(args.output).write_text(text)
        except OSError as e:
            raise OnnxcError(f"cannot write '{args.output}': {e.strerror}") from None
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of `onnx-opt`; returns the exit status."""
    try:
        return _run(argv)
    except OnnxcError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`onnx-opt x.mlir | head`): stop quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:  # noqa: BLE001 - a bug must still end in a message, not a traceback
        if os.environ.get("ONNXC_TRACEBACK"):
            traceback.print_exc()
        message = str(e)
        if "Traceback (most recent call last)" in message:
            # Exceptions raised in MLIR callbacks come back with the traceback in their text.
            message = [line for line in message.splitlines() if line.strip()][-1]
        print(
            f"{PROG}: internal error: {type(e).__name__}: {message} (please report it; "
            f"set ONNXC_TRACEBACK=1 to see the traceback)",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
