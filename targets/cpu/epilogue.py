"""Epilogue fusion: a convolution's elementwise consumer computed in the convolution's tiles.

What: ``plan_epilogues(ops, plan_of)`` finds each channels-last convolution or pooling
(``conv_plan.CONV_OPS``) whose only use is an elementwise ``linalg.generic`` over the same
iteration space (the bias add, Relu/Clip, the residual Add, BatchNormalization's scale and
shift: ``linalg-fuse-elementwise-ops`` has already merged such a chain into one generic). The
consumer becomes the root of a fused tile plan (``EpiloguePlan``): it is tiled on the
convolution's output tile (one output row, ``ow_t`` pixels x ``f_t`` channels, and the same
threads split), the convolution is fused into the innermost tile loop
(``transform.structured.fuse_into_containing_op``), and so is the op that initializes the
convolution's accumulator (the bias ``linalg.broadcast`` or a zero ``linalg.fill``). Inside
the tile the convolution is then tiled on its reduction loops, decomposed to 1-D and
vectorized as before (conv_plan.py), and the consumer's tile is vectorized on the same
``ow_t x f_t`` tile, so the accumulators go through the epilogue in registers.

Why: unfused, each of these steps was a pass over the whole output tensor. A MobileNetV2
expansion (1x1 conv 16 -> 96 channels at 112x112, then Clip) wrote the broadcast bias
(4.8 MB), read it back as the accumulator, wrote the result, then read and wrote it again for
the Clip: five passes over 4.8 MB for 38 MFLOP, twice what onnxruntime's fused kernel took
(1.48 ms against 0.78 ms for that conv + clip + the depthwise conv after it). ResNet's
bias + residual add + Relu after each conv are the same pattern. IREE fuses the same way
(consumer as the root of tile-and-fuse).

Data-tiled products (data_tiling.py) get the same treatment: the elementwise consumer of a
``linalg.unpack`` is tiled on the unpack's inner tiles (one packed m0 x n0 accumulator tile per
step) and the unpack is fused into that loop, so the product is written once, by the epilogue,
instead of unpacked to memory and read back. A grouped 1x1 convolution reshapes the unpacked
[pixels, groups, channels] to NHWC before its Relu or residual Add, which tile-and-fuse cannot
cross: ``align_unpack_epilogues`` first rebuilds such a consumer on the unpack's shape, and
``forward_masked_tiles`` passes the unpacked tile to the epilogue in registers after
vectorization (the partial tile's masked write/read pair upstream leaves in memory).

The fused sequence runs like every other plan in its own ``failures(suppress)`` sequence; when
a step fails, the ops stay tiled as far as they got and are lowered as scalar loops, which is
slow but correct. The lit test ``test/Conversion/CPU/epilogue-fusion.mlir`` shows the fused IR.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mlir import ir
from mlir.dialects import arith, linalg

from onnxc.targets.cpu.conv_plan import CONV_OPS
from onnxc.targets.cpu.pad_in_place import defining_op

if TYPE_CHECKING:
    from onnxc.targets.cpu.pipeline import TilePlan

__all__ = ["EpiloguePlan", "is_identity_map", "plan_epilogues", "epilogue_steps", "align_unpack_epilogues", "forward_masked_tiles",
           "FUSE_UNPACK_EPILOGUES", "FUSE_UNPACK_PRODUCT", "MAX_UNPACK_EPILOGUE_VALUES"]

#: Compute the elementwise consumer of a data-tiled contraction's `linalg.unpack` in the unpack's
#: tiles (`align_unpack_epilogues`, `_unpack_steps`): the product is written once, by the
#: epilogue, instead of unpacked to memory and read back. A module flag for one-process A/Bs.
#: Measured with FUSE_UNPACK_PRODUCT on against both off, one process (bench A/B), on a shared
#: 2-core AVX-512 EPYC (Zen 4) with other work running: ShuffleNet 1 thread 6.17 -> 5.56 ms
#: (B/A 1.11), 2 threads 15.1 -> 12.1 ms (1.25); the epilogue fusion alone 1.11 / 1.13, the
#: product on top of it 1.11 / 1.38 (load-inflated). BERT: identical code; ResNet-50 and
#: MobileNetV2 (only their classifier's bias add fuses) within noise (0.96-1.02). AVX2 (znver3
#: code on the same machine, epilogue fusion alone): ShuffleNet 1.01.
FUSE_UNPACK_EPILOGUES: bool = True

#: The most tile-sized values (inputs read plus ops of the body) an unpack's epilogue may have to
#: be computed in the unpack's tiles. The epilogue runs on the whole m0 x n0 register tile at
#: once, which the tile table (tiles.py) sizes at half the vector registers on every ISA, so four
#: values are about twice the register file: a Relu, a bias add, a residual add + Relu fit. A long
#: body keeps its own plan: the only one BERT has, its pooler's bias + Tanh (55 ops, on 1 x 768),
#: read 10% slower fused in a one-process A/B on a loaded machine (0.90; the rest of BERT's
#: unpacks have no elementwise consumer, so its code is otherwise unchanged).
MAX_UNPACK_EPILOGUE_VALUES: int = 4

#: A convolution with no elementwise consumer to fuse into still computes its accumulator's
#: initializer (the bias broadcast, a zero fill) in its own output tiles (`EpiloguePlan.lone`),
#: where it was a pass of its own over the whole output that the convolution then read back:
#: ShuffleNet's depthwise convolutions (BatchNormalization folded, no activation after them) and
#: MobileNetV2's linear projections. A module flag for one-process A/Bs.
LONE_INIT_FUSION: bool = True

#: Fuse the packed product (mmt4d) and its accumulator's initializer into the unpack epilogue's
#: tiles as well (only products without cache tiles: small K and N), so each accumulator tile
#: goes from the FMAs through the unpack and the epilogue in registers. A module flag for A/Bs.
FUSE_UNPACK_PRODUCT: bool = True


@dataclasses.dataclass(frozen=True)
class EpiloguePlan:
    """How a convolution and its elementwise consumer are tiled together.

    producer: the convolution's own plan (conv_plan.py): its first ``rank`` tile sizes and thread
        counts are the output tile the consumer is tiled on, the rest tile the reductions.
    operand: the consumer's operand the convolution's result feeds.
    init_operand: the convolution's operand that holds its accumulator's initial value.
    fuse_init: whether that operand is computed by a linalg op (fill/broadcast) fused as well.
    rank: the rank of the convolution's result (its parallel loops come first).
    """

    producer: "TilePlan"
    operand: int
    init_operand: int
    fuse_init: bool
    rank: int
    # A `linalg.unpack` producer (data tiling's result) instead of a convolution: the consumer is
    # tiled on the unpack's inner tiles, split over threads by `unpack_forall` (a whole number of
    # inner tiles per thread, 0 = loop not split; None: one thread), see `_unpack_steps`.
    unpack: bool = False
    unpack_forall: tuple[int, ...] | None = None
    # The packed product (the mmt4d the unpack reads) fused into the same tiles (its own plan: its
    # reduction tile and vector sizes), and whether its accumulator's initializer is fused too.
    product: "TilePlan | None" = None
    product_init: bool = False
    # No consumer: the convolution is the root of its own plan and only its initializer is
    # fused into its tiles (``operand`` unused; see `LONE_INIT_FUSION`).
    lone: bool = False


def _single_use(value: ir.Value) -> ir.OpOperand | None:
    uses = list(value.uses)
    return uses[0] if len(uses) == 1 else None


def is_identity_map(attr: ir.Attribute, shape: Sequence[int]) -> bool:
    """Whether an indexing map reads dim i at loop i for every i: ``(d0, .., dn) -> (d0, .., dn)``,
    where a dim of extent 1 may also read index 0 (the elementwise lowerings and the unit-dim
    folding write a broadcast batch of 1 as ``(0, d1, d2, d3)``)."""
    amap = ir.AffineMapAttr(attr).value
    results = list(amap.results)
    if len(results) != amap.n_dims or len(results) != len(shape):
        return False
    for i, expr in enumerate(results):
        if expr == ir.AffineDimExpr.get(i):
            continue
        if not (isinstance(expr, ir.AffineConstantExpr) and expr.value == 0 and shape[i] == 1):
            return False
    return True


def _elementwise_consumer(value: ir.Value) -> tuple[ir.Operation, int] | None:
    """The consumer of `value` (its only use) and the operand index, when it is an all-parallel
    ``linalg.generic`` that reads `value` and writes its results with identity maps over the
    same (static) shape, else None."""
    use = _single_use(value)
    if use is None:
        return None
    consumer = use.owner.operation  # an OpView or an Operation: both have .operation
    if consumer.name != "linalg.generic" or len(consumer.results) != 1:
        return None
    generic = consumer.opview
    if any(str(it) != "#linalg.iterator_type<parallel>" for it in generic.iterator_types):
        return None
    n_inputs = len(list(generic.inputs))
    if use.operand_number >= n_inputs:
        return None  # the conv result is the consumer's init: not an elementwise read
    produced, result = ir.RankedTensorType(value.type), consumer.results[0].type
    if not produced.has_static_shape or not isinstance(result, ir.RankedTensorType):
        return None
    shape = list(produced.shape)
    if list(ir.RankedTensorType(result).shape) != shape:
        return None
    maps = list(generic.indexing_maps)
    if not is_identity_map(maps[use.operand_number], shape) or not all(is_identity_map(m, shape) for m in maps[n_inputs:]):
        return None
    return consumer, use.operand_number


def plan_epilogues(
    ops: Sequence[ir.Operation], plan_of: Callable[[ir.Operation], "TilePlan | None"]
) -> tuple[dict[ir.Operation, EpiloguePlan], set[ir.Operation]]:
    """For the structured ops of a module, the fused plans keyed by consumer and the set of ops
    those plans absorb (each convolution and its fused initializer, which get no plan of their
    own). `plan_of` gives an op's own plan (``pipeline.plan_tiles``)."""
    fused: dict[ir.Operation, EpiloguePlan] = {}
    absorbed: set[ir.Operation] = set()
    for op in ops:
        if op.name == "linalg.unpack" and FUSE_UNPACK_EPILOGUES:
            _plan_unpack_epilogue(op, plan_of, fused, absorbed)
            continue
        if op.name not in CONV_OPS or len(op.results) != 1:
            continue
        conv_plan = plan_of(op)
        if conv_plan is None or not conv_plan.decompose:
            continue
        init_operand = len(list(op.opview.inputs))
        init_value = op.operands[init_operand]
        init_owner = defining_op(init_value)
        fuse_init = (
            init_owner is not None
            and init_owner.name in ("linalg.fill", "linalg.broadcast", "linalg.generic")
            and _single_use(init_value) is not None
            and plan_of(init_owner) is not None
        )
        rank = ir.RankedTensorType(op.results[0].type).rank
        found = _elementwise_consumer(op.results[0])
        if found is None or found[0] in fused or found[0] in absorbed or plan_of(found[0]) is None:
            if (LONE_INIT_FUSION and fuse_init and op not in fused and init_owner not in absorbed
                    and any(conv_plan.tile_sizes[:rank])):
                fused[op] = EpiloguePlan(conv_plan, -1, init_operand, True, rank, lone=True)
                absorbed.add(init_owner)
            continue
        consumer, operand = found
        fused[consumer] = EpiloguePlan(conv_plan, operand, init_operand, fuse_init, rank)
        absorbed.add(op)
        if fuse_init:
            absorbed.add(init_owner)
    return fused, absorbed


