"""Helpers shared by the ONNX-level passes (upgrade, shape inference, constant folding, canonicalize).

These passes all walk ONNX-dialect ops, read attributes with the schema's defaults, read the
values of `onnx.constant` ops as numpy arrays, build constants, and replace ops whose results may
get a more precise type than the values they replace. Keeping that here means each pass module
holds only its own rules, and the few spots where the MLIR C++ side must be protected from bad
input (element types numpy cannot spell, types that do not match) are checked in one place.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np
import onnx
from mlir import ir
from onnx import helper, numpy_helper

from onnxc.dialect.names import ONNX_DIALECTS
from onnxc.dialect import attributes as attrs_mod
from onnxc.dialect import types as types_mod
from onnxc.dialect.builder import onnx_op
from onnxc.dialect.opinfo import OpInfo
from onnxc.dialect.table import op_info

NONE_OP = "onnx.none"
CONSTANT_OP = "onnx.constant"  # the newest Constant; older ones are `onnx.constant_v<N>`
_CONSTANT_NAME = re.compile(r"onnx\.constant(_v\d+)?")
CUSTOM_OP = "onnx.custom"




def is_constant_op(op: ir.Operation) -> bool:
    """Whether `op` is an ONNX Constant of any version (`onnx.constant`, `onnx.constant_v13`...)."""
    return _CONSTANT_NAME.fullmatch(op.name) is not None


def is_onnx_op(op: ir.Operation) -> bool:
    """Whether `op` belongs to one of the ONNX dialects (including `onnx.none` and `onnx.custom`)."""
    return op.name.split(".", 1)[0] in ONNX_DIALECTS


def info_of(op: ir.Operation) -> OpInfo | None:
    """The op-table row of an ONNX-dialect op (None for `onnx.none`, `onnx.custom`, other dialects)."""
    return op_info(op.name)


def collect_ops(root: ir.Operation, predicate: Any = None) -> list[ir.Operation]:
    """Every operation nested in `root` (not `root` itself), in program order (pre-order), optionally
    filtered by `predicate(op)`. Collected first so callers may change the IR while iterating.

    Uses MLIR's own walk: iterating `block.operations` from Python costs time quadratic in the
    block's length, which dominates on models with thousands of nodes."""
    root = root.operation
    out: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op != root and (predicate is None or predicate(op)):
            out.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out


def block_ops(block: ir.Block) -> list[ir.Operation]:
    """The operations of one block, in order (not nested ones), through a walk of its parent."""
    parent = block.owner.operation
    out: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op == parent:
            return ir.WalkResult.ADVANCE
        if op.block == block:
            out.append(op)
        return ir.WalkResult.SKIP

    parent.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out


def terminator(block: ir.Block) -> ir.Operation | None:
    """The last operation of a block (its terminator), or None for an empty block."""
    ops = block_ops(block)
    return ops[-1] if ops else None


def functions(module: ir.Operation) -> list[ir.Operation]:
    """The `func.func` operations at the top of a module."""
    return [op for op in block_ops(module.regions[0].blocks[0]) if op.name == "func.func"]


def functions_callees_first(module: ir.Operation) -> list[ir.Operation]:
    """The module's functions ordered so that a function comes after every function it calls
    (where the calls form no cycle), so that refined callee signatures reach their callers."""
    funcs = functions(module)
    by_name = {ir.StringAttr(f.attributes["sym_name"]).value: f for f in funcs if "sym_name" in f.attributes}
    calls: dict[int, list[ir.Operation]] = {}
    for i, f in enumerate(funcs):
        targets = []
        for call in collect_ops(f, lambda o: o.name == "func.call"):
            if "callee" in call.attributes:
                target = by_name.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
                if target is not None:
                    targets.append(target)
        calls[i] = targets
    index = {id_key(f): i for i, f in enumerate(funcs)}
    order: list[ir.Operation] = []
    state: dict[int, int] = {}  # 1: visiting, 2: done

    def visit(i: int) -> None:
        if state.get(i):
            return
        state[i] = 1
        for t in calls[i]:
            visit(index[id_key(t)])
        state[i] = 2
        order.append(funcs[i])

    for i in range(len(funcs)):
        visit(i)
    return order


