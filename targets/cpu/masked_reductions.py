"""Masked vector reductions become a select of the reduction's neutral value plus a plain reduction.

Why: vectorizing a reduction over a loop whose extent is not a multiple of the vector length
masks the tail (``vector.mask %m { vector.reduction <kind>, %v, %acc }``), and in the LLVM 22.1.8
wheels the masked form lowers (to LLVM's vector-predicated ``vp.reduce.*``) with a wrong neutral
value for ``maximumf``: ReduceMax of a row of 17 all-negative floats returned -1.4e-45 (the
smallest negative denormal), and a Softmax of such a row NaN. A wrong answer is never acceptable,
and this form is correct by construction for every combining kind: the masked-off lanes are
replaced by the kind's identity (``-inf`` for max, ``+inf`` for min, 0 for add/or/xor, 1 for mul,
all ones for and, the integer extremes for integer min/max), then an unmasked ``vector.reduction``
folds the whole vector. The select is one instruction per vector (a blend), so the cost is nil.

``unmask_reductions(module)`` runs after vectorization (the vector stage) and touches only
``vector.mask`` ops whose body is a single ``vector.reduction``; other masked ops (transfers) are
left to upstream, which handles them.
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith, vector

__all__ = ["unmask_reductions"]

_FLOAT_IDENTITY = {
    "add": 0.0,
    "mul": 1.0,
    "maximumf": -math.inf,
    "maxnumf": -math.inf,
    "minimumf": math.inf,
    "minnumf": math.inf,
}


def _int_identity(kind: str, width: int) -> int | None:
    """The identity of an integer combining kind at ``width`` bits (signless two's complement)."""
    ones = -1  # all bits set, as a signed value
    return {
        "add": 0,
        "mul": 1,
        "or": 0,
        "xor": 0,
        "and": ones,
        "maxsi": -(1 << (width - 1)),
        "minsi": (1 << (width - 1)) - 1,
        "maxui": 0,
        "minui": ones,
    }.get(kind)


def _kind_name(attr: ir.Attribute) -> str | None:
    """The combining kind's name, found by comparing the attribute with each kind's attribute."""
    for kind in vector.CombiningKind:
        if attr == ir.Attribute.parse(f"#vector.kind<{kind}>", attr.context):
            return str(kind)
    return None


def _identity_vector(vtype: ir.VectorType, kind: str) -> ir.Value | None:
    """A splat constant of the kind's identity for ``vtype``, or None when there is none."""
    elem = vtype.element_type
    if isinstance(elem, ir.FloatType):
        value = _FLOAT_IDENTITY.get(kind)
        if value is None:
            return None
        scalar = ir.FloatAttr.get(elem, value)
    elif isinstance(elem, ir.IntegerType):
        ivalue = _int_identity(kind, elem.width)
        if ivalue is None:
            return None
        if elem.width == 1:
            ivalue = -1 if ivalue else 0
        scalar = ir.IntegerAttr.get(elem, ivalue)
    else:
        return None
    return arith.constant(vtype, ir.DenseElementsAttr.get_splat(vtype, scalar))


def unmask_reductions(module: ir.Module | ir.Operation) -> int:
    """Rewrite every masked ``vector.reduction`` of ``module``; returns how many were rewritten."""
    root = module.operation
    masks: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "vector.mask":
            masks.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    rewritten = 0
    for mask_op in masks:
        # vector.mask %m[, %passthru] { vector.reduction ...; vector.yield %r }: a passthru is
        # only meaningful for ops producing vectors; a reduction produces a scalar.
        if len(mask_op.operands) != 1 or len(mask_op.results) != 1:
            continue
        body = list(mask_op.regions[0].blocks[0].operations)
        if len(body) != 2 or body[0].name != "vector.reduction":
            continue
        red = body[0]
        src = red.operands[0]
        vtype = src.type
        if not isinstance(vtype, ir.VectorType) or vtype.rank != 1:
            continue
        kind = _kind_name(red.attributes["kind"])
        if kind is None:
            continue
        acc = red.operands[1] if len(red.operands) > 1 else None
        fastmath = red.attributes["fastmath"] if "fastmath" in red.attributes else None
        with ir.InsertionPoint(mask_op), mask_op.location:
            neutral = _identity_vector(vtype, kind)
            if neutral is None:
                continue
            selected = arith.select(mask_op.operands[0], src, neutral)
            plain = vector.reduction(red.results[0].type, red.attributes["kind"], selected, acc=acc, fastmath=fastmath)
        mask_op.results[0].replace_all_uses_with(plain)
        mask_op.erase()
        rewritten += 1
    return rewritten
