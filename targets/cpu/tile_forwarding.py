"""A tile written to memory and read straight back is forwarded in registers; the writes that
only fed such reads go.

What: ``forward_tile_writes(module)`` runs on bufferized code. In each block it looks at every
``vector.transfer_write`` of a whole static tile (zero indices, in bounds, an identity map up to
unit dims) and at the ops that follow it in the block:

* a ``vector.transfer_read`` of the same whole tile (the same memref, or a view of all of it in
  the same element order: a reshape, a subview that drops unit dims), with nothing between them
  that may write memory, takes the written vector (``vector.shape_cast`` where the shapes
  differ) instead of loading it;
* a later write of the same whole tile makes the first one dead when nothing between them may
  read the tile: the tile lies in a buffer this function allocated, and every read between
  them is of another allocation, a constant global, or an argument (which cannot alias a
  buffer allocated here).

Why: a convolution fused with its bias and epilogue (epilogue.py) initializes its output tile
with the bias, reads it back into its accumulators, writes them after the reduction, reads
them again for the epilogue and writes the epilogue's result: three stores and two loads of
every output tile where one store is needed (MobileNetV2's 112x112x96 expansion writes 4.8 MB
three times). LLVM keeps them: it cannot tell that the filter and input the reduction loop
reads do not alias the output.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import vector

from onnxc.targets.cpu.epilogue import is_identity_map
from onnxc.targets.cpu.hoist_tile_buffers import MEMREF_VIEWS
from onnxc.targets.cpu.pad_in_place import defining_op
from onnxc.transforms.onnx_utils import block_ops, collect_ops

__all__ = ["forward_tile_writes"]

#: Ops that never write memory (their nested ops are checked too).
_NO_WRITE_PREFIXES: tuple[str, ...] = ("arith.", "math.", "index.", "affine.apply", "ub.")
_NO_WRITE: frozenset[str] = frozenset({
    "vector.transfer_read", "vector.load", "vector.broadcast", "vector.extract", "vector.insert",
    "vector.shape_cast", "vector.contract", "vector.fma", "vector.outerproduct", "vector.splat",
    "vector.extract_strided_slice", "vector.insert_strided_slice", "vector.transpose",
    "vector.reduction", "vector.multi_reduction", "vector.constant_mask", "vector.create_mask",
    "vector.from_elements", "vector.bitcast", "vector.mask", "vector.yield",
    "memref.subview", "memref.cast", "memref.load", "memref.reinterpret_cast", "memref.expand_shape",
    "memref.collapse_shape", "memref.get_global", "memref.dim",
    "scf.for", "scf.if", "scf.yield",
})

#: Ops that read memory: (op name, index of the memref operand).
_READS: dict[str, int] = {"vector.transfer_read": 0, "vector.load": 0, "memref.load": 0}

def _is_full_view(op: ir.Operation) -> bool:
    """A view of all of its source in the same element order: a reshape or cast, or a
    `memref.subview` with zero offsets, whole sizes and unit strides (at most dropping unit
    dims)."""
    if op.name in ("memref.expand_shape", "memref.collapse_shape", "memref.cast"):
        return True
    if op.name != "memref.subview":
        return False
    view = op.opview
    src = ir.MemRefType(op.operands[0].type)
    offsets = list(ir.DenseI64ArrayAttr(view.static_offsets))
    sizes = list(ir.DenseI64ArrayAttr(view.static_sizes))
    strides = list(ir.DenseI64ArrayAttr(view.static_strides))
    return (len(op.operands) == 1 and all(o == 0 for o in offsets) and all(s == 1 for s in strides)
            and src.has_static_shape and sizes == list(src.shape))


def _tile(value: ir.Value) -> ir.Value:
    """The memref whose whole memory `value` covers, through views of all of it."""
    op = defining_op(value)
    while op is not None and _is_full_view(op):
        value = op.operands[0]
        op = defining_op(value)
    return value


def _root(value: ir.Value) -> ir.Value:
    """The allocation, global or argument that `value` is a view of."""
    op = defining_op(value)
    while op is not None and op.name in MEMREF_VIEWS:
        value = op.operands[0]
        op = defining_op(value)
    return value


def _whole_tile_access(op: ir.Operation, memref: ir.Value, vec_type: ir.Type) -> bool:
    """Whether a transfer reads/writes all of static `memref` at zero indices, in bounds, with a
    map that is the identity up to unit dims (a unit dim may be read at index 0)."""
    mtype = ir.MemRefType(memref.type)
    if not mtype.has_static_shape:
        return False
    view = op.opview
    if getattr(view, "mask", None) is not None:
        return False
    if any(not (isinstance(defining_op(i), ir.Operation) and defining_op(i).name == "arith.constant"
                and ir.IntegerAttr(defining_op(i).attributes["value"]).value == 0) for i in view.indices):
        return False
    in_bounds = view.attributes["in_bounds"] if "in_bounds" in view.attributes else None
    if in_bounds is None or not all(ir.BoolAttr(b).value for b in ir.ArrayAttr(in_bounds)):
        return False
    shape = list(mtype.shape)
    if not is_identity_map(view.attributes["permutation_map"], shape):
        return False
    count = 1
    for d in shape:
        count *= d
    vcount = 1
    for d in ir.VectorType(vec_type).shape:
        vcount *= d
    return count == vcount


def _may_write(op: ir.Operation) -> bool:
    """Whether `op` (or an op nested in it) may write memory (conservative: unknown ops may)."""
    found = False

    def visit(inner: ir.Operation) -> ir.WalkResult:
        nonlocal found
        name = inner.name
        if name in _NO_WRITE or name.startswith(_NO_WRITE_PREFIXES):
            return ir.WalkResult.ADVANCE
        found = True
        return ir.WalkResult.INTERRUPT

    op.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _may_read_alloc(op: ir.Operation, alloc: ir.Value) -> bool:
    """Whether `op` (or an op nested in it) may read the allocation `alloc` (conservative)."""
    found = False

    def visit(inner: ir.Operation) -> ir.WalkResult:
        nonlocal found
        name = inner.name
        if name in _READS:
            if _root(inner.operands[_READS[name]]) == alloc:
                found = True
                return ir.WalkResult.INTERRUPT
            return ir.WalkResult.ADVANCE
        if name in _NO_WRITE or name.startswith(_NO_WRITE_PREFIXES) or name == "vector.transfer_write":
            return ir.WalkResult.ADVANCE
        found = True  # an op that may read memory some other way
        return ir.WalkResult.INTERRUPT

    op.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _forward_one(block: ir.Block) -> bool:
    """Forward one whole-tile write of `block` to a read after it (see the module docstring);
    whether something changed. One at a time: the scan's list of ops is stale after an erase."""
    ops = block_ops(block)
    for i, write in enumerate(ops):
        if write.name != "vector.transfer_write" or len(write.results):
            continue
        value, dest = write.operands[0], write.operands[1]
        if not _whole_tile_access(write, dest, value.type):
            continue
        tile = _tile(dest)
        for later in ops[i + 1:]:
            if later.name == "vector.transfer_read" and _tile(later.operands[0]) == tile \
                    and _whole_tile_access(later, later.operands[0], later.results[0].type):
                with later.location, ir.InsertionPoint(later):
                    forwarded = value if value.type == later.results[0].type else vector.shape_cast(later.results[0].type, value)
                later.results[0].replace_all_uses_with(forwarded)
                later.erase()
                return True
            if _may_write(later):
                break
    return False


