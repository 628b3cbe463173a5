"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin, and
the normalizing reductions Softmax/LogSoftmax/Hardmax.

Each reduction is one `linalg.generic` with `reduction` iterators over the reduced dims (a
pre-map such as square or abs in the body, a post-map such as sqrt or log as an elementwise op),
then `tensor.expand_shape` for keepdims. Axes come from the attribute (older versions) or the
constant `axes` input; empty axes reduce everything unless `noop_with_empty_axes` is set, in
which case the body still applies its pre/post maps (as the reference does: ReduceSumSquare with
no axes squares). The axes input must be a constant (the pre-check says so).
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, linalg, math

from onnxc.transforms.lowering.common import (
    Node,
    accumulator_type,
    const_scalar,
    convert_element,
    convert_scalar,
    dim,
    dim_mul,
    dim_value,
    elementwise,
    expand_unit_dims,
    is_bool,
    is_float,
    is_unsigned,
    lowers,
    max_value,
    min_value,
    normalize_axis,
    rank_of,
    reduce_dims,
    shape_of,
    static_shape,
)

_AXES_INPUT_SINCE = {"ReduceSum": 13}  # the others take axes as an input from opset 18


def reduce_axes(node: Node, rank: int) -> list[int] | None:
    """The normalized reduced axes of a Reduce* node, or None when they are not constant."""
    since_input = _AXES_INPUT_SINCE.get(node.op_type, 18)
    if node.version >= since_input:
        if node.has(1):
            axes = node.const_ints(1)
            if axes is None:
                return None
        else:
            axes = []
    else:
        axes = list(node.attr("axes", []) or [])
    if not axes:
        return [] if int(node.attr("noop_with_empty_axes", 0)) else list(range(rank))
    return sorted({normalize_axis(a, rank) for a in axes})


def _runtime_axes_count(node: Node) -> int | None:
    """The number of reduced axes when they come from a runtime `axes` input of static length."""
    s = static_shape(node.onnx_types[1]) if node.has(1) else []
    return s[0] if len(s) == 1 else None


def _check_reduce(node: Node) -> str | None:
    r = len(static_shape(node.onnx_types[0]))
    axes = reduce_axes(node, r)
    if axes is None:
        k = _runtime_axes_count(node)
        if k is None or k > r:
            return "axes must be a constant or a 1-D tensor of static length"
        if k == 0 and int(node.attr("noop_with_empty_axes", 0)):
            return None
        axes = []
    if any(not 0 <= a < r for a in axes):
        return f"axes out of range for rank {r}"
    if node.op_type in ("ReduceLogSumExp", "ReduceLogSum", "ReduceL2") and not is_float(node.in_elem(0)):
        return f"{node.op_type} of integers is not lowered"
    return None


def _keep(node: Node, v: ir.Value, axes: list[int]) -> ir.Value:
    return expand_unit_dims(v, axes) if int(node.attr("keepdims", 1)) else v


def _count(x: ir.Value, axes: list[int], elem: ir.Type) -> ir.Value:
    n = 1
    for a in axes:
        n = dim_mul(n, dim(x, a))
    if isinstance(n, int):
        return const_scalar(n, elem)
    i64 = ir.IntegerType.get_signless(64)
    n64 = arith.index_cast(i64, dim_value(n))
    return arith.sitofp(elem, n64) if is_float(elem) else convert_scalar(n64, i64, elem)


