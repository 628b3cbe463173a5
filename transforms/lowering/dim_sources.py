"""Where a dynamic dim of a lowered tensor comes from: two dims with one source are the same size.

What: `dim_source(v, j)` follows dim `j` of the tensor `v` back through ops whose result size is
another value's by construction: a linalg op's result dim is its init's (destination-passing
style), a `tensor.empty` dim is its size operand, `tensor.dim x, c` is dim c of x, a
`tensor.expand_shape` dim is its `output_shape` operand, a `tensor.collapse_shape` dim whose group
holds one dynamic source dim (the others 1) is that dim, `tensor.insert`/`insert_slice` have their
destination's dims, an `scf.for` result its init's when the body yields it at the size it got
(induction), a (not rank-reducing) `tensor.extract_slice` dim is its size operand, a `tensor.reshape` dim is its shape's
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

__all__ = ["SHARED_DIMS_CHECKED", "DimSource", "check_shared_dim_params", "dim_source", "equal_or_invalid", "index_source", "is_size_of", "same_size"]

#: Unit attribute on a `func.func` whose entry checks that arguments' dims sharing a `dim_param`
#: name are equal (`check_shared_dim_params`): only then are they one source.
SHARED_DIMS_CHECKED = "onnxc.shared_dims_checked"
#: The importer's argument attribute: one `dim_param` name per dim ("" for none).
_DIM_PARAMS = "onnx.dim_params"

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


def _arg_attr(fn: ir.Operation, i: int, name: str) -> ir.Attribute | None:
    """Argument attribute `name` of argument i of the `func.func` fn, or None."""
    if "arg_attrs" not in fn.attributes:
        return None
    arg_attrs = ir.ArrayAttr(fn.attributes["arg_attrs"])
    if i >= len(arg_attrs):
        return None
    entry = ir.DictAttr(arg_attrs[i])
    return entry[name] if name in entry else None


def _arg_dim_params(fn: ir.Operation, i: int) -> list[str]:
    """The `dim_param` names of argument i of `fn` ("" for an unnamed dim; [] without any)."""
    names = _arg_attr(fn, i, _DIM_PARAMS)
    return [] if names is None else [ir.StringAttr(a).value for a in ir.ArrayAttr(names)]


def _arg_label(fn: ir.Operation, i: int) -> str:
    """How an error names argument i: the ONNX input's name, else its position."""
    name = _arg_attr(fn, i, "onnx.name")
    return f"input '{ir.StringAttr(name).value}'" if name is not None else f"input {i}"


def _first_named(fn: ir.Operation, block: ir.Block) -> dict[str, tuple[int, int]]:
    """For each `dim_param` name on a dynamic dim of `fn`'s arguments: the first (argument, dim)."""
    first: dict[str, tuple[int, int]] = {}
    for i, arg in enumerate(block.arguments):
        t = arg.type
        if not isinstance(t, ir.RankedTensorType):
            continue
        for j, name in enumerate(_arg_dim_params(fn, i)):
            if name and j < t.rank and t.is_dynamic_dim(j):
                first.setdefault(name, (i, j))
    return first


def _shared_arg_source(v: ir.Value, j: int) -> DimSource:
    """Dim j of the block argument v: the first argument's dim of the same `dim_param` name when
    the function checks that they agree (`SHARED_DIMS_CHECKED`), else itself."""
    arg = ir.BlockArgument(v)
    block = arg.owner
    if not isinstance(block, ir.Block):
        return ("dim", v, j)
    owner = block.owner
    fn = owner.operation if owner is not None else None  # (a FuncOp view's `name` is its symbol)
    if fn is None or fn.name != "func.func" or SHARED_DIMS_CHECKED not in fn.attributes:
        return ("dim", v, j)
    if list(fn.regions[0].blocks)[0] != block:  # an argument of another block than the entry
        return ("dim", v, j)
    names = _arg_dim_params(fn, arg.arg_number)
    if j >= len(names) or not names[j]:
        return ("dim", v, j)
    i, k = _first_named(fn, block).get(names[j], (arg.arg_number, j))
    return ("dim", block.arguments[i], k)


