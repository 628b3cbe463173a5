"""Normalizations: BatchNormalization (inference), InstanceNormalization, LayerNormalization,
GroupNormalization, LpNormalization, MeanVarianceNormalization.

Statistics are reductions (`reduce_dims`) in f32 for half types; the normalization itself is
one broadcasting elementwise generic. Channel parameters (scale, bias, mean, var of shape [C])
are viewed as [C, 1, ..., 1] with `tensor.expand_shape` so numpy broadcasting lines them up
with dim 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith, math

from onnxc.transforms.lowering.common import (
    Dim,
    Node,
    accumulator_type,
    affine_map,
    dim_add,
    empty,
    filled,
    generic,
    insert_slice,
    const_scalar,
    convert_element,
    convert_tensor,
    dim,
    dim_mul,
    dim_value,
    elementwise,
    expand_unit_dims,
    is_float,
    lowers,
    normalize_axis,
    rank_of,
    reduce_dims,
    shape_of,
    static_shape,
)
from onnxc.transforms.lowering.conv import _merge_dims, _split_dim


#: The normalizations' accumulation type (f16/bf16 in f32): the one rule of common.accumulator_type.
_acc = accumulator_type


def _widen(v: ir.Value, src: ir.Type, acc: ir.Type) -> ir.Value:
    return arith.extf(acc, v) if src != acc else v


def _narrow(v: ir.Value, acc: ir.Type, dst: ir.Type) -> ir.Value:
    return arith.truncf(dst, v) if acc != dst else v


def _channel_view(v: ir.Value, rank: int) -> ir.Value:
    """A [C] tensor as [C, 1, ..., 1] for broadcasting against [N, C, ...]."""
    return expand_unit_dims(v, list(range(1, rank - 1)))


def _count(x: ir.Value, axes: Sequence[int], acc: ir.Type) -> ir.Value:
    n: Dim = 1
    for a in axes:
        n = dim_mul(n, dim(x, a))
    if isinstance(n, int):
        return const_scalar(float(n), acc)
    return arith.sitofp(acc, arith.index_cast(ir.IntegerType.get_signless(64), dim_value(n)))


def _mean_and_variance(x: ir.Value, axes: list[int], elem: ir.Type) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Mean over `axes` (kept as size-1 dims), the sum of squared deviations over `axes` (reduced
    away) and the element count, all in the accumulator type; two passes over `x` for accuracy."""
    acc = _acc(elem)
    cnt = _count(x, axes, acc)
    s = reduce_dims([x], axes, [0.0], [acc], lambda a: [arith.addf(a[1], _widen(a[0], elem, acc))])[0]
    mean = expand_unit_dims(elementwise([s], acc, lambda v: arith.divf(v, cnt)), axes)

    def sq(v: ir.Value, m: ir.Value) -> ir.Value:
        dlt = arith.subf(_widen(v, elem, acc), m)
        return arith.mulf(dlt, dlt)

    dev = elementwise([x, mean], acc, sq, out_shape=shape_of(x))
    squares = reduce_dims([dev], axes, [0.0], [acc], lambda a: [arith.addf(a[1], a[0])])[0]
    return mean, squares, cnt


def mean_and_rstd(x: ir.Value, axes: list[int], elem: ir.Type, eps: float) -> tuple[ir.Value, ir.Value]:
    """Mean and 1/sqrt(var + eps) over `axes` (kept as size-1 dims), in the accumulator type."""
    acc = _acc(elem)
    mean, squares, cnt = _mean_and_variance(x, axes, elem)
    e = const_scalar(eps, acc)
    rstd = expand_unit_dims(elementwise([squares], acc, lambda v: math.rsqrt(arith.addf(arith.divf(v, cnt), e))), axes)
    return mean, rstd


def _check_bn(node: Node) -> str | None:
    training = bool(int(node.attr("training_mode", 0)))
    if not training and any(not isinstance(r.type, ir.NoneType) for r in list(node.op.results)[1:]):
        return "running mean/var outputs without training_mode"
    if training and node.version < 14:
        return "training before opset 14 is not lowered"
    if len(static_shape(node.onnx_types[0])) < 2:
        return "input rank must be >= 2"
    if node.version < 9 and node.has_attr("spatial") and not int(node.attr("spatial")):
        return "spatial=0 is not lowered"
    return None


