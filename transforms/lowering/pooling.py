"""MaxPool, AveragePool, LpPool (1-D/2-D/3-D) and GlobalAveragePool/GlobalMaxPool/GlobalLpPool.

2-D float MaxPool (without Indices) and AveragePool run channels-last, like Conv (conv.py): the
input is transposed NCHW -> NHWC, pooled by `linalg.pooling_nhwc_max` / `linalg.pooling_nhwc_sum`
(the forms the CPU target decomposes to 1-D and vectorizes over channels) and transposed back;
`layout-propagation` cancels those transposes against the neighbouring convolutions'. 4-D float
global average/max pools reduce an NHWC view over H and W (channels contiguous in the vectors).

The other windowed pools are one `linalg.generic` over (n, c, out spatial..., kernel spatial...)
with a shape-only kernel operand (as linalg's named pooling ops do), on an input padded with the
reduction's identity (-inf for max, 0 for sums). `ceil_mode` extends the end padding so the
last partial window exists (and drops a window that would start in the padding only, as
onnxruntime and PyTorch do). AveragePool divides by the window size, or, without
`count_include_pad`, by the number of real elements per window, computed by pooling a tensor of
ones padded with zeros (the same generic). Global pools are reductions over the spatial dims.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, math

from onnxc.transforms.lowering.common import (
    Node,
    accumulator_type,
    affine_map,
    bitwidth,
    const_scalar,
    convert_element,
    dim,
    dim_add,
    dim_mul,
    dim_sub,
    dim_value,
    elem_of,
    elementwise,
    empty,
    expand_unit_dims,
    filled,
    generic,
    is_float,
    is_unsigned,
    lowers,
    min_value,
    rank_of,
    reduce_dims,
    shape_of,
    static_shape,
)
from onnxc.transforms.lowering.conv import (
    NCHW_TO_NHWC,
    NHWC_TO_NCHW,
    out_size,
    pad_dims,
    pad_spatial,
    transpose,
    window_pads,
)


def _pool_attrs(node: Node) -> tuple[list[int], list[int], list[int], list[int], list[int], bool] | str:
    xs = static_shape(node.onnx_types[0])
    k = len(xs) - 2
    kernel = [int(s) for s in node.attr("kernel_shape")]
    if len(kernel) != k:
        return f"kernel_shape has {len(kernel)} dims for a rank-{len(xs)} input"
    strides = [int(s) for s in (node.attr("strides") or [1] * k)]
    dil = [int(s) for s in (node.attr("dilations") or [1] * k)]
    p = window_pads(xs[2:], kernel, strides, dil, node.attr("pads"), node.attr("auto_pad", "NOTSET"))
    if isinstance(p, str):
        return p
    ceil_mode = bool(int(node.attr("ceil_mode", 0)))
    if ceil_mode and any(d is None for d in xs[2:]):
        return "ceil_mode with dynamic spatial dims"
    return kernel, strides, dil, p[0], p[1], ceil_mode


def _check_pool(node: Node) -> str | None:
    xs = static_shape(node.onnx_types[0])
    if len(xs) < 3:
        return "input rank must be >= 3"
    if node.op_type == "MaxPool" and len(node.op.results) > 1 and not isinstance(node.op.results[1].type, ir.NoneType):
        if any(d is None for d in xs[1:]):
            return "the Indices output needs static C and spatial dims"
    a = _pool_attrs(node)
    return a if isinstance(a, str) else None


def _window_generic(x: ir.Value, kernel: list[int], strides: list[int], dil: list[int], outs: list, init: ir.Value, combine) -> ir.Value:
    r = rank_of(x)
    k = r - 2
    L = 2 + 2 * k
    d = ir.AffineDimExpr.get
    x_exprs = [d(0), d(1)] + [d(2 + i) * strides[i] + d(2 + k + i) * dil[i] for i in range(k)]
    w_exprs = [d(2 + k + i) for i in range(k)]
    o_exprs = [d(i) for i in range(2 + k)]
    window = empty(kernel, elem_of(x.type))
    iters = ["parallel"] * (2 + k) + ["reduction"] * k
    return generic([x, window], [init], [affine_map(L, x_exprs), affine_map(L, w_exprs), affine_map(L, o_exprs)], iters, lambda a: [combine(a[2], a[0])])[0]


def _pool_nhwc(x: ir.Value, kernel: list[int], strides: list[int], dil: list[int], lo: list[int], hi: list[int], outs: list, ident: float, elem: ir.Type, max_pool: bool) -> ir.Value:
    """A 2-D max or sum pool computed channels-last (`linalg.pooling_nhwc_max/sum` between two
    transposes), padded with `ident`; the result is NCHW."""
    xt = transpose(x, NCHW_TO_NHWC)
    xp = pad_dims(xt, [1, 2], lo, hi, ident)
    init = filled([dim(xt, 0)] + outs + [dim(xt, 3)], elem, ident)
    window = empty(kernel, elem)
    op = linalg.pooling_nhwc_max if max_pool else linalg.pooling_nhwc_sum
    return transpose(op(xp, window, outs=[init], strides=strides, dilations=dil), NHWC_TO_NCHW)


def _ceil_extra(x: ir.Value, kernel: list[int], strides: list[int], dil: list[int], lo: list[int], hi: list[int], ceil_mode: bool) -> tuple[list, list[int]]:
    """Output sizes and extra end padding per spatial dim."""
    k = len(kernel)
    outs = []
    extra = []
    for i in range(k):
        padded = dim_add(dim_add(dim(x, 2 + i), lo[i]), hi[i])
        o = out_size(padded, kernel[i], strides[i], dil[i], ceil_mode)
        if ceil_mode:
            assert isinstance(o, int) and isinstance(padded, int)
            d_in = padded - lo[i] - hi[i]
            if (o - 1) * strides[i] >= d_in + lo[i]:
                o -= 1
            need = (o - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1
            extra.append(max(need - padded, 0))
        else:
            extra.append(0)
        outs.append(o)
    return outs, extra


@lowers("MaxPool", check=_check_pool)
def lower_max_pool(node: Node) -> list[ir.Value | None]:
    """MaxPool: -inf padding (the least integer for int8/uint8), max over each window."""
    x = node.input(0)
    onnx_elem = node.in_elem(0)
    elem = convert_element(onnx_elem)
    kernel, strides, dil, lo, hi, ceil_mode = _pool_attrs(node)  # type: ignore[misc]
    outs, extra = _ceil_extra(x, kernel, strides, dil, lo, hi, ceil_mode)
    unsigned = is_unsigned(onnx_elem)
    ident = min_value(elem, unsigned)
    xp = pad_spatial(x, lo, [h + e for h, e in zip(hi, extra)], ident)
    init = filled([dim(x, 0), dim(x, 1)] + outs, elem, ident)
    if is_float(elem):
        comb = arith.maximumf
    else:
        comb = arith.maxui if unsigned else arith.maxsi
    if len(node.op.results) < 2 or isinstance(node.op.results[1].type, ir.NoneType):
        if len(kernel) == 2 and is_float(elem):
            return [_pool_nhwc(x, kernel, strides, dil, lo, [h + e for h, e in zip(hi, extra)], outs, ident, elem, max_pool=True), None]
        return [_window_generic(xp, kernel, strides, dil, outs, init, comb), None]
    return list(_max_pool_with_indices(node, x, xp, kernel, strides, dil, lo, outs, init, elem, unsigned))


def _max_pool_with_indices(node: Node, x: ir.Value, xp: ir.Value, kernel: list[int], strides: list[int], dil: list[int], lo: list[int], outs: list, init: ir.Value, elem: ir.Type, unsigned: bool) -> tuple[ir.Value, ir.Value]:
    """MaxPool with Indices: a window generic carrying (max, flat index into the unpadded
    input, row-major over N, C and the spatial dims); the first maximum wins."""
    from onnxc.transforms.lowering.common import const_index, index_of

    r = rank_of(x)
    k = r - 2
    i64 = ir.IntegerType.get_signless(64)
    xs = static_shape(x.type)
    strides_flat = [1] * r
    for d in range(r - 2, -1, -1):
        strides_flat[d] = strides_flat[d + 1] * int(xs[d + 1])  # type: ignore[arg-type]
    if int(node.attr("storage_order", 0)):
        # Column-major spatial index (the first spatial dim varies fastest).
        acc = 1
        for d in range(2, r):
            strides_flat[d] = acc
            acc *= int(xs[d])  # type: ignore[arg-type]
    L = 2 + 2 * k
    d_ = ir.AffineDimExpr.get
    x_map = affine_map(L, [d_(0), d_(1)] + [d_(2 + i) * strides[i] + d_(2 + k + i) * dil[i] for i in range(k)])
    w_map = affine_map(L, [2 + k + i for i in range(k)])
    o_map = affine_map(L, list(range(2 + k)))
    window = empty(kernel, elem)
    idx0 = filled([dim(x, 0), dim(x, 1)] + outs, i64, 0)
    iters = ["parallel"] * (2 + k) + ["reduction"] * k
    fl = is_float(elem)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        v, _, best, best_i = a
        flat = arith.addi(arith.muli(index_of(0), const_index(strides_flat[0])), arith.muli(index_of(1), const_index(strides_flat[1])))
        for i in range(k):
            pos = arith.subi(arith.addi(arith.muli(index_of(2 + i), const_index(strides[i])), arith.muli(index_of(2 + k + i), const_index(dil[i]))), const_index(lo[i]))
            flat = arith.addi(flat, arith.muli(pos, const_index(strides_flat[2 + i])))
        first = const_index(0)
        for i in range(k):
            first = arith.addi(first, index_of(2 + k + i))
        is_first = arith.cmpi(arith.CmpIPredicate.eq, first, const_index(0))
        if fl:
            better = arith.cmpf(arith.CmpFPredicate.OGT, v, best)
        else:
            better = arith.cmpi(arith.CmpIPredicate.ugt if unsigned else arith.CmpIPredicate.sgt, v, best)
        take = arith.ori(better, is_first)
        return [arith.select(take, v, best), arith.select(take, arith.index_cast(i64, flat), best_i)]

    vals, idx = generic([xp, window], [init, idx0], [x_map, w_map, o_map, o_map], iters, body)
    return vals, idx


def _check_avg(node: Node) -> str | None:
    if not is_float(node.in_elem(0)):
        return "integer average pooling"
    return _check_pool(node)


@lowers("AveragePool", "LpPool", check=_check_avg)
def lower_avg_pool(node: Node) -> list[ir.Value]:
    """AveragePool (sum / count) and LpPool ((sum |x|^p)^(1/p))."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = accumulator_type(elem)
    kernel, strides, dil, lo, hi, ceil_mode = _pool_attrs(node)  # type: ignore[misc]
    outs, extra = _ceil_extra(x, kernel, strides, dil, lo, hi, ceil_mode)
    hi2 = [h + e for h, e in zip(hi, extra)]
    n, c = dim(x, 0), dim(x, 1)
    lp = node.op_type == "LpPool"
    p = float(node.attr("p", 2)) if lp else 1.0

    def pre(v: ir.Value) -> ir.Value:
        v = arith.extf(acc, v) if acc != elem else v
        if lp:
            a = math.absf(v)
            return arith.mulf(a, a) if p == 2.0 else math.powf(a, const_scalar(p, acc))
        return v

    xw = elementwise([x], acc, pre) if (lp or acc != elem) else x
    if len(kernel) == 2 and not lp and acc == elem:
        s = _pool_nhwc(xw, kernel, strides, dil, lo, hi2, outs, 0.0, acc, max_pool=False)
    else:
        xp = pad_spatial(xw, lo, hi2, 0.0)
        init = filled([n, c] + outs, acc, 0.0)
        s = _window_generic(xp, kernel, strides, dil, outs, init, arith.addf)
    if lp:
        inv = 1.0 / p
        return [elementwise([s], elem, lambda v: _narrow(math.sqrt(v) if p == 2.0 else math.powf(v, const_scalar(inv, acc)), acc, elem))]
    include_pad = bool(int(node.attr("count_include_pad", 0)))
    # Every window is full when nothing is padded (or pads count and no ceil extension): divide
    # by the kernel size instead of counting.
    if (include_pad and not ceil_mode) or not any(lo + hi2):
        cnt = 1
        for kk in kernel:
            cnt *= kk
        cv = float(cnt)
        return [elementwise([s], elem, lambda v: _narrow(arith.divf(v, const_scalar(cv, acc)), acc, elem))]
    # Count the real (or explicitly padded, with count_include_pad) elements of each window.
    k = len(kernel)
    ones_shape = [1, 1] + [dim(x, 2 + i) for i in range(k)]
    ones = filled(ones_shape, acc, 1.0)
    if include_pad:
        ones = pad_spatial(ones, lo, hi, 1.0)
        ones = pad_spatial(ones, [0] * k, extra, 0.0)
    else:
        ones = pad_spatial(ones, lo, hi2, 0.0)
    cinit = filled([1, 1] + outs, acc, 0.0)
    counts = _window_generic(ones, kernel, strides, dil, outs, cinit, arith.addf)
    return [elementwise([s, counts], elem, lambda v, q: _narrow(arith.divf(v, q), acc, elem), out_shape=[n, c] + outs)]


