"""The audio front-end ops: STFT (opset 17) and MelWeightMatrix (opset 17).

STFT: one reduction `linalg.generic` over the output (B, frames, bins, 2) and the samples n of
a frame: bin k of frame f is sum_n window[n] * x[f * frame_step + n] * exp(-2 pi i k n / L),
the twiddle angle taken from (k * n mod L) and everything accumulated in f64, as the DFT
lowering does (`spectral.py`). frame_step, frame_length and the window are run-time values,
so the frame count 1 + (N - L) / frame_step, the bin count (L / 2 + 1 when onesided, the
default) and the reduction range (a `tensor.empty` of the run-time frame length, read only for
its loop range) are run-time sizes. A window shorter than frame_length leaves the frame zero
padded; a longer one is cut to frame_length, as the reference's DFT with `n=frame_length` does.

MelWeightMatrix: one `linalg.generic` over (dft_length / 2 + 1, num_mel_bins) computing each
weight in closed form from the three band edges of its mel bin: the reference's triangle
(a rising ramp up to the centre, then a falling one, the falling one written last), with the
band edges computed in the reference's precision (the mel conversion of the edge frequencies
in the input float type, the rest in f64, numpy's floor division) so the integer edges agree.
"""

from __future__ import annotations

import math as pymath

from mlir import ir
from mlir.dialects import arith, math, tensor

from onnxc.transforms.lowering.common import (
    Node,
    affine_map,
    const_index,
    const_scalar,
    convert_element,
    convert_scalar,
    convert_tensor,
    dim,
    dim_value,
    empty,
    filled,
    generic,
    identity_map,
    index_of,
    is_float,
    is_int,
    lowers,
    rank_of,
    scalar_of,
    static_shape,
    to_index,
)

P = arith.CmpIPredicate
F = arith.CmpFPredicate


def _is_scalar(t: ir.Type | None) -> bool:
    return isinstance(t, ir.RankedTensorType) and all(d == 1 for d in static_shape(t))


def _check_stft(node: Node) -> str | None:
    """A (B, N, 1|2) float signal, scalar frame_step/frame_length, a 1-D window."""
    t = node.onnx_types[0]
    if not isinstance(t, ir.RankedTensorType) or rank_of(t) != 3 or static_shape(t)[2] not in (1, 2):
        return "signal must be (batch, length, 1 or 2)"
    if not is_float(node.in_elem(0)):
        return "signal must be a float tensor"
    for i in (1, 3):
        if node.has(i) and not _is_scalar(node.onnx_types[i]):
            return f"input {i} must be a scalar"
    if node.has(2):
        w = node.onnx_types[2]
        if not isinstance(w, ir.RankedTensorType) or rank_of(w) != 1:
            return "window must be 1-D"
    return None


@lowers("STFT", check=_check_stft)
def lower_stft(node: Node) -> list[ir.Value]:
    """STFT (see the module docstring)."""
    f64 = ir.F64Type.get()
    i64 = ir.IntegerType.get_signless(64)
    x = node.input(0)
    x_elem = node.in_elem(0)
    complex_in = static_shape(x.type)[2] == 2
    onesided = bool(int(node.attr("onesided", 1)))
    b, n_sig = dim(x, 0), dim_value(dim(x, 1))
    step = to_index(scalar_of(node.input(1)), node.in_elem(1))
    window = convert_tensor(node.input(2), node.in_elem(2), f64) if node.has(2) else None
    if node.has(3):
        length = to_index(scalar_of(node.input(3)), node.in_elem(3))
    elif window is not None:
        length = dim_value(dim(window, 0))
    else:
        length = n_sig
    used = arith.minsi(dim_value(dim(window, 0)), length) if window is not None else length
    zero = const_index(0)
    frames = arith.maxsi(arith.addi(arith.floordivsi(arith.subi(n_sig, length), step), const_index(1)), zero)
    bins = arith.addi(arith.divsi(length, const_index(2)), const_index(1)) if onesided else length

    def body(a: list[ir.Value]) -> list[ir.Value]:
        f, k, ch, n = index_of(1), index_of(2), index_of(3), index_of(4)
        pos = arith.addi(arith.muli(f, step), n)
        inside = arith.cmpi(P.slt, pos, n_sig)
        pos = arith.select(inside, pos, zero)
        bi = index_of(0)

        def read(c: int) -> ir.Value:
            v = convert_scalar(tensor.extract(x, [bi, pos, const_index(c)]), x_elem, f64)
            return arith.select(inside, v, const_scalar(0.0, f64))

        xr = read(0)
        xi = read(1) if complex_in else const_scalar(0.0, f64)
        if window is not None:
            wv = tensor.extract(window, [n])
            xr, xi = arith.mulf(xr, wv), arith.mulf(xi, wv)
        kn = arith.remui(arith.muli(k, n), length)
        ang = arith.divf(
            arith.mulf(arith.sitofp(f64, arith.index_cast(i64, kn)), const_scalar(2 * pymath.pi, f64)),
            arith.sitofp(f64, arith.index_cast(i64, length)),
        )
        cs, sn = math.cos(ang), math.sin(ang)
        re = arith.addf(arith.mulf(xr, cs), arith.mulf(xi, sn))
        im = arith.subf(arith.mulf(xi, cs), arith.mulf(xr, sn))
        return [arith.addf(a[1], arith.select(arith.cmpi(P.eq, ch, const_index(1)), im, re))]

    samples = empty([used], f64)
    init = filled([b, frames, bins, 2], f64, 0.0)
    acc = generic(
        [samples], [init], [affine_map(5, [4]), affine_map(5, [0, 1, 2, 3])],
        ["parallel"] * 4 + ["reduction"], body,
    )[0]
    return [convert_tensor(acc, f64, node.out_elem(0))]