@lowers(
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", check=_check_reduce,
)  # fmt: skip
def lower_reduce(node: Node) -> list[ir.Value]:
    """Reduce* ops: one reduction generic plus elementwise pre/post maps. Axes given at run
    time (a 1-D input of static length k) select among the C(rank, k) static lowerings by a
    bit mask of the axes (`scf.if` chain); duplicate runtime axes are not supported."""
    x = node.input(0)
    r = rank_of(x)
    axes = reduce_axes(node, r)
    if axes is not None:
        return [_reduce_static(node, x, axes)]
    from itertools import combinations

    from mlir.dialects import tensor

    from onnxc.transforms.lowering.common import const_index, tensor_type, to_index
    from onnxc.transforms.lowering.indexing import select_case

    k = _runtime_axes_count(node)
    assert k is not None
    if k == 0:
        # An empty runtime axes list: everything, or nothing with noop_with_empty_axes.
        return [_reduce_static(node, x, [] if int(node.attr("noop_with_empty_axes", 0)) else list(range(r)))]
    av = node.input(1)
    i64 = ir.IntegerType.get_signless(64)
    mask = const_scalar(0, i64)
    for j in range(k):
        a = to_index(tensor.extract(av, [const_index(j)]), node.in_elem(1))
        a = arith.select(arith.cmpi(arith.CmpIPredicate.slt, a, const_index(0)), arith.addi(a, const_index(r)), a)
        mask = arith.ori(mask, arith.shli(const_scalar(1, i64), arith.index_cast(i64, a)))
    combos = [list(c) for c in combinations(range(r), k)]
    shape = static_shape(x.type)
    keep = int(node.attr("keepdims", 1))
    shapes = [[(1 if i in c else d) for i, d in enumerate(shape) if keep or i not in c] for c in combos]
    joined = [s0 if all(s[i] == s0 for s in shapes) else None for i, s0 in enumerate(shapes[0])]
    rtype = tensor_type(joined, convert_element(node.out_elem(0)))
    keys = [sum(1 << a for a in c) for c in combos]
    return [select_case(mask, keys, rtype, lambda i: _reduce_static(node, x, combos[i]))]


def _reduce_static(node: Node, x: ir.Value, axes: list[int]) -> ir.Value:
    onnx_elem = node.in_elem(0)
    elem = convert_element(onnx_elem)
    # Bools reduce as unsigned bits (max = or, min = and).
    unsigned = is_unsigned(onnx_elem) or is_bool(elem)
    fl = is_float(elem)
    # f16/bf16 sums accumulate in f32.
    acc = accumulator_type(elem) if node.op_type not in ("ReduceMax", "ReduceMin") else elem
    add = arith.addf if fl else arith.addi
    mul = arith.mulf if fl else arith.muli
    op = node.op_type

    def widen(v: ir.Value) -> ir.Value:
        return arith.extf(acc, v) if acc != elem else v

    if op == "ReduceLogSumExp":
        # Stable: max, then log(sum(exp(x - max))) + max (the reference does the same).
        mx = reduce_dims([x], axes, [min_value(elem)], [elem], lambda a: [arith.maximumf(a[0], a[1])])[0]
        mx_k = expand_unit_dims(mx, axes)
        ex = elementwise([x, mx_k], acc, lambda v, m: math.exp(widen(arith.subf(v, m))), out_shape=shape_of(x))
        s = reduce_dims([ex], axes, [0.0], [acc], lambda a: [arith.addf(a[0], a[1])])[0]
        mxw = mx

        def finish(sv: ir.Value, m: ir.Value) -> ir.Value:
            m2 = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, m, const_scalar(float("-inf"), elem)), const_scalar(0.0, elem), m)
            res = arith.addf(math.log(sv), widen(m2))
            return arith.truncf(elem, res) if acc != elem else res

        out = elementwise([s, mxw], elem, finish)
        return _keep(node, out, axes)

    combine: Callable[[ir.Value, ir.Value], ir.Value]
    pre: Callable[[ir.Value], ir.Value] = widen
    init: float | int = 0
    if op in ("ReduceSum", "ReduceMean", "ReduceLogSum"):
        combine = add
    elif op == "ReduceSumSquare" or op == "ReduceL2":
        combine = add
        pre = lambda v: mul(widen(v), widen(v))  # noqa: E731
    elif op == "ReduceL1":
        combine = add
        # Integer |v| as max(v, 0 - v): math.absi has no LLVM lowering on n-D vectors.
        pre = (lambda v: math.absf(widen(v))) if fl else (lambda v: v if unsigned else arith.maxsi(v, arith.subi(arith.constant(v.type, 0), v)))  # noqa: E731
    elif op == "ReduceProd":
        combine = mul
        init = 1
    elif op == "ReduceMax":
        combine = arith.maximumf if fl else (arith.maxui if unsigned else arith.maxsi)
        init = min_value(elem, unsigned)
    else:  # ReduceMin
        combine = arith.minimumf if fl else (arith.minui if unsigned else arith.minsi)
        init = max_value(elem, unsigned)
    res = reduce_dims([x], axes, [init], [acc], lambda a: [combine(a[1], pre(a[0]))])[0]
    post: Callable[[ir.Value], ir.Value] | None = None
    if op == "ReduceMean":
        cnt = _count(x, axes, acc)
        post = (lambda v: arith.divf(v, cnt)) if fl else (lambda v: arith.divui(v, cnt) if unsigned else arith.divsi(v, cnt))  # noqa: E731
    elif op == "ReduceL2":
        post = math.sqrt
    elif op == "ReduceLogSum":
        post = math.log
    if post is not None or acc != elem:
        p = post or (lambda v: v)
        res = elementwise([res], elem, lambda v: (arith.truncf(elem, p(v)) if acc != elem else p(v)))
    return _keep(node, res, axes)


