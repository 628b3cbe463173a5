"""The default CPU lowering pipeline: linalg-on-tensors -> vector -> memref -> LLVM dialect.

What: four named stages, each a function that mutates the module in place and returns it, so a
user (or `onnx-opt`) can stop after any of them:

1. ``lower_to_vector(module)``: tensor-level cleanups, then per-op tiling (``scf.for``) and
   vectorization of every linalg op through the transform dialect, then loop-invariant
   subset hoisting (keeps a matmul accumulator tile in registers across the reduction loop).
   Ops the vectorizer refuses (convolutions, gathers, ...) stay as tiled linalg ops and become
   scalar loops later: a failure to vectorize is never an error.
2. ``bufferize(module)``: one-shot bufferization across function boundaries with identity
   layouts, then ownership-based deallocation. Every memref a public function returns is a
   fresh allocation owned by the caller (the deallocation pass clones when it is not), which is
   what lets ``jit.py``/``aot.py`` free results after copying them out.
3. ``lower_to_llvm(module)``: remaining linalg -> loops, vector -> scf/LLVM, math -> LLVM/libm,
   memref/arith/cf/func/ub -> LLVM, ``reconcile-unrealized-casts``. Public functions get
   ``llvm.emit_c_interface`` so they can be called through ``_mlir_ciface_<name>``.
4. ``lower_module(module, stage=...)``: runs the stages up to ``stage``.

Why the vector step is Python and not a single pass string: tile and vector sizes must be chosen
per op (loop count, which loops are reductions, static or dynamic extents, element width), and
upstream has no pass that vectorizes linalg; the transform dialect does, so ``tile_and_vectorize``
writes one small transform script per module (``vector_transform_script``) with one
``failures(suppress)`` sequence per op and runs it with the transform interpreter. The native
parts are plain pipeline strings (``VECTOR_PRE_PIPELINE``, ``VECTOR_POST_PIPELINE``,
``BUFFERIZE_PIPELINE``, ``LLVM_PIPELINE``) so a pass registry can wrap them.

Dynamic shapes: every dynamic loop is tiled, either by 1 or by the vector size, and vectorized
with explicit ``vector_sizes`` (masked vectors), so the vector shapes are always static.

What is left for speed (the matmul runs at a fraction of BLAS, see bench/cpu_matmul.py): a second,
cache-level tiling of contractions, packing of operands into tile-contiguous layouts (or data
tiling to ``linalg.mmt4d``), register tiling tuned per ISA (AVX-512 has 32 vector registers),
fusion of producers into consumer tiles (``tile_using_forall`` + ``fuse_into_containing_op``),
multi-threading (``scf.forall`` -> OpenMP/async), polynomial approximations of math functions
(``math.exp``/``tanh`` become libm calls per element after vector unrolling).
"""

from __future__ import annotations

import dataclasses
import os
import string
from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import linalg
from mlir.passmanager import PassManager

from onnxc.errors import OnnxcError

from .epilogue import EpiloguePlan, align_unpack_epilogues, epilogue_steps, forward_masked_tiles, plan_epilogues
from .pad_in_place import PAD_BUFFER_ATTR, hoist_pad_fills
from .peel_tiles import peel_masked_tiles
from .split_masked_memory import split_wide_masked_memory
from .strided_transfers import unroll_strided_transfers
from .conv_filters import pack_conv_filters, pad_conv_channels, pointwise_as_matmul, subsample_strided_pointwise
from .data_tiling import ACC_BUFFER_ATTR, PACKED_OPS, fills_to_constants, pack_contractions, plan_packed
from .isa import CpuFeatures, host_cpu
from .threads import ASYNC_PIPELINE, THREAD_RUNTIMES, forall_pipeline, openmp_library, resolve_thread_runtime, runtime_libraries_for
from .tiles import matmul_tile

__all__ = [
    "CpuPipelineOptions",
    "CpuPipelineError",
    "STAGES",
    "VECTOR_PRE_PIPELINE",
    "VECTOR_POST_PIPELINE",
    "HOIST_PIPELINE",
    "LOOPS_PIPELINE",
    "LOOPS_ON_MEMREFS_PIPELINE",
    "BUFFERIZE_PIPELINE",
    "LLVM_PIPELINE",
    "vector_pre_pipeline",
    "bufferize_pipeline",
    "llvm_pipeline",
    "plan_tiles",
    "TilePlan",
    "split_reduction_factor",
    "split_long_reductions",
    "vector_transform_script",
    "plan_vectorization",
    "VectorPlan",
    "fusion_bonds",
    "tile_and_vectorize",
    "lower_to_vector",
    "lower_to_loops",
    "bufferize",
    "lower_to_llvm",
    "lower_module",
    "runtime_libraries",
    "ASYNC_PIPELINE",
]


class CpuPipelineError(OnnxcError, ValueError):
    """The module cannot go through the CPU pipeline (bad input or a failing pass)."""


@dataclasses.dataclass(frozen=True)
class CpuPipelineOptions:
    """Knobs of the CPU pipeline; the defaults are what ``compile_module`` uses.

    vectorize: tile and vectorize linalg ops (False: scalar loops, a debugging aid).
    fuse_elementwise: fuse chains of elementwise linalg ops before tiling, so intermediates of
        an add->relu chain never reach memory.
    fuse_epilogues: compute a convolution's elementwise consumer (bias, activation, residual
        add) and its accumulator's initializer inside the convolution's tiles (``epilogue.py``).
    target_cpu: the CPU the code is generated for: ``host`` (this machine, read by
        ``isa.host_cpu``) or a name of ``isa.KNOWN_CPUS`` (``znver3``, ``x86-64-v3``...). Vector
        widths and register/cache tiles come from its features (``options.cpu``) through the
        tables of ``tiles.py``, never from constants fitted to one machine.
    matmul_tile: an (m, n, k) register tile overriding the ISA table for contractions that
        are not data-tiled (other element types, data_tiling=False); empty: the table's.
    threads: worker threads of the generated code (default: the host's cores; 1: none). The
        outer parallel tiles of large ops become ``scf.forall`` loops with one iteration per
        thread, run by ``thread_runtime`` (``runtime_libraries`` names the library the JIT
        must load and an AOT library links).
    thread_runtime: what runs the threaded loops (``threads.py``): ``openmp`` (LLVM's OpenMP
        runtime, libiomp5 from the ``intel-openmp`` package), ``async`` (MLIR's async runtime) or
        ``auto``, the default: OpenMP where it is installed, else the async runtime.
    data_tiling: f32 matmuls/batch matmuls go through pack -> mmt4d -> unpack with the ISA's
        register tile (``data_tiling.py``); constant weights are packed at compile time.
    max_sequential_reduction: a floating-point contraction whose (single, static) reduction is
        longer than this is split into partial sums (``split_reduction_factor``), each summing
        at most this many products, then added up: one sequential f32 accumulator over
        K=4096 gives about 3e-6 relative error, 4 partial sums of 1024 about 1e-6. 0 turns the
        split off. 1024 rather than 512: at 512 every K=768 product (BERT's and GPT-2's
        projections and FFN-up) was split in two and paid a partial-sum buffer and a reduction
        pass, 14% of a 128x3072x768 matmul (85.7 -> 97.9 GFLOP/s unsplit, relative error
        7e-7 -> 1.1e-6; BERT-base 251 -> 246 ms, AVX-512, bench noisy), for accuracy far inside
        the 1e-4 the benchmarks and 1e-3 the backend tests ask; onnxruntime does not split.
        256 had been slower still (a 512x512x512 matmul split in two ran 30% slower).
    max_partial_elements: cap on the partial-sum buffer (split factor x output elements); past
        it the split factor is lowered (fewer, longer partial sums) to bound memory.
    jit_opt_level: LLVM optimization level of the JIT's ExecutionEngine (0-3; both LLVM IR
        passes and code generation). Most of a huge model's compile time is LLVM's; see
        ``compile_module``. Default 2: the kernels reach LLVM already tiled, vectorized and
        unrolled, and O3's additions (more inlining and unrolling, non-trivial unswitching,
        aggressive instruction selection) found nothing more to gain. Measured on AVX2 Zen 3,
        same process, runs interleaved, 1 thread (O3 / O2 median ms): BERT-base 297 / 291,
        ResNet-50 132 / 134, SqueezeNet 14.1 / 13.5, MobileNetV2 11.6 / 11.5, ViT 145 / 141,
        Llama-style 86.5 / 88.0, GPT-2 252 / 259, GPT-2 decode 27.6 / 27.3 (the noise of that
        machine is several percent either way); the LLVM part of BERT-base's compile went from
        5.8 to 4.3 s (`onnxc bench --compile-stages`: IR passes 2.70 -> 2.03 s, machine code
        3.08 -> 2.22 s), of ResNet-50's about 1 s. The AOT library (``aot.py``) keeps ``-O3``.
    split_codegen: let a child process compile about half of a large module's outlined parts
        to machine code while the ExecutionEngine compiles the rest (``split_codegen.py``);
        the same code, in less time on a host with two or more cores. False: all in the engine.
    """

    vectorize: bool = True
    fuse_elementwise: bool = True
    fuse_epilogues: bool = True
    target_cpu: str = "host"
    data_tiling: bool = True
    matmul_tile: tuple[int, ...] = ()
    threads: int = dataclasses.field(default_factory=lambda: host_cpu().cores)
    thread_runtime: str = "auto"
    max_sequential_reduction: int = 1024
    max_partial_elements: int = 1 << 24
    jit_opt_level: int = 2
    split_codegen: bool = True

    def __post_init__(self) -> None:
        # Validated here, before any IR: an unknown CPU is a user error naming the known ones.
        CpuFeatures.for_target(self.target_cpu)
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise CpuPipelineError(f"CPU option threads must be an integer >= 1, got {self.threads!r}")
        if self.thread_runtime not in THREAD_RUNTIMES:
            raise CpuPipelineError(
                f"CPU option thread_runtime must be one of {', '.join(THREAD_RUNTIMES)}, got {self.thread_runtime!r}"
            )
        if self.thread_runtime == "openmp" and self.threads > 1 and openmp_library() is None:
            raise CpuPipelineError("CPU option thread_runtime=openmp needs libiomp5: pip install intel-openmp")

    @property
    def cpu(self) -> CpuFeatures:
        """The features of ``target_cpu`` (the host's by default)."""
        return CpuFeatures.for_target(self.target_cpu)