def _plan_unpack_epilogue(
    op: ir.Operation,
    plan_of: Callable[[ir.Operation], "TilePlan | None"],
    fused: dict[ir.Operation, EpiloguePlan],
    absorbed: set[ir.Operation],
) -> None:
    """Plan a data-tiled product's unpack inside the tiles of its elementwise consumer (made to
    iterate over the unpack's shape by `align_unpack_epilogues`): the consumer is tiled on the
    unpack's own tiles (one packed m0 x n0 tile per step), so the tile of the product goes from
    the packed accumulator through the epilogue to the output in one pass."""
    own = plan_of(op)
    found = _elementwise_consumer(op.results[0])
    if own is None or own.vector_sizes is None or found is None:
        return
    consumer, operand = found
    if consumer in fused or consumer in absorbed or plan_of(consumer) is None:
        return
    body = [o.operation.name for o in consumer.regions[0].blocks[0].operations]
    values = len(list(consumer.opview.inputs)) + sum(1 for n in body if n not in ("linalg.yield", "arith.constant"))
    if values > MAX_UNPACK_EPILOGUE_VALUES:
        return
    shape = list(ir.RankedTensorType(op.results[0].type).shape)
    rank = len(shape)
    tiles = list(own.tile_sizes[:rank])
    if len(tiles) != rank or any(t <= 0 for t in tiles):
        return
    product, product_init = None, False
    mm = defining_op(op.operands[0]) if FUSE_UNPACK_PRODUCT else None
    if (mm is not None and mm.name in ("linalg.mmt4d", "linalg.batch_mmt4d") and _single_use(op.operands[0]) is not None
            and plan_of(mm) is not None and plan_of(mm).cache_tile_sizes is None):
        product = plan_of(mm)
        init = defining_op(mm.operands[2])
        product_init = (init is not None and init.name in ("linalg.fill", "linalg.broadcast")
                        and _single_use(mm.operands[2]) is not None and plan_of(init) is not None)
        absorbed.add(mm)
        if product_init:
            absorbed.add(init)
    # Threads: as the consumer's own plan has them for a large output (its plan already applied
    # `pipeline.min_threaded_elements`); a fused product split over threads by its own plan keeps
    # its split whatever the output's size (a classifier's GEMV: 1 x 1000 outputs, 8 MB of
    # weights).
    threads = _threads_of(plan_of, consumer)
    if product is not None and product.forall_threads:
        threads = max(threads, max(product.forall_threads))
    forall = None
    if threads > 1:
        forall = _unpack_forall(shape, tiles, threads)
    fused[consumer] = EpiloguePlan(own, operand, 0, False, rank, unpack=True, unpack_forall=forall,
                                   product=product, product_init=product_init)
    absorbed.add(op)


