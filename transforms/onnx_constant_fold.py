"""`onnx-constant-fold`: evaluate ONNX ops whose inputs are all constants and replace them by
`onnx.constant`.

Why: exported models compute a lot at run time that is fixed at compile time: shape arithmetic
(`Shape -> Gather -> Concat`), weight preprocessing (Transpose, Cast, DequantizeLinear of
initializers), constant masks. Folding it removes work from every run and hands lowering static
values (Reshape targets, Slice bounds, Pad amounts) that it needs to produce static shapes.

How: ops are visited in program order, so chains fold in one pass. An op folds when every
operand is an `onnx.none` or an `onnx.constant` whose value can be read, and the op is
deterministic, has no subgraphs and produces only tensors. It is evaluated by
`onnx.reference.ReferenceEvaluator` on a one-node model at the op's own opset (broad and
correct for every op the reference implements). Beyond that:

* `Shape` and `Size` of a value whose type is static fold without reading the value.
* `CastLike` of a constant folds whatever its second input is (only its element type counts).
* `ConstantOfShape` with a constant shape folds to a splat attribute of any size (splats cost
  one element in MLIR).
* `size_limit` bounds the elements of every folded result, so compile time and memory stay
  bounded: the output size is known before evaluating (from the result type, or from onnx's shape
  inference with the constant inputs), and ops whose output size cannot be known are not folded.

A folded result whose constant has a more precise type than the declared one replaces its uses
where that is legal (ONNX ops, `func.return` with the function type updated); constants left
without uses are erased.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from mlir import ir
from onnx import helper
from onnx.reference import ReferenceEvaluator

from onnxc.dialect import types as types_mod
from onnxc.dialect.builder import onnx_op
from onnxc.dialect.opinfo import OpInfo
from onnxc.transforms import onnx_utils as U
from onnxc.transforms.onnx_shape_inference import _Inferer
from onnxc.transforms.pass_base import ModulePass

# Ops whose results are not functions of their inputs; folding them would freeze one draw.
NONDETERMINISTIC = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
})  # fmt: skip
# Ops the reference evaluator treats specially or that must not be folded for other reasons.
NEVER_FOLD = frozenset({"Constant", "Dropout"}) | NONDETERMINISTIC


@dataclass(frozen=True)
class OnnxConstantFoldPass(ModulePass):
    """Fold ONNX ops with constant inputs (and Shape/Size of static tensors) into constants.

    Options: `size_limit` is the most elements a folded result may have (splats of
    ConstantOfShape excepted).
    """

    name = "onnx-constant-fold"
    size_limit: int = 1 << 16

    def run(self, module: ir.Operation) -> None:
        module = module.operation
        with module.context, ir.Location.unknown():
            folder = Folder(self.size_limit)
            for op in U.collect_ops(module, U.is_onnx_op):
                folder.visit(op)
            folder.erase_dead_constants()


class Folder:
    """Folds ops one at a time; counts what it did (`folded`) and why it skipped (`skipped`)."""

    def __init__(self, size_limit: int) -> None:
        self.size_limit = size_limit
        self.folded = 0
        self.skipped: dict[str, int] = {}
        self._touched: list[ir.Operation] = []

    def _skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def visit(self, op: ir.Operation) -> bool:
        """Fold `op` if it can be folded; returns whether it was."""
        info = U.info_of(op)
        if info is None or info.op_type in NEVER_FOLD or op.regions:
            return False
        if not op.results or not all(U.is_tensor_type(r.type) or U.is_none_value(r) for r in op.results):
            return False
        if info.op_type in ("Shape", "Size"):
            static = self._shape_or_size(op, info)
            if static is not None:
                return self._replace(op, [static])
        if info.op_type == "CastLike" and U.is_constant(op.operands[0]) and not U.is_constant(op.operands[1]):
            return self._cast_like(op, info)
        if not all(U.is_none_value(v) or U.is_constant(v) for v in op.operands):
            return False
        # Decide on the output size before reading inputs, which may be large weights.
        if info.op_type != "ConstantOfShape" and not self._small_enough(op, info):
            return False
        inputs: list[np.ndarray | None] = []
        for v in op.operands:
            if U.is_none_value(v):
                inputs.append(None)
                continue
            arr = U.constant_value(v)
            if arr is None:
                self._skip("unreadable constant")
                return False
            inputs.append(arr)
        if info.op_type == "ConstantOfShape":
            return self._constant_of_shape(op, inputs)
        outputs = self._evaluate(op, info, inputs)
        if outputs is None:
            return False
        return self._replace(op, outputs)

    # -- special cases --

    def _shape_or_size(self, op: ir.Operation, info: OpInfo) -> np.ndarray | None:
        dims = U.shape_of(op.operands[0].type)
        if dims is None or any(d < 0 for d in dims):
            return None
        if info.op_type == "Size":
            return np.array(int(np.prod(dims)), dtype=np.int64)
        start, end = U.shape_slice(op, len(dims))
        return np.array(dims[start:end] if end > start else [], dtype=np.int64)

    def _cast_like(self, op: ir.Operation, info: OpInfo) -> bool:
        """CastLike of a constant folds whatever its second input is: only that input's element
        type is read (function bodies cast their constants `CastLike(c, X)` to the input's type,
        and the casts must fold for the shape arithmetic behind them to fold). The reference
        evaluates it with an empty array of that type standing for the second input."""
        elem = U.element_type_of(op.operands[1].type)
        dtype = U.numpy_dtype_of(elem) if elem is not None else None
        if dtype is None:
            self._skip("CastLike target element type")
            return False
        if not self._small_enough(op, info):
            return False
        arr = U.constant_value(op.operands[0])
        if arr is None:
            self._skip("unreadable constant")
            return False
        outputs = self._evaluate(op, info, [arr, np.zeros([0], dtype=dtype)])
        return outputs is not None and self._replace(op, outputs)

    def _constant_of_shape(self, op: ir.Operation, inputs: list[np.ndarray | None]) -> bool:
        shape = inputs[0]
        if shape is None or shape.ndim != 1 or np.any(shape < 0):
            return False
        result = op.results[0]
        elem = U.element_type_of(result.type)
        value = op.attributes["value"] if "value" in op.attributes else None
        if value is not None:
            fill = U.elements_to_numpy(value)
            if fill is None or fill.size != 1:
                self._skip("unreadable ConstantOfShape value")
                return False
            elem = ir.ShapedType(value.type).element_type
            fill_value = fill.reshape(-1)[0]
        else:
            fill_value = 0
        dims = [int(d) for d in shape]
        if int(np.prod(dims)) <= self.size_limit:
            dtype = U.numpy_dtype_of(elem)
            if dtype is None:
                return False
            return self._replace(op, [np.full(dims, fill_value, dtype=dtype)], elem_types=[elem])
        # Too big to materialize: a splat attribute holds one element whatever the size.
        tensor_type = U.ranked_type(dims, elem)
        scalar = U.elements_attr(np.asarray(fill_value, dtype=U.numpy_dtype_of(elem)), elem, resource_threshold=1 << 62)
        if scalar is None or not isinstance(scalar, ir.DenseElementsAttr):
            return False
        splat = ir.DenseElementsAttr.get_splat(tensor_type, ir.DenseElementsAttr(scalar).get_splat_value())
        return self._replace_with_attrs(op, [splat])

    # -- the general case --

    def _small_enough(self, op: ir.Operation, info: OpInfo) -> bool:
        shapes = [U.shape_of(r.type) for r in op.results if U.is_tensor_type(r.type)]
        if all(s is not None and all(d >= 0 for d in s) for s in shapes):
            ok = all(int(np.prod(s)) <= self.size_limit for s in shapes)  # type: ignore[arg-type]
            if not ok:
                self._skip("over size_limit")
            return ok
        # Ask onnx's shape inference, which sees the constant inputs.
        inferred = _Inferer(4096).onnx_infer(op, info)
        if inferred is None:
            self._skip("output size unknown")
            return False
        for dims in inferred:
            if dims is False:
                continue
            if dims is None or dims is True or any(not isinstance(d, int) for d in dims):
                self._skip("output size unknown")
                return False
            if int(np.prod(dims)) > self.size_limit:
                self._skip("over size_limit")
                return False
        return True

    def _evaluate(self, op: ir.Operation, info: OpInfo, inputs: list[np.ndarray | None]) -> list[np.ndarray] | None:
        in_names = ["" if a is None else f"i{k}" for k, a in enumerate(inputs)]
        out_names = ["" if U.is_none_value(r) else f"o{k}" for k, r in enumerate(op.results)]
        node = U.node_proto(op, info, in_names, out_names)
        if node is None:
            self._skip("attribute not convertible")
            return None
        graph_inputs = []
        feeds: dict[str, Any] = {}
        for name, arr, v in zip(in_names, inputs, op.operands):
            if arr is None:
                continue
            elem = U.element_type_of(v.type)
            onnx_dtype = types_mod.onnx_element_type(elem).onnx_dtype if elem is not None else onnx.TensorProto.FLOAT
            graph_inputs.append(helper.make_tensor_value_info(name, onnx_dtype, None))
            feeds[name] = arr
        graph_outputs = [helper.make_empty_tensor_value_info(n) for n in out_names if n]
        graph = helper.make_graph([node], "fold", graph_inputs, graph_outputs)
        opsets = [helper.make_opsetid(info.domain, info.since_versions[-1])]
        if info.domain != "":
            opsets.append(helper.make_opsetid("", 21))
        model = helper.make_model(graph, opset_imports=opsets)
        try:
            evaluator = ReferenceEvaluator(model)
            results = evaluator.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - the reference lacks the op or rejects the input
            self._skip(f"reference: {type(exc).__name__}")
            return None
        outputs: list[np.ndarray] = []
        it = iter(results)
        for r in op.results:
            if U.is_none_value(r):
                outputs.append(None)  # type: ignore[arg-type]
                continue
            arr = np.asarray(next(it))
            if arr.size > self.size_limit:
                self._skip("over size_limit")
                return None
            outputs.append(arr)
        return outputs

    # -- replacing --

    def _replace(self, op: ir.Operation, outputs: list[np.ndarray | None], elem_types: list[ir.Type] | None = None) -> bool:
        attrs: list[ir.Attribute | None] = []
        for k, (r, arr) in enumerate(zip(op.results, outputs)):
            if arr is None or U.is_none_value(r):
                attrs.append(None)
                continue
            elem = elem_types[k] if elem_types is not None else U.element_type_of(r.type)
            dtype = U.numpy_dtype_of(elem) if elem is not None else None
            if dtype is None:
                self._skip("result element type")
                return False
            if arr.dtype != dtype:
                # The reference returns the right dtype for every op we know of; a kind change
                # (float for int) would mean a wrong evaluation, so refuse rather than convert.
                if arr.dtype.kind != dtype.kind and not (arr.dtype == object or dtype.kind in "V"):
                    self._skip("result dtype mismatch")
                    return False
                arr = arr.astype(dtype)
            declared = U.shape_of(r.type)
            if declared is not None and (len(declared) != arr.ndim or any(d >= 0 and d != s for d, s in zip(declared, arr.shape))):
                self._skip("result shape contradicts the declared type")
                return False
            attr = U.elements_attr(arr, elem)
            if attr is None:
                self._skip("result not representable")
                return False
            attrs.append(attr)
        return self._replace_with_attrs(op, attrs)

    def _replace_with_attrs(self, op: ir.Operation, attrs: list[ir.Attribute | None]) -> bool:
        new_values: list[ir.Value | None] = []
        with ir.InsertionPoint(op), op.location:
            for r, attr in zip(op.results, attrs):
                if attr is None:
                    new_values.append(None)
                    continue
                new_values.append(onnx_op("Constant", [], [attr.type], {"value": attr}).result)
        operand_owners = [v.owner.operation for v in op.operands if isinstance(v.owner, (ir.Operation, ir.OpView))]
        for r, new in zip(op.results, new_values):
            if new is not None:
                U.replace_value(r, new)
        if not U.has_uses(op):
            op.erase()
        self._touched.extend(operand_owners)
        self.folded += 1
        return True

    def erase_dead_constants(self) -> None:
        """Erase the constants (and `onnx.none`s) that fed folded ops and are now unused."""
        # Deduplicate first, while every handle is valid: a handle of an erased op must not be
        # touched again (not even hashed).
        unique: list[ir.Operation] = []
        seen: set[ir.Operation] = set()
        for owner in self._touched:
            if owner not in seen:
                seen.add(owner)
                unique.append(owner)
        self._touched.clear()
        for owner in unique:
            if (U.is_constant_op(owner) or owner.name == U.NONE_OP) and not U.has_uses(owner):
                owner.erase()