# --- native pipeline strings ------------------------------------------------------------------
#
# Passes that look at one function at a time are nested under `func.func(...)` (`llvm.func`
# once functions are LLVM): the pass manager then runs them on the outlined parts in parallel
# on the context's thread pool, where a pass anchored on the module walks every function on one
# thread. Passes that see across functions (one-shot bufferization across function boundaries,
# ownership-based deallocation, conversions that declare functions: math-to-funcs/libm,
# memref-to-llvm's malloc, func-to-llvm, cf-to-llvm's assert) stay on the module. BERT-base,
# AVX2 Zen 3, 2 cores, median of 3 compiles alternated in one process: 10.15 -> 7.91 s;
# ResNet-50 6.96 -> 6.42 s.

#: Tensor-level cleanups before tiling. Elementwise fusion is optional (see options).
VECTOR_PRE_PIPELINE: str = "builtin.module(canonicalize,cse)"
_FUSE_PIPELINE: str = "builtin.module(linalg-fuse-elementwise-ops,canonicalize,cse)"

#: After vectorization: fold the tile loops, hoist loop-invariant code, clean up.
VECTOR_POST_PIPELINE: str = "builtin.module(canonicalize,cse,loop-invariant-code-motion,canonicalize,cse)"

#: Hoist loop-invariant transfer pairs out of the reduction loops (keeps a contraction's
#: accumulators in registers across its reduction loop). Run by ``bufferize`` on the outlined
#: parts, not on the whole function after vectorization: the pass asks, for every
#: extract/insert pair on a loop's iter_arg, whether the two subsets are equal, through
#: ``ValueBoundsConstraintSet``, which follows each dynamic bound back through every earlier
#: op (a loop bound is ``tensor.dim`` of the previous loop's result, whose size is the
#: ``tensor.dim`` of the op before...). With dynamic shapes that grows with the model: a
#: two-layer T5 encoder with dynamic batch/sequence spent 256 s of a 261 s compile in this pass
#: (H15, bench/dynamic_shapes.py). In an outlined part the chain stops at the part's
#: arguments (1.1 s). No `cse` here: it would merge equal padding buffers again
#: (pad_in_place.py); bufferization's own clean-up runs one after one-shot bufferization.
HOIST_PIPELINE: str = "builtin.module(func.func(loop-invariant-subset-hoisting,canonicalize))"

#: Bufferization. `empty-tensor-to-alloc-tensor` first because one-shot-bufferize refuses
#: `tensor.empty` that survive `eliminate-empty-tensors`; function arguments are marked
#: read-only by `bufferize()` before this runs so callers' arrays are never written.
BUFFERIZE_PIPELINE: str = (
    "builtin.module(func.func(eliminate-empty-tensors,empty-tensor-to-alloc-tensor),"
    "one-shot-bufferize{bufferize-function-boundaries allow-return-allocs-from-loops "
    "function-boundary-type-conversion=identity-layout-map},"
    "func.func(canonicalize,cse),"
    # buffer-deallocation-pipeline, spelled out so its per-function passes run in parallel
    "func.func(expand-realloc{emit-deallocs=false},canonicalize),"
    "ownership-based-buffer-deallocation,"
    "func.func(canonicalize,buffer-deallocation-simplification),"
    "bufferization-lower-deallocations,func.func(cse,canonicalize),"
    "convert-bufferization-to-memref,func.func(canonicalize,cse))"
)

#: Everything to the LLVM dialect. Order matters: linalg->loops before vector->scf (loops may
#: carry vector ops), vector->scf before scf->cf, math->llvm before math->libm (intrinsics
#: first, library calls for the rest), `expand-strided-metadata` + `lower-affine` before
#: `finalize-memref-to-llvm`, `convert-ub-to-llvm` because vectorization creates `ub.poison`,
#: `convert-openmp-to-llvm` for the `omp.parallel` regions of OpenMP-threaded code (threads.py).
#: LLVM_PIPELINE in two halves: `runtime_checks.insert_failure_exits` (the run-time status
#: channel: allocation tests and early exits) runs between them, on memrefs in CFG form.
LLVM_PIPELINE_HEAD: str = (
    "func.func(convert-vector-to-scf{full-unroll=true target-rank=1},"
    "canonicalize,"
    "expand-strided-metadata,lower-affine,"
    "arith-expand{include-bf16=true},"
    "convert-scf-to-cf)"
)
LLVM_PIPELINE_TAIL: str = (
    "convert-math-to-funcs{min-width-of-fpowi-exponent=1},"
    "func.func(convert-math-to-llvm),convert-math-to-libm,"
    "func.func(convert-vector-to-llvm{vector-contract-lowering=outerproduct}),"
    "finalize-memref-to-llvm,"
    "func.func(convert-arith-to-llvm,convert-index-to-llvm),convert-cf-to-llvm,"
    "convert-func-to-llvm,convert-openmp-to-llvm,"
    "llvm.func(convert-ub-to-llvm,canonicalize),reconcile-unrealized-casts"
)
LLVM_PIPELINE: str = f"builtin.module({LLVM_PIPELINE_HEAD},{LLVM_PIPELINE_TAIL})"

#: Runs before LLVM_PIPELINE: the remaining (unvectorized) linalg ops on memrefs become loops,
#: so that `_widen_i1_memrefs` sees only memref.load/store on i1 buffers.
LOOPS_ON_MEMREFS_PIPELINE: str = "builtin.module(func.func(convert-linalg-to-loops,canonicalize))"

#: Loops-only lowering of linalg on tensors (debug option, `vectorize=False`): bufferize as
#: usual; `convert-linalg-to-loops` in LLVM_PIPELINE then produces scalar loops.
LOOPS_PIPELINE: str = VECTOR_PRE_PIPELINE


def vector_pre_pipeline(options: CpuPipelineOptions | None = None) -> str:
    """The tensor-level cleanup pipeline for ``options`` (a string for a pass registry)."""
    opts = options or CpuPipelineOptions()
    return _FUSE_PIPELINE if opts.fuse_elementwise else VECTOR_PRE_PIPELINE


def bufferize_pipeline() -> str:
    """The bufferization pipeline string (see ``BUFFERIZE_PIPELINE``)."""
    return BUFFERIZE_PIPELINE


def llvm_pipeline() -> str:
    """The to-LLVM pipeline string (see ``LLVM_PIPELINE``)."""
    return LLVM_PIPELINE


#: Stage names accepted by ``lower_module`` in pipeline order.
STAGES: tuple[str, ...] = ("vector", "bufferize", "llvm")


# --- helpers ----------------------------------------------------------------------------------


def _run(module: ir.Module, pipeline: str, what: str) -> None:
    """Run a native pipeline; turn its diagnostics into a CpuPipelineError naming the stage."""
    ctx = module.context
    diagnostics: list[str] = []

    def handler(d: ir.Diagnostic) -> bool:
        diagnostics.append(f"{d.location}: {d.message}")
        for note in d.notes:
            diagnostics.append(f"  note: {note.message}")
        return True

    h = ctx.attach_diagnostic_handler(handler)
    try:
        pm = PassManager.parse(pipeline, context=ctx)
        pm.run(module.operation)
    except ir.MLIRError as e:  # pass failure: the diagnostics are in e and the handler
        detail = "\n".join(diagnostics) or str(e)
        raise CpuPipelineError(f"CPU pipeline stage '{what}' failed:\n{detail}") from None
    finally:
        h.detach()


def _functions(module: ir.Module) -> list[ir.Operation]:
    return [op.operation for op in module.body.operations if op.operation.name == "func.func"]


def _validate_input(module: ir.Module) -> None:
    """Checks done in Python because a C++ assertion would kill the process."""
    if not module.operation.verify():
        raise CpuPipelineError("input module does not verify")
    for f in _functions(module):
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        for i, t in enumerate(list(ftype.inputs) + list(ftype.results)):
            if isinstance(t, ir.ShapedType) and not isinstance(t, ir.RankedTensorType) and not (
                isinstance(t, ir.MemRefType)
            ):
                name = ir.StringAttr(f.attributes["sym_name"]).value
                raise CpuPipelineError(
                    f"function @{name}: unranked type {t} is not supported by the CPU target"
                )


# --- tiling / vectorization plan --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TilePlan:
    """How one linalg op is tiled and vectorized.

    tile_sizes: one per loop; 0 = not tiled (only for static loops, the vector covers it).
    vector_sizes: one per loop (the static vector shape; >= every tile's extent), or None to
        leave the op unvectorized (tiled only).
    named_contraction: emit ``vector.contract`` directly; it lowers to an outer product of
        an m-vector and an n-vector (one FMA per m row), where the generic vectorization of a
        (m, n, 1) tile gives a unit-dim broadcast that unrolls into scalar-width ops.
    """

    tile_sizes: tuple[int, ...]
    vector_sizes: tuple[int, ...] | None
    named_contraction: bool = False
    # Cache-level tile sizes applied before `tile_sizes` (packed mmt4d of large shapes), or None.
    cache_tile_sizes: tuple[int, ...] | None = None
    # Thread count per loop of an outermost `scf.forall` (0 = loop not split), or None.
    forall_threads: tuple[int, ...] | None = None
    # Channels-last convolutions/poolings (targets/cpu/conv_plan.py): after tiling to one output
    # and kernel row, `transform.structured.decompose` makes them 1-D, the form upstream vectorizes.
    decompose: bool = False
    # Loop order of the `tile_sizes` loops (a permutation of the op's loops, outermost first),
    # or None for the op's own order. Convolutions whose filter outgrows L2 put the output
    # channels outermost so each filter tile stays in cache across the output rows (conv_plan.py).
    interchange: tuple[int, ...] | None = None


def _elem_bits(t: ir.Type) -> int:
    if isinstance(t, ir.ShapedType):
        t = ir.ShapedType(t).element_type
    if isinstance(t, ir.IntegerType):
        return max(8, ir.IntegerType(t).width)
    if isinstance(t, ir.FloatType):
        return ir.FloatType(t).width
    return 32  # index and others: a safe middle


def _LINALG_REDUCTION(context: ir.Context) -> ir.Attribute:  # noqa: N802 - a constant per context
    """`#linalg.iterator_type<reduction>` in `context` (iterator kinds compared by value)."""
    return ir.Attribute.parse("#linalg.iterator_type<reduction>", context)