def _threads_of(plan_of: Callable[[ir.Operation], "TilePlan | None"], consumer: ir.Operation) -> int:
    """The thread count the pipeline runs with, read from the consumer's own plan (a large
    elementwise op is split over all threads: ``pipeline._forall_for_large``); 1 when it is not
    split (small, or one thread)."""
    plan = plan_of(consumer)
    counts = plan.forall_threads if plan is not None else None
    return max(counts) if counts else 1


def _unpack_forall(shape: Sequence[int], tiles: Sequence[int], threads: int) -> tuple[int, ...] | None:
    """``scf.forall`` tile sizes splitting one loop of the unpack's shape over ``threads`` in whole
    inner tiles, the best balanced loop, the outermost on a tie; None when no loop has
    ``threads`` tiles.

    Every chunk must be aligned to the inner tiles in every dim, or the fused unpack goes through
    a padded temporary that the inner tile loop cannot fuse (upstream's unpack tiling checks that
    the chunk's size bound is a multiple of the inner tile): a dim whose extent is not a multiple
    of its inner tile (136 channels in tiles of 32) is therefore tiled by its inner tile in the
    forall as well, and the split dim by a whole number of inner tiles."""
    best: tuple[float, int, int] | None = None
    for d, (extent, tile) in enumerate(zip(shape, tiles)):
        units = -(-extent // tile)
        if units < threads:
            continue
        share = -(-units // threads)
        balance = units / (share * threads)
        if best is None or balance > best[0]:
            best = (balance, d, share * tile)
    if best is None:
        return None
    sizes = [t if t > 1 and extent % t else 0 for extent, t in zip(shape, tiles)]
    sizes[best[1]] = best[2]
    return tuple(sizes)


def _reshaped(value: ir.Value, shape: Sequence[int]) -> ir.Value:
    """`value` (static, row-major) viewed with ``shape`` of as many elements: collapsed to 1-D and
    expanded again (both views after bufferization; canonicalization folds adjacent pairs)."""
    from mlir.dialects import tensor

    t = ir.RankedTensorType(value.type)
    if list(t.shape) == list(shape):
        return value
    n = 1
    for d in shape:
        n *= d
    flat = value
    if t.rank != 1:
        flat = tensor.collapse_shape(ir.RankedTensorType.get([n], t.element_type), value, [list(range(t.rank))])
    if len(shape) == 1:
        return flat
    return tensor.expand_shape(ir.RankedTensorType.get(list(shape), t.element_type), flat,
                               [list(range(len(shape)))], [], list(shape))


def align_unpack_epilogues(module: ir.Module) -> int:
    """Move the elementwise consumer of each static ``linalg.unpack`` ahead of the reshapes between
    them; returns how many consumers moved.

    Why: a grouped 1x1 convolution's product is unpacked to [pixels, groups, channels] and
    reshaped to NHWC before its Relu or residual Add, and tile-and-fuse cannot fuse a producer
    through a reshape. The consumer is rebuilt on the unpack's shape (its other operands and
    its result reshaped: row-major views of the same elements, so the values are unchanged),
    which `plan_epilogues` then fuses with the unpack.
    How: only a chain of single-use ``tensor.expand_shape``/``collapse_shape`` between an unpack
    and an all-parallel generic whose every map is the identity over one static shape."""
    if not FUSE_UNPACK_EPILOGUES:
        return 0
    from mlir.dialects import tensor

    from onnxc.transforms.onnx_utils import collect_ops

    moved = 0
    for unpack in collect_ops(module.operation, lambda op: op.name == "linalg.unpack"):
        result = unpack.results[0]
        rtype = ir.RankedTensorType(result.type)
        if not rtype.has_static_shape:
            continue
        chain: list[ir.Operation] = []
        value = result
        while True:
            use = _single_use(value)
            if use is None or use.owner.operation.name not in ("tensor.expand_shape", "tensor.collapse_shape"):
                break
            chain.append(use.owner.operation)
            value = use.owner.operation.results[0]
        if not chain:
            continue
        found = _elementwise_consumer(value)
        if found is None:
            continue
        consumer, operand = found
        generic = consumer.opview
        if any(o.operation.name == "linalg.index" for o in consumer.regions[0].blocks[0].operations):
            continue  # its values depend on the iteration space's shape, which changes here
        shape = list(ir.RankedTensorType(value.type).shape)
        operands = list(generic.inputs) + list(generic.outputs)
        if not all(
            isinstance(v.type, ir.RankedTensorType) and list(ir.RankedTensorType(v.type).shape) == shape
            and is_identity_map(m, shape)
            for v, m in zip(operands, generic.indexing_maps)
        ):
            continue
        ushape = list(rtype.shape)
        n_inputs = len(list(generic.inputs))
        with consumer.location, ir.InsertionPoint(consumer):
            inputs = [result if i == operand else _reshaped(v, ushape) for i, v in enumerate(generic.inputs)]
            outputs = []
            for v in generic.outputs:
                owner = v.owner
                if isinstance(owner, (ir.Operation, ir.OpView)) and owner.operation.name == "tensor.empty":
                    outputs.append(tensor.empty(ushape, ir.RankedTensorType(v.type).element_type))
                else:
                    outputs.append(_reshaped(v, ushape))
            identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(len(ushape)))
            parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
            new = linalg.GenericOp(
                [o.type for o in outputs], inputs, outputs,
                ir.ArrayAttr.get([identity] * (n_inputs + len(outputs))),
                ir.ArrayAttr.get([parallel] * len(ushape)),
            )
            consumer.regions[0].blocks[0].append_to(new.regions[0])
            back = _reshaped(new.results[0], shape)
        consumer.results[0].replace_all_uses_with(back)
        consumer.erase()
        for op in reversed(chain):
            op.erase()
        moved += 1
    return moved


def _size_of(v: ir.Value) -> ir.Value | int:
    """A mask bound as a constant, or followed from ``tensor.dim`` of a written tensor to the size
    of the slice it was written into (the vectorizer masks the read of a tile by the dims of the
    write's result, which canonicalization would fold only later)."""
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return v
    op = owner.operation
    if op.name == "arith.constant" and isinstance(op.attributes["value"], ir.IntegerAttr):
        return ir.IntegerAttr(op.attributes["value"]).value
    if op.name != "tensor.dim":
        return v
    index = _size_of(op.operands[1])
    if not isinstance(index, int):
        return v
    t = op.operands[0]
    while isinstance(t.owner, (ir.Operation, ir.OpView)) and t.owner.operation.name == "vector.transfer_write":
        t = t.owner.operation.opview.base
    if isinstance(t.type, ir.RankedTensorType) and not ir.RankedTensorType(t.type).is_dynamic_dim(index):
        return ir.RankedTensorType(t.type).get_dim_size(index)
    if isinstance(t.owner, (ir.Operation, ir.OpView)) and t.owner.operation.name == "tensor.extract_slice":
        sizes = list(ir.DenseI64ArrayAttr(t.owner.operation.attributes["static_sizes"]))
        if sizes[index] != ir.ShapedType.get_dynamic_size():
            return sizes[index]
        dynamic = list(t.owner.operation.opview.sizes)
        return _size_of(dynamic[sum(1 for x in sizes[:index] if x == ir.ShapedType.get_dynamic_size())])
    return v


def _same_mask(a: ir.Value, b: ir.Value) -> bool:
    """Whether two masks are the same value or ``vector.create_mask``s of the same bounds."""
    if a == b:
        return True
    ops = [v.owner.operation if isinstance(v.owner, (ir.Operation, ir.OpView)) else None for v in (a, b)]
    if any(op is None or op.name != "vector.create_mask" for op in ops) or a.type != b.type:
        return False
    return all(_size_of(x) == _size_of(y) for x, y in zip(ops[0].operands, ops[1].operands))


def forward_masked_tiles(module: ir.Module) -> int:
    """Replace a masked ``vector.transfer_read`` of the tensor a masked ``vector.transfer_write``
    just produced, at the same indices with the same mask, by the written vector (masked-off
    lanes: the read's padding, an ``arith.select``); returns how many reads were forwarded.

    Why: a fused unpack's tile is written to a tile of a temporary and read back by the epilogue
    with the mask of the partial tile (136 channels in tiles of 32); upstream folds such a
    read-after-write only unmasked, so the temporary survived bufferization, a full-size buffer
    also aliased with the result's, and the fused unpack + Relu ran 4x slower than both apart.
    The write is then dead and canonicalization removes it."""
    if not FUSE_UNPACK_EPILOGUES:
        return 0
    from mlir.dialects import vector

    from onnxc.transforms.onnx_utils import collect_ops

    forwarded = 0
    for read in collect_ops(module.operation, lambda op: op.name == "vector.transfer_read"):
        rv = read.opview
        src = rv.base
        owner = src.owner
        if not isinstance(owner, (ir.Operation, ir.OpView)) or owner.operation.name != "vector.transfer_write":
            continue
        wv = owner.operation.opview
        if rv.mask is None or wv.mask is None or not _same_mask(rv.mask, wv.mask):
            continue
        if not isinstance(src.type, ir.RankedTensorType) or wv.valueToStore.type != read.results[0].type:
            continue
        if list(rv.indices) != list(wv.indices) or rv.permutation_map != wv.permutation_map:
            continue
        if not all(ir.BoolAttr(b).value for b in rv.in_bounds) or not all(ir.BoolAttr(b).value for b in wv.in_bounds):
            continue
        with read.location, ir.InsertionPoint(read):
            pad = vector.broadcast(read.results[0].type, rv.padding)
            value = arith.select(rv.mask, wv.valueToStore, pad)
        read.results[0].replace_all_uses_with(value)
        read.erase()
        forwarded += 1
    return forwarded


def _unpack_steps(plan: EpiloguePlan) -> str:
    """Transform steps of an unpack fused into its consumer's tiles (handle ``%o``): an optional
    forall over whole inner tiles, the unpack's tiles, the unpack fused into the innermost loop,
    both vectorized (explicit sizes: a partial tile of a padded dim is masked)."""
    from onnxc.targets.cpu.pipeline import _VECTORIZE_STEP, _ints, tile_step

    get = "    {0} = transform.get_producer_of_operand {1}[{2}] : (!transform.any_op) -> !transform.any_op"
    steps = [get.format("%p0", "%o", plan.operand)]
    # The producers fused into each loop level, innermost first: unpack, product, initializer.
    chain = [("%p", "%p0")]
    if plan.product is not None:
        steps.append(get.format("%m0", "%p0", 0))
        chain.append(("%m", "%m0"))
        if plan.product_init:
            steps.append(get.format("%i0", "%m0", 2))
            chain.append(("%i", "%i0"))
    fresh = iter(range(1, 100))

    def fuse_chain(loop: str, level: int) -> str:
        """Fuse every producer of `chain` into `loop` (unpack first); returns the loop's handle."""
        for i, (stem, handle) in enumerate(chain):
            new, loop_next = f"{stem}{level}", f"%c{next(fresh)}"
            steps.append(_fuse(handle, loop, new, loop_next))
            chain[i] = (stem, new)
            loop = loop_next
        return loop

    target, outer = "%o", ""
    if plan.unpack_forall:
        steps.append(
            f"    %f, %fl = transform.structured.tile_using_forall %o tile_sizes [{_ints(plan.unpack_forall)}]"
            " : (!transform.any_op) -> (!transform.any_op, !transform.any_op)"
        )
        outer = fuse_chain("%fl", 1)
        target = "%f"
    sizes = list(plan.producer.tile_sizes[: plan.rank])
    steps.append(tile_step("%t", "%l", target, sizes))
    fuse_chain(f"%l#{len(sizes) - 1}", 2)
    if plan.product is not None:
        # The product's own reduction tile (k1 by 1) inside the accumulator tile, as its plan has it.
        steps.append(tile_step("%mr", "%mrl", "%m2", plan.product.tile_sizes))
        product_vectors = f" vector_sizes [{_ints(plan.product.vector_sizes or ())}]"
        steps.append(_VECTORIZE_STEP.substitute(target="%mr", sizes=product_vectors, attrs=" {create_named_contraction}"))
        if plan.product_init:
            steps.append(_VECTORIZE_STEP.substitute(target="%i2", sizes="", attrs=""))
    vectors = plan.producer.vector_sizes or ()
    steps.append(_VECTORIZE_STEP.substitute(target="%p2", sizes=f" vector_sizes [{_ints(vectors)}]", attrs=""))
    steps.append(_VECTORIZE_STEP.substitute(target="%t", sizes=f" vector_sizes [{_ints(sizes)}]", attrs=""))
    if plan.unpack_forall:
        # The inner loops' bounds are `tensor.dim`s of the chunk's unpack (fused into the forall,
        # then again into the innermost loop): resolved to the dims of its destination slice, the
        # chunk-sized unpack is dead and goes (it would otherwise run whole, untiled).
        steps.append(
            f"    transform.apply_patterns to {outer} {{\n"
            "      transform.apply_patterns.memref.resolve_ranked_shaped_type_result_dims\n"
            "    } : !transform.any_op"
        )
    return "\n".join(steps)


def _fuse(producer: str, into: str, result: str, loop: str) -> str:
    return (
        f"    {result}, {loop} = transform.structured.fuse_into_containing_op {producer} into {into}"
        " : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)"
    )


def epilogue_steps(plan: EpiloguePlan) -> str:
    """The transform steps of a fused plan, applied to the consumer's handle ``%o`` (the same
    contract as ``pipeline._plan_steps``, built from the same step templates)."""
    from onnxc.targets.cpu.pipeline import _DECOMPOSE_STEP, _FORALL_STEP, _VECTORIZE_STEP, _ints, tile_step

    if plan.unpack:
        return _unpack_steps(plan)
    if plan.lone:
        return _lone_init_steps(plan)
    rank = plan.rank
    steps = [f"    %p0 = transform.get_producer_of_operand %o[{plan.operand}] : (!transform.any_op) -> !transform.any_op"]
    if plan.fuse_init:
        steps.append(
            f"    %i0 = transform.get_producer_of_operand %p0[{plan.init_operand}] : (!transform.any_op) -> !transform.any_op"
        )
    target, prod, init = "%o", "%p0", "%i0"
    forall = plan.producer.forall_threads
    if forall and any(forall[:rank]):
        steps.append(_FORALL_STEP.substitute(target="%o", counts=_ints(forall[:rank])))
        # The consumer's slice of the convolution's result is now taken inside the forall: fuse
        # the convolution (and then its initializer) into the forall first, then into the loops.
        steps.append(_fuse(prod, "%fl", "%p1", "%fl1"))
        prod, target = "%p1", "%f"
        if plan.fuse_init:
            steps.append(_fuse(init, "%fl1", "%i1", "%fl2"))
            init = "%i1"
    sizes = list(plan.producer.tile_sizes[:rank])
    n = sum(1 for s in sizes if s)
    # The convolution's loop order over its output dims, when it has one (conv_plan.py).
    order = plan.producer.interchange
    steps.append(tile_step("%t", "%l", target, sizes, order[:rank] if order and sorted(order[:rank]) == list(range(rank)) else None))
    steps.append(_fuse(prod, f"%l#{n - 1}", "%p2", "%ll1"))
    if plan.fuse_init:
        steps.append(_fuse(init, "%ll1", "%i2", "%ll2"))
    # Inside the tile: the convolution's own reduction tiles, then the 1-D form that vectorizes.
    reduction = [0] * rank + list(plan.producer.tile_sizes[rank:])
    step = tile_step("%r", "%rl", "%p2", reduction)
    if step:
        steps.append(step)
    steps.append(_DECOMPOSE_STEP.substitute(target="%r" if step else "%p2"))
    for handle in ("%d", "%i2", "%t") if plan.fuse_init else ("%d", "%t"):
        steps.append(_VECTORIZE_STEP.substitute(target=handle, sizes="", attrs=""))
    return "\n".join(steps)


def _lone_init_steps(plan: EpiloguePlan) -> str:
    """Transform steps of a convolution that is its own root (``%o``) with its initializer fused
    into its output tiles: the threads' forall and the output tile loops as the convolution's plan
    has them, the initializer fused into each, then the reduction tiles, the 1-D decomposition and
    the vectorization of both, as in `epilogue_steps`."""
    from onnxc.targets.cpu.pipeline import _DECOMPOSE_STEP, _FORALL_STEP, _VECTORIZE_STEP, _ints, tile_step

    rank = plan.rank
    steps = [f"    %i0 = transform.get_producer_of_operand %o[{plan.init_operand}] : (!transform.any_op) -> !transform.any_op"]
    target, init = "%o", "%i0"
    forall = plan.producer.forall_threads
    if forall and any(forall):
        steps.append(_FORALL_STEP.substitute(target="%o", counts=_ints(forall)))
        steps.append(_fuse(init, "%fl", "%i1", "%fl1"))
        target, init = "%f", "%i1"
    # `fuse_into_containing_op` cannot reach an initializer through `scf.for` iter_args (only
    # through a forall's shared outputs): `structured.fuse` tiles the convolution and fuses the
    # producers of its tiles' slices, following the loops' iter_args to the initializer.
    sizes = list(plan.producer.tile_sizes[:rank]) + [0] * (len(plan.producer.tile_sizes) - rank)
    n = sum(1 for s in sizes if s)
    order = plan.producer.interchange
    interchange = f" interchange [{_ints(order)}]" if order else ""
    loops = ", ".join(["!transform.any_op"] * n)
    steps.append(f"    %t, %l:{n} = transform.structured.fuse {target} tile_sizes [{_ints(sizes)}]{interchange}"
                 f" : (!transform.any_op) -> (!transform.any_op, {loops})")
    steps.append(f"    %i2 = transform.get_producer_of_operand %t[{plan.init_operand}] : (!transform.any_op) -> !transform.any_op")
    reduction = [0] * rank + list(plan.producer.tile_sizes[rank:])
    step = tile_step("%r", "%rl", "%t", reduction)
    if step:
        steps.append(step)
    steps.append(_DECOMPOSE_STEP.substitute(target="%r" if step else "%t"))
    for handle in ("%d", "%i2"):
        steps.append(_VECTORIZE_STEP.substitute(target=handle, sizes="", attrs=""))
    return "\n".join(steps)
