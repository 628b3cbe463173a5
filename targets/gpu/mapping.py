"""The shared GPU mapping: linalg on tensors -> `gpu.launch` -> outlined `gpu.func` kernels.

What: `map_to_gpu(module, device)` rewrites a linalg-on-tensors module (the `linalg` stage of
`onnxc.transforms.named_pipelines`) in place into a host function that allocates buffers and
calls `gpu.launch_func` on kernels in a `gpu.module`. The CUDA (`targets/cuda`) and Vulkan
(`targets/vulkan`) emitters start from its result.

How (the recipe checked on the MLIR 22.1.8 wheels, see GUIDE.md):
1. `linalg-fuse-elementwise-ops`: chains of elementwise ops become one `linalg.generic`, so an
   Add->Relu->Mul chain is one kernel and its intermediates never reach memory.
2. Named ops are generalized (`linalg-generalize-named-ops`) after each op's kind (contraction or
   not) is read, so one planner reads loop extents from indexing maps for every op.
3. One transform script (built with the `mlir.dialects.transform` bindings, no script text): for
   every root op (each linalg op but the `linalg.fill`s that only initialize another op's
   output), `tile_using_forall` with tile sizes mapped to `#gpu.block<z/y/x>`, the fills producing
   its init fused into that forall (`fuse_into_containing_op`), then a second `tile_using_forall`
   with `num_threads` mapped to `#gpu.thread<z/y/x>` and the fill fused into it too. A static
   thread count per workgroup (`num_threads`, not tile sizes) keeps the thread forall's trip
   count static even for the partial tiles at a loop's end, which `map_nested_forall_to_threads`
   requires.
4. One-shot bufferization across function boundaries (identity layouts).
5. A second script: each top-level `scf.forall` -> `map_forall_to_blocks generate_gpu_launch`, then
   `map_nested_forall_to_threads` with the workgroup size read from its thread forall.
6. `gpu-launch-sink-index-computations` (constants stay in the kernel instead of becoming kernel
   arguments) and `gpu-kernel-outlining`.

Work distribution (`plan_kernel`, sizes from `device.GpuDevice`): up to three parallel loops,
the innermost ones with extent > 1, are mapped; the innermost goes to `x` so that neighbouring
threads touch neighbouring elements. Elementwise ops and reductions: one output element per
thread, `workgroup_size` threads per workgroup. Reductions therefore run one thread per output
element with the reduction loop sequential in that thread (coalesced across threads when the
reduced dimension is not the innermost one; a row reduction reads with the row stride) - a
per-workgroup tree reduction (`tile_reduction_using_forall` + workgroup memory) is not done yet.
Contractions (matmul, batch matmul): a `matmul_block_tile` per workgroup and a
`matmul_thread_tile` register tile per thread; convolutions: the generic scheme over their output
loops, the window loops sequential per thread. Shared-memory promotion of operand tiles is not
done yet. Parallel loops beyond the three mapped ones run sequentially in each thread.

What is refused (`GpuMappingError`, naming the op and its location): dynamic shapes, ops
without a parallel loop (a reduction to a scalar), and any non-linalg computation the host
program cannot express (checked by `targets/gpu/host.py`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from mlir import ir
from mlir.dialects import transform
from mlir.dialects.transform import gpu as tgpu
from mlir.dialects.transform import interpreter
from mlir.dialects.transform import structured
from mlir.passmanager import PassManager

from onnxc.errors import OnnxcError

from .device import GpuDevice

__all__ = [
    "BUFFERIZE_PIPELINE",
    "GpuMappingError",
    "KERNEL_LOOPS_PIPELINE",
    "lower_kernels_to_loops",
    "KernelPlan",
    "OUTLINE_PIPELINE",
    "PRE_PIPELINE",
    "map_to_gpu",
    "plan_kernel",
    "run_pipeline",
]


class GpuMappingError(OnnxcError):
    """The module cannot be mapped to GPU kernels (an op the mapping does not handle)."""


#: Tensor-level preparation: elementwise fusion first (it needs generic ops and named ones alike).
PRE_PIPELINE = "builtin.module(linalg-fuse-elementwise-ops,canonicalize,cse)"

#: Bufferization for the GPU: no deallocation pipeline, because the runtime (Vulkan) or the host
#: code owns every buffer; function results are fresh allocations.
BUFFERIZE_PIPELINE = (
    "builtin.module(eliminate-empty-tensors,empty-tensor-to-alloc-tensor,"
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},canonicalize,cse)"
)

#: Kernel bodies to scalar loops over loads/stores, before either emitter's conversion: subviews
#: folded into index arithmetic (`fold-memref-alias-ops`), affine maps into arith.
KERNEL_LOOPS_PIPELINE = (
    "builtin.module(gpu.module(convert-linalg-to-loops,fold-memref-alias-ops,lower-affine,canonicalize,cse))"
)

#: After mapping: keep constants and index math inside kernels, then outline them.
OUTLINE_PIPELINE = "builtin.module(func.func(gpu-launch-sink-index-computations),gpu-kernel-outlining,canonicalize,cse)"

_ROOT_TAG = "onnxc.gpu_root"
_FILL_TAG = "onnxc.gpu_fill"
_KERNEL_TAG = "onnxc.gpu_kernel"
_CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul")


def run_pipeline(module: ir.Module, pipeline: str, what: str, error: type[OnnxcError] = GpuMappingError) -> None:
    """Run a native pipeline, turning a failure and its diagnostics into `error` naming `what`."""
    diagnostics: list[str] = []

    def handler(d: ir.Diagnostic) -> bool:
        diagnostics.append(f"{d.location}: {d.message}")
        diagnostics.extend(f"  note: {n.message}" for n in d.notes)
        return True

    h = module.context.attach_diagnostic_handler(handler)
    try:
        PassManager.parse(pipeline, context=module.context).run(module.operation)
    except ir.MLIRError as e:
        raise error(f"GPU {what} failed:\n" + ("\n".join(diagnostics) or str(e))) from None
    finally:
        h.detach()


@dataclasses.dataclass(frozen=True)
class KernelPlan:
    """How one root op becomes one kernel.

    block_tiles: per loop, the extent of a workgroup's tile (0: the loop is not split across
        workgroups).
    threads: per loop, the threads of a workgroup along it (0: not split across threads).
    Mapped loops (non-zero in both) are listed outer to inner; the innermost is `x`.
    """

    block_tiles: tuple[int, ...]
    threads: tuple[int, ...]

    @property
    def workgroup_size(self) -> int:
        return math.prod(t for t in self.threads if t)


def _loop_extents(op: ir.Operation) -> list[int]:
    """Static extent of every loop of a `linalg.generic`, read from the indexing maps."""
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    n = maps[0].n_dims
    extents: list[int | None] = [None] * n
    for operand, amap in zip(op.operands, maps):
        t = operand.type
        shape = list(t.shape) if isinstance(t, ir.ShapedType) else []
        for r, expr in enumerate(amap.results):
            if isinstance(expr, ir.AffineDimExpr) and extents[expr.position] is None and r < len(shape):
                if ir.ShapedType.is_dynamic_size(shape[r]):
                    raise GpuMappingError(f"{op.location}: {op.name} has a dynamic shape; the GPU targets need static shapes")
                extents[expr.position] = shape[r]
    if any(e is None for e in extents):
        raise GpuMappingError(f"{op.location}: cannot read the loop extents of {op.name}")
    return [int(e) for e in extents]  # type: ignore[arg-type]


def _iterators(op: ir.Operation) -> list[str]:
    return [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def plan_kernel(extents: Sequence[int], iterators: Sequence[str], contraction: bool, device: GpuDevice) -> KernelPlan:
    """The workgroup tiles and thread counts of one op with loop `extents` (see module doc)."""
    parallel = [i for i, it in enumerate(iterators) if it == "parallel"]
    if not parallel:
        raise GpuMappingError("an op without a parallel loop (a reduction to a scalar) is not mapped to the GPU yet")
    # The innermost parallel loops with extent > 1 (at least the innermost one), at most three.
    mapped = [i for i in parallel if extents[i] > 1][-3:] or parallel[-1:]
    block = [0] * len(extents)
    threads = [0] * len(extents)
    if contraction and len(mapped) >= 2:
        (m, n), (bm, bn), (tm, tn) = mapped[-2:], device.matmul_block_tile, device.matmul_thread_tile
        for d, b, t in ((m, bm, tm), (n, bn, tn)):
            block[d] = min(b, extents[d])
            threads[d] = -(-block[d] // t)
        for d in mapped[:-2]:  # batch: one workgroup per batch element
            block[d], threads[d] = 1, 1
    else:
        budget = device.workgroup_size
        for d in reversed(mapped):  # innermost first: it gets the longest run of threads
            size = min(extents[d], budget)
            if d == mapped[-1] and size < extents[d] and size > device.subgroup_size:
                size -= size % device.subgroup_size  # whole subgroups along x
            block[d], threads[d] = size, size
            budget = max(1, budget // size)
    return KernelPlan(tuple(block), tuple(threads))


def _mapping(kind: str, count: int) -> ir.ArrayAttr:
    """`[#gpu.<kind><z>, <y>, <x>]` for `count` loops, the innermost on x."""
    dims = ["z", "y", "x"][3 - count :]
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#gpu.{kind}<{d}>") for d in dims])


def _linalg_ops(module: ir.Module) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("linalg.") and op.name not in ("linalg.yield", "linalg.index"):
            found.append(op)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _is_init_only_fill(op: ir.Operation) -> bool:
    """A `linalg.fill` whose result only initializes other linalg ops' outputs (fused into them)."""
    if op.name != "linalg.fill":
        return False
    uses = list(op.results[0].uses)
    if not uses:
        return False
    for use in uses:
        owner = use.owner
        if not owner.name.startswith("linalg.") or "operandSegmentSizes" not in owner.attributes:
            return False
        n_in = list(ir.DenseI32ArrayAttr(owner.attributes["operandSegmentSizes"]))[0]
        if use.operand_number < n_in:
            return False
    return True


