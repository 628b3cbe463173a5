"""Padded tensors written in place: each padding buffer is made before the data it pads.

What: ``hoist_pad_fills(module)`` looks at each ``tensor.insert_slice`` whose destination is a
``linalg.fill`` of a static ``tensor.empty`` with a constant (the padded input of a convolution
or pooling, as ``transforms/lowering/conv.py`` builds it: fill with the pad value, insert the
data). It gives that insert a fill of its own, placed right before the first op that computes
the inserted data (the start of its chain of destination operands: the Clip or Relu before a
depthwise convolution or a MaxPool, or the convolution whose epilogue that is), or right before
the insert when the data has no such chain (a concatenation). The fill covers only the border
the data leaves uncovered (`_border_fill`).

Why: bufferization's ``eliminate-empty-tensors`` lets the op that computes the data write
straight into the interior of the padded buffer, but only when that buffer is defined before
the data's own destination is used (the ``tensor.extract_slice`` of the buffer that replaces the
data's ``tensor.empty`` must dominate it). The lowering creates the fill right before the
insert, after the data, so every padded layer wrote its input twice: the data into its own
buffer, then a strided ``memref.copy`` of all of it into the padded buffer (MobileNetV2's
112x112x96 expansion output: 4.8 MB more to write and read, per layer). And CSE merges the
fills of equal shape into one shared value (ResNet-50's stage-3 blocks all pad 16x16x256), so
bufferization also copied the shared filled buffer before each in-place insert. Each fill made
here carries its own number in the attribute ``onnxc.pad_buffer`` on its ``tensor.empty``, so
CSE does not merge it with the others again. A fill is pure and its operands are a constant and a static
empty tensor, so making it earlier changes no value.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg, tensor

__all__ = ["hoist_pad_fills", "PAD_BUFFER_ATTR", "defining_op"]

#: Attribute (a number, distinct per buffer) on the ``tensor.empty`` of a padding buffer made by
#: ``hoist_pad_fills``: keeps CSE from merging equal-shaped padding buffers into one value.
PAD_BUFFER_ATTR = "onnxc.pad_buffer"


def defining_op(value: ir.Value) -> ir.Operation | None:
    """The op that computes `value`, or None for a block argument."""
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _inits(op: ir.Operation) -> list[ir.Value] | None:
    """The destination operands of a linalg op, one per result, or None. Structured ops name
    them ``outputs``, ``linalg.reduce`` ``inits``, ``linalg.transpose`` and ``broadcast``
    ``init``, ``linalg.pack`` and ``unpack`` ``dest`` (reading only ``outputs`` missed the
    model's input transposed to channels-last before the first convolution, which was then
    copied into its padded buffer)."""
    view = op.opview
    for name in ("outputs", "inits", "init", "dest"):
        if hasattr(view, name):
            found = getattr(view, name)
            return [found] if isinstance(found, ir.Value) else list(found)
    return None


def _chain_start(value: ir.Value) -> ir.Operation | None:
    """The first op of the chain that computes `value` in destination-passing style: from the
    op that defines it, through the init operand tied to each result, back to the op whose init
    is a ``tensor.empty``. None when the chain does not end at an empty tensor (the data is a
    function argument or some op without a destination): then no write can be made in place."""
    op = defining_op(value)
    while op is not None and op.name.startswith("linalg.") and op.name != "linalg.fill":
        inits = _inits(op)
        if inits is None:  # not a destination-style op
            return None
        result_number = ir.OpResult(value).result_number
        if result_number >= len(inits):
            return None
        value = inits[result_number]
        init_owner = defining_op(value)
        if init_owner is None:
            return None
        if init_owner.name == "tensor.empty":
            return op
        op = init_owner
    return None


#: Fill only the border a padding insert leaves uncovered (`_border_fill`), not the whole
#: buffer whose interior the data then overwrites. A module flag for one-process A/Bs.
BORDER_FILLS: bool = True


def _border_fill(value: ir.Value, buffer: ir.Value, insert: ir.Operation, ip: ir.InsertionPoint,
                 number: int) -> tuple[ir.Value, list[ir.Operation]] | None:
    """`buffer` with the pad `value` written around the static box that `insert` (a unit-stride
    ``tensor.insert_slice``) covers: one ``linalg.fill`` per side of each padded dim (the slab
    below and above the box along dim d, spanning the box in the dims before d and the whole
    buffer in the dims after it), each inserted into the buffer. None when the box is not static
    with unit strides, or covers the buffer whole.

    Why: the whole padded buffer was filled before the producer overwrote its interior, a second
    write of nearly every byte: ``memset`` was 7% of MobileNetV2's samples at one thread (its
    114x114x96 and 58x58x144 depthwise inputs are 5.0 and 1.9 MB; the border is 4% and 7% of
    them). Each slab's own ``tensor.empty`` becomes a view of the buffer in bufferization
    (``eliminate-empty-tensors``), so the fills write the border in place; it is tagged like the
    buffer (`PAD_BUFFER_ATTR`, negative: apart from the buffers' numbers), or CSE merges the equal
    slabs of opposite sides into one that bufferization then copies into both. Returns the
    filled buffer and the slab fills."""
    view = insert.opview
    offsets = list(ir.DenseI64ArrayAttr(view.static_offsets))
    sizes = list(ir.DenseI64ArrayAttr(view.static_sizes))
    strides = list(ir.DenseI64ArrayAttr(view.static_strides))
    shape = list(ir.RankedTensorType(buffer.type).shape)
    dynamic = ir.ShapedType.get_dynamic_size()
    if dynamic in offsets + sizes or any(st != 1 for st in strides) or (offsets, sizes) == ([0] * len(shape), shape):
        return None
    elem = ir.RankedTensorType(buffer.type).element_type
    i64 = ir.IntegerType.get_signless(64)
    tags: list[ir.Value] = []
    slabs: list[ir.Operation] = []
    with ip, insert.location:
        for d, extent in enumerate(shape):
            for lo, hi in ((0, offsets[d]), (offsets[d] + sizes[d], extent)):
                if hi <= lo:
                    continue
                at = offsets[:d] + [lo] + [0] * (len(shape) - d - 1)
                box = sizes[:d] + [hi - lo] + shape[d + 1:]
                slab_empty = tensor.empty(box, elem)
                slab_empty.owner.attributes[PAD_BUFFER_ATTR] = ir.IntegerAttr.get(i64, -(number * 8 + len(tags) + 1))
                tags.append(slab_empty)
                slab = linalg.fill(value, outs=[slab_empty])
                slabs.append(slab.owner)
                buffer = tensor.InsertSliceOp(slab, buffer, [], [], [], at, box, [1] * len(shape)).result
    return buffer, slabs


def hoist_pad_fills(module: ir.Module) -> list[tuple[ir.Operation, ir.Operation]]:
    """Give each padding insert its own fill before its data (see the module docstring).
    Returns the bonds (slab fill, padding insert) of the border fills (`_border_fill`): outlining
    must keep them in the part of the data they pad, or the partly filled buffer crosses into
    another part and is copied whole."""
    found: list[tuple[ir.Operation, ir.Operation, ir.Operation]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name != "tensor.insert_slice":
            return ir.WalkResult.ADVANCE
        fill = defining_op(op.operands[1])
        if fill is None or fill.name != "linalg.fill" or len(fill.operands) != 2:
            return ir.WalkResult.ADVANCE
        empty = defining_op(fill.operands[1])
        value = defining_op(fill.operands[0])
        if empty is None or empty.name != "tensor.empty" or len(empty.operands):
            return ir.WalkResult.ADVANCE  # a dynamic size would need its operands moved too
        if value is None or value.name != "arith.constant":
            return ir.WalkResult.ADVANCE
        start = _chain_start(op.operands[0])
        # Within one block only (a fill moved out of a loop body would share one buffer between
        # iterations).
        if value.parent != op.parent:
            return ir.WalkResult.ADVANCE
        if start is None or start.parent != op.parent:
            # The data is not written in place (a concatenation's slices, an argument), but the
            # insert still gets a buffer of its own, right before it: written into the fill that
            # CSE shared between equal-shaped pads, it made bufferization copy that whole
            # filled buffer first (ShuffleNet: each unit's padded 30x30x136 input after the
            # concatenation of the one before, 490 KB per call).
            start = op
        found.append((op, fill, start))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    bonds: list[tuple[ir.Operation, ir.Operation]] = []
    with module.context:
        i64 = ir.IntegerType.get_signless(64)
        for number, (insert, fill, start) in enumerate(found):
            # The pad value must be defined where the fill goes: a constant has no operands, so
            # defining it earlier changes nothing (the model's input transposed into the padded
            # input of its first convolution came before the lowering's 0.0; with threads its
            # transpose is a forall whose result was then copied, strided and on one thread, into
            # the padded buffer: 0.1 ms of a 0.45 ms stem at 2 threads).
            value = defining_op(fill.operands[0])
            if not value.is_before_in_block(start):
                value.move_before(start)
            ip = ir.InsertionPoint(start)
            empty = defining_op(fill.operands[1]).clone(ip=ip)
            empty.attributes[PAD_BUFFER_ATTR] = ir.IntegerAttr.get(i64, number)
            border = _border_fill(value.results[0], empty.results[0], insert, ip, number) if BORDER_FILLS else None
            if border is not None:
                insert.operands[1] = border[0]
                bonds.extend((slab, insert) for slab in border[1])
                continue
            own = fill.clone(ip=ip)
            own.operands[1] = empty.results[0]
            insert.operands[1] = own.results[0]
    # The shared fills that no insert reads any more go (each once: CSE made one of many).
    unused: list[ir.Operation] = []
    for _insert, fill, _start in found:
        if fill not in unused and not len(list(fill.results[0].uses)):
            unused.append(fill)
    for fill in unused:
        empty = defining_op(fill.operands[1])
        fill.erase()
        if empty is not None and not len(list(empty.results[0].uses)):
            empty.erase()
    return bonds
