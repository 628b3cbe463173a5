"""Per-tile scratch buffers allocated once per loop nest instead of once per tile.

What: ``hoist_tile_buffers(module)`` runs on bufferized code (after the deallocation pipeline).
A ``memref.alloc`` of a static shape inside the body of an ``scf.for``, freed by one
``memref.dealloc`` in the same block and never passed out of that block (yielded, returned,
branched with, called with, stored), moves before the outermost ``scf.for`` of the sequential
loop nest around it, and its dealloc after that loop. The climb stops at anything that is not an
``scf.for``: an ``scf.forall`` body (each thread keeps its own buffer), an ``scf.if``, a function.

Why: a convolution fused with its epilogue computes each output tile into a tile-sized buffer
of its own (the tile of the convolution's result, which bufferization gives a fresh allocation
per tile), and every tile paid a ``malloc`` and a ``free``: in MobileNetV2 at two threads,
``malloc``, ``_int_free`` and ``free`` were 6% of the samples (perf, AOT library, both threads).
Reusing the buffer across the iterations is sound because a fresh allocation has no contents a
tile could read: each iteration writes before it reads, as it did with its own buffer, and the
iterations of an ``scf.for`` run one after another.
"""

from __future__ import annotations

from mlir import ir

from onnxc.transforms.onnx_utils import collect_ops

__all__ = ["hoist_tile_buffers", "MEMREF_VIEWS"]

#: Ops a buffer (or a view of it) may not reach for the buffer to stay inside its block:
#: these pass the value on to somewhere the hoisting cannot see.
_ESCAPES: frozenset[str] = frozenset({
    "scf.yield", "scf.condition", "func.return", "func.call", "cf.br", "cf.cond_br", "memref.store",
    "llvm.store", "scf.forall.in_parallel",
})

#: View-like ops whose result aliases their source (operand 0): followed when looking for
#: escapes here, and to a buffer's allocation in tile_forwarding.py.
MEMREF_VIEWS: frozenset[str] = frozenset({
    "memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.expand_shape",
    "memref.collapse_shape", "memref.transpose", "memref.view",
})


def _escapes(value: ir.Value) -> bool:
    """Whether `value` or a view of it is used by an op that passes it on (`_ESCAPES`)."""
    stack = [value]
    while stack:
        for use in stack.pop().uses:
            owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
            if owner.name in _ESCAPES:
                return True
            if owner.name in MEMREF_VIEWS:
                stack.extend(owner.results)
    return False


def _outermost_sequential_loop(op: ir.Operation) -> ir.Operation | None:
    """The outermost `scf.for` of the chain of `scf.for` ops directly around `op`, or None."""
    loop = None
    parent = op.parent
    while parent is not None and parent.name == "scf.for":
        loop = parent
        parent = parent.parent
    return loop


def hoist_tile_buffers(module: ir.Module) -> int:
    """Hoist every eligible per-tile ``memref.alloc`` (see the module docstring) out of its
    sequential loop nest; returns how many moved."""
    moved = 0
    for alloc in collect_ops(module.operation, lambda op: op.name == "memref.alloc"):
        if len(alloc.operands) or not ir.MemRefType(alloc.results[0].type).has_static_shape:
            continue
        loop = _outermost_sequential_loop(alloc)
        if loop is None:
            continue
        buffer = alloc.results[0]
        deallocs = [u.owner.operation for u in buffer.uses if u.owner.name == "memref.dealloc"]
        if len(deallocs) != 1 or deallocs[0].block != alloc.block or _escapes(buffer):
            continue
        alloc.move_before(loop)
        deallocs[0].move_after(loop)
        moved += 1
    return moved