def _check_arg(node: Node) -> str | None:
    r = len(static_shape(node.onnx_types[0]))
    a = int(node.attr("axis", 0))
    if not -r <= a < max(r, 1):
        return f"axis {a} out of range for rank {r}"
    return None


@lowers("ArgMax", "ArgMin", check=_check_arg)
def lower_arg(node: Node) -> list[ir.Value]:
    """ArgMax/ArgMin: a reduction generic carrying (best value, its index) along the axis."""
    x = node.input(0)
    onnx_elem = node.in_elem(0)
    elem = convert_element(onnx_elem)
    unsigned = is_unsigned(onnx_elem)
    r = rank_of(x)
    axis = normalize_axis(int(node.attr("axis", 0)), r)
    last = int(node.attr("select_last_index", 0))
    is_max = node.op_type == "ArgMax"
    i64 = ir.IntegerType.get_signless(64)
    fl = is_float(elem)
    init = min_value(elem, unsigned) if is_max else max_value(elem, unsigned)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        v, best, best_i = a
        idx = arith.index_cast(i64, linalg.IndexOp(ir.IntegerAttr.get(i64, axis)).result)
        if fl:
            pred = (arith.CmpFPredicate.OGE if last else arith.CmpFPredicate.OGT) if is_max else (arith.CmpFPredicate.OLE if last else arith.CmpFPredicate.OLT)
            better = arith.cmpf(pred, v, best)
        else:
            P = arith.CmpIPredicate
            if is_max:
                pred = (P.uge if last else P.ugt) if unsigned else (P.sge if last else P.sgt)
            else:
                pred = (P.ule if last else P.ult) if unsigned else (P.sle if last else P.slt)
            better = arith.cmpi(pred, v, best)
        # The first element always wins (covers all-(-inf) rows and an init equal to the data).
        first = arith.cmpi(arith.CmpIPredicate.eq, idx, const_scalar(0, i64))
        take = arith.ori(better, first)
        return [arith.select(take, v, best), arith.select(take, idx, best_i)]

    _, idx = reduce_dims([x], [axis], [init, 0], [elem, i64], body)
    return [expand_unit_dims(idx, [axis]) if int(node.attr("keepdims", 1)) else idx]


def _softmax_axes(node: Node, r: int) -> list[int]:
    default = -1 if node.version >= 13 else 1
    axis = normalize_axis(int(node.attr("axis", default)), r)
    # Before opset 13 the input is coerced to 2-D at `axis`: every dim from axis on is reduced.
    return [axis] if node.version >= 13 else list(range(axis, r))


def _check_softmax(node: Node) -> str | None:
    r = len(static_shape(node.onnx_types[0]))
    default = -1 if node.version >= 13 else 1
    a = int(node.attr("axis", default))
    if not -r <= a < max(r, 1):
        return f"axis {a} out of range for rank {r}"
    if not is_float(node.in_elem(0)):
        return "integer softmax"
    if node.op_type == "Hardmax" and len(_softmax_axes(node, r)) != 1:
        return "Hardmax before opset 13 over more than one dim is not lowered"
    return None


