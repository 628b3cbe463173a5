"""`onnx-expand-gradient`: replace `Gradient` (ai.onnx.preview.training) by the ONNX ops of its
reverse-mode derivative, before lowering.

Why: `Gradient(xs, zs, y)` asks for dy/dx for each x of `xs`; it has no function body and no
kernel, but for a graph of differentiable ops its value is plain ONNX arithmetic: the chain rule
applied backwards from `y`. Written as ONNX ops, it lowers, folds and fuses like the rest of the
model, on every target.

How: `y` is found by name among the function's results (the importer keeps graph output names in
`onnx.name`; intermediate values have no name in the IR, so a `y` that is not a graph output is
refused). The ops `y` depends on are walked backwards from `y`; those that depend on some `x`
(the *active* ops) are visited in reverse program order, each turning the gradient of its result
into gradients of its active operands (summed with `Add` where a value has several users). The
seed is ones shaped like `y` (the convention onnxruntime's training and the backend test use:
the gradient of the sum of `y`'s elements). Broadcasting binary ops reduce the gradient back to
the operand's shape with `ReduceSum` over the broadcast axes (static shapes needed). An `x` that
`y` does not depend on gets zeros.

Derivatives covered (g: the result's gradient, y: the result):
Add, Sub, Mul, Div, Neg, Identity, Abs, Relu, LeakyRelu, Sigmoid, Tanh, Exp, Log, Sqrt, Pow,
MatMul (both operands of rank >= 2), Gemm, Softmax (opset 13+), ReduceSum and ReduceMean
(constant axes), Transpose, Reshape. Any other active op is refused with an `OnnxcError` naming the
Gradient node and the op without a derivative (never a silently wrong gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from mlir import ir

from onnxc.dialect.builder import onnx_op
from onnxc.errors import OnnxcError
from onnxc.transforms import onnx_utils as U
from onnxc.transforms.pass_base import ModulePass

__all__ = ["DIFFERENTIABLE", "GradientError", "OnnxExpandGradientPass", "expand_gradient"]

_TRAINING = "ai.onnx.preview.training"


class GradientError(OnnxcError, ValueError):
    """A Gradient node onnxc cannot differentiate (the message names the node and the reason)."""


def _op_type(op: ir.Operation) -> str | None:
    info = U.info_of(op)
    return info.op_type if info is not None else None


def _is_gradient(op: ir.Operation) -> bool:
    info = U.info_of(op)
    return info is not None and info.op_type == "Gradient" and info.domain == _TRAINING


def _SHAPE_TYPE() -> ir.Type:  # noqa: N802 - reads as the type it is
    """tensor<?xi64>: a Shape result (refined by shape inference)."""
    return ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size()], ir.IntegerType.get_signless(64))


def _unranked(v: ir.Value) -> ir.Type:
    """An unranked tensor of `v`'s element type: auxiliary results, refined by shape inference."""
    return ir.UnrankedTensorType.get(ir.ShapedType(v.type).element_type)


class _Builder:
    """Builds the derivative ops before the Gradient node, at its location."""

    def __init__(self, gradient: ir.Operation, label: str) -> None:
        self.ip = ir.InsertionPoint(gradient)
        self.loc = gradient.location
        self.label = label

    def op(self, op_type: str, operands: list[ir.Value | None], like: ir.Value | ir.Type | None = None, **attrs: object) -> ir.Value:
        """One ONNX op with one result, typed like `like` (a value or a type), else unranked."""
        if isinstance(like, ir.Type):
            rtype = like
        else:
            rtype = like.type if like is not None else _unranked(operands[0])
        return onnx_op(op_type, operands, [rtype], attrs, loc=self.loc, ip=self.ip).results[0]

    def scalar(self, value: float, like: ir.Value) -> ir.Value:
        """A rank-0 constant of `like`'s element type."""
        elem = ir.ShapedType(like.type).element_type
        dtype = U.numpy_dtype_of(elem)
        made = U.make_constant(np.array(value, dtype=dtype), elem, loc=self.loc, ip=self.ip)
        assert made is not None  # a float scalar always fits an attribute
        return made

    def i64(self, values: list[int]) -> ir.Value:
        made = U.make_constant(np.array(values, dtype=np.int64), loc=self.loc, ip=self.ip)
        assert made is not None
        return made

    def filled(self, value: float, like: ir.Value) -> ir.Value:
        """A tensor of `value` shaped like `like` (Expand of a scalar to Shape(like))."""
        shape = self.op("Shape", [like], _SHAPE_TYPE())
        return self.op("Expand", [self.scalar(value, like), shape], like)

    def unbroadcast(self, g: ir.Value, result_type: ir.Type, target: ir.Value, op: ir.Operation) -> ir.Value:
        """`g` (of the broadcast shape `result_type`) summed back to `target`'s shape."""
        out, want = U.shape_of(result_type), U.shape_of(target.type)
        if out is None or want is None or -1 in out or -1 in want:
            # With a dynamic dim, whether the operand was broadcast is decided at run time.
            raise GradientError(
                f"Gradient node '{self.label}': the derivative of {U.location_text(op)} needs static shapes to sum the "
                f"gradient back to its operand ({target.type} from {result_type})"
            )
        if out == want:
            return g
        lead = len(out) - len(want)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(want) if d == 1 and out[lead + i] != 1]
        reduced = g
        if axes:
            reduced = self.op("ReduceSum", [g, self.i64(axes)], _unranked(g), keepdims=1)
        return self.op("Reshape", [reduced, self.i64(want)], target)


