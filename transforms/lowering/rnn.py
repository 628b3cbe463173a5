"""Recurrent ops: RNN, GRU, LSTM (forward, reverse, bidirectional; layout 0 and 1; clip;
activations by name; GRU `linear_before_reset`; LSTM peepholes; forward `sequence_lens`).

Each direction is one `scf.for` over time carrying the hidden (and cell) state and the Y
tensor; a step is two matmuls (`x_t @ W^T`, `h @ R^T`, the weights transposed once outside the
loop) and elementwise generics for the gates, written back with `tensor.insert_slice`. With
`sequence_lens`, rows past their length keep their state and get zeros in Y (forward direction;
reverse directions with lengths are rejected by the pre-check).
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, linalg, math, scf

from onnxc.transforms.lowering.common import (
    Node,
    cast_to_type,
    collapse_unit_dims,
    const_index,
    const_scalar,
    convert_element,
    dim,
    elem_of,
    elementwise,
    empty,
    expand_unit_dims,
    extract_slice,
    filled,
    insert_slice,
    is_float,
    lowers,
    static_shape,
    to_index,
)
from onnxc.transforms.lowering.matmul import matmul_values

Act = Callable[[ir.Value], ir.Value]
_TAKES = {"LeakyRelu": 1, "ThresholdedRelu": 1, "Elu": 1, "ScaledTanh": 2, "HardSigmoid": 2, "Affine": 2}
_DEFAULTS = {"LeakyRelu": (0.01,), "ThresholdedRelu": (1.0,), "Elu": (1.0,), "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Affine": (1.0, 0.0)}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_N_ACT = {"RNN": 1, "GRU": 2, "LSTM": 3}
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_KNOWN = {"Sigmoid", "Tanh", "Relu", "Softsign", "Softplus", *_TAKES}


def _activation(name: str, params: tuple[float, ...], elem: ir.Type) -> Act:
    def c(v: float) -> ir.Value:
        return const_scalar(v, elem)

    if name == "Sigmoid":
        return lambda x: arith.divf(c(1.0), arith.addf(c(1.0), math.exp(arith.negf(x))))
    if name == "Tanh":
        return math.tanh
    if name == "Relu":
        return lambda x: arith.maximumf(x, c(0.0))
    if name == "Softsign":
        return lambda x: arith.divf(x, arith.addf(c(1.0), math.absf(x)))
    if name == "Softplus":
        return lambda x: math.log(arith.addf(math.exp(x), c(1.0)))
    a = params[0]
    if name == "LeakyRelu":
        return lambda x: arith.select(arith.cmpf(arith.CmpFPredicate.OLT, x, c(0.0)), arith.mulf(c(a), x), x)
    if name == "ThresholdedRelu":
        return lambda x: arith.select(arith.cmpf(arith.CmpFPredicate.OGT, x, c(a)), x, c(0.0))
    if name == "Elu":
        return lambda x: arith.select(arith.cmpf(arith.CmpFPredicate.OLT, x, c(0.0)), arith.mulf(c(a), arith.subf(math.exp(x), c(1.0))), x)
    b = params[1]
    if name == "ScaledTanh":
        return lambda x: arith.mulf(c(a), math.tanh(arith.mulf(c(b), x)))
    if name == "HardSigmoid":
        return lambda x: arith.maximumf(c(0.0), arith.minimumf(c(1.0), arith.addf(arith.mulf(c(a), x), c(b))))
    return lambda x: arith.addf(arith.mulf(c(a), x), c(b))  # Affine


def _activations(node: Node, elem: ir.Type, n_dir: int) -> list[list[Act]] | str:
    # Only explicit activations count: the schema default lists two (one per direction).
    names = list(node.attr("activations") or []) if node.has_attr("activations") else []
    k = _N_ACT[node.op_type]
    if not names:
        names = _DEFAULT_ACTS[node.op_type] * n_dir
    if len(names) != k * n_dir:
        return f"{len(names)} activations given, {k * n_dir} expected"
    alphas = list(node.attr("activation_alpha") or [])
    betas = list(node.attr("activation_beta") or [])
    out: list[Act] = []
    for nm in names:
        nm = str(nm)
        if nm not in _KNOWN:
            return f"activation {nm!r} is not lowered"
        takes = _TAKES.get(nm, 0)
        params = list(_DEFAULTS.get(nm, ()))
        if takes >= 1 and alphas:
            params[0] = float(alphas.pop(0))
        if takes >= 2 and betas:
            params[1] = float(betas.pop(0))
        out.append(_activation(nm, tuple(params), elem))
    return [out[d * k : (d + 1) * k] for d in range(n_dir)]


def _check_rnn(node: Node) -> str | None:
    if not is_float(node.in_elem(0)):
        return "integer recurrences"
    direction = node.attr("direction", "forward")
    n_dir = 2 if direction == "bidirectional" else 1
    acts = _activations(node, ir.F32Type.get(), n_dir)
    if isinstance(acts, str):
        return acts
    if node.op_type == "LSTM" and int(node.attr("input_forget", 0)):
        return "input_forget=1 is not lowered"
    if node.has(4) and direction != "forward":
        return "sequence_lens with a reverse direction is not lowered"
    xs = static_shape(node.onnx_types[0])
    if len(xs) != 3:
        return "X must be 3-D"
    return None


def _row(v: ir.Value, d: int) -> ir.Value:
    """v[d] of a [num_dir, ...] tensor, without the leading dim."""
    shape = [dim(v, i) for i in range(len(static_shape(v.type)))]
    return collapse_unit_dims(extract_slice(v, [d] + [0] * (len(shape) - 1), [1] + shape[1:]), [0])


def _cols(v: ir.Value, start: int, n: int) -> ir.Value:
    """Columns start..start+n of a 2-D tensor."""
    return extract_slice(v, [0, start], [dim(v, 0), n])


def _seg(v: ir.Value, start: int, n: int) -> ir.Value:
    return extract_slice(v, [start], [n])


def _transpose(v: ir.Value) -> ir.Value:
    init = empty([dim(v, 1), dim(v, 0)], elem_of(v.type))
    return linalg.transpose(v, outs=[init], permutation=[1, 0]).results[0]


def _require_weight_shapes(node: Node, x: ir.Value, w: ir.Value, r: ir.Value, n_dir: int, gates: int, hid: int) -> None:
    """W must be (num_directions, gates * hidden_size, input_size), R (num_directions, gates *
    hidden_size, hidden_size), B (num_directions, 2 * gates * hidden_size): refused where static
    dims disagree, checked at run time where dynamic. Why: the loops take hidden_size from the
    attribute and read the weights at it: RNN hidden_size 7 with W and R of 4 symbolic rows was
    answered with a (2, 1, 7) state (the compile fuzzer)."""
    from onnxc.transforms.lowering.common import LoweringError, dim_value
    from onnxc.transforms.lowering.runtime_checks import require

    want = {1: [n_dir, gates * hid, dim(x, 2)], 2: [n_dir, gates * hid, hid]}
    if node.has(3):
        want[3] = [n_dir, 2 * gates * hid]
    ok: ir.Value | None = None
    for i, dims in want.items():
        v = node.input(i)
        for j, d in enumerate(dims):
            got = dim(v, j)
            if isinstance(got, int) and isinstance(d, int):
                if got != d:
                    raise LoweringError(f"{node.describe()}: input {i} dim {j} is {got}, {d} expected (hidden_size {hid}, {n_dir} direction(s))")
                continue
            same = arith.cmpi(arith.CmpIPredicate.eq, dim_value(got), dim_value(d))
            ok = same if ok is None else arith.andi(ok, same)
    if ok is not None:
        shapes = [dim_value(dim(node.input(i), j)) for i in want for j in range(len(want[i]))]
        require(ok, node.op, f"the run-time weight shapes {{dims}} do not fit hidden_size {hid}, {n_dir} direction(s) and the input size", [("dims", shapes)])


@lowers("RNN", "GRU", "LSTM", check=_check_rnn)
def lower_rnn(node: Node) -> list[ir.Value | None]:
    """RNN/GRU/LSTM: a time loop per direction (see the module docstring)."""
    kind = node.op_type
    x, w, r = node.input(0), node.input(1), node.input(2)
    onnx_elem = node.in_elem(0)
    elem = convert_element(onnx_elem)
    layout = int(node.attr("layout", 0))
    if layout:
        x = linalg.transpose(x, outs=[empty([dim(x, 1), dim(x, 0), dim(x, 2)], elem)], permutation=[1, 0, 2]).results[0]
    seq, batch = dim(x, 0), dim(x, 1)
    hid = int(node.attr("hidden_size") or static_shape(r.type)[2])
    direction = node.attr("direction", "forward")
    n_dir = 2 if direction == "bidirectional" else 1
    acts = _activations(node, elem, n_dir)
    assert not isinstance(acts, str)
    G = _GATES[kind]
    _require_weight_shapes(node, x, w, r, n_dir, G, hid)
    clip = node.attr("clip")
    lbr = int(node.attr("linear_before_reset", 0)) if kind == "GRU" else 0
    zero = 0.0

    def c(v: float) -> ir.Value:
        return const_scalar(v, elem)

    def clipped(v: ir.Value) -> ir.Value:
        if clip is None:
            return v
        return arith.maximumf(arith.minimumf(v, c(float(clip))), c(-float(clip)))

    lens = None
    if node.has(4):
        lens = node.input(4)
    y = filled([seq, n_dir, batch, hid], elem, zero)
    h_finals, c_finals = [], []
    for d in range(n_dir):
        rev = direction == "reverse" or (direction == "bidirectional" and d == 1)
        wt = _transpose(_row(w, d))  # [I, G*H]
        rt = _transpose(_row(r, d))  # [H, G*H]
        if node.has(3):
            bd = _row(node.input(3), d)
            wb, rb = _seg(bd, 0, G * hid), _seg(bd, G * hid, G * hid)
        else:
            wb = rb = filled([G * hid], elem, zero)
        h0 = _row(node.input(5), d) if node.has(5) else filled([batch, hid], elem, zero)
        carried = [h0]
        if kind == "LSTM":
            carried.append(_row(node.input(6), d) if node.has(6) else filled([batch, hid], elem, zero))
        peep = _row(node.input(7), d) if kind == "LSTM" and node.has(7) else None
        carried.append(y)
        loop = scf.ForOp(const_index(0), seq if isinstance(seq, ir.Value) else const_index(seq), const_index(1), carried)
        with ir.InsertionPoint(loop.body):
            t = loop.induction_variable
            args = list(loop.inner_iter_args)
            h = args[0]
            cst = args[1] if kind == "LSTM" else None
            yy = args[-1]
            if rev:
                last = arith.subi(seq if isinstance(seq, ir.Value) else const_index(seq), const_index(1))
                tt = arith.subi(last, t)
            else:
                tt = t
            xt = collapse_unit_dims(extract_slice(x, [tt, 0, 0], [1, batch, dim(x, 2)]), [0])
            gx = matmul_values(xt, wt, onnx_elem)
            gh = matmul_values(h, rt, onnx_elem)
            # Per-gate views: [B, H] columns of gx/gh, [H] segments of the biases.
            def gate(k: int) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
                return _cols(gx, k * hid, hid), _cols(gh, k * hid, hid), _seg(wb, k * hid, hid), _seg(rb, k * hid, hid)

            f_act = acts[d][0]
            if kind == "RNN":
                a, b, bw, br = gate(0)
                h_new = elementwise([a, b, bw, br], elem, lambda p, q, u, v: f_act(clipped(arith.addf(arith.addf(p, q), arith.addf(u, v)))), out_shape=[batch, hid])
                c_new = None
            elif kind == "GRU":
                g_act = acts[d][1]
                az, bz, wz, rz = gate(0)
                ar, br_, wr, rr = gate(1)
                ah, bh, wh, rh = gate(2)
                z = elementwise([az, bz, wz, rz], elem, lambda p, q, u, v: f_act(clipped(arith.addf(arith.addf(p, q), arith.addf(u, v)))), out_shape=[batch, hid])
                rg = elementwise([ar, br_, wr, rr], elem, lambda p, q, u, v: f_act(clipped(arith.addf(arith.addf(p, q), arith.addf(u, v)))), out_shape=[batch, hid])
                if lbr:
                    hh = elementwise([ah, bh, wh, rh, rg], elem, lambda p, q, u, v, s: g_act(clipped(arith.addf(arith.addf(p, u), arith.mulf(s, arith.addf(q, v))))), out_shape=[batch, hid])
                else:
                    rh_t = _cols(rt, 2 * hid, hid)
                    rhp = elementwise([rg, h], elem, lambda s, v: arith.mulf(s, v), out_shape=[batch, hid])
                    gh2 = matmul_values(rhp, rh_t, onnx_elem)
                    hh = elementwise([ah, gh2, wh, rh], elem, lambda p, q, u, v: g_act(clipped(arith.addf(arith.addf(p, q), arith.addf(u, v)))), out_shape=[batch, hid])
                h_new = elementwise([z, hh, h], elem, lambda zz, n, hp: arith.addf(arith.mulf(arith.subf(c(1.0), zz), n), arith.mulf(zz, hp)), out_shape=[batch, hid])
                c_new = None
            else:  # LSTM, gates i, o, f, c
                g_act, h_act = acts[d][1], acts[d][2]
                ai, bi, wi, ri = gate(0)
                ao, bo, wo, ro = gate(1)
                af, bf, wf, rf = gate(2)
                ac, bc, wc, rc = gate(3)
                assert cst is not None
                pi = _seg(peep, 0, hid) if peep is not None else filled([hid], elem, zero)
                po = _seg(peep, hid, hid) if peep is not None else filled([hid], elem, zero)
                pf = _seg(peep, 2 * hid, hid) if peep is not None else filled([hid], elem, zero)

                def pre(p: ir.Value, q: ir.Value, u: ir.Value, v: ir.Value) -> ir.Value:
                    return arith.addf(arith.addf(p, q), arith.addf(u, v))

                ig = elementwise([ai, bi, wi, ri, pi, cst], elem, lambda p, q, u, v, pp, cc: f_act(clipped(arith.addf(pre(p, q, u, v), arith.mulf(pp, cc)))), out_shape=[batch, hid])
                fg = elementwise([af, bf, wf, rf, pf, cst], elem, lambda p, q, u, v, pp, cc: f_act(clipped(arith.addf(pre(p, q, u, v), arith.mulf(pp, cc)))), out_shape=[batch, hid])
                cg = elementwise([ac, bc, wc, rc], elem, lambda p, q, u, v: g_act(clipped(pre(p, q, u, v))), out_shape=[batch, hid])
                c_new = elementwise([fg, cst, ig, cg], elem, lambda f_, cc, i_, g_: arith.addf(arith.mulf(f_, cc), arith.mulf(i_, g_)), out_shape=[batch, hid])
                og = elementwise([ao, bo, wo, ro, po, c_new], elem, lambda p, q, u, v, pp, cc: f_act(clipped(arith.addf(pre(p, q, u, v), arith.mulf(pp, cc)))), out_shape=[batch, hid])
                h_new = elementwise([og, c_new], elem, lambda o_, cc: arith.mulf(o_, h_act(cc)), out_shape=[batch, hid])
            y_row = h_new
            if lens is not None:
                # Rows past their length keep their state; their Y rows are zero.
                le = node.in_elem(4)
                lens_col = expand_unit_dims(lens, [1])

                def live(ln: ir.Value) -> ir.Value:
                    return arith.cmpi(arith.CmpIPredicate.slt, tt, to_index(ln, le))

                h_new = elementwise([lens_col, h_new, h], elem, lambda ln, nv, ov: arith.select(live(ln), nv, ov), out_shape=[batch, hid])
                y_row = elementwise([lens_col, y_row], elem, lambda ln, nv: arith.select(live(ln), nv, c(0.0)), out_shape=[batch, hid])
                if c_new is not None:
                    c_new = elementwise([lens_col, c_new, cst], elem, lambda ln, nv, ov: arith.select(live(ln), nv, ov), out_shape=[batch, hid])
            yy = insert_slice(expand_unit_dims(expand_unit_dims(y_row, [0]), [0]), yy, [tt, d, 0, 0])
            # A state computed from a static operand (the peepholes' [3 * H] with H static) can
            # be more static than its loop-carried type ([?, ?] from a symbolic initial state):
            # yield it as the carried type (`cast_to_type`: here a cast that only forgets sizes).
            yielded = [h_new] + ([c_new] if c_new is not None else []) + [yy]
            scf.YieldOp([cast_to_type(v, a.type) for v, a in zip(yielded, args)])
        res = list(loop.results)
        h_finals.append(res[0])
        if kind == "LSTM":
            c_finals.append(res[1])
        y = res[-1]

    def stack(vals: list[ir.Value]) -> ir.Value:
        out = empty([n_dir, batch, hid], elem)
        for d, v in enumerate(vals):
            out = insert_slice(expand_unit_dims(v, [0]), out, [d, 0, 0])
        return out

    y_h = stack(h_finals)
    y_c = stack(c_finals) if kind == "LSTM" else None
    if layout:
        y = linalg.transpose(y, outs=[empty([batch, seq, n_dir, hid], elem)], permutation=[2, 0, 1, 3]).results[0]
        y_h = linalg.transpose(y_h, outs=[empty([batch, n_dir, hid], elem)], permutation=[1, 0, 2]).results[0]
        if y_c is not None:
            y_c = linalg.transpose(y_c, outs=[empty([batch, n_dir, hid], elem)], permutation=[1, 0, 2]).results[0]
    results: list[ir.Value | None] = [y, y_h] + ([y_c] if kind == "LSTM" else [])
    return [v if not isinstance(res_t.type, ir.NoneType) else None for v, res_t in zip(results, node.op.results)]