def _loop_ranges(op: ir.Operation, maps: list[ir.AffineMap]) -> list[int | None]:
    """Static extent of each loop (None when dynamic or not derivable from a plain dim)."""
    n = maps[0].n_dims if maps else 0
    ranges: list[int | None] = [None] * n
    found = [False] * n
    operands = list(op.operands)
    for operand, amap in zip(operands, maps):
        if not isinstance(operand.type, ir.ShapedType):
            continue
        st = ir.ShapedType(operand.type)
        for idx, expr in enumerate(amap.results):
            if isinstance(expr, ir.AffineDimExpr):
                d = ir.AffineDimExpr(expr).position
                if found[d]:
                    continue
                found[d] = True
                ranges[d] = None if st.is_dynamic_dim(idx) else st.get_dim_size(idx)
    return ranges


def _iterators(op: ir.Operation, maps: list[ir.AffineMap], num_inits: int) -> list[str]:
    if "iterator_types" in op.attributes:
        reduction = _LINALG_REDUCTION(op.context)
        return ["reduction" if a == reduction else "parallel" for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    # Named ops: a loop is parallel iff it indexes an output (true for every named op).
    n = maps[0].n_dims if maps else 0
    par = [False] * n
    for amap in maps[len(maps) - num_inits :]:
        for expr in amap.results:
            if isinstance(expr, ir.AffineDimExpr):
                par[ir.AffineDimExpr(expr).position] = True
    return ["parallel" if p else "reduction" for p in par]


def _num_inits(op: ir.Operation) -> int:
    view = op.opview
    outs = getattr(view, "outputs", None)
    if outs is None:
        return 1
    return len(list(outs))


def _reduction_reads_inputs(op: ir.Operation, num_inits: int) -> bool:
    """Whether every value a reduction op's body yields depends on one of its input elements.

    Why: the linalg vectorizer (LLVM 22) turns ``out = combiner(out, x)`` into a
    ``vector.multi_reduction`` of ``x`` over the reduction dims only when ``x`` is a vector of
    the whole iteration space, which it is when ``x`` is computed from an input block argument
    (inputs are read broadcast to the iteration space). When ``x`` is uniform, a constant or a
    value captured from above (what ``linalg-fuse-elementwise-ops`` leaves when it folds a
    ``linalg.fill`` of ones into a window sum: ``out + 1.0``), the vectorized body adds ``x``
    once per vector instead of once per reduced element (a 2x2 window counted 2 instead of 4),
    and when ``x`` comes only from ``linalg.index`` of a reduction dim the vectorizer hits a C++
    assertion. Such ops are left unvectorized. Ops whose body has nested regions are refused
    too (the dependence is not followed into them).
    """
    if not op.regions or not len(op.regions[0].blocks):
        return True  # named op without an inspectable body: its body reads its inputs
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    num_inputs = len(args) - num_inits
    if num_inputs < 0:
        return False
    # hash() of a Value is that of its underlying MLIR value, so Values key a dict.
    reads: dict[ir.Value, bool] = {a: i < num_inputs for i, a in enumerate(args)}
    for inner in block.operations:
        inner = inner.operation
        if inner.name == "linalg.yield":
            return all(reads.get(v, False) for v in inner.operands)
        if len(inner.regions):
            return False
        dep = any(reads.get(v, False) for v in inner.operands)
        for r in inner.results:
            reads[r] = dep
    return False


def _body_extracts(op: ir.Operation) -> bool:
    """Whether a linalg op's body reads a tensor with `tensor.extract` (a gather)."""
    if not op.regions or not len(op.regions[0].blocks):
        return False
    return any(o.operation.name == "tensor.extract" for o in op.regions[0].blocks[0].operations)


def plan_tiles(op: ir.Operation, options: CpuPipelineOptions | None = None) -> TilePlan | None:
    """Choose tile and vector sizes for one linalg structured op (None: leave it alone).

    Contractions (matmul, batch_matmul, generic equivalents) get a register tile (m, n, k) on
    their innermost m/n/k loops and 1 on the rest. Everything else vectorizes its innermost
    loop (``vector_bits`` worth of elements, fewer when the loop is shorter) and tiles the
    other loops by 1, so each tile is a 1-D vector and any dynamic extent is handled by masks.
    """
    opts = options or CpuPipelineOptions()
    # An op with a static 0-size dim has an empty iteration space (or only a reduction over an
    # empty loop, leaving its init): its tile plan would give a loop of extent 0 a tile of 0 (a
    # whole-row reduction tile) or of 1, which MLIR's tiling asserts on (computeAllSliceParameters:
    # SIGABRT; a ReduceSum or Softmax of a [3, 0] input, an mmt4d of K = 0). It is left to
    # scalar loops, which run zero times. Not pack/unpack: they must be tiled to be
    # decomposed (not bufferizable), and their plan has no such tile.
    if op.name not in ("linalg.pack", "linalg.unpack") and any(
        isinstance(v.type, ir.ShapedType) and ir.ShapedType(v.type).has_rank and 0 in ir.ShapedType(v.type).shape
        for v in list(op.operands) + list(op.results)
    ):
        return None
    # Channels-last convolutions and poolings have their own ISA-derived plan (conv_plan.py).
    from onnxc.targets.cpu.conv_plan import plan_conv

    conv = plan_conv(op, opts)
    if conv is not None:
        return conv
    # The ops of data tiling (pack, mmt4d, unpack) have their own plans (data_tiling.py).
    if op.name in PACKED_OPS:
        packed = plan_packed(op, opts.cpu, opts.threads, min_threaded_elements(opts))
        if packed is None:
            return None
        tiles, vectors, cache, named, forall, order = packed
        return TilePlan(tiles, vectors, named_contraction=named, cache_tile_sizes=cache, forall_threads=forall, interchange=order)
    try:
        maps = [ir.AffineMapAttr(a).value for a in linalg.get_indexing_maps(op.opview)]
    except Exception:  # not a structured op with indexing maps
        return None
    if not maps:
        return None
    n = maps[0].n_dims
    # i1 tensors live in memory one byte per element (`_widen_i1_memrefs` retypes every i1
    # buffer to i8), but LLVM loads/stores `<N x i1>` vectors bit-packed, and a
    # `vector.transfer_*` of `vector<i1>` on an i8 buffer does not verify. Leave such ops to
    # scalar loops (bool tensors are small and rare in compute-heavy paths). This check comes
    # before the 0-d case: a rank-0 bool (a Loop condition) must not become `vector<i1>` either.
    shaped = [v.type for v in list(op.operands) + list(op.results)]
    if any(
        isinstance(t, ir.ShapedType) and ir.ShapedType(t).element_type == ir.IntegerType.get_signless(1, op.context) for t in shaped
    ):
        return None
    if n == 0:
        # 0-d op: nothing to tile; vectorize as a 0-d vector, unless its body reads with
        # `tensor.extract` (a Gather of one element): the vectorizer makes that a 0-d
        # `vector.gather` whose index operand canonicalization folds to a scalar `index`, which
        # does not verify ("operand #2 must be vector of integer or index values"). A scalar
        # op is no slower.
        if _body_extracts(op):
            return None
        return TilePlan((), ())
    num_inits = _num_inits(op)
    ranges = _loop_ranges(op, maps)
    iters = _iterators(op, maps, num_inits)
    if "reduction" in iters and not _reduction_reads_inputs(op, num_inits):
        return TilePlan(tuple([1] * n), None)  # tiled, scalar: see _reduction_reads_inputs
    results_types = [r.type for r in op.results] or [o.type for o in op.operands]
    bits = max(_elem_bits(t) for t in results_types)
    cpu = opts.cpu
    lanes = cpu.lanes(bits)

    def clamp(size: int, d: int) -> int:
        r = ranges[d]
        return size if r is None else max(1, min(size, r))

    tiles = [1] * n
    static = all(r is not None for r in ranges)
    if linalg.isa_contraction_op(op.opview):
        dims = linalg.infer_contraction_dimensions(op.opview)
        m_dims, n_dims, k_dims = list(dims.m), list(dims.n), list(dims.k)
        if m_dims and n_dims and k_dims:
            # The ISA's register tile (tiles.py), for contractions data tiling leaves alone.
            if opts.matmul_tile:
                tm, tn, tk = opts.matmul_tile
            else:
                # The general tile (clamped to short loops below): skinny tiles are for packed
                # operands; here a wide n0 would stop long reductions from splitting evenly.
                reg = matmul_tile(cpu, bits)
                tm, tn, tk = reg.m0, reg.n0, 1
            tiles[m_dims[-1]] = clamp(tm, m_dims[-1])
            tiles[n_dims[-1]] = clamp(tn, n_dims[-1])
            tiles[k_dims[-1]] = clamp(tk, k_dims[-1])
            return TilePlan(tuple(tiles), tuple(tiles), named_contraction=True)
    # Generic strategy: vectorize the innermost loop.
    inner = n - 1
    tiles[inner] = clamp(lanes, inner)
    if iters[inner] == "reduction" and ranges[inner] is not None:
        tiles[inner] = _inner_reduction_tile(int(ranges[inner]), lanes)
    del static  # the plan does not depend on it for now
    return TilePlan(tuple(tiles), tuple(tiles), forall_threads=_forall_for_large(ranges, iters, opts.threads, min_threaded_elements(opts)))


#: Vectors a row reduction over the innermost loop reads per tile (see `_inner_reduction_tile`).
MAX_REDUCTION_VECTORS: int = 16


def _inner_reduction_tile(extent: int, lanes: int) -> int:
    """The tile of a reduction over the innermost loop: the whole row, up to
    ``MAX_REDUCTION_VECTORS`` vectors (rounded up to whole vectors; the tail is masked).

    Why: each tile's ``vector.multi_reduction`` folds its vector into the scalar accumulator with
    a horizontal reduction (a shuffle tree). With one vector per tile that tree ran once per 16
    elements: Softmax's max and sum over 128-wide rows were 5x slower than onnxruntime. With the
    row in one tile LLVM combines the vectors lane-wise and reduces across lanes once per row.
    """
    want = min(extent, MAX_REDUCTION_VECTORS * lanes)
    return -(-want // lanes) * lanes


#: Elements an elementwise, reduction or copy op (transpose, pack, unpack) must have before its
#: outer loop is split over OpenMP threads (`min_threaded_elements`). Handing a region to
#: libiomp5's spinning workers costs about half a microsecond (measured on the AVX-512 EPYC VM,
#: 2 threads, `KMP_BLOCKTIME=20`: 0.43-0.6 us per empty `parallel` region), about what one
#: thread needs to copy or map 8K floats, so from there on the split pays. A serial op also
#: runs slower than alone, beside a worker spinning on the other core (a 0.35 ms ShuffleNet
#: subgraph ran 0.47 ms on one thread next to a busy loop on the second core), so small CNNs
#: gain from threading their mid-size copies: one process, 2 threads, 1<<16 -> 1<<13:
#: ShuffleNet 4.44 -> 4.32 ms, SqueezeNet 5.76 -> 5.63, MobileNetV2 4.61 -> 4.57 (medians of
#: 300 interleaved runs); the big models' ops are far above either threshold.
MIN_THREADED_ELEMENTS: int = 1 << 13

#: The same threshold for MLIR's async runtime, whose task dispatch wakes a sleeping worker
#: through a futex (tens of microseconds in a VM, threads.py).
ASYNC_MIN_THREADED_ELEMENTS: int = 1 << 16


def min_threaded_elements(options: "CpuPipelineOptions | None" = None) -> int:
    """The elements an elementwise, reduction or copy op needs before its outer loop is split
    over threads, for the thread runtime ``options`` resolve to (see ``MIN_THREADED_ELEMENTS``)."""
    runtime = (options or CpuPipelineOptions()).thread_runtime
    return MIN_THREADED_ELEMENTS if resolve_thread_runtime(runtime) == "openmp" else ASYNC_MIN_THREADED_ELEMENTS


def _forall_for_large(ranges: list[int | None], iters: list[str], threads: int, min_elements: int) -> tuple[int, ...] | None:
    """Thread counts for a large elementwise/reduction op (static shape, at least
    ``min_elements`` iterations: `min_threaded_elements`): one of its outer parallel loops split
    over the threads (see `forall_split`; the innermost loop holds the vector and stays whole)."""
    if threads <= 1 or len(ranges) < 2 or any(r is None for r in ranges):
        return None
    total = 1
    for r in ranges:
        total *= int(r)  # type: ignore[arg-type]
    if total < min_elements:
        return None
    candidates = [d for d in range(len(ranges) - 1) if iters[d] == "parallel"]
    return forall_split(ranges, candidates, threads)


#: How much worse balanced (share of the threads' time kept busy) an outer split may be than the
#: best one and still win by being outer (`forall_split`).
FORALL_BALANCE_SLACK: float = 0.05


def forall_split(
    ranges: Sequence[int | None], candidates: Sequence[int], threads: int, tiles: Sequence[int] | None = None
) -> tuple[int, ...] | None:
    """The ``num_threads`` list of an outer ``scf.forall`` that splits one loop of ``candidates``
    (outermost first) over ``threads``, or None when no loop splits well.

    A loop qualifies when it is static, has at least ``threads`` tiles (its extent over its tile
    size in ``tiles``, 1 when absent), and each thread's share stays a whole number of tiles (a
    partial register tile would make the tile dynamic, and the vectorizer leaves such a tile
    scalar). Among those the outermost wins whose balance is within ``FORALL_BALANCE_SLACK`` of
    the best (7 output rows over 2 threads leave one thread idle an eighth of the time: 512
    channels split evenly; 55 rows split 28/27 beat 64 channels split 32/32: each thread then
    reads and writes its own half of the rows, where a channel split had both threads touch every
    pixel. One process, AVX-512 Xeon, 2 threads: SqueezeNet 4.51 -> 3.91 ms, DenseNet-121 33.6 ->
    32.7, others within noise). Each thread takes whole tiles, so the results equal the
    one-thread results.
    """
    if threads <= 1:
        return None
    scored: list[tuple[float, int]] = []  # (balance, loop), outermost first
    for d in candidates:
        extent = ranges[d]
        tile = max(1, int(tiles[d])) if tiles is not None and tiles[d] else 1
        if extent is None or extent % tile:
            continue
        units = extent // tile
        # `num_threads` gives each thread ceil(extent / threads) iterations: whole tiles only
        # when the threads divide the tile count (any split is whole for a tile of 1).
        if units < threads or (tile > 1 and units % threads):
            continue
        share = -(-units // threads)  # tiles per thread (the last thread may take fewer)
        balance = units / (share * threads)
        scored.append((balance, d))
    if not scored:
        return None
    top = max(balance for balance, _ in scored)
    loop = next(d for balance, d in scored if balance >= top - FORALL_BALANCE_SLACK)
    counts = [0] * len(ranges)
    counts[loop] = threads
    return tuple(counts)


_TAG = "onnxc.vector_id"

# Masked transfers (`vector.mask { vector.transfer_read }`) do not survive bufferization (it
# puts constants inside the mask region); folding the mask into the transfer's mask operand
# first is what upstream pipelines do as well. Masked `vector.multi_reduction` (dynamic
# reductions) has no LLVM lowering: lower it to masked `vector.reduction` here.
_MASK_LOWERING: str = """%funcs = transform.structured.match ops{["func.func"]} in %root
  : (!transform.any_op) -> !transform.any_op
transform.apply_patterns to %funcs {
  transform.apply_patterns.vector.lower_masked_transfers
  transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = "innerreduction"
} : !transform.any_op"""


def _structured_ops(module: ir.Module) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("linalg.") and op.name not in ("linalg.yield", "linalg.index"):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


#: One group of ops with the same plan: matched once (a walk of the module per group, not per
#: op: per-op sequences made the vector stage quadratic in the number of ops), then each op is
#: transformed in its own `failures(suppress)` sequence inside `transform.foreach`, so an op
#: the vectorizer refuses stays tiled and scalar without stopping the others of its group.
_GROUP_TEMPLATE = string.Template(
    """%ops$id = transform.structured.match attributes{$tag = $id : i64} in %root
  : (!transform.any_op) -> !transform.any_op
transform.foreach %ops$id : !transform.any_op {
^bb0(%op: !transform.any_op):
  transform.sequence %op : !transform.any_op failures(suppress) {
  ^bb1(%o: !transform.any_op):
$steps
    transform.yield
  }
}"""
)
_FORALL_STEP = string.Template(
    "    %f, %fl = transform.structured.tile_using_forall $target num_threads [$counts]"
    " : (!transform.any_op) -> (!transform.any_op, !transform.any_op)"
)
_TILE_STEP = string.Template(
    "    $result, $loops_name:$n = transform.structured.tile_using_for $target tile_sizes [$sizes]$interchange"
    " : (!transform.any_op) -> (!transform.any_op, $loops)"
)
_DECOMPOSE_STEP = string.Template(
    "    %d = transform.structured.decompose $target : (!transform.any_op) -> !transform.any_op"
)
_VECTORIZE_STEP = string.Template("    transform.structured.vectorize $target$sizes$attrs : !transform.any_op")
_SCRIPT_TEMPLATE = string.Template(
    """module attributes {transform.with_named_sequence} {
transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
$groups
$mask_lowering
transform.yield
}
}"""
)


def _ints(values: Sequence[int]) -> str:
    return ", ".join(str(int(v)) for v in values)


def tile_step(result: str, loops_name: str, target: str, sizes: Sequence[int], order: Sequence[int] | None = None) -> str:
    """A `tile_using_for` step of `target` by `sizes` (0 = not tiled), binding the tiled op to
    `result` and its loops to `loops_name`, in the loop order `order` when given (the op's own
    order else); empty when no size is non-zero."""
    n = sum(1 for t in sizes if t)
    if not n:
        return ""
    interchange = f" interchange = [{_ints(order)}]" if order else ""
    return _TILE_STEP.substitute(result=result, loops_name=loops_name, n=n, target=target, sizes=_ints(sizes),
                                 interchange=interchange, loops=", ".join(["!transform.any_op"] * n))


def _plan_steps(plan: TilePlan) -> str:
    """The transform steps of one plan (forall, cache tiles, register tiles, decompose,
    vectorize), applied to the op handle ``%o``."""
    steps: list[str] = []
    target = "%o"
    if plan.forall_threads:
        steps.append(_FORALL_STEP.substitute(target=target, counts=_ints(plan.forall_threads)))
        target = "%f"
    for result, loops_name, sizes, order in (
        ("%c", "%cl", plan.cache_tile_sizes or (), None),
        ("%t", "%l", plan.tile_sizes, plan.interchange),
    ):
        step = tile_step(result, loops_name, target, sizes, order)
        if step:
            steps.append(step)
            target = result
    if plan.decompose:  # see TilePlan.decompose
        steps.append(_DECOMPOSE_STEP.substitute(target=target))
        target = "%d"
    if plan.vector_sizes is not None:
        sizes = f" vector_sizes [{_ints(plan.vector_sizes)}]" if plan.vector_sizes else ""
        attrs = " {create_named_contraction}" if plan.named_contraction else ""
        steps.append(_VECTORIZE_STEP.substitute(target=target, sizes=sizes, attrs=attrs))
    return "\n".join(steps)


@dataclasses.dataclass
class VectorPlan:
    """What ``plan_vectorization`` decided: the transform script, the ops it tagged, and the
    bonds (producer, consumer) of ops tiled together (a convolution or data-tiled product, and
    their accumulators' initializers, computed in the tiles of their elementwise consumer), which
    outlining must not separate."""

    script: str
    tagged: list[ir.Operation]
    bonds: list[tuple[ir.Operation, ir.Operation]]


def fusion_bonds(fused: dict[ir.Operation, EpiloguePlan], absorbed: set[ir.Operation]) -> list[tuple[ir.Operation, ir.Operation]]:
    """(absorbed op, consumer) for every op a fused plan computes in its consumer's tiles: the
    consumer's absorbed producers, followed through their operands (the convolution, its
    initializer; the unpack, the packed product and its initializer)."""
    bonds: list[tuple[ir.Operation, ir.Operation]] = []
    for consumer in fused:
        stack, seen = [consumer], set()
        while stack:
            for v in stack.pop().operands:
                owner = v.owner
                if isinstance(owner, ir.Block):
                    continue
                producer = owner.operation
                if producer in absorbed and producer not in seen:
                    seen.add(producer)
                    bonds.append((producer, consumer))
                    stack.append(producer)
    return bonds


def vector_transform_script(
    module: ir.Module, options: CpuPipelineOptions | None = None
) -> tuple[str, list[ir.Operation]]:
    """Tag each linalg op of ``module`` with the id of its plan's group and return
    (transform script, tagged ops): ``plan_vectorization`` without the bonds."""
    plan = plan_vectorization(module, options)
    return plan.script, plan.tagged


def plan_vectorization(module: ir.Module, options: CpuPipelineOptions | None = None) -> VectorPlan:
    """Tag each linalg op of ``module`` with the id of its plan's group; return the transform
    script, the tagged ops and the fusion bonds (``VectorPlan``).

    Ops with equal plans share a group: one match per group, then per op (``transform.foreach``)
    a ``failures(suppress)`` sequence that tiles with ``scf.for`` (``scf.forall`` for threaded
    outer tiles) and vectorizes with explicit vector sizes. A silenceable failure (the op
    cannot be vectorized) leaves that op tiled but scalar and does not stop the others.
    """
    opts = options or CpuPipelineOptions()
    ops = _structured_ops(module)
    i64 = ir.IntegerType.get_signless(64, module.context)
    groups: dict[TilePlan | EpiloguePlan, int] = {}
    tagged: list[ir.Operation] = []
    # Convolutions whose elementwise consumer is computed in their tiles (epilogue.py): the
    # consumer carries the fused plan, the convolution and its initializer none of their own.
    own = {op: plan_tiles(op, opts) for op in ops}  # each op's plan, computed once
    fused, absorbed = plan_epilogues(ops, own.__getitem__) if opts.fuse_epilogues else ({}, set())
    for op in ops:
        if op in absorbed:
            continue
        plan: TilePlan | EpiloguePlan | None = fused.get(op) or own[op]
        if plan is None:
            continue
        ident = groups.setdefault(plan, len(groups))
        op.attributes[_TAG] = ir.IntegerAttr.get(i64, ident)
        tagged.append(op)
    parts = [
        _GROUP_TEMPLATE.substitute(
            id=ident, tag=_TAG, steps=epilogue_steps(plan) if isinstance(plan, EpiloguePlan) else _plan_steps(plan)
        )
        for plan, ident in groups.items()
    ]
    script = _SCRIPT_TEMPLATE.substitute(groups="\n".join(parts), mask_lowering=_MASK_LOWERING)
    return VectorPlan(script, tagged, fusion_bonds(fused, absorbed))


def _apply_transform_script(module: ir.Module, script: str, what: str, tag: str) -> None:
    """Run a transform-dialect script's `@__transform_main` on `module`, turning its diagnostics
    into a CpuPipelineError naming `what`, and remove the `tag` attributes that targeted ops."""
    from mlir.dialects.transform import interpreter

    ctx = module.context
    diagnostics: list[str] = []

    def handler(d: ir.Diagnostic) -> bool:
        diagnostics.append(f"{d.location}: {d.message}")
        return True

    h = ctx.attach_diagnostic_handler(handler)
    try:
        with ctx:
            transform_module = ir.Module.parse(script)
            entry = transform_module.body.operations[0]
            interpreter.apply_named_sequence(module.operation, entry, transform_module)
    except ir.MLIRError as e:
        detail = "\n".join(diagnostics) or str(e)
        raise CpuPipelineError(f"CPU pipeline: {what} failed:\n{detail}") from None
    finally:
        h.detach()
        _strip_tags(module, tag)


def _strip_tags(module: ir.Module, tag: str = _TAG) -> None:
    def visit(op: ir.Operation) -> ir.WalkResult:
        if tag in op.attributes:
            del op.attributes[tag]
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


_SPLIT_TAG = "onnxc.split_id"

#: One reduction split (`split_long_reductions`): the op tagged `id` split in `factor` partial sums.
_SPLIT_STEP = string.Template(
    """transform.sequence %root : !transform.any_op failures(suppress) {
^bb0(%r: !transform.any_op):
  %op = transform.structured.match attributes{$tag = $id : i64} in %r : (!transform.any_op) -> !transform.any_op
  %s:4 = transform.structured.split_reduction %op { split_factor = $factor, insert_split_dimension = 0 }
    : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
  transform.yield
}"""
)


def split_reduction_factor(op: ir.Operation, options: CpuPipelineOptions | None = None) -> int:
    """How many partial sums a long floating-point contraction is split into (0: no split).

    Only contractions with one static reduction loop of a float type qualify (integer sums are
    exact, and ``transform.structured.split_reduction`` handles one reduction dim and needs a
    factor dividing it). The factor is the smallest divisor ``f`` of K with
    ``K / f <= max_sequential_reduction``, lowered to the largest divisor that keeps
    ``f * output elements <= max_partial_elements``; a factor below 2 means no split. Shapes
    whose register tiles would be partial (masked) are not split (see below).
    """
    opts = options or CpuPipelineOptions()
    if opts.max_sequential_reduction <= 0:
        return 0
    try:
        maps = [ir.AffineMapAttr(a).value for a in linalg.get_indexing_maps(op.opview)]
        if not maps or not linalg.isa_contraction_op(op.opview):
            return 0
    except Exception:  # not a structured op
        return 0
    if len(op.results) != 1 or op.name in PACKED_OPS:
        return 0  # packed contractions split K themselves (data_tiling.py)
    out_type = op.results[0].type
    if not isinstance(out_type, ir.RankedTensorType) or not isinstance(
        out_type.element_type, ir.FloatType
    ):
        return 0
    num_inits = _num_inits(op)
    iters = _iterators(op, maps, num_inits)
    reductions = [d for d, it in enumerate(iters) if it == "reduction"]
    if len(reductions) != 1:
        return 0
    ranges = _loop_ranges(op, maps)
    k = ranges[reductions[0]]
    if k is None or k <= opts.max_sequential_reduction or not out_type.has_static_shape:
        return 0
    # Only where every register tile divides its loop: the split op is a linalg.generic, and
    # a partial (masked) tile of it vectorizes to a per-lane scalar reduction (8x4096x1000 ran
    # 17x slower split), where the masked named matmul keeps its vector.contract.
    plan = plan_tiles(op, opts)
    if plan is None or plan.vector_sizes is None:
        return 0
    for extent, tile in zip(ranges, plan.tile_sizes):
        if tile and (extent is None or extent % tile):
            return 0
    out_elems = 1
    for dim in out_type.shape:
        out_elems *= dim
    # The f partial sums are added sequentially too, so f is capped like the chunk length
    # (error grows with K/f + f): a prime K gets no split.
    divisors = [f for f in range(2, min(k - 1, opts.max_sequential_reduction) + 1) if k % f == 0]
    fits = [f for f in divisors if f * out_elems <= opts.max_partial_elements]
    if not fits:
        return 0
    wanted = [f for f in fits if k // f <= opts.max_sequential_reduction]
    return wanted[0] if wanted else fits[-1]


def split_long_reductions(module: ir.Module, options: CpuPipelineOptions | None = None) -> int:
    """Split long float contractions of ``module`` into partial sums; returns how many.

    ``transform.structured.split_reduction`` with ``insert_split_dimension = 0`` rewrites
    ``C += A(m, K) B(K, n)`` as ``P(f, m, n) = sum_k A(m, f, k) B(f, k, n)`` (a batch
    contraction that tiles and vectorizes as before, contiguous in n) and ``C += sum_f P``.
    Each output element then sums ``f`` partial dot products of K/f terms instead of one of K.
    """
    i64 = ir.IntegerType.get_signless(64, module.context)
    parts: list[str] = []
    marked: list[ir.Operation] = []
    for op in _structured_ops(module):
        factor = split_reduction_factor(op, options)
        if factor < 2:
            continue
        ident = len(marked)
        op.attributes[_SPLIT_TAG] = ir.IntegerAttr.get(i64, ident)
        marked.append(op)
        parts.append(_SPLIT_STEP.substitute(tag=_SPLIT_TAG, id=ident, factor=factor))
    if not marked:
        return 0
    script = _SCRIPT_TEMPLATE.substitute(groups="\n".join(parts), mask_lowering="")
    _apply_transform_script(module, script, "reduction splitting", _SPLIT_TAG)
    return len(marked)


def _renumber_buffer_tags(part: ir.Operation) -> None:
    """Number the buffer tags (``PAD_BUFFER_ATTR``, ``ACC_BUFFER_ATTR``) of one outlined part in
    walk order. Why: the tags only keep a function's distinct buffers apart through its CSEs, and
    were numbered over the whole model, so two equal layers printed different numbers and their
    parts did not merge; numbered per part they print alike and stay distinct within the part."""
    counts = {PAD_BUFFER_ATTR: 0, ACC_BUFFER_ATTR: 0}

    def visit(op: ir.Operation) -> ir.WalkResult:
        if PAD_BUFFER_ATTR in op.attributes:
            op.attributes[PAD_BUFFER_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64, op.context), counts[PAD_BUFFER_ATTR])
            counts[PAD_BUFFER_ATTR] += 1
        if ACC_BUFFER_ATTR in op.attributes:
            op.attributes[ACC_BUFFER_ATTR] = ir.StringAttr.get(f"acc{counts[ACC_BUFFER_ATTR]}", op.context)
            counts[ACC_BUFFER_ATTR] += 1
        return ir.WalkResult.ADVANCE

    part.walk(visit)


def tile_and_vectorize(module: ir.Module, options: CpuPipelineOptions | None = None, outline_max_ops: int | None = None,
                       pad_bonds: Sequence[tuple[ir.Operation, ir.Operation]] = ()) -> ir.Module:
    """Tile and vectorize every linalg op of ``module`` (the Python step of the vector stage).

    A long function with fused convolutions is first outlined into parts (``outline.py``:
    ``outline_max_ops`` region ops each; None: the default sizes; 0: not outlined), equal parts
    (repeated blocks) merged, a convolution never cut from the consumer it is tiled with
    (``fusion_bonds``), nor a padding buffer's border fills from the insert of the data they pad
    (``pad_bonds``, from ``hoist_pad_fills``). Why before tiling: `transform.structured.fuse_into_containing_op` prints
    its producer and container into a diagnostic it drops unless the fusion fails, which
    numbers and verifies the whole enclosing function: once per fusion, quadratic in a model's
    length (1.4 of ResNet-50's 2.0 s of tiling); and each merged block is tiled, vectorized and
    bufferized once."""
    from .outline import outline_functions
    from .row_fusion import fuse_row_chains

    # Softmax / normalization chains one row at a time (row_fusion.py), before the per-op plans.
    opts = options or CpuPipelineOptions()
    fuse_row_chains(module, opts.threads, min_threaded_elements(opts))
    split_long_reductions(module, options)
    align_unpack_epilogues(module)  # a data-tiled product's epilogue on the unpack's shape (epilogue.py)
    plan = plan_vectorization(module, options)
    if not plan.tagged:
        return module
    # Only where there are fusions (the cost above); elsewhere the parts are cut after tiling
    # (`bufferize`), where the loop nests of repeated layers align better: BERT-base, cut here,
    # kept its first and last layers apart from the others (one op of the first layer its own,
    # the last followed by the pooler) and gave LLVM 30% more code.
    if outline_max_ops != 0 and plan.bonds:
        outline_functions(module, outline_max_ops, dedupe=True, bonds=[*plan.bonds, *pad_bonds], normalize=_renumber_buffer_tags)
    _apply_transform_script(module, plan.script, "tiling/vectorization", _TAG)
    forward_masked_tiles(module)  # a fused unpack's tile goes to its epilogue in registers (epilogue.py)
    peel_masked_tiles(module, (options or CpuPipelineOptions()).cpu)  # whole tiles without masks, the partial one peeled (peel_tiles.py)
    return module


# --- stages -----------------------------------------------------------------------------------


def _computes(op: ir.Operation) -> bool:
    """Whether a linalg op's body does arithmetic (more than yield an input: a copy, broadcast or
    transpose costs nothing to recompute)."""
    if not op.regions or not len(op.regions[0].blocks):
        return not op.name.endswith(("transpose", "broadcast", "copy", "fill"))
    return any(o.operation.name != "linalg.yield" for o in op.regions[0].blocks[0].operations)


def _producer_through_reshapes(value: ir.Value) -> ir.Operation | None:
    """The op that computes `value`, looking through `tensor.collapse_shape`/`expand_shape`
    (the fusion pass propagates reshapes and fuses across them); None for a block argument."""
    while True:
        owner = value.owner
        if isinstance(owner, ir.Block):
            return None
        op = owner.operation
        if op.name not in ("tensor.collapse_shape", "tensor.expand_shape"):
            return op
        value = op.operands[0]


def insulate_contractions(module: ir.Module) -> int:
    """Keep ``linalg-fuse-elementwise-ops`` from fusing computing producers into contractions;
    returns how many operands were insulated.

    Why: the fusion pass fuses an elementwise producer into any consumer, a contraction
    included, and the fused contraction then recomputes the producer once per output column
    inside its reduction loop (and its body is no longer a plain multiply-add, so it is no longer
    vectorized as a contraction). In attention, Softmax's final scaling fused into the
    probabilities x V product made that product 25x slower (8.4 ms against 0.33 ms for
    12x128x128 @ 128x64). Packed contractions read a `linalg.pack` and were safe already; this
    covers the others (run-time B operands, integer and f16 products, skinny shapes).
    How: each such operand goes through a ``tensor.cast`` to the all-dynamic type of its rank
    and back: the fusion pass does not look through casts, and the `canonicalize` right after it
    folds the pair away, so no cast survives the stage.
    """
    def is_contraction(op: ir.Operation) -> bool:
        try:
            return bool(linalg.isa_contraction_op(op.opview))
        except (TypeError, ValueError):  # not a structured op
            return False

    contractions = [op for op in _structured_ops(module) if is_contraction(op)]
    from mlir.dialects import tensor

    count = 0
    with module.context, ir.Location.unknown(module.context):
        for op in contractions:
            for i in range(len(list(op.opview.inputs))):
                value = op.operands[i]
                producer = _producer_through_reshapes(value)
                if producer is None or not producer.name.startswith("linalg."):
                    continue
                if not _computes(producer) or not isinstance(value.type, ir.RankedTensorType):
                    continue
                ttype = ir.RankedTensorType(value.type)
                dynamic = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size()] * ttype.rank, ttype.element_type)
                with ir.InsertionPoint(op):
                    loose = tensor.CastOp(dynamic, value).result
                    op.operands[i] = tensor.CastOp(ttype, loose).result
                count += 1
    return count


def lower_to_vector(module: ir.Module, options: CpuPipelineOptions | None = None, outline_max_ops: int | None = None) -> ir.Module:
    """Stage 1: linalg on tensors -> tiled ``scf.for`` loops of ``vector`` ops on tensors.
    A long function is outlined into parts of ``outline_max_ops`` region ops first (None: the
    default sizes, 0: not outlined; see ``tile_and_vectorize``)."""
    opts = options or CpuPipelineOptions()
    _validate_input(module)
    # Contractions are packed before elementwise fusion: `linalg-fuse-elementwise-ops` also fuses
    # an elementwise producer into a named matmul (generalizing it), so a Gelu feeding an FFN's
    # second MatMul was recomputed inside its reduction loop, once per output column (BERT-base
    # ran 20x slower than onnxruntime). A packed contraction reads its `linalg.pack`, which the
    # fusion leaves alone.
    _run(module, VECTOR_PRE_PIPELINE, "vector-pre")
    # Weights made by a fill (ConstantOfShape of an overridable shape) become constants first,
    # so they are packed at compile time like initializers.
    fills_to_constants(module)
    if opts.vectorize and opts.data_tiling:
        # Strided 1x1 convolutions read a compact copy of their pixels; 1x1 convolutions the
        # packed matmul runs faster become matmuls, packed with the rest (conv_filters.py).
        subsample_strided_pointwise(module)
        pointwise_as_matmul(module, opts.cpu, opts.threads)
        pack_contractions(module, opts.cpu, opts.max_sequential_reduction, opts.max_partial_elements)
        # Convolutions with constant filters: output channels padded to whole vectors, filters
        # too large for L2 packed per channel tile (conv_filters.py).
        pad_conv_channels(module, opts.cpu, opts.threads)
        pack_conv_filters(module, opts.cpu, opts.threads)
    if opts.fuse_elementwise:
        insulate_contractions(module)
    _run(module, vector_pre_pipeline(opts), "vector-fuse")
    # Polynomial exp/tanh/erf/log/pow instead of one libm call per element (issue 8, item 5):
    # rewritten before tiling so the vectorizer sees plain arith + math.fma bodies.
    from onnxc.transforms.math_approximation import approximate_math

    approximate_math(module.operation)
    if not opts.vectorize:
        return module
    # Padded inputs of convolutions/poolings written in place by their producer (pad_in_place.py).
    pad_bonds = hoist_pad_fills(module)
    tile_and_vectorize(module, opts, outline_max_ops, pad_bonds)
    # Masked tail reductions lower with a wrong neutral value for max in LLVM 22.1.8 (ReduceMax
    # of an all-negative row of 17 gave -1.4e-45): select the identity, reduce unmasked.
    from onnxc.targets.cpu.masked_reductions import unmask_reductions

    unmask_reductions(module)
    # Float sums across a vector in any order (one shuffle tree, not a chain of scalar adds).
    from onnxc.targets.cpu.reassociate_reductions import reassociate_reductions

    reassociate_reductions(module)
    _run(module, VECTOR_POST_PIPELINE, "vector-post")
    # The padding buffers' numbers (and the packed accumulators' names) kept them apart through
    # the CSEs above; gone now, they would make repeated layers differ and stop outline.py from
    # merging their parts.
    _strip_tags(module, PAD_BUFFER_ATTR)
    _strip_tags(module, ACC_BUFFER_ATTR)
    return module


def lower_to_loops(module: ir.Module) -> ir.Module:
    """Debug alternative to stage 1: no vectorization (linalg becomes scalar loops later)."""
    return lower_to_vector(module, CpuPipelineOptions(vectorize=False))


def _mark_args_readonly(module: ir.Module) -> None:
    """Public function arguments are the caller's arrays: bufferization must not write them."""
    false = ir.BoolAttr.get(False, module.context)
    for f in _functions(module):
        if "function_type" not in f.attributes:
            continue
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        if not len(f.regions[0].blocks):
            continue  # declaration
        if "arg_attrs" in f.attributes:
            old = list(ir.ArrayAttr(f.attributes["arg_attrs"]))
        else:
            old = [ir.DictAttr.get({}, module.context)] * len(ftype.inputs)
        new = []
        for t, d in zip(ftype.inputs, old):
            entries = {na.name: na.attr for na in ir.DictAttr(d)}
            if isinstance(t, ir.RankedTensorType):
                entries["bufferization.writable"] = false
            new.append(ir.DictAttr.get(entries, module.context))
        f.attributes["arg_attrs"] = ir.ArrayAttr.get(new, module.context)


#: Allocate a per-tile scratch buffer once per sequential loop nest (`hoist_tile_buffers.py`)
#: instead of once per tile. A module flag for one-process A/Bs.
HOIST_TILE_BUFFERS: bool = True

#: Forward whole-tile writes to the reads after them and drop the writes that are then dead
#: (`tile_forwarding.py`). A module flag for one-process A/Bs.
FORWARD_TILE_WRITES: bool = True


def bufferize(module: ir.Module) -> ir.Module:
    """Stage 2: one-shot bufferization + deallocation; results come back caller-owned."""
    # Long functions in parts (bufferization is quadratic in a function's length), repeated
    # layers in one part each, weights passed in: equal parts merge (outline.py), so LLVM
    # compiles one layer of a twelve-layer model instead of twelve.
    from .outline import outline_functions

    _mark_args_readonly(module)
    outline_functions(module, dedupe=True)
    _run(module, HOIST_PIPELINE, "hoist")
    _run(module, BUFFERIZE_PIPELINE, "bufferize")
    if HOIST_TILE_BUFFERS:
        from .hoist_tile_buffers import hoist_tile_buffers

        hoist_tile_buffers(module)
    if FORWARD_TILE_WRITES:
        from .tile_forwarding import forward_tile_writes

        forward_tile_writes(module)
    return module


def _mark_c_interface(module: ir.Module) -> None:
    unit = ir.UnitAttr.get(module.context)
    for f in _functions(module):
        vis = f.attributes["sym_visibility"] if "sym_visibility" in f.attributes else None
        if vis is not None and ir.StringAttr(vis).value == "private":
            continue
        if len(f.regions[0].blocks):
            f.attributes["llvm.emit_c_interface"] = unit


def _is_identity_layout(layout: ir.Attribute) -> bool:
    if not isinstance(layout, ir.AffineMapAttr):
        return False
    amap = layout.value
    return amap == ir.AffineMap.get_identity(amap.n_dims, amap.context)


#: Elements one vector transfer of a strided copy moves at most (`_vector_copy`): a row longer
#: than this is copied in chunks of it. 64 f32 = four 512-bit registers, eight 256-bit ones.
COPY_CHUNK_ELEMENTS: int = 64


def _vector_copy(src: ir.Value, dst: ir.Value) -> bool:
    """Emit a strided copy from ``src`` to ``dst`` (static memrefs of one shape, unit innermost
    stride) as loops over the outer dims around 1-D ``vector.transfer_read``/``transfer_write``
    pairs, ``COPY_CHUNK_ELEMENTS`` of a row at a time, at the insertion point; False (nothing
    emitted) for any other copy."""
    from mlir.dialects import arith, scf, vector

    types = [ir.MemRefType(v.type) for v in (src, dst)]
    if not all(t.has_static_shape for t in types) or types[0].shape != types[1].shape or not types[0].rank:
        return False
    et = types[0].element_type
    width = ir.FloatType(et).width if isinstance(et, ir.FloatType) else ir.IntegerType(et).width if isinstance(et, ir.IntegerType) else 0
    if width < 8:  # i1 buffers are widened to i8 afterwards, through loads and stores only
        return False
    if any(t.get_strides_and_offset()[0][-1] != 1 for t in types):
        return False  # the innermost dim is not contiguous on both sides: no row to move as a vector
    shape = list(types[0].shape)
    rank, row = len(shape), shape[-1]
    chunk = min(row, COPY_CHUNK_ELEMENTS)
    index = ir.IndexType.get()
    innermost = ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(rank - 1)]))
    in_bounds = ir.ArrayAttr.get([ir.BoolAttr.get(True)])

    def const(v: int) -> ir.Value:
        return arith.ConstantOp(index, v).result

    def move(indices: list[ir.Value], n: int) -> None:
        vt = ir.VectorType.get([n], et)
        pad = arith.ConstantOp(et, ir.FloatAttr.get(et, 0.0) if isinstance(et, ir.FloatType) else ir.IntegerAttr.get(et, 0)).result
        v = vector.transfer_read(vt, src, indices, innermost, pad, in_bounds)
        vector.transfer_write(None, v, dst, indices, innermost, in_bounds)

    def loop_to(extent: int) -> tuple[ir.Value, ir.InsertionPoint]:
        """An empty `scf.for` 0..extent at the current point: its induction variable and body."""
        loop = scf.ForOp(const(0), const(extent), const(1))
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([])
        return loop.induction_variable, ir.InsertionPoint.at_block_terminator(loop.body)

    ivs: list[ir.Value] = []
    ip = ir.InsertionPoint.current
    for extent in shape[:-1]:  # one loop per outer dim, the rows inside the innermost
        with ip:
            iv, ip = loop_to(extent)
        ivs.append(iv)
    whole, rest = divmod(row, chunk)
    with ip:
        if whole <= 4:  # a short row: its transfers unrolled
            for i in range(whole):
                move(ivs + [const(i * chunk)], chunk)
        else:
            iv, body = loop_to(whole)
            with body:
                move(ivs + [arith.muli(iv, const(chunk))], chunk)
        if rest:
            move(ivs + [const(whole * chunk)], rest)
    return True


