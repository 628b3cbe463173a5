"""Conv (1-D, 2-D, 3-D; groups, strides, dilations, pads, auto_pad) and the window arithmetic
shared with pooling.

2-D float convolutions run channels-last (NHWC), because that is the layout upstream MLIR can
vectorize (the convolution vectorizer works on `linalg.conv_1d_nwc_wcf` / `depthwise_conv_1d_nwc_wc`
after `transform.structured.decompose`, channels in the vector lanes):

* the input is transposed NCHW -> NHWC with a `linalg.transpose`, padded explicitly, and the result
  transposed back; `layout-propagation` (transforms/layout_propagation.py) then cancels the pairs
  of transposes between consecutive layers, so a CNN runs NHWC end to end;
* a constant filter is rearranged at compile time (a new constant, no run-time transpose): HWCF
  for `linalg.conv_2d_nhwc_hwcf`, HWC / HWCM for `linalg.depthwise_conv_2d_nhwc_hwc(m)`. HWCF
  rather than FHWC because only HWCF decomposes to a 1-D op the LLVM 22 vectorizer handles (checked:
  `conv_2d_nhwc_fhwc` tiled the same way stays a scalar `linalg.conv` after decompose+vectorize);
* a 1x1 convolution without padding can be a `linalg.matmul` of the (N*H*W, C) pixels by the
  (C, F) filter (strided pixels are sliced first), for the CPU target's contraction path
  (`ONE_BY_ONE_AS_MATMUL`, off for now: see there);
* grouped convolutions with a few groups become one `conv_2d_nhwc_hwcf` per group on channel
  slices (each vectorizes like a plain convolution); a grouped 1x1 one is a `linalg.batch_matmul`
  over the groups (`_grouped_pointwise`);
* a 1-D float convolution is the 2-D one of height 1, or, with a run-time length, one matmul of
  its k shifted windows (`_conv1d_patches`);
* a convolution whose windows tile the input (stride = kernel, no padding or dilation: a vision
  transformer's patch embedding) is a `linalg.matmul` of the (N*OH*OW, C*KH*KW) patches by the
  (C*KH*KW, F) filter: the patches are a reshape and one transpose of the input (no overlap, so
  no im2col copy grows the data), and the product takes the packed GEMM path (`_patch_matmul`).

Everything else (3-D, many groups, f16/bf16 accumulating in f32, integer ConvInteger) is one
`linalg.generic` over (n, g, m, out spatial..., c, kernel spatial...) on views that split the
channel dims by group (`tensor.expand_shape`), so every indexing map stays a projection plus the
strided window sums. Padding is explicit: the input is copied into a zero-filled tensor
(`linalg.fill` + `tensor.insert_slice`). The bias initializes the accumulator.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg

from onnxc.transforms.lowering.common import (
    Dim,
    Node,
    accumulator_type,
    affine_map,
    collapse_unit_dims,
    convert_element,
    convert_tensor,
    dim,
    dim_add,
    dim_floordiv,
    dim_sub,
    dim_value,
    elem_of,
    elementwise,
    empty,
    expand_unit_dims,
    extract_slice,
    filled,
    generic,
    insert_slice,
    is_float,
    lowers,
    rank_of,
    reshape,
    shape_of,
    static_shape,
    tensor_type,
)
from mlir.dialects import tensor


def window_pads(
    in_sizes: list[int | None], kernel: list[int], strides: list[int], dilations: list[int], pads: list[int] | None, auto_pad: str
) -> tuple[list[int], list[int]] | str:
    """(begin pads, end pads) per spatial dim, resolving auto_pad; a reason string if the
    input sizes needed for SAME_* padding are dynamic."""
    k = len(kernel)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for i in range(k):
            d = in_sizes[i]
            if d is None:
                return "auto_pad SAME with a dynamic spatial dim"
            out = -(-d // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - d, 0)
            small, big = total // 2, total - total // 2
            lo.append(big if auto_pad == "SAME_LOWER" else small)
            hi.append(small if auto_pad == "SAME_LOWER" else big)
        return lo, hi
    if auto_pad == "VALID":
        return [0] * k, [0] * k
    p = list(pads) if pads else [0] * (2 * k)
    return p[:k], p[k:]


def pad_spatial(x: ir.Value, lo: list[int], hi: list[int], value: float | int) -> ir.Value:
    """Pad the trailing len(lo) dims of x with `value` (fill + insert_slice)."""
    if not any(lo) and not any(hi):
        return x
    shape = shape_of(x)
    k = len(lo)
    lead = len(shape) - k
    out = shape[:lead] + [dim_add(dim_add(shape[lead + i], lo[i]), hi[i]) for i in range(k)]
    dest = filled(out, elem_of(x.type), value)
    return insert_slice(x, dest, [0] * lead + lo)


def out_size(padded: Dim, kernel: int, stride: int, dilation: int, ceil_mode: bool = False) -> Dim:
    """floor((padded - dilation*(kernel-1) - 1) / stride) + 1 (ceil with ceil_mode).

    A run-time size (a dynamic input dim) shorter than the dilated window is a run-time error
    naming the node being lowered: the size came out negative, and the result was allocated with
    it (a "could not allocate -1440 bytes" error, or a negative dim reaching numpy: the compile
    fuzzer, LpPool with dilations [2, 9] and symbolic dims)."""
    span = dilation * (kernel - 1) + 1
    if not isinstance(padded, int):
        from onnxc.transforms.lowering.runtime_checks import require

        size = dim_value(padded)
        ok = arith.cmpi(arith.CmpIPredicate.sge, size, dim_value(span))
        require(ok, None, f"a spatial size of {{size}} (with padding) is shorter than the window ({span} with dilation {dilation})",
                [("size", size)])
    num = dim_sub(padded, span)
    if ceil_mode:
        num = dim_add(num, stride - 1)
    return dim_add(dim_floordiv(num, stride), 1)


def _conv_attrs(node: Node, k: int, xi: int = 0, wi: int = 1) -> tuple[list[int], list[int], list[int], list[int], list[int]] | str:
    wshape = static_shape(node.onnx_types[wi])
    kernel = node.attr("kernel_shape") or wshape[2:]
    if any(s is None for s in kernel):
        return "the kernel shape must be static"
    kernel = [int(s) for s in kernel]
    strides = [int(s) for s in (node.attr("strides") or [1] * k)]
    dil = [int(s) for s in (node.attr("dilations") or [1] * k)]
    xs = static_shape(node.onnx_types[xi])[2:]
    p = window_pads(xs, kernel, strides, dil, node.attr("pads"), node.attr("auto_pad", "NOTSET"))
    if isinstance(p, str):
        return p
    return kernel, strides, dil, p[0], p[1]


def check_conv(node: Node, xi: int = 0, wi: int = 1) -> str | None:
    """Reasons a Conv-like node (X at input xi, W at wi) cannot be lowered."""
    xs = static_shape(node.onnx_types[xi])
    ws = static_shape(node.onnx_types[wi])
    if len(xs) < 3 or len(xs) != len(ws):
        return "X and W must have the same rank >= 3"
    g = int(node.attr("group", 1))
    if ws[0] is not None and ws[0] % g:
        return f"{ws[0]} output channels do not split into {g} groups"
    if ws[1] is None:
        return "the input channels per group of W must be static"
    a = _conv_attrs(node, len(xs) - 2, xi, wi)
    return a if isinstance(a, str) else None


def _check_conv(node: Node) -> str | None:
    return check_conv(node)


@lowers("Conv", check=_check_conv)
def lower_conv(node: Node) -> list[ir.Value]:
    """Conv: channels-last named ops for 2-D float convolutions, a group generic otherwise."""
    return [conv_values(node, node.input(0), node.input(1), node.input(2) if node.has(2) else None, node.in_elem(0))]


def conv_values(node: Node, x: ir.Value, w: ir.Value, bias: ir.Value | None, onnx_elem: ir.Type, xi: int = 0, wi: int = 1) -> ir.Value:
    """The convolution of lowered x and w (plus bias) with `node`'s Conv attributes, in the
    element type `onnx_elem` (f16/bf16 accumulate in f32)."""
    elem = convert_element(onnx_elem)
    acc = accumulator_type(elem)
    r = rank_of(x)
    k = r - 2
    kernel, strides, dil, lo, hi = _conv_attrs(node, k, xi, wi)  # type: ignore[misc]
    g = int(node.attr("group", 1))
    _require_group_channels(node, x, w, g)
    if k == 2 and is_float(elem) and acc == elem:
        nhwc = _conv_2d_nhwc(x, w, bias, elem, kernel, strides, dil, lo, hi, g)
        if nhwc is not None:
            return nhwc
    if k == 1 and is_float(elem) and acc == elem and g == 1 and static_shape(x.type)[2] is None:
        patches = _conv1d_patches(x, w, bias, elem, kernel[0], strides[0], dil[0], lo[0], hi[0])
        if patches is not None:
            return patches
    if k == 1 and is_float(elem) and acc == elem:
        # A 1-D convolution is the 2-D one of height 1 (kernel 1 x k): it takes the channels-last
        # path too. Why: as the group generic it stayed scalar loops (Whisper's audio front end,
        # two 1-D convolutions over the frames, was 85% of its encoder's time, 5x onnxruntime's).
        x4 = _unsqueeze_height(x)
        w4 = _unsqueeze_height(w)
        nhwc = _conv_2d_nhwc(x4, w4, bias, elem, [1] + kernel, [1] + strides, [1] + dil, [0] + lo, [0] + hi, g)
        if nhwc is not None:
            return _collapse(nhwc, [[0], [1], [2, 3]])
    xp = pad_spatial(x, lo, hi, 0.0 if is_float(elem) else 0)
    n = dim(x, 0)
    m = dim(w, 0)
    outs = [out_size(dim(xp, 2 + i), kernel[i], strides[i], dil[i]) for i in range(k)]
    out_shape = [n, m] + outs
    # Accumulator initialized with the bias (broadcast along channels) or zero.
    if bias is not None:
        b = bias
        if acc != elem:
            b = convert_tensor(b, elem, acc)
        b_exp = expand_unit_dims(b, [0] + [2 + i for i in range(k)])
        init = elementwise([b_exp], acc, lambda v: v, out_shape=out_shape)
    else:
        init = filled(out_shape, acc, 0.0 if is_float(acc) else 0)
    # Generic: split channels by group.  x: [n, g, cg, s...], w: [g, mg, cg, k...], out: [n, g, mg, o...]
    cg = static_shape(w.type)[1]
    xs = shape_of(xp)
    # X's channels dynamic (checked to be g x cg above): split into (g, C / g), as an
    # expand_shape of a dynamic dim into static ones does not verify.
    xg = _split_dim(xp, 1, g, cg if static_shape(xp.type)[1] is not None else dim_floordiv(dim(xp, 1), g))
    mg = dim_floordiv(m, g)
    wg = _split_dim(w, 0, g, mg)
    og = _split_dim(init, 1, g, mg)
    # loops: n, g, mg, o_0..o_{k-1}, cg, k_0..k_{k-1}
    L = 3 + k + 1 + k
    N_, G_, M_ = 0, 1, 2
    O = [3 + i for i in range(k)]
    C_ = 3 + k
    K = [4 + k + i for i in range(k)]
    d = ir.AffineDimExpr.get
    x_exprs = [d(N_), d(G_), d(C_)] + [d(O[i]) * strides[i] + d(K[i]) * dil[i] for i in range(k)]
    w_exprs = [d(G_), d(M_), d(C_)] + [d(K[i]) for i in range(k)]
    o_exprs = [d(N_), d(G_), d(M_)] + [d(O[i]) for i in range(k)]
    # A shape-only operand gives the kernel loops their extent (as linalg's pooling ops do).
    iters = ["parallel"] * (3 + k) + ["reduction"] * (1 + k)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        xv, wv, ov = a
        if acc != elem:
            xv, wv = arith.extf(acc, xv), arith.extf(acc, wv)
        if is_float(acc):
            return [arith.addf(ov, arith.mulf(xv, wv))]
        return [arith.addi(ov, arith.muli(xv, wv))]

    res = generic([xg, wg], [og], [affine_map(L, x_exprs), affine_map(L, w_exprs), affine_map(L, o_exprs)], iters, body)[0]
    res = _merge_dims(res, 1)
    return res if acc == elem else convert_tensor(res, acc, elem)


def _require_group_channels(node: Node, x: ir.Value, w: ir.Value, g: int) -> None:
    """Run-time checks, where the dims are dynamic, that X has W[1] x group channels (W[1] is
    static: `check_conv`) and that W's output channels split into `g` groups
    (`onnx-validate-attributes` checks both where the dims are static). Why: neither was compared
    (a float Conv answered where onnx.reference refuses; the compile fuzzer). X keeps its dynamic
    type: a `tensor.cast` to the static count would be folded by canonicalization into X's
    producer, whose loops then ran to the run-time count over a buffer of the static one, before
    the check (ConvInteger's zero-point subtraction overwrote the heap)."""
    from onnxc.transforms.lowering.runtime_checks import require

    if g > 1 and static_shape(w.type)[0] is None:
        m = dim_value(dim(w, 0))
        ok = arith.cmpi(arith.CmpIPredicate.eq, arith.remui(m, dim_value(g)), dim_value(0))
        require(ok, node.op, f"W's {{m}} output channels do not split into group {g}", [("m", m)])
    if static_shape(x.type)[1] is None:
        c, want = dim_value(dim(x, 1)), g * static_shape(w.type)[1]
        ok = arith.cmpi(arith.CmpIPredicate.eq, c, dim_value(want))
        require(ok, node.op, f"X has {{c}} channels, W[1] x group {g} asks for {want}", [("c", c)])


def _conv1d_patches(x: ir.Value, w: ir.Value, bias: ir.Value | None, elem: ir.Type, k: int, stride: int, dil: int,
                    lo: int, hi: int) -> ir.Value | None:
    """A 1-D convolution of a run-time length as one matmul: the k shifted (strided, dilated)
    windows of the channels-last input side by side, [n * out, k * c], times the filter
    [k * c, m] (a constant laid out at compile time). None when the channel counts are not static.

    Why: the channels-last plan tiles the output width by a register tile that must divide it, so
    a dynamic width was left to scalar loops (Whisper's encoder with a dynamic frame count ran its
    two front-end convolutions 6x slower than with the frames pinned); the matmul takes the packed
    contraction path, whose M may be dynamic. The window copy is k times the input (k = 3 for
    Whisper), small next to the product."""
    ws = static_shape(w.type)
    m, c = ws[0], ws[1]
    if m is None or c is None:
        return None
    xt = pad_dims(transpose(x, (0, 2, 1)), [1], [lo], [hi], 0.0)  # [n, L + lo + hi, c]
    n = dim(xt, 0)
    length = out_size(dim(xt, 1), k, stride, dil)
    cols = empty([n, length, k, c], elem)
    for t in range(k):
        window = extract_slice(xt, [0, t * dil, 0], [n, length, c], [1, stride, 1])
        cols = insert_slice(_expand(window, [[0], [1], [2, 3]], [n, length, 1, c]), cols, [0, 0, t, 0])
    a = _collapse(cols, [[0, 1], [2, 3]])  # [n * out, k * c]
    b = _flat_filter(w, elem, m, c, k)  # [k * c, m]
    rows = dim(a, 0)
    init = _bias_init(bias, elem, [rows, m])
    prod = linalg.matmul(a, b, outs=[init])
    # Two dynamic sizes from one: `tensor.reshape` (an expand_shape of them fails to lower).
    return transpose(reshape(prod, [n, length, m]), (0, 2, 1))


def _flat_filter(w: ir.Value, elem: ir.Type, m: int, c: int, k: int) -> ir.Value:
    """The filter [m, c, k] as the [k * c, m] matrix the window columns multiply (row t * c + i:
    tap t of input channel i); a constant at compile time when w is one."""
    arr = constant_array(w)
    if arr is not None:
        const = _new_constant(np.ascontiguousarray(arr.reshape(m, c, k).transpose(2, 1, 0).reshape(k * c, m)), elem)
        if const is not None:
            return const
    return _collapse(transpose(w, (2, 1, 0)), [[0, 1], [2]])


def _unsqueeze_height(v: ir.Value) -> ir.Value:
    """[n, c, l] -> [n, c, 1, l]: a 1-D convolution's input or filter as a 2-D one of height 1 (a
    constant filter stays a constant, so it is still laid out at compile time)."""
    arr = constant_array(v)
    if arr is not None:
        c = _new_constant(arr.reshape(arr.shape[:2] + (1,) + arr.shape[2:]), elem_of(v.type))
        if c is not None:
            return c
    shape = shape_of(v)
    return _expand(v, [[0], [1], [2, 3]], shape[:2] + [1, shape[2]])


def _split_dim(v: ir.Value, axis: int, a: Dim, b: Dim) -> ir.Value:
    """Reshape dim `axis` of size a*b into (a, b) (`tensor.expand_shape`)."""
    shape = shape_of(v)
    out = shape[:axis] + [a, b] + shape[axis + 1 :]
    groups = [[i] for i in range(axis)] + [[axis, axis + 1]] + [[i + 1] for i in range(axis + 1, len(shape))]
    i64 = ir.IntegerType.get_signless(64)
    reassoc = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, j) for j in gr]) for gr in groups])
    dyn = [s for s in out if not isinstance(s, int)]
    static = [s if isinstance(s, int) else ir.ShapedType.get_dynamic_size() for s in out]
    return tensor.expand_shape(tensor_type(out, elem_of(v.type)), v, reassoc, dyn, static)


