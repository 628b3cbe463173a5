"""Where a dynamic dim of a lowered tensor comes from: two dims with one source are the same size.

What: `dim_source(v, j)` follows dim `j` of the tensor `v` back through ops whose result size is
another value's by construction: a linalg op's result dim is its init's (destination-passing
style), a `tensor.empty` dim is its size operand, `tensor.dim x, c` is dim c of x, a
`tensor.expand_shape` dim is its `output_shape` operand, a `tensor.collapse_shape` dim whose group
holds one dynamic source dim (the others 1) is that dim, a `tensor.reshape` dim is its shape's
element (when the shape is a `tensor.from_elements` of `index_cast`s of index values), a
`tensor.cast` keeps its source's dims.
It stops at a block argument (a model input), another op, or a static dim. `same_size(a, b)` says
whether two (value, dim) pairs reach one source, i.e. are equal at run time for every input.

Why: the broadcast lowering (`common.broadcast_plan`) must know whether two dynamic dims are equal;
when it cannot prove it, it reads the inputs at run-time indices (`tensor.extract` at `min(i,
size - 1)`, a scalar gather the vectorizer cannot turn into vector loads) and computes the result
size as a `select` chain. With a dynamic batch, `x * Sigmoid(x)` (SiLU) saw two different values
(the Conv's and the Sigmoid's results) and took that path although both sizes are the input's
batch: a dynamic-batch EfficientNet had 100 such gathers, which also kept layout propagation from
removing the NCHW/NHWC transposes around them (74 transposes left, 3 with a static batch), and ran
2.4-3.4x slower than its static twin.

A dim that reaches no common source is not proven equal (the caller keeps its run-time read), so
the answer is only ever conservative.
"""

from __future__ import annotations

from mlir import ir

__all__ = ["DimSource", "dim_source", "same_size"]

#: ("static", v, j): dim j of v is static; ("dim", v, j): dim j of v, v a block argument or a
#: result of an op not followed; ("size", s, 0): the index value s (a `tensor.empty` or
#: `expand_shape` size operand that is not a `tensor.dim`).
DimSource = tuple[str, ir.Value, int]

#: Ops whose only result has its init's (last operand's) shape.
_LAST_OPERAND_SHAPED = frozenset({"linalg.transpose", "linalg.broadcast", "linalg.fill", "linalg.copy"})


def _op(v: ir.Value) -> ir.Operation | None:
    owner = v.owner
    return owner.operation if isinstance(owner, (ir.Operation, ir.OpView)) else None


def _constant_index(v: ir.Value) -> int | None:
    op = _op(v)
    if op is None or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    return attr.value if isinstance(attr, ir.IntegerAttr) else None


def _dim_of(size: ir.Value) -> tuple[ir.Value, int] | None:
    """(x, c) when `size` is `tensor.dim x, c` with a constant c."""
    op = _op(size)
    if op is None or op.name != "tensor.dim":
        return None
    c = _constant_index(op.operands[1])
    return None if c is None else (op.operands[0], c)


def _num_inits(op: ir.Operation) -> int | None:
    """How many init operands a destination-style linalg op has (its operand segments)."""
    if "operandSegmentSizes" not in op.attributes:
        return None
    segments = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    return segments[1] if len(segments) == 2 else None


def dim_source(v: ir.Value, j: int) -> DimSource:
    """The source of dim `j` of tensor `v` (see the module docstring). Iterative: with dynamic
    shapes every op's size is the previous op's, so the chain is as long as the model."""
    while True:
        t = v.type
        if not isinstance(t, ir.RankedTensorType) or not t.is_dynamic_dim(j):
            return ("static", v, j)
        op = _op(v)
        if op is None:
            return ("dim", v, j)
        name = op.name
        if name in ("tensor.empty", "tensor.expand_shape"):
            k = sum(1 for d in range(j) if t.is_dynamic_dim(d))  # the dynamic sizes are in dim order
            size = op.operands[k + (1 if name == "tensor.expand_shape" else 0)]
            dim = _dim_of(size)
            if dim is None:
                return ("size", size, 0)
            v, j = dim
        elif name == "tensor.collapse_shape":
            src = op.operands[0].type
            group = [ir.IntegerAttr(d).value for d in ir.ArrayAttr(op.attributes["reassociation"])[j]]
            dynamic = [d for d in group if src.is_dynamic_dim(d)]
            if len(dynamic) != 1 or any(src.get_dim_size(d) != 1 for d in group if d != dynamic[0]):
                return ("dim", v, j)
            v, j = op.operands[0], dynamic[0]
        elif name == "tensor.reshape":
            # Dim j is element j of the shape operand: traced when that is a tensor.from_elements
            # of index_casts of index values (how the Reshape lowering builds a computed shape),
            # so q, k and v reshaped by one shape, and the empties sized by the same values, agree.
            shape = _op(op.operands[1])
            if shape is None or shape.name != "tensor.from_elements":
                return ("dim", v, j)
            cast = _op(shape.operands[j])
            if cast is None or cast.name != "arith.index_cast" or not isinstance(cast.operands[0].type, ir.IndexType):
                return ("dim", v, j)
            size = cast.operands[0]
            dim = _dim_of(size)
            if dim is None:
                return ("size", size, 0)
            v, j = dim
        elif name == "tensor.cast":
            v = op.operands[0]
        elif name in _LAST_OPERAND_SHAPED and len(op.results) == 1:
            v = op.operands[len(op.operands) - 1]
        elif name.startswith("linalg.") and (inits := _num_inits(op)) is not None and len(op.results) == inits:
            v = op.operands[len(op.operands) - inits + ir.OpResult(v).result_number]
        else:
            return ("dim", v, j)


def same_size(a: tuple[ir.Value, int], b: tuple[ir.Value, int]) -> bool:
    """Whether dim a[1] of a[0] and dim b[1] of b[0] are provably equal (one source)."""
    if a[0] == b[0] and a[1] == b[1]:
        return True
    sa, sb = dim_source(*a), dim_source(*b)
    return sa[0] == sb[0] != "static" and sa[1] == sb[1] and sa[2] == sb[2]
