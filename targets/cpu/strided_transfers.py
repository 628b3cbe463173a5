"""Short 1-D vector transfers of non-contiguous memory as unrolled scalar loads and stores.

What: `unroll_strided_transfers(module)` rewrites each in-bounds, unmasked 1-D
``vector.transfer_read`` / ``vector.transfer_write`` of at most ``MAX_UNROLLED`` elements whose
vector dim walks a memref dim that is not the contiguous innermost one (a stride other than 1,
static or dynamic, or a transposing permutation map) as that many ``memref.load``s and a
``vector.from_elements`` (``vector.extract``s and ``memref.store``s for a write). It runs on
memrefs, after the contraction lowering of `pipeline.lower_to_llvm`.

Why: upstream `convert-vector-to-scf` lowers such a 1-D transfer (``TransferOp1dConversion``) to
an ``scf.for`` that loads one element per iteration and inserts it at a dynamic position, even
with ``full-unroll=true`` (which unrolls only the dims above the last). The direct convolution's
register tile reads its input pixels that way: the outer product of a tile of ``ow_t`` pixels by
a filter vector (`pipeline.contracts_to_outer_products`) reads one input channel of ``ow_t``
pixels, ``C`` floats apart, as ``vector<ow_t x f32>``, and canonicalization folds the shape cast
into a strided ``transfer_read``. In the inner loop of every convolution step LLVM then ran a
5-iteration loop of a load, a compare and a blend per element (an insert at a dynamic index)
and extracted the lanes again for the broadcasts. Unrolled, each element is a scalar load that
LLVM folds into its ``vbroadcastss`` from memory.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, vector

__all__ = ["unroll_strided_transfers", "MAX_UNROLLED"]

#: Longest vector unrolled: beyond this the loop's code is the smaller choice (and such a read
#: is not on a register tile's hot path).
MAX_UNROLLED: int = 32


def _strides(t: ir.MemRefType) -> list[int] | None:
    """The memref's strides (dynamic ones as ``ShapedType.get_dynamic_stride_or_offset()``), or
    None for a layout that has none (not a strided form)."""
    try:
        return list(t.get_strides_and_offset()[0])
    except (RuntimeError, ValueError):
        return None


def _walked_dim(op: ir.Operation, mem: ir.MemRefType, vec: ir.VectorType) -> int | None:
    """The memref dim the 1-D vector of transfer `op` walks, if the transfer is one this module
    unrolls (in bounds, unmasked, short, not contiguous); else None."""
    if vec.rank != 1 or vec.is_dynamic_dim(0) or vec.scalable or vec.get_dim_size(0) > MAX_UNROLLED:
        return None
    if isinstance(mem.element_type, ir.IntegerType) and ir.IntegerType(mem.element_type).width == 1:
        return None  # i1 buffers are widened later (pipeline._widen_i1_memrefs)
    in_bounds = op.attributes["in_bounds"] if "in_bounds" in op.attributes else None
    if in_bounds is None or not all(ir.BoolAttr(b).value for b in ir.ArrayAttr(in_bounds)):
        return None  # out-of-bounds lanes need the padding / the skipped stores of the loop
    results = ir.AffineMapAttr(op.attributes["permutation_map"]).value.results
    if len(results) != 1 or not isinstance(results[0], ir.AffineDimExpr):
        return None  # a broadcast read: one load, already cheap
    dim = ir.AffineDimExpr(results[0]).position
    strides = _strides(mem)
    if strides is None or (dim == mem.rank - 1 and strides[dim] == 1):
        return None  # contiguous: one vector load or store
    return dim


def _lane_indices(indices: list[ir.Value], dim: int, lanes: int) -> list[list[ir.Value]]:
    """The memref indices of each lane: ``indices`` with ``dim`` advanced by the lane number."""
    out = []
    for lane in range(lanes):
        idx = list(indices)
        if lane:
            idx[dim] = arith.addi(indices[dim], arith.constant(ir.IndexType.get(), lane))
        out.append(idx)
    return out


def unroll_strided_transfers(module: ir.Module) -> int:
    """Unroll the module's short non-contiguous 1-D transfers into scalar loads and stores (see
    the module docstring); returns how many it rewrote."""
    from onnxc.transforms.onnx_utils import collect_ops

    found = collect_ops(module.operation, lambda op: op.name in ("vector.transfer_read", "vector.transfer_write"))
    count = 0
    with module.context:
        for op in found:
            reading = op.name == "vector.transfer_read"
            # transfer_read(base, indices..., padding[, mask]); transfer_write(value, base, indices...[, mask])
            base = op.operands[0 if reading else 1]
            if not isinstance(base.type, ir.MemRefType):
                continue
            mem = ir.MemRefType(base.type)
            vec = ir.VectorType(op.results[0].type if reading else op.operands[0].type)
            first = 1 if reading else 2
            if len(op.operands) != first + mem.rank + (1 if reading else 0):
                continue  # masked
            dim = _walked_dim(op, mem, vec)
            if dim is None:
                continue
            indices = list(op.operands[first : first + mem.rank])
            with ir.InsertionPoint(op), op.location:
                lanes = _lane_indices(indices, dim, vec.get_dim_size(0))
                if reading:
                    loads = [memref.load(base, idx) for idx in lanes]
                    op.results[0].replace_all_uses_with(vector.from_elements(vec, loads))
                else:
                    value = op.operands[0]
                    for lane, idx in enumerate(lanes):
                        memref.store(vector.extract(value, [], [lane]), base, idx)
            op.erase()
            count += 1
    return count