def _merge_dims(v: ir.Value, axis: int) -> ir.Value:
    """Merge dims axis and axis+1 (`tensor.collapse_shape`)."""
    s = static_shape(v.type)
    r = len(s)
    groups = [[i] for i in range(axis)] + [[axis, axis + 1]] + [[i] for i in range(axis + 2, r)]
    merged = None if s[axis] is None or s[axis + 1] is None else s[axis] * s[axis + 1]
    out = s[:axis] + [merged] + s[axis + 2 :]
    i64 = ir.IntegerType.get_signless(64)
    reassoc = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, j) for j in gr]) for gr in groups])
    return tensor.collapse_shape(tensor_type(out, elem_of(v.type)), v, reassoc)


# --- channels-last 2-D convolution ---------------------------------------------------------------

#: linalg.transpose permutations between ONNX's NCHW and the NHWC the vectorizer wants.
NCHW_TO_NHWC: tuple[int, ...] = (0, 2, 3, 1)
NHWC_TO_NCHW: tuple[int, ...] = (0, 3, 1, 2)

#: Lower an unpadded 1x1 convolution as a `linalg.matmul` of its pixels (the CPU target's
#: contraction path) instead of a `conv_2d_nhwc_hwcf`. Off: measured with bench/conv_kernels.py
#: (AVX-512 Zen 4, shared machine), the direct convolution's plan beat the matmul plan of the time
#: on ResNet-50's 1x1 shapes (geomean 1.54x vs 3.34x onnxruntime; K = 1024/2048 5-7x slower as
#: matmuls, where the long-reduction split kicks in). Turn on once the contraction path's packed
#: (mmt4d) GEMM is faster than the direct plan.
ONE_BY_ONE_AS_MATMUL: bool = False