def id_key(op: ir.Operation) -> int:
    """A hashable identity of an operation (its position in the function list is not stable)."""
    return hash(op.operation)


# --- attributes ---------------------------------------------------------------------------------


def attr_value(op: ir.Operation, name: str, default: Any = None) -> Any:
    """The plain Python value of attribute `name` of an ONNX op; else the schema default; else
    `default`. Tensors come back as numpy arrays (or the attribute itself if numpy cannot hold it)."""
    if name in op.attributes:
        return attrs_mod.from_mlir(op.attributes[name])
    info = info_of(op)
    if info is not None:
        spec = info.attr(name)
        if spec is not None and spec.default is not None:
            return spec.default
    return default


# --- types --------------------------------------------------------------------------------------


def shape_slice(op: ir.Operation, rank: int) -> tuple[int, int]:
    """The dims [start, end) an ONNX Shape op (opset 15 `start`/`end`, negative from the back,
    clamped to [0, rank]) takes of an input of `rank`."""
    start = int(attr_value(op, "start", 0) or 0)
    end = attr_value(op, "end", None)
    end = rank if end is None else int(end)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = max(0, min(rank, end + rank if end < 0 else end))
    return start, end


def is_tensor_type(t: ir.Type) -> bool:
    """Whether `t` is a builtin ranked or unranked tensor type."""
    return isinstance(t, ir.RankedTensorType) or isinstance(t, ir.UnrankedTensorType)


def is_none_value(v: ir.Value) -> bool:
    """Whether `v` stands for an omitted optional input (type `none`)."""
    return isinstance(v.type, ir.NoneType)


def shape_of(t: ir.Type) -> list[int] | None:
    """The shape of a tensor type with -1 for dynamic dims; None when unranked or not a tensor."""
    if not isinstance(t, ir.RankedTensorType):
        return None
    return [-1 if ir.ShapedType.is_dynamic_size(d) else d for d in ir.RankedTensorType(t).shape]


def element_type_of(t: ir.Type) -> ir.Type | None:
    """The element type of a tensor type, or None."""
    if not is_tensor_type(t):
        return None
    return ir.ShapedType(t).element_type


def numpy_dtype_of(elem: ir.Type) -> np.dtype | None:
    """The numpy dtype for an MLIR element type, None where numpy (and ml_dtypes) has none or the
    type is a string."""
    et = types_mod.BY_MLIR.get(str(elem))
    if et is None or et.numpy in (None, "object"):
        return None
    try:
        return types_mod.numpy_dtype(et)
    except types_mod.UnsupportedTypeError:
        return None


def mlir_element_type(dtype: np.dtype) -> ir.Type | None:
    """The MLIR element type for a numpy dtype (bool -> i1, uint8 -> ui8, ml_dtypes types too)."""
    name = np.dtype(dtype).name
    for et in types_mod.ELEMENT_TYPES:
        if et.numpy == name:
            return ir.Type.parse(et.mlir)
    return None


def ranked_type(shape: Sequence[int], elem: ir.Type) -> ir.Type:
    """`tensor<...>` with -1 (or any negative) meaning a dynamic dim."""
    dyn = ir.ShapedType.get_dynamic_size()
    return ir.RankedTensorType.get([dyn if d < 0 else int(d) for d in shape], elem, loc=ir.Location.unknown())


def refine_type(old: ir.Type, new: ir.Type) -> ir.Type | None:
    """The more precise of two tensor types that describe the same value, or None if they
    contradict each other (element types or ranks differ, or two static sizes disagree)."""
    if old == new:
        return old
    if not (is_tensor_type(old) and is_tensor_type(new)):
        return None
    if ir.ShapedType(old).element_type != ir.ShapedType(new).element_type:
        return None
    so, sn = shape_of(old), shape_of(new)
    if sn is None:
        return old
    if so is None:
        return new
    if len(so) != len(sn):
        return None
    dims = []
    for a, b in zip(so, sn):
        if a >= 0 and b >= 0 and a != b:
            return None
        dims.append(a if a >= 0 else b)
    return ranked_type(dims, ir.ShapedType(old).element_type)


# --- constants ----------------------------------------------------------------------------------