@lowers("BatchNormalization", check=_check_bn)
def lower_batch_norm(node: Node) -> list[ir.Value | None]:
    """BatchNormalization: (x - mean) / sqrt(var + eps) * scale + bias, with the given mean
    and var at inference; with `training_mode`, the batch statistics (population variance over
    every dim but the channels) and the running averages
    `running = input * momentum + batch * (1 - momentum)` as the extra outputs."""
    if int(node.attr("training_mode", 0)):
        return _batch_norm_training(node)
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = _acc(elem)
    r = rank_of(x)
    eps = float(node.attr("epsilon", 1e-5))
    params = [_channel_view(node.input(i), r) for i in (1, 2, 3, 4)]
    pe = [convert_element(node.in_elem(i)) for i in (1, 2, 3, 4)]
    e = const_scalar(eps, acc)

    def body(v: ir.Value, sc: ir.Value, b: ir.Value, m: ir.Value, var: ir.Value) -> ir.Value:
        vv, scw, bw, mw, varw = _widen(v, elem, acc), _widen(sc, pe[0], acc), _widen(b, pe[1], acc), _widen(m, pe[2], acc), _widen(var, pe[3], acc)
        y = arith.mulf(arith.mulf(arith.subf(vv, mw), math.rsqrt(arith.addf(varw, e))), scw)
        return _narrow(arith.addf(y, bw), acc, elem)

    out = elementwise([x, *params], elem, body, out_shape=shape_of(x))
    return [out] + [None] * (len(node.op.results) - 1)


def _check_in(node: Node) -> str | None:
    xs = static_shape(node.onnx_types[0])
    if len(xs) < 3:
        return "input rank must be >= 3"
    for i, name in ((1, "scale"), (2, "B")):  # one entry per channel (a [2] scale for 1 channel was read at 0: answered)
        s = static_shape(node.onnx_types[i])
        if xs[1] is not None and s and s[0] is not None and s[0] != xs[1]:
            return f"{name} has {s[0]} entries, the input {xs[1]} channels"
    return None


@lowers("InstanceNormalization", check=_check_in)
def lower_instance_norm(node: Node) -> list[ir.Value]:
    """InstanceNormalization: statistics per (n, c) over the spatial dims."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = _acc(elem)
    r = rank_of(x)
    axes = list(range(2, r))
    mean, rstd = mean_and_rstd(x, axes, elem, float(node.attr("epsilon", 1e-5)))
    # Lengths known only at run time must be the channel count too (the compile fuzzer: a [2]
    # scale for 1 channel was read at its first entry and answered).
    from onnxc.transforms.lowering.common import dim_value
    from onnxc.transforms.lowering.runtime_checks import require

    c = dim(x, 1)
    for i in (1, 2):
        n = dim(node.input(i), 0)
        if not (isinstance(n, int) and isinstance(c, int)):
            require(arith.cmpi(arith.CmpIPredicate.eq, dim_value(n), dim_value(c)), node.op,
                    f"input {i} has {{entries}} entries, the input {{channels}} channels", [("entries", dim_value(n)), ("channels", dim_value(c))])  # fmt: skip
    scale = _channel_view(node.input(1), r)
    bias = _channel_view(node.input(2), r)

    def body(v: ir.Value, m: ir.Value, s: ir.Value, sc: ir.Value, b: ir.Value) -> ir.Value:
        y = arith.mulf(arith.mulf(arith.subf(_widen(v, elem, acc), m), s), _widen(sc, elem, acc))
        return _narrow(arith.addf(y, _widen(b, elem, acc)), acc, elem)

    return [elementwise([x, mean, rstd, scale, bias], elem, body, out_shape=shape_of(x))]


def _check_ln(node: Node) -> str | None:
    r = len(static_shape(node.onnx_types[0]))
    a = int(node.attr("axis", -1))
    if not -r <= a < r:
        return f"axis {a} out of range for rank {r}"
    return None


@lowers("LayerNormalization", check=_check_ln)
def lower_layer_norm(node: Node) -> list[ir.Value | None]:
    """LayerNormalization over dims axis..r-1; optional Mean and InvStdDev outputs."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = _acc(elem)
    r = rank_of(x)
    axis = normalize_axis(int(node.attr("axis", -1)), r)
    axes = list(range(axis, r))
    mean, rstd = mean_and_rstd(x, axes, elem, float(node.attr("epsilon", 1e-5)))
    ins = [x, mean, rstd, node.input(1)]
    has_b = node.has(2)
    if has_b:
        ins.append(node.input(2))

    def body(*a: ir.Value) -> ir.Value:
        y = arith.mulf(arith.mulf(arith.subf(_widen(a[0], elem, acc), a[1]), a[2]), _widen(a[3], elem, acc))
        if has_b:
            y = arith.addf(y, _widen(a[4], elem, acc))
        return _narrow(y, acc, elem)

    y = elementwise(ins, elem, body, out_shape=shape_of(x))
    results: list[ir.Value | None] = [y]
    # Mean / InvStdDev outputs have the stash type (float unless told otherwise).
    for i, v in ((1, mean), (2, rstd)):
        if len(node.op.results) > i and not isinstance(node.op.results[i].type, ir.NoneType):
            want = convert_element(node.out_elem(i))
            results.append(convert_tensor(v, acc, want) if want != acc else v)
        else:
            results.append(None)
    return results