def lower_strided_copies(module: ir.Module) -> None:
    """Rewrite each ``memref.copy`` between non-identity layouts into vector loops
    (`_vector_copy`), or, where that does not apply (dynamic shapes, a strided innermost dim,
    i1), into ``linalg.copy``, which `convert-linalg-to-loops` makes scalar loops.

    Why: `finalize-memref-to-llvm` turns such copies into calls to ``memrefCopy`` from
    ``libmlir_c_runner_utils``; loops instead keep JIT code and AOT libraries free of that
    runtime dependency. Copies between identity layouts stay (they become ``memcpy``).
    Why vectors: the scalar loops of a copy into a padded buffer or a slice of a concatenation
    (a row of 24 to 272 channels) were fully unrolled by LLVM but not vectorized (it cannot
    prove the two buffers apart), one 4-byte load and store per element: in ShuffleNet at two
    threads they were the largest part of the code that runs on one thread.
    """
    copies: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "memref.copy":
            copies.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in copies:
        src, dst = op.operands[0], op.operands[1]
        layouts = [ir.MemRefType(v.type).layout for v in (src, dst)]
        if all(_is_identity_layout(l) for l in layouts):
            continue
        with ir.InsertionPoint(op), op.location:
            if VECTOR_COPIES and _vector_copy(src, dst):
                op.erase()
                continue
            linalg.copy(src, outs=[dst])
        op.erase()