def _any_op() -> ir.Type:
    return transform.AnyOpType.get()


def _unit_attr_match(root: ir.Value, name: str) -> ir.Value:
    return structured.MatchOp(_any_op(), root, op_attrs=ir.DictAttr.get({name: ir.UnitAttr.get()})).result


def _apply(module: ir.Module, build: "callable[[ir.Value], None]", what: str) -> None:
    """Build `@__transform_main` with `build(root)` and run it on `module`."""
    ctx = module.context
    with ctx, ir.Location.unknown():
        script = ir.Module.create()
        script.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        with ir.InsertionPoint(script.body):
            seq = transform.NamedSequenceOp("__transform_main", [_any_op()], [], arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}])
        with ir.InsertionPoint(seq.body):
            build(seq.bodyTarget)
            transform.YieldOp()
    diagnostics: list[str] = []

    def handler(d: ir.Diagnostic) -> bool:
        diagnostics.append(f"{d.location}: {d.message}")
        return True

    h = ctx.attach_diagnostic_handler(handler)
    try:
        interpreter.apply_named_sequence(module.operation, seq.operation, script)
    except ir.MLIRError as e:
        raise GpuMappingError(f"GPU mapping: {what} failed:\n" + ("\n".join(diagnostics) or str(e))) from None
    finally:
        h.detach()


