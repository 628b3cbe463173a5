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

from onnxc.transforms.lowering.common import (
    LoweringError,
    Node,
    cast_to_type,
    compatible,
    const_index,
    const_scalar,
    convert_type,
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


@lowers("If", check=_check_ranked_results)
def lower_if(node: Node) -> list[ir.Value]:
    """If -> `scf.if` on the scalar condition, each branch lowered into its region."""
    cond = tensor.extract(node.input(0), [])
    types = [node.result_type(i) for i in range(len(node.op.results))]
    op = scf.IfOp(cond, types, has_else=True)
    # Regions are in sorted attribute-name order: else_branch, then_branch.
    else_region, then_region = node.op.regions[0], node.op.regions[1]
    for region, block, what in ((then_region, op.then_block, "then_branch"), (else_region, op.else_block, "else_branch")):
        vals = node.lowering.lower_block(region.blocks[0], block, "gpu.yield")
        with ir.InsertionPoint(block):
            scf.YieldOp(_yield_cast(vals, types, f"If {what}"))
    return list(op.results)


def _check_loop(node: Node) -> str | None:
    r = _check_ranked_results(node)
    if r:
        return r
    n_carried = len(node.op.operands) - 2
    if len(node.op.results) != n_carried:
        return "scan outputs of Loop are not lowered"
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
    carried_types = [node.result_type(i) for i in range(len(node.op.results))]
    inits = [const_scalar(0, i64), cond0] + _yield_cast(list(node.inputs[2:]), carried_types, "Loop initial values")
    types = [i64, i1] + carried_types
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
    for a, v in zip(args[2:], list(after.arguments)[2:]):
        lw.bind(a, v)
    vals = lw.lower_block(body, after, "gpu.yield")
    with ir.InsertionPoint(after):
        new_c = vals[0]
        if new_c is None:
            raise node.fail("the loop body yields no condition")
        new_c = _scalar(new_c)
        nxt = arith.addi(after.arguments[0], const_scalar(1, i64))
        scf.YieldOp([nxt, new_c] + _yield_cast(vals[1:], carried_types, "Loop body"))
    return list(op.results)[2:]


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