@lowers("Softmax", "LogSoftmax", check=_check_softmax)
def lower_softmax(node: Node) -> list[ir.Value]:
    """(Log)Softmax: max, exp(x - max), sum, divide (or subtract the log), in f32 for halves."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = accumulator_type(elem)
    r = rank_of(x)
    axes = _softmax_axes(node, r)
    shape = shape_of(x)

    def widen(v: ir.Value) -> ir.Value:
        return arith.extf(acc, v) if acc != elem else v

    def narrow(v: ir.Value) -> ir.Value:
        return arith.truncf(elem, v) if acc != elem else v

    mx = expand_unit_dims(reduce_dims([x], axes, [float("-inf")], [elem], lambda a: [arith.maximumf(a[0], a[1])])[0], axes)
    if node.op_type == "Softmax" and acc != elem:
        # Halves round where the reference (onnx.reference's Softmax and Attention, numpy on
        # f16 arrays) rounds: exp(x - max) to f16, the row sum accumulated in f32 and rounded
        # to f16 (over trailing axes; below, over others), then a correctly rounded f16
        # division (an f32 divide of f16 values rounds to the same f16: 24 >= 2 * 11 + 2 bits).
        # Keeping exp and the sum in f32 was more precise but up to 6 f16 ulps off the expected
        # values (test_attention_4d_causal_fp16: 2 of 192 past the suite's tolerance).
        ex16 = elementwise([x, mx], elem, lambda v, m: narrow(math.exp(widen(arith.subf(v, m)))), out_shape=shape)
        if axes == list(range(axes[0], r)):  # the trailing dims (before opset 13: coerced to 2-D)
            total16 = reduce_dims([ex16], axes, [0.0], [acc], lambda a: [arith.addf(widen(a[0]), a[1])])[0]
            total16 = elementwise([total16], elem, narrow)
        else:
            # numpy sums an f16 array along a non-innermost axis row by row, each f16 + f16
            # rounded to f16 (its f32 pairwise sum serves only the innermost axis): the same here.
            total16 = reduce_dims([ex16], axes, [0.0], [elem], lambda a: [narrow(arith.addf(widen(a[0]), widen(a[1])))])[0]
        total16 = expand_unit_dims(total16, axes)
        return [elementwise([ex16, total16], elem, lambda e, t: narrow(arith.divf(widen(e), widen(t))), out_shape=shape)]
    # exp(x - max) is materialized once and read twice (the sum and the scaling): it has two
    # users, so elementwise fusion does not duplicate it into both.
    ex = elementwise([x, mx], acc, lambda v, m: math.exp(widen(arith.subf(v, m))), out_shape=shape)
    total = reduce_dims([ex], axes, [0.0], [acc], lambda a: [arith.addf(a[0], a[1])])[0]
    if node.op_type == "Softmax":
        # One division per row (1 / sum), then a multiply per element instead of a division.
        one = const_scalar(1.0, acc)
        inv = expand_unit_dims(elementwise([total], acc, lambda t: arith.divf(one, t)), axes)
        return [elementwise([ex, inv], elem, lambda e, r: narrow(arith.mulf(e, r)), out_shape=shape)]
    # log(sum) once per row; per element only subtractions.
    log_total = expand_unit_dims(elementwise([total], acc, math.log), axes)
    return [elementwise([x, mx, log_total], elem, lambda v, m, t: narrow(arith.subf(widen(arith.subf(v, m)), t)), out_shape=shape)]


@lowers("Hardmax", check=_check_softmax)
def lower_hardmax(node: Node) -> list[ir.Value]:
    """Hardmax: 1 at the first maximum along the axis, 0 elsewhere."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    r = rank_of(x)
    axis = _softmax_axes(node, r)[0]
    i64 = ir.IntegerType.get_signless(64)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        v, best, best_i = a
        idx = arith.index_cast(i64, linalg.IndexOp(ir.IntegerAttr.get(i64, axis)).result)
        first = arith.cmpi(arith.CmpIPredicate.eq, idx, const_scalar(0, i64))
        take = arith.ori(arith.cmpf(arith.CmpFPredicate.OGT, v, best), first)
        return [arith.select(take, v, best), arith.select(take, idx, best_i)]

    _, idx = reduce_dims([x], [axis], [float("-inf"), 0], [elem, i64], body)
    idx_k = expand_unit_dims(idx, [axis])

    def onehot(v: ir.Value, i: ir.Value) -> ir.Value:
        here = arith.index_cast(i64, linalg.IndexOp(ir.IntegerAttr.get(i64, axis)).result)
        return arith.select(arith.cmpi(arith.CmpIPredicate.eq, here, i), const_scalar(1.0, elem), const_scalar(0.0, elem))

    return [elementwise([x, idx_k], elem, onehot, out_shape=shape_of(x))]