def _kernel_copies_to_linalg(module: ir.Module) -> int:
    """Turn each `memref.copy` inside a kernel into `linalg.copy`, which becomes loops.

    Why: a tiled copy (the `linalg.copy` of `_insert_slices_to_copies`) is an identity generic
    that canonicalization folds into its forall's `parallel_insert_slice`, which bufferizes back
    to a `memref.copy` of subviews inside the kernel; neither NVVM nor SPIR-V lowers memref.copy
    (it is a call into a runtime library on the CPU), but linalg.copy lowers to loads/stores."""
    from mlir.dialects import linalg

    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "gpu.module":
            op.walk(lambda inner: (found.append(inner) if inner.name == "memref.copy" else None) or ir.WalkResult.ADVANCE)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in found:
        with ir.InsertionPoint(op), op.location:
            linalg.copy(op.operands[0], outs=[op.operands[1]])
        op.erase()
    return len(found)


def lower_kernels_to_loops(module: ir.Module, error: type[OnnxcError] = GpuMappingError) -> None:
    """Kernel bodies of a mapped module to scalar loops (`KERNEL_LOOPS_PIPELINE`), both
    emitters' first step; kernel-side `memref.copy` first becomes `linalg.copy`."""
    with module.context, ir.Location.unknown():
        _kernel_copies_to_linalg(module)
        run_pipeline(module, KERNEL_LOOPS_PIPELINE, "lowering kernels to loops", error)