def _check_gn(node: Node) -> str | None:
    s = static_shape(node.onnx_types[0])
    g = int(node.attr("num_groups"))
    if len(s) < 3 or s[1] is None or s[1] % g:
        return f"the channel dim must be static and divisible by num_groups={g}"
    if node.version < 21:
        return "GroupNormalization-18 (per-group scale) is not lowered; run onnx-upgrade-ops"
    return None


@lowers("GroupNormalization", check=_check_gn)
def lower_group_norm(node: Node) -> list[ir.Value]:
    """GroupNormalization (opset 21: per-channel scale and bias): statistics per (n, group)."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = _acc(elem)
    r = rank_of(x)
    g = int(node.attr("num_groups"))
    c = static_shape(x.type)[1]
    xg = _split_dim(x, 1, g, c // g)
    axes = list(range(2, r + 1))
    mean, rstd = mean_and_rstd(xg, axes, elem, float(node.attr("epsilon", 1e-5)))
    norm = elementwise([xg, mean, rstd], acc, lambda v, m, s: arith.mulf(arith.subf(_widen(v, elem, acc), m), s), out_shape=shape_of(xg))
    norm = _merge_dims(norm, 1)
    scale = _channel_view(node.input(1), r)
    bias = _channel_view(node.input(2), r)
    return [elementwise([norm, scale, bias], elem, lambda v, sc, b: _narrow(arith.addf(arith.mulf(v, _widen(sc, elem, acc)), _widen(b, elem, acc)), acc, elem), out_shape=shape_of(x))]


@lowers("MeanVarianceNormalization")
def lower_mvn(node: Node) -> list[ir.Value]:
    """MeanVarianceNormalization: (x - mean) / sqrt(var) over `axes` (default [0, 2, 3]); the
    reference adds epsilon 1e-9 to the std deviation."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = _acc(elem)
    r = rank_of(x)
    axes = sorted({normalize_axis(int(a), r) for a in (node.attr("axes") or [0, 2, 3])})
    mean, squares, cnt = _mean_and_variance(x, axes, elem)
    shape = shape_of(x)
    # 1 / (std + 1e-9) once per reduced row (at most 1e9: never inf), a multiply per element.
    one, tiny = const_scalar(1.0, acc), const_scalar(1e-9, acc)
    inv_std = expand_unit_dims(elementwise([squares], acc, lambda v: arith.divf(one, arith.addf(math.sqrt(arith.divf(v, cnt)), tiny))), axes)
    return [elementwise([x, mean, inv_std], elem, lambda v, m, r: _narrow(arith.mulf(arith.subf(_widen(v, elem, acc), m), r), acc, elem), out_shape=shape)]


@lowers("LpNormalization")
def lower_lp_norm(node: Node) -> list[ir.Value]:
    """LpNormalization: x / ||x||_p along `axis` (p = 1 or 2)."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = _acc(elem)
    r = rank_of(x)
    axis = normalize_axis(int(node.attr("axis", -1)), r)
    p = int(node.attr("p", 2))

    def body(a: list[ir.Value]) -> list[ir.Value]:
        v = _widen(a[0], elem, acc)
        t = math.absf(v) if p == 1 else arith.mulf(v, v)
        return [arith.addf(a[1], t)]

    s = reduce_dims([x], [axis], [0.0], [acc], body)[0]
    norm = expand_unit_dims(elementwise([s], acc, (lambda v: v) if p == 1 else math.sqrt), [axis])
    def body(v: ir.Value, n: ir.Value) -> ir.Value:
        # A zero norm gives 0, not NaN (as the reference does).
        zero = arith.cmpf(arith.CmpFPredicate.OEQ, n, const_scalar(0.0, acc))
        return _narrow(arith.select(zero, const_scalar(0.0, acc), arith.divf(_widen(v, elem, acc), n)), acc, elem)

    return [elementwise([x, norm], elem, body, out_shape=shape_of(x))]




def _check_rms(node: Node) -> str | None:
    r = len(static_shape(node.onnx_types[0]))
    a = int(node.attr("axis", -1))
    if not -r <= a < r:
        return f"axis {a} out of range for rank {r}"
    return None


@lowers("RMSNormalization", check=_check_rms)
def lower_rms_norm(node: Node) -> list[ir.Value]:
    """RMSNormalization: x / sqrt(mean(x^2 over axis..r-1) + epsilon) * scale."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = _acc(elem)
    r = rank_of(x)
    axis = normalize_axis(int(node.attr("axis", -1)), r)
    axes = list(range(axis, r))
    cnt = _count(x, axes, acc)
    e = const_scalar(float(node.attr("epsilon", 1e-5)), acc)

    def sq(a: list[ir.Value]) -> list[ir.Value]:
        v = _widen(a[0], elem, acc)
        return [arith.addf(a[1], arith.mulf(v, v))]

    s = reduce_dims([x], axes, [0.0], [acc], sq)[0]
    rstd = expand_unit_dims(elementwise([s], acc, lambda v: math.rsqrt(arith.addf(arith.divf(v, cnt), e))), axes)
    se = convert_element(node.in_elem(1))
    return [elementwise([x, rstd, node.input(1)], elem, lambda v, q, sc: _narrow(arith.mulf(arith.mulf(_widen(v, elem, acc), q), _widen(sc, se, acc)), acc, elem), out_shape=shape_of(x))]


