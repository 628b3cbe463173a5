"""`onnx-canonicalize`: put ONNX-dialect IR into the one form later passes expect, and drop what
does nothing.

Why: ONNX lets one thing be written several ways (a Constant's value as `value`, `value_float`,
`value_ints`, ..., `sparse_value`; an omitted input as any number of `onnx.none` ops), and
exported models carry ops that do nothing at inference time (Identity, Dropout, Cast to the same
type, Reshape to the same shape). Lowering patterns then need one case each instead of several.
IRDL ops carry no `Pure` trait, so MLIR's own `canonicalize`/`cse` neither erase nor merge them:
dead-code removal has to be done here.

What it does, in this order:

1. **Constants**: every `onnx.constant` spelled with `value_float(s)`, `value_int(s)`,
   `value_string(s)` or (up to `sparse_limit` elements) `sparse_value` becomes one with `value`
   (an elements attribute; `value_float` -> `tensor<f32>`, `value_ints` -> `tensor<Nxi64>`...).
2. **No-op removal** (results replaced by the input where the types allow): If with a constant
   condition (the taken branch's ops move before it); Identity; Dropout
   when not training (no `training_mode` input, or a constant false one; Dropout-1/6 with
   `is_test = 1`; a used mask output becomes a constant-true ConstantOfShape); Cast to the input's
   own type (not a saturating float8 cast); Transpose by the identity permutation; Reshape,
   Expand, Squeeze and Flatten whose static input type equals the output type.
3. **Sharing**: one `onnx.none` per function, at the start of its body; identical constants in a
   block become one.
4. **Dead code**: ONNX ops none of whose results is used are erased (innermost first, so whole
   dead chains and dead subgraph ops go in one sweep). `onnx.custom` ops are kept unless
   `remove_dead_custom` is set, as their semantics are unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mlir import ir

from onnxc.dialect.builder import onnx_op
from onnxc.dialect.opinfo import OpInfo
from onnxc.transforms import onnx_utils as U
from onnxc.transforms.pass_base import ModulePass

_VALUE_VARIANTS = ("value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings", "sparse_value")


@dataclass(frozen=True)
class OnnxCanonicalizePass(ModulePass):
    """Normalize Constants, remove no-op ops, share `onnx.none` and identical constants, erase dead ops.

    Options: `remove_dead` (dead-code removal, on by default), `remove_dead_custom` (also erase
    unused `onnx.custom` ops), `sparse_limit` (largest dense size a `sparse_value` Constant is
    expanded to).
    """

    name = "onnx-canonicalize"
    remove_dead: bool = True
    remove_dead_custom: bool = False
    sparse_limit: int = 1 << 20

    def run(self, module: ir.Operation) -> None:
        module = module.operation
        with module.context, ir.Location.unknown():
            canonicalize(module, self)


def canonicalize(module: ir.Operation, options: OnnxCanonicalizePass | None = None) -> dict[str, int]:
    """Run every step on `module`; returns counts of what was done per step."""
    options = options or OnnxCanonicalizePass()
    stats = {"constants": 0, "noops": 0, "nones": 0, "shared_constants": 0, "dead": 0}
    for op in U.collect_ops(module, U.is_constant_op):
        stats["constants"] += _normalize_constant(op, options.sparse_limit)
    # Ifs innermost first (reverse pre-order): inlining one erases the branch it does not take,
    # and with it nested ops that must not be visited afterwards.
    for op in reversed(U.collect_ops(module, lambda o: o.name.startswith("onnx.if"))):
        info = U.info_of(op)
        if info is not None and info.op_type == "If":
            stats["noops"] += _inline_constant_if(op, info)
    for op in U.collect_ops(module, U.is_onnx_op):
        stats["noops"] += _remove_noop(op)
    for fn in U.functions(module):
        stats["nones"] += _dedupe_nones(fn)
    stats["shared_constants"] += _dedupe_constants(module)
    if options.remove_dead:
        stats["dead"] += remove_dead_ops(module, options.remove_dead_custom)
    return stats


# --- 1. constants ---------------------------------------------------------------------------------


def _constant_array(op: ir.Operation, sparse_limit: int) -> tuple[np.ndarray, ir.Type | None] | None:
    attrs = op.attributes
    if "value_float" in attrs:
        return np.array(ir.FloatAttr(attrs["value_float"]).value, dtype=np.float32), None
    if "value_floats" in attrs:
        return np.array(list(ir.DenseF32ArrayAttr(attrs["value_floats"])), dtype=np.float32), None
    if "value_int" in attrs:
        return np.array(ir.IntegerAttr(attrs["value_int"]).value, dtype=np.int64), None
    if "value_ints" in attrs:
        return np.array(list(ir.DenseI64ArrayAttr(attrs["value_ints"])), dtype=np.int64), None
    string_type = ir.Type.parse("!onnx.string")
    if "value_string" in attrs:
        return np.array(ir.StringAttr(attrs["value_string"]).value, dtype=object), string_type
    if "value_strings" in attrs:
        return np.array([ir.StringAttr(a).value for a in ir.ArrayAttr(attrs["value_strings"])], dtype=object), string_type
    if "sparse_value" in attrs:
        return _sparse_to_dense(attrs["sparse_value"], sparse_limit)
    return None


def _sparse_to_dense(attr: ir.Attribute, limit: int) -> tuple[np.ndarray, ir.Type | None] | None:
    try:
        from onnx import numpy_helper

        from onnxc.importers.tensors import attribute_to_sparse_tensor

        sp = attribute_to_sparse_tensor(attr, "sparse")
    except Exception:  # noqa: BLE001 - no reader, or an attribute it rejects: leave the constant
        return None
    dims = [int(d) for d in sp.dims]
    if int(np.prod(dims)) > limit:
        return None
    values = numpy_helper.to_array(sp.values)
    indices = numpy_helper.to_array(sp.indices).astype(np.int64)
    dense = np.zeros(int(np.prod(dims)), dtype=values.dtype)
    if indices.ndim == 2:  # [NNZ, rank] coordinates
        flat = np.ravel_multi_index(tuple(indices.T), dims) if indices.size else np.zeros(0, np.int64)
    else:
        flat = indices.reshape(-1)
    dense[flat] = values.reshape(-1)
    elem = ir.ShapedType(attr.type).element_type
    return dense.reshape(dims), elem


def _normalize_constant(op: ir.Operation, sparse_limit: int) -> int:
    if "value" in op.attributes or not any(k in op.attributes for k in _VALUE_VARIANTS):
        return 0
    got = _constant_array(op, sparse_limit)
    if got is None:
        return 0
    array, elem = got
    attr = U.elements_attr(array, elem)
    if attr is None:
        return 0
    with ir.InsertionPoint(op), op.location:
        new = onnx_op(op.name, [], [attr.type], {"value": attr})  # the same version of Constant
    if U.replace_op(op, [new.result]):
        return 1
    # Some user cannot take the new type (a subgraph yield, a variadic tail): the original
    # spelling stays for it; the new constant serves the others, or goes if it serves none.
    if not U.has_uses(new):
        new.erase()
    return 0


# --- 2. no-ops --------------------------------------------------------------------------------------


def _static_equal(a: ir.Type, b: ir.Type) -> bool:
    shape = U.shape_of(a)
    return a == b and shape is not None and all(d >= 0 for d in shape)


def _remove_noop(op: ir.Operation) -> int:
    info = U.info_of(op)
    if info is None or not op.operands:
        return 0
    t = info.op_type
    src = op.operands[0]
    if t == "Identity":
        return _forward(op, src)
    if t == "Dropout":
        return _remove_dropout(op, info.since_versions[0])
    if t == "Cast":
        if U.is_tensor_type(src.type) and U.element_type_of(src.type) == U.element_type_of(op.results[0].type):
            return _forward(op, src)
        return 0
    if t == "Transpose":
        perm = U.attr_value(op, "perm", None)
        shape = U.shape_of(src.type)
        if perm is not None and list(perm) == list(range(len(perm))):
            return _forward(op, src)
        if perm is None and shape is not None and len(shape) <= 1:
            return _forward(op, src)
        return 0
    if t in ("Reshape", "Expand", "Squeeze", "Flatten"):
        # Not Unsqueeze: it always adds dims, so equal types mean a declared result type that
        # contradicts the op (the compile fuzzer: a rank-4 input whose Unsqueeze was declared rank
        # 4 returned the input); the lowering refuses it instead of forwarding it. The others
        # only when what the op computes from the input's shape is that shape: a LogSoftmax-1
        # upgraded to 13 (Flatten, LogSoftmax, Reshape back to Shape(x)) whose result was
        # declared [1, 3] for a [1, 1, 3] input returned [1, 3] (compile fuzzer seed 404 case
        # 6628); the lowering refuses the contradiction.
        if _static_equal(src.type, op.results[0].type) and _computes_own_shape(op, t):
            return _forward(op, src)
    return 0


def _computes_own_shape(op: ir.Operation, op_type: str) -> bool:
    """Whether a Reshape/Expand/Squeeze/Flatten of a static input computes the input's own shape
    (from its constant shape or axes and its attributes): only then is it a no-op. A target
    shape fed at run time may contradict the declared result type, which the lowering then
    checks at run time (it is not trusted)."""
    shape = U.shape_of(op.operands[0].type) or []
    if op_type == "Flatten":
        axis = int(U.attr_value(op, "axis", 1))
        axis = axis + len(shape) if axis < 0 else axis
        return 0 <= axis <= len(shape) and [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))] == shape
    if op_type == "Squeeze":
        axes = U.constant_value(op.operands[1]) if len(op.operands) > 1 else U.attr_value(op, "axes", None)
        if len(op.operands) > 1 and axes is None:
            return False
        return (axes is None or len(np.asarray(axes).reshape(-1)) == 0) and 1 not in shape
    if len(op.operands) < 2:
        return False
    target = U.constant_value(op.operands[1])
    if target is None:
        return False
    target = [int(d) for d in np.asarray(target).reshape(-1)]
    if op_type == "Expand":
        try:
            return list(np.broadcast_shapes(tuple(shape), tuple(target))) == shape
        except ValueError:
            return False
    allowzero = int(U.attr_value(op, "allowzero", 0))
    out = [shape[i] if d == 0 and not allowzero and i < len(shape) else d for i, d in enumerate(target)]
    if out.count(-1) == 1:
        known = int(np.prod([d for d in out if d != -1]))
        out = [int(np.prod(shape)) // known if d == -1 and known else d for d in out]
    return out == shape


def _forward(op: ir.Operation, value: ir.Value, result_index: int = 0) -> int:
    done = U.replace_value(op.results[result_index], value)
    if done and not U.has_uses(op):
        op.erase()
    return 1 if done else 0


def _inline_constant_if(op: ir.Operation, info: OpInfo) -> int:
    """An If whose condition is a constant is replaced by the ops of the branch it takes."""
    cond = U.constant_value(op.operands[0], 1)
    names = info.regions  # regions follow the sorted GRAPH attribute names
    if cond is None or cond.size != 1 or len(op.regions) != 2 or set(names) != {"else_branch", "then_branch"}:
        return 0
    region = op.regions[names.index("then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")]
    if len(region.blocks) != 1:
        return 0
    body = U.block_ops(region.blocks[0])
    if not body:
        return 0
    term = body[-1]
    if len(term.operands) != len(op.results):
        return 0
    for inner in body[:-1]:
        inner.move_before(op)
    for res, v in zip(op.results, list(term.operands)):
        U.replace_value(res, v)
    if not U.has_uses(op):
        op.erase()
    return 1


def _is_false_constant(v: ir.Value) -> bool:
    arr = U.constant_value(v, 1)
    return arr is not None and arr.size == 1 and not bool(arr.reshape(-1)[0])


def _remove_dropout(op: ir.Operation, since: int) -> int:
    if since < 7:
        if int(U.attr_value(op, "is_test", 0) or 0) != 1:
            return 0
    elif since >= 12 and len(op.operands) > 2 and not U.is_none_value(op.operands[2]) and not _is_false_constant(op.operands[2]):
        return 0  # training mode, or not known to be off
    data = op.operands[0]
    if len(op.results) > 1 and not U.is_none_value(op.results[1]) and U.value_used(op.results[1]):
        mask = op.results[1]
        mask_elem = U.element_type_of(mask.type)
        dtype = U.numpy_dtype_of(mask_elem) if mask_elem is not None else None
        if dtype is None or not U.is_tensor_type(data.type):
            return 0
        with ir.InsertionPoint(op), op.location:
            shape_type = U.ranked_type([len(U.shape_of(data.type))] if U.shape_of(data.type) is not None else [-1], ir.IntegerType.get_signless(64))
            shape = onnx_op("Shape", [data], [shape_type]).result
            ones = onnx_op("ConstantOfShape", [shape], [mask.type], {"value": np.ones([1], dtype=dtype)}).result
        if not U.replace_value(mask, ones):
            return 0
    if not U.replace_value(op.results[0], data):
        return 0
    if not U.has_uses(op):
        op.erase()
    return 1


# --- 3. onnx.none -------------------------------------------------------------------------------------


def _dedupe_nones(fn: ir.Operation) -> int:
    body = fn.regions[0]
    if not body.blocks:
        return 0
    nones = U.collect_ops(fn, lambda o: o.name == U.NONE_OP)
    if not nones:
        return 0
    keep = nones[0]
    entry_ops = U.block_ops(body.blocks[0])
    first = entry_ops[0] if entry_ops else None
    if first is not None and first != keep:
        keep.move_before(first)
    for other in nones[1:]:
        other.results[0].replace_all_uses_with(keep.results[0])
        other.erase()
    return len(nones) - 1


def _dedupe_constants(module: ir.Operation) -> int:
    """Within each block, identical constants (same value attribute and type: MLIR uniques
    attributes, so equal means the same object) become one, the first. Exporters repeat small
    shape constants many times, and IRDL ops are not merged by MLIR's own `cse`."""
    merged = 0
    seen: dict[tuple[object, ...], ir.Operation] = {}
    for op in U.collect_ops(module, U.is_constant_op):
        if "value" not in op.attributes or len(op.attributes) != 1:
            continue  # only plain `value` constants (no discardable attributes to lose)
        key = (op.block, op.name, op.attributes["value"], op.results[0].type)
        first = seen.get(key)
        if first is None:
            seen[key] = op
            continue
        op.results[0].replace_all_uses_with(first.results[0])
        op.erase()
        merged += 1
    return merged


# --- 4. dead code -----------------------------------------------------------------------------------


def remove_dead_ops(module: ir.Operation, remove_custom: bool = False) -> int:
    """Erase ONNX ops with no used result; returns how many were erased."""
    erased = 0
    # Reverse pre-order visits users before producers and nested ops before their parent, so one
    # sweep removes whole dead chains and never touches an op already erased with its parent.
    for op in reversed(U.collect_ops(module, U.is_onnx_op)):
        if op.name == U.CUSTOM_OP and not remove_custom:
            continue
        if U.has_uses(op):
            continue
        op.erase()
        erased += 1
    return erased