#: Strided copies as vector loops (`_vector_copy`); a module flag for one-process A/Bs.
VECTOR_COPIES: bool = True


def _i8_like(t: ir.Type) -> ir.Type | None:
    """memref<...xi1> -> memref<...xi8> (same shape, layout, memory space); else None."""
    if not isinstance(t, ir.MemRefType):
        return None
    mt = ir.MemRefType(t)
    et = mt.element_type
    if not (isinstance(et, ir.IntegerType) and ir.IntegerType(et).width == 1):
        return None
    i8 = ir.IntegerType.get_signless(8, t.context)
    return ir.MemRefType.get(
        mt.shape, i8, mt.layout, mt.memory_space, loc=ir.Location.unknown(t.context)
    )


def _widen_i1_globals(globals_: list[ir.Operation], i8: ir.Type) -> None:
    """Retype i1 ``memref.global``s to i8, converting their initial values."""
    import numpy as np

    for g in globals_:
        gt = ir.TypeAttr(g.attributes["type"]).value
        nt = _i8_like(gt)
        if nt is None:
            continue
        shape = ir.MemRefType(nt).shape
        g.attributes["type"] = ir.TypeAttr.get(nt)
        init = g.attributes["initial_value"] if "initial_value" in g.attributes else None
        if init is None or isinstance(init, ir.UnitAttr):
            continue  # no initializer (`uninitialized` is a unit attribute)
        # Every elements kind a bool constant arrives in: dense (bit-packed or splat) and the
        # `dense_resource` blobs the importer and constant folding make for large tensors
        # (attention masks); a kind left i1 here fails verification as a raw MLIR error.
        from onnxc.importers.tensors import attribute_to_array

        try:
            bits, _ = attribute_to_array(init)
        except OnnxcError as exc:
            name = ir.StringAttr(g.attributes["sym_name"]).value
            raise CpuPipelineError(f"bool constant @{name}: cannot read its elements ({exc})") from None
        g.attributes["initial_value"] = ir.DenseElementsAttr.get(
            np.asarray(bits).astype(np.int8).reshape(shape), type=i8, shape=shape
        )


