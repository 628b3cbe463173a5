"""The shared GPU mapping: linalg on tensors -> `gpu.launch` -> outlined `gpu.func` kernels.

What: `map_to_gpu(module, device)` rewrites a linalg-on-tensors module (the `linalg` stage of
`onnxc.transforms.named_pipelines`) in place into a host function that allocates buffers and
calls `gpu.launch_func` on kernels in a `gpu.module`. The CUDA (`targets/cuda`) and Vulkan
(`targets/vulkan`) emitters start from its result.

How (the recipe checked on the MLIR 22.1.8 wheels, see GUIDE.md):
1. `linalg-fuse-elementwise-ops`: chains of elementwise ops become one `linalg.generic`, so an
   Add->Relu->Mul chain is one kernel and its intermediates never reach memory. Contractions
   and convolutions are kept out of it (`_fused_elementwise`): folded into them, a producer
   would be recomputed for every output column.
2. Named ops are generalized (`linalg-generalize-named-ops`) after each op's kind (contraction or
   not) is read, so one planner reads loop extents from indexing maps for every op.
3. Transform scripts (built with the `mlir.dialects.transform` bindings, no script text): for
   every root op (each linalg op but the `linalg.fill`s that only initialize another op's
   output), `tile_using_forall` with tile sizes mapped to `#gpu.block<z/y/x>`, the fills producing
   its init fused into that forall (`fuse_into_containing_op`), then a second `tile_using_forall`
   with `num_threads` mapped to `#gpu.thread<z/y/x>` and the fill fused into it too. A static
   thread count per workgroup (`num_threads`, not tile sizes) keeps the thread forall's trip
   count static even for the partial tiles at a loop's end, which `map_nested_forall_to_threads`
   requires. A promoted contraction instead gets its K loop tiled (`tile_using_for`) in the
   first script; its workgroup copies are inserted on tensors; a second script tiles the K
   step's op and the copies to threads.
4. One-shot bufferization across function boundaries (identity layouts); tree reductions'
   partials are allocated in `#gpu.address_space<workgroup>` first.
5. A second script: each top-level `scf.forall` -> `map_forall_to_blocks generate_gpu_launch`, then
   `map_nested_forall_to_threads` with the workgroup size read from its thread forall.
6. `gpu-launch-sink-index-computations` (constants stay in the kernel instead of becoming kernel
   arguments) and `gpu-kernel-outlining`.
7. Identical kernels (a model's repeated layers) are kept once (`dedupe_kernels`).

Work distribution (`plan_kernel`, sizes from `device.GpuDevice`): up to three parallel loops,
the innermost ones with extent > 1, are mapped; the innermost goes to `x` so that neighbouring
threads touch neighbouring elements (coalesced). Elementwise ops: one output element per thread,
`workgroup_size` threads per workgroup. Reductions whose only reduction loop is the innermost one
and at least 4 subgroups long (row reductions: Softmax, ReduceSum/Max/Mean over the last axis,
norms) use a per-workgroup tree: one workgroup per output element, `tile_reduction_using_forall`
gives each thread a contiguous chunk of the row whose partial result goes to workgroup memory,
then one thread combines the partials after a barrier (`_build_tree_reduction`). Other
reductions run one thread per output element with the reduction loop sequential in it
(coalesced across threads when the reduced loop is not the innermost, e.g. column sums).
Contractions (matmul, batch matmul): a `matmul_block_tile` per workgroup and a
`matmul_thread_tile` register tile per thread; convolutions: the generic scheme over their
output loops (one output per thread), the window loops sequential per thread, except on a
device whose `conv_thread_tile` is larger (a CPU driver), where a convolution with a filter
gets a register tile of neighbouring output positions times neighbouring channels per thread
(`conv_plan`). A thread's reduction accumulates in a
private buffer when its output tile has a static shape (`_private_accumulators`: registers
instead of a global-memory load/store per reduction step). Contractions whose only reduction
loop is the innermost get workgroup-memory promotion when the device has a `matmul_k_tile`
(`_promote_operands`): the K loop becomes an `scf.for` stepping by it inside the workgroup, and
each step the workgroup's threads copy the A and B slices into `#gpu.address_space<workgroup>`
buffers (chunks of the workgroup's shape, one element per thread: coalesced), a barrier, then the
register tiles read from them, and a barrier before the next step; the output tile is filled
before the loop by its own thread loop. Convolutions are not promoted yet (their input window has
a halo whose static bound the promotion does not compute). Parallel loops beyond the three mapped ones run sequentially in
each thread. Pad and Concat (`tensor.insert_slice`) become copy kernels
(`_insert_slices_to_copies`).

Reductions to a scalar (no parallel loop) get a leading unit parallel loop first
(`_add_unit_parallel_loop`): one workgroup, a tree when the reduced loop is a single long one.

What is refused (`GpuMappingError`, naming the op and its location): dynamic shapes and any
non-linalg computation the host program cannot express (checked by `targets/gpu/host.py`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import transform
from mlir.dialects.transform import gpu as tgpu
from mlir.dialects.transform import interpreter
from mlir.dialects.transform import structured
from mlir.passmanager import PassManager

from onnxc.errors import OnnxcError
from onnxc.targets.cpu.pad_in_place import defining_op
from onnxc.transforms.lowering.runtime_checks import strip_runtime_checks

from .device import GpuDevice

__all__ = [
    "BUFFERIZE_PIPELINE",
    "MMA_TYPES",
    "GpuMappingError",
    "KERNEL_LOOPS_PIPELINE",
    "lower_kernels_to_loops",
    "workgroup_allocs_to_attributions",
    "KernelPlan",
    "binary_objects",
    "collect",
    "OUTLINE_PIPELINE",
    "PRE_PIPELINE",
    "map_to_gpu",
    "conv_plan",
    "dedupe_kernels",
    "plan_kernel",
    "run_pipeline",
]


class GpuMappingError(OnnxcError):
    """The module cannot be mapped to GPU kernels (an op the mapping does not handle)."""


#: Tensor-level preparation: elementwise fusion first (it needs generic ops and named ones alike).
PRE_PIPELINE = "builtin.module(linalg-fuse-elementwise-ops,canonicalize,cse)"

#: Bufferization for the GPU: no deallocation pipeline, because the runtime (Vulkan) or the host
#: code owns every buffer; function results are fresh allocations. No `eliminate-empty-tensors`:
#: by this point the host's insert_slices are copies (`_insert_slices_to_copies`) and few
#: `tensor.empty` are left (15 in BERT-base), and the pass, which runs a second whole-function
#: one-shot analysis, found nothing to rewrite on the models checked: the mapped IR of BERT, GPT-2,
#: ViT, Llama, ResNet-50 and MobileNetV2 is the same without it, and BERT-base's bufferization
#: takes 1.7 s instead of 3.2 s. (The CPU target needs it: `pad_in_place`.)
BUFFERIZE_PIPELINE = (
    "builtin.module(empty-tensor-to-alloc-tensor,"
    "one-shot-bufferize{bufferize-function-boundaries allow-return-allocs-from-loops "
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
_COPY_TAG = "onnxc.gpu_copy"
_KERNEL_FUNC = "__onnxc_gpu_kernel_"  # `_outline_kernels`' functions
_COPY_LOOP_TAG = "onnxc.gpu_copy_loop"
_COPY_LOOP_NO_BARRIER_TAG = "onnxc.gpu_copy_loop_nobarrier"
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


def collect(root: ir.Operation, predicate: "Callable[[ir.Operation], bool]") -> list[ir.Operation]:
    """Every operation nested in `root` (pre-order) for which `predicate` holds: the rewrites here
    collect first and change the IR afterwards, never during the walk."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if predicate(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def kernel_ops(module: ir.Module, predicate: "Callable[[ir.Operation], bool]") -> list[ir.Operation]:
    """Every operation inside the module's `gpu.module`s (the kernels, not the host code) for
    which `predicate` holds, collected before any rewrite (`collect`)."""
    return [op for g in collect(module.operation, lambda op: op.name == "gpu.module") for op in collect(g, predicate)]


def binary_objects(module: ir.Module) -> dict[str, bytes]:
    """Kernel module name -> the bytes of the first `#gpu.object` of each `gpu.binary` (SPIR-V
    words for Vulkan, PTX text for CUDA's `isa` format)."""
    from mlir.dialects import gpu

    out: dict[str, bytes] = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "gpu.binary":
            obj = gpu.ObjectAttr(list(ir.ArrayAttr(op.attributes["objects"]))[0])
            out[ir.StringAttr(op.attributes["sym_name"]).value] = bytes(obj.object)
    return out


