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

The fused sequence runs like every other plan in its own ``failures(suppress)`` sequence; when
a step fails, the ops stay tiled as far as they got and are lowered as scalar loops, which is
slow but correct. The lit test ``test/Conversion/CPU/epilogue-fusion.mlir`` shows the fused IR.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mlir import ir
from mlir.dialects import linalg

from onnxc.targets.cpu.conv_plan import CONV_OPS
from onnxc.targets.cpu.pad_in_place import defining_op

if TYPE_CHECKING:
    from onnxc.targets.cpu.pipeline import TilePlan

__all__ = ["EpiloguePlan", "plan_epilogues", "epilogue_steps"]


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


def _single_use(value: ir.Value) -> ir.OpOperand | None:
    uses = list(value.uses)
    return uses[0] if len(uses) == 1 else None


def _is_identity(attr: ir.Attribute, shape: Sequence[int]) -> bool:
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
    if not _is_identity(maps[use.operand_number], shape) or not all(_is_identity(m, shape) for m in maps[n_inputs:]):
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
        if op.name not in CONV_OPS or len(op.results) != 1:
            continue
        conv_plan = plan_of(op)
        if conv_plan is None or not conv_plan.decompose:
            continue
        found = _elementwise_consumer(op.results[0])
        if found is None:
            continue
        consumer, operand = found
        if consumer in fused or consumer in absorbed or plan_of(consumer) is None:
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
        fused[consumer] = EpiloguePlan(conv_plan, operand, init_operand, fuse_init, rank)
        absorbed.add(op)
        if fuse_init:
            absorbed.add(init_owner)
    return fused, absorbed


def _fuse(producer: str, into: str, result: str, loop: str) -> str:
    return (
        f"    {result}, {loop} = transform.structured.fuse_into_containing_op {producer} into {into}"
        " : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)"
    )


def epilogue_steps(plan: EpiloguePlan) -> str:
    """The transform steps of a fused plan, applied to the consumer's handle ``%o`` (the same
    contract as ``pipeline._plan_steps``, built from the same step templates)."""
    from onnxc.targets.cpu.pipeline import _DECOMPOSE_STEP, _FORALL_STEP, _VECTORIZE_STEP, _ints, tile_step

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
