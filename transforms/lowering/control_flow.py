"""Control flow: If -> `scf.if`, Loop -> `scf.while`.

Subgraph bodies are lowered by the driver into the new regions (`Lowering.lower_block`), with
values of enclosing scopes already in the value map. Region results need one type per result
across branches and iterations, so they take the op's declared (converted) result types, and
each yielded value is `tensor.cast` to it; the pre-check therefore asks for ranked declared
result types. Loop carries (iteration number, condition, loop-carried values) through
`scf.while`; scan outputs (results concatenated across iterations) are not lowered yet.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf, tensor

from onnxc.dialect.builder import SUBGRAPH_TERMINATOR
from onnxc.transforms.lowering.common import (
    LoweringError,
    Node,
    cast_to_type,
    collapse_unit_dims,
    compatible,
    const_index,
    const_scalar,
    convert_type,
    dim,
    elem_of,
    empty,
    expand_unit_dims,
    extract_slice,
    insert_slice,
    normalize_axis,
    rank_of,
    shape_of,
    tensor_type,
    is_ranked,
    lowers,
    static_shape,
)


def _yield_cast(values: list[ir.Value | None], types: list[ir.Type], what: str) -> list[ir.Value]:
    out = []
    for v, t in zip(values, types):
        if v is None:
            raise LoweringError(f"{what} yields an omitted value")
        if not compatible(v.type, t):
            raise LoweringError(f"{what} yields {v.type} where {t} is declared")
        out.append(cast_to_type(v, t))
    return out


def _check_ranked_results(node: Node) -> str | None:
    for i, t in enumerate(node.onnx_result_types):
        if not is_ranked(t):
            return f"result {i} has no ranked type ({t}); run onnx-shape-inference first"
    return None


@lowers("If")
def lower_if(node: Node) -> list[ir.Value]:
    """If -> `scf.if` on the scalar condition, each branch lowered into its region. A result
    declared unranked takes the join of the two branches' lowered types (same rank; dims that
    differ become dynamic): the branches are lowered first into a result-less `scf.if`, then
    moved into the final one."""
    cond = _scalar(node.input(0))
    n_res = len(node.op.results)
    # Regions are in sorted attribute-name order: else_branch, then_branch.
    else_region, then_region = node.op.regions[0], node.op.regions[1]
    tmp = scf.IfOp(cond, [], has_else=True)
    then_vals = node.lowering.lower_block(then_region.blocks[0], tmp.then_block, SUBGRAPH_TERMINATOR)
    else_vals = node.lowering.lower_block(else_region.blocks[0], tmp.else_block, SUBGRAPH_TERMINATOR)
    types = []
    for i in range(n_res):
        t = node.result_type(i)
        if not is_ranked(t):
            a, b = then_vals[i], else_vals[i]
            if a is None or b is None:
                raise node.fail(f"a branch yields an omitted value for result {i}")
            sa, sb = static_shape(a.type), static_shape(b.type)
            if len(sa) != len(sb):
                raise node.fail(f"the branches yield ranks {len(sa)} and {len(sb)} for result {i}; dynamic ranks are not lowered")
            t = tensor_type([x if x == y else None for x, y in zip(sa, sb)], elem_of(a.type))
        types.append(t)
    op = scf.IfOp(cond, types, has_else=True)
    for src, dst, vals, what in ((tmp.then_block, op.then_block, then_vals, "then_branch"), (tmp.else_block, op.else_block, else_vals, "else_branch")):
        with ir.InsertionPoint(dst):
            anchor = const_index(0).owner
        for inner in list(src.operations):
            inner.operation.move_before(anchor)
        with ir.InsertionPoint(dst):
            scf.YieldOp(_yield_cast(vals, types, f"If {what}"))
        anchor.erase()
    tmp.operation.erase()
    return list(op.results)


def _check_loop(node: Node) -> str | None:
    n_carried = len(node.op.operands) - 2
    if len(node.op.results) > n_carried:
        if not node.has(0):
            return "scan outputs need the trip count M (the buffers are sized by it)"
        for k in range(n_carried, len(node.op.results)):
            if _scan_elem_shape(node, k) is None:
                return f"the element shape of scan output {k - n_carried} must be static"
    for i in (0, 1):
        if node.has(i) and static_shape(node.onnx_types[i]) not in ([], [1]):
            return f"input {i} must be a scalar"
    return None


@lowers("Loop", check=_check_loop)
def lower_loop(node: Node) -> list[ir.Value]:
    """Loop -> `scf.while` over (iteration, condition, carried values...)."""
    i64 = ir.IntegerType.get_signless(64)
    i1 = ir.IntegerType.get_signless(1)

    max_trip = _scalar(node.input(0)) if node.has(0) else None
    cond0 = _scalar(node.input(1)) if node.has(1) else const_scalar(1, i1)
    n_carried = len(node.op.operands) - 2
    n_scan = len(node.op.results) - n_carried
    # A carried value keeps its declared type; an unranked one takes its initial value's rank
    # with every dim dynamic (the body may change sizes between iterations).
    carried_types = []
    for i in range(n_carried):
        t = node.result_type(i)
        if not is_ranked(t):
            init = node.inputs[2 + i]
            if init is None:
                raise node.fail(f"loop-carried value {i} has no initial value")
            t = tensor_type([None] * len(static_shape(init.type)), elem_of(init.type))
        carried_types.append(t)
    # Scan outputs: buffers of M rows filled one row per iteration, cut to the count at the end.
    buffers = []
    if n_scan:
        assert max_trip is not None
        rows = arith.index_cast(ir.IndexType.get(), arith.maxsi(max_trip, const_scalar(0, i64)))
        for k in range(n_carried, n_carried + n_scan):
            eshape = _scan_elem_shape(node, k)
            assert eshape is not None
            buffers.append(empty([rows] + eshape, elem_of(node.result_type(k))))
    inits = [const_scalar(0, i64), cond0] + _yield_cast(list(node.inputs[2:]), carried_types, "Loop initial values") + buffers
    types = [i64, i1] + carried_types + [b.type for b in buffers]
    op = scf.WhileOp(types, inits)
    before = op.before.blocks.append(*types)
    after = op.after.blocks.append(*types)
    with ir.InsertionPoint(before):
        it, c = before.arguments[0], before.arguments[1]
        go = c
        if max_trip is not None:
            go = arith.andi(go, arith.cmpi(arith.CmpIPredicate.slt, it, max_trip))
        scf.ConditionOp(go, list(before.arguments))
    body = node.op.regions[0].blocks[0]
    with ir.InsertionPoint(after):
        it_t = tensor.from_elements(ir.RankedTensorType.get([], i64), [after.arguments[0]])
        c_t = tensor.from_elements(ir.RankedTensorType.get([], i1), [after.arguments[1]])
    lw = node.lowering
    args = list(body.arguments)
    lw.bind(args[0], cast_to_type_in(after, it_t, args[0].type))
    lw.bind(args[1], cast_to_type_in(after, c_t, args[1].type))
    for a, v in zip(args[2:], list(after.arguments)[2 : 2 + n_carried]):
        lw.bind(a, v)
    vals = lw.lower_block(body, after, SUBGRAPH_TERMINATOR)
    with ir.InsertionPoint(after):
        new_c = vals[0]
        if new_c is None:
            raise node.fail("the loop body yields no condition")
        new_c = _scalar(new_c)
        nxt = arith.addi(after.arguments[0], const_scalar(1, i64))
        row = arith.index_cast(ir.IndexType.get(), after.arguments[0])
        new_bufs = []
        for j in range(n_scan):
            v = vals[1 + n_carried + j]
            buf = after.arguments[2 + n_carried + j]
            if v is None:
                raise node.fail("a scan output is omitted in the body")
            eshape = static_shape(buf.type)[1:]
            v = cast_to_type(v, tensor_type(eshape, elem_of(v.type)))
            new_bufs.append(insert_slice(expand_unit_dims(v, [0]), buf, [row] + [0] * len(eshape)))
        scf.YieldOp([nxt, new_c] + _yield_cast(vals[1 : 1 + n_carried], carried_types, "Loop body") + new_bufs)
    results = list(op.results)
    count = arith.index_cast(ir.IndexType.get(), results[0])
    scans = []
    for j in range(n_scan):
        buf = results[2 + n_carried + j]
        eshape = static_shape(buf.type)[1:]
        scans.append(extract_slice(buf, [0] * (1 + len(eshape)), [count] + eshape))
    return results[2 : 2 + n_carried] + scans


def _scan_elem_shape(node: Node, k: int) -> list[int] | None:
    """Static element shape of Loop output k (a scan output): from its declared type, or from
    the body's yielded value."""
    t = node.onnx_result_types[k]
    if is_ranked(t) and len(static_shape(t)) >= 1 and all(d is not None for d in static_shape(t)[1:]):
        return [int(d) for d in static_shape(t)[1:]]  # type: ignore[arg-type]
    body = node.op.regions[0].blocks[0]
    term = list(body.operations)[-1]
    n_carried = len(node.op.operands) - 2
    yt = term.operands[1 + n_carried + (k - n_carried)].type
    if is_ranked(yt) and all(d is not None for d in static_shape(yt)):
        return [int(d) for d in static_shape(yt)]  # type: ignore[arg-type]
    return None


