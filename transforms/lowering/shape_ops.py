"""Data movement and shape ops: Constant, ConstantOfShape, Shape, Size, Range, Reshape, Flatten,
Transpose, Squeeze, Unsqueeze, Concat, Split, Slice, Gather, GatherElements, Expand, Tile, Pad.

Shape-computing inputs (Reshape's shape, Slice's starts/ends, axes, Expand's shape, pads...) are
read from constants when they are constants; Reshape, ConstantOfShape and Range also work on
runtime values (the output rank must still be known: the shape input has a static length).
Views become `tensor.expand_shape`/`collapse_shape`/`extract_slice`/`insert_slice` where they
fit, so later passes see plain tensor ops; index-computing ops (Gather, Tile, reflect Pad, Slice
with negative steps) are `linalg.generic`s whose body reads the source with `tensor.extract`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, tensor

from onnxc.transforms.lowering.dim_sources import DimSource, index_source, is_size_of
from onnxc.transforms.lowering.runtime_checks import require, require_indices, require_within
from onnxc.transforms.lowering.common import (
    LoweringError,
    DYN,
    Dim,
    Node,
    affine_map,
    broadcast_to,
    cast_to_type,
    collapse_unit_dims,
    const_index,
    const_scalar,
    const_tensor,
    constant_value,
    convert_element,
    dim,
    dim_add,
    dim_floordiv,
    dim_mul,
    dim_sub,
    dim_value,
    elem_of,
    empty,
    expand_unit_dims,
    extract_dims,
    extract_slice,
    filled,
    generic,
    identity_map,
    index_of,
    insert_slice,
    is_unsigned,
    lowers,
    normalize_axis,
    rank_of,
    reshape,
    scalar_of,
    shape_of,
    static_shape,
    tensor_type,
    to_index,
)

I64 = lambda: ir.IntegerType.get_signless(64)  # noqa: E731
IDX = ir.IndexType.get


def _rank(node: Node, i: int) -> int:
    return len(static_shape(node.onnx_types[i]))


# --- constants ------------------------------------------------------------------------------------


def _check_constant(node: Node) -> str | None:
    attrs = node.op.attributes
    if "value" in attrs:
        a = attrs["value"]
        if isinstance(a, ir.DenseElementsAttr):
            return None
        if is_unsigned(elem_of(a.type)):
            return "an unsigned dense_resource constant is not lowered"
        return None
    if any(k in attrs for k in ("value_int", "value_ints", "value_float", "value_floats")):
        return None
    return "only tensor, int(s) and float(s) constants are lowered (no strings, no sparse tensors)"


@lowers("Constant", check=_check_constant)
def lower_constant(node: Node) -> list[ir.Value]:
    """Constant -> `arith.constant` (unsigned element types rebuilt as signless)."""
    attrs = node.op.attributes
    out = node.result_type(0)
    if "value" in attrs:
        a = attrs["value"]
        et = elem_of(a.type)
        if is_unsigned(et):
            arr = constant_value(node.op.results[0])
            if arr is None:
                raise node.fail("cannot read the constant's elements")
            return [const_tensor(arr.view(arr.dtype.str.replace("u", "i")), convert_element(et))]
        return [arith.constant(a.type, a)]
    arr = constant_value(node.op.results[0])
    assert arr is not None
    return [const_tensor(np.asarray(arr), elem_of(out))]


def _check_shape_input(node: Node, i: int) -> str | None:
    s = static_shape(node.onnx_types[i])
    if len(s) != 1 or s[0] is None:
        return f"input {i} must be a 1-D tensor of static length (the output rank)"
    return None


def _dims_from_input(node: Node, i: int) -> list[Dim]:
    """Target dims from an integer shape input: ints if constant, else index values."""
    c = node.const_ints(i)
    if c is not None:
        return list(c)
    return list(extract_dims(node.input(i), node.in_elem(i)))


@lowers("ConstantOfShape", check=lambda n: _check_shape_input(n, 0))
def lower_constant_of_shape(node: Node) -> list[ir.Value]:
    """ConstantOfShape: `linalg.fill` of the `value` attribute (default float 0)."""
    elem = elem_of(node.result_type(0))
    val: float | int = 0
    if node.has_attr("value"):
        arr = np.array(ir.DenseElementsAttr(node.op.attributes["value"]))
        val = arr.reshape(-1)[0].item()
    return [filled(_dims_from_input(node, 0), elem, val)]


@lowers("Shape")
def lower_shape(node: Node) -> list[ir.Value]:
    """Shape (with start/end): a constant when the dims are static, else `tensor.from_elements`."""
    x = node.input(0)
    r = rank_of(x)
    start = int(node.attr("start", 0))
    end = node.attr("end")
    start = min(max(start + r if start < 0 else start, 0), r)
    end = r if end is None else int(end)
    end = min(max(end + r if end < 0 else end, 0), r)
    dims = shape_of(x)[start:end] if end > start else []
    if all(isinstance(d, int) for d in dims):
        return [const_tensor(np.array(dims, dtype=np.int64).reshape(len(dims)), I64())]
    vals = [arith.index_cast(I64(), dim_value(d)) for d in dims]
    return [tensor.from_elements(ir.RankedTensorType.get([len(dims)], I64()), vals)]


@lowers("Size")
def lower_size(node: Node) -> list[ir.Value]:
    """Size: the product of the dims, as a rank-0 i64 tensor."""
    n: Dim = 1
    for d in shape_of(node.input(0)):
        n = dim_mul(n, d)
    if isinstance(n, int):
        return [const_tensor(np.array(n, dtype=np.int64), I64())]
    return [tensor.from_elements(ir.RankedTensorType.get([], I64()), [arith.index_cast(I64(), n)])]


def _range_count_traced(node: Node) -> Dim | None:
    """An integer Range's length when its start and delta are constants and its limit a dim
    (`Range(0, Shape(x)[1], 1)`, T5's relative positions): `max(ceil((limit - start) / delta),
    0)`, which for start 0, step 1 is the dim itself, so the positions' size has the dim's source
    (the position bias then adds to the scores without run-time-index reads). None otherwise."""
    if not isinstance(node.in_elem(0), ir.IntegerType):
        return None
    traced = [shape_elements(node, i) for i in range(3)]
    if any(t is None or len(t) != 1 for t in traced):
        return None
    start, limit, delta = (t[0] for t in traced)  # type: ignore[index]
    if not isinstance(start, int) or not isinstance(delta, int) or delta == 0:
        return None
    if isinstance(limit, int):
        return max(-(-(limit - start) // delta), 0)
    if start == 0 and delta == 1:
        return limit  # a dim: not negative
    count = arith.ceildivsi(arith.subi(limit, const_index(start)), const_index(delta))
    return arith.maxsi(count, const_index(0))


@lowers("Range")
def lower_range(node: Node) -> list[ir.Value]:
    """Range: start + i * delta for i < max(ceil((limit - start) / delta), 0)."""
    onnx_elem = node.in_elem(0)
    elem = convert_element(onnx_elem)
    cs, cl, cd = node.const(0), node.const(1), node.const(2)
    fl = isinstance(elem, ir.FloatType)
    if cs is not None and cl is not None and cd is not None:
        # The spec's inputs are scalars; a one-element tensor of any rank (a function body's
        # Squeeze/Slice result) is read as its element, as the run-time path's `scalar_of` does.
        for what, c in (("start", cs), ("limit", cl), ("delta", cd)):
            if np.asarray(c).size != 1:
                raise node.fail(f"{what} must be a scalar, got a constant of shape {list(np.shape(c))}")
        fs, fl_, fd = (float(np.asarray(c).reshape(-1)[0]) for c in (cs, cl, cd))
        if fd == 0:
            raise node.fail("delta is 0: the range would be infinite")
        n: Dim = max(int(np.ceil((fl_ - fs) / fd)), 0)
    elif (counted := _range_count_traced(node)) is not None:
        n = counted
    else:
        s, lim, d = (scalar_of(node.input(i)) for i in range(3))
        # A run-time delta of 0 is invalid (an infinite range) and an integer division by it
        # killed the process (SIGFPE): a run-time error, and the count divides by 1 instead.
        zero = const_scalar(0, elem)
        is_zero = arith.cmpf(arith.CmpFPredicate.OEQ, d, zero) if fl else arith.cmpi(arith.CmpIPredicate.eq, d, zero)
        require(arith.xori(is_zero, const_scalar(True, ir.IntegerType.get_signless(1))), node.op, "the run-time delta is 0 (an infinite range)")
        d = arith.select(is_zero, const_scalar(1, elem), d)
        if fl:
            f64 = ir.F64Type.get()
            w = (lambda v: arith.extf(f64, v) if elem != f64 else v)  # noqa: E731
            q = arith.divf(arith.subf(w(lim), w(s)), w(d))
            from mlir.dialects import math

            cnt = arith.fptosi(I64(), math.ceil(q))
        else:
            diff = arith.subi(lim, s)
            cnt = arith.ceildivsi(diff, d)
            cnt = arith.extsi(I64(), cnt) if elem != I64() else cnt
        cnt = arith.maxsi(cnt, const_scalar(0, I64()))
        n = arith.index_cast(IDX(), cnt)
    init = empty([n], elem)
    start, delta = node.input(0), node.input(2)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        i = index_of(0)
        s = scalar_of(start)
        d = scalar_of(delta)
        if fl:
            iv = arith.sitofp(elem, arith.index_cast(I64(), i))
            return [arith.addf(s, arith.mulf(iv, d))]
        iv = arith.index_cast(elem, i)
        return [arith.addi(s, arith.muli(iv, d))]

    return generic([], [init], [identity_map(1)], ["parallel"], body)


# --- shape values traced to dims -------------------------------------------------------------------
#
# Models exported with dynamic axes compute their Reshape targets and Range limits at run time:
# `x.view(b, -1, h, d)` is `Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1], [h], [d]))`.
# Lowered element by element (tensor.extract of the Concat's result, the 0/-1 resolution as select
# chains), the result's dims have no traceable source: q, k, v and the attention mask then look
# like different sizes to the broadcast lowering, which reads them at run-time indices, and the
# attention MatMuls cannot be batch matmuls (issue 8: T5/Whisper dynamic 1.5-2.2x their static
# twins). `shape_elements` follows such a value back through the ONNX ops that only move its
# elements to the dims (`tensor.dim` of the lowered tensors) and constants they are, so the
# lowering of the consumer sees `[dim 0 of x, -1, 8, 64]`.

#: ONNX ops whose result holds their first input's elements in the same order.
_SAME_ELEMENTS = frozenset({"onnx.unsqueeze", "onnx.squeeze", "onnx.reshape", "onnx.flatten", "onnx.identity"})
#: Longest shape value followed (a shape, not data).
_MAX_TRACED = 64


def _element_count(t: ir.Type) -> int | None:
    """The static element count of a ranked integer tensor type, else None."""
    if not isinstance(t, ir.RankedTensorType) or not isinstance(elem_of(t), ir.IntegerType):
        return None
    shape = static_shape(t)
    if any(d is None for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _int_attr(op: ir.Operation, name: str, default: int | None) -> int | None:
    return ir.IntegerAttr(op.attributes[name]).value if name in op.attributes else default


def _trace_elements(lowering: object, v: ir.Value, depth: int) -> list[Dim] | None:
    """The elements of the ONNX-level integer value `v` as ints and index values (dims of lowered
    tensors), or None when one of them is computed otherwise (see the section comment)."""
    n = _element_count(v.type)
    if n is None or n > _MAX_TRACED:
        return None
    c = constant_value(v)
    if c is not None:
        return [int(e) for e in np.asarray(c).reshape(-1)]
    if depth == 0 or not isinstance(v.owner, (ir.Operation, ir.OpView)):
        return None
    op = v.owner.operation
    name = op.name
    out: list[Dim] | None = None
    if name == "onnx.shape":
        x = lowering.lookup(op.operands[0])  # type: ignore[attr-defined]
        if x is None or not isinstance(x.type, ir.RankedTensorType):
            return None
        r = rank_of(x)
        start, end = _int_attr(op, "start", 0), _int_attr(op, "end", r)
        assert start is not None and end is not None
        start = min(max(start + r if start < 0 else start, 0), r)
        end = min(max(end + r if end < 0 else end, 0), r)
        out = shape_of(x)[start:end] if end > start else []
    elif name in _SAME_ELEMENTS or name == "onnx.cast":
        if name == "onnx.cast":
            # An element copy only between integer types that hold every size and -1: not from
            # floats, not to bool, unsigned or narrow types (which wrap or truncate).
            to = elem_of(v.type)
            if _element_count(op.operands[0].type) is None or is_unsigned(to) or ir.IntegerType(to).width < 32:
                return None
        out = _trace_elements(lowering, op.operands[0], depth - 1)
    elif name == "onnx.concat":
        if len(static_shape(v.type)) != 1:
            return None
        out = []
        for operand in op.operands:
            part = _trace_elements(lowering, operand, depth - 1)
            if part is None:
                return None
            out += part
    elif name == "onnx.gather":
        data = _trace_elements(lowering, op.operands[0], depth - 1)
        indices = constant_value(op.operands[1])
        if data is None or indices is None or len(static_shape(op.operands[0].type)) != 1 or _int_attr(op, "axis", 0) not in (0, -1):
            return None
        out = []
        for i in np.asarray(indices).reshape(-1).tolist():
            i = int(i) + (len(data) if int(i) < 0 else 0)
            if not 0 <= i < len(data):
                return None  # out of range: the Gather's own lowering reports it
            out.append(data[i])
    elif name == "onnx.slice" and len(op.operands) >= 3 and "starts" not in op.attributes:
        data = _trace_elements(lowering, op.operands[0], depth - 1)
        params = [constant_value(o) if not isinstance(o.type, ir.NoneType) else None for o in op.operands[1:5]]
        if data is None or params[0] is None or params[1] is None or len(static_shape(op.operands[0].type)) != 1:
            return None
        if params[2] is not None and [int(a) for a in np.asarray(params[2]).reshape(-1)] not in ([0], [-1]):
            return None
        step = 1 if len(params) < 4 or params[3] is None else int(np.asarray(params[3]).reshape(-1)[0])
        if step == 0:
            return None
        big = 2**62  # ONNX's INT64_MAX "to the end": Python's slice clamps the same way
        start = max(min(int(np.asarray(params[0]).reshape(-1)[0]), big), -big)
        end = max(min(int(np.asarray(params[1]).reshape(-1)[0]), big), -big)
        out = data[start:end:step]
    if out is None or len(out) != n:
        return None
    return out


def shape_elements(node: Node, i: int) -> list[Dim] | None:
    """Input i of `node` (a small integer tensor: a shape, a limit) as ints and index values when
    every element is a constant or a dim of a lowered tensor (`Shape`/`Gather`/`Concat`/
    `Unsqueeze`/`Slice`/`Cast` of those), else None (the caller reads it at run time)."""
    if node.lowering is None or not node.has(i):
        return None
    return _trace_elements(node.lowering, node.op.operands[i], 24)


@dataclasses.dataclass
class _Factors:
    """A size as a product: a static coefficient times dynamic sources (`dim_sources`), each
    with a value that has it (for building the size)."""

    coef: int
    keys: list[DimSource]
    values: list[ir.Value]

    def times(self, other: "_Factors") -> "_Factors":
        return _Factors(self.coef * other.coef, self.keys + other.keys, self.values + other.values)

    def equals(self, other: "_Factors") -> bool:
        return self.coef == other.coef and self.over(other) is not None and len(self.keys) == len(other.keys)

    def over(self, other: "_Factors") -> "_Factors | None":
        """self / other when other's factors are among self's (None otherwise, or for a 0)."""
        if other.coef == 0 or self.coef % other.coef:
            return None
        keys, values = list(self.keys), list(self.values)
        for k in other.keys:
            at = next((n for n, mine in enumerate(keys) if mine == k), None)
            if at is None:
                return None
            del keys[at], values[at]
        return _Factors(self.coef // other.coef, keys, values)

    def size(self) -> Dim:
        """The size as a Dim: an int, the one source's value, or their product."""
        d: Dim = self.coef if not self.values or self.coef != 1 else self.values[0]
        for v in self.values[0 if self.coef != 1 else 1 :]:
            d = dim_mul(d, v)
        return d


def _factors(d: Dim) -> _Factors | None:
    """A Dim as factors; None for a size whose source is a static dim behind a dynamic type."""
    if isinstance(d, int):
        return _Factors(d, [], [])
    source = index_source(d)
    if source[0] == "static":
        return None
    return _Factors(1, [source], [d])


def _groups(src: list[_Factors], out: list[_Factors]) -> list[tuple[list[int], list[int]]] | None:
    """Contiguous groups of source and result dims with equal products (a collapse then an
    expand), static 1s attached to a neighbour; None when the products cannot be matched."""
    one = _Factors(1, [], [])
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) and j < len(out):
        gs, go = [i], [j]
        ps, po = src[i], out[j]
        i, j = i + 1, j + 1
        while not ps.equals(po):
            if po.over(ps) is not None and i < len(src):  # the source side is the smaller factor
                ps = ps.times(src[i])
                gs.append(i)
                i += 1
            elif ps.over(po) is not None and j < len(out):
                po = po.times(out[j])
                go.append(j)
                j += 1
            else:
                return None
        groups.append((gs, go))
        # A static 1 on one side only joins the group it follows.
        while i < len(src) and src[i].equals(one) and not (j < len(out) and out[j].equals(one)):
            gs.append(i)
            i += 1
        while j < len(out) and out[j].equals(one) and not (i < len(src) and src[i].equals(one)):
            go.append(j)
            j += 1
    if not groups or i < len(src) or j < len(out):
        return None
    return groups


def _reshape_by_groups(x: ir.Value, src: list[Dim], out: list[Dim], groups: list[tuple[list[int], list[int]]]) -> ir.Value:
    """x reshaped to `out` as `tensor.collapse_shape` (the source groups of several dims) then
    `tensor.expand_shape` (the result groups of several dims, sizes from `out`)."""
    elem = elem_of(x.type)
    if any(len(gs) > 1 for gs, _ in groups):
        mid: list[Dim] = []
        for gs, _ in groups:
            d: Dim = 1
            for k in gs:
                d = dim_mul(d, src[k])
            mid.append(d)
        rtype = tensor_type([d if isinstance(d, int) else None for d in mid], elem)
        x = tensor.collapse_shape(rtype, x, ir.ArrayAttr.get([_index_array([k for k in gs]) for gs, _ in groups]))
    if all(len(go) == 1 for _, go in groups):
        return x
    rtype = tensor_type(out, elem)
    dyn = [d for d in out if not isinstance(d, int)]
    static = [d if isinstance(d, int) else DYN for d in out]
    return tensor.expand_shape(rtype, x, ir.ArrayAttr.get([_index_array(go) for _, go in groups]), dyn, static)


def _index_array(ks: list[int]) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in ks])


def _reshape_traced(x: ir.Value, target: list[Dim], allowzero: bool) -> ir.Value | None:
    """Reshape to a target traced to dims and constants (`shape_elements`) when its sizes are
    provably the input's, regrouped: 0 copies the input dim, a -1 is the input's factors left
    after the others' cancel (`x.view(b, -1, h, d)` of [b, s, h*d] is [b, s, h, d]), and the
    dims pair off into groups of equal products. Then no run-time check is needed and the result
    is a `collapse_shape`/`expand_shape` whose dims have the input's sources. None otherwise
    (a dim below -1, a second -1, a count that does not provably match, a 0 dim): the caller
    computes and checks the target at run time."""
    src = shape_of(x)
    out: list[Dim] = []
    for i, t in enumerate(target):
        if isinstance(t, int) and t == 0 and not allowzero:
            if i >= len(src):
                return None
            out.append(src[i])
        else:
            out.append(t)
    consts = [o for o in out if isinstance(o, int)]
    if any(o < -1 or o == 0 for o in consts) or consts.count(-1) > 1 or any(isinstance(d, int) and d == 0 for d in src):
        return None
    src_f = [_factors(d) for d in src]
    out_f = [None if isinstance(o, int) and o == -1 else _factors(o) for o in out]
    if any(f is None for f in src_f) or any(f is None for o, f in zip(out, out_f) if not (isinstance(o, int) and o == -1)):
        return None
    total = _Factors(1, [], [])
    for f in src_f:
        total = total.times(f)  # type: ignore[arg-type]
    known = _Factors(1, [], [])
    for f in out_f:
        if f is not None:
            known = known.times(f)
    if -1 in consts:
        rest = total.over(known)
        if rest is None:
            return None
        k = next(n for n, f in enumerate(out_f) if f is None)
        out_f[k], out[k] = rest, rest.size()
    elif not total.equals(known):
        return None
    groups = _groups(src_f, out_f)  # type: ignore[arg-type]
    # Provably the same count but in no grouping, or a group expanding into two dynamic sizes
    # (memref's expand_shape lowering asserts on those, killing the process): a plain reshape.
    if groups is None or any(sum(not isinstance(out[k], int) for k in go) > 1 for _, go in groups):
        return reshape(x, out)
    return _reshape_by_groups(x, src, out, groups)


# --- reshapes -------------------------------------------------------------------------------------


def _check_reshape(node: Node) -> str | None:
    if node.version < 5:
        return "Reshape before opset 5 (shape attribute) is not lowered; run onnx-upgrade-ops"
    return _check_shape_input(node, 1)


@lowers("Reshape", check=_check_reshape)
def lower_reshape(node: Node) -> list[ir.Value]:
    """Reshape: 0 copies the input dim (unless allowzero), -1 is inferred; constant or runtime shape."""
    x = node.input(0)
    allowzero = int(node.attr("allowzero", 0))
    src = shape_of(x)
    c = node.const_ints(1)
    total: Dim = 1
    for d in src:
        total = dim_mul(total, d)
    if c is not None:
        out: list[Dim] = []
        for i, s in enumerate(c):
            if s == 0 and not allowzero:
                if i >= len(src):
                    raise node.fail("shape copies a dim the input does not have")
                out.append(src[i])
            else:
                out.append(s)
        if -1 in [o for o in out if isinstance(o, int)]:
            known: Dim = 1
            for o in out:
                if not (isinstance(o, int) and o == -1):
                    known = dim_mul(known, o)
            inferred = dim_floordiv(total, known) if not (isinstance(known, int) and known == 0) else 0
            out = [inferred if isinstance(o, int) and o == -1 else o for o in out]
        if all(isinstance(d, int) and d > 0 for d in [*src, *out]):
            # Static sizes that regroup (a channel split [1, C, H, W] -> [1, g, C/g, H, W]):
            # collapse/expand, which layout-propagation moves transposes through (a ShuffleNet
            # channel shuffle then runs channels-last) and later passes see as views.
            groups = _groups([_Factors(d, [], []) for d in src], [_Factors(d, [], []) for d in out])  # type: ignore[arg-type]
            if groups is not None:
                return [_reshape_by_groups(x, src, out, groups)]
        return [reshape(x, out)]
    traced = shape_elements(node, 1)
    if traced is not None:
        done = _reshape_traced(x, traced, bool(allowzero))
        if done is not None:
            return [done]
    # Runtime shape: compute each target dim with index arithmetic (from the traced dims when
    # there are: fewer run-time reads, the same checks).
    vals = [dim_value(t) for t in traced] if traced is not None else extract_dims(node.input(1), node.in_elem(1))
    zero, neg1, one = const_index(0), const_index(-1), const_index(1)
    dims: list[ir.Value] = []
    for i, v in enumerate(vals):
        if not allowzero and i < len(src):
            v = arith.select(arith.cmpi(arith.CmpIPredicate.eq, v, zero), dim_value(src[i]), v)
        dims.append(v)
    known = one
    for v in dims:
        known = arith.muli(known, arith.select(arith.cmpi(arith.CmpIPredicate.eq, v, neg1), one, v))
    inferred = arith.divsi(dim_value(total), arith.maxsi(known, one))
    dims = [arith.select(arith.cmpi(arith.CmpIPredicate.eq, v, neg1), inferred, v) for v in dims]
    # A run-time shape whose element count is not the input's is invalid (onnx.reference raises),
    # but reshaping to it made a view past the input's buffer: copies of it corrupted the heap
    # (compile fuzzer: SIGSEGV/abort). It is a run-time error (runtime_checks.py), and the code
    # goes on with [total, 1, ...], memory-safe, until the caller reads the status.
    count = one
    for v in dims:
        count = arith.muli(count, v)
    valid = arith.cmpi(arith.CmpIPredicate.eq, count, dim_value(total))
    require(valid, node.op, "the run-time target shape {target} has {count} elements, the input {total}",
            [("target", vals), ("count", count), ("total", dim_value(total))])  # fmt: skip
    # Dims below -1, or -1 twice, are invalid too (onnx.reference raises), and their product can
    # still match the input's count ([-2, -3] for 6 elements): a negative size made numpy fail.
    minus_ones = const_index(0)
    signs_ok = const_scalar(True, ir.IntegerType.get_signless(1))
    for v in vals:
        minus_ones = arith.addi(minus_ones, arith.select(arith.cmpi(arith.CmpIPredicate.eq, v, neg1), one, zero))
        signs_ok = arith.andi(signs_ok, arith.cmpi(arith.CmpIPredicate.sge, v, neg1))
    signs_ok = arith.andi(signs_ok, arith.cmpi(arith.CmpIPredicate.sle, minus_ones, one))
    require(signs_ok, node.op, "the run-time target shape {target} has a dim below -1 or more than one -1", [("target", vals)])
    valid = arith.andi(valid, signs_ok)
    dims = [arith.select(valid, v, dim_value(total) if i == 0 else one) for i, v in enumerate(dims)]
    return [reshape(x, dims)]


@lowers("Flatten")
def lower_flatten(node: Node) -> list[ir.Value]:
    """Flatten at `axis` to 2-D."""
    x = node.input(0)
    r = rank_of(x)
    axis = normalize_axis(int(node.attr("axis", 1)), r)
    shape = shape_of(x)
    a: Dim = 1
    b: Dim = 1
    for d in shape[:axis]:
        a = dim_mul(a, d)
    for d in shape[axis:]:
        b = dim_mul(b, d)
    return [reshape(x, [a, b])]


@lowers("Transpose")
def lower_transpose(node: Node) -> list[ir.Value]:
    """Transpose -> `linalg.transpose` (default permutation: reversed dims)."""
    x = node.input(0)
    r = rank_of(x)
    perm = node.attr("perm") or list(reversed(range(r)))
    perm = [int(p) for p in perm]
    if perm == list(range(r)):
        return [x]
    shape = shape_of(x)
    init = empty([shape[p] for p in perm], elem_of(x.type))
    return [linalg.transpose(x, outs=[init], permutation=perm).results[0]]


def _axes_of(node: Node, input_index: int, since_input: int) -> list[int] | None:
    """Axes from the attribute (old versions) or a constant input; None if not constant; []
    when absent."""
    if node.version >= since_input:
        if not node.has(input_index):
            return []
        return node.const_ints(input_index)
    return [int(a) for a in (node.attr("axes") or [])]


def _check_squeeze(node: Node) -> str | None:
    axes = _axes_of(node, 1, 13)
    if axes is None:
        s = static_shape(node.onnx_types[1])
        if len(s) != 1 or s[0] is None:
            return "axes must be a constant or a 1-D tensor of static length"
        return None
    shape = static_shape(node.onnx_types[0])
    if not axes and any(d is None for d in shape):
        return "Squeeze without axes of a tensor with dynamic dims"
    for a in axes:
        a2 = normalize_axis(a, len(shape))
        if not 0 <= a2 < len(shape) or shape[a2] not in (1, None):
            return f"cannot squeeze dim {a} of {node.onnx_types[0]}"
    return None


@lowers("Squeeze", check=_check_squeeze)
def lower_squeeze(node: Node) -> list[ir.Value]:
    """Squeeze -> `tensor.collapse_shape` (a dynamic squeezed dim is cast to 1 first)."""
    x = node.input(0)
    shape = static_shape(x.type)
    if _axes_of(node, 1, 13) is None:
        return [_squeeze_runtime(node, x)]
    axes = _axes_of(node, 1, 13) or []
    units = sorted({normalize_axis(a, len(shape)) for a in axes}) if axes else [i for i, d in enumerate(shape) if d == 1]
    if any(shape[u] is None for u in units):
        x = cast_to_type(x, tensor_type([1 if i in units else (d if d is not None else None) for i, d in enumerate(shape)], elem_of(x.type)))
    return [collapse_unit_dims(x, units)]


def _squeeze_runtime(node: Node, x: ir.Value) -> ir.Value:
    """Squeeze with runtime axes (static count k) as a bit mask of the axes: one reshape to a
    run-time shape (`_squeeze_runtime_reshape`), or to rank 0 one collapse per choice of k
    squeezable dims selected by the mask."""
    from itertools import combinations

    from onnxc.transforms.lowering.indexing import select_case

    shape = static_shape(x.type)
    r = len(shape)
    k = static_shape(node.onnx_types[1])[0]
    assert k is not None
    i64 = ir.IntegerType.get_signless(64)
    mask = const_scalar(0, i64)
    for j in range(k):
        a = _runtime_index(node, 1, j)
        a = arith.select(arith.cmpi(arith.CmpIPredicate.slt, a, const_index(0)), arith.addi(a, const_index(r)), a)
        # An axis out of range sets bit r, which no dim reads (a shift of 64 or more is poison).
        inside = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, a, const_index(0)), arith.cmpi(arith.CmpIPredicate.slt, a, const_index(r)))
        a = arith.select(inside, a, const_index(r))
        mask = arith.ori(mask, arith.shli(const_scalar(1, i64), arith.index_cast(i64, a)))
    if sum(d in (1, None) for d in shape) < k:
        raise node.fail("no dims can be squeezed")
    if r - k > 0:
        return _squeeze_runtime_reshape(x, mask, k)
    combos = [list(c) for c in combinations(range(r), k) if all(shape[i] in (1, None) for i in c)]
    shapes = [[d for i, d in enumerate(shape) if i not in c] for c in combos]
    joined = [s0 if all(sh[i] == s0 for sh in shapes) else None for i, s0 in enumerate(shapes[0])]
    rtype = tensor_type(joined, elem_of(x.type))

    def build(i: int) -> ir.Value:
        c = combos[i]
        v = x
        if any(shape[u] is None for u in c):
            v = cast_to_type(v, tensor_type([1 if j in c else d for j, d in enumerate(shape)], elem_of(x.type)))
        return collapse_unit_dims(v, c)

    keys = [sum(1 << a for a in c) for c in combos]
    return select_case(mask, keys, rtype, build)


def _squeeze_runtime_reshape(x: ir.Value, mask: ir.Value, k: int) -> ir.Value:
    """Squeeze with run-time axes (bit mask `mask`, k of them) to rank > 0: removing unit dims
    keeps the row-major order, so the result is `x` reshaped to a shape computed at run time
    (output dim p is the p-th input dim whose bit is clear). One reshape instead of one branch per
    choice of the squeezable dims (see `_unsqueeze_runtime`). Invalid axes (repeated, out of range,
    or naming a dim that is not 1) give [total, 1, ...]: memory-safe."""
    src = shape_of(x)
    r = len(src)
    i64 = ir.IntegerType.get_signless(64)
    idx = ir.IndexType.get()
    one, zero = const_index(1), const_index(0)
    out: list[ir.Value] = [one] * (r - k)
    removed = zero
    for q in range(r):
        bit = arith.index_cast(idx, arith.andi(arith.shrui(mask, const_scalar(q, i64)), const_scalar(1, i64)))
        kept = arith.cmpi(arith.CmpIPredicate.eq, bit, zero)
        pos = arith.subi(const_index(q), removed)  # the output position of input dim q when kept
        for p in range(min(q + 1, r - k)):
            take = arith.andi(kept, arith.cmpi(arith.CmpIPredicate.eq, pos, const_index(p)))
            out[p] = arith.select(take, dim_value(src[q]), out[p])
        removed = arith.addi(removed, bit)
    total: Dim = 1
    for d in src:
        total = dim_mul(total, d)
    count: ir.Value = one
    for d in out:
        count = arith.muli(count, d)
    valid = arith.andi(arith.cmpi(arith.CmpIPredicate.eq, removed, const_index(k)), arith.cmpi(arith.CmpIPredicate.eq, count, dim_value(total)))
    return reshape(x, [arith.select(valid, v, dim_value(total) if p == 0 else one) for p, v in enumerate(out)])


def _check_unsqueeze(node: Node) -> str | None:
    axes = _axes_of(node, 1, 13)
    if axes is None:
        s = static_shape(node.onnx_types[1])
        if len(s) != 1 or s[0] is None:
            return "axes must be a constant or a 1-D tensor of static length"
    return None


@lowers("Unsqueeze", check=_check_unsqueeze)
def lower_unsqueeze(node: Node) -> list[ir.Value]:
    """Unsqueeze -> `tensor.expand_shape`; with run-time axes (static count k), one
    `tensor.reshape` to a shape computed at run time (`_unsqueeze_runtime`)."""
    x = node.input(0)
    axes = _axes_of(node, 1, 13)
    if axes is not None:
        out_rank = rank_of(x) + len(axes)
        return [expand_unit_dims(x, sorted({normalize_axis(a, out_rank) for a in axes}))]
    return [_unsqueeze_runtime(node, x)]


def _unsqueeze_runtime(node: Node, x: ir.Value) -> ir.Value:
    """Unsqueeze with run-time axes: inserting unit dims keeps the row-major order, so the result
    is `x` reshaped to a shape computed at run time: output dim p is 1 where an axis names p, else
    the next input dim. One reshape whatever the rank (one branch per choice of the axes, as
    before, made C(rank + k, k) nested `scf.if`s: 24 s of bufferization for a rank-3 input and 3
    axes, exponential beyond; the compile fuzzer timed out on it). Axes out of range or repeated
    (invalid input) leave fewer than k unit positions: then the shape is [total, 1, ...], which is
    memory-safe (the CPU code cannot report the error at run time)."""
    src = shape_of(x)
    r = len(src)
    k = static_shape(node.onnx_types[1])[0]
    assert k is not None
    out_rank = r + k
    if out_rank >= 63:
        raise node.fail(f"Unsqueeze with run-time axes to rank {out_rank} is not lowered")
    i64 = ir.IntegerType.get_signless(64)
    idx = ir.IndexType.get()
    mask = const_scalar(0, i64)
    for j in range(k):
        a = _norm_index_rt(_runtime_index(node, 1, j), out_rank)
        # An axis out of range sets bit out_rank, which no output position reads.
        inside = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, a, const_index(0)), arith.cmpi(arith.CmpIPredicate.slt, a, const_index(out_rank)))
        a = arith.select(inside, a, const_index(out_rank))
        mask = arith.ori(mask, arith.shli(const_scalar(1, i64), arith.index_cast(i64, a)))
    one, zero = const_index(1), const_index(0)
    units = zero
    dims: list[ir.Value] = []
    for p in range(out_rank):
        bit = arith.index_cast(idx, arith.andi(arith.shrui(mask, const_scalar(p, i64)), const_scalar(1, i64)))
        j = arith.subi(const_index(p), units)  # the input dim output position p takes when not a unit
        d: ir.Value = dim_value(src[r - 1]) if r else one
        for q in range(r - 1):
            d = arith.select(arith.cmpi(arith.CmpIPredicate.eq, j, const_index(q)), dim_value(src[q]), d)
        dims.append(arith.select(arith.cmpi(arith.CmpIPredicate.eq, bit, one), one, d))
        units = arith.addi(units, bit)
    valid = arith.cmpi(arith.CmpIPredicate.eq, units, const_index(k))
    total: Dim = 1
    for d0 in src:
        total = dim_mul(total, d0)
    dims = [arith.select(valid, v, dim_value(total) if p == 0 else one) for p, v in enumerate(dims)]
    return reshape(x, dims)


@lowers("Concat")
def lower_concat(node: Node) -> list[ir.Value]:
    """Concat: `tensor.empty` of the joined shape and one `tensor.insert_slice` per input."""
    ins = [v for v in node.inputs if v is not None]
    r = rank_of(ins[0])
    axis = normalize_axis(int(node.attr("axis")), r)
    shape = shape_of(ins[0])
    total: Dim = 0
    for v in ins:
        total = dim_add(total, dim(v, axis))
    shape[axis] = total
    # Dims outside the axis known only at run time must agree: the result takes the first input's,
    # and a larger one in another input was inserted past the result's end (heap corruption: an
    # Attention with symbolic dims and a mutated kv_num_heads, its past and new keys concatenated;
    # the compile fuzzer). Static ones were checked before lowering.
    first = shape_of(ins[0])
    for n, v in enumerate(ins[1:], start=1):
        vs = shape_of(v)
        ok: ir.Value | None = None
        for j in range(r):
            if j == axis or (isinstance(vs[j], int) and isinstance(first[j], int)):
                continue
            same = arith.cmpi(arith.CmpIPredicate.eq, dim_value(vs[j]), dim_value(first[j]))
            ok = same if ok is None else arith.andi(ok, same)
        if ok is not None:
            require(ok, node.op, f"input {n} of the run-time shape {{shape}} does not match input 0's {{first}} outside axis {axis}",
                    [("shape", [dim_value(d) for d in vs]), ("first", [dim_value(d) for d in first])])  # fmt: skip
    out = empty(shape, elem_of(ins[0].type))
    off: Dim = 0
    for v in ins:
        offsets: list[Dim] = [0] * r
        offsets[axis] = off
        out = insert_slice(v, out, offsets)
        off = dim_add(off, dim(v, axis))
    return [out]


def _check_split(node: Node) -> str | None:
    if node.version >= 13 and node.has(1) and node.const(1) is None:
        s = static_shape(node.onnx_types[1])
        if len(s) != 1 or s[0] != len(node.op.results):
            return "split sizes must be a constant or a 1-D tensor with one size per output"
    r = _rank(node, 0)
    axis = normalize_axis(int(node.attr("axis", 0)), r)
    if not 0 <= axis < r:
        return f"axis out of range for rank {r}"
    return None


@lowers("Split", check=_check_split)
def lower_split(node: Node) -> list[ir.Value]:
    """Split into `extract_slice`s (sizes from the input/attribute, else equal parts)."""
    x = node.input(0)
    r = rank_of(x)
    axis = normalize_axis(int(node.attr("axis", 0)), r)
    n_out = len(node.op.results)
    sizes: list[Dim]
    runtime: list[Dim] | None = None
    if node.version >= 13:
        given = node.const_ints(1) if node.has(1) else None
        if node.has(1) and given is None:
            runtime = list(extract_dims(node.input(1), node.in_elem(1)))
    else:
        given = node.attr("split")
    d = dim(x, axis)
    if runtime is not None:
        # Run-time split sizes must be non-negative and add up to the dim: others sliced past the
        # input (onnx.reference answers by numpy's clipping; the spec calls them invalid).
        total = const_index(0)
        ok = const_scalar(True, ir.IntegerType.get_signless(1))
        for v in runtime:
            total = arith.addi(total, v)  # type: ignore[arg-type]
            ok = arith.andi(ok, arith.cmpi(arith.CmpIPredicate.sge, v, const_index(0)))  # type: ignore[arg-type]
        ok = arith.andi(ok, arith.cmpi(arith.CmpIPredicate.eq, total, dim_value(d)))
        require(ok, node.op, f"the run-time split sizes {{sizes}} do not add up to dim {axis} of size {{size}}",
                [("sizes", runtime), ("size", dim_value(d))])  # type: ignore[list-item]  # fmt: skip
        sizes = runtime
    elif given:
        sizes = [int(s) for s in given]
    elif isinstance(d, int):
        per = -(-d // n_out)
        sizes = [min(per, max(d - per * i, 0)) for i in range(n_out)]
    else:
        per_v = arith.ceildivsi(d, const_index(n_out))
        sizes = []
        for i in range(n_out):
            rest = arith.subi(d, arith.muli(per_v, const_index(i)))
            sizes.append(arith.minsi(per_v, arith.maxsi(rest, const_index(0))))
    outs = []
    off: Dim = 0
    shape = shape_of(x)
    for s in sizes:
        offsets: list[Dim] = [0] * r
        offsets[axis] = off
        sz = list(shape)
        sz[axis] = s
        outs.append(extract_slice(x, offsets, sz))
        off = dim_add(off, s)
    return outs


# --- slicing --------------------------------------------------------------------------------------


def _slice_params(node: Node) -> tuple[list[int] | None, list[int] | None, list[int] | None, list[int] | None, int]:
    """(starts, ends, axes, steps, n): constant lists, None for a runtime input; n is the number
    of sliced axes (the static length of starts)."""
    if node.version < 10:
        starts = [int(s) for s in node.attr("starts")]
        ends = [int(e) for e in node.attr("ends")]
        axes = [int(a) for a in (node.attr("axes") or range(len(starts)))]
        return starts, ends, axes, [1] * len(starts), len(starts)
    sl = static_shape(node.onnx_types[1])
    n = sl[0] if len(sl) == 1 and sl[0] is not None else -1
    starts, ends = node.const_ints(1), node.const_ints(2)
    axes = node.const_ints(3) if node.has(3) else (list(range(n)) if n >= 0 else None)
    steps = node.const_ints(4) if node.has(4) else ([1] * n if n >= 0 else None)
    return starts, ends, axes, steps, n


def _check_slice(node: Node) -> str | None:
    starts, ends, axes, steps, n = _slice_params(node)
    if n < 0:
        return "starts must be a 1-D tensor of static length"
    if steps is not None and any(s == 0 for s in steps):
        return "a step of 0"
    return None


def _slice_runtime(node: Node, x: ir.Value, n: int) -> ir.Value:
    """Slice with runtime axes and/or steps: every dim's (offset, size, stride) is chosen at run
    time among the sliced axes, and a generic reads x at offset + i * stride."""
    P_ = arith.CmpIPredicate
    r = rank_of(x)
    shape = shape_of(x)
    zero, one = const_index(0), const_index(1)

    def param(i: int, j: int, const: list[int] | None, default: int | None) -> ir.Value:
        if const is not None:
            return const_index(const[j])
        if not node.has(i):
            return const_index(default if default is not None else j)
        return _runtime_index(node, i, j)

    starts, ends, axes_c, steps_c, _ = _slice_params(node)
    offs: list[ir.Value] = [zero] * r
    sizes: list[ir.Value] = [dim_value(d) for d in shape]
    strides: list[ir.Value] = [one] * r
    for j in range(n):
        a = param(3, j, axes_c, None)
        a = arith.select(arith.cmpi(P_.slt, a, zero), arith.addi(a, const_index(r)), a)
        k = param(4, j, steps_c, 1)
        if axes_c is None and node.has(3):  # a run-time axis out of range sliced nothing
            inside = arith.andi(arith.cmpi(P_.sge, a, zero), arith.cmpi(P_.slt, a, const_index(r)))
            require(inside, node.op, f"the run-time axis {{axis}} is out of range for rank {r}", [("axis", param(3, j, axes_c, None))])
        if steps_c is None and node.has(4):  # a run-time step of 0 divided by it (SIGFPE)
            k_zero = arith.cmpi(P_.eq, k, zero)
            require(arith.xori(k_zero, const_scalar(True, ir.IntegerType.get_signless(1))), node.op, "a run-time step is 0")
            k = arith.select(k_zero, one, k)
        sv = param(1, j, starts, None)
        ev = param(2, j, ends, None)
        for d in range(r):
            dd = dim_value(shape[d])
            s1 = arith.select(arith.cmpi(P_.slt, sv, zero), arith.addi(sv, dd), sv)
            e1 = arith.select(arith.cmpi(P_.slt, ev, zero), arith.addi(ev, dd), ev)
            last = arith.subi(dd, one)
            pos = arith.cmpi(P_.sgt, k, zero)
            s_pos = arith.minsi(arith.maxsi(s1, zero), dd)
            e_pos = arith.minsi(arith.maxsi(e1, zero), dd)
            s_neg = arith.minsi(arith.maxsi(s1, zero), last)
            e_neg = arith.minsi(arith.maxsi(e1, const_index(-1)), last)
            n_pos = arith.ceildivsi(arith.subi(e_pos, s_pos), k)
            n_neg = arith.ceildivsi(arith.subi(s_neg, e_neg), arith.subi(zero, k))
            size = arith.maxsi(arith.select(pos, n_pos, n_neg), zero)
            start = arith.select(pos, s_pos, s_neg)
            hit = arith.cmpi(P_.eq, a, const_index(d))
            offs[d] = arith.select(hit, start, offs[d])
            sizes[d] = arith.select(hit, size, sizes[d])
            strides[d] = arith.select(hit, k, strides[d])
    init = empty(sizes, elem_of(x.type))

    def body(args: list[ir.Value]) -> list[ir.Value]:
        idx = [arith.addi(offs[i], arith.muli(index_of(i), strides[i])) for i in range(r)]
        return [tensor.extract(x, idx)]

    return generic([], [init], [identity_map(r)], ["parallel"] * r, body)[0]


def _runtime_index(node: Node, i: int, j: int) -> ir.Value:
    """Element j of the 1-D integer input i, as an index."""
    return to_index(tensor.extract(node.input(i), [const_index(j)]), node.in_elem(i))


def _norm_index_rt(v: ir.Value, size: Dim) -> ir.Value:
    """v + size when v < 0, at run time."""
    neg = arith.cmpi(arith.CmpIPredicate.slt, v, const_index(0))
    return arith.select(neg, arith.addi(v, dim_value(size)), v)


def _clamp(v: Dim, lo: Dim, hi: Dim, nonneg: bool = False) -> Dim:
    """v clamped into [lo, hi]; `nonneg`: v is known not negative (a dim) and lo is 0, so only
    the upper bound is applied."""
    if isinstance(v, int) and isinstance(lo, int) and isinstance(hi, int):
        return min(max(v, lo), hi)
    if nonneg and isinstance(lo, int) and lo == 0:
        return arith.minsi(dim_value(v), dim_value(hi))
    return arith.minsi(arith.maxsi(dim_value(v), dim_value(lo)), dim_value(hi))


def _norm_index(v: int, size: Dim) -> Dim:
    """v + size when negative (ONNX indices count from the end)."""
    if v >= 0:
        return v
    return dim_add(size, v)


@lowers("Slice", check=_check_slice)
def lower_slice(node: Node) -> list[ir.Value]:
    """Slice with constant parameters: `extract_slice` for positive steps, a generic otherwise."""
    x = node.input(0)
    r = rank_of(x)
    starts, ends, axes, steps, n_ax = _slice_params(node)
    if axes is None or steps is None:
        return [_slice_runtime(node, x, n_ax)]
    shape = shape_of(x)
    offsets: list[Dim] = [0] * r
    sizes: list[Dim] = list(shape)
    strides: list[Dim] = [1] * r
    big = 2**62
    # Run-time starts/ends that are dims (`Slice(table, 0, Shape(x)[1])`, a positional table cut
    # to the sequence length): not negative, so neither normalized nor clamped below 0, and the
    # size is `min(dim, size)`, which the broadcast lowering recognizes (`dim_sources.clamp_of`).
    traced = {i: shape_elements(node, i) if c is None and node.version >= 10 else None for i, c in ((1, starts), (2, ends))}
    for j, (a, k) in enumerate(zip(axes, steps)):
        a = normalize_axis(a, r)
        d = shape[a]
        bounds: list[Dim] = []
        dims: list[bool] = []  # a bound that is a dim (not negative)
        for i, const in ((1, starts), (2, ends)):
            t = traced[i][j] if traced[i] is not None else None  # type: ignore[index]
            if const is not None or isinstance(t, int):
                bounds.append(_norm_index(max(min(const[j] if const is not None else t, big), -big), d))  # type: ignore[arg-type, index]
            else:
                bounds.append(t if t is not None else _norm_index_rt(_runtime_index(node, i, j), d))
            dims.append(t is not None and not isinstance(t, int))
        sv, ev = bounds
        if k > 0:
            sv = _clamp(sv, 0, d, dims[0])
            ev = _clamp(ev, 0, d, dims[1])
            n = dim_floordiv(dim_add(dim_sub(ev, sv), k - 1), k)
            # from 0 with step 1 to a clamped dim: the size is not negative as it is
            nonneg = isinstance(sv, int) and sv == 0 and k == 1 and dims[1]
        else:
            sv = _clamp(sv, 0, dim_sub(d, 1))
            ev = _clamp(ev, -1, dim_sub(d, 1))
            n = dim_floordiv(dim_add(dim_sub(sv, ev), -k - 1), -k)
            nonneg = False
        n = max(n, 0) if isinstance(n, int) else (n if nonneg else arith.maxsi(n, const_index(0)))
        if isinstance(n, int) and n == 0:
            sv = 0  # an empty slice: MLIR wants its offset inside the dim
        offsets[a], sizes[a], strides[a] = sv, n, k
    if all(isinstance(k, int) and k > 0 for k in strides):
        return [extract_slice(x, offsets, sizes, strides)]
    # Negative steps: out[i] = x[offset + i * stride] per dim, read with tensor.extract.
    init = empty(sizes, elem_of(x.type))

    def body(a: list[ir.Value]) -> list[ir.Value]:
        idx = []
        for i in range(r):
            li = index_of(i)
            idx.append(arith.addi(dim_value(offsets[i]), arith.muli(li, dim_value(strides[i]))))
        return [tensor.extract(x, idx)]

    return generic([], [init], [identity_map(r)], ["parallel"] * r, body)


# --- gathers --------------------------------------------------------------------------------------


def _wrap_index(v: ir.Value, onnx_elem: ir.Type, size: Dim) -> ir.Value:
    """An index scalar, made non-negative by adding `size` when negative, then clamped into
    [0, size - 1]: an index out of range is invalid input (onnx.reference raises) that the CPU code
    cannot report at run time, and an unclamped one read past the data (SIGSEGV for a large one)."""
    i = to_index(v, onnx_elem)
    last = arith.subi(dim_value(size), const_index(1))
    if not is_unsigned(onnx_elem):
        neg = arith.cmpi(arith.CmpIPredicate.slt, i, const_index(0))
        i = arith.select(neg, arith.addi(i, dim_value(size)), i)
    return arith.maxsi(arith.minsi(i, last), const_index(0))


def _check_indices(node: Node, indices: ir.Value, sizes: list[Dim], axis: int) -> None:
    """The run-time range check of Gather/GatherElements indices (runtime_checks.py)."""
    data_shape = [dim_value(d) for d in shape_of(node.input(0))]
    require_indices(node.op, indices, is_unsigned(node.in_elem(1)), [dim_value(s) for s in sizes], axis, data_shape)


@lowers("Gather")
def lower_gather(node: Node) -> list[ir.Value]:
    """Gather along `axis`: a generic over the output, reading data with `tensor.extract`."""
    data, indices = node.input(0), node.input(1)
    r = rank_of(data)
    q = rank_of(indices)
    axis = normalize_axis(int(node.attr("axis", 0)), r)
    dshape = shape_of(data)
    out_shape = dshape[:axis] + shape_of(indices) + dshape[axis + 1 :]
    n = len(out_shape)
    init = empty(out_shape, elem_of(data.type))
    imap = affine_map(n, list(range(axis, axis + q)))
    ielem = node.in_elem(1)
    _check_indices(node, indices, [dshape[axis]], axis)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        idx = _wrap_index(a[0], ielem, dshape[axis])
        coords = [index_of(i) for i in range(axis)] + [idx] + [index_of(axis + q + j) for j in range(r - axis - 1)]
        return [tensor.extract(data, coords)]

    return generic([indices], [init], [imap, identity_map(n)], ["parallel"] * n, body)


@lowers("GatherElements")
def lower_gather_elements(node: Node) -> list[ir.Value]:
    """GatherElements: out[i...] = data[i... with indices[i...] at axis]."""
    data, indices = node.input(0), node.input(1)
    r = rank_of(data)
    axis = normalize_axis(int(node.attr("axis", 0)), r)
    if rank_of(indices) != r:
        raise LoweringError(f"{node.describe()}: indices of rank {rank_of(indices)} for data of rank {r}")
    problem = require_within(node.op, indices, data, axis, "the indices")
    if problem is not None:
        raise LoweringError(f"{node.describe()}: {problem}")
    init = empty(shape_of(indices), elem_of(data.type))
    ielem = node.in_elem(1)
    size = dim(data, axis)
    _check_indices(node, indices, [size], axis)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        idx = _wrap_index(a[0], ielem, size)
        coords = [idx if i == axis else index_of(i) for i in range(r)]
        return [tensor.extract(data, coords)]

    return generic([indices], [init], [identity_map(r), identity_map(r)], ["parallel"] * r, body)


# --- broadcasting copies --------------------------------------------------------------------------


def _check_expand(node: Node) -> str | None:
    return _check_shape_input(node, 1)


@lowers("Expand", check=_check_expand)
def lower_expand(node: Node) -> list[ir.Value]:
    """Expand: numpy broadcast of the input with the target shape."""
    x = node.input(0)
    # A target traced to dims (`Concat(Shape(x)[0:1], [k, 4])`): a dim of the input's own source
    # is the input's size, neither a max nor a check (and the broadcast reads it at the loop index).
    target = shape_elements(node, 1) or _dims_from_input(node, 1)
    xs = shape_of(x)
    r = max(len(xs), len(target))
    xs_p = [1] * (r - len(xs)) + xs
    t_p: list[Dim] = [1] * (r - len(target)) + target
    out: list[Dim] = []
    checks: list[ir.Value] = []
    for j, (a, b) in enumerate(zip(xs_p, t_p)):
        if isinstance(b, int) and b == 1:
            out.append(a)
        elif not isinstance(a, int) and not isinstance(b, int) and is_size_of(b, x, j - (r - len(xs))):
            out.append(a)
        elif isinstance(a, int) and a == 1:
            out.append(b)
        elif isinstance(a, int) and isinstance(b, int):
            if a != b:
                raise node.fail(f"cannot expand {static_shape(x.type)} to {target}")
            out.append(a)
        elif isinstance(b, int):
            out.append(b)
        else:
            # Runtime target dim: max(a, b) covers b == 1 and b == a; any other pair cannot be
            # broadcast (onnx.reference raises): a run-time error (runtime_checks.py).
            out.append(arith.maxsi(dim_value(a), b))
            if not (isinstance(a, int) and a == 1):
                av = dim_value(a)
                fits = arith.ori(arith.cmpi(arith.CmpIPredicate.eq, b, const_index(1)), arith.cmpi(arith.CmpIPredicate.eq, b, av))
                if not isinstance(a, int):
                    fits = arith.ori(fits, arith.cmpi(arith.CmpIPredicate.eq, av, const_index(1)))
                checks.append(fits)
    if checks:
        ok = checks[0]
        for c in checks[1:]:
            ok = arith.andi(ok, c)
        require(ok, node.op, "the input of shape {input} cannot be expanded to the run-time shape {target}",
                [("input", [dim_value(d) for d in xs]), ("target", [dim_value(t) for t in target])])  # fmt: skip
    return [broadcast_to(x, out)]


def _check_tile(node: Node) -> str | None:
    s = static_shape(node.onnx_types[1])
    if len(s) != 1 or s[0] is None:
        return "repeats must be a 1-D tensor of static length"
    return None


@lowers("Tile", check=_check_tile)
def lower_tile(node: Node) -> list[ir.Value]:
    """Tile: out[i] = x[i mod d] with out dims d * repeats (repeats constant or runtime)."""
    x = node.input(0)
    reps: list[Dim] = list(node.const_ints(1) or extract_dims(node.input(1), node.in_elem(1)))
    shape = shape_of(x)
    r = len(shape)
    out = [dim_mul(d, k) for d, k in zip(shape, reps)]
    init = empty(out, elem_of(x.type))

    def body(a: list[ir.Value]) -> list[ir.Value]:
        coords = [index_of(i) if isinstance(reps[i], int) and reps[i] == 1 else arith.remui(index_of(i), dim_value(shape[i])) for i in range(r)]
        return [tensor.extract(x, coords)]

    return generic([], [init], [identity_map(r)], ["parallel"] * r, body)


def _pad_axes(node: Node) -> list[int] | None:
    r = _rank(node, 0)
    if node.version >= 18 and node.has(3):
        ax = node.const_ints(3)
        return None if ax is None else [normalize_axis(a, r) for a in ax]
    return list(range(r))


def _pad_params(node: Node) -> tuple[list[Dim], list[Dim]]:
    """(begin, end) pads per dim: ints when constant, index values read at run time otherwise."""
    r = _rank(node, 0)
    pads: list[Dim]
    if node.version < 11:
        pads = [int(p) for p in node.attr("pads")]
    else:
        c = node.const_ints(1)
        pads = list(c) if c is not None else list(extract_dims(node.input(1), node.in_elem(1)))
    axes = _pad_axes(node)
    lo: list[Dim] = [0] * r
    hi: list[Dim] = [0] * r
    if axes is None:
        # Runtime axes: each dim's pads are picked at run time among the listed axes.
        n = len(pads) // 2
        for j in range(n):
            a = _runtime_index(node, 3, j)
            a = arith.select(arith.cmpi(arith.CmpIPredicate.slt, a, const_index(0)), arith.addi(a, const_index(r)), a)
            for d in range(r):
                hit = arith.cmpi(arith.CmpIPredicate.eq, a, const_index(d))
                lo[d] = arith.select(hit, dim_value(pads[j]), dim_value(lo[d]))
                hi[d] = arith.select(hit, dim_value(pads[j + n]), dim_value(hi[d]))
        return lo, hi
    n = len(axes)
    for j, a in enumerate(axes):
        lo[a] = pads[j]
        hi[a] = pads[j + n]
    return lo, hi


def _check_pad(node: Node) -> str | None:
    if _pad_axes(node) is None and len(static_shape(node.onnx_types[3])) != 1:
        return "axes must be a constant or a 1-D tensor"
    if node.version >= 11:
        s = static_shape(node.onnx_types[1])
        if len(s) != 1 or s[0] is None:
            return "pads must be a 1-D tensor of static length"
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        return f"mode {mode!r}"
    return None


def _neg_part(p: Dim) -> Dim:
    """max(-p, 0)."""
    if isinstance(p, int):
        return max(-p, 0)
    return arith.maxsi(arith.subi(const_index(0), p), const_index(0))


def _pos_part(p: Dim) -> Dim:
    """max(p, 0)."""
    if isinstance(p, int):
        return max(p, 0)
    return arith.maxsi(p, const_index(0))


@lowers("Pad", check=_check_pad)
def lower_pad(node: Node) -> list[ir.Value]:
    """Pad: constant mode as fill + insert_slice; reflect/edge/wrap as an index-mapping generic.
    Negative pads crop first (extract_slice). Pads may be runtime values (axes may not)."""
    x = node.input(0)
    lo, hi = _pad_params(node)
    elem = elem_of(x.type)
    r = rank_of(x)
    # Crop negative pads (a runtime pad may be negative too: crop by its negative part).
    if any(not isinstance(p, int) or p < 0 for p in lo + hi):
        shape = shape_of(x)
        offs = [_neg_part(p) for p in lo]
        sizes = [dim_sub(dim_sub(shape[i], offs[i]), _neg_part(hi[i])) for i in range(r)]
        if any(not (isinstance(o, int) and o == 0) for o in offs) or any(not isinstance(p, int) for p in hi) or any(p < 0 for p in hi if isinstance(p, int)):
            x = extract_slice(x, offs, sizes)
        lo = [_pos_part(p) for p in lo]
        hi = [_pos_part(p) for p in hi]
    shape = shape_of(x)
    out = [dim_add(dim_add(shape[i], lo[i]), hi[i]) for i in range(r)]
    mode = node.attr("mode", "constant")
    if mode == "constant":
        val: float | int | ir.Value = 0
        if node.version < 11:
            val = float(node.attr("value", 0.0))
        elif node.has(2):
            c = node.const(2)
            if c is not None:
                val = np.asarray(c).reshape(-1)[0].item()
            else:
                v = node.input(2)
                val = tensor.extract(v, [const_index(0)] * rank_of(v))
        if isinstance(elem, ir.IntegerType) and not isinstance(val, ir.Value):
            val = int(val)
        dest = filled(out, elem, val)
        return [insert_slice(x, dest, lo)]

    def body(a: list[ir.Value]) -> list[ir.Value]:
        coords = []
        for i in range(r):
            j = arith.subi(index_of(i), dim_value(lo[i]))
            d = dim_value(shape[i])
            last = arith.subi(d, const_index(1))
            if mode == "edge":
                j = arith.minsi(arith.maxsi(j, const_index(0)), last)
            elif mode == "reflect":
                j = arith.select(arith.cmpi(arith.CmpIPredicate.slt, j, const_index(0)), arith.subi(const_index(0), j), j)
                j = arith.select(arith.cmpi(arith.CmpIPredicate.sgt, j, last), arith.subi(arith.addi(last, last), j), j)
            else:  # wrap
                j = arith.remsi(arith.addi(arith.remsi(j, d), d), d)
            coords.append(j)
        return [tensor.extract(x, coords)]

    init = empty(out, elem)
    return generic([], [init], [identity_map(r)], ["parallel"] * r, body)

