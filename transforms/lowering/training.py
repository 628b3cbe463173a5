"""Optimizer update ops of `ai.onnx.preview.training`: Adagrad, Momentum (standard and Nesterov),
Adam. Each tensor group (X_i, G_i, and its state V_i/H_i) is one elementwise generic; the
scalar learning rate R and step count T are read once and the step-dependent factors
(R / (1 + T * decay), the bias corrections of Adam) computed in f64 as the reference does.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math

from onnxc.transforms.lowering.common import (
    Node,
    const_scalar,
    convert_element,
    convert_scalar,
    elementwise,
    is_float,
    lowers,
    scalar_of,
    shape_of,
)

DOMAIN = "ai.onnx.preview.training"


def _scalars(node: Node) -> tuple[ir.Value, ir.Value]:
    """R and T as f64 scalars."""
    f64 = ir.F64Type.get()
    r = convert_scalar(scalar_of(node.input(0)), node.in_elem(0), f64)
    t = convert_scalar(scalar_of(node.input(1)), node.in_elem(1), f64)
    return r, t


def _check(node: Node) -> str | None:
    if not is_float(node.in_elem(2)):
        return "integer tensors"
    return None


def _groups(node: Node, per: int) -> int:
    return (len(node.inputs) - 2) // per


@lowers("Adagrad", check=_check, domain=DOMAIN)
def lower_adagrad(node: Node) -> list[ir.Value]:
    """Adagrad: H' = H + G_r^2; X' = X - R / (1 + T * decay) * G_r / (sqrt(H') + eps)."""
    f64 = ir.F64Type.get()
    r, t = _scalars(node)
    decay = float(node.attr("decay_factor", 0.0))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    rate = arith.divf(r, arith.addf(const_scalar(1.0, f64), arith.mulf(t, const_scalar(decay, f64))))
    n = _groups(node, 3)
    xs, hs = [], []
    for i in range(n):
        x, g, h = node.inputs[2 + i], node.inputs[2 + n + i], node.inputs[2 + 2 * n + i]
        et = node.in_elem(2 + i)
        elem = convert_element(et)

        def parts(xv: ir.Value, gv: ir.Value, hv: ir.Value) -> tuple[ir.Value, ir.Value]:
            xw, gw, hw = (convert_scalar(v, et, f64) for v in (xv, gv, hv))
            gr = arith.addf(arith.mulf(const_scalar(norm, f64), xw), gw)
            hn = arith.addf(hw, arith.mulf(gr, gr))
            xn = arith.subf(xw, arith.divf(arith.mulf(rate, gr), arith.addf(math.sqrt(hn), const_scalar(eps, f64))))
            return xn, hn

        xs.append(elementwise([x, g, h], elem, lambda a, b, c: convert_scalar(parts(a, b, c)[0], f64, et), out_shape=shape_of(x)))
        hs.append(elementwise([x, g, h], elem, lambda a, b, c: convert_scalar(parts(a, b, c)[1], f64, et), out_shape=shape_of(x)))
    return xs + hs


@lowers("Momentum", check=_check, domain=DOMAIN)
def lower_momentum(node: Node) -> list[ir.Value]:
    """Momentum: V' = alpha V + beta' G_r (beta' = 1 at T = 0); X' = X - R V' (standard) or
    X - R (G_r + alpha V') (nesterov)."""
    f64 = ir.F64Type.get()
    r, t = _scalars(node)
    alpha = float(node.attr("alpha"))
    beta = float(node.attr("beta"))
    norm = float(node.attr("norm_coefficient"))
    nesterov = str(node.attr("mode", "standard")) == "nesterov"
    beta_adj = arith.select(arith.cmpf(arith.CmpFPredicate.OGT, t, const_scalar(0.0, f64)), const_scalar(beta, f64), const_scalar(1.0, f64))
    n = _groups(node, 3)
    xs, vs = [], []
    for i in range(n):
        x, g, v = node.inputs[2 + i], node.inputs[2 + n + i], node.inputs[2 + 2 * n + i]
        et = node.in_elem(2 + i)
        elem = convert_element(et)

        def parts(xv: ir.Value, gv: ir.Value, vv: ir.Value) -> tuple[ir.Value, ir.Value]:
            xw, gw, vw = (convert_scalar(q, et, f64) for q in (xv, gv, vv))
            gr = arith.addf(arith.mulf(const_scalar(norm, f64), xw), gw)
            vn = arith.addf(arith.mulf(const_scalar(alpha, f64), vw), arith.mulf(beta_adj, gr))
            step = arith.addf(gr, arith.mulf(const_scalar(alpha, f64), vn)) if nesterov else vn
            return arith.subf(xw, arith.mulf(r, step)), vn

        xs.append(elementwise([x, g, v], elem, lambda a, b, c: convert_scalar(parts(a, b, c)[0], f64, et), out_shape=shape_of(x)))
        vs.append(elementwise([x, g, v], elem, lambda a, b, c: convert_scalar(parts(a, b, c)[1], f64, et), out_shape=shape_of(x)))
    return xs + vs


@lowers("Adam", check=_check, domain=DOMAIN)
def lower_adam(node: Node) -> list[ir.Value]:
    """Adam: V' = a V + (1-a) G_r; H' = b H + (1-b) G_r^2; X' = (1 - post) (X - R' V' /
    (sqrt(H') + eps)) with R' = R sqrt(1 - b^T) / (1 - a^T) for T > 0."""
    f64 = ir.F64Type.get()
    r, t = _scalars(node)
    alpha = float(node.attr("alpha", 0.9))
    beta = float(node.attr("beta", 0.999))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    post = float(node.attr("norm_coefficient_post", 0.0))
    one = const_scalar(1.0, f64)
    corr = arith.divf(math.sqrt(arith.subf(one, math.powf(const_scalar(beta, f64), t))), arith.subf(one, math.powf(const_scalar(alpha, f64), t)))
    r_adj = arith.select(arith.cmpf(arith.CmpFPredicate.OGT, t, const_scalar(0.0, f64)), arith.mulf(r, corr), r)
    n = _groups(node, 4)
    xs, vs, hs = [], [], []
    for i in range(n):
        x, g, v, h = (node.inputs[2 + k * n + i] for k in range(4))
        et = node.in_elem(2 + i)
        elem = convert_element(et)

        def parts(xv: ir.Value, gv: ir.Value, vv: ir.Value, hv: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
            xw, gw, vw, hw = (convert_scalar(q, et, f64) for q in (xv, gv, vv, hv))
            gr = arith.addf(arith.mulf(const_scalar(norm, f64), xw), gw)
            vn = arith.addf(arith.mulf(const_scalar(alpha, f64), vw), arith.mulf(const_scalar(1 - alpha, f64), gr))
            hn = arith.addf(arith.mulf(const_scalar(beta, f64), hw), arith.mulf(const_scalar(1 - beta, f64), arith.mulf(gr, gr)))
            xn = arith.subf(xw, arith.mulf(r_adj, arith.divf(vn, arith.addf(math.sqrt(hn), const_scalar(eps, f64)))))
            return arith.mulf(const_scalar(1 - post, f64), xn), vn, hn

        for k, out in enumerate((xs, vs, hs)):
            out.append(elementwise([x, g, v, h], elem, lambda a, b, c, d, k=k: convert_scalar(parts(a, b, c, d)[k], f64, et), out_shape=shape_of(x)))
    return xs + vs + hs