@lowers("LRN")
def lower_lrn(node: Node) -> list[ir.Value]:
    """LRN: x / (bias + alpha / size * sum of x^2 over a window of channels) ^ beta."""
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = _acc(elem)
    r = rank_of(x)
    size = int(node.attr("size"))
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    sq = elementwise([x], acc, lambda v: arith.mulf(_widen(v, elem, acc), _widen(v, elem, acc)))
    # Zero-pad the channel dim of the squares, then sum a window of `size` channels.
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    shape = shape_of(sq)
    padded_shape = list(shape)
    padded_shape[1] = dim_add(shape[1], lo + hi)
    padded = insert_slice(sq, filled(padded_shape, acc, 0.0), [0, lo] + [0] * (r - 2))
    n = r + 1
    d = ir.AffineDimExpr.get
    in_map = affine_map(n, [0, d(1) + d(r)] + list(range(2, r)))
    win_map = affine_map(n, [r])
    out_map = affine_map(n, list(range(r)))
    window = empty([size], acc)
    ssum = generic([padded, window], [filled(shape, acc, 0.0)], [in_map, win_map, out_map], ["parallel"] * r + ["reduction"], lambda a: [arith.addf(a[2], a[0])])[0]
    k = const_scalar(alpha / size, acc)
    b = const_scalar(bias, acc)
    be = const_scalar(beta, acc)
    return [elementwise([x, ssum], elem, lambda v, s: _narrow(arith.divf(_widen(v, elem, acc), math.powf(arith.addf(b, arith.mulf(k, s)), be)), acc, elem), out_shape=shape_of(x))]


def _batch_norm_training(node: Node) -> list[ir.Value | None]:
    x = node.input(0)
    elem = convert_element(node.in_elem(0))
    acc = _acc(elem)
    r = rank_of(x)
    axes = [0] + list(range(2, r))
    eps = float(node.attr("epsilon", 1e-5))
    mom = float(node.attr("momentum", 0.9))
    cnt = _count(x, axes, acc)
    s = reduce_dims([x], axes, [0.0], [acc], lambda a: [arith.addf(a[1], _widen(a[0], elem, acc))])[0]
    mean_c = elementwise([s], acc, lambda v: arith.divf(v, cnt))  # [C]
    mean_b = _channel_view(mean_c, r)

    def sq(v: ir.Value, m: ir.Value) -> ir.Value:
        d = arith.subf(_widen(v, elem, acc), m)
        return arith.mulf(d, d)

    dev = elementwise([x, mean_b], acc, sq, out_shape=shape_of(x))
    var_c = elementwise([reduce_dims([dev], axes, [0.0], [acc], lambda a: [arith.addf(a[1], a[0])])[0]], acc, lambda v: arith.divf(v, cnt))
    var_b = _channel_view(var_c, r)
    scale, bias = _channel_view(node.input(1), r), _channel_view(node.input(2), r)
    se, be = convert_element(node.in_elem(1)), convert_element(node.in_elem(2))
    e = const_scalar(eps, acc)

    def norm(v: ir.Value, m: ir.Value, va: ir.Value, sc: ir.Value, b: ir.Value) -> ir.Value:
        y = arith.mulf(arith.mulf(arith.subf(_widen(v, elem, acc), m), math.rsqrt(arith.addf(va, e))), _widen(sc, se, acc))
        return _narrow(arith.addf(y, _widen(b, be, acc)), acc, elem)

    y = elementwise([x, mean_b, var_b, scale, bias], elem, norm, out_shape=shape_of(x))
    results: list[ir.Value | None] = [y]
    for i, batch in ((3, mean_c), (4, var_c)):
        if len(node.op.results) > i - 2 and not isinstance(node.op.results[i - 2].type, ir.NoneType):
            ie = convert_element(node.in_elem(i))
            k = const_scalar(mom, acc)
            k1 = const_scalar(1.0 - mom, acc)
            results.append(elementwise([node.input(i), batch], ie, lambda a, b: _narrow(arith.addf(arith.mulf(_widen(a, ie, acc), k), arith.mulf(b, k1)), acc, ie)))
        else:
            results.append(None)
    return results