def _insert_slices_to_copies(module: ir.Module) -> int:
    """Give every static `tensor.insert_slice` a `linalg.copy` into the destination's slice.

    Why: an insert_slice (how Pad and Concat lower) bufferizes to a `memref.copy` into a subview
    on the host, which no GPU runtime here executes. `linalg.copy ins(%src) outs(extract_slice
    %dest)` is a root op like any other (one kernel), and the insert_slice that then inserts the
    copy's result into the very slice it came from bufferizes in place to nothing. The kernel
    writes through a subview of the destination whose offset and strides are static in its
    type, so binding the whole destination buffer is enough (see `host.py`)."""
    from mlir.dialects import linalg, tensor

    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "tensor.insert_slice":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    count = 0
    for op in found:
        view = op.opview
        if len(view.offsets) or len(view.sizes) or len(view.strides):
            continue  # dynamic slices: left alone, refused on the host side with the op named
        src_type = view.source.type
        with ir.InsertionPoint(op), op.location:
            dest_slice = tensor.ExtractSliceOp(src_type, view.dest, [], [], [], view.static_offsets, view.static_sizes, view.static_strides)
            copied = linalg.copy(view.source, outs=[dest_slice.result])
        op.operands[0] = copied  # the insert_slice's source
        count += 1
    return count


def _tile_to_blocks_and_threads(module: ir.Module, device: GpuDevice) -> int:
    """Tag roots and fills, plan each root, and run the tensor-level tiling script (step 3)."""
    # Generalization drops discardable attributes, so each op's kind is read before it and
    # matched after it by position (the pass rewrites ops in place, keeping their order).
    before = _linalg_ops(module)
    kinds = [(op.name in _CONTRACTIONS, _is_init_only_fill(op)) for op in before]
    names = [op.name for op in before]
    run_pipeline(module, "builtin.module(func.func(linalg-generalize-named-ops))", "generalization")
    after = _linalg_ops(module)
    if len(after) != len(before):
        raise GpuMappingError("GPU mapping: generalization changed the number of linalg ops")
    plans: list[KernelPlan] = []
    fills: list[list[int]] = []
    roots = [op for op, (_, fill) in zip(after, kinds) if not fill]
    all_fills = [op for op, (_, fill) in zip(after, kinds) if fill]
    contraction = [c for c, fill in kinds if not fill]
    root_names = [n for n, (_, fill) in zip(names, kinds) if not fill]
    for i, op in enumerate(roots):
        if op.name != "linalg.generic":
            raise GpuMappingError(f"{op.location}: {op.name} is not mapped to the GPU")
        try:
            plans.append(plan_kernel(_loop_extents(op), _iterators(op), contraction[i], device))
        except GpuMappingError as e:
            raise GpuMappingError(f"{op.location}: {root_names[i]}: {e}") from None
        op.attributes[f"{_ROOT_TAG}_{i}"] = ir.UnitAttr.get()
        fills.append([])
    for j, fill in enumerate(all_fills):
        for use in fill.results[0].uses:
            i = next((k for k, r in enumerate(roots) if r == use.owner), None)
            if i is not None:
                fill.attributes[f"{_FILL_TAG}_{i}"] = ir.UnitAttr.get()
                fills[i].append(j)

    def build(root: ir.Value) -> None:
        for i, plan in enumerate(plans):
            op = _unit_attr_match(root, f"{_ROOT_TAG}_{i}")
            n_block = sum(1 for b in plan.block_tiles if b)
            tiled = structured.TileUsingForallOp(_any_op(), _any_op(), op, tile_sizes=list(plan.block_tiles), mapping=_mapping("block", n_block))
            fused = []
            if fills[i]:
                fill = _unit_attr_match(root, f"{_FILL_TAG}_{i}")
                fused.append(structured.FuseIntoContainingOp(_any_op(), _any_op(), fill, tiled.forall_op).fused_op)
            n_thread = sum(1 for t in plan.threads if t)
            per_thread = structured.TileUsingForallOp(_any_op(), _any_op(), tiled.tiled_op, num_threads=list(plan.threads), mapping=_mapping("thread", n_thread))
            for f in fused:
                structured.FuseIntoContainingOp(_any_op(), _any_op(), f, per_thread.forall_op)

    _apply(module, build, "tiling to workgroups and threads")
    return len(plans)