#: Grouped 1x1 convolutions (stride 1, no pads) with at most `MAX_SPLIT_GROUPS` groups become
#: one matmul per group (the packed contraction path) instead of one direct convolution per group
#: (see `_grouped_pointwise`).
GROUPED_POINTWISE_AS_MATMUL: bool = True

#: Grouped convolutions with at most this many groups become one named convolution per group
#: (each vectorizes); with more, the per-group ops would bloat the module for small channel
#: slices, and the group generic is used instead.
MAX_SPLIT_GROUPS: int = 32


def transpose(v: ir.Value, perm: tuple[int, ...] | list[int]) -> ir.Value:
    """`linalg.transpose` of `v` (result dim i is input dim perm[i])."""
    shape = shape_of(v)
    init = empty([shape[p] for p in perm], elem_of(v.type))
    return linalg.transpose(v, outs=[init], permutation=list(perm)).results[0]


def pad_dims(x: ir.Value, axes: list[int], lo: list[int], hi: list[int], value: float | int) -> ir.Value:
    """Pad dims `axes` of x by lo/hi with `value` (fill + insert_slice)."""
    if not any(lo) and not any(hi):
        return x
    shape = shape_of(x)
    out = list(shape)
    offsets: list[Dim] = [0] * len(shape)
    for a, l, h in zip(axes, lo, hi):
        out[a] = dim_add(dim_add(shape[a], l), h)
        offsets[a] = l
    return insert_slice(x, filled(out, elem_of(x.type), value), offsets)