def _widen_i1_memrefs(module: ir.Module) -> None:
    """Store i1 buffers as i8: retype every ``memref<...xi1>`` to ``memref<...xi8>``.

    Why: in these LLVM 22 wheels, lowering ``memref.load``/``memref.store`` of ``i1`` hits an
    assertion (``integralElementType.getWidth() >= 8`` in MemRefToLLVM) that kills the process.
    Bool tensors are one byte per element in numpy and in MLIR's descriptor ABI anyway, so the
    descriptors do not change; loads get an ``arith.trunci`` and stores an ``arith.extui``.
    Runs after linalg->loops; vectorized ops never touch i1 buffers (see ``plan_tiles``).
    """
    i1 = ir.IntegerType.get_signless(1, module.context)
    i8 = ir.IntegerType.get_signless(8, module.context)
    values: list[ir.Value] = []
    loads: list[ir.Operation] = []
    stores: list[ir.Operation] = []
    globals_: list[ir.Operation] = []
    funcs: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "memref.global":
            globals_.append(op)
        elif op.name == "func.func":
            funcs.append(op)
        for r in op.results:
            if _i8_like(r.type) is not None:
                values.append(r)
        for region in op.regions:
            for block in region.blocks:
                for a in block.arguments:
                    if _i8_like(a.type) is not None:
                        values.append(a)
        if op.name == "memref.load" and _i8_like(op.operands[0].type) is not None:
            loads.append(op)
        if op.name == "memref.store" and _i8_like(op.operands[1].type) is not None:
            stores.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if not (values or globals_):
        return
    for op in loads:
        # %v = memref.load %m[...] : i1  ->  %w = memref.load (i8); %v = arith.trunci %w
        old = op.results[0]
        with ir.InsertionPoint(op), op.location:
            operands = list(op.operands)
            new_load = ir.Operation.create(
                "memref.load", results=[i8], operands=operands, attributes={
                    name: op.attributes[name] for name in op.attributes
                },
            )
        with ir.InsertionPoint.after(new_load), op.location:
            trunc = ir.Operation.create("arith.trunci", results=[i1], operands=[new_load.result])
        old.replace_all_uses_with(trunc.result)
        op.erase()
    for op in stores:
        with ir.InsertionPoint(op), op.location:
            ext = ir.Operation.create("arith.extui", results=[i8], operands=[op.operands[0]])
        op.operands[0] = ext.result
    for v in values:
        v.set_type(_i8_like(v.type))
    with ir.Location.unknown(module.context):
        _widen_i1_globals(globals_, i8)
    for f in funcs:
        if not len(f.regions[0].blocks):
            continue
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        ins = [_i8_like(t) or t for t in ftype.inputs]
        outs = [_i8_like(t) or t for t in ftype.results]
        f.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(ins, outs, context=module.context), context=module.context
        )