def _thread_counts(forall: ir.Operation) -> list[int]:
    """The workgroup size [x, y, z] of a mapped forall: the trip counts of its thread foralls."""
    dims = [1, 1, 1]

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "scf.forall" and "mapping" in op.attributes and "thread" in str(op.attributes["mapping"]):
            ubs = list(ir.DenseI64ArrayAttr(op.attributes["staticUpperBound"]))
            if any(ir.ShapedType.is_dynamic_size(u) for u in ubs):
                raise GpuMappingError(f"{op.location}: a thread loop has a dynamic trip count")
            for k, ub in enumerate(reversed(ubs)):  # the innermost loop is x
                dims[k] = max(dims[k], int(ub))
        return ir.WalkResult.ADVANCE

    forall.walk(visit)
    return dims


def _map_to_launches(module: ir.Module, device: GpuDevice) -> None:
    """Step 5: each top-level forall -> gpu.launch with its threads mapped."""
    kernels: list[list[int]] = []
    for func in module.body.operations:
        if func.operation.name != "func.func":
            continue
        for op in func.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "scf.forall":
                dims = _thread_counts(op)
                if math.prod(dims) > device.max_workgroup_size:
                    raise GpuMappingError(f"{op.location}: workgroup of {dims} threads exceeds {device.max_workgroup_size} on {device.name}")
                op.attributes[f"{_KERNEL_TAG}_{len(kernels)}"] = ir.UnitAttr.get()
                kernels.append(dims)

    def build(root: ir.Value) -> None:
        for i, dims in enumerate(kernels):
            forall = _unit_attr_match(root, f"{_KERNEL_TAG}_{i}")
            launch = tgpu.MapForallToBlocks(_any_op(), forall, generate_gpu_launch=True).result
            tgpu.MapNestedForallToThreads(_any_op(), launch, block_dims=dims)

    _apply(module, build, "mapping to gpu.launch")


def _strip(module: ir.Module, prefixes: Sequence[str]) -> None:
    def visit(op: ir.Operation) -> ir.WalkResult:
        for a in [a if isinstance(a, str) else a.name for a in op.attributes]:
            if a.startswith(tuple(prefixes)):
                del op.attributes[a]
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def map_to_gpu(module: ir.Module, device: GpuDevice) -> ir.Module:
    """Rewrite a linalg-on-tensors `module` in place into host code + outlined GPU kernels."""
    device.validate()
    with module.context, ir.Location.unknown():
        if not module.operation.verify():
            raise GpuMappingError("the input module does not verify")
        run_pipeline(module, PRE_PIPELINE, "elementwise fusion")
        _insert_slices_to_copies(module)
        try:
            _tile_to_blocks_and_threads(module, device)
            run_pipeline(module, "builtin.module(canonicalize,cse)", "cleanup")
            run_pipeline(module, BUFFERIZE_PIPELINE, "bufferization")
            _map_to_launches(module, device)
        finally:
            _strip(module, (_ROOT_TAG, _FILL_TAG, _KERNEL_TAG))
        run_pipeline(module, OUTLINE_PIPELINE, "kernel outlining")
    return module