def constant_array(v: ir.Value) -> np.ndarray | None:
    """The value of a lowered constant (`arith.constant` of dense or `dense_resource` elements)."""
    from onnxc.importers.tensors import attribute_to_array
    from onnxc.importers.errors import ImportError_

    if not isinstance(v, ir.OpResult) or v.owner.name != "arith.constant":
        return None
    attr = v.owner.attributes["value"]
    shape = static_shape(attr.type)
    # The importer's reader: `dense_resource` blobs come back as plain `ir.Attribute`s (the
    # bindings do not downcast them), which it reads after checking their kind.
    try:
        arr, _ = attribute_to_array(attr)
    except ImportError_:
        return None
    return np.asarray(arr).reshape([int(d) for d in shape])  # type: ignore[arg-type]


def _new_constant(array: np.ndarray, elem: ir.Type) -> ir.Value | None:
    """An `arith.constant` holding `array` (a `dense_resource` blob when large, as imported
    weights are), or None when the element type has no attribute form here."""
    from onnxc.transforms.onnx_utils import elements_attr

    attr = elements_attr(np.ascontiguousarray(array), elem, name="conv_filter")
    if attr is None:
        return None
    return arith.constant(attr.type, attr)


def _filter(w: ir.Value, elem: ir.Type, shape: list[int], perm: list[int]) -> ir.Value:
    """The filter `w` reshaped to `shape` (row-major, as numpy) then transposed by `perm`: at
    compile time when `w` is a constant, else with `tensor.reshape` + `linalg.transpose`."""
    arr = constant_array(w)
    if arr is not None:
        c = _new_constant(arr.reshape(shape).transpose(perm), elem)
        if c is not None:
            return c
    from onnxc.transforms.lowering.common import reshape

    return transpose(reshape(w, list(shape)), perm)


