"""LinearAttention (opset 27): the recurrent linear-attention family ("linear", "gated", "delta",
"gated_delta" update rules), with grouped-query heads, optional past state and per-head or
per-key-dimension decay.

What: one `scf.for` over the T tokens carrying the f32 state (B, H_kv, d_k, d_v) and the f32
output (B, T, H_q, d_v). A step is four `linalg.generic`s on the token's slices:
  1. gating: S *= exp(g_t) (g_t per head, or per key dimension, broadcast over d_v);
  2. delta rules: r[b,h,m] = sum_d S[b,h,d,m] * k_t[b,h,d] (a reduction);
  3. the write: S += k_t (x) u_t, where u_t = v_t (linear/gated) or beta_t * (v_t - r);
  4. the read: o[b,hq,m] = scale * sum_d q_t[b,hq,d] * S[b, hq / group, d, m] (the GQA
     replication is the affine map `hq floordiv group` rather than a copy of the state).
Why this shape: the spec defines the op as exactly this recurrence (the chunk-parallel form is a
GPU tuning hint, `chunk_size` does not change the result), and the reference accumulates every
step in f32 whatever the activations' type; doing the same keeps the fp16 case within the
suite's tolerance. Outputs are cast back to the declared types at the end (present_state takes
past_state's type, or the query's when there is no past state, as the reference does).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math, scf

from onnxc.transforms.lowering.common import (
    Dim,
    Node,
    affine_map,
    collapse_unit_dims,
    const_index,
    const_scalar,
    convert_tensor,
    dim,
    elem_of,
    empty,
    expand_unit_dims,
    extract_slice,
    filled,
    generic,
    identity_map,
    insert_slice,
    is_float,
    lowers,
    reshape,
    static_shape,
)

_RULES = ("linear", "gated", "delta", "gated_delta")
_QUERY, _KEY, _VALUE, _PAST, _DECAY, _BETA = range(6)


def _rule(node: Node) -> str:
    r = node.attr("update_rule", "gated_delta")
    return r.decode() if isinstance(r, bytes) else str(r)


def _check_linear_attention(node: Node) -> str | None:
    """Reject what the lowering cannot build: unknown rules, inputs the rule requires or forbids,
    non-float types, and packed last dims that are dynamic or not divisible by the head counts
    (the head split must be known at compile time)."""
    rule = _rule(node)
    if rule not in _RULES:
        return f"update_rule '{rule}' is not one of {', '.join(_RULES)}"
    hq, hkv = int(node.attr("q_num_heads", 0)), int(node.attr("kv_num_heads", 0))
    if hq <= 0 or hkv <= 0 or hq % hkv:
        return f"q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})"
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != node.has(_DECAY):
        return f"update_rule '{rule}' {'requires' if gating else 'forbids'} the decay input"
    if delta != node.has(_BETA):
        return f"update_rule '{rule}' {'requires' if delta else 'forbids'} the beta input"
    for i in range(6):
        if node.has(i):
            t = node.onnx_types[i]
            if not isinstance(t, ir.RankedTensorType):
                return f"input {i} is unranked"
            if not is_float(elem_of(t)):
                return f"input {i} is not a float tensor"
    shapes = [static_shape(node.onnx_types[i]) if node.has(i) else None for i in range(6)]
    for i in (_QUERY, _KEY, _VALUE, _DECAY, _BETA):
        s = shapes[i]
        if s is not None and (len(s) != 3 or s[-1] is None):
            return f"input {i} must be rank 3 (B, T, H*D) with a static last dim"
    qd, kd, vd = shapes[_QUERY][-1], shapes[_KEY][-1], shapes[_VALUE][-1]
    if qd % hq or kd % hkv or vd % hkv:
        return "packed head dims are not divisible by the head counts"
    dk, dv = qd // hq, vd // hkv
    if kd // hkv != dk:
        return f"key head size {kd // hkv} differs from the query's {dk}"
    if shapes[_DECAY] is not None and shapes[_DECAY][-1] not in (hkv, hkv * dk):
        return f"decay last dim {shapes[_DECAY][-1]} is neither kv_num_heads nor kv_num_heads*d_k"
    if shapes[_BETA] is not None and shapes[_BETA][-1] not in (hkv, 1):
        return f"beta last dim {shapes[_BETA][-1]} is neither kv_num_heads nor 1"
    past = shapes[_PAST]
    if past is not None and (len(past) != 4 or any(p is not None and p != e for p, e in zip(past[1:], (hkv, dk, dv)))):
        return f"past_state must have shape (B, {hkv}, {dk}, {dv})"
    return None


def _token(x: ir.Value, t: ir.Value, shape: list[Dim]) -> ir.Value:
    """Token t of a (B, T, ...) tensor, without the T dim: (B, ...)."""
    return collapse_unit_dims(extract_slice(x, [0, t] + [0] * (len(shape) - 2), [shape[0], 1, *shape[2:]]), [1])


@lowers("LinearAttention", check=_check_linear_attention)
def lower_linear_attention(node: Node) -> list[ir.Value]:
    """LinearAttention (see the module docstring)."""
    f32 = ir.F32Type.get()
    rule = _rule(node)
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    hq, hkv = int(node.attr("q_num_heads")), int(node.attr("kv_num_heads"))
    group = hq // hkv

    def as_f32(i: int) -> ir.Value:
        return convert_tensor(node.input(i), node.in_elem(i), f32)

    q, k, v = as_f32(_QUERY), as_f32(_KEY), as_f32(_VALUE)
    b, t_len = dim(q, 0), dim(q, 1)
    dk = static_shape(q.type)[2] // hq
    dv = static_shape(v.type)[2] // hkv
    scale = float(node.attr("scale", 0.0) or 0.0) or 1.0 / float(dk) ** 0.5

    # (B, T, H*D) -> (B, T, H, D): a row-major reshape, so a token slice is (B, H, D).
    q4 = reshape(q, [b, t_len, hq, dk])
    k4 = reshape(k, [b, t_len, hkv, dk])
    v4 = reshape(v, [b, t_len, hkv, dv])
    decay4 = None
    per_key = False
    if gating:
        g = as_f32(_DECAY)
        # The reference tests the per-head form first (they coincide when d_k == 1).
        per_key = static_shape(g.type)[2] != hkv
        decay4 = reshape(g, [b, t_len, hkv, dk]) if per_key else g  # (B,T,H,dk) or (B,T,H)
    beta3 = as_f32(_BETA) if delta else None
    beta_heads = static_shape(beta3.type)[2] if beta3 is not None else 0

    state0 = as_f32(_PAST) if node.has(_PAST) else filled([b, hkv, dk, dv], f32, 0.0)
    out0 = empty([b, t_len, hq, dv], f32)

    par4 = ["parallel"] * 4
    loop = scf.ForOp(const_index(0), t_len if isinstance(t_len, ir.Value) else const_index(t_len), const_index(1), [state0, out0])
    with ir.InsertionPoint(loop.body):
        t = loop.induction_variable
        state, out = list(loop.inner_iter_args)
        q_t = _token(q4, t, [b, t_len, hq, dk])  # (B, Hq, dk)
        k_t = _token(k4, t, [b, t_len, hkv, dk])  # (B, Hkv, dk)
        v_t = _token(v4, t, [b, t_len, hkv, dv])  # (B, Hkv, dv)
        s_shape: list[Dim] = [b, hkv, dk, dv]
        # Loops of the state-shaped generics: (b, h, d, m).
        if decay4 is not None:
            g_t = _token(decay4, t, [b, t_len, hkv, dk] if per_key else [b, t_len, hkv])
            g_map = affine_map(4, [0, 1, 2] if per_key else [0, 1])
            state = generic(
                [state, g_t], [empty(s_shape, f32)], [identity_map(4), g_map, identity_map(4)], par4,
                lambda a: [arith.mulf(a[0], math.exp(a[1]))],
            )[0]
        if beta3 is not None:
            # r[b,h,m] = sum_d S[b,h,d,m] k[b,h,d]; loops (b, h, m, d).
            r = generic(
                [state, k_t], [filled([b, hkv, dv], f32, 0.0)],
                [affine_map(4, [0, 1, 3, 2]), affine_map(4, [0, 1, 3]), affine_map(4, [0, 1, 2])],
                ["parallel", "parallel", "parallel", "reduction"],
                lambda a: [arith.addf(a[2], arith.mulf(a[0], a[1]))],
            )[0]
            beta_t = _token(beta3, t, [b, t_len, beta_heads])  # (B, Hkv or 1)
            beta_map = affine_map(3, [0, 1] if beta_heads == hkv else [0, "0"])
            v_t = generic(
                [v_t, r, beta_t], [empty([b, hkv, dv], f32)],
                [identity_map(3), identity_map(3), beta_map, identity_map(3)], ["parallel"] * 3,
                lambda a: [arith.mulf(a[2], arith.subf(a[0], a[1]))],
            )[0]
        state = generic(
            [state, k_t, v_t], [empty(s_shape, f32)],
            [identity_map(4), affine_map(4, [0, 1, 2]), affine_map(4, [0, 1, 3]), identity_map(4)], par4,
            lambda a: [arith.addf(a[0], arith.mulf(a[1], a[2]))],
        )[0]
        # o[b,hq,m] = scale * sum_d q[b,hq,d] S[b,hq/group,d,m]; loops (b, hq, m, d).
        d0, d1, d2, d3 = (ir.AffineDimExpr.get(i) for i in range(4))
        head = ir.AffineFloorDivExpr.get(d1, ir.AffineConstantExpr.get(group)) if group > 1 else d1
        o = generic(
            [q_t, state], [filled([b, hq, dv], f32, 0.0)],
            [affine_map(4, [0, 1, 3]), ir.AffineMap.get(4, 0, [d0, head, d3, d2]), affine_map(4, [0, 1, 2])],
            ["parallel", "parallel", "parallel", "reduction"],
            lambda a: [arith.addf(a[2], arith.mulf(a[0], a[1]))],
        )[0]
        c_scale = const_scalar(scale, f32)
        o = generic([o], [empty([b, hq, dv], f32)], [identity_map(3)] * 2, ["parallel"] * 3, lambda a: [arith.mulf(a[0], c_scale)])[0]
        out = insert_slice(expand_unit_dims(o, [1]), out, [0, t, 0, 0])
        scf.YieldOp([state, out])
    state_f, out_f = loop.results
    output = convert_tensor(reshape(out_f, [b, t_len, hq * dv]), f32, node.out_elem(0))
    present = convert_tensor(state_f, f32, node.out_elem(1))
    return [output, present]
