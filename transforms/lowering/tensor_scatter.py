"""TensorScatter (opset 24): writes a KV-cache update into the past cache along `axis`, at
per-batch write positions, in "linear" or "circular" mode.

What: one `linalg.generic` over the cache's shape (a gather, rather than a scatter of the
update): at cache position p on `axis` in batch row b, s = p - write_indices[b] (circular:
taken modulo the cache length, into [0, max)); where 0 <= s < update length the element comes
from `update` at s, else from the past cache. Why a gather: every output element is written
exactly once, so this is a plain parallel map that needs no scatter loop, and reads outside the
update are clamped (the clamped read is discarded by the select). An update of length 0 known
only at run time is guarded by an `scf.if` returning the past cache (there is nothing to read).
Linear mode with positions past the cache end leaves those cache rows unchanged (the reference
fails there; the spec leaves it undefined).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf, tensor

from onnxc.transforms.lowering.common import (
    Node,
    const_index,
    convert_element,
    dim,
    elem_of,
    empty,
    generic,
    identity_map,
    index_of,
    lowers,
    normalize_axis,
    rank_of,
    shape_of,
    static_shape,
    to_index,
)

P = arith.CmpIPredicate


def _check_tensor_scatter(node: Node) -> str | None:
    """Ranks must be known and equal; the mode one of the two the spec defines."""
    mode = node.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("linear", "circular"):
        return f"mode '{mode}' is neither 'linear' nor 'circular'"
    ts = [node.onnx_types[i] for i in (0, 1)]
    if not all(isinstance(t, ir.RankedTensorType) for t in ts):
        return "past_cache and update must be ranked"
    r = rank_of(ts[0])
    if rank_of(ts[1]) != r or r < 2:
        return "past_cache and update must have the same rank (at least 2)"
    axis = normalize_axis(int(node.attr("axis", -2)), r)
    if not 0 < axis < r:
        return f"axis {node.attr('axis', -2)} must not be the batch axis"
    cs, us = static_shape(ts[0]), static_shape(ts[1])
    for i, (c, u) in enumerate(zip(cs, us)):
        if c is not None and u is not None and (c < u if i == axis else c != u):
            return f"update shape {us} does not fit past_cache shape {cs} on dim {i}"
    return None


@lowers("TensorScatter", check=_check_tensor_scatter)
def lower_tensor_scatter(node: Node) -> list[ir.Value]:
    """TensorScatter (see the module docstring)."""
    past, upd = node.input(0), node.input(1)
    r = rank_of(past)
    axis = normalize_axis(int(node.attr("axis", -2)), r)
    mode = node.attr("mode", "linear")
    circular = (mode.decode() if isinstance(mode, bytes) else str(mode)) == "circular"
    idx = node.input(2) if node.has(2) else None
    idx_elem = node.in_elem(2) if node.has(2) else None
    max_len = dim(past, axis)
    seq = dim(upd, axis)
    elem = convert_element(elem_of(past.type))

    def build() -> ir.Value:
        def body(a: list[ir.Value]) -> list[ir.Value]:
            loops = [index_of(i) for i in range(r)]
            pos = loops[axis]
            w = const_index(0) if idx is None else to_index(tensor.extract(idx, [loops[0]]), idx_elem)
            s = arith.subi(pos, w)
            m = max_len if isinstance(max_len, ir.Value) else const_index(max_len)
            if circular:
                s = arith.remsi(arith.addi(arith.remsi(s, m), m), m)
            n = seq if isinstance(seq, ir.Value) else const_index(seq)
            inside = arith.andi(arith.cmpi(P.sge, s, const_index(0)), arith.cmpi(P.slt, s, n))
            safe = arith.select(inside, s, const_index(0))
            u = tensor.extract(upd, [safe if i == axis else loops[i] for i in range(r)])
            return [arith.select(inside, u, a[0])]

        return generic([past], [empty(shape_of(past), elem)], [identity_map(r)] * 2, ["parallel"] * r, body)[0]

    if isinstance(seq, int):
        return [past if seq == 0 else build()]
    nonempty = arith.cmpi(P.sgt, seq, const_index(0))
    op = scf.IfOp(nonempty, [past.type], has_else=True)
    with ir.InsertionPoint(op.then_block):
        scf.YieldOp([build()])
    with ir.InsertionPoint(op.else_block):
        scf.YieldOp([past])
    return [op.results[0]]