def downcast_resource(attr: ir.Attribute) -> ir.Attribute:
    """``attr`` as a ``DenseResourceElementsAttr`` when it is one (the bindings return resource
    attributes as plain ``Attribute``s and give the class no type id to compare with: the cast
    itself is the test)."""
    if isinstance(attr, ir.DenseElementsAttr):
        return attr
    try:
        return ir.DenseResourceElementsAttr(attr)
    except ValueError:
        return attr


def elements_to_numpy(attr: ir.Attribute, max_elements: int | None = None) -> np.ndarray | None:
    """The values of an elements attribute (dense or dense_resource) as a numpy array; None when
    unreadable or holding more than `max_elements` elements."""
    if not isinstance(attr, (ir.DenseElementsAttr, ir.DenseResourceElementsAttr)):
        return None  # sparse constants are not read here
    st = ir.ShapedType(attr.type)
    if not st.has_static_shape:
        return None
    shape = [int(d) for d in st.shape]
    count = int(np.prod(shape)) if shape else 1
    if max_elements is not None and count > max_elements:
        return None
    try:
        # The importer's reader handles every element type, resource blobs and strings.
        from onnxc.importers.tensors import attribute_to_array

        arr, _ = attribute_to_array(attr)
        return np.asarray(arr).reshape(shape)
    except Exception:  # noqa: BLE001 - the importer's reader refuses (an OnnxcError, or numpy's
        pass  # ValueError/TypeError on an odd blob): fall back to what the bindings can read
    if not isinstance(attr, ir.DenseElementsAttr):
        return None
    dense = ir.DenseElementsAttr(attr)
    dtype = numpy_dtype_of(st.element_type)
    if dtype is None:
        return None
    if dense.is_splat:
        scalar = _scalar_of(dense.get_splat_value(), dtype)
        return None if scalar is None else np.full(shape, scalar, dtype=dtype)
    arr = np.array(dense)
    # numpy wraps objects it cannot read through the buffer protocol (bf16, f8) as a 0-d object
    # array; that is "unreadable", not a value.
    if arr.dtype == object or arr.dtype.itemsize != dtype.itemsize:
        return None
    if arr.dtype != dtype:
        arr = arr.view(dtype) if arr.dtype.kind != "b" else arr.astype(dtype)
    return arr.reshape(shape)


def _scalar_of(attr: ir.Attribute, dtype: np.dtype) -> Any:
    if isinstance(attr, ir.IntegerAttr):
        iattr = ir.IntegerAttr(attr)
        value = iattr.value
        if dtype == np.bool_:
            return bool(value & 1)
        if dtype.kind == "u" and value < 0:
            value += 1 << (8 * dtype.itemsize)
        return value
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value
    return None


def constant_attr_array(op: ir.Operation, max_elements: int | None = None) -> np.ndarray | None:
    """The value of an `onnx.constant` op as a numpy array (any of its attribute spellings), or
    None if it has no readable value or holds more than `max_elements` elements."""
    attrs = op.attributes
    if "value" in attrs:
        return elements_to_numpy(attrs["value"], max_elements)
    if "value_float" in attrs:
        return np.array(ir.FloatAttr(attrs["value_float"]).value, dtype=np.float32)
    if "value_int" in attrs:
        return np.array(ir.IntegerAttr(attrs["value_int"]).value, dtype=np.int64)
    if "value_floats" in attrs:
        vals = list(ir.DenseF32ArrayAttr(attrs["value_floats"]))
        return None if max_elements is not None and len(vals) > max_elements else np.array(vals, dtype=np.float32)
    if "value_ints" in attrs:
        vals = list(ir.DenseI64ArrayAttr(attrs["value_ints"]))
        return None if max_elements is not None and len(vals) > max_elements else np.array(vals, dtype=np.int64)
    return None


def constant_value(v: ir.Value, max_elements: int | None = None) -> np.ndarray | None:
    """The numpy value of `v` when it is the result of an `onnx.constant` with a readable value."""
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None  # a block argument
    owner = owner.operation
    if not is_constant_op(owner):
        return None
    return constant_attr_array(owner, max_elements)