@dataclasses.dataclass(frozen=True)
class KernelPlan:
    """How one root op becomes one kernel.

    block_tiles: per loop, the extent of a workgroup's tile (0: the loop is not split across
        workgroups).
    threads: per loop, the threads of a workgroup along it (0: not split across threads).
    tree_threads: for a row reduction, the threads that split the reduced loop inside one
        workgroup (0: one thread per output element instead).
    k_tile: for a contraction on the block/thread scheme, the step of its (single, innermost)
        reduction loop; each step's A and B slices are copied to workgroup memory by all threads
        of the workgroup before they compute on them (0: no promotion).
    mma, warps: a tensor-core contraction (CUDA only, `_mma_plan`): the workgroup is `warps`
        warps of 32 lanes (x = lane), each computing its share of the block tile as mma.sync
        instructions of shape `mma`.
    Mapped loops (non-zero in both) are listed outer to inner; the innermost is `x`.
    """

    block_tiles: tuple[int, ...]
    threads: tuple[int, ...]
    tree_threads: int = 0  # > 0: a per-workgroup tree reduction with this many threads (see plan_kernel)
    k_tile: int = 0  # > 0: a contraction whose K loop steps by this, operands promoted (see _promote_operands)
    mma: tuple[int, ...] = ()  # (m, n, k) of the tensor-core instruction each warp issues (see _mma_plan)
    warps: tuple[int, ...] = ()  # (along m, along n): warps of a tensor-core workgroup

    @property
    def workgroup_size(self) -> int:
        return self.tree_threads or math.prod(t for t in self.threads if t)


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
    """The iterator kinds of a structured op ('parallel' or 'reduction' per loop), read by
    comparing each `#linalg.iterator_type` attribute by value."""
    kinds = {k: ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in ("parallel", "reduction")}
    return [next(k for k, v in kinds.items() if a == v) for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def plan_kernel(
    extents: Sequence[int],
    iterators: Sequence[str],
    contraction: bool,
    device: GpuDevice,
    tree_ok: bool = False,
    element_bytes: int = 4,
) -> KernelPlan:
    """The workgroup tiles and thread counts of one op with loop `extents` (see module doc).

    `tree_ok`: the op is a simple single-result reduction (`_is_simple_reduction`), which may
    use a per-workgroup tree when its only reduction loop is the innermost and long enough.
    `element_bytes`: the widest input element of a contraction, which bounds the workgroup
    memory its promoted operand slices take (no promotion when they would not fit)."""
    parallel = [i for i, it in enumerate(iterators) if it == "parallel"]
    if not parallel:  # `_add_unit_parallel_loop` gives every op one before planning
        raise GpuMappingError("an op without a parallel loop cannot be mapped to workgroups")
    # The innermost parallel loops with extent > 1 (at least the innermost one), at most three.
    mapped = [i for i in parallel if extents[i] > 1][-3:] or parallel[-1:]
    block = [0] * len(extents)
    threads = [0] * len(extents)
    reductions = [i for i, it in enumerate(iterators) if it == "reduction"]
    unmapped_long = [i for i in parallel if i not in mapped and extents[i] > 1]
    if (
        tree_ok
        and not contraction
        and reductions == [len(extents) - 1]
        and extents[-1] >= 4 * device.subgroup_size
        and not unmapped_long
    ):
        # One workgroup per output element; its threads each reduce a contiguous chunk of the
        # row into workgroup memory, then one thread combines the partial results.
        k = extents[-1]
        tree = min(device.workgroup_size, max(device.subgroup_size, (k // 4) // device.subgroup_size * device.subgroup_size))
        for d in mapped:
            block[d] = 1
        return KernelPlan(tuple(block), tuple(threads), tree)
    if contraction and len(mapped) >= 2:
        (m, n), (bm, bn), (tm, tn) = mapped[-2:], device.matmul_block_tile, device.matmul_thread_tile
        k_tile = 0
        # Parallel loops no workgroup splits (batch loops beyond the three mapped ones) are
        # whole in each workgroup's slices: they multiply the promoted buffers (an upper bound:
        # one operand may not have them).
        whole = math.prod(extents[d] for d in unmapped_long)
        if reductions == [len(extents) - 1] and device.matmul_k_tile and whole * device.promoted_bytes(element_bytes) <= device.shared_memory_bytes:
            k_tile = min(device.matmul_k_tile, extents[-1])
        for d, b, t in ((m, bm, tm), (n, bn, tn)):
            # With promotion the workgroup keeps the table's shape even when the matrix is
            # smaller (a whole number of warps that all share the copies; an odd count such as
            # 9x11 makes ptxas cap registers and spill); the thread loop then gives each thread
            # ceil(extent / threads) <= t rows or columns.
            block[d] = b if k_tile else min(b, extents[d])
            threads[d] = -(-block[d] // t)
        for d in mapped[:-2]:  # batch: one workgroup per batch element
            block[d], threads[d] = 1, 1
        return KernelPlan(tuple(block), tuple(threads), k_tile=k_tile)
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


def _maps_threads(mapping: ir.Attribute) -> bool:
    """Whether an `scf.forall` mapping (an array of `#gpu.*` mapping attributes) maps to GPU
    threads: compared by value against every `#gpu.thread<...>` id (x, y, z, linear_dim_0..9)."""
    ids = [*"xyz", *(f"linear_dim_{i}" for i in range(10))]
    threads = [ir.Attribute.parse(f"#gpu.thread<{d}>") for d in ids]
    return any(a in threads for a in ir.ArrayAttr(mapping))


def _is_workgroup_memory(t: ir.Type) -> bool:
    """Whether a memref type lives in `#gpu.address_space<workgroup>` (shared memory)."""
    space = ir.MemRefType(t).memory_space
    return space is not None and space == ir.Attribute.parse("#gpu.address_space<workgroup>")


def _linalg_ops(module: ir.Module) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("linalg.") and op.name not in ("linalg.yield", "linalg.index"):
            found.append(op)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


_COMBINERS = (
    "arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf",
    "arith.addi", "arith.muli", "arith.maxsi", "arith.minsi", "arith.andi", "arith.ori",
)


def _is_simple_reduction(op: ir.Operation) -> bool:
    """A `linalg.generic` with one result whose body yields `combiner(x, out)` with the output
    block argument used exactly once: what `tile_reduction_using_forall` can split (a combiner
    it cannot recognize would fail the whole transform script)."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    body = op.regions[0].blocks[0]
    out = body.arguments[len(body.arguments) - 1]
    ops = list(body.operations)
    term = ops[-1]
    if len(term.operands) != 1:
        return False
    owner = term.operands[0].owner
    owner = getattr(owner, "operation", owner)
    if not isinstance(owner, ir.Operation) or owner.name not in _COMBINERS:
        return False
    uses = list(out.uses)
    if not (len(uses) == 1 and uses[0].owner == owner):
        return False
    # A body that reads the position along a reduction loop (`linalg.index` of it: a gather by
    # index, as the shape-generic broadcast of a MatMul operand lowers to) is not split: the
    # partial-reduction op of `tile_reduction_using_forall` gives each thread's chunk indices
    # from 0, so it read the wrong elements (a wrong answer on Vulkan, test_gpu_refusals).
    iterators = _iterators(op)
    return not any(
        o.name == "linalg.index" and iterators[ir.IntegerAttr(o.attributes["dim"]).value] == "reduction"
        for o in (x.operation for x in ops)
    )


def _is_plain_contraction(op: ir.Operation) -> bool:
    """A `linalg.generic` that is a (batched) matmul in all but name: a contraction (upstream's
    `isa_contraction_op`: a mul-add body over two inputs) whose loops of extent > 1 are one k
    loop, innermost, and parallel loops of which the two innermost are an m and an n loop, e.g.
    an Einsum, or a projection written as one generic. It
    gets the contraction plan (register tiles, promoted operands) like the named ops; the outer
    parallel loops (batch dims, or more m dims: the tokens of a [batch, seq, hidden] x
    [hidden, out] projection) get one workgroup per element (`plan_kernel`).

    Loops of extent 1 do not count: a transformer's [1, seq, hidden] x [hidden, out] MatMul has
    two m loops by upstream's analysis (the unit batch and the tokens), and read as a plain
    reduction it became one workgroup per output element with a tree over k (BERT-base: 98,304
    workgroups of 6 multiply-adds per thread for each projection)."""
    from mlir.dialects import linalg

    if op.name != "linalg.generic" or len(op.results) != 1 or not linalg.isa_contraction_op(op):
        return False
    dims = linalg.infer_contraction_dimensions(op)
    if dims is None:
        return False
    try:
        extents = _loop_extents(op)
    except GpuMappingError:  # a dynamic shape: refused, naming the op, when it is planned
        return False
    long = [i for i, e in enumerate(extents) if e > 1]
    m, n, k = ([d for d in group if d in long] for group in (dims.m, dims.n, dims.k))
    iterators = _iterators(op)
    parallel = [i for i in long if iterators[i] == "parallel"]
    return (
        len(k) == 1
        and k[0] == len(iterators) - 1
        and [i for i in long if iterators[i] == "reduction"] == k
        and len(parallel) >= 2
        and parallel[-2] in m
        and parallel[-1] in n
    )


def _conv_loops(op: ir.Operation) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The output-image loops and the channel loops (output channels of a convolution, or the
    channels of a depthwise one) of a convolution with a filter operand, by upstream's
    `infer_convolution_dimensions`; None for any other op, pooling included (a pooling window
    has neither: a thread tile over its channels reuses no loaded value)."""
    from mlir.dialects import linalg

    if not op.name.startswith("linalg.") or not linalg.isa_convolution_op(op):
        return None
    dims = linalg.infer_convolution_dimensions(op)
    if dims is None:
        return None
    channels = tuple(dims.output_channel) + tuple(dims.depth)
    if not channels or not dims.output_image:
        return None
    return tuple(dims.output_image), channels


def _divisor_at_most(extent: int, cap: int, step: int = 1) -> int:
    """The largest multiple of `step` that is at most `cap` and divides `extent` (`step` if none)."""
    return next((b for b in range(cap - cap % step, step - 1, -step) if b and extent % b == 0), step)


def conv_plan(extents: Sequence[int], iterators: Sequence[str], image: Sequence[int], channels: Sequence[int], device: GpuDevice) -> KernelPlan | None:
    """A register-tiled plan for a convolution (`_conv_loops` gives its loops), or None for the
    generic one-output-per-thread plan.

    Each thread computes a `tm x tn` tile of outputs: `tm` neighbouring positions along the
    innermost mapped output-image loop (the output width) times `tn` neighbouring channels
    (the innermost mapped channel loop), so each step of the window and input-channel loops
    loads `tm` inputs and `tn` filter values for `tm * tn` multiply-adds, where one output per
    thread loads two values per multiply-add. The tile sizes are the device's
    `conv_thread_tile` ((1, 1) on a GPU: None), or the largest power of two below it that
    divides the loop, or when that is smaller a divisor of at most twice it (a width of 7: 7);
    no partial tiles, so a thread's tile has a static shape and its accumulators stay in
    registers (`_private_accumulators`). The workgroup spans a `matmul_block_tile` (a divisor
    of the loop, a multiple of the thread tile) along those two loops, and the third mapped
    loop (the output height) fills the workgroup up to `workgroup_size` threads. Not used when
    a parallel loop of extent > 1 would stay unmapped (a batch of several images beside three
    mapped loops): each thread's tile would then hold the whole batch."""
    if device.conv_thread_tile == (1, 1):
        return None
    parallel = [i for i, it in enumerate(iterators) if it == "parallel"]
    mapped = [i for i in parallel if extents[i] > 1][-3:]
    if len([i for i in parallel if extents[i] > 1]) > len(mapped) or len(mapped) < 2:
        return None
    ch = next((d for d in reversed(mapped) if d in channels), None)
    im = next((d for d in reversed(mapped) if d in image), None)
    if ch is None or im is None:
        return None
    tiles = {}
    (tm, tn), (bm, bn) = device.conv_thread_tile, device.matmul_block_tile
    for d, t, b in ((im, tm, bm), (ch, tn, bn)):
        thread = next(p for p in (8, 4, 2, 1) if p <= t and extents[d] % p == 0)
        if thread < t:
            thread = max(thread, _divisor_at_most(extents[d], 2 * t))
        tiles[d] = (_divisor_at_most(extents[d], b, thread), thread)
    if tiles[im][1] * tiles[ch][1] == 1:
        return None
    block = [0] * len(extents)
    threads = [0] * len(extents)
    for d, (b, t) in tiles.items():
        block[d], threads[d] = b, b // t
    budget = device.workgroup_size // (threads[im] * threads[ch])
    for d in mapped:
        if d not in tiles:  # the output height: one position per thread
            block[d] = threads[d] = _divisor_at_most(extents[d], max(1, budget))
            budget = max(1, budget // block[d])
    return KernelPlan(tuple(block), tuple(threads))


def _reuses_inputs(op: ir.Operation) -> bool:
    """A contraction or a convolution (upstream's `isa_contraction_op` / `isa_convolution_op`,
    named or generic; pooling counts as a convolution there): an op that reads each input
    element many times (a matmul's A element once per output column, a window's element once
    per window that covers it)."""
    from mlir.dialects import linalg

    return linalg.isa_contraction_op(op) or linalg.isa_convolution_op(op)


def _fused_elementwise(module: ir.Module) -> None:
    """`PRE_PIPELINE` (elementwise fusion) with every contraction and convolution kept out of
    it: each is moved into a private function of its own for the pipeline
    (`_outline_kernels`) and inlined back after it.

    Why: fusion folds an elementwise producer into its consumer whatever the consumer is, and
    its reshape propagation first turns a named matmul behind a reshape into a generic. So
    BERT's second FFN MatMul took the bias-add and GELU into its multiply-add and recomputed
    them for every output column, the attention's probabilities x V took Softmax's division,
    and the output projection took the heads' reshape (two k loops): none was a plain
    contraction any more, each was planned as a reduction (one workgroup per output element),
    and they were 23 of BERT-base's 30 s on lavapipe. Kept whole, they get the contraction plan
    and their producers run once per element, in a kernel of their own."""
    fenced = [[op] for op in _linalg_ops(module) if _reuses_inputs(op)]  # (linalg ops only)
    _outline_kernels(module, fenced)
    try:
        run_pipeline(module, PRE_PIPELINE, "elementwise fusion")
    finally:
        _inline_kernels(module)


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

    found = kernel_ops(module, lambda op: op.name == "memref.copy")
    for op in found:
        with ir.InsertionPoint(op), op.location:
            linalg.copy(op.operands[0], outs=[op.operands[1]])
        op.erase()
    return len(found)


def lower_kernels_to_loops(module: ir.Module, error: type[OnnxcError] = GpuMappingError) -> None:
    """Kernel bodies of a mapped module to scalar loops (`KERNEL_LOOPS_PIPELINE`), both
    emitters' first step; kernel-side `memref.copy` first becomes `linalg.copy`, and each
    `arith.remf` becomes the exact loop of `_exact_remf` and each `math.ipowi` the loop of
    `_integer_powers`."""
    with module.context, ir.Location.unknown():
        _kernel_copies_to_linalg(module)
        run_pipeline(module, KERNEL_LOOPS_PIPELINE, "lowering kernels to loops", error)
        _exact_remf(module)
        _integer_powers(module)


def _integer_powers(module: ir.Module) -> int:
    """Replace each scalar `math.ipowi a, b` (ONNX Pow on integers) in a kernel by
    exponentiation by squaring in an `scf.while`, with upstream's meaning for a negative
    exponent (`convert-math-to-funcs`, what the CPU target runs): 1 for a = 1, +-1 for a = -1 by
    the parity of b, else 0 (for a = 0, where the CPU divides by zero, 0 here too).

    Why: neither the SPIR-V nor the NVVM conversion lowers math.ipowi (both refused integer Pow
    with "failed to legalize"), and upstream's expansion makes a function beside the kernel,
    which a gpu.module's conversion would not take."""
    from mlir.dialects import arith, math, scf

    found = kernel_ops(module, lambda op: op.name == "math.ipowi" and isinstance(op.results[0].type, ir.IntegerType))
    I = arith.CmpIPredicate
    for op in found:
        a, b = op.operands[0], op.operands[1]
        t = a.type
        with ir.InsertionPoint(op), op.location:
            def c(v: int) -> ir.Value:
                return arith.ConstantOp(t, v).result

            zero, one = c(0), c(1)
            loop = scf.WhileOp([t, t, t], [one, a, b])  # (result, base, exponent)
            before = loop.before.blocks.append(t, t, t)
            with ir.InsertionPoint(before):
                scf.ConditionOp(arith.cmpi(I.sgt, before.arguments[2], zero), list(before.arguments))
            after = loop.after.blocks.append(t, t, t)
            with ir.InsertionPoint(after):
                result, base, e = after.arguments
                odd = arith.cmpi(I.ne, arith.andi(e, one), zero)
                scf.YieldOp([arith.select(odd, arith.muli(result, base), result), arith.muli(base, base), arith.shrui(e, one)])
            odd_b = arith.cmpi(I.ne, arith.andi(b, one), zero)
            negative = arith.select(
                arith.cmpi(I.eq, a, one), one,
                arith.select(arith.cmpi(I.eq, a, c(-1)), arith.select(odd_b, c(-1), one), zero),
            )
            value = arith.select(arith.cmpi(I.slt, b, zero), negative, loop.results[0])
        op.results[0].replace_all_uses_with(value)
        op.erase()
    return len(found)


def _exact_remf(module: ir.Module) -> int:
    """Replace each `arith.remf a, b` in a kernel by an exact IEEE fmod (what C's fmodf and the
    CPU target compute), built from operations whose results are exact.

    Why: GPU compilers may lower frem as `a - b * trunc(a / b)` (Mesa's NIR does, and Vulkan's
    precision rules allow it): fmod(-3, inf) became NaN instead of -3 on lavapipe (the backend
    case test_mod_float_edge_cases), and for |a / b| beyond 2^24 the quotient is rounded, so the
    result can be off by multiples of b. Here: s = |b| doubled while 2s <= |a| (exact), then
    r = |a| reduced by s whenever r >= s while s halves back down to |b| (each r - s is exact
    because s <= r < 2s); fmod = copysign(r, a). Special cases as IEEE: b = 0, a infinite or a
    NaN operand give NaN; b infinite gives a. At most ~280 iterations (the exponent range)."""
    from mlir.dialects import arith, math, scf

    found = kernel_ops(module, lambda op: op.name == "arith.remf")
    F = arith.CmpFPredicate
    for op in found:
        a, b = op.operands[0], op.operands[1]
        t = a.type
        with ir.InsertionPoint(op), op.location:
            def c(v: float) -> ir.Value:
                return arith.ConstantOp(t, v).result

            inf, zero, two, half = c(float("inf")), c(0.0), c(2.0), c(0.5)
            abs_a, abs_b = math.absf(a), math.absf(b)
            finite_a = arith.cmpf(F.OLT, abs_a, inf)
            usable_b = arith.andi(arith.cmpf(F.OGT, abs_b, zero), arith.cmpf(F.OLT, abs_b, inf))
            go = arith.andi(finite_a, usable_b)  # false for NaNs too (ordered comparisons)
            grow = scf.WhileOp([t], [abs_b])
            before = grow.before.blocks.append(t)
            with ir.InsertionPoint(before):
                s = before.arguments[0]
                scf.ConditionOp(arith.andi(go, arith.cmpf(F.OLE, arith.mulf(s, two), abs_a)), [s])
            after = grow.after.blocks.append(t)
            with ir.InsertionPoint(after):
                scf.YieldOp([arith.mulf(after.arguments[0], two)])
            reduce = scf.WhileOp([t, t], [abs_a, grow.results[0]])
            before = reduce.before.blocks.append(t, t)
            with ir.InsertionPoint(before):
                r, s = before.arguments
                scf.ConditionOp(arith.andi(go, arith.cmpf(F.OGE, s, abs_b)), [r, s])
            after = reduce.after.blocks.append(t, t)
            with ir.InsertionPoint(after):
                r, s = after.arguments
                scf.YieldOp([arith.select(arith.cmpf(F.OGE, r, s), arith.subf(r, s), r), arith.mulf(s, half)])
            result = math.copysign(reduce.results[0], a)
            nan_case = arith.ori(
                arith.ori(arith.cmpf(F.UNO, a, b), arith.cmpf(F.OEQ, abs_b, zero)), arith.cmpf(F.OEQ, abs_a, inf)
            )
            result = arith.select(nan_case, c(float("nan")), result)
        op.results[0].replace_all_uses_with(result)
        op.erase()
    return len(found)


def _insert_slices_to_copies(module: ir.Module) -> int:
    """Give every static `tensor.insert_slice` a `linalg.copy` into the destination's slice.

    Why: an insert_slice (how Pad and Concat lower) bufferizes to a `memref.copy` into a subview
    on the host, which no GPU runtime here executes. `linalg.copy ins(%src) outs(extract_slice
    %dest)` is a root op like any other (one kernel), and the insert_slice that then inserts the
    copy's result into the very slice it came from bufferizes in place to nothing. The kernel
    writes through a subview of the destination whose offset and strides are static in its
    type, so binding the whole destination buffer is enough (see `host.py`)."""
    from mlir.dialects import linalg, tensor

    found = collect(module.operation, lambda op: op.name == "tensor.insert_slice")
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


def _identity_layout(t: ir.MemRefType) -> bool:
    """Whether a memref has the identity layout (what the host side copies by itself; a
    contiguous view typed with a strided layout still needs a kernel, see host.py)."""
    layout = t.layout
    return isinstance(layout, ir.AffineMapAttr) and layout.value == ir.AffineMap.get_identity(t.rank, context=t.context)


#: The most iterations of a host-side loop `_unroll_host_loops` unrolls (a GPU program is a
#: straight list of launches; longer loops are refused by the host program, naming the op).
MAX_HOST_UNROLL = 64
_LOOP_TAG = "onnxc.gpu_host_loop"


def _constant_index(v: ir.Value) -> int | None:
    """The value of an index given by an `arith.constant`, else None."""
    owner = v.owner
    owner = getattr(owner, "operation", owner)
    if isinstance(owner, ir.Operation) and owner.name == "arith.constant" and isinstance(owner.attributes["value"], ir.IntegerAttr):
        return ir.IntegerAttr(owner.attributes["value"]).value
    return None


def _contains_kernels(loop: ir.Operation) -> bool:
    return bool(collect(loop, lambda o: o.name == "scf.forall"))


def _slice_loop(loop: ir.Operation) -> bool:
    """A host loop of scalar and slice code only (no linalg op, no kernel): Compress's copy of
    the selected slices, whose conditions specialization made constants."""
    return not collect(loop, lambda o: o.name == "scf.forall" or o.name.startswith("linalg."))


#: `arith.cmpi` predicates of a counter that stays below its bound (slt, ult).
_BELOW = (2, 6)


def _counted_while(op: ir.Operation) -> tuple[int, int, int, int] | None:
    """(position, start, bound, step) of the counter of a host `scf.while` that only counts, else
    None: its condition region is `cmpi slt|ult %counter, bound` forwarding its arguments
    unchanged, the counter starts at a constant and the body yields it plus a positive
    constant. What the Loop-based lowering of Scan-8 (its batch loop) builds."""
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    ops = list(before.operations)
    if len(ops) != 2 or ops[0].name != "arith.cmpi" or ops[1].name != "scf.condition":
        return None
    compare, condition = ops
    if condition.operands[0] != compare.results[0] or list(condition.operands)[1:] != list(before.arguments):
        return None
    predicate = ir.IntegerAttr(compare.attributes["predicate"]).value
    if predicate not in _BELOW:
        return None
    counter, bound_value = compare.operands
    if not isinstance(counter, ir.BlockArgument) or counter.owner != before:
        return None
    i = counter.arg_number
    if not isinstance(counter.type, (ir.IntegerType, ir.IndexType)):
        return None
    start, bound = _constant_index(op.operands[i]), _constant_index(bound_value)
    step_op = defining_op(list(after.operations)[-1].operands[i])
    if start is None or bound is None or step_op is None or step_op.name != "arith.addi":
        return None
    if predicate == _BELOW[1] and (start < 0 or bound < 0):  # ult: the constants read as unsigned
        return None
    a, b = step_op.operands
    step = _constant_index(b) if a == after.arguments[i] else _constant_index(a) if b == after.arguments[i] else None
    if step is None or step <= 0:
        return None
    return i, start, bound, step


def _counted_whiles_to_for(module: ir.Module) -> int:
    """Rewrite each host-side `scf.while` that only counts (`_counted_while`) as an `scf.for`
    with constant bounds, the counter its induction variable, so that `_unroll_host_loops` can
    unroll it like any other host loop (upstream raises such loops only in a test pass,
    `test-scf-uplift-while-to-for`, not in the wheels). The loop's other values become the
    for's iteration arguments; the counter's result is its last value."""
    from mlir.dialects import arith, scf

    count = 0
    for op in collect(module.operation, lambda o: o.name == "scf.while" and o.parent.name == "func.func"):
        found = _counted_while(op)
        if found is None:
            continue
        i, start, bound, step = found
        after = op.regions[1].blocks[0]
        body = list(after.operations)
        old_yield = body.pop()
        carried = [j for j in range(len(op.operands)) if j != i]
        counter_type = op.operands[i].type
        trips = max(0, -(-(bound - start) // step))
        with ir.InsertionPoint(op), op.location:
            index = ir.IndexType.get()
            loop = scf.ForOp(*(arith.constant(index, v) for v in (start, bound, step)), [op.operands[j] for j in carried])
            last = arith.constant(counter_type, start + trips * step)
        with ir.InsertionPoint(loop.body), op.location:
            iv = loop.induction_variable
            counter = iv if isinstance(counter_type, ir.IndexType) else arith.index_cast(counter_type, iv)
        after.arguments[i].replace_all_uses_with(counter)
        for k, j in enumerate(carried):
            after.arguments[j].replace_all_uses_with(loop.inner_iter_args[k])
        with ir.InsertionPoint(loop.body), op.location:
            new_yield = scf.YieldOp([old_yield.operands[j] for j in carried])
        for moved in body:  # in order, before the new terminator
            moved.move_before(new_yield)
        op.results[i].replace_all_uses_with(last)
        for k, j in enumerate(carried):
            op.results[j].replace_all_uses_with(loop.results[k])
        op.erase()
        count += 1
    return count


def _unroll_host_loops(module: ir.Module, wanted: Callable[[ir.Operation], bool] = _contains_kernels) -> int:
    """Fully unroll each host-side `scf.for` with constant bounds and at most `MAX_HOST_UNROLL`
    iterations that `wanted` selects, outermost first. By default the loops that contain kernels
    (mapped foralls; a recurrence: RNN/GRU/LSTM over the sequence, Scan, Det's elimination
    steps), so that every kernel launch is at the top level of the host function in order
    (`_map_to_launches`); the loop's buffers carried between iterations (bufferization with
    allow-return-allocs-from-loops) become plain values. With `_slice_loop`, on tensors before
    tiling: loops whose iterations only pick slices (their conditions fold once unrolled, and
    the slices become copy kernels). Upstream `transform.loop.unroll` with the trip count as
    factor."""
    from mlir.dialects.transform import loop as tloop

    total = 0
    for _ in range(8):  # nested loops surface one level per round
        found: list[tuple[ir.Operation, int]] = []
        for op in collect(module.operation, lambda op: op.name == "scf.for" and op.parent.name == "func.func"):
            lb, ub, step = (_constant_index(op.operands[i]) for i in range(3))
            if lb is None or ub is None or step is None or step <= 0:
                continue
            trips = max(0, -(-(ub - lb) // step))
            if 1 <= trips <= MAX_HOST_UNROLL and wanted(op):
                op.attributes[f"{_LOOP_TAG}_{len(found)}"] = ir.UnitAttr.get()
                found.append((op, trips))
        if not found:
            break

        def build(root: ir.Value) -> None:
            for i, (_, trips) in enumerate(found):
                if trips > 1:
                    tloop.LoopUnrollOp(_unit_attr_match(root, f"{_LOOP_TAG}_{i}"), factor=trips)

        _apply(module, build, "unrolling host loops")
        # A loop unrolled by its trip count is left as a one-iteration loop: canonicalization
        # inlines its body (and folds the now constant induction variables into the views).
        run_pipeline(module, "builtin.module(canonicalize,cse)", "cleanup after unrolling")
        total += len(found)
    _strip(module, (_LOOP_TAG,))
    return total


def _same_view(a: ir.Value, b: ir.Value) -> bool:
    """Whether two memrefs are the same elements of the same buffer: one root (`_root_memref`)
    and one type whose layout (offset and strides) is static."""
    if a.type != b.type or _root_memref(a) != _root_memref(b):
        return False
    strides, offset = ir.MemRefType(a.type).get_strides_and_offset()
    return not ir.ShapedType.is_dynamic_size(offset) and not any(ir.ShapedType.is_dynamic_size(x) for x in strides)


def _host_copies_to_kernels(module: ir.Module, device: GpuDevice) -> int:
    """Turn each host-side `memref.copy` that involves a strided view (what bufferization
    inserts when a value must be copied out of or into part of a buffer, e.g. a Concat result
    that is a graph output and is read again) into a copy kernel: `linalg.copy` on the buffers,
    tiled to workgroups and threads with the elementwise plan (`plan_kernel`). The host side of
    a GPU program only copies whole identity-layout buffers (`host.py`). Copies with dynamic
    shapes are left alone (the host refuses them, naming the op). A copy of a view onto the
    same view (same buffer and static layout, `_same_view`) is dropped: it moves nothing, and
    it cost a kernel per padded convolution."""
    from mlir.dialects import linalg

    def wanted(op: ir.Operation) -> bool:
        if op.name != "memref.copy" or op.parent.name != "func.func":
            return False
        types = [ir.MemRefType(v.type) for v in op.operands]
        if not all(t.has_static_shape and t.rank > 0 for t in types) or 0 in list(types[0].shape):
            return False
        return not all(_identity_layout(t) for t in types)

    found = []
    for op in collect(module.operation, wanted):
        if _same_view(op.operands[0], op.operands[1]):
            op.erase()  # a copy of a view onto itself (bufferization of an in-place insert): no work
        else:
            found.append(op)
    plans: list[KernelPlan] = []
    for i, op in enumerate(found):
        shape = list(ir.MemRefType(op.operands[0].type).shape)
        plans.append(plan_kernel(shape, ["parallel"] * len(shape), False, device))
        with ir.InsertionPoint(op), op.location:
            copied = linalg.CopyOp([], [op.operands[0]], [op.operands[1]])
            linalg.fill_builtin_region(copied.operation)  # the yield of the input element
        copied.operation.attributes[f"{_COPY_TAG}_host_{i}"] = ir.UnitAttr.get()
        op.erase()
    if not found:
        return 0

    def build(root: ir.Value) -> None:
        for i, plan in enumerate(plans):
            op = _unit_attr_match(root, f"{_COPY_TAG}_host_{i}")
            n_block = sum(1 for b in plan.block_tiles if b)
            tiled = structured.TileUsingForallOp(_any_op(), _any_op(), op, tile_sizes=list(plan.block_tiles), mapping=_mapping("block", n_block))
            n_thread = sum(1 for t in plan.threads if t)
            structured.TileUsingForallOp(_any_op(), _any_op(), tiled.tiled_op, num_threads=list(plan.threads), mapping=_mapping("thread", n_thread))

    _apply(module, build, "mapping host copies to kernels")
    return len(found)


def _one_use_per_empty(module: ir.Module) -> int:
    """Clone every `tensor.empty` with several uses (CSE merges equal ones) so that each use has
    its own: two Concats (insert_slice chains) into one shared empty tensor made bufferization
    copy one chain's partial result through a strided view on the host, which the host side of
    a GPU program does not run. An empty tensor has no contents, so nothing changes but that."""
    count = 0
    for op in collect(module.operation, lambda op: op.name == "tensor.empty"):
        for use in list(op.results[0].uses)[1:]:
            clone = op.clone(ir.InsertionPoint(op))
            use.owner.operands[use.operand_number] = clone.results[0]
            count += 1
    return count


def _copy_host_slices(module: ir.Module) -> int:
    """Give each statically sized `tensor.extract_slice` on the host side (the function or its
    loops, whose induction variables give the offsets until `_unroll_host_loops`) used by
    something other than a linalg op (a function result, a reshape) a `linalg.copy` into a fresh
    tensor, used there instead.

    Why: such a slice bufferizes to a strided subview that the host must copy (a returned Split
    output becomes `memref.copy` into an identity-layout result) or reshape, and the host side
    of a GPU program runs no copies (`host.py` refuses them). The copy is a root op like any
    other: one copy kernel. Linalg consumers read the subview directly and need no copy."""
    from mlir.dialects import linalg, tensor

    def host_level(op: ir.Operation) -> bool:  # in the function or its loops, not in a kernel
        parent = op.parent
        while parent.name == "scf.for":
            parent = parent.parent
        return parent.name == "func.func"

    found = collect(module.operation, lambda op: op.name == "tensor.extract_slice" and host_level(op))
    count = 0
    for op in found:
        view = op.opview
        src = ir.RankedTensorType(view.source.type)
        res = ir.RankedTensorType(op.results[0].type)
        if res.rank == 0 and src.rank > 0 and not len(view.sizes) and not len(view.strides):
            # A rank-reducing slice to a scalar (x[3] as tensor<f32>) would be a rank-0 view at
            # an offset, which the SPIR-V lowering reads at offset 0 (host.py refuses it): take
            # the unreduced [1, .., 1] slice, copy it with a kernel, and collapse the copy.
            with ir.InsertionPoint(op), op.location:
                unit = ir.RankedTensorType.get([1] * src.rank, res.element_type)
                whole = tensor.ExtractSliceOp(unit, view.source, list(view.offsets), [], [], view.static_offsets, view.static_sizes, view.static_strides).result
                copied = linalg.copy(whole, outs=[tensor.EmptyOp([1] * src.rank, res.element_type).result])
                scalar = tensor.CollapseShapeOp(res, copied, []).result
            op.results[0].replace_all_uses_with(scalar)
            op.erase()
            count += 1
            continue
        if len(view.sizes) or len(view.strides) or not ir.RankedTensorType(op.results[0].type).has_static_shape:
            continue  # dynamic sizes: refused on the host side with the op named
        uses = [u for u in op.results[0].uses if not u.owner.name.startswith("linalg.")]
        if not uses:
            continue
        t = ir.RankedTensorType(op.results[0].type)
        with ir.InsertionPoint.after(op), op.location:
            empty = tensor.EmptyOp(t.shape, t.element_type).result
            copied = linalg.copy(op.results[0], outs=[empty])
        for use in uses:
            use.owner.operands[use.operand_number] = copied
        count += 1
    return count


def _build_tree_reduction(tiled: ir.Value, fused_fills: list[ir.Value], plan: KernelPlan) -> None:
    """Inside one workgroup: `tile_reduction_using_forall` splits the reduced loop over
    `plan.tree_threads` threads (thread x), each writing one partial result; the partials' fill
    is fused into that forall (each thread initializes its own slot, so no thread can overwrite
    another's partial); the combining op runs on one thread (a one-iteration forall on thread
    x), after the barrier `map_nested_forall_to_threads` puts after every thread loop, with the
    output's fill fused into it. The partials live in workgroup memory
    (`_partials_to_workgroup_memory`)."""
    n_loops = len(plan.block_tiles)
    red = structured.TileReductionUsingForallOp(
        [_any_op()], _any_op(), _any_op(), _any_op(), tiled,
        num_threads=[0] * (n_loops - 1) + [plan.tree_threads], mapping=_mapping("thread", 1),
    )
    structured.FuseIntoContainingOp(_any_op(), _any_op(), red.fill_op[0], red.forall_op)
    n_par = n_loops - 1
    combine = structured.TileUsingForallOp(
        _any_op(), _any_op(), red.combining_op, num_threads=[1] * n_par, mapping=_mapping("thread", min(n_par, 3)) if n_par <= 3 else None,
    )
    for f in fused_fills:
        structured.FuseIntoContainingOp(_any_op(), _any_op(), f, combine.forall_op)


def _parent_forall_kind(op: ir.Operation) -> str | None:
    """'block' or 'thread' for the innermost enclosing mapped scf.forall, else None."""
    parent = op.parent
    while parent is not None and getattr(parent, "name", None) != "func.func":
        if parent.name == "scf.forall" and "mapping" in parent.attributes:
            return "thread" if _maps_threads(parent.attributes["mapping"]) else "block"
        parent = parent.parent
    return None


def _partials_to_workgroup_memory(module: ir.Module) -> int:
    """Give each thread forall inside a workgroup (block forall) whose shared output is a
    `tensor.empty` its own `bufferization.alloc_tensor` in `#gpu.address_space<workgroup>`, just
    before it: the tree reductions' partial results, which all threads of the workgroup must
    see. Per use, wherever the empty is defined: canonicalization and CSE can leave one empty
    outside the block forall serving several kernels' partials (BERT-base's projections, whose
    partials have one shape), and bufferization then allocated it in global memory inside the
    kernel, which neither GPU lowering accepts. A `tensor.empty` has no contents, so replacing
    one use leaves the others as they were."""
    from mlir.dialects import bufferization

    threads = collect(
        module.operation,
        lambda op: op.name == "scf.forall" and "mapping" in op.attributes and _maps_threads(op.attributes["mapping"]) and _parent_forall_kind(op) == "block",
    )
    space = ir.Attribute.parse("#gpu.address_space<workgroup>")
    count = 0
    replaced: list[ir.Operation] = []
    for forall in threads:
        n_shared = len(forall.results)
        first_shared = len(forall.operands) - n_shared  # bounds and steps come first
        for i in range(first_shared, len(forall.operands)):
            empty = defining_op(forall.operands[i])
            if empty is None or empty.name != "tensor.empty" or len(empty.operands):
                continue
            with ir.InsertionPoint(forall), empty.location:
                alloc = bufferization.AllocTensorOp(empty.results[0].type, [], memory_space=space)
            forall.operands[i] = alloc.result
            replaced.append(empty)
            count += 1
    for empty in {op: None for op in replaced}:  # once each, those no use is left to
        if not list(empty.results[0].uses):
            empty.erase()
    return count


def _thread_allocs_to_private(module: ir.Module) -> int:
    """Turn each `memref.alloc` that bufferization put inside a thread-mapped forall (a
    per-thread temporary, e.g. the unused value result of an argmax) into a `memref.alloca`:
    private memory of that thread (registers or local memory), which both GPU lowerings accept,
    where a global-memory alloc inside a kernel is lowered by neither."""
    from mlir.dialects import memref

    found = collect(module.operation, lambda op: op.name == "memref.alloc" and _parent_forall_kind(op) == "thread")
    for op in found:
        t = ir.MemRefType(op.results[0].type)
        if len(op.operands) or t.memory_space is not None:
            raise GpuMappingError(f"{op.location}: a per-thread buffer of type {t} is not supported")
        with ir.InsertionPoint(op), op.location:
            alloca = memref.AllocaOp(t, [], [])
        op.results[0].replace_all_uses_with(alloca.result)
        op.erase()
    return len(found)


#: The largest thread output tile (elements) `_full_tile_versions` gives a static twin: a
#: register tile (4x4 on CUDA and vulkan_cpu), not a whole row a thread loops over.
MAX_VERSIONED_TILE = 64


def _static_bound(v: ir.Value) -> int | None:
    """A static upper bound of an index value that tiling computed: a constant, or an
    `affine.min` (the smallest bound among its results) / `affine.max` (the largest) over
    constants, operands with bounds, their sums, and their products and quotients by positive
    constants (tiling's `size ceildiv threads`); None when none is known."""
    if (c := _constant_index(v)) is not None:
        return c
    op = defining_op(v)
    if op is None or op.name not in ("affine.min", "affine.max"):
        return None
    amap = ir.AffineMapAttr(op.attributes["map"]).value
    operands = list(op.operands)

    def bound(e: ir.AffineExpr) -> int | None:
        if isinstance(e, ir.AffineConstantExpr):
            return e.value
        if isinstance(e, ir.AffineDimExpr):
            return _static_bound(operands[e.position])
        if isinstance(e, ir.AffineSymbolExpr):
            return _static_bound(operands[amap.n_dims + e.position])
        if isinstance(e, ir.AffineAddExpr):
            lhs, rhs = bound(e.lhs), bound(e.rhs)
            return None if lhs is None or rhs is None else lhs + rhs
        if isinstance(e, (ir.AffineMulExpr, ir.AffineCeilDivExpr, ir.AffineFloorDivExpr)) and isinstance(e.rhs, ir.AffineConstantExpr):
            # Monotone in the left side for a positive constant (tiling's `size ceildiv threads`).
            lhs, c = bound(e.lhs), e.rhs.value
            if lhs is None or c <= 0:
                return None
            return lhs * c if isinstance(e, ir.AffineMulExpr) else -(-lhs // c) if isinstance(e, ir.AffineCeilDivExpr) else lhs // c
        return None

    bounds = [bound(e) for e in amap.results]
    if op.name == "affine.min":
        known = [b for b in bounds if b is not None]
        return min(known) if known else None
    return None if any(b is None for b in bounds) else max(bounds)  # type: ignore[type-var]


def _full_tile_versions(module: ir.Module) -> int:
    """Give each thread's reduction (a register tile of a contraction whose matrix is not a
    whole number of tiles) a twin with static shapes, taken when the thread's tile is whole:
    `scf.if (every size == its bound) { the op on static subviews } else { the op }`.

    Why: when a loop's extent is not a multiple of the workgroup tile (GPT-2's 50257 logits),
    tiling gives every workgroup and thread `affine.min` sizes, dynamic in the IR although all
    tiles but the last are whole: no thread's accumulator could then stay in registers
    (`_private_accumulators` needs a static shape) and its loops could not be unrolled. GPT-2's
    LM head ran at 0.6 GFLOP/s on lavapipe where the same GEMM with 50176 columns ran at 4.8.
    The twin has the static shapes; the partial tiles at the edge take the original. Only
    tiles of at most `MAX_VERSIONED_TILE` outputs, whose every dynamic size has a static bound
    (`_static_bound`) from a `memref.subview`."""
    from mlir.dialects import arith, memref, scf

    def wanted(op: ir.Operation) -> bool:
        if op.name != "linalg.generic" or _parent_forall_kind(op) != "thread" or "reduction" not in _iterators(op):
            return False
        return any(isinstance(v.type, ir.MemRefType) and not ir.MemRefType(v.type).has_static_shape for v in op.operands)

    count = 0
    for op in collect(module.operation, wanted):
        checks: list[tuple[ir.Value, int]] = []  # (dynamic size, its bound)
        static_types: list[ir.Type | None] = []
        ok = True
        for v in op.operands:
            t = v.type
            if not isinstance(t, ir.MemRefType) or ir.MemRefType(t).has_static_shape:
                static_types.append(None)
                continue
            t = ir.MemRefType(t)
            view = defining_op(v)
            if view is None or view.name != "memref.subview" or len(list(ir.DenseI64ArrayAttr(view.attributes["static_sizes"]))) != t.rank:
                ok = False
                break
            sizes = list(view.opview.sizes)
            shape = list(t.shape)
            for d in range(t.rank):
                if t.is_dynamic_dim(d):
                    size = sizes.pop(0)
                    b = _static_bound(size)
                    if b is None or b <= 0:
                        ok = False
                        break
                    shape[d] = b
                    checks.append((size, b))
            if not ok:
                break
            static_types.append(ir.MemRefType.get(shape, t.element_type, t.layout, t.memory_space))
        outs = list(op.opview.outputs)
        if not ok or not outs or any(math.prod(ir.MemRefType(st).shape) > MAX_VERSIONED_TILE
                                     for st, v in zip(static_types, op.operands) if st is not None and v in outs):
            continue
        with ir.InsertionPoint(op), op.location:
            cond = None
            for size, b in checks:
                eq = arith.CmpIOp(arith.CmpIPredicate.eq, size, _index_const(b)).result
                cond = eq if cond is None else arith.AndIOp(cond, eq).result
            branch = scf.IfOp(cond, [], has_else=True)
        with ir.InsertionPoint(branch.then_block), op.location:
            # The same subviews with their sizes static (a memref.cast to static sizes would be
            # folded away by canonicalization, and the loops would read the dynamic sizes).
            views = []
            for st, v in zip(static_types, op.operands):
                if st is None:
                    views.append(v)
                    continue
                sub = defining_op(v)
                views.append(memref.SubViewOp(
                    st, sub.operands[0], list(sub.opview.offsets), [], list(sub.opview.strides),
                    sub.attributes["static_offsets"], ir.DenseI64ArrayAttr.get(ir.MemRefType(st).shape), sub.attributes["static_strides"],
                ).result)
            twin = op.clone()
            for k, view in enumerate(views):
                twin.operands[k] = view
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block), op.location:
            scf.YieldOp([])
        op.move_before(branch.else_block.operations[0])
        count += 1
    return count


def _private_accumulators(module: ir.Module) -> int:
    """Accumulate each thread's reduction in private memory: a `linalg.generic` with a
    reduction loop inside a thread forall whose (statically shaped) output is a view of global
    memory gets a `memref.alloca` of that shape, copied in before and out after it. Without it
    every step of the reduction loop (a matmul's or a convolution's K loop) loads and stores its
    accumulator in global memory; a private buffer with constant indices becomes registers
    (LLVM's SROA on NVVM, the driver's compiler for SPIR-V Function variables)."""
    from mlir.dialects import linalg, memref

    def wanted(op: ir.Operation) -> bool:
        if op.name != "linalg.generic" or _parent_forall_kind(op) != "thread" or "reduction" not in _iterators(op):
            return False
        outs = list(op.opview.outputs)
        return all(isinstance(o.type, ir.MemRefType) and ir.MemRefType(o.type).has_static_shape and ir.MemRefType(o.type).memory_space is None for o in outs)

    found = collect(module.operation, wanted)
    for op in found:
        n_in = len(op.opview.inputs)
        for k, out in enumerate(list(op.opview.outputs)):
            t = ir.MemRefType(out.type)
            with ir.InsertionPoint(op), op.location:
                acc = memref.AllocaOp(ir.MemRefType.get(t.shape, t.element_type), [], []).result
                linalg.copy(out, outs=[acc])
            op.operands[n_in + k] = acc
            after = op.opview.operation
            with ir.InsertionPoint.after(after), op.location:
                linalg.copy(acc, outs=[out])
    return len(found)


def _root_memref(v: ir.Value) -> ir.Value:
    """The buffer a memref value views: through subviews, reshapes and casts to the kernel
    argument or allocation it starts from."""
    while (op := defining_op(v)) is not None and op.name in _VIEW_OPS:
        v = op.operands[0]
    return v


_VIEW_OPS = ("memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast", "memref.reinterpret_cast")


def _defined_outside(v: ir.Value, loop: ir.Operation) -> bool:
    """Whether `v` is defined outside `loop` (an op result or block argument not inside it)."""
    op = defining_op(v)
    if op is None:
        op = v.owner.owner  # a block argument: the op whose region holds its block
    while op is not None:
        op = op.operation
        if op == loop:
            return False
        op = op.parent
    return True


def _hoist_private_accumulators(module: ir.Module) -> int:
    """Keep a thread's private accumulator (`_private_accumulators`) in registers across the K
    loop of a promoted contraction: after mapping, each K-step copied the thread's output tile
    from global memory into its `memref.alloca`, accumulated one step into it and copied it back
    (a global load and store of the whole register tile per K-step: 8 values every 32 FMAs of
    a 2x4 tile). When the alloca, its copy-in and copy-out sit directly in an `scf.for` whose
    body touches the output buffer nowhere else and the tile's view is defined outside the loop,
    the alloca and copy-in move before the loop and the copy-out after it: the same values,
    loaded once and stored once. An accumulator under a guard (`scf.if`, partial thread tiles)
    is left where it is."""
    from mlir.dialects import linalg

    moved = 0
    for alloca in collect(module.operation, lambda op: op.name == "memref.alloca"):
        loop = alloca.parent.operation if alloca.parent is not None else None
        if loop is None or loop.name != "scf.for":
            continue
        acc = alloca.results[0]
        users = [u.owner.operation for u in acc.uses]
        copies_in = [u for u in users if u.name == "linalg.copy" and u.operands[1] == acc]
        copies_out = [u for u in users if u.name == "linalg.copy" and u.operands[0] == acc]
        if len(copies_in) != 1 or len(copies_out) != 1:
            continue
        copy_in, copy_out = copies_in[0], copies_out[0]
        view = copy_in.operands[0]
        if copy_out.operands[1] != view or copy_in.parent.operation != loop or copy_out.parent.operation != loop or not _defined_outside(view, loop):
            continue
        if any(u.name != "linalg.generic" for u in users if u not in (copy_in, copy_out)):
            continue
        root = _root_memref(view)
        others = collect(loop, lambda op: op not in (copy_in, copy_out) and any(
            isinstance(v.type, ir.MemRefType) and _root_memref(v) == root for v in op.operands))
        if any(o.name not in _VIEW_OPS for o in others):
            continue  # something else in the loop reads or writes the output buffer
        alloca.move_before(loop)
        copy_in.move_before(loop)
        copy_out.move_after(loop)
        moved += 1
    return moved


def _reductions_outermost(module: ir.Module) -> int:
    """Put the reduction loops of each private-accumulator generic (a thread's register tile,
    `_private_accumulators`) outermost: `convert-linalg-to-loops` nests loops in iterator
    order, so a matmul tile ran a whole K loop per output element, loading its A row and B
    column again for each (two loads per FMA); with K outermost each step loads the tile's A
    column and B row once and the fully unrolled (static, small) m and n loops reuse them
    (2x4 tile: 6 loads per 8 FMAs). A permutation of the loops and of every indexing map's
    dims; bodies that read `linalg.index` are left alone (their index order would change)."""
    count = 0
    for op in collect(module.operation, lambda op: op.name == "linalg.generic"):
        outs = list(op.opview.outputs)
        if not outs or not all((d := defining_op(o)) is not None and d.name == "memref.alloca" for o in outs):
            continue
        iterators = _iterators(op)
        if "reduction" not in iterators or iterators[0] == "reduction":
            continue
        if collect(op, lambda o: o.name == "linalg.index"):
            continue
        n = len(iterators)
        perm = [i for i, it in enumerate(iterators) if it == "reduction"] + [i for i, it in enumerate(iterators) if it != "reduction"]
        inverse = [0] * n
        for new, old in enumerate(perm):
            inverse[old] = new
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        # Old loop j is new loop inverse[j]: each result expression (a dim, or a convolution's
        # `h + kh`) has its dims renamed by composing with that map.
        to_new = ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(inverse[j]) for j in range(n)])
        renamed = [ir.AffineMap.get(n, m.n_symbols, [e.compose(to_new) for e in m.results]) for m in maps]
        op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in renamed])
        kinds = list(ir.ArrayAttr(op.attributes["iterator_types"]))
        op.attributes["iterator_types"] = ir.ArrayAttr.get([kinds[old] for old in perm])
        count += 1
    return count


def workgroup_allocs_to_attributions(module: ir.Module) -> int:
    """Turn `memref.alloc` of workgroup memory inside kernels into workgroup attributions of
    the `gpu.func`, which the NVVM lowering turns into shared memory (it does not lower an alloc
    in that address space). The SPIR-V lowering wants the opposite: it converts such allocs to
    Workgroup variables and fails on attributions, so only the CUDA target calls this."""
    count = 0
    for gmod in module.body.operations:
        if gmod.operation.name != "gpu.module":
            continue
        for func in gmod.operation.regions[0].blocks[0].operations:
            func = func.operation
            if func.name != "gpu.func":
                continue
            entry = func.regions[0].blocks[0]
            allocs = collect(func, lambda op: op.name == "memref.alloc" and _is_workgroup_memory(op.results[0].type))
            for alloc in allocs:
                if len(alloc.operands):
                    raise GpuMappingError(f"{alloc.location}: a dynamically sized workgroup buffer")
                arg = entry.add_argument(alloc.results[0].type, alloc.location)
                alloc.results[0].replace_all_uses_with(arg)
                alloc.erase()
                n = ir.IntegerAttr(func.attributes["workgroup_attributions"]).value if "workgroup_attributions" in func.attributes else 0
                func.attributes["workgroup_attributions"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), n + 1)
                count += 1
    return count


def _add_unit_parallel_loop(op: ir.Operation, collapse: bool = True) -> ir.Operation:
    """Rebuild a `linalg.generic` that has no parallel loop (a reduction to a scalar: ReduceMax
    over every axis, a 1-D dot product) with a leading parallel loop of extent 1, its outputs
    expanded by a unit dim and (with `collapse`) its results collapsed back, so that it has a
    loop to map to workgroups (one workgroup; the tree reduction splits its innermost reduction
    loop). A loop-free fill that initializes one of its outputs is rebuilt the same way, without
    the collapse, so that it stays the direct producer of the init (and is fused)."""
    from mlir.dialects import linalg, tensor

    view = op.opview
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    n = maps[0].n_dims
    n_in = len(view.inputs)
    dead: list[ir.Operation] = []
    with ir.InsertionPoint(op), op.location:

        def shifted(m: ir.AffineMap, lead: bool) -> ir.Attribute:
            exprs = [e.shift_dims(n, 1) for e in m.results]
            return ir.AffineMapAttr.get(ir.AffineMap.get(n + 1, m.n_symbols, ([ir.AffineDimExpr.get(0)] if lead else []) + exprs))

        new_maps = [shifted(m, i >= n_in) for i, m in enumerate(maps)]
        outs, types = [], []
        for init in view.outputs:
            t = ir.RankedTensorType(init.type)
            wide = ir.RankedTensorType.get([1] + list(t.shape), t.element_type)
            assoc = [[0, 1]] + [[i + 1] for i in range(1, t.rank)] if t.rank else []
            producer = init.owner
            producer = getattr(producer, "operation", producer)
            if (
                isinstance(producer, ir.Operation)
                and producer.name == "linalg.generic"
                and not _iterators(producer)
                and len(list(init.uses)) == 1
            ):
                outs.append(_add_unit_parallel_loop(producer, collapse=False).results[0])
                dead.append(producer)
            else:
                outs.append(tensor.ExpandShapeOp(wide, init, assoc, [], [1] + list(t.shape)).result)
            types.append((wide, t, assoc))
        iterators = [ir.Attribute.parse("#linalg.iterator_type<parallel>")] + list(ir.ArrayAttr(op.attributes["iterator_types"]))
        new = linalg.GenericOp([w for w, _, _ in types], list(view.inputs), outs, ir.ArrayAttr.get(new_maps), ir.ArrayAttr.get(iterators))
        op.regions[0].blocks[0].append_to(new.regions[0])
        # The body's loop positions (`linalg.index d`: a gather by position fused into the
        # reduction, NLL loss's weighted mean) move up by the leading loop; left as they were,
        # they read the unit loop (always 0) and every row but the first was wrong.
        i64 = ir.IntegerType.get_signless(64)
        for index in collect(new.operation, lambda o: o.name == "linalg.index"):
            index.attributes["dim"] = ir.IntegerAttr.get(i64, ir.IntegerAttr(index.attributes["dim"]).value + 1)
        if collapse:
            for old_result, new_result, (wide, t, assoc) in zip(op.results, new.results, types):
                old_result.replace_all_uses_with(tensor.CollapseShapeOp(t, new_result, assoc).result)
    if collapse:
        op.erase()
        for d in dead:
            d.erase()
    return new.operation


def _drop_empty_ops(module: ir.Module) -> int:
    """Replace every linalg op with an empty operand (a dim of size 0) by its output operands:
    with an empty parallel loop its output is empty, with an empty reduction loop the result is
    the init (the reduction's neutral value, from its fill). Tiling an empty loop would assert in
    MLIR's slice computation, killing the process, and there is nothing to compute anyway."""
    count = 0
    for op in reversed(_linalg_ops(module)):  # consumers first: their fills may be empty too
        shapes = [v.type for v in list(op.operands) + list(op.results) if isinstance(v.type, ir.ShapedType)]
        if not any(t.has_rank and 0 in list(t.shape) for t in shapes):
            continue
        outs = list(op.opview.outputs)
        for result, init in zip(op.results, outs):
            result.replace_all_uses_with(init)
        op.erase()
        count += 1
    return count


def _one_consumer_per_fill(module: ir.Module) -> int:
    """Clone every init-only `linalg.fill` used by several ops (CSE merges equal fills), so that
    each fill is fused into exactly one kernel: a fill shared by two kernels would be cloned by
    the first fusion with its tags, and the second fusion would then match both copies."""
    count = 0
    for op in _linalg_ops(module):
        if not _is_init_only_fill(op):
            continue
        for use in list(op.results[0].uses)[1:]:
            clone = op.clone(ir.InsertionPoint(op))
            use.owner.operands[use.operand_number] = clone.results[0]
            count += 1
    return count


def _tile_to_blocks_and_threads(module: ir.Module, device: GpuDevice, mma_types: frozenset[str] = frozenset()) -> int:
    """Tag roots and fills, plan each root, and run the tensor-level tiling script (step 3)."""
    _drop_empty_ops(module)
    _one_consumer_per_fill(module)
    # Generalization drops discardable attributes, so each op's kind is read before it and
    # matched after it by position (the pass rewrites ops in place, keeping their order).
    before = _linalg_ops(module)
    kinds = [(op.name in _CONTRACTIONS or _is_plain_contraction(op), _is_init_only_fill(op)) for op in before]
    convs = [_conv_loops(op) for op, (_, fill) in zip(before, kinds) if not fill]
    names = [op.name for op in before]
    run_pipeline(module, "builtin.module(func.func(linalg-generalize-named-ops))", "generalization")
    after = _linalg_ops(module)
    if len(after) != len(before):
        raise GpuMappingError("GPU mapping: generalization changed the number of linalg ops")
    for op, (_, fill) in zip(after, kinds):  # a rebuilt op takes its predecessor's place
        if not fill and op.name == "linalg.generic" and not any(it == "parallel" for it in _iterators(op)):
            _add_unit_parallel_loop(op)  # (fills of scalars are fused into their consumer)
    after = _linalg_ops(module)
    plans: list[KernelPlan] = []
    fills: list[list[int]] = []
    roots = [op for op, (_, fill) in zip(after, kinds) if not fill]
    all_fills = [op for op, (_, fill) in zip(after, kinds) if fill]
    contraction = [c for c, fill in kinds if not fill]
    root_names = [n for n, (_, fill) in zip(names, kinds) if not fill]
    for i, op in enumerate(roots):
        if op.name != "linalg.generic":
            raise GpuMappingError(f"{op.location}: {op.name} is not mapped to the GPU")
        extents = _loop_extents(op)  # its errors name the op's location already
        widest = max((_element_bytes(v.type) for v in op.opview.inputs), default=4)
        try:
            mma = _mma_plan(op, root_names[i], extents, device, mma_types) if contraction[i] else None
            conv = conv_plan(extents, _iterators(op), *convs[i], device) if convs[i] else None
            plans.append(mma or conv or plan_kernel(extents, _iterators(op), contraction[i], device, _is_simple_reduction(op), widest))
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
            if plan.tree_threads:
                _build_tree_reduction(tiled.tiled_op, fused, plan)
                continue
            if plan.k_tile:
                # The K loop (scf.for) inside the workgroup; the fill stays before it, on its
                # own thread loop, and the step's tiled op is tiled to threads after promotion.
                sizes = [0] * (len(plan.block_tiles) - 1) + [plan.k_tile]
                structured.TileUsingForOp([_any_op()], tiled.tiled_op, sizes=sizes)
                out_threads = _output_threads(roots[i], plan)
                for f in fused:
                    structured.TileUsingForallOp(_any_op(), _any_op(), f, num_threads=out_threads, mapping=_mapping("thread", sum(1 for t in out_threads if t)))
                continue
            n_thread = sum(1 for t in plan.threads if t)
            per_thread = structured.TileUsingForallOp(_any_op(), _any_op(), tiled.tiled_op, num_threads=list(plan.threads), mapping=_mapping("thread", n_thread))
            for f in fused:
                structured.FuseIntoContainingOp(_any_op(), _any_op(), f, per_thread.forall_op)

    # Each root with its fills in a private function of its own while the script runs, so that
    # every fusion's cost stays that of one kernel (`_outline_kernels`), then inlined back.
    _outline_kernels(module, [[all_fills[j] for j in fills[i]] + [op] for i, op in enumerate(roots)])
    _apply(module, build, "tiling to workgroups and threads")
    _inline_kernels(module)
    promoted = [i for i, plan in enumerate(plans) if plan.k_tile]
    if promoted:
        steps = _tagged(module, [f"{_ROOT_TAG}_{i}" for i in promoted])
        copies = {i: _promote_operands(steps[f"{_ROOT_TAG}_{i}"], f"{_COPY_TAG}_{i}", plans[i]) for i in promoted}

        def build_threads(root: ir.Value) -> None:
            for i in promoted:
                plan = plans[i]
                n_thread = sum(1 for t in plan.threads if t)
                op = _unit_attr_match(root, f"{_ROOT_TAG}_{i}")
                if plan.mma:
                    _build_mma_step(op, plan)
                else:
                    structured.TileUsingForallOp(_any_op(), _any_op(), op, num_threads=list(plan.threads), mapping=_mapping("thread", n_thread))
                for j, threads in enumerate(copies[i]):
                    # Chunks of the workgroup's shape (a sequential loop), one element of a
                    # chunk per thread: neighbouring threads x read neighbouring elements of a
                    # row (coalesced), and each thread's code is a single guarded load/store.
                    copy = _unit_attr_match(root, f"{_COPY_TAG}_{i}_{j}")
                    chunks = structured.TileUsingForOp([_any_op()] * sum(1 for t in threads if t), copy, sizes=threads)
                    structured.TileUsingForallOp(_any_op(), _any_op(), chunks.tiled_linalg_op, num_threads=threads, mapping=_mapping("thread", sum(1 for t in threads if t)))
                    # Only the last copy of a step needs a barrier after it (see _one_barrier_per_copy).
                    transform.AnnotateOp(chunks.loops[0], _COPY_LOOP_TAG if j == len(copies[i]) - 1 else _COPY_LOOP_NO_BARRIER_TAG)

        _apply(module, build_threads, "tiling promoted contractions to threads")
    return len(plans)


def _outline_kernels(module: ir.Module, groups: Sequence[Sequence[ir.Operation]]) -> None:
    """Move each group of ops (a root and the fills that initialize it, in block order, the
    root last) into a private `func.func` of its own, called where the root was; the values
    they use from outside (operands, and values their bodies capture) become its arguments.

    Why: `transform.structured.fuse_into_containing_op` prints the producer and the containing
    op into a diagnostic on every fusion, failed or not, and printing an op numbers every value
    of its closest isolated-from-above ancestor: in one function with every kernel the tiling
    script was quadratic in the model (BERT-base: 15 s for 300 kernels, 0.3 s without the
    fusions). Outlined, the ancestor is the kernel's own function. The caller inlines them
    back after the script (`_inline_kernels`)."""
    from mlir.dialects import func

    module_block = module.body
    for n, group in enumerate(groups):
        nested_ops = [nested for op in group for nested in collect(op, lambda o: True)]
        inside = set(nested_ops)
        external: list[ir.Value] = []
        uses: list[tuple[ir.Operation, int, int]] = []  # (op, operand index, external index)
        for nested in nested_ops:
            for k, v in enumerate(nested.operands):
                owner = v.owner.owner if isinstance(v.owner, ir.Block) else v.owner  # a block argument's op
                if getattr(owner, "operation", owner) in inside:
                    continue
                if v not in external:
                    external.append(v)
                uses.append((nested, k, external.index(v)))
        root = group[-1]
        results = list(root.results)
        name = f"{_KERNEL_FUNC}{n}"
        with ir.InsertionPoint(root), root.location:
            call = func.CallOp([r.type for r in results], ir.FlatSymbolRefAttr.get(name), external)
        for r, c in zip(results, call.results):
            r.replace_all_uses_with(c)
        with ir.InsertionPoint(module_block), root.location:
            callee = func.FuncOp(name, ([v.type for v in external], [r.type for r in results]), visibility="private")
            entry = callee.add_entry_block()
        with ir.InsertionPoint(entry), root.location:
            ret = func.ReturnOp(results)
        for op in group:
            op.move_before(ret)
        for nested, k, e in uses:
            nested.operands[k] = entry.arguments[e]


def _inline_kernels(module: ir.Module) -> None:
    """Undo `_outline_kernels`: move each kernel function's body to its call, its arguments
    replaced by the call's operands and the call's results by what it returns, then erase the
    function. By hand, not with upstream's `inline`: the affine dialect allows affine.apply
    (the tiling's offsets) to be inlined only into an affine scope, so a kernel called from a
    host loop (a recurrence's `scf.for`) stayed a call."""
    funcs = {
        ir.StringAttr(op.attributes["sym_name"]).value: op
        for op in (o.operation for o in module.body.operations)
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value.startswith(_KERNEL_FUNC)
    }
    for call in collect(module.operation, lambda op: op.name == "func.call"):
        callee = funcs.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
        if callee is None:
            continue
        entry = callee.regions[0].blocks[0]
        for arg, operand in zip(entry.arguments, call.operands):
            arg.replace_all_uses_with(operand)
        body = list(entry.operations)
        ret = body.pop()
        for op in body:
            op.move_before(call)
        for result, value in zip(call.results, ret.operands):
            result.replace_all_uses_with(value)
        call.erase()
    for callee in funcs.values():
        callee.erase()


def _element_bytes(t: ir.Type) -> int:
    """Bytes of one element of a shaped type (4 for anything narrower than a byte or unknown)."""
    if not isinstance(t, ir.ShapedType):
        return 4
    e = t.element_type
    width = e.width if isinstance(e, (ir.IntegerType, ir.FloatType)) else 32
    return max(1, width // 8)


def _output_threads(op: ir.Operation, plan: KernelPlan) -> list[int]:
    """Thread counts per output dim of a contraction (its fill's loops), from the plan's counts
    per loop through the output's indexing map."""
    out_map = ir.AffineMapAttr(list(ir.ArrayAttr(op.attributes["indexing_maps"]))[-1]).value
    return [plan.threads[ir.AffineDimExpr(e).position] for e in out_map.results]


def _tagged(module: ir.Module, tags: Sequence[str]) -> dict[str, ir.Operation]:
    """The one op carrying each of `tags` (unit attributes), found in one walk of the module
    (a walk per tag made promotion quadratic: BERT-base's 60 K-steps walked 1M ops); a tag on
    no op or on several is an internal error naming it."""
    wanted = set(tags)
    found: dict[str, list[ir.Operation]] = {t: [] for t in tags}
    for op in collect(module.operation, lambda op: any(name in wanted for name in op.attributes)):
        for name in op.attributes:  # (iterating an op's attributes gives their names)
            if name in wanted:
                found[name].append(op)
    bad = [t for t, ops in found.items() if len(ops) != 1]
    if bad:
        raise GpuMappingError(f"GPU mapping: expected one op tagged {bad[0]}, found {len(found[bad[0]])}")
    return {t: ops[0] for t, ops in found.items()}


def _promote_operands(op: ir.Operation, copy_tag: str, plan: KernelPlan) -> list[list[int]]:
    """Workgroup-memory promotion of the two inputs of one K-step of a contraction (tensor level).

    `op` (the K loop's tiled op, inside its workgroup's forall; `_tagged` finds it) reads slices
    of A and B; each becomes `linalg.copy ins(slice) outs(extract_slice(alloc_tensor))` with the
    alloc_tensor in `#gpu.address_space<workgroup>` and of the slice's static bound (block tile
    and K-step; a partial tile at the end of a loop uses the leading part), and the op reads the
    copy. Each copy is tagged `copy_tag_<j>`; the returned thread counts per copy dim (the
    workgroup's y and x counts on the copy's two innermost dims) tile it over all threads of the
    workgroup, so every thread copies a piece and `map_nested_forall_to_threads` puts a barrier
    between the copies and the compute (and after the compute, before the next step's copies).
    """
    from mlir.dialects import bufferization, linalg, tensor

    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    k_loop = len(plan.block_tiles) - 1
    bound = [plan.k_tile if d == k_loop else plan.block_tiles[d] for d in range(len(plan.block_tiles))]
    mapped = [t for t in plan.threads if t]
    ty, tx = (mapped[-2], mapped[-1]) if len(mapped) >= 2 else (1, mapped[-1])
    space = ir.Attribute.parse("#gpu.address_space<workgroup>")
    dynamic = ir.ShapedType.get_dynamic_size()
    threads: list[list[int]] = []
    for j in range(2):  # A and B
        value = op.operands[j]
        t = ir.RankedTensorType(value.type)
        dims = [ir.AffineDimExpr(e).position for e in maps[j].results]
        static = [t.shape[r] if not t.is_dynamic_dim(r) else bound[d] for r, d in enumerate(dims)]
        if any(b <= 0 for b in static):
            raise GpuMappingError(f"{op.location}: no static bound for a promoted operand of shape {t}")
        with ir.InsertionPoint(op), op.location:
            buf = bufferization.AllocTensorOp(ir.RankedTensorType.get(static, t.element_type), [], memory_space=space).result
            if t.has_static_shape:
                view = buf
            else:
                sizes = [tensor.dim(value, _index_const(r)) for r in range(t.rank) if t.is_dynamic_dim(r)]
                view = tensor.ExtractSliceOp(t, buf, [], sizes, [], [0] * t.rank, [dynamic if t.is_dynamic_dim(r) else t.shape[r] for r in range(t.rank)], [1] * t.rank).result
            copied = linalg.copy(value, outs=[view])
        copied.owner.attributes[f"{copy_tag}_{j}"] = ir.UnitAttr.get()
        op.operands[j] = copied
        threads.append([0] * (t.rank - 2) + [ty, tx] if t.rank >= 2 else [tx])
    return threads


#: Tensor-core element kinds: "f16" (f16 operands accumulated in f16: mma.sync m16n8k16) and
#: "tf32" (f32 operands rounded to tf32, accumulated in f32: m16n8k4), the two cases upstream's
#: `transform.nvgpu.rewrite_matmul_as_mma_sync` builds. tf32 changes f32 results (10 mantissa
#: bits per product), so a target enables it only when its user allows it.
MMA_TYPES: dict[str, tuple[int, int, int]] = {"f16": (16, 8, 16), "tf32": (16, 8, 4)}
#: A tensor-core workgroup: a 32x32 output tile for 2x2 warps (each 16x16: two m16n8 tiles).
_MMA_BLOCK = (32, 32)
_MMA_WARPS = (2, 2)


def _mma_plan(op: ir.Operation, name: str, extents: Sequence[int], device: GpuDevice, mma_types: frozenset[str]) -> KernelPlan | None:
    """A tensor-core plan for a 2-D `linalg.matmul` (generalized: loops m, n, k) when its element
    kinds are allowed and its shape is whole tiles, else None (the SIMT plan).

    Why whole tiles only: the upstream rewrite needs each warp's operation to be exactly one
    static m16n8kK instruction, and the workgroup's x dimension to be the 32 lanes of a warp
    (it takes the lane id from thread id x)."""
    if not mma_types or name != "linalg.matmul" or len(extents) != 3 or device.subgroup_size != 32 or not device.matmul_k_tile:
        return None
    f16, f32 = ir.F16Type.get(), ir.F32Type.get()
    elems = [ir.ShapedType(v.type).element_type for v in op.operands]
    kind = "f16" if all(e == f16 for e in elems) else "tf32" if all(e == f32 for e in elems) else None
    if kind is None or kind not in mma_types:
        return None
    m, n, k = extents
    (bm, bn), kt = _MMA_BLOCK, device.matmul_k_tile
    if m % bm or n % bn or k % kt or kt % MMA_TYPES[kind][2]:
        return None
    warps = _MMA_WARPS[0] * _MMA_WARPS[1]
    return KernelPlan((bm, bn, 0), (warps, device.subgroup_size, 0), k_tile=kt, mma=MMA_TYPES[kind], warps=_MMA_WARPS)


def _build_mma_step(op: ir.Value, plan: KernelPlan) -> None:
    """One K-step of a tensor-core contraction (transform ops): the block tile split over the
    warps (`#gpu.warp<y/x>`), each warp's tile into static mma-shaped pieces (scf.for over m, n
    and k), each piece turned back into a named `linalg.matmul` (`specialize`), which
    `_rewrite_mma` turns into nvgpu.mma.sync after bufferization."""
    # Linear warp ids (the workgroup is 32 lanes on x times warps on y, so the 3-D warp id
    # along x would always be 0), delinearized over the warp grid.
    linear = ir.ArrayAttr.get([ir.Attribute.parse(f"#gpu.warp<linear_dim_{d}>") for d in (1, 0)])
    per_warp = structured.TileUsingForallOp(_any_op(), _any_op(), op, num_threads=list(plan.warps) + [0], mapping=linear)
    pieces = structured.TileUsingForOp([_any_op()] * 3, per_warp.tiled_op, sizes=list(plan.mma))
    structured.SpecializeOp(_any_op(), pieces.tiled_linalg_op)


def _rewrite_mma(module: ir.Module) -> int:
    """Every `linalg.matmul` left in a kernel (the mma-shaped pieces of `_build_mma_step`: all
    other named ops were generalized) -> `nvgpu.mma.sync` with its lane-distributed loads and
    stores (`transform.nvgpu.rewrite_matmul_as_mma_sync`)."""
    from mlir.dialects.transform import nvgpu as tnvgpu

    count = len(collect(module.operation, lambda op: op.name == "linalg.matmul"))
    if count:

        def build(root: ir.Value) -> None:
            pieces = structured.MatchOp.match_op_names(root, ["linalg.matmul"])
            tnvgpu.RewriteMatmulAsMmaSyncOp(pieces)

        _apply(module, build, "rewriting matmuls as mma.sync")
    return count


def _drop_final_barriers(module: ir.Module) -> int:
    """Erase the `gpu.barrier`s that end a launch body (nothing but the terminator, and
    bufferization's no-op copies of a buffer onto itself, after them).
    `map_nested_forall_to_threads` syncs after every thread loop, the kernel's last one too, but
    the end of a kernel is already the end of every thread's work: no later access in the
    kernel waits on it, and the next launch starts after this one ends. On lavapipe a barrier
    also makes the whole shader run as coroutines, one per invocation."""
    count = 0
    for launch in collect(module.operation, lambda op: op.name == "gpu.launch"):
        block = launch.regions[0].blocks[-1]
        while True:
            ops = list(block.operations)
            if len(ops) < 2:
                break
            last = ops[-2]
            if last.name == "memref.copy" and last.operands[0] == last.operands[1]:
                last.erase()  # bufferization's copy of a buffer onto itself, a no-op
            elif last.name == "gpu.barrier":
                last.erase()
                count += 1
            else:
                break
    return count


def _one_barrier_per_copy(module: ir.Module) -> int:
    """Move the barriers out of each promoted copy's chunk loops: one `gpu.barrier` after the
    loop nest instead of one per chunk. `map_nested_forall_to_threads` puts a barrier after
    every thread loop, which is inside the chunk loops; chunks write disjoint parts of the
    workgroup buffer and nobody reads it until the copy ends, so only the barrier after the
    whole copy is needed (every thread runs the same chunk loops: their bounds depend on the
    workgroup only, so the barrier stays uniform). A K-step's A copy (tagged to have no
    barrier) and B copy write different buffers that nothing reads before the compute, so one
    barrier after the B copy serves both."""
    from mlir.dialects import gpu

    tags = (_COPY_LOOP_TAG, _COPY_LOOP_NO_BARRIER_TAG)
    loops = collect(module.operation, lambda op: op.name == "scf.for" and any(t in op.attributes for t in tags))
    for loop in loops:
        for barrier in collect(loop, lambda op: op.name == "gpu.barrier"):
            barrier.erase()
        if _COPY_LOOP_TAG in loop.attributes:
            with ir.InsertionPoint.after(loop), loop.location:
                gpu.BarrierOp()
        for t in tags:
            if t in loop.attributes:
                del loop.attributes[t]
    return len(loops)


def _index_const(v: int) -> ir.Value:
    """An `arith.constant` of index type (at the current insertion point)."""
    from mlir.dialects import arith

    return arith.ConstantOp(ir.IndexType.get(), v).result


def _thread_counts(forall: ir.Operation) -> list[int]:
    """The workgroup size [x, y, z] of a mapped forall: the trip counts of its thread foralls."""
    dims = [1, 1, 1]
    for op in collect(forall, lambda op: op.name == "scf.forall" and "mapping" in op.attributes and _maps_threads(op.attributes["mapping"])):
        ubs = list(ir.DenseI64ArrayAttr(op.attributes["staticUpperBound"]))
        if any(ir.ShapedType.is_dynamic_size(u) for u in ubs):
            raise GpuMappingError(f"{op.location}: a thread loop has a dynamic trip count")
        for k, ub in enumerate(reversed(ubs)):  # the innermost loop is x
            dims[k] = max(dims[k], int(ub))
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


def node_label(op: ir.Operation) -> str:
    """`node 'sn' (StringNormalizer)` from an op's `loc("sn"("StringNormalizer"))` (through
    fused and call-site locations), or "" when its location names no ONNX node."""
    from onnxc.importers.proto import location_label

    name, kind = location_label(op.location)
    return f"node '{name}'" + (f" ({kind})" if kind else "") if name else ""


def _node_words(op: ir.Operation) -> str:
    """`node_label`, or the location itself when it names no ONNX node: how a refusal names
    the model element."""
    return node_label(op) or str(op.location)


def refuse_host_runtime(module: ir.Module) -> None:
    """Refuse, naming the ONNX node, what only the CPU target's host runtime computes: calls to
    functions without a body (the string, ImageDecoder and regex helpers linked into CPU
    code) and string tensors (`onnxc.string` i64 handles at the function boundary). The GPU
    host program launches kernels and copies buffers; it has no such runtime, and without this
    check the mapping failed later with an internal IndexError on the declaration."""
    declared = {
        ir.StringAttr(op.operation.attributes["sym_name"]).value
        for op in module.body.operations
        if op.operation.name == "func.func" and not op.operation.regions[0].blocks
    }
    for func in module.body.operations:
        f = func.operation
        if f.name != "func.func" or not f.regions[0].blocks:
            continue
        fname = ir.StringAttr(f.attributes["sym_name"]).value
        calls = collect(f, lambda op: op.name == "func.call" and ir.FlatSymbolRefAttr(op.attributes["callee"]).value in declared)
        if calls:
            op = calls[0]
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            raise GpuMappingError(
                f"{_node_words(op)}: calls the CPU host runtime (@{callee}: string, image decoding or regex helpers); "
                "the GPU targets (cuda, vulkan) do not take it (compile this model for the CPU target)"
            )
        for key, what in (("arg_attrs", "input"), ("res_attrs", "output")):
            if key not in f.attributes:
                continue
            for i, attrs in enumerate(ir.ArrayAttr(f.attributes[key])):
                d = ir.DictAttr(attrs)
                if "onnxc.string" in d:
                    label = ir.StringAttr(d["onnx.name"]).value if "onnx.name" in d else f"#{i}"
                    raise GpuMappingError(
                        f"@{fname}: {what} '{label}' is a string tensor; the GPU targets (cuda, vulkan) do not take "
                        "strings (compile this model for the CPU target)"
                    )


def _kernel_key(kernel: ir.Operation) -> tuple:
    """A structural key of a `gpu.module`: equal keys mean the same kernel but for the names
    of the module and its function. Each op, in pre-order, gives its name, result types,
    attributes (by value; Attributes and Types are uniqued, so hashing them is exact) but for
    `sym_name`, its operands as numbers (values numbered in order of definition: results and
    block arguments), and the shape of its regions. Locations do not count."""
    numbers: dict[ir.Value, int] = {}
    key: list[tuple] = []

    def number(v: ir.Value) -> int:
        return numbers.setdefault(v, len(numbers))

    def visit(op: ir.Operation) -> ir.WalkResult:
        attrs = tuple((n, op.attributes[n]) for n in op.attributes if n != "sym_name")
        operands = tuple(numbers.get(v, -1) for v in op.operands)  # -1: defined outside (none expected)
        regions = []
        for region in op.regions:
            blocks = []
            for block in region.blocks:
                blocks.append(tuple((a.type, number(a)) for a in block.arguments))
            regions.append(tuple(blocks))
        key.append((op.name, tuple(r.type for r in op.results), attrs, operands, tuple(regions)))
        for r in op.results:
            number(r)
        return ir.WalkResult.ADVANCE

    kernel.walk(visit, ir.WalkOrder.PRE_ORDER)
    return tuple(key)


def dedupe_kernels(module: ir.Module) -> int:
    """Keep one `gpu.module` of each group of identical kernels (`_kernel_key`: equal but for
    their names), pointing every `gpu.launch_func` at the one kept; returns how many went.

    Why: a model repeats its layers (BERT-base: 12 encoder layers), so most of its kernels are
    copies of a dozen; each copy cost its own LLVM/NVPTX code generation (BERT-base's
    `gpu-module-to-binary` took 3.3 s), its own SPIR-V module and its own pipeline in the
    Vulkan driver."""
    def name(op: ir.Operation) -> str:
        return ir.StringAttr(op.attributes["sym_name"]).value

    kernels = [op.operation for op in module.body.operations if op.operation.name == "gpu.module"]
    kept: dict[tuple, ir.Operation] = {}
    renamed: dict[tuple[str, str], tuple[str, str]] = {}  # (module, function) -> the kept one's
    gone: list[ir.Operation] = []
    for k in kernels:
        first = kept.setdefault(_kernel_key(k), k)
        if first != k:
            # Equal keys: the same functions in the same order (their names may differ).
            for mine, theirs in zip(k.regions[0].blocks[0].operations, first.regions[0].blocks[0].operations):
                if mine.operation.name == "gpu.func":
                    renamed[(name(k), name(mine.operation))] = (name(first), name(theirs.operation))
            gone.append(k)
    if not gone:
        return 0
    for launch in collect(module.operation, lambda op: op.name == "gpu.launch_func"):
        path = list(ir.SymbolRefAttr(launch.attributes["kernel"]).value)
        if len(path) == 2 and tuple(path) in renamed:
            launch.attributes["kernel"] = ir.SymbolRefAttr.get(list(renamed[tuple(path)]))
    for k in gone:
        k.erase()
    return len(gone)


def map_to_gpu(module: ir.Module, device: GpuDevice, mma_types: frozenset[str] = frozenset()) -> ir.Module:
    """Rewrite a linalg-on-tensors `module` in place into host code + outlined GPU kernels.

    `mma_types`: the contractions that may use tensor cores (`MMA_TYPES`; CUDA only: the
    result has nvgpu.mma.sync ops, which only the NVVM lowering handles)."""
    device.validate()
    unknown = set(mma_types) - set(MMA_TYPES)
    if unknown:
        raise GpuMappingError(f"unknown tensor-core element kinds {sorted(unknown)} (known: {', '.join(MMA_TYPES)})")
    with module.context, ir.Location.unknown():
        if not module.operation.verify():
            raise GpuMappingError("the input module does not verify")
        refuse_host_runtime(module)
        strip_runtime_checks(module.operation)  # no status channel on the GPU host (runtime_checks.py)
        _counted_whiles_to_for(module)
        _unroll_host_loops(module, _slice_loop)
        _fused_elementwise(module)
        _one_use_per_empty(module)
        _insert_slices_to_copies(module)
        _copy_host_slices(module)
        try:
            _tile_to_blocks_and_threads(module, device, frozenset(mma_types))
            run_pipeline(module, "builtin.module(canonicalize,cse)", "cleanup")
            _partials_to_workgroup_memory(module)
            run_pipeline(module, BUFFERIZE_PIPELINE, "bufferization")
            _unroll_host_loops(module)
            _thread_allocs_to_private(module)
            _full_tile_versions(module)
            _private_accumulators(module)
            _host_copies_to_kernels(module, device)
            _map_to_launches(module, device)
            _one_barrier_per_copy(module)
            _drop_final_barriers(module)
            _rewrite_mma(module)
        finally:
            _strip(module, (_ROOT_TAG, _FILL_TAG, _KERNEL_TAG, _COPY_TAG, _COPY_LOOP_TAG, _COPY_LOOP_NO_BARRIER_TAG))
        run_pipeline(module, OUTLINE_PIPELINE, "kernel outlining")
        # After outlining's canonicalize/cse: a thread's output-tile view is then one value
        # defined before the K loop (mapping re-creates it inside each step).
        _hoist_private_accumulators(module)
        _reductions_outermost(module)
        dedupe_kernels(module)
    return module
