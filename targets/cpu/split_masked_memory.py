"""Masked loads and stores wider than a vector register, split into register-wide ones.

What: ``split_wide_masked_memory(module, vector_bits)`` rewrites each ``llvm.intr.masked.load``
and ``llvm.intr.masked.store`` of the LLVM dialect whose vector is wider than ``vector_bits``
(the target CPU's register, ``CpuFeatures.vector_bits``) into one masked load/store per
register-wide piece (the last piece may be narrower): each piece's mask, pass-through and stored
value are ``llvm.shufflevector`` slices of the original's, its address a constant
``llvm.getelementptr`` from the original's, and a load's pieces are put back together by
shuffles. Returns how many ops it rewrote. The values loaded and stored are unchanged: the same
lanes are read and written under the same mask bits.

Why: LLVM's type legalizer splits a masked load or store of an illegal (too wide) vector itself,
but gives the pieces memory operands of unknown size; when it then finds one piece's mask all
true it makes that piece a plain load or store, still of unknown size. The X86 pass that avoids
store-forwarding blocks (``x86-avoid-sfb``, run by every code generation level above none) reads
the size of such a plain access next to a load/store copy and asserts: the process aborted
(SIGABRT, ``LocationSize::getValue``) while JIT-compiling
``test_attention_4d_gqa_softcap`` at ``jit_opt_level=0`` on an AVX2 CPU, whose tiles use 16-lane
f32 vectors (two ymm registers) with masks; at higher levels LLVM's optimizer removed the copy
next to it, by luck (``llc -O2`` on the unoptimized IR aborts the same way). Pieces of a
register's width are legal: the legalizer leaves them alone, and a piece whose mask the code
generator proves all true becomes a plain access of known size.
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import llvm

__all__ = ["split_wide_masked_memory"]

_LOAD, _STORE = "llvm.intr.masked.load", "llvm.intr.masked.store"


def _pieces(lanes: int, per_register: int) -> list[tuple[int, int]]:
    """(first lane, lane count) of each register-wide piece of a `lanes`-lane vector."""
    return [(first, min(per_register, lanes - first)) for first in range(0, lanes, per_register)]


def _slice(v: ir.Value, first: int, count: int) -> ir.Value:
    """Lanes [first, first + count) of the 1-D vector `v`, as a vector of `count` lanes."""
    t = ir.VectorType(v.type)
    return llvm.ShuffleVectorOp(ir.VectorType.get([count], t.element_type), v, v, list(range(first, first + count))).result


def _offset(ptr: ir.Value, elem: ir.Type, first: int) -> ir.Value:
    """`ptr` advanced by `first` elements of type `elem`."""
    if first == 0:
        return ptr
    return llvm.GEPOp(ptr.type, ptr, [], [first], elem, 0).result


def _piece_alignment(alignment: int, first: int, elem_bytes: int) -> int:
    """The alignment a piece starting `first` elements in can still claim."""
    return math.gcd(alignment, first * elem_bytes) if first else alignment


def split_wide_masked_memory(module: ir.Module, vector_bits: int) -> int:
    """Split the masked loads/stores of ``module`` wider than ``vector_bits`` (see the module
    docstring); returns how many were rewritten."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in (_LOAD, _STORE):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    count = 0
    for op in found:
        is_load = op.name == _LOAD
        vt = ir.VectorType(op.results[0].type if is_load else op.operands[0].type)
        if vt.rank != 1 or vt.scalable:
            continue
        elem = vt.element_type
        bits = ir.FloatType(elem).width if isinstance(elem, ir.FloatType) else ir.IntegerType(elem).width if isinstance(elem, ir.IntegerType) else 0
        lanes = vt.shape[0]
        if not bits or bits % 8 or lanes * bits <= vector_bits:
            continue
        per_register = max(1, vector_bits // bits)
        alignment = ir.IntegerAttr(op.attributes["alignment"]).value if "alignment" in op.attributes else bits // 8
        i32 = ir.IntegerType.get_signless(32)
        with op.location, ir.InsertionPoint(op):
            if is_load:
                ptr, mask = op.operands[0], op.operands[1]
                passthru = op.operands[2] if len(op.operands) > 2 else None
                result = passthru if passthru is not None else llvm.PoisonOp(vt).result
                for first, n in _pieces(lanes, per_register):
                    piece_t = ir.VectorType.get([n], elem)
                    extra = _slice(passthru, first, n) if passthru is not None else None
                    piece = llvm.MaskedLoadOp(piece_t, _offset(ptr, elem, first), _slice(mask, first, n), ir.IntegerAttr.get(i32, _piece_alignment(alignment, first, bits // 8)), pass_thru=extra).result
                    # Widen the piece to `lanes` (its lanes first; the rest repeat lane 0 and are
                    # not selected), then take its lanes into place over the running result.
                    wide = llvm.ShuffleVectorOp(vt, piece, piece, list(range(n)) + [0] * (lanes - n)).result
                    select = [lanes + (j - first) if first <= j < first + n else j for j in range(lanes)]
                    result = llvm.ShuffleVectorOp(vt, result, wide, select).result
                op.results[0].replace_all_uses_with(result)
            else:
                value, ptr, mask = op.operands[0], op.operands[1], op.operands[2]
                for first, n in _pieces(lanes, per_register):
                    llvm.MaskedStoreOp(_slice(value, first, n), _offset(ptr, elem, first), _slice(mask, first, n), ir.IntegerAttr.get(i32, _piece_alignment(alignment, first, bits // 8)))
        op.erase()
        count += 1
    return count