#: Vector contractions -> FMA outer products and transposes -> shuffles, on memrefs (a checked-in
#: template, no options).
#: `rank_reducing_subview_patterns` first: the packed mmt4d's operand tiles are unit-dim
#: subviews, and without rank reduction the B-row loads become scalar inserts; then hoisting
#: keeps the accumulator tile in registers across the k loop. Transposes (of run-time packing and
#: layout changes) become shuffles: convert-vector-to-llvm's default extracts and inserts every
#: element, 512 ops per 16x16 tile (BERT-base: 48k of its 150k LLVM-dialect ops). "shuffle_16x16"
#: lowers a 16x16 f32 transpose to the 64 unpack/lane shuffles of a 512-bit register transpose and
#: every other 2-D transpose to one `vector.shuffle` (as "shuffle_1d", which LLVM turned into
#: slower permutes for 16x16): packing A of ShuffleNet's grouped 1x1 convolution (16x16 tiles)
#: 35 -> 16 us, BERT-2L 2% and ShuffleNet 5% faster, ViT and MobileNetV2 unchanged (A/B in one
#: process, 1 thread, AVX-512). On AVX2 LLVM splits the 512-bit shuffles into 256-bit ones.
#: Broadcast lowering is left to convert-vector-to-llvm (its transform patterns crashed on
#: packed IR).
_CONTRACTION_LOWERING: str = """module attributes {transform.with_named_sequence} {
transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
  %funcs = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
  transform.apply_patterns to %funcs {
    transform.apply_patterns.vector.rank_reducing_subview_patterns
    transform.apply_patterns.canonicalization
  } : !transform.any_op
  %hoisted = transform.structured.hoist_redundant_vector_transfers %funcs : (!transform.any_op) -> !transform.any_op
  %again = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
  transform.apply_patterns to %again {
    transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
    transform.apply_patterns.vector.lower_outerproduct
    transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_16x16"
  } : !transform.any_op
  transform.yield
}
}"""