#: A derivative rule: (builder, op, gradient of the result) -> gradient of each operand (None:
#: not differentiable through this operand, e.g. Reshape's shape).
Rule = Callable[[_Builder, ir.Operation, ir.Value], list["ir.Value | None"]]


def _add(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x, y, r = op.operands[0], op.operands[1], op.results[0]
    return [b.unbroadcast(g, r.type, x, op), b.unbroadcast(g, r.type, y, op)]


def _sub(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x, y, r = op.operands[0], op.operands[1], op.results[0]
    return [b.unbroadcast(g, r.type, x, op), b.unbroadcast(b.op("Neg", [g], g), r.type, y, op)]


def _mul(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x, y, r = op.operands[0], op.operands[1], op.results[0]
    return [b.unbroadcast(b.op("Mul", [g, y], g), r.type, x, op), b.unbroadcast(b.op("Mul", [g, x], g), r.type, y, op)]


def _div(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x, y, r = op.operands[0], op.operands[1], op.results[0]
    gx = b.op("Div", [g, y], g)
    gy = b.op("Neg", [b.op("Div", [b.op("Mul", [g, r], g), y], g)], g)  # d(x/y)/dy = -(x/y)/y
    return [b.unbroadcast(gx, r.type, x, op), b.unbroadcast(gy, r.type, y, op)]


def _neg(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    return [b.op("Neg", [g], g)]


def _identity(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    return [g]


def _relu(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x = op.operands[0]
    zero = b.scalar(0.0, x)
    positive = b.op("Greater", [x, zero], ir.UnrankedTensorType.get(ir.IntegerType.get_signless(1)))
    return [b.op("Where", [positive, g, zero], g)]


def _sigmoid(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    s = op.results[0]
    return [b.op("Mul", [g, b.op("Mul", [s, b.op("Sub", [b.scalar(1.0, s), s], s)], s)], g)]


def _tanh(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    t = op.results[0]
    return [b.op("Mul", [g, b.op("Sub", [b.scalar(1.0, t), b.op("Mul", [t, t], t)], t)], g)]


def _exp(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    return [b.op("Mul", [g, op.results[0]], g)]


def _log(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    return [b.op("Div", [g, op.operands[0]], g)]


def _sqrt(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    r = op.results[0]
    return [b.op("Div", [g, b.op("Mul", [r, b.scalar(2.0, r)], r)], g)]


def _swap_last(b: _Builder, v: ir.Value, op: ir.Operation) -> ir.Value:
    shape = U.shape_of(v.type)
    if shape is None or len(shape) < 2:
        raise GradientError(f"Gradient node '{b.label}': the derivative of {U.location_text(op)} is built for operands of known rank >= 2 (got {v.type})")
    perm = list(range(len(shape) - 2)) + [len(shape) - 1, len(shape) - 2]
    return b.op("Transpose", [v], _unranked(v), perm=perm)


def _matmul(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x, y, r = op.operands[0], op.operands[1], op.results[0]
    gx = b.op("MatMul", [g, _swap_last(b, y, op)], _unranked(g))
    gy = b.op("MatMul", [_swap_last(b, x, op), g], _unranked(g))
    # The products carry the broadcast batch dims of the result: sum them back per operand.
    return [b.unbroadcast(gx, _like_batch(r, x), x, op), b.unbroadcast(gy, _like_batch(r, y), y, op)]


def _like_batch(result: ir.Value, operand: ir.Value) -> ir.Type:
    """The shape a MatMul operand's gradient product has: the result's batch dims, the operand's
    matrix dims."""
    out, mine = U.shape_of(result.type), U.shape_of(operand.type)
    if out is None or mine is None:
        return result.type
    shape = out[:-2] + mine[-2:]
    elem = ir.ShapedType(operand.type).element_type
    return ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size() if d < 0 else d for d in shape], elem)


def _transpose(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x = op.operands[0]
    perm = U.attr_value(op, "perm", None)
    if perm is None:
        shape = U.shape_of(x.type)
        if shape is None:
            raise GradientError(f"Gradient node '{b.label}': the derivative of {U.location_text(op)} needs its operand's rank")
        perm = list(reversed(range(len(shape))))
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[int(p)] = i
    return [b.op("Transpose", [g], x, perm=inverse)]


def _reshape(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x = op.operands[0]
    shape = b.op("Shape", [x], _SHAPE_TYPE())
    return [b.op("Reshape", [g, shape], x), None]


def _abs(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    return [b.op("Mul", [g, b.op("Sign", [op.operands[0]], op.operands[0])], g)]


def _leaky_relu(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x = op.operands[0]
    alpha = float(U.attr_value(op, "alpha", 0.01))
    positive = b.op("Greater", [x, b.scalar(0.0, x)], ir.UnrankedTensorType.get(ir.IntegerType.get_signless(1)))
    return [b.op("Where", [positive, g, b.op("Mul", [g, b.scalar(alpha, g)], g)], g)]


def _pow(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    """d(x^e)/dx = e x^(e - 1); d(x^e)/de = x^e log(x)."""
    x, e, r = op.operands[0], op.operands[1], op.results[0]
    if U.element_type_of(e.type) != U.element_type_of(x.type):
        e_like = b.op("CastLike", [e, x], _unranked(x))
    else:
        e_like = e
    power = b.op("Pow", [x, b.op("Sub", [e_like, b.scalar(1.0, x)], _unranked(x))], _unranked(x))
    gx = b.op("Mul", [g, b.op("Mul", [e_like, power], _unranked(x))], g)
    ge = b.op("Mul", [g, b.op("Mul", [r, b.op("Log", [x], x)], _unranked(x))], g)
    return [b.unbroadcast(gx, r.type, x, op), b.unbroadcast(ge, r.type, e, op)]


def _softmax(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    """dx = y * (g - sum(g * y) over the axis), for Softmax of opset 13 and later (one axis)."""
    info = U.info_of(op)
    if info is None or info.since_versions[-1] < 13:
        raise GradientError(f"Gradient node '{b.label}': the derivative of {U.location_text(op)} is built for Softmax of opset 13 or later")
    y = op.results[0]
    axis = int(U.attr_value(op, "axis", -1))
    gy = b.op("Mul", [g, y], g)
    total = b.op("ReduceSum", [gy, b.i64([axis])], _unranked(g), keepdims=1)
    return [b.op("Mul", [y, b.op("Sub", [g, total], g)], g)]


def _reduced_axes(b: _Builder, op: ir.Operation) -> list[int]:
    """The axes a ReduceSum/ReduceMean (opset 13/18: axes an input) reduces, normalized; static rank needed."""
    x = op.operands[0]
    shape = U.shape_of(x.type)
    if shape is None:
        raise GradientError(f"Gradient node '{b.label}': the derivative of {U.location_text(op)} needs its operand's rank")
    axes_value = op.operands[1] if len(op.operands) > 1 and not U.is_none_value(op.operands[1]) else None
    if axes_value is None:
        if int(U.attr_value(op, "noop_with_empty_axes", 0)):
            return []
        return list(range(len(shape)))
    arr = U.constant_value(axes_value, 64)
    if arr is None:
        raise GradientError(f"Gradient node '{b.label}': the derivative of {U.location_text(op)} needs constant axes")
    return sorted(int(a) + len(shape) if int(a) < 0 else int(a) for a in np.asarray(arr).reshape(-1))


def _reduce_sum(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x = op.operands[0]
    axes = _reduced_axes(b, op)
    if axes and not int(U.attr_value(op, "keepdims", 1)):
        g = b.op("Unsqueeze", [g, b.i64(axes)], _unranked(g))
    shape = b.op("Shape", [x], _SHAPE_TYPE())
    return [b.op("Expand", [g, shape], x), None]


def _reduce_mean(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    x = op.operands[0]
    shape = U.shape_of(x.type)
    axes = _reduced_axes(b, op)
    assert shape is not None  # _reduced_axes checked the rank
    if any(shape[a] < 0 for a in axes):
        raise GradientError(f"Gradient node '{b.label}': the derivative of {U.location_text(op)} needs the reduced dims static")
    count = float(np.prod([shape[a] for a in axes])) if axes else 1.0
    spread = _reduce_sum(b, op, g)[0]
    assert spread is not None
    return [b.op("Div", [spread, b.scalar(count, x)], x), None]


def _gemm(b: _Builder, op: ir.Operation, g: ir.Value) -> list[ir.Value | None]:
    """Y = alpha A' B' + beta C (A' = A^T with transA, B' likewise):
    dA' = alpha g B'^T, dB' = alpha A'^T g, dC = beta g summed to C's shape."""
    a, bb, r = op.operands[0], op.operands[1], op.results[0]
    c = op.operands[2] if len(op.operands) > 2 and not U.is_none_value(op.operands[2]) else None
    alpha, beta = float(U.attr_value(op, "alpha", 1.0)), float(U.attr_value(op, "beta", 1.0))
    trans_a, trans_b = int(U.attr_value(op, "transA", 0)), int(U.attr_value(op, "transB", 0))
    scaled = b.op("Mul", [g, b.scalar(alpha, g)], g) if alpha != 1.0 else g
    # With A' = A (no transA): dA = g_s B'^T, i.e. Gemm(g_s, B, transB = not transB) on B as stored.
    if not trans_a:
        ga = b.op("Gemm", [scaled, bb, None], a, transB=0 if trans_b else 1)
    else:  # A' = A^T: dA = (g_s B'^T)^T = B' g_s^T
        ga = b.op("Gemm", [bb, scaled, None], a, transA=trans_b, transB=1)
    if not trans_b:
        gb = b.op("Gemm", [a, scaled, None], bb, transA=0 if trans_a else 1)
    else:  # B' = B^T: dB = (A'^T g_s)^T = g_s^T A'
        gb = b.op("Gemm", [scaled, a, None], bb, transA=1, transB=trans_a)
    grads: list[ir.Value | None] = [ga, gb]
    if c is not None:
        gc = b.op("Mul", [g, b.scalar(beta, g)], g) if beta != 1.0 else g
        grads.append(b.unbroadcast(gc, r.type, c, op))
    return grads


#: Op type -> its derivative rule (the ops covered; see the module docstring).
DIFFERENTIABLE: dict[str, Rule] = {
    "Add": _add, "Sub": _sub, "Mul": _mul, "Div": _div, "Neg": _neg, "Identity": _identity, "Relu": _relu,
    "Sigmoid": _sigmoid, "Tanh": _tanh, "Exp": _exp, "Log": _log, "Sqrt": _sqrt, "MatMul": _matmul,
    "Transpose": _transpose, "Reshape": _reshape, "Abs": _abs, "LeakyRelu": _leaky_relu, "Pow": _pow,
    "Softmax": _softmax, "ReduceSum": _reduce_sum, "ReduceMean": _reduce_mean, "Gemm": _gemm,
}  # fmt: skip


def _node_label(op: ir.Operation) -> str:
    from onnxc.importers.proto import location_label

    try:
        return location_label(op.location)[0] or op.name
    except Exception:  # noqa: BLE001 - a location of another form: the op's name says enough
        return op.name


def _find_y(fn: ir.Operation, name: str) -> ir.Value | None:
    """The function result named `name` (`onnx.name` of the result attributes)."""
    term = U.terminator(fn.regions[0].blocks[0])
    if term is None or "res_attrs" not in fn.attributes:
        return None
    for attrs, value in zip(ir.ArrayAttr(fn.attributes["res_attrs"]), term.operands):
        d = ir.DictAttr(attrs)
        if "onnx.name" in d and ir.StringAttr(d["onnx.name"]).value == name:
            return value
    return None


def expand_gradient(fn: ir.Operation, gradient: ir.Operation) -> None:
    """Replace one Gradient op of `fn`'s body by its derivative ops (see the module docstring)."""
    label = _node_label(gradient)
    y_name = str(U.attr_value(gradient, "y", ""))
    xs_names = [str(n) for n in (U.attr_value(gradient, "xs", None) or [])]
    body = fn.regions[0].blocks[0]
    if gradient.parent is None or gradient.parent.operation != fn:
        raise GradientError(f"Gradient node '{label}': only a Gradient of the main graph is expanded (not one inside a subgraph)")
    y = _find_y(fn, y_name)
    if y is None:
        raise GradientError(f"Gradient node '{label}': y '{y_name}' is not a graph output; onnxc differentiates graph outputs only")
    xs = list(gradient.operands)[: len(xs_names)]
    for x in [y, *xs]:
        elem = U.element_type_of(x.type)
        if elem is None or U.numpy_dtype_of(elem) is None or U.numpy_dtype_of(elem).kind != "f":
            raise GradientError(f"Gradient node '{label}': only float tensors are differentiated (got {x.type})")

    ops = U.block_ops(body)
    position = {U.id_key(op): i for i, op in enumerate(ops)}
    # The backward slice of y: every op y depends on.
    slice_ops: dict[int, ir.Operation] = {}
    stack = [y]
    seen: set[ir.Value] = set()
    while stack:
        v = stack.pop()
        if v in seen or isinstance(v, ir.BlockArgument):
            continue
        seen.add(v)
        producer = v.owner.operation
        if U.id_key(producer) not in position:  # inside a subgraph region: not differentiated
            continue
        slice_ops[U.id_key(producer)] = producer
        stack.extend(producer.operands)
    # Active values: those that depend on an x, in program order.
    active: set[ir.Value] = set(xs)
    ordered = sorted(slice_ops.values(), key=lambda op: position[U.id_key(op)])
    active_ops = []
    for op in ordered:
        if any(o in active for o in op.operands):
            if position[U.id_key(op)] > position[U.id_key(gradient)]:
                raise GradientError(f"Gradient node '{label}': y '{y_name}' is computed after the Gradient node ({U.location_text(op)})")
            active_ops.append(op)
            active.update(op.results)

    b = _Builder(gradient, label)
    grads: dict[ir.Value, ir.Value] = {}
    if y in active:
        grads[y] = b.filled(1.0, y)
    for op in reversed(active_ops):
        results = [r for r in op.results if r in grads]
        if not results:
            continue
        op_type = _op_type(op)
        rule = DIFFERENTIABLE.get(op_type or "")
        if rule is None or len(op.results) != 1:
            raise GradientError(
                f"Gradient node '{label}': {U.location_text(op)} has no derivative in onnxc "
                f"(differentiated ops: {', '.join(sorted(DIFFERENTIABLE))})"
            )
        for operand, grad in zip(op.operands, rule(b, op, grads[op.results[0]])):
            if grad is None or operand not in active:
                continue
            grads[operand] = b.op("Add", [grads[operand], grad], operand) if operand in grads else grad
    outputs = [grads[x] if x in grads else b.filled(0.0, x) for x in xs]
    for result, value in zip(gradient.results, outputs):
        if not U.is_none_value(result):
            U.replace_value(result, value)
    if all(not list(r.uses) for r in gradient.results):
        gradient.erase()


@dataclass(frozen=True)
class OnnxExpandGradientPass(ModulePass):
    """Replace every `Gradient` (ai.onnx.preview.training) by its reverse-mode derivative in ONNX
    ops (see the module docstring); refuses, naming the node, what it cannot differentiate."""

    name = "onnx-expand-gradient"

    def run(self, module: ir.Operation) -> None:
        for fn in U.functions(module):
            if not len(fn.regions) or not len(fn.regions[0].blocks):
                continue
            for op in U.collect_ops(fn, _is_gradient):
                expand_gradient(fn, op)
