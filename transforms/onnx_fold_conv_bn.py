"""`onnx-fold-conv-bn`: fold inference BatchNormalization and per-channel scale/bias into the
preceding Conv's weights and bias, at compile time.

Why: a CNN exported for inference carries Conv -> BatchNormalization (ResNet, MobileNet,
EfficientNet) or Conv -> Mul/Add by per-channel constants (a BN already rewritten by an
exporter). At run time each is a full pass over the activation; folded, it costs nothing:

    BatchNormalization(Conv(x, W, b), scale, B, mean, var, epsilon)
        = Conv(x, W * s, (b - mean) * s + B)      with s = scale / sqrt(var + epsilon)
    Conv(x, W, b) * c = Conv(x, W * c, b * c)     Conv(x, W, b) / c = Conv(x, W / c, b / c)
    Conv(x, W, b) + c = Conv(x, W, b + c)         Conv(x, W, b) - c = Conv(x, W, b - c)

for `c` constant and per output channel (every dim but the channel one of size 1, broadcasting to
the Conv's output without changing its shape). The new weights are new `onnx.constant`s (computed
in float64, stored in the weights' type); the old ones are left for `onnx-canonicalize` to erase
when nothing else uses them.

When: only float Convs whose result has no other use (else the other users would see the folded
values), with constant weights (bias constant or omitted), BatchNormalization not in training
mode and with its running-statistics outputs unused. The pass runs after `onnx-constant-fold`,
so weights computed by constant subgraphs count as constants too. Chains (Conv -> BN -> Mul) fold
one step at a time until nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mlir import ir

from onnxc.transforms import onnx_utils as U
from onnxc.transforms.pass_base import ModulePass

__all__ = ["OnnxFoldConvBnPass", "fold_conv_bn"]

#: The binary ops folded, and whether the Conv may be their second operand too.
_BINARY: dict[str, bool] = {"Mul": True, "Add": True, "Sub": False, "Div": False}


def _op_type(op: ir.Operation) -> str | None:
    info = U.info_of(op)
    return info.op_type if info is not None else None


def _constant(v: ir.Value) -> np.ndarray | None:
    """The value of an `onnx.constant` result, `dense_resource` weights included (the bindings do
    not downcast those attributes, so `onnx_utils.constant_value` passes them by; the importer's
    reader checks their kind and reads the blob)."""
    found = U.constant_value(v)
    if found is not None or not U.is_constant(v):
        return found
    owner = _producer(v)
    if owner is None or "value" not in owner.attributes:
        return None
    from onnxc.importers.errors import ImportError_
    from onnxc.importers.tensors import attribute_to_array

    try:
        return np.asarray(attribute_to_array(owner.attributes["value"])[0])
    except ImportError_:
        return None


def _producer(v: ir.Value) -> ir.Operation | None:
    if not isinstance(v, ir.OpResult):
        return None
    owner = v.owner
    return owner.operation if isinstance(owner, ir.OpView) else owner


def _foldable_conv(v: ir.Value) -> tuple[ir.Operation, np.ndarray, np.ndarray | None] | None:
    """(conv, weights, bias or None) when `v` is the only-used result of a float Conv with constant
    weights (and constant or omitted bias)."""
    conv = _producer(v)
    if conv is None or _op_type(conv) != "Conv" or len(list(v.uses)) != 1:
        return None
    w = _constant(conv.operands[1])
    if w is None or w.dtype.kind != "f" or w.ndim < 3:
        return None
    b = None
    if len(conv.operands) > 2 and not U.is_none_value(conv.operands[2]):
        b = _constant(conv.operands[2])
        if b is None or b.shape != (w.shape[0],):
            return None
    return conv, w, b


def _per_channel(c: np.ndarray, out_rank: int, channels: int) -> np.ndarray | None:
    """`c` as a vector over the output channels (axis 1 of a rank-`out_rank` output), or None when
    it varies along another axis or would broadcast the output to a larger shape."""
    if c.ndim > out_rank or c.dtype.kind != "f":
        return None
    shape = (1,) * (out_rank - c.ndim) + tuple(c.shape)
    for axis, size in enumerate(shape):
        if axis != 1 and size != 1:
            return None
    if shape[1] not in (1, channels):
        return None
    return np.broadcast_to(c.reshape(shape[1]).astype(np.float64), (channels,))


def _rewrite(conv: ir.Operation, w: np.ndarray, b: np.ndarray, dtype: np.dtype) -> bool:
    """Give `conv` the weights `w` and bias `b` as new constants (placed before it)."""
    with ir.InsertionPoint(conv), conv.location:
        wv = U.make_constant(w.astype(dtype))
        bv = U.make_constant(b.astype(dtype))
    if wv is None or bv is None:
        return False
    conv.operands[1] = wv
    conv.operands[2] = bv
    return True


def _fold_bn(bn: ir.Operation) -> bool:
    if int(U.attr_value(bn, "training_mode", 0) or 0):
        return False
    if any(not isinstance(r.type, ir.NoneType) and U.value_used(r) for r in list(bn.results)[1:]):
        return False
    found = _foldable_conv(bn.operands[0])
    if found is None:
        return False
    conv, w, b = found
    if U.refine_type(conv.results[0].type, bn.results[0].type) is None:
        return False
    params = [_constant(bn.operands[i]) for i in range(1, 5)]
    if any(p is None or p.shape != (w.shape[0],) for p in params):
        return False
    scale, shift, mean, var = (np.asarray(p, dtype=np.float64) for p in params)  # type: ignore[arg-type]
    eps = float(U.attr_value(bn, "epsilon", 1e-5))
    s = scale / np.sqrt(var + eps)
    bias = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    new_w = w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))
    if not _rewrite(conv, new_w, (bias - mean) * s + shift, w.dtype):
        return False
    return _replace(bn, conv)


def _fold_binary(op: ir.Operation, kind: str) -> bool:
    a, c_val = op.operands[0], op.operands[1]
    found = _foldable_conv(a)
    if found is None and _BINARY[kind]:
        a, c_val = c_val, a
        found = _foldable_conv(a)
    if found is None:
        return False
    conv, w, b = found
    if U.refine_type(conv.results[0].type, op.results[0].type) is None:
        return False
    c = _constant(c_val)
    if c is None or c.dtype != w.dtype:
        return False
    out_rank = len(ir.RankedTensorType(conv.results[0].type).shape) if isinstance(conv.results[0].type, ir.RankedTensorType) else w.ndim
    v = _per_channel(c, out_rank, w.shape[0])
    if v is None:
        return False
    bias = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    w64 = w.astype(np.float64)
    col = (-1,) + (1,) * (w.ndim - 1)
    if kind == "Mul":
        new_w, new_b = w64 * v.reshape(col), bias * v
    elif kind == "Div":
        if not np.all(v != 0):
            return False
        new_w, new_b = w64 / v.reshape(col), bias / v
    elif kind == "Add":
        new_w, new_b = w64, bias + v
    else:
        new_w, new_b = w64, bias - v
    if not _rewrite(conv, new_w, new_b, w.dtype):
        return False
    return _replace(op, conv)


def _replace(old: ir.Operation, conv: ir.Operation) -> bool:
    """`old`'s first result becomes the Conv's result (typed as the more precise of the two: a
    function result must not lose the static shape shape inference gave `old`); `old` is erased."""
    merged = U.refine_type(conv.results[0].type, old.results[0].type)
    if merged is not None and merged != conv.results[0].type:
        conv.results[0].set_type(merged)
    if not U.replace_value(old.results[0], conv.results[0]):
        return False
    if not U.has_uses(old):
        old.erase()
    return True


def fold_conv_bn(module: ir.Operation) -> int:
    """Fold every qualifying BN/Mul/Add/Sub/Div into its Conv; returns how many were folded."""
    folded = 0
    while True:
        changed = 0
        for op in U.collect_ops(module, U.is_onnx_op):
            kind = _op_type(op)
            if kind == "BatchNormalization":
                changed += _fold_bn(op)
            elif kind in _BINARY:
                changed += _fold_binary(op, kind)
        folded += changed
        if not changed:
            return folded


@dataclass(frozen=True)
class OnnxFoldConvBnPass(ModulePass):
    """Fold inference BatchNormalization and per-channel Mul/Add/Sub/Div into the preceding Conv."""

    name = "onnx-fold-conv-bn"

    def run(self, module: ir.Operation) -> None:
        module = module.operation
        with module.context, ir.Location.unknown():
            fold_conv_bn(module)