def _collapse(v: ir.Value, groups: list[list[int]]) -> ir.Value:
    """`tensor.collapse_shape` by reassociation `groups` (static sizes multiply, else dynamic)."""
    s = static_shape(v.type)
    out: list[int | None] = []
    for gr in groups:
        sizes = [s[i] for i in gr]
        prod = 1
        for sz in sizes:
            prod = prod * sz if (prod is not None and sz is not None) else None
        out.append(prod)
    i64 = ir.IntegerType.get_signless(64)
    reassoc = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, j) for j in gr]) for gr in groups])
    return tensor.collapse_shape(tensor_type(out, elem_of(v.type)), v, reassoc)


def _expand(v: ir.Value, groups: list[list[int]], out: list[Dim]) -> ir.Value:
    """`tensor.expand_shape` of `v` to `out` by reassociation `groups`."""
    i64 = ir.IntegerType.get_signless(64)
    reassoc = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, j) for j in gr]) for gr in groups])
    dyn = [d for d in out if not isinstance(d, int)]
    static = [d if isinstance(d, int) else ir.ShapedType.get_dynamic_size() for d in out]
    return tensor.expand_shape(tensor_type(out, elem_of(v.type)), v, reassoc, dyn, static)


def _bias_init(bias: ir.Value | None, elem: ir.Type, out_shape: list[Dim]) -> ir.Value:
    """The accumulator: the bias broadcast along the last (channel) dim, or zeros."""
    if bias is None:
        return filled(out_shape, elem, 0.0)
    return _broadcast(bias, out_shape)


def _broadcast(v: ir.Value, out_shape: list[Dim]) -> ir.Value:
    """`linalg.broadcast` of `v` along the leading dims of `out_shape` (v is its trailing dims)."""
    lead = list(range(len(out_shape) - rank_of(v)))
    return linalg.broadcast(v, outs=[empty(out_shape, elem_of(v.type))], dimensions=lead).results[0]


def _conv_2d_nhwc(
    x: ir.Value,
    w: ir.Value,
    bias: ir.Value | None,
    elem: ir.Type,
    kernel: list[int],
    strides: list[int],
    dil: list[int],
    lo: list[int],
    hi: list[int],
    g: int,
) -> ir.Value | None:
    """A float 2-D convolution computed channels-last (see the module docstring); the result is
    NCHW again. None when the filter's channel counts are not static (the generic handles it)."""
    ws = static_shape(w.type)
    m, cg = ws[0], ws[1]
    if m is None or cg is None:
        return None
    c = cg * g
    depthwise = g > 1 and cg == 1
    if g > 1 and not depthwise and g > MAX_SPLIT_GROUPS:
        return None
    if g == 1 and strides == kernel and kernel != [1, 1] and dil == [1, 1] and not any(lo + hi):
        patches = _patch_matmul(x, w, bias, elem, kernel, m, c)
        if patches is not None:
            return patches
    xt = transpose(x, NCHW_TO_NHWC)
    n = dim(xt, 0)
    kh, kw = kernel
    if ONE_BY_ONE_AS_MATMUL and g == 1 and kernel == [1, 1] and not any(lo + hi):
        # 1x1: a matmul over the (strided) pixels.
        oh = out_size(dim(xt, 1), 1, strides[0], 1)
        ow = out_size(dim(xt, 2), 1, strides[1], 1)
        if strides != [1, 1]:
            xt = extract_slice(xt, [0, 0, 0, 0], [n, oh, ow, c], [1, strides[0], strides[1], 1])
        a = _collapse(xt, [[0, 1, 2], [3]])
        b = _filter(w, elem, [m, c], [1, 0])
        pixels = static_shape(a.type)[0]
        init = _bias_init(bias, elem, [pixels if pixels is not None else dim(a, 0), m])
        prod = linalg.matmul(a, b, outs=[init])
        y = _expand(prod, [[0, 1, 2], [3]], [n, oh, ow, m])
        return transpose(y, NHWC_TO_NCHW)
    xp = pad_dims(xt, [1, 2], lo, hi, 0.0)
    oh = out_size(dim(xp, 1), kh, strides[0], dil[0])
    ow = out_size(dim(xp, 2), kw, strides[1], dil[1])
    if depthwise:
        mult = m // g
        if mult == 1:
            wf = _filter(w, elem, [c, kh, kw], [1, 2, 0])
            init = _bias_init(bias, elem, [n, oh, ow, c])
            y = linalg.depthwise_conv_2d_nhwc_hwc(xp, wf, outs=[init], strides=strides, dilations=dil)
        else:
            wf = _filter(w, elem, [c, mult, kh, kw], [2, 3, 0, 1])
            if bias is not None:
                init = _broadcast(_split_dim(bias, 0, c, mult), [n, oh, ow, c, mult])
            else:
                init = filled([n, oh, ow, c, mult], elem, 0.0)
            y5 = linalg.depthwise_conv_2d_nhwc_hwcm(xp, wf, outs=[init], strides=strides, dilations=dil)
            y = _merge_dims(y5, 3)
        return transpose(y, NHWC_TO_NCHW)
    if g == 1:
        wf = _filter(w, elem, [m, c, kh, kw], [2, 3, 1, 0])
        init = _bias_init(bias, elem, [n, oh, ow, m])
        y = linalg.conv_2d_nhwc_hwcf(xp, wf, outs=[init], strides=strides, dilations=dil)
        return transpose(y, NHWC_TO_NCHW)
    # A few groups: one convolution per group on channel slices, inserted into the output.
    mg = m // g
    # (X's channels static: a dynamic count, checked at run time, cannot be expanded into groups.)
    if GROUPED_POINTWISE_AS_MATMUL and kernel == [1, 1] and strides == [1, 1] and not any(lo + hi) and static_shape(x.type)[1] is not None:
        return transpose(_grouped_pointwise(xt, w, bias, elem, g, cg, mg), NHWC_TO_NCHW)
    out = _bias_init(bias, elem, [n, oh, ow, m])
    wf = _filter(w, elem, [m, cg, kh, kw], [2, 3, 1, 0])  # [kh, kw, cg, m]
    hp, wp = dim(xp, 1), dim(xp, 2)
    for gi in range(g):
        xs = extract_slice(xp, [0, 0, 0, gi * cg], [n, hp, wp, cg])
        wsl = extract_slice(wf, [0, 0, 0, gi * mg], [kh, kw, cg, mg])
        acc = extract_slice(out, [0, 0, 0, gi * mg], [n, oh, ow, mg])
        yg = linalg.conv_2d_nhwc_hwcf(xs, wsl, outs=[acc], strides=strides, dilations=dil)
        out = insert_slice(yg, out, [0, 0, 0, gi * mg])
    return transpose(out, NHWC_TO_NCHW)