def _scalar(v: ir.Value) -> ir.Value:
    """The element of a rank-0 or one-element 1-D tensor."""
    return tensor.extract(v, [const_index(0)] * len(static_shape(v.type)))


def cast_to_type_in(block: ir.Block, v: ir.Value, t: ir.Type) -> ir.Value:
    """Cast `v` (built at the end of `block`) to the subgraph argument's declared shape."""
    want = convert_type(t)
    if not is_ranked(want) or not compatible(v.type, want):
        return v
    with ir.InsertionPoint(block):
        return cast_to_type(v, want)


def _check_scan(node: Node) -> str | None:
    m = int(node.attr("num_scan_inputs"))
    n_states = len(node.op.operands) - m
    if m < 1 or n_states < 0:
        return "needs at least one scan input"
    n_out = len(node.op.results) - n_states
    for k in range(n_out):
        if _scan_out_elem_shape(node, n_states + k) is None:
            return f"the element shape of scan output {k} must be static"
    return None


def _scan_out_elem_shape(node: Node, res: int) -> list[int] | None:
    """Static element shape of Scan result `res` (a scan output): the declared stacked type
    without its scan axis, or the body's yielded element type."""
    m = int(node.attr("num_scan_inputs"))
    n_states = len(node.op.operands) - m
    k = res - n_states
    axes = list(node.attr("scan_output_axes") or [])
    t = node.onnx_result_types[res]
    if is_ranked(t) and all(d is not None for i, d in enumerate(static_shape(t)) if i != _out_axis(axes, k, len(static_shape(t)))):
        shape = static_shape(t)
        ax = _out_axis(axes, k, len(shape))
        return [int(d) for i, d in enumerate(shape) if i != ax]  # type: ignore[arg-type]
    body = node.op.regions[0].blocks[0]
    term = list(body.operations)[-1]
    yt = term.operands[n_states + k].type
    if is_ranked(yt) and all(d is not None for d in static_shape(yt)):
        return [int(d) for d in static_shape(yt)]  # type: ignore[arg-type]
    return None