#: Lower a contraction with a single dim > 1 (the 1 x n0 tile of a matrix-vector product) as one
#: FMA (`contracts_to_outer_products`); a module flag for one-process A/Bs.
AXPY_CONTRACTS: bool = True


def contracts_to_outer_products(module: ir.Module) -> int:
    """Rewrite each unmasked ``vector.contract`` that is an outer product once its unit dims are
    dropped (all reduction dims of size 1; one parallel dim > 1 read by the LHS only, one by the
    RHS only) as ``shape_cast``s around one ``vector.outerproduct``, and each whose only dim > 1
    is a parallel dim of one operand (a 1 x n0 tile of a matrix-vector product) as one
    ``vector.fma`` of that operand and the other's broadcast scalar; returns how many.

    Why: the packed mmt4d's register tile vectorizes to a 6-D contract
    ``vector<1x1x16x1> x vector<1x1x16x1> into vector<1x1x16x16>`` (the unit m1/n1/k1/k0
    dims of the tile). The "outerproduct" contraction lowering does not apply to that form (no
    upstream pattern in 22.1.8 folds a contract's unit dims), so it fell back to one multiply
    and one horizontal reduction per output element: 256 reductions and 800 extracts/inserts per
    16x16 tile, which LLVM's SLP vectorizer had to fuse back into FMAs. BERT-base reached the LLVM
    dialect with 300k ops, most of its 68 s compile. As an outer product the tile lowers to 16
    broadcast FMAs (``lower_outerproduct``).

    The skinny tile of a matrix-vector product (m0 = 1: classifier heads, decode steps) has a
    single dim > 1 and fell back the same way: the packed 1x2048x1000 GEMV's loop was scalar
    multiplies, blends and separate adds (AVX2 Zen 3, 1 thread: 0.63 ms best, 5.7 GFLOP/s,
    onnxruntime 21). As one FMA per B vector (one-process A/B, same machine): that GEMV 0.70 ->
    0.33 ms, GPT-2 decode step (2 layers) 18.3 -> 10.9 ms, ResNet-50 (its classifier) unchanged.
    """
    from mlir.dialects import vector

    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "vector.contract" and op.parent is not None and op.parent.name != "vector.mask":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    add = ir.Attribute.parse("#vector.kind<add>", module.context)
    reduction = ir.Attribute.parse("#vector.iterator_type<reduction>", module.context)
    count = 0
    for op in found:
        lhs, rhs, acc = op.operands[0], op.operands[1], op.operands[2]
        types = [v.type for v in (lhs, rhs, acc)]
        if not all(isinstance(t, ir.VectorType) for t in types):
            continue  # a scalar accumulator (a dot product)
        lt, rt, at = (ir.VectorType(t) for t in types)
        if not (lt.element_type == rt.element_type == at.element_type):
            continue  # mixed precision: leave it to the upstream lowering
        if op.attributes["kind"] != add:
            continue
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        iters = ["reduction" if a == reduction else "parallel" for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        sizes: dict[int, int] = {}
        for m, t in zip(maps, (lt, rt, at)):
            for pos, expr in enumerate(m.results):
                sizes[ir.AffineDimExpr(expr).position] = t.shape[pos]
        big = [d for d, n in sizes.items() if n > 1]
        if any(iters[d] == "reduction" for d in big) or len(big) not in (1, 2):
            continue
        dims_of = [{ir.AffineDimExpr(e).position for e in m.results} for m in maps]
        if len(big) == 1:
            if not AXPY_CONTRACTS:
                continue
            # One row of A (or one column of B): a scalar of one operand times a vector of the
            # other, an AXPY (see the docstring).
            d = big[0]
            if d not in dims_of[2] or (d in dims_of[0]) == (d in dims_of[1]):
                continue
            vec, scal = (lhs, rhs) if d in dims_of[0] else (rhs, lhs)
            elem = at.element_type
            with ir.InsertionPoint(op), op.location:
                flat = ir.VectorType.get([sizes[d]], elem)
                v = vector.ShapeCastOp(flat, vec).result
                x = vector.ExtractOp(vector.ShapeCastOp(ir.VectorType.get([1], elem), scal).result, [], [0]).result
                c = vector.ShapeCastOp(flat, acc).result
                out = vector.ShapeCastOp(at, vector.FMAOp(v, vector.BroadcastOp(flat, x).result, c).result).result
            op.results[0].replace_all_uses_with(out)
            op.erase()
            count += 1
            continue
        m_dims = [d for d in big if d in dims_of[0] and d not in dims_of[1]]
        n_dims = [d for d in big if d in dims_of[1] and d not in dims_of[0]]
        if len(m_dims) != 1 or len(n_dims) != 1 or not {m_dims[0], n_dims[0]} <= dims_of[2]:
            continue
        m_d, n_d = m_dims[0], n_dims[0]
        acc_order = [ir.AffineDimExpr(e).position for e in maps[2].results if sizes[ir.AffineDimExpr(e).position] > 1]
        elem = at.element_type
        with ir.InsertionPoint(op), op.location:
            a = vector.ShapeCastOp(ir.VectorType.get([sizes[m_d]], elem), lhs).result
            b = vector.ShapeCastOp(ir.VectorType.get([sizes[n_d]], elem), rhs).result
            first, second = (a, b) if acc_order == [m_d, n_d] else (b, a)
            shape = [sizes[acc_order[0]], sizes[acc_order[1]]]
            c = vector.ShapeCastOp(ir.VectorType.get(shape, elem), acc).result
            prod = vector.OuterProductOp(ir.VectorType.get(shape, elem), first, second, acc=c).result
            out = vector.ShapeCastOp(at, prod).result
        op.results[0].replace_all_uses_with(out)
        op.erase()
        count += 1
    return count


def _has_op(module: ir.Module, name: str) -> bool:
    found = False

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal found
        if op.name == name:
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def runtime_libraries(options: CpuPipelineOptions | None = None) -> list[str]:
    """Shared libraries code compiled with ``options`` calls into: the thread runtime when it
    may run threads (``threads > 1``, see ``threads.py``); what the JIT/AOT must load or link."""
    opts = options or CpuPipelineOptions()
    return runtime_libraries_for(opts.thread_runtime, opts.threads)


#: Unroll short non-contiguous 1-D transfers into scalar loads and stores
#: (`strided_transfers.py`); a module flag for one-process A/Bs.
UNROLL_STRIDED_TRANSFERS: bool = True


def lower_to_llvm(module: ir.Module, options: CpuPipelineOptions | None = None) -> ir.Module:
    """Stage 3: memref/vector/scf/math/arith/cf/func -> LLVM dialect (C interfaces marked); the
    threaded loops become calls of ``options.thread_runtime`` (``threads.py``)."""
    opts = options or CpuPipelineOptions()
    if _has_op(module, "vector.contract") or _has_op(module, "vector.transpose"):
        with module.context:
            contracts_to_outer_products(module)
        _apply_transform_script(module, _CONTRACTION_LOWERING, "contraction lowering", _TAG)
    if UNROLL_STRIDED_TRANSFERS:
        unroll_strided_transfers(module)
    _mark_c_interface(module)
    lower_strided_copies(module)
    _run(module, LOOPS_ON_MEMREFS_PIPELINE, "linalg-to-loops")
    _widen_i1_memrefs(module)
    try:  # the bindings raise MLIRError rather than return False: keep it an onnxc error
        verified = module.operation.verify()
    except ir.MLIRError as exc:
        raise CpuPipelineError(f"internal error: module does not verify after i1 widening: {exc}") from None
    if not verified:
        raise CpuPipelineError("internal error: module does not verify after i1 widening")
    if _has_op(module, "scf.forall"):
        _run(module, forall_pipeline(opts.thread_runtime, opts.threads), "threads")
    from .runtime_checks import insert_failure_exits, prepare_failure_exits  # the run-time status channel

    prepare_failure_exits(module)  # while loops are still scf: exits after checks, allocations to test
    _run(module, f"builtin.module({LLVM_PIPELINE_HEAD})", "llvm")
    insert_failure_exits(module)
    _run(module, f"builtin.module({LLVM_PIPELINE_TAIL})", "llvm")
    with module.context:  # else LLVM's code generator aborts on some (split_masked_memory.py)
        split_wide_masked_memory(module, opts.cpu.vector_bits)
    return module


def lower_module(
    module: ir.Module,
    stage: str = "llvm",
    options: CpuPipelineOptions | None = None,
) -> ir.Module:
    """Run the CPU pipeline on ``module`` up to and including ``stage`` (one of ``STAGES``)."""
    if stage not in STAGES:
        raise CpuPipelineError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
    steps: Sequence[tuple[str, Callable[[ir.Module], ir.Module]]] = (
        ("vector", lambda m: lower_to_vector(m, options)),
        ("bufferize", bufferize),
        ("llvm", lambda m: lower_to_llvm(m, options)),
    )
    for name, fn in steps:
        fn(module)
        if name == stage:
            break
    return module