def is_constant(v: ir.Value) -> bool:
    """Whether `v` is produced by an `onnx.constant` op."""
    owner = v.owner
    return isinstance(owner, (ir.Operation, ir.OpView)) and is_constant_op(owner.operation)


def dense_attr(array: np.ndarray) -> ir.Attribute | None:
    """A DenseElementsAttr holding `array` with the ONNX element type of its dtype (uint8 ->
    `ui8`, bool -> `i1`), or None where the dtype has no MLIR counterpart numpy can hand over."""
    array = np.ascontiguousarray(array)
    elem = mlir_element_type(array.dtype)
    if elem is None:
        return None
    if array.dtype == np.bool_:
        # DenseElementsAttr reads numpy bools as packed i1 correctly only from a bool array.
        return ir.DenseElementsAttr.get(array)
    if array.dtype.kind not in "iufc" and array.dtype.name not in ("bfloat16",):
        return None  # float8/float4 and friends: MLIR's buffer reader does not know them
    try:
        return ir.DenseElementsAttr.get(array, type=elem)
    except (ValueError, TypeError, RuntimeError):
        return None


def elements_attr(array: np.ndarray, elem: ir.Type | None = None, *, name: str = "folded", resource_threshold: int = 1024) -> ir.Attribute | None:
    """An elements attribute holding `array` with element type `elem` (default: the ONNX type of
    its dtype): dense elements, or a `dense_resource` blob above `resource_threshold` bytes, as the
    importer makes them (so export writes them back). None where the types do not fit."""
    array = np.asarray(array)
    if elem is None:
        elem = mlir_element_type(array.dtype)
        if elem is None:
            return None
    et = types_mod.BY_MLIR.get(str(elem))
    if et is None:
        return None
    try:
        from onnxc.importers.tensors import array_to_attribute

        return array_to_attribute(array, et.onnx_dtype, name=name, resource_threshold=resource_threshold)
    except Exception:  # noqa: BLE001 - the importer's writer refuses this element type or array
        # (an OnnxcError, numpy's ValueError/TypeError): build a plain dense attribute instead
        dtype = numpy_dtype_of(elem)
        return None if dtype is None else dense_attr(array.astype(dtype))


def make_constant(
    array: np.ndarray, elem: ir.Type | None = None, *, loc: ir.Location | None = None, ip: ir.InsertionPoint | None = None
) -> ir.Value | None:
    """A new `onnx.constant` holding `array` (element type `elem`, default: from its dtype), or
    None if it cannot be held in an MLIR attribute."""
    attr = elements_attr(np.asarray(array), elem)
    if attr is None:
        return None
    return onnx_op("Constant", [], [attr.type], {"value": attr}, loc=loc, ip=ip).result


def onnx_attribute_proto(name: str, kind: str, attr: ir.Attribute) -> onnx.AttributeProto | None:
    """An AttributeProto for an MLIR attribute of an ONNX kind, None where it cannot be made."""
    value = attrs_mod.from_mlir(attr)
    if kind == "TENSOR":
        arr = elements_to_numpy(attr, None)
        if arr is None:
            return None
        return helper.make_attribute(name, numpy_helper.from_array(arr))
    if kind == "TENSORS":
        if not all(isinstance(v, np.ndarray) for v in value):
            return None
        return helper.make_attribute(name, [numpy_helper.from_array(v) for v in value], attr_type=onnx.AttributeProto.TENSORS)
    if kind == "TYPE_PROTO":
        return helper.make_attribute(name, types_mod.type_to_proto(value))
    if kind == "TYPE_PROTOS":
        return helper.make_attribute(name, [types_mod.type_to_proto(v) for v in value], attr_type=onnx.AttributeProto.TYPE_PROTOS)
    kinds = {"INT": onnx.AttributeProto.INT, "FLOAT": onnx.AttributeProto.FLOAT, "STRING": onnx.AttributeProto.STRING,
             "INTS": onnx.AttributeProto.INTS, "FLOATS": onnx.AttributeProto.FLOATS, "STRINGS": onnx.AttributeProto.STRINGS}  # fmt: skip
    if kind not in kinds:
        return None
    return helper.make_attribute(name, value, attr_type=kinds[kind])


