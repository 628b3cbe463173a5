"""MatMul and Gemm -> `linalg.matmul` / `linalg.batch_matmul`, or a contraction `linalg.generic`
where numpy's rules need more (1-D operands, broadcast batch dims).

Accumulation: the result type's own arithmetic for f32/f64/ints; f16 and bf16 accumulate in f32
and round once at the end (what onnxruntime's kernels do, and closer to the reference's
float math than a f16 running sum).
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
    broadcast_plan,
    broadcast_shapes,
    broadcast_to,
    convert_element,
    convert_tensor,
    dim,
    dim_value,
    elem_of,
    elementwise,
    empty,
    filled,
    generic,
    is_float,
    lowers,
    rank_of,
    reshape,
    static_shape,
    const_scalar,
    tensor_type,
)


def _mul_add(a: ir.Value, b: ir.Value, acc: ir.Value, onnx_elem: ir.Type, acc_elem: ir.Type) -> ir.Value:
    if is_float(acc_elem):
        if a.type != acc_elem:
            a = arith.extf(acc_elem, a)
            b = arith.extf(acc_elem, b)
        return arith.addf(acc, arith.mulf(a, b))
    return arith.addi(acc, arith.muli(a, b))


def _broadcast_batch(a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    """Both operands broadcast to their common batch shape when a dynamic batch dim may or may
    not be 1 at run time (e.g. `p` against `r`: (2, 1) x (1, 3) must give (2, 3)); None when
    the affine reads of `matmul_values` are right as they are.

    Why copies: the contraction's indexing maps read a batch dim either at the loop index or at
    0, fixed at compile time; reading a dynamic dim at the loop index assumed it was not 1 and
    broadcast the wrong operand (the issue's (2,1,4,8) instead of (2,3,4,8)). The copies are
    `broadcast_plan`'s run-time reads, made once per operand, and only for this ambiguous case.
    """
    ra, rb = rank_of(a), rank_of(b)
    na, nb_ = max(ra - 2, 0), max(rb - 2, 0)
    plan = broadcast_plan([a, b], ranks=[na, nb_])
    if not plan.ambiguous:
        return None
    batch = list(plan.out)
    a = broadcast_to(a, batch + [dim(a, ra - 2), dim(a, ra - 1)]) if ra >= 2 else a
    b = broadcast_to(b, batch + [dim(b, rb - 2), dim(b, rb - 1)]) if rb >= 2 else b
    return a, b


def _folded_batch_matmul(a: ir.Value, b: ir.Value, onnx_elem: ir.Type) -> ir.Value:
    """`(batch..., m, k) x (k, n)` as one `(batch*m, k) x (k, n)` matmul, reshaped back.

    Why: the weight is shared by every batch row, so the batch dims are just more rows of M. A
    transformer's projections and FFNs are this shape ([1, seq, hidden] x [hidden, ffn]); as a
    `linalg.generic` over (batch..., m, n, k) they missed the named-matmul path and with it the
    CPU target's data tiling (BERT-base's FFN block ran 80x slower than onnxruntime). The
    collapse and expand are free (`tensor.collapse_shape`/`expand_shape` of contiguous dims).
    """
    from mlir.dialects import tensor

    ra = rank_of(a)
    sa = static_shape(a.type)
    rows = sa[:-1]
    m_total: int | None = None if None in rows else int(np.prod(rows))
    elem_a = elem_of(a.type)
    i64 = ir.IntegerType.get_signless(64)
    fold = ir.ArrayAttr.get(
        [ir.ArrayAttr.get([ir.IntegerAttr.get(i64, j) for j in range(ra - 1)]), ir.ArrayAttr.get([ir.IntegerAttr.get(i64, ra - 1)])]
    )
    a2 = tensor.collapse_shape(tensor_type([m_total, sa[-1]], elem_a), a, fold)
    out2 = matmul_values(a2, b, onnx_elem)
    out_shape: list[Dim] = [dim(a, j) for j in range(ra - 1)] + [dim(out2, 1)]
    static = [d if isinstance(d, int) else ir.ShapedType.get_dynamic_size() for d in out_shape]
    dynamic = [d for d in out_shape if not isinstance(d, int)]
    if len(dynamic) > 1:
        # expand_shape allows one dynamic size per group (a memref lowering asserts on more, which
        # kills the process): dynamic batch and sequence together take tensor.reshape.
        return reshape(out2, out_shape)
    return tensor.expand_shape(tensor_type(out_shape, elem_of(out2.type)), out2, fold, dynamic, static)


def _same_batch(a: ir.Value, b: ir.Value) -> bool:
    """Whether two operands of one rank have provably equal batch dims (all but the last two):
    equal static sizes, or dynamic sizes with one source (`dim_sources`: q and k of an attention
    whose batch and sequence come from one input). At most one of them dynamic: the collapsed
    batch group is expanded back with `tensor.expand_shape`, which takes one dynamic size per
    group (see `_folded_batch_matmul`)."""
    from onnxc.transforms.lowering.dim_sources import same_size

    sa, sb = static_shape(a.type), static_shape(b.type)
    if len(sa) != len(sb) or len(sa) < 3 or sum(d is None for d in sa[:-2]) > 1:
        return False
    for j, (x, y) in enumerate(zip(sa[:-2], sb[:-2])):
        if x is None and y is None:
            if not same_size((a, j), (b, j)):
                return False
        elif x is None or y is None or x != y:
            return False
    return True


def _named_batch_matmul(a: ir.Value, b: ir.Value, onnx_elem: ir.Type) -> ir.Value:
    """`linalg.batch_matmul` of rank-3 operands whose batch dims are equal (the caller's proof)."""
    acc = accumulator_type(convert_element(onnx_elem))
    init = filled([dim(a, 0), dim(a, 1), dim(b, 2)], acc, 0)
    out = linalg.batch_matmul(a, b, outs=[init])
    return out if acc == convert_element(onnx_elem) else convert_tensor(out, acc, convert_element(onnx_elem))


def _collapsed_batch_matmul(a: ir.Value, b: ir.Value, onnx_elem: ir.Type) -> ir.Value:
    """`(b1, ..., bj, m, k) x (b1, ..., bj, k, n)` with equal batch dims (`_same_batch`) as one
    `linalg.batch_matmul` over `b1*...*bj`, reshaped back.

    Why: attention's products are rank 4 (batch, heads, seq, head_dim). As a `linalg.generic`
    over (b1, b2, m, n, k) they took the CPU target's general contraction plan, which handles a
    sequence length that its register tile does not divide (ViT's 197 tokens) with scalar
    tails: 6 x 197 x 197 x 64 ran at 4 GFLOP/s (7.6 ms; onnxruntime 0.3 ms) where the named
    batch matmul of the same shape took 0.5 ms. Collapsing contiguous batch dims is free. With a
    dynamic batch or sequence (a model exported with dynamic axes) the same holds: the generic
    also kept the CPU target's data tiling (batch_mmt4d) away.
    """
    from mlir.dialects import tensor

    ra = rank_of(a)
    batch = [dim(a, j) for j in range(ra - 2)]
    total = int(np.prod(batch)) if all(isinstance(d, int) for d in batch) else None  # None: dynamic
    i64 = ir.IntegerType.get_signless(64)

    def groups() -> ir.ArrayAttr:
        lead = ir.ArrayAttr.get([ir.IntegerAttr.get(i64, j) for j in range(ra - 2)])
        return ir.ArrayAttr.get([lead] + [ir.ArrayAttr.get([ir.IntegerAttr.get(i64, j)]) for j in (ra - 2, ra - 1)])

    def collapse(v: ir.Value) -> ir.Value:
        shape = static_shape(v.type)
        return tensor.collapse_shape(tensor_type([total] + shape[-2:], elem_of(v.type)), v, groups())

    out3 = _named_batch_matmul(collapse(a), collapse(b), onnx_elem)
    # The batch group has at most one dynamic size (`_same_batch`), the others one dim each: the
    # one dynamic size per group expand_shape takes.
    out_shape: list[Dim] = batch + [dim(out3, 1), dim(out3, 2)]
    dynamic = [d for d in out_shape if not isinstance(d, int)]
    static = [d if isinstance(d, int) else ir.ShapedType.get_dynamic_size() for d in out_shape]
    return tensor.expand_shape(tensor_type(out_shape, elem_of(out3.type)), out3, groups(), dynamic, static)


def _require_same_contraction(a: ir.Value, b: ir.Value) -> None:
    """A run-time error when the contraction sizes (a's last dim, b's second to last, or its only
    one) differ and one of them is dynamic (static ones: `_check_matmul`). Why: the product loops
    over one operand's size and read the other at it: MatMul of (3, 5) and (9, 3) with symbolic
    dims answered a (3, 3) result (and read past the shorter operand when the sizes were the
    other way round; the compile fuzzer, Gemm fed a B of another height)."""
    from onnxc.transforms.lowering.runtime_checks import require

    ra, rb = rank_of(a), rank_of(b)
    ka, kb = dim(a, ra - 1), dim(b, rb - 2 if rb >= 2 else 0)
    if isinstance(ka, int) and isinstance(kb, int):
        return
    va, vb = dim_value(ka), dim_value(kb)
    require(arith.cmpi(arith.CmpIPredicate.eq, va, vb), None, "the contraction sizes {a} and {b} differ", [("a", va), ("b", vb)])


def matmul_values(a: ir.Value, b: ir.Value, onnx_elem: ir.Type, _batch_planned: bool = False) -> ir.Value:
    """numpy.matmul of two lowered tensors (any ranks >= 1, broadcast batch dims)."""
    elem = convert_element(onnx_elem)
    acc = accumulator_type(elem)
    ra, rb = rank_of(a), rank_of(b)
    sa, sb = static_shape(a.type), static_shape(b.type)
    if not _batch_planned:
        _require_same_contraction(a, b)
    if not _batch_planned and (None in sa[:-2] or None in sb[:-2]):
        copies = _broadcast_batch(a, b)
        if copies is not None:
            return matmul_values(copies[0], copies[1], onnx_elem, _batch_planned=True)
    if ra >= 3 and rb == 2:
        return _folded_batch_matmul(a, b, onnx_elem)
    if ra == rb >= 4 and _same_batch(a, b):
        return _collapsed_batch_matmul(a, b, onnx_elem)
    if ra == rb == 3 and _same_batch(a, b):
        return _named_batch_matmul(a, b, onnx_elem)
    if ra == 2 and rb == 2:
        # The named op for the plain case.
        init = filled([dim(a, 0), dim(b, 1)], acc, 0)
        out = linalg.matmul(a, b, outs=[init])
        return out if acc == elem else convert_tensor(out, acc, elem)
    batch_a = sa[:-2] if ra >= 2 else []
    batch_b = sb[:-2] if rb >= 2 else []
    batch = broadcast_shapes([batch_a, batch_b])
    assert not isinstance(batch, str)
    nb = len(batch)
    # Loops: batch..., [m], [n], k.
    has_m, has_n = ra >= 2, rb >= 2
    loops = nb + int(has_m) + int(has_n) + 1
    m_d = nb if has_m else None
    n_d = nb + int(has_m) if has_n else None
    k_d = loops - 1
    out_shape: list[Dim] = []
    for j, d in enumerate(batch):
        if d is not None:
            out_shape.append(d)
            continue
        # Dynamic batch dim: from whichever operand has it dynamic.
        ja = j - (nb - len(batch_a))
        if ja >= 0 and sa[ja] is None:
            out_shape.append(dim(a, ja))
        else:
            out_shape.append(dim(b, j - (nb - len(batch_b))))
    if has_m:
        out_shape.append(dim(a, ra - 2))
    if has_n:
        out_shape.append(dim(b, rb - 1))

    def batch_exprs(bshape: list[int | None]) -> list[int | str]:
        off = nb - len(bshape)
        return ["0" if d == 1 and batch[j + off] != 1 else j + off for j, d in enumerate(bshape)]

    a_map = affine_map(loops, batch_exprs(batch_a) + ([m_d] if has_m else []) + [k_d])
    b_map = affine_map(loops, batch_exprs(batch_b) + [k_d] + ([n_d] if has_n else []))
    o_map = affine_map(loops, list(range(nb)) + ([m_d] if has_m else []) + ([n_d] if has_n else []))
    init = filled(out_shape, acc, 0)
    iters = ["parallel"] * (loops - 1) + ["reduction"]
    out = generic([a, b], [init], [a_map, b_map, o_map], iters, lambda x: [_mul_add(x[0], x[1], x[2], onnx_elem, acc)])[0]
    return out if acc == elem else convert_tensor(out, acc, elem)


def _check_matmul(node: Node) -> str | None:
    sa, sb = static_shape(node.onnx_types[0]), static_shape(node.onnx_types[1])
    if not sa or not sb:
        return "MatMul of a rank-0 tensor"
    ka = sa[-1]
    kb = sb[-2] if len(sb) >= 2 else sb[0]
    if ka is not None and kb is not None and ka != kb:
        return f"contraction sizes differ ({ka} vs {kb})"
    res = broadcast_shapes([sa[:-2], sb[:-2]])
    return res if isinstance(res, str) else None


@lowers("MatMul", check=_check_matmul)
def lower_matmul(node: Node) -> list[ir.Value]:
    """MatMul with numpy semantics (1-D promotion, batch broadcasting)."""
    return [matmul_values(node.input(0), node.input(1), node.in_elem(0))]


def _check_gemm(node: Node) -> str | None:
    for i in (0, 1):
        if len(static_shape(node.onnx_types[i])) != 2:
            return f"input {i} must be 2-D"
    if node.has(2) and len(static_shape(node.onnx_types[2])) > 2:
        return "C must have rank <= 2"
    return None


def _transpose2d(v: ir.Value) -> ir.Value:
    init = empty([dim(v, 1), dim(v, 0)], elem_of(v.type))
    return linalg.transpose(v, outs=[init], permutation=[1, 0]).results[0]


@lowers("Gemm", check=_check_gemm)
def lower_gemm(node: Node) -> list[ir.Value]:
    """Gemm: alpha * A' B' + beta * C (transposes as `linalg.transpose`, product as
    `linalg.matmul`, the epilogue as one broadcasting generic)."""
    onnx_elem = node.in_elem(0)
    elem = convert_element(onnx_elem)
    a, b = node.input(0), node.input(1)
    if int(node.attr("transA", 0)):
        a = _transpose2d(a)
    if int(node.attr("transB", 0)):
        b = _transpose2d(b)
    y = matmul_values(a, b, onnx_elem)
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    fl = is_float(elem)

    def scale(v: ir.Value, k: float) -> ir.Value:
        if k == 1.0:
            return v
        return arith.mulf(v, const_scalar(k, elem)) if fl else arith.muli(v, const_scalar(int(k), elem))

    add = arith.addf if fl else arith.addi
    if node.has(2) and beta != 0.0:
        c = node.input(2)
        y = elementwise([y, c], elem, lambda p, q: add(scale(p, alpha), scale(q, beta)), out_shape=[dim(y, 0), dim(y, 1)])
    elif alpha != 1.0:
        y = elementwise([y], elem, lambda p: scale(p, alpha))
    return [y]
