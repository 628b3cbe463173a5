"""TensorScatter (opset 24): writes a KV-cache update into the past cache along `axis`, at
per-batch write positions, in "linear" or "circular" mode.

What: one `linalg.generic` over the cache's shape (a gather, rather than a scatter of the
update): at cache position p on `axis` in batch row b, s = p - write_indices[b] (circular:
taken modulo the cache length, into [0, max)); where 0 <= s < update length the element comes
from `update` at s, else from the past cache. Why a gather: every output element is written
exactly once, so this is a plain parallel map that needs no scatter loop, and reads outside the
update are clamped (the clamped read is discarded by the select). An update of length 0 known
only at run time is guarded by an `scf.if` returning the past cache (there is nothing to read).

Run-time checks (`runtime_checks.require`): dims known only at run time must fit (the update's
dims equal the cache's except on `axis`, where it is at most as long; `write_indices` has one
entry per batch row: the gather reads `write_indices[b]` and the update at every cache position
otherwise past their ends), and in linear mode every write index must lie in
[0, max_sequence_length - sequence_length]: past the end `onnx.reference` fails (an IndexError),
and a negative index it wraps numpy's way while the spec's pseudocode has no such index, so
either is invalid input refused at run time, not answered. Circular mode takes any index modulo
the cache length, as the spec says.
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
    dim_value,
    is_unsigned,
    shape_of,
    static_shape,
    to_index,
)
from onnxc.transforms.lowering.runtime_checks import index_range_ok, require

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
    if node.has(2):
        it = node.onnx_types[2]
        if not isinstance(it, ir.RankedTensorType) or rank_of(it) != 1:
            return "write_indices must be a 1-D tensor (one index per batch row)"
        b, n = static_shape(it)[0], cs[0]
        if b is not None and n is not None and b != n:
            return f"write_indices has {b} entries, the batch {n}"
    return None


def _require_valid(node: Node, past: ir.Value, upd: ir.Value, idx: ir.Value | None, idx_elem: ir.Type | None, axis: int, circular: bool) -> None:
    """The run-time checks of the module docstring (none where the static shapes decide)."""
    ps, us = shape_of(past), shape_of(upd)
    fit: ir.Value | None = None
    for i, (c, u) in enumerate(zip(ps, us)):
        if isinstance(c, int) and isinstance(u, int):
            continue  # checked before lowering (_check_tensor_scatter)
        ok = arith.cmpi(P.sle if i == axis else P.eq, dim_value(u), dim_value(c))
        fit = ok if fit is None else arith.andi(fit, ok)
    if fit is not None:
        require(fit, node.op, f"the update's shape {{update}} does not fit the past cache's shape {{cache}} (axis {axis})",
                [("update", [dim_value(d) for d in us]), ("cache", [dim_value(d) for d in ps])])  # fmt: skip
    if idx is None:
        return
    batch, entries = ps[0], dim(idx, 0)
    if not (isinstance(batch, int) and isinstance(entries, int)):
        require(arith.cmpi(P.eq, dim_value(entries), dim_value(batch)), node.op, "write_indices has {entries} entries, the batch {batch}",
                [("entries", dim_value(entries)), ("batch", dim_value(batch))])  # fmt: skip
    if circular:
        return
    # Linear: 0 <= write_indices[b] <= max_sequence_length - sequence_length, i.e. [0, room + 1).
    room = arith.subi(dim_value(ps[axis]), dim_value(us[axis]))
    ok, bad = index_range_ok(idx, is_unsigned(idx_elem), [arith.addi(room, const_index(1))], negative=False)
    require(ok, node.op, "write index {index} is outside [0, {room}] (linear mode: the update of {length} must fit the cache of {size})",
            [("index", bad), ("room", room), ("length", dim_value(us[axis])), ("size", dim_value(ps[axis]))])  # fmt: skip


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
    _require_valid(node, past, upd, idx, idx_elem, axis, circular)

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
