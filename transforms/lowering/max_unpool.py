"""MaxUnpool (opset 22): scatter pooled values back to the positions MaxPool's indices name.

What: the unpooled shape is inferred from X ((in - 1) * stride - pads + kernel per spatial dim);
a zero buffer of that many elements receives X's elements at their flat indices (an `scf.for`
over X's elements with `tensor.insert`: a scatter, so a loop rather than a parallel map), is
reshaped to the inferred shape, and, when `output_shape` is given, placed at the origin of a
zero tensor of that shape (the reference does the same; the spec calls it the padded output).
Negative indices count from the end, as in the reference's numpy indexing; an index outside
the buffer is dropped rather than written out of bounds (the reference would fail there).
Why a loop: indices may repeat (overlapping windows) and the reference's order (the last write
wins) must be kept, which a serial loop does by construction.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf, tensor

from onnxc.transforms.lowering.runtime_checks import require, require_indices
from onnxc.transforms.lowering.common import (
    Dim,
    Node,
    const_index,
    convert_element,
    dim_add,
    dim_mul,
    dim_sub,
    dim_value,
    elem_of,
    extract_dims,
    filled,
    insert_slice,
    is_unsigned,
    lowers,
    rank_of,
    reshape,
    shape_of,
    static_shape,
    to_index,
)

P = arith.CmpIPredicate


def _check_max_unpool(node: Node) -> str | None:
    """Ranked X and indices of equal rank, a kernel for every spatial dim, a static-length
    output_shape when given."""
    xt, it = node.onnx_types[0], node.onnx_types[1]
    if not isinstance(xt, ir.RankedTensorType) or not isinstance(it, ir.RankedTensorType):
        return "X and I must be ranked"
    r = rank_of(xt)
    if r < 3 or rank_of(it) != r:
        return "X and I must have the same rank, at least 3"
    kernel = node.attr("kernel_shape")
    if kernel is None or len(kernel) != r - 2:
        return "kernel_shape must name every spatial dim"
    pads = node.attr("pads")
    strides = node.attr("strides")
    if pads is not None and len(pads) != 2 * (r - 2) or strides is not None and len(strides) != r - 2:
        return "pads/strides do not match the spatial rank"
    if node.has(2):
        s = static_shape(node.onnx_types[2])
        if s != [r]:
            return f"output_shape must be a 1-D tensor of {r} elements"
    return None


@lowers("MaxUnpool", check=_check_max_unpool)
def lower_max_unpool(node: Node) -> list[ir.Value]:
    """MaxUnpool (see the module docstring)."""
    x, ind = node.input(0), node.input(1)
    r = rank_of(x)
    ns = r - 2
    kernel = [int(k) for k in node.attr("kernel_shape")]
    pads = [int(p) for p in (node.attr("pads") or [0] * (2 * ns))]
    strides = [int(s) for s in (node.attr("strides") or [1] * ns)]
    elem = convert_element(elem_of(x.type))
    xs = shape_of(x)
    inferred: list[Dim] = xs[:2]
    for d in range(ns):
        grown = dim_mul(dim_sub(xs[d + 2], 1), strides[d])
        inferred.append(dim_add(dim_sub(grown, pads[d] + pads[ns + d]), kernel[d]))
    total: Dim = 1
    for d in inferred:
        total = dim_mul(total, d)
    n_in: Dim = 1
    for d in xs:
        n_in = dim_mul(n_in, d)

    flat_x = reshape(x, [n_in])
    flat_i = reshape(ind, [n_in])
    # An index outside the output is invalid (onnx.reference raises); the loop below skips it
    # (memory-safe), the caller gets a run-time error (runtime_checks.py).
    require_indices(node.op, flat_i, is_unsigned(node.in_elem(1)), [dim_value(total)], 0, [dim_value(d) for d in inferred])
    buf0 = filled([total], elem, 0.0 if isinstance(elem, ir.FloatType) else 0)
    total_v = dim_value(total)
    zero = const_index(0)
    loop = scf.ForOp(zero, dim_value(n_in), const_index(1), [buf0])
    with ir.InsertionPoint(loop.body):
        e = loop.induction_variable
        (buf,) = list(loop.inner_iter_args)
        at = to_index(tensor.extract(flat_i, [e]), node.in_elem(1))
        at = arith.select(arith.cmpi(P.slt, at, zero), arith.addi(at, total_v), at)
        inside = arith.andi(arith.cmpi(P.sge, at, zero), arith.cmpi(P.slt, at, total_v))
        op = scf.IfOp(inside, [buf.type], has_else=True)
        with ir.InsertionPoint(op.then_block):
            scf.YieldOp([tensor.insert(tensor.extract(flat_x, [e]), buf, [at])])
        with ir.InsertionPoint(op.else_block):
            scf.YieldOp([buf])
        scf.YieldOp([op.results[0]])
    y = reshape(loop.results[0], inferred)
    if not node.has(2):
        return [y]
    out_shape: list[Dim] = list(extract_dims(node.input(2), node.in_elem(2)))
    # The given shape must hold the inferred one (the reference's slice assignment needs it);
    # a smaller one is clamped so the insert never writes out of bounds.
    fits = [arith.cmpi(P.sge, o, dim_value(i)) for o, i in zip(out_shape, inferred)]
    ok = fits[0]
    for f in fits[1:]:
        ok = arith.andi(ok, f)
    require(ok, node.op, "the run-time output_shape {shape} is smaller than the unpooled {inferred}",
            [("shape", out_shape), ("inferred", [dim_value(i) for i in inferred])])  # fmt: skip
    out_shape = [arith.maxsi(o, dim_value(i)) for o, i in zip(out_shape, inferred)]
    return [insert_slice(y, filled(out_shape, elem, 0.0 if isinstance(elem, ir.FloatType) else 0), [0] * r)]