def _drop_one_dead_write(block: ir.Block) -> bool:
    """Erase one whole-tile write of `block` that a later write of the same tile overwrites
    before anything may read it (see the module docstring); whether one went."""
    ops = block_ops(block)
    for i, write in enumerate(ops):
        if write.name != "vector.transfer_write" or len(write.results):
            continue
        dest = write.operands[1]
        if not _whole_tile_access(write, dest, write.operands[0].type):
            continue
        root = _root(dest)
        alloc = defining_op(root)
        if alloc is None or alloc.name not in ("memref.alloc", "memref.alloca"):
            continue
        tile = _tile(dest)
        for later in ops[i + 1:]:
            if later.name == "vector.transfer_write" and _tile(later.operands[1]) == tile \
                    and _whole_tile_access(later, later.operands[1], later.operands[0].type):
                write.erase()
                return True
            if _may_read_alloc(later, root) or (later.name != "vector.transfer_write" and _may_write(later)):
                break
    return False


def forward_tile_writes(module: ir.Module) -> int:
    """Forward whole-tile writes to the reads after them and drop the writes that are then dead,
    in every block of `module` (see the module docstring); returns the number of reads and writes
    removed."""
    blocks: list[ir.Block] = []
    for op in collect_ops(module.operation, lambda o: o.name in ("func.func", "scf.for", "scf.forall", "scf.if")):
        for region in op.regions:
            blocks.extend(region.blocks)
    total = 0
    with module.context:  # the map checks build affine expressions (a caller may hold no context)
        for block in blocks:
            while _forward_one(block) or _drop_one_dead_write(block):
                total += 1
    return total