def _out_axis(axes: list[int], k: int, rank: int) -> int:
    a = int(axes[k]) if k < len(axes) else 0
    return a + rank if a < 0 else a


@lowers("Scan", check=_check_scan, min_version=9)
def lower_scan(node: Node) -> list[ir.Value]:
    """Scan -> `scf.for` over the scan axis: each step slices every scan input (forward or
    reverse), lowers the body on the states and slices, and writes each scan output element
    into its stacked buffer (`tensor.insert_slice`, reversed where asked)."""
    m = int(node.attr("num_scan_inputs"))
    n_states = len(node.op.operands) - m
    n_out = len(node.op.results) - n_states
    in_axes = list(node.attr("scan_input_axes") or [0] * m)
    in_dirs = list(node.attr("scan_input_directions") or [0] * m)
    out_axes = list(node.attr("scan_output_axes") or [0] * n_out)
    out_dirs = list(node.attr("scan_output_directions") or [0] * n_out)
    scans = [node.input(n_states + j) for j in range(m)]
    in_axes = [normalize_axis(int(a), rank_of(v)) for a, v in zip(in_axes, scans)]
    length = dim(scans[0], in_axes[0])
    length_v = length if isinstance(length, ir.Value) else const_index(length)
    state_types = []
    for i in range(n_states):
        t = node.result_type(i)
        init = node.inputs[i]
        if init is None:
            raise node.fail(f"state {i} has no initial value")
        if not is_ranked(t):
            t = tensor_type([None] * rank_of(init), elem_of(init.type))
        state_types.append(t)
    inits = _yield_cast(list(node.inputs[:n_states]), state_types, "Scan initial states")
    buffers = []
    for k in range(n_out):
        eshape = _scan_out_elem_shape(node, n_states + k)
        assert eshape is not None
        ax = _out_axis(out_axes, k, len(eshape) + 1)
        bshape: list = list(eshape)
        bshape.insert(ax, length)
        buffers.append(empty(bshape, elem_of(node.result_type(n_states + k))))
    loop = scf.ForOp(const_index(0), length_v, const_index(1), inits + buffers)
    body = node.op.regions[0].blocks[0]
    lw = node.lowering
    with ir.InsertionPoint(loop.body):
        i = loop.induction_variable
        rev = arith.subi(arith.subi(length_v, const_index(1)), i)
        args = list(loop.inner_iter_args)
        for a, v in zip(list(body.arguments)[:n_states], args[:n_states]):
            lw.bind(a, v)
        for j, (a, v) in enumerate(zip(list(body.arguments)[n_states:], scans)):
            ax = in_axes[j]
            t = rev if int(in_dirs[j]) else i
            shape = shape_of(v)
            offs: list = [0] * len(shape)
            offs[ax] = t
            sizes = list(shape)
            sizes[ax] = 1
            piece = extract_slice(v, offs, sizes)
            elem_v = collapse_unit_dims(cast_to_type(piece, tensor_type([1 if d == ax else s for d, s in enumerate(static_shape(piece.type))], elem_of(piece.type))), [ax])
            lw.bind(a, cast_to_type_in(loop.body, elem_v, a.type))
    vals = lw.lower_block(body, loop.body, SUBGRAPH_TERMINATOR)
    with ir.InsertionPoint(loop.body):
        i = loop.induction_variable
        rev = arith.subi(arith.subi(length_v, const_index(1)), i)
        new_bufs = []
        for k in range(n_out):
            v = vals[n_states + k]
            buf = list(loop.inner_iter_args)[n_states + k]
            if v is None:
                raise node.fail("a scan output is omitted in the body")
            eshape = _scan_out_elem_shape(node, n_states + k)
            assert eshape is not None
            ax = _out_axis(out_axes, k, len(eshape) + 1)
            v = cast_to_type(v, tensor_type(eshape, elem_of(v.type)))
            offs = [0] * (len(eshape) + 1)
            offs[ax] = rev if int(out_dirs[k]) else i
            new_bufs.append(insert_slice(expand_unit_dims(v, [ax]), buf, offs))
        scf.YieldOp(_yield_cast(vals[:n_states], state_types, "Scan body") + new_bufs)
    return list(loop.results)