def _grouped_pointwise(xt: ir.Value, w: ir.Value, bias: ir.Value | None, elem: ir.Type, g: int, cg: int, mg: int) -> ir.Value:
    """A grouped 1x1 convolution (stride 1, no pads) of the NHWC input `xt` as one
    `linalg.batch_matmul` over the groups: [g, pixels, cg] x [g, cg, mg] -> [g, pixels, mg].

    The pixels are a view [pixels, g, cg] of the input, transposed to put the group first, and
    the product is transposed back to [pixels, g, mg] (the NHWC channels). The CPU target's data
    tiling unpacks the product straight into that layout, packs the constant filter [g, cg, mg]
    at compile time and broadcasts a bias accumulator in the packed layout (`data_tiling.py`).

    Why: the direct convolution plan vectorizes over a group's output channels, and groups of
    ShuffleNet (4 groups of 28, 34, 68 or 136 channels) are not multiples of a vector, so its tiles
    were 2-4 lanes wide (36 s to compile the model). One matmul per group took the packed path,
    but each sliced the constant filter (packed at run time: a slice is not a constant) and
    packed/unpacked its own accumulator: ShuffleNet's grouped 1x1 layers ran 2-3.6x slower than
    onnxruntime's."""
    n, h, wd = dim(xt, 0), dim(xt, 1), dim(xt, 2)
    pixels = _collapse(xt, [[0, 1, 2], [3]])
    px = dim(pixels, 0)
    a = transpose(_expand(pixels, [[0], [1, 2]], [px, g, cg]), (1, 0, 2))  # [g, pixels, cg]
    b = _filter(w, elem, [g, mg, cg], [0, 2, 1])  # [g, cg, mg]
    if bias is None:
        init = filled([g, px, mg], elem, 0.0)
    else:
        per_group = _expand(bias, [[0, 1]], [g, mg])
        init = linalg.broadcast(per_group, outs=[empty([g, px, mg], elem)], dimensions=[1]).results[0]
    prod = linalg.batch_matmul(a, b, outs=[init])
    y = _collapse(transpose(prod, (1, 0, 2)), [[0], [1, 2]])  # [pixels, g * mg]
    return _expand(y, [[0, 1, 2], [3]], [n, h, wd, g * mg])


def _patch_matmul(
    x: ir.Value, w: ir.Value, bias: ir.Value | None, elem: ir.Type, kernel: list[int], m: int, c: int
) -> ir.Value | None:
    """A convolution whose windows tile the input (stride = kernel, no pads/dilation) as a matmul
    of its patches (see the module docstring); None when X's channel or spatial dims are not
    static (a dynamic channel count, checked against `c` at run time, cannot be expanded into
    static dims: `tensor.expand_shape` does not verify).

    Why: the direct plan reduces one input channel per step, which for a patch embedding (3
    channels, 16x16 windows) is 768 short steps per output tile: ViT's 224x224 patch
    embedding ran 6.3 ms on one AVX-512 core, the same product as a packed GEMM 196 x 768 x 384.
    """
    h, wd = static_shape(x.type)[2:4]
    kh, kw = kernel
    if h is None or wd is None or h < kh or wd < kw or static_shape(x.type)[1] is None:
        return None
    n = dim(x, 0)
    oh, ow = h // kh, wd // kw
    if (h, wd) != (oh * kh, ow * kw):  # the rows/columns no window covers are dropped
        x = extract_slice(x, [0, 0, 0, 0], [n, c, oh * kh, ow * kw])
    # [n, c, oh*kh, ow*kw] -> [n, c, oh, kh, ow, kw] -> [n, oh, ow, c, kh, kw] -> [n*oh*ow, c*kh*kw]
    x6 = _expand(x, [[0], [1], [2, 3], [4, 5]], [n, c, oh, kh, ow, kw])
    a = _collapse(transpose(x6, (0, 2, 4, 1, 3, 5)), [[0, 1, 2], [3, 4, 5]])
    b = _filter(w, elem, [m, c * kh * kw], [1, 0])
    rows = static_shape(a.type)[0]
    init = _bias_init(bias, elem, [rows if rows is not None else dim(a, 0), m])
    prod = linalg.matmul(a, b, outs=[init])
    return transpose(_expand(prod, [[0, 1, 2], [3]], [n, oh, ow, m]), NHWC_TO_NCHW)