def node_proto(
    op: ir.Operation, info: OpInfo, inputs: Sequence[str], outputs: Sequence[str], *, skip_unreadable_tensors: bool = False
) -> onnx.NodeProto | None:
    """A NodeProto for an ONNX-dialect op (GRAPH attributes left out) with the given value names;
    None when an attribute cannot be converted (with `skip_unreadable_tensors`, tensor attributes
    that cannot be read are left out instead)."""
    node = helper.make_node(info.op_type, list(inputs), list(outputs), domain=info.domain)
    for attr_name, attr in op.attributes.items():
        spec = info.attr(attr_name)
        if spec is None or spec.kind == "GRAPH":
            continue
        proto = onnx_attribute_proto(attr_name, spec.kind, attr)
        if proto is None:
            if skip_unreadable_tensors and spec.kind in ("TENSOR", "SPARSE_TENSOR", "TENSORS"):
                continue
            return None
        node.attribute.append(proto)
    return node


# --- variadic tails ---------------------------------------------------------------------------------


def _variadic_slots() -> int:
    """How many values of an ONNX variadic group IRDL types independently; the rest (the tail)
    must share one type. 0 with a dialect whose whole variadic group is one IRDL variadic."""
    from onnxc.dialect import opinfo

    return int(getattr(opinfo, "VARIADIC_SLOTS", 0))


def _in_tail(formal: Sequence[Any], index: int) -> bool:
    if not formal or formal[-1].option != "variadic":
        return False
    return index >= len(formal) - 1 + _variadic_slots()


def operand_in_variadic_tail(op: ir.Operation, index: int) -> bool:
    """Whether operand `index` of an ONNX op lies in the tail of a variadic group, where IRDL
    requires one type for all values: giving it a type its tail-mates do not have breaks
    verification, so passes must not refine or replace such values alone."""
    info = info_of(op)
    if info is None:
        return op.name == CUSTOM_OP and index >= _variadic_slots()
    return _in_tail(info.inputs, index)


def result_in_variadic_tail(op: ir.Operation, index: int) -> bool:
    """Whether result `index` of an ONNX op lies in the tail of a variadic group."""
    info = info_of(op)
    if info is None:
        return op.name == CUSTOM_OP and index >= _variadic_slots()
    return _in_tail(info.outputs, index)


def used_in_variadic_tail(v: ir.Value) -> bool:
    """Whether some ONNX op uses `v` in a variadic tail."""
    for use in v.uses:
        user = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if is_onnx_op(user) and operand_in_variadic_tail(user, use.operand_number):
            return True
    return False


# --- replacing ----------------------------------------------------------------------------------


def replace_value(old: ir.Value, new: ir.Value) -> bool:
    """Replace the uses of `old` by `new`. Where the types differ, ONNX-op users take `new` (their
    operand types are `irdl.any`) except in a variadic tail (one type for all its values); a
    `func.return` takes it when it is at least as precise as `old` and the function's result type
    is updated; any other user (a subgraph's `gpu.yield`, a non-ONNX op) keeps `old`. Returns
    whether every use was replaced (so that the producer of `old` may be erased)."""
    if old.type == new.type:
        old.replace_all_uses_with(new)
        return True
    all_done = True
    returns: list[ir.Operation] = []
    for use in list(old.uses):
        user = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if is_onnx_op(user) and operand_in_variadic_tail(user, use.operand_number):
            all_done = False  # the tail's values must keep one type
        elif is_onnx_op(user):
            user.operands[use.operand_number] = new
        elif user.name == "func.return" and refine_type(old.type, new.type) == new.type:
            # Only a value at least as precise as the returned one: the function's result type
            # then follows it (`sync_function_type`). A less precise one would leave a return that
            # contradicts the signature, and the pass manager verifies the IR after every pass.
            user.operands[use.operand_number] = new
            returns.append(user)
        elif user.name == "func.return" and _refinable_in_place(new, refine_type(old.type, new.type), old):
            # `new` stands for `old`, whose type is the more precise one (an If with a known
            # condition whose branch yields `?` dims that inference had already resolved for the
            # If's result): `new` takes that type, as shape inference would give it, and the
            # return keeps the signature's type. Refusing instead kept the If, and lowering then
            # met its dead branch.
            new.set_type(old.type)
            user.operands[use.operand_number] = new
            returns.append(user)
        else:
            all_done = False
    for ret in returns:
        sync_function_type(ret.parent)
    return all_done