def _narrow(v: ir.Value, acc: ir.Type, elem: ir.Type) -> ir.Value:
    return arith.truncf(elem, v) if acc != elem else v


def _check_global(node: Node) -> str | None:
    if len(static_shape(node.onnx_types[0])) < 3:
        return "input rank must be >= 3"
    if node.op_type != "GlobalMaxPool" and not is_float(node.in_elem(0)):
        return "integer average pooling"
    return None


@lowers("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", check=_check_global)
def lower_global_pool(node: Node) -> list[ir.Value]:
    """Global pools: a reduction over every spatial dim, kept as size-1 dims."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    r = rank_of(x)
    if r == 4 and is_float(elem) and bitwidth(elem) >= 32 and node.op_type != "GlobalLpPool":
        return [_global_pool_nhwc(x, elem, node.op_type == "GlobalMaxPool")]
    axes = list(range(2, r))
    if node.op_type == "GlobalMaxPool":
        unsigned = is_unsigned(node.in_elem(0))
        comb = arith.maximumf if is_float(elem) else (arith.maxui if unsigned else arith.maxsi)
        res = reduce_dims([x], axes, [min_value(elem, unsigned)], [elem], lambda a: [comb(a[1], a[0])])[0]
        return [expand_unit_dims(res, axes)]
    acc = accumulator_type(elem)
    lp = node.op_type == "GlobalLpPool"
    p = float(node.attr("p", 2)) if lp else 1.0

    def body(a: list[ir.Value]) -> list[ir.Value]:
        v = arith.extf(acc, a[0]) if acc != elem else a[0]
        if lp:
            v = math.absf(v)
            v = arith.mulf(v, v) if p == 2.0 else math.powf(v, const_scalar(p, acc))
        return [arith.addf(a[1], v)]

    s = reduce_dims([x], axes, [0.0], [acc], body)[0]
    if lp:
        res = elementwise([s], elem, lambda v: _narrow(math.sqrt(v) if p == 2.0 else math.powf(v, const_scalar(1.0 / p, acc)), acc, elem))
        return [expand_unit_dims(res, axes)]
    cnt = 1
    for i in axes:
        cnt = dim_mul(cnt, dim(x, i))
    if isinstance(cnt, int):
        cval = const_scalar(float(cnt), acc)
    else:
        cval = arith.sitofp(acc, arith.index_cast(ir.IntegerType.get_signless(64), dim_value(cnt)))
    res = elementwise([s], elem, lambda v: _narrow(arith.divf(v, cval), acc, elem))
    return [expand_unit_dims(res, axes)]




def _global_pool_nhwc(x: ir.Value, elem: ir.Type, max_pool: bool) -> ir.Value:
    """4-D float global max/average pool over an NHWC view: a reduction of H and W with the
    channels innermost (vectorized), kept as [N, 1, 1, C] and transposed back to [N, C, 1, 1]."""
    xt = transpose(x, NCHW_TO_NHWC)
    if max_pool:
        res = reduce_dims([xt], [1, 2], [min_value(elem)], [elem], lambda a: [arith.maximumf(a[1], a[0])])[0]
    else:
        s = reduce_dims([xt], [1, 2], [0.0], [elem], lambda a: [arith.addf(a[1], a[0])])[0]
        cnt = dim_mul(dim(xt, 1), dim(xt, 2))
        if isinstance(cnt, int):
            cval = const_scalar(float(cnt), elem)
        else:
            cval = arith.sitofp(elem, arith.index_cast(ir.IntegerType.get_signless(64), dim_value(cnt)))
        res = elementwise([s], elem, lambda v: arith.divf(v, cval))
    return transpose(expand_unit_dims(res, [1, 2]), NHWC_TO_NCHW)