def _convt_params(node: Node) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]] | str:
    """(kernel, strides, dilations, pads begin, pads end, output sizes) of a ConvTranspose."""
    xs = static_shape(node.onnx_types[0])
    ws = static_shape(node.onnx_types[1])
    k = len(xs) - 2
    kernel = [int(v) for v in (node.attr("kernel_shape") or ws[2:])] if all(v is not None for v in (node.attr("kernel_shape") or ws[2:])) else None
    if kernel is None:
        return "the kernel shape must be static"
    if any(d is None for d in xs[2:]):
        return "dynamic spatial dims are not lowered for ConvTranspose"
    strides = [int(v) for v in (node.attr("strides") or [1] * k)]
    dil = [int(v) for v in (node.attr("dilations") or [1] * k)]
    opad = [int(v) for v in (node.attr("output_padding") or [0] * k)]
    # An output padding of a stride (or dilation) or more is not an offset within the last
    # stride: onnxruntime refuses it, onnx.reference and onnxc computed different results (fuzz
    # seed 302 case 21216: output_padding [1, 2] with strides [3, 2]).
    for i in range(min(k, len(opad), len(strides), len(dil))):
        if not 0 <= opad[i] < max(strides[i], dil[i]):
            return f"output_padding {opad} must be within [0, max(stride, dilation)) on every axis (axis {i}: {opad[i]})"
    auto_pad = node.attr("auto_pad", "NOTSET")
    out_shape = node.attr("output_shape")
    full = [strides[i] * (xs[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(k)]
    if out_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [int(v) for v in out_shape][-k:] if out_shape else [xs[2 + i] * strides[i] for i in range(k)]
        # A negative total (output_shape beyond the full result) pads the output with what no
        # input reaches: the gather below handles negative pads.
        total = [full[i] - target[i] for i in range(k)]
        # SAME_UPPER puts the smaller half first; SAME_LOWER and an explicit output_shape the
        # larger (as the reference does).
        lo = [t // 2 for t in total] if auto_pad == "SAME_UPPER" else [t - t // 2 for t in total]
        hi = [t - a for t, a in zip(total, lo)]
        return kernel, strides, dil, lo, hi, target
    pads = [int(v) for v in (node.attr("pads") or [0] * (2 * k))]
    lo, hi = pads[:k], pads[k:]
    return kernel, strides, dil, lo, hi, [full[i] - lo[i] - hi[i] for i in range(k)]


def _check_convt(node: Node) -> str | None:
    xs = static_shape(node.onnx_types[0])
    ws = static_shape(node.onnx_types[1])
    if len(xs) < 3 or len(xs) != len(ws):
        return "X and W must have the same rank >= 3"
    if ws[1] is None:
        return "the output channels per group of W must be static"
    p = _convt_params(node)
    return p if isinstance(p, str) else None


@lowers("ConvTranspose", check=_check_convt)
def lower_conv_transpose(node: Node) -> list[ir.Value]:
    """ConvTranspose as a gather: out[n, g, m, o] = sum over c, k of x[n, g*cg + c, i] *
    w[g*cg + c, m, k] where o + pad = i * stride + k * dilation (read with `tensor.extract`,
    skipped where the division is inexact or i is out of range)."""
    from mlir.dialects import tensor as tensor_d

    from onnxc.transforms.lowering.common import const_index, const_scalar, index_of

    x, w = node.input(0), node.input(1)
    elem = convert_element(node.in_elem(0))
    acc = accumulator_type(elem)
    r = rank_of(x)
    k = r - 2
    kernel, strides, dil, lo, _hi, outs = _convt_params(node)  # type: ignore[misc]
    g = int(node.attr("group", 1))
    n = dim(x, 0)
    mg = static_shape(w.type)[1]
    c_total = dim(x, 1)
    cg = dim_floordiv(c_total, g)
    out_shape = [n, g, mg] + outs
    if node.has(2):
        b = node.input(2)
        if acc != elem:
            b = convert_tensor(b, elem, acc)
        b_view = expand_unit_dims(_split_dim(b, 0, g, mg), [0] + [3 + i for i in range(k)])
        init = elementwise([b_view], acc, lambda v: v, out_shape=out_shape)
    else:
        init = filled(out_shape, acc, 0.0 if is_float(acc) else 0)
    # Loops: n, g, m, o..., c, k...; the c and k extents come from a shape-only operand.
    L = 3 + k + 1 + k
    shape_op = empty([cg] + kernel, acc)
    red_map = affine_map(L, [3 + k + j for j in range(1 + k)])
    out_map = affine_map(L, list(range(3 + k)))
    iters = ["parallel"] * (3 + k) + ["reduction"] * (1 + k)
    xs_static = static_shape(x.type)

    def body(a: list[ir.Value]) -> list[ir.Value]:
        P = arith.CmpIPredicate
        ok = None
        coords = []
        for i in range(k):
            o = arith.addi(index_of(3 + i), const_index(lo[i]))
            t = arith.subi(o, arith.muli(index_of(4 + k + i), const_index(dil[i])))
            q = arith.divsi(t, const_index(strides[i]))
            exact = arith.cmpi(P.eq, arith.muli(q, const_index(strides[i])), t)
            inb = arith.andi(arith.cmpi(P.sge, t, const_index(0)), arith.cmpi(P.slt, q, const_index(xs_static[2 + i])))
            cond = arith.andi(exact, inb)
            ok = cond if ok is None else arith.andi(ok, cond)
            coords.append(arith.select(cond, q, const_index(0)))
        ch = arith.addi(arith.muli(index_of(1), dim_value(cg)), index_of(3 + k))
        xv = tensor_d.extract(x, [index_of(0), ch] + coords)
        wv = tensor_d.extract(w, [ch, index_of(2)] + [index_of(4 + k + i) for i in range(k)])
        if acc != elem:
            xv, wv = arith.extf(acc, xv), arith.extf(acc, wv)
        zero = const_scalar(0.0 if is_float(acc) else 0, acc)
        prod = arith.mulf(xv, wv) if is_float(acc) else arith.muli(xv, wv)
        prod = arith.select(ok, prod, zero)
        return [arith.addf(a[1], prod) if is_float(acc) else arith.addi(a[1], prod)]

    res = generic([shape_op], [init], [red_map, out_map], iters, body)[0]
    res = _merge_dims(res, 1)
    return [res if acc == elem else convert_tensor(res, acc, elem)]


def _check_col2im(node: Node) -> str | None:
    for i in (1, 2):
        sh = static_shape(node.onnx_types[i])
        if len(sh) != 1 or sh[0] is None:
            return "image_shape and block_shape must be 1-D of static length"
    return None


def _require_col2im_fits(node: Node, x: ir.Value, bsize: Dim, nblocks: list[Dim]) -> None:
    """The input's dims must be (N, C * prod(block_shape), prod(blocks)) for the image, block
    shape, strides, pads and dilations given (the spec's L); refused when static, checked at run
    time otherwise. Why: the gather reads the input at block index up to prod(blocks): Col2Im with
    strides changed to [1, 2] read past an input of fewer blocks and answered (the compile fuzzer;
    onnx.reference refuses)."""
    from onnxc.transforms.lowering.common import LoweringError, const_index, dim_mul, dim_value
    from onnxc.transforms.lowering.runtime_checks import require

    total: Dim = 1
    for b in nblocks:
        total = dim_mul(total, b)
    c, l_ = dim(x, 1), dim(x, 2)
    if isinstance(c, int) and isinstance(bsize, int) and isinstance(l_, int) and isinstance(total, int):
        if c % bsize or l_ != total:
            raise LoweringError(f"{node.describe()}: the input's shape (N, {c}, {l_}) does not hold C * {bsize} rows of {total} blocks")
        return
    fits = arith.andi(arith.cmpi(arith.CmpIPredicate.eq, arith.remui(dim_value(c), dim_value(bsize)), const_index(0)),
                      arith.cmpi(arith.CmpIPredicate.eq, dim_value(l_), dim_value(total)))  # fmt: skip
    require(fits, node.op, "the input of dims ({rows}, {blocks}) does not hold a multiple of {size} rows of {count} blocks",
            [("rows", dim_value(c)), ("blocks", dim_value(l_)), ("size", dim_value(bsize)), ("count", dim_value(total))])  # fmt: skip


@lowers("Col2Im", check=_check_col2im)
def lower_col2im(node: Node) -> list[ir.Value]:
    """Col2Im as a gather: image[n, c, y...] = sum over block offsets b of
    cols[n, c * prod(block) + flat(b), flat(l)] where y + pad = l * stride + b * dilation.
    Image and block shapes may be runtime values (dynamic output dims and loop bounds)."""
    from mlir.dialects import tensor as tensor_d

    from onnxc.transforms.lowering.common import const_index, const_scalar, dim_mul, extract_dims, index_of

    x = node.input(0)

    def dims_of(i: int) -> list[Dim]:
        c = node.const_ints(i)
        return list(c) if c is not None else list(extract_dims(node.input(i), node.in_elem(i)))

    image, block = dims_of(1), dims_of(2)
    k = len(image)
    elem = convert_element(node.in_elem(0))
    dil = [int(v) for v in (node.attr("dilations") or [1] * k)]
    strides = [int(v) for v in (node.attr("strides") or [1] * k)]
    pads = [int(v) for v in (node.attr("pads") or [0] * (2 * k))]
    nblocks = [
        dim_add(dim_floordiv(dim_sub(dim_add(image[i], pads[i] + pads[k + i]), dim_add(dim_mul(block[i], dil[i]), 1 - dil[i])), strides[i]), 1)
        for i in range(k)
    ]
    bsize: Dim = 1
    for b in block:
        bsize = dim_mul(bsize, b)
    n = dim(x, 0)
    c_out = dim_floordiv(dim(x, 1), bsize)
    out_shape = [n, c_out] + list(image)
    _require_col2im_fits(node, x, bsize, nblocks)
    L = 2 + 2 * k
    init = filled(out_shape, elem, 0.0 if is_float(elem) else 0)
    shape_op = empty(list(block), elem)
    red_map = affine_map(L, [2 + k + i for i in range(k)])
    out_map = affine_map(L, list(range(2 + k)))
    iters = ["parallel"] * (2 + k) + ["reduction"] * k

    def body(a: list[ir.Value]) -> list[ir.Value]:
        P_ = arith.CmpIPredicate
        ok = None
        lflat = const_index(0)
        bflat = const_index(0)
        for i in range(k):
            t = arith.subi(arith.addi(index_of(2 + i), const_index(pads[i])), arith.muli(index_of(2 + k + i), const_index(dil[i])))
            q = arith.divsi(t, const_index(strides[i]))
            in_range = arith.andi(arith.cmpi(P_.sge, t, const_index(0)), arith.cmpi(P_.slt, q, dim_value(nblocks[i])))
            cond = arith.andi(arith.cmpi(P_.eq, arith.muli(q, const_index(strides[i])), t), in_range)
            ok = cond if ok is None else arith.andi(ok, cond)
            lflat = arith.addi(arith.muli(lflat, dim_value(nblocks[i])), arith.select(cond, q, const_index(0)))
            bflat = arith.addi(arith.muli(bflat, dim_value(block[i])), index_of(2 + k + i))
        ch = arith.addi(arith.muli(index_of(1), dim_value(bsize)), bflat)
        v = tensor_d.extract(x, [index_of(0), ch, lflat])
        zero = const_scalar(0.0 if is_float(elem) else 0, elem)
        v = arith.select(ok, v, zero)
        return [arith.addf(a[1], v) if is_float(elem) else arith.addi(a[1], v)]

    return generic([shape_op], [init], [red_map, out_map], iters, body)