def _check_mel(node: Node) -> str | None:
    """Five scalars: three integers, two floats."""
    for i in range(5):
        if not _is_scalar(node.onnx_types[i]):
            return f"input {i} must be a scalar"
    if not all(is_int(node.in_elem(i)) for i in range(3)) or not all(is_float(node.in_elem(i)) for i in (3, 4)):
        return "num_mel_bins, dft_length, sample_rate must be integers; the edges floats"
    return None


@lowers("MelWeightMatrix", check=_check_mel)
def lower_mel_weight_matrix(node: Node) -> list[ir.Value]:
    """MelWeightMatrix (see the module docstring)."""
    f64 = ir.F64Type.get()
    i64 = ir.IntegerType.get_signless(64)
    n_mel = to_index(scalar_of(node.input(0)), node.in_elem(0))
    dft_len = to_index(scalar_of(node.input(1)), node.in_elem(1))
    sample_rate = to_index(scalar_of(node.input(2)), node.in_elem(2))
    edge_elem = node.in_elem(3)
    ft = f64 if edge_elem == f64 else ir.F32Type.get()

    def c(v: float, t: ir.Type = f64) -> ir.Value:
        return const_scalar(v, t)

    def to_f(i: ir.Value) -> ir.Value:
        return arith.sitofp(f64, arith.index_cast(i64, i))

    def mel(i: int) -> ir.Value:
        # 2595 * log1p(hz / 700) in the edge type, then / ln(10) in f64 (numpy's promotion).
        hz = convert_scalar(scalar_of(node.input(i)), node.in_elem(i), ft)
        m = arith.mulf(c(2595.0, ft), math.log1p(arith.divf(hz, c(700.0, ft))))
        return arith.divf(convert_scalar(m, ft, f64), c(pymath.log(10.0)))

    low, high = mel(3), mel(4)
    mel_step = arith.divf(arith.subf(high, low), to_f(arith.addi(n_mel, const_index(2))))
    scale = to_f(arith.addi(dft_len, const_index(1)))
    rate = to_f(sample_rate)

    def floor_div(a: ir.Value, b: ir.Value) -> ir.Value:
        """numpy's float floor division (npy_divmod)."""
        mod = arith.remf(a, b)
        div = arith.divf(arith.subf(a, mod), b)
        fix = arith.andi(arith.cmpf(F.UNE, mod, c(0.0)), arith.xori(arith.cmpf(F.OLT, b, c(0.0)), arith.cmpf(F.OLT, mod, c(0.0))))
        div = arith.select(fix, arith.subf(div, c(1.0)), div)
        fl = math.floor(div)
        return arith.select(arith.cmpf(F.OGT, arith.subf(div, fl), c(0.5)), arith.addf(fl, c(1.0)), fl)

    def edge(i: ir.Value) -> ir.Value:
        """Band edge i as an integer bin (f64 holding an integer)."""
        m = arith.addf(arith.mulf(to_f(i), mel_step), low)
        hz = arith.mulf(c(700.0), math.expm1(arith.mulf(arith.divf(m, c(2595.0)), c(pymath.log(10.0)))))
        return arith.sitofp(f64, arith.fptosi(i64, floor_div(arith.mulf(scale, hz), rate)))

    out_elem = node.out_elem(0)
    n_spec = arith.addi(arith.divsi(dft_len, const_index(2)), const_index(1))

    def body(a: list[ir.Value]) -> list[ir.Value]:
        j, i = to_f(index_of(0)), index_of(1)
        lo = edge(i)
        ce = edge(arith.addi(i, const_index(1)))
        hi = edge(arith.addi(i, const_index(2)))
        falling = arith.andi(arith.cmpf(F.OGT, hi, ce), arith.andi(arith.cmpf(F.OGE, j, ce), arith.cmpf(F.OLT, j, hi)))
        v_fall = arith.divf(arith.subf(hi, j), arith.subf(hi, ce))
        point = arith.cmpf(F.OEQ, lo, ce)
        v_point = arith.select(arith.cmpf(F.OEQ, j, ce), c(1.0), c(0.0))
        rising = arith.andi(arith.cmpf(F.OGE, j, lo), arith.cmpf(F.OLE, j, ce))
        v_rise = arith.select(rising, arith.divf(arith.subf(j, lo), arith.subf(ce, lo)), c(0.0))
        v = arith.select(falling, v_fall, arith.select(point, v_point, v_rise))
        return [convert_scalar(v, f64, out_elem)]

    out = empty([n_spec, n_mel], convert_element(out_elem))
    return [generic([], [out], [identity_map(2)], ["parallel"] * 2, body)[0]]