def _refinable_in_place(value: ir.Value, refined: ir.Type | None, replaced: ir.Value) -> bool:
    """Whether `value` may take the type `refined` in place: a refinement of its type, produced
    by an ONNX op (its result types are `irdl.any`), used only by ONNX ops, `func.return`s and the
    terminator of the op whose result it replaces (an If being inlined, erased next); any other
    `gpu.yield` or non-ONNX user would see its operand type change under it."""
    replaced_owner = replaced.owner.operation if isinstance(replaced, ir.OpResult) else None
    if refined is None or refined == value.type or not isinstance(value, ir.OpResult):
        return False
    if not is_onnx_op(value.owner.operation if isinstance(value.owner, ir.OpView) else value.owner):
        return False
    for use in value.uses:
        user = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if is_onnx_op(user) or user.name == "func.return":
            continue
        if replaced_owner is not None and user.parent is not None and user.parent.operation == replaced_owner:
            continue
        return False
    return True


def sync_function_type(fn: ir.Operation | None) -> None:
    """Make a `func.func`'s result types those of its `func.return` operands (after refinement),
    and the results of every `func.call` of it too, so call sites stay valid. A result whose
    returned value contradicts the declared type (not a refinement) keeps the declared type."""
    if fn is None:
        return
    fn = fn.operation
    if fn.name != "func.func":
        return
    body = fn.regions[0]
    rets = [op for block in body.blocks for op in block_ops(block) if op.name == "func.return"]
    if len(rets) != 1:
        return
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    old_results = list(ftype.results)
    new_results = [v.type for v in rets[0].operands]
    if old_results == new_results or len(old_results) != len(new_results):
        return
    if any(refine_type(o, n) != n for o, n in zip(old_results, new_results) if o != n):
        return  # not a refinement: leave the signature (and the mismatch) for the verifier to report
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), new_results))
    module = fn.parent
    if module is None or "sym_name" not in fn.attributes:
        return
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    for call in collect_ops(module.operation, lambda o: o.name == "func.call"):
        callee = call.attributes["callee"] if "callee" in call.attributes else None
        if callee is None or ir.FlatSymbolRefAttr(callee).value != name:
            continue
        for res, t in zip(call.results, new_results):
            if res.type != t:
                res.set_type(t)


def replace_op(old: ir.Operation, new_values: Sequence[ir.Value]) -> bool:
    """Replace every result of `old` by the matching value and erase `old` when nothing uses it
    any more. Returns whether `old` was erased."""
    done = True
    for res, new in zip(old.results, new_values):
        done = replace_value(res, new) and done
    if all(not list(r.uses) for r in old.results):
        old.erase()
        return True
    return False


def has_uses(op: ir.Operation) -> bool:
    """Whether any result of `op` is used."""
    return any(True for r in op.results for _ in r.uses)


def value_used(v: ir.Value) -> bool:
    """Whether `v` has any use."""
    return any(True for _ in v.uses)


def location_text(op: ir.Operation) -> str:
    """A short description of an op for messages: its ONNX identity and location."""
    info = info_of(op)
    ident = f"{info.op_type} (opset {info.since_versions[-1]})" if info is not None else op.name
    return f"{ident} at {op.location}"


__all__ = [
    "CONSTANT_OP", "CUSTOM_OP", "NONE_OP", "attr_value", "block_ops", "collect_ops", "constant_attr_array",
    "constant_value", "dense_attr", "element_type_of", "elements_attr", "elements_to_numpy", "functions",
    "functions_callees_first", "has_uses", "info_of", "is_constant", "is_constant_op", "is_none_value", "is_onnx_op",
    "is_tensor_type", "location_text", "make_constant", "mlir_element_type", "node_proto", "numpy_dtype_of",
    "onnx_attribute_proto", "operand_in_variadic_tail", "ranked_type", "refine_type", "replace_op", "replace_value",
    "result_in_variadic_tail", "shape_of", "sync_function_type", "terminator", "used_in_variadic_tail", "value_used",
]  # fmt: skip