def check_shared_dim_params(fn: ir.Operation, who: str) -> None:
    """At the current insertion point (the entry of `fn`, a lowered `func.func` whose arguments
    carry the importer's `onnx.dim_params`): a run-time check per dynamic dim whose `dim_param`
    name an earlier argument's dynamic dim already has, that the two are equal (the model's
    inputs declare them one size; a caller that breaks it gets an error naming both inputs, not
    an answer computed with one of the sizes), then mark `fn` so `dim_source` treats them as one
    source. `who` names the function in the error."""
    from mlir.dialects import arith, tensor

    from onnxc.transforms.lowering.runtime_checks import require

    block = fn.regions[0].blocks[0]
    first = _first_named(fn, block)
    idx = ir.IndexType.get()
    for i, arg in enumerate(block.arguments):
        t = arg.type
        if not isinstance(t, ir.RankedTensorType):
            continue
        for j, name in enumerate(_arg_dim_params(fn, i)):
            if not name or j >= t.rank or not t.is_dynamic_dim(j) or first.get(name, (i, j)) == (i, j):
                continue
            fi, fj = first[name]
            mine = tensor.dim(arg, arith.constant(idx, j))
            theirs = tensor.dim(block.arguments[fi], arith.constant(idx, fj))
            # Names go into a format string: their braces are escaped.
            lab, first_lab, nm = (s.replace("{", "{{").replace("}", "}}") for s in (_arg_label(fn, i), _arg_label(fn, fi), name))
            what = f"{lab} dim {j} is '{nm}' = {{mine}}, but {first_lab} dim {fj} is '{nm}' = {{theirs}}"
            require(arith.cmpi(arith.CmpIPredicate.eq, mine, theirs), ("", who), what, [("mine", mine), ("theirs", theirs)])
    fn.attributes[SHARED_DIMS_CHECKED] = ir.UnitAttr.get()


def index_source(size: ir.Value) -> DimSource:
    """The source of an index value used as a size: `tensor.dim x, c` is dim c of x followed by
    `dim_source`; any other value is its own source ("size")."""
    dim = _dim_of(size)
    return ("size", size, 0) if dim is None else dim_source(*dim)


def dim_source(v: ir.Value, j: int) -> DimSource:
    """The source of dim `j` of tensor `v` (see the module docstring). Iterative: with dynamic
    shapes every op's size is the previous op's, so the chain is as long as the model."""
    while True:
        t = v.type
        if not isinstance(t, ir.RankedTensorType) or not t.is_dynamic_dim(j):
            return ("static", v, j)
        op = _op(v)
        if op is None:
            return _shared_arg_source(v, j) if isinstance(v.owner, ir.Block) else ("dim", v, j)
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
        elif name == "tensor.extract_slice" and ir.RankedTensorType(op.operands[0].type).rank == t.rank:
            # A (not rank-reducing) slice's dynamic dim is its size operand, in dim order after
            # the dynamic offsets.
            static_sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
            offsets = sum(1 for o in ir.DenseI64ArrayAttr(op.attributes["static_offsets"]) if o == ir.ShapedType.get_dynamic_size())
            k = sum(1 for d in static_sizes[:j] if d == ir.ShapedType.get_dynamic_size())
            size = op.operands[1 + offsets + k]
            dim = _dim_of(size)
            if dim is None:
                return ("size", size, 0)
            v, j = dim
        elif name in ("tensor.insert", "tensor.insert_slice"):
            v = op.operands[1]  # the destination's shape
        elif name == "scf.for":
            # A loop-carried tensor keeps its init's size when the body yields it at the size it
            # got (by induction over the iterations): TopK's or a scan's result buffer.
            i = ir.OpResult(v).result_number
            body = op.regions[0].blocks[0]
            yielded = list(body.operations)[-1].operands[i]
            carried = body.arguments[1 + i]
            if dim_source(yielded, j) != ("dim", carried, j):
                return ("dim", v, j)
            v = op.operands[3 + i]
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
    return _one_source(dim_source(*a), dim_source(*b))


def _one_source(sa: DimSource, sb: DimSource) -> bool:
    """Whether two sources are one dynamic source (two static dims are not: their sizes decide)."""
    return sa[0] == sb[0] != "static" and sa[1] == sb[1] and sa[2] == sb[2]


def is_size_of(size: ir.Value, v: ir.Value, j: int) -> bool:
    """Whether the index value `size` is provably dim j of tensor v (both reach one dynamic source),
    e.g. a result size taken from one value and an operand sized by another of the same source."""
    return _one_source(index_source(size), dim_source(v, j))


def _clamp_of(size: ir.Value) -> tuple[ir.Value, int] | None:
    """(x, c) when `size` is `arith.minsi`/`minui` of x and a constant c (either order)."""
    op = _op(size)
    if op is None or op.name not in ("arith.minsi", "arith.minui"):
        return None
    for x, c in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
        k = _constant_index(c)
        if k is not None:
            return x, k
    return None


def equal_or_invalid(a: tuple[ir.Value, int], b: tuple[ir.Value, int]) -> tuple[ir.Value, int] | None:
    """Whether dims a and b of two broadcast operands can only be equal or not broadcast at all:
    one is `min(other, c)` with a constant c > 1. Then min(x, c) is 1 exactly when x is (x is a
    dim, not negative), and when they differ x > c > 1: two sizes other than 1 that do not
    broadcast. So after a check that each is 1 or the other, both are read at the loop index.
    Returns the unclamped one of the two (the better source for the result's size), else None."""
    for x, y in ((a, b), (b, a)):
        src = dim_source(*y)
        if src[0] != "size":
            continue
        clamp = _clamp_of(src[1])
        if clamp is None or clamp[1] <= 1:
            continue
        if _one_source(index_source(clamp[0]), dim_source(*x)):
            return x
    return None
