"""`onnx-shape-inference`: refine `?` dims and unknown ranks of ONNX-dialect values in place.

Why: lowering to linalg needs ranks everywhere and static sizes wherever they can be known; models
exported with dynamic batch or sequence sizes compute their reshape targets at run time
(`Shape -> Gather -> Concat -> Reshape`), and without following those chains every downstream
value would be unranked or fully dynamic.

How: functions callees first (a refined signature updates its `func.call` sites), each in program
order, ops with subgraphs after their subgraphs:

* **Types** come from onnx's own per-node inference (`onnx.shape_inference.infer_node_outputs`,
  about 10 µs a node), which knows every op of every opset. Our `?` dims go in as `dim_param`
  symbols so onnx carries equalities through (`N` + `N` -> `N`), and small known integer tensors
  go in as input data (Reshape targets, Slice starts, Resize scales...). Ops whose results are
  already static are skipped unless `strict` asks to check them.
* **Own rules** take over where onnx's per-node API cannot help: partially known shape *values*
  (Reshape with 0 and -1, the -1 solved by cancelling symbols; Expand; ConstantOfShape; Tile;
  Slice of symbolic dims), subgraphs (If: the taken branch when the condition is known, else what
  both branches agree on; Loop and Scan: bodies inferred with the carried values' types, widened
  until they are a fixpoint, and the stacked scan outputs), reductions over axes known only at
  run time (keepdims=1 keeps the rank), and ops onnx has no inference for (GroupNormalization,
  MeanVarianceNormalization, the ai.onnx.ml regressors and classifiers...).
* **Values**: small integer tensors are tracked element by element as integers, symbolic dims
  (`dim 1 of %x`, products of dims) or unknowns, through Shape, Size, Constant, Gather, Concat,
  Slice, Squeeze/Unsqueeze/Reshape/Flatten/Identity, Cast, Add/Sub/Mul/Div/Max/Min/Neg/Abs,
  Equal/Not/Where, ConstantOfShape, Range, ReduceProd/ReduceSum.

A refined result type replaces the declared one only where it is more precise and agrees with it;
a disagreement (a static size that contradicts the declared one, a different rank) is recorded and
the declared type kept; with `strict` the pass then fails listing every disagreement. When a
returned value gets refined, the function's result type follows. A value in the tail of a
variadic group (past the dialect's independently typed slots) keeps its declared type, as IRDL
wants one type for the whole tail. Named dims recorded by the importer as an `onnx.dim_params`
argument attribute (an array of strings, "" for unnamed dims) become shared symbols, so two
inputs' `batch` dims are known to be equal.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence, Union

import numpy as np
import onnx
from mlir import ir
from onnx import helper, numpy_helper

from onnxc.dialect import types as types_mod
from onnxc.dialect.opinfo import OpInfo
from onnxc.transforms import onnx_utils as U
from onnxc.transforms.pass_base import ModulePass, PassFailure

# --- symbolic dims ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sym:
    """A dim (or an integer) known only symbolically: `coef * s1 * s2 ...`. Symbols stand for
    sizes of dims, so they are assumed >= 1; this is what lets `Equal(dim, -1)` fold to false."""

    coef: int
    syms: tuple[str, ...]

    def __str__(self) -> str:
        parts = ([str(self.coef)] if self.coef != 1 else []) + list(self.syms)
        return "*".join(parts)


# A dim or a tracked integer: a Python int (known), a Sym, or None (nothing known).
Dim = Union[int, Sym, None]


def _sym(name: str) -> Sym:
    return Sym(1, (name,))


def dim_mul(a: Dim, b: Dim) -> Dim:
    """The product of two dims."""
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    ca, sa = (a, ()) if isinstance(a, int) else (a.coef, a.syms)
    cb, sb = (b, ()) if isinstance(b, int) else (b.coef, b.syms)
    if ca * cb == 0:
        return 0
    syms = tuple(sorted(sa + sb))
    return Sym(ca * cb, syms) if syms else ca * cb


def dim_div(a: Dim, b: Dim) -> Dim:
    """`a / b` when it divides exactly (symbols cancel), else None."""
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b != 0 and a % b == 0 else None
    ca, sa = (a, ()) if isinstance(a, int) else (a.coef, a.syms)
    cb, sb = (b, ()) if isinstance(b, int) else (b.coef, b.syms)
    if cb == 0 or ca % cb != 0:
        return None
    rest = list(sa)
    for s in sb:
        if s not in rest:
            return None
        rest.remove(s)
    return Sym(ca // cb, tuple(rest)) if rest else ca // cb


def dims_product(dims: Sequence[Dim]) -> Dim:
    """The product of a list of dims (1 for none)."""
    out: Dim = 1
    for d in dims:
        out = dim_mul(out, d)
    return out


def is_static(d: Dim) -> bool:
    """Whether a dim is a known integer."""
    return isinstance(d, (int, np.integer)) and not isinstance(d, bool)


# --- tracked values -----------------------------------------------------------------------------


@dataclass
class Tracked:
    """The known contents of a small tensor: its shape and its elements in row-major order, each
    an int/float, a Sym, or None."""

    shape: tuple[int, ...]
    items: list[Any]

    def static(self) -> np.ndarray | None:
        """The contents as a numpy array when every element is known."""
        if any(not isinstance(x, (int, float, bool, np.number, np.bool_)) or isinstance(x, Sym) for x in self.items):
            return None
        return np.array(self.items).reshape(self.shape)


@dataclass(frozen=True)
class OnnxShapeInferencePass(ModulePass):
    """Refine `?` dims and unknown ranks of ONNX values, following shape computations.

    Options: `strict` fails the pass when an inferred type contradicts a declared one (instead of
    keeping the declared type); `max_value_elements` bounds the integer tensors whose contents are
    tracked (shape tensors are small; bigger ones are not worth the time).
    """

    name = "onnx-shape-inference"
    strict: bool = False
    max_value_elements: int = 64

    def run(self, module: ir.Operation) -> None:
        module = module.operation
        with module.context, ir.Location.unknown():
            inferer = _Inferer(self.max_value_elements, check=self.strict)
            for fn in U.functions_callees_first(module):
                inferer.run_function(fn)
            if self.strict and inferer.conflicts:
                raise PassFailure(self.name, inferer.conflicts)


def infer_shapes(module: ir.Operation, *, strict: bool = False) -> list[tuple[ir.Location | None, str]]:
    """Run shape inference on `module`; returns the disagreements found (empty when none)."""
    inferer = _Inferer(64)
    with module.operation.context, ir.Location.unknown():
        for fn in U.functions_callees_first(module.operation):
            inferer.run_function(fn)
    if strict and inferer.conflicts:
        raise PassFailure(OnnxShapeInferencePass.name, inferer.conflicts)
    return inferer.conflicts


# --- the inference engine -----------------------------------------------------------------------

INT_MAX = 2**62  # Slice ends at or beyond this mean "to the end"


def _schema(info: OpInfo) -> onnx.defs.OpSchema | None:
    """onnx's schema for the newest ONNX version an op stands for (cached by name and version:
    OpInfo is not hashable, some attribute defaults being lists)."""
    return _schema_of(info.op_type, info.since_versions[-1], info.domain)


@lru_cache(maxsize=None)
def _schema_of(op_type: str, version: int, domain: str) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:  # an op, version or domain onnx has no schema for
        return None


class _Inferer:
    """The state of one run: symbolic shapes and tracked contents of values, and disagreements."""

    def __init__(self, max_value_elements: int, check: bool = True) -> None:
        self.max_value_elements = max_value_elements
        self.check = check  # infer even fully static results, to report contradictions
        self.shapes: dict[ir.Value, list[Dim] | None] = {}
        self.values: dict[ir.Value, Tracked] = {}
        self.conflicts: list[tuple[ir.Location | None, str]] = []
        # Ops a rule gave up on (IR it did not expect); not contradictions, so `strict` ignores them.
        self.skipped: list[tuple[ir.Location | None, str]] = []
        self.sym_names: dict[str, Sym] = {}
        self._fresh = itertools.count()
        self.refined = 0  # how many result types were made more precise

    # -- shapes of values --

    def fresh(self) -> Sym:
        """A new symbol for an unknown dim."""
        return _sym(f"d{next(self._fresh)}")

    def shape(self, v: ir.Value) -> list[Dim] | None:
        """The symbolic shape of a value (None: unranked or not a tensor)."""
        if v in self.shapes:
            return self.shapes[v]
        dims = U.shape_of(v.type)
        out = None if dims is None else [d if d >= 0 else self.fresh() for d in dims]
        self.shapes[v] = out
        return out

    def tracked(self, v: ir.Value) -> Tracked | None:
        """The known contents of a small integer (or float) tensor value."""
        if v in self.values:
            return self.values[v]
        arr = U.constant_value(v, self.max_value_elements)
        if arr is None:
            return None
        t = Tracked(tuple(arr.shape), [x.item() for x in arr.reshape(-1)])
        self.values[v] = t
        return t

    def static_value(self, v: ir.Value) -> np.ndarray | None:
        """The contents of a value when fully known."""
        t = self.tracked(v)
        return None if t is None else t.static()

    # -- walking --

    def run_function(self, fn: ir.Operation) -> None:
        body = fn.regions[0]
        if not body.blocks:
            return
        entry = body.blocks[0]
        arg_attrs = fn.attributes["arg_attrs"] if "arg_attrs" in fn.attributes else None
        for i, arg in enumerate(entry.arguments):
            dims = U.shape_of(arg.type)
            if dims is None:
                continue
            names = self._dim_params(arg_attrs, i)
            self.shapes[arg] = [
                d if d >= 0 else (_sym(f"@{names[j]}") if j < len(names) and names[j] else _sym(f"a{i}_{j}"))
                for j, d in enumerate(dims)
            ]
        for block in body.blocks:
            self.run_block(block)
        U.sync_function_type(fn)

    @staticmethod
    def _dim_params(arg_attrs: ir.Attribute | None, i: int) -> list[str]:
        if arg_attrs is None:
            return []
        try:
            entry = ir.DictAttr(ir.ArrayAttr(arg_attrs)[i])
            if "onnx.dim_params" not in entry:
                return []
            return [ir.StringAttr(a).value for a in ir.ArrayAttr(entry["onnx.dim_params"])]
        except (ValueError, TypeError, IndexError):
            return []

    def run_block(self, block: ir.Block) -> None:
        for op in U.block_ops(block):
            info = U.info_of(op)
            if info is not None and info.op_type == "Loop" and op.regions and op.regions[0].blocks:
                self.run_loop_body(op)
            elif info is not None and info.op_type == "Scan" and op.regions and op.regions[0].blocks:
                self.run_scan_body(op, info)
            else:
                for region in op.regions:
                    for inner in region.blocks:
                        self.run_block(inner)
            if U.is_onnx_op(op):
                try:
                    self.infer_op(op)
                except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError) as exc:
                    # A rule met IR it did not expect; the op keeps its declared types.
                    self.skipped.append((op.location, f"{U.location_text(op)}: shape inference skipped: {exc}"))

    def run_loop_body(self, op: ir.Operation) -> None:
        """Infer a Loop body with its loop-carried arguments typed like the initial values."""
        n_carried = len(op.operands) - 2
        if n_carried < 0:
            return
        carried = [(2 + k, op.operands[2 + k], 1 + k) for k in range(n_carried)]
        self.run_carried_body(op, carried, {})

    def run_scan_body(self, op: ir.Operation, info: OpInfo) -> None:
        """Infer a Scan body: states typed like the initial states, scan-input arguments like one
        slice of the scan inputs (their scan axis removed)."""
        n_scan = int(U.attr_value(op, "num_scan_inputs", 0) or 0)
        n_states = len(op.operands) - n_scan
        if n_scan <= 0 or n_states < 0 or info.since_versions[0] < 9:
            self._run_regions(op)
            return
        axes = list(U.attr_value(op, "scan_input_axes", None) or [0] * n_scan)
        fixed: dict[int, ir.Type] = {}
        for j in range(n_scan):
            v = op.operands[n_states + j]
            shape = U.shape_of(v.type)
            if shape is None or j >= len(axes):
                continue
            axis = int(axes[j]) + len(shape) if int(axes[j]) < 0 else int(axes[j])
            if not 0 <= axis < len(shape):
                continue
            fixed[n_states + j] = U.ranked_type(shape[:axis] + shape[axis + 1 :], U.element_type_of(v.type))
        carried = [(k, op.operands[k], k) for k in range(n_states)]
        self.run_carried_body(op, carried, fixed)

    def _run_regions(self, op: ir.Operation) -> None:
        for region in op.regions:
            for inner in region.blocks:
                self.run_block(inner)

    def run_carried_body(self, op: ir.Operation, carried: list[tuple[int, ir.Value, int]], fixed: dict[int, ir.Type]) -> None:
        """Infer the body of a Loop or Scan whose argument `i` carries the value yielded at `y`.

        A carried value may change shape from one iteration to the next, so the body is inferred
        again with every dim (or rank) where the yielded value disagrees made unknown, until the
        yielded types fit the arguments (at most three rounds); otherwise the carried arguments
        keep the types they came with. `fixed` arguments (scan slices) get their type once."""
        block = op.regions[0].blocks[0]
        args = list(block.arguments)
        if any(i >= len(args) for i, _, _ in carried) or any(i >= len(args) for i in fixed):
            self._run_regions(op)
            return
        body_values = [r for inner in U.collect_ops(op) for r in inner.results] + args
        originals = {v: v.type for v in body_values}
        start: dict[int, ir.Type] = {}
        for i, t in fixed.items():
            refined = U.refine_type(args[i].type, t) if U.is_tensor_type(args[i].type) else None
            if refined is not None:
                start[i] = refined
        candidates: dict[int, ir.Type] = {}
        yield_of: dict[int, int] = {}
        for i, init, y in carried:
            arg = args[i]
            refined = U.refine_type(arg.type, init.type) if U.is_tensor_type(arg.type) and U.is_tensor_type(init.type) else None
            if refined is not None and refined != arg.type:
                candidates[i] = refined
                yield_of[i] = y
        for _ in range(3):
            for i, t in {**start, **candidates}.items():
                args[i].set_type(t)
            self.run_block(block)
            term = U.terminator(block)
            if term is None:
                break
            changed = False
            for i, t in list(candidates.items()):
                y = yield_of[i]
                if y >= len(term.operands):
                    continue
                general = _generalize(t, term.operands[y].type)
                if general != t:
                    changed = True
                    if general == originals[args[i]] or not U.is_tensor_type(general):
                        del candidates[i]
                    else:
                        candidates[i] = general
            if not changed:
                return
            self._restore(originals)
        self._restore(originals)
        for i, t in start.items():
            args[i].set_type(t)
        self.run_block(block)

    def _restore(self, originals: dict[ir.Value, ir.Type]) -> None:
        for v, t in originals.items():
            if v.type != t:
                v.set_type(t)
            self.shapes.pop(v, None)
            self.values.pop(v, None)

    # -- one op --

    def infer_op(self, op: ir.Operation) -> None:
        name = op.name
        if name in (U.NONE_OP, U.CUSTOM_OP):
            return
        info = U.info_of(op)
        if info is None:
            return
        if info.op_type == "Constant":
            self.values_of_constant(op)
            return
        inferred: list[list[Dim] | None | bool] | None = None
        # With every result already static there is nothing to refine: unless asked to check the
        # declared types, the type rules are skipped (most ops of most CNNs).
        if self.check or not all(_fully_static(r.type) for r in op.results):
            rule = _SHAPE_RULES.get(info.op_type)
            if rule is not None:
                inferred = rule(self, op, info)
            if inferred is None and not op.regions:
                inferred = self.onnx_infer(op, info)
        if inferred is not None:
            for res, dims in zip(op.results, inferred):
                if dims is not False:
                    self.apply(op, res, dims)
        value_rule = _VALUE_RULES.get(info.op_type)
        if value_rule is not None and len(op.results) >= 1:
            res = op.results[0]
            shp = self.shape(res)
            if shp is not None and all(is_static(d) for d in shp) and int(np.prod(shp)) <= self.max_value_elements:
                try:
                    tracked = value_rule(self, op, info)
                except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
                    tracked = None
                if tracked is not None and tuple(tracked.shape) == tuple(int(d) for d in shp):
                    self.values[res] = tracked

    def values_of_constant(self, op: ir.Operation) -> None:
        res = op.results[0]
        arr = U.constant_attr_array(op, self.max_value_elements)
        if arr is not None:
            self.values[res] = Tracked(tuple(arr.shape), [x.item() for x in arr.reshape(-1)])

    def apply(self, op: ir.Operation, res: ir.Value, dims: list[Dim] | None | bool) -> None:
        """Merge inferred symbolic dims into a result's declared type."""
        if not U.is_tensor_type(res.type):
            return
        declared = U.shape_of(res.type)
        elem = ir.ShapedType(res.type).element_type
        if dims is None or dims is True:
            if declared is not None:
                self.shape(res)
            return
        dims = list(dims)
        if declared is None:
            merged = dims
        elif len(declared) != len(dims):
            self.conflicts.append((op.location, f"{U.location_text(op)}: result #{res.result_number} is declared rank {len(declared)} but inferred rank {len(dims)}"))
            self.shape(res)
            return
        else:
            merged = []
            for j, (d, n) in enumerate(zip(declared, dims)):
                if d >= 0:
                    if is_static(n) and n != d:
                        self.conflicts.append((op.location, f"{U.location_text(op)}: result #{res.result_number} dim {j} is declared {d} but inferred {n}"))
                    merged.append(d)
                else:
                    merged.append(n)
        if any(is_static(d) and d < 0 for d in merged):
            return  # an inferred negative size means a rule misfired; trust the declared type
        sym_dims: list[Dim] = [d if d is not None else self.fresh() for d in merged]
        new_type = U.ranked_type([int(d) if is_static(d) else -1 for d in sym_dims], elem)
        if new_type != res.type:
            if U.result_in_variadic_tail(op, res.result_number) or U.used_in_variadic_tail(res):
                # IRDL wants one type across a variadic tail; refining one member alone would
                # break verification, so the value keeps its declared type (inference still
                # uses what it found).
                self.shapes[res] = sym_dims
                return
            res.set_type(new_type)
            self.refined += 1
        self.shapes[res] = sym_dims

    # -- onnx's own inference --

    def type_proto(self, v: ir.Value) -> onnx.TypeProto:
        t = v.type
        if not U.is_tensor_type(t):
            return types_mod.type_to_proto(t)
        elem = types_mod.onnx_element_type(ir.ShapedType(t).element_type).onnx_dtype
        dims = self.shape(v)
        if dims is None:
            return helper.make_tensor_type_proto(elem, None)
        shape: list[Any] = []
        for d in dims:
            if is_static(d):
                shape.append(int(d))
            elif isinstance(d, Sym):
                key = str(d)
                self.sym_names[key] = d
                shape.append(key)
            else:
                shape.append(None)
        return helper.make_tensor_type_proto(elem, shape)

    def onnx_infer(self, op: ir.Operation, info: OpInfo) -> list[list[Dim] | None | bool] | None:
        schema = _schema(info)
        if schema is None:
            return None
        inputs: list[str] = []
        types: dict[str, onnx.TypeProto] = {}
        data: dict[str, onnx.TensorProto] = {}
        for i, v in enumerate(op.operands):
            if U.is_none_value(v):
                inputs.append("")
                continue
            key = f"i{i}"
            inputs.append(key)
            try:
                types[key] = self.type_proto(v)
            except types_mod.UnsupportedTypeError:
                return None
            arr = self.static_value(v)
            if arr is not None:
                dtype = U.numpy_dtype_of(ir.ShapedType(v.type).element_type) if U.is_tensor_type(v.type) else None
                if dtype is not None:
                    data[key] = numpy_helper.from_array(arr.astype(dtype))
        outputs = ["" if isinstance(r.type, ir.NoneType) else f"o{k}" for k, r in enumerate(op.results)]
        # Tensor attributes onnx cannot be given (a large weight) do not matter for types.
        node = U.node_proto(op, info, inputs, outputs, skip_unreadable_tensors=True)
        if node is None:
            return None
        try:
            out = onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=[helper.make_opsetid(info.domain, info.since_versions[-1])]
            )
        except Exception:  # noqa: BLE001 - onnx raises several kinds; the op keeps its types
            return None
        result: list[list[Dim] | None | bool] = []
        for k, r in enumerate(op.results):
            tp = out.get(f"o{k}")
            if tp is None or tp.WhichOneof("value") != "tensor_type":
                result.append(False)
                continue
            tt = tp.tensor_type
            if not tt.HasField("shape"):
                result.append(None)
                continue
            dims: list[Dim] = []
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param in self.sym_names:
                    dims.append(self.sym_names[d.dim_param])
                else:
                    dims.append(None)
            result.append(dims)
        return result

    # -- helpers for rules --

    def int_items(self, v: ir.Value) -> list[Dim] | None:
        """The elements of a 1-D/0-D integer tensor as dims (None for unknown elements), or None
        when not even its length is known."""
        if U.is_none_value(v):
            return None
        t = self.tracked(v)
        if t is not None:
            return [x if isinstance(x, Sym) or x is None else int(x) for x in t.items]
        return None

    def length(self, v: ir.Value) -> int | None:
        """The static length of a 1-D tensor."""
        s = self.shape(v)
        if s is not None and len(s) == 1 and is_static(s[0]):
            return int(s[0])
        return None


# --- shape rules (return one entry per result: dims, None for unknown rank, False to skip) --------


def _rule_reshape(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    if len(op.operands) < 2:
        return None
    target = inf.int_items(op.operands[1])
    if target is None:
        n = inf.length(op.operands[1])
        return None if n is None else [[None] * n]
    data = inf.shape(op.operands[0])
    allowzero = int(U.attr_value(op, "allowzero", 0) or 0)
    out: list[Dim] = []
    infer_at = -1
    for j, t in enumerate(target):
        if t == 0 and not allowzero:
            out.append(data[j] if data is not None and j < len(data) else None)
        elif t == -1:
            infer_at = j
            out.append(None)
        else:
            out.append(t if (isinstance(t, Sym) or (is_static(t) and t >= 0)) else None)
    if infer_at >= 0 and data is not None and all(d is not None for d in data):
        others = [d for k, d in enumerate(out) if k != infer_at]
        if all(d is not None for d in others):
            out[infer_at] = dim_div(dims_product(data), dims_product(others))
    return [out]


def _broadcast_dim(a: Dim, b: Dim) -> Dim:
    if a == 1:
        return b
    if b == 1:
        return a
    if a == b:
        return a
    if is_static(a) and not is_static(b):
        return a  # b must be 1 or equal to a
    if is_static(b) and not is_static(a):
        return b
    if is_static(a) and is_static(b):
        raise ValueError(f"dims {a} and {b} do not broadcast")
    return None


def _broadcast(a: list[Dim], b: list[Dim]) -> list[Dim]:
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + list(a)
    b = [1] * (n - len(b)) + list(b)
    return [_broadcast_dim(x, y) for x, y in zip(a, b)]


def _rule_expand(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    target = inf.int_items(op.operands[1])
    data = inf.shape(op.operands[0])
    if target is None or data is None:
        return None
    # A target element of an unknown value may still be 1, so it leaves a static input dim > 1 alone.
    return [_broadcast(data, target)]


def _rule_constant_of_shape(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    target = inf.int_items(op.operands[0])
    if target is None:
        return None
    return [[t if isinstance(t, Sym) or (is_static(t) and t >= 0) else None for t in target]]


def _rule_tile(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    reps = inf.int_items(op.operands[1])
    data = inf.shape(op.operands[0])
    if reps is None or data is None or len(reps) != len(data) or info.since_version < 6:
        return None
    return [[dim_mul(d, r) for d, r in zip(data, reps)]]


def _slice_params(inf: _Inferer, op: ir.Operation, rank: int) -> list[tuple[int, int, int, int]] | None:
    starts = inf.static_value(op.operands[1])
    ends = inf.static_value(op.operands[2])
    if starts is None or ends is None:
        return None
    axes = inf.static_value(op.operands[3]) if len(op.operands) > 3 and not U.is_none_value(op.operands[3]) else np.arange(len(starts))
    steps = inf.static_value(op.operands[4]) if len(op.operands) > 4 and not U.is_none_value(op.operands[4]) else np.ones(len(starts), np.int64)
    if axes is None or steps is None:
        return None
    out = []
    for s, e, a, st in zip(starts.reshape(-1), ends.reshape(-1), axes.reshape(-1), steps.reshape(-1)):
        a = int(a) + rank if int(a) < 0 else int(a)
        out.append((a, int(s), int(e), int(st)))
    return out


def _slice_dim(d: Dim, s: int, e: int, st: int) -> Dim:
    if st == 0:
        raise ValueError("Slice step 0")
    if is_static(d):
        return len(range(*slice(s, e, st).indices(int(d))))
    if st == 1 and s == 0 and e >= INT_MAX // 4:
        return d
    if st == -1 and s == -1 and e <= -(INT_MAX // 4):
        return d
    return None


def _rule_slice(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    if info.since_version < 10:
        return None
    data = inf.shape(op.operands[0])
    if data is None:
        return None
    params = _slice_params(inf, op, len(data))
    if params is None:
        return None
    out = list(data)
    for a, s, e, st in params:
        out[a] = _slice_dim(out[a], s, e, st)
    return [out]


def _rule_if(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    """If: with a condition whose value is known, the taken branch's shapes; otherwise what both
    branches agree on."""
    names = info.regions  # regions follow the sorted GRAPH attribute names
    branches: dict[str, list[list[Dim] | None]] = {}
    for name, region in zip(names, op.regions):
        if not region.blocks:
            return None
        term = U.terminator(region.blocks[0])
        if term is None:
            return None
        branches[name] = [inf.shape(v) if U.is_tensor_type(v.type) else None for v in term.operands]
    if set(branches) != {"else_branch", "then_branch"}:
        return None
    cond = inf.static_value(op.operands[0])
    if cond is not None and cond.size == 1:
        taken = branches["then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"]
        return [list(d) if d is not None else None for d in taken]
    then_b, else_b = branches["then_branch"], branches["else_branch"]
    if len(then_b) != len(else_b):
        return None
    out: list[Any] = []
    for a, b in zip(then_b, else_b):
        if a is None or b is None or len(a) != len(b):
            out.append(None)
        else:
            out.append([x if x == y else None for x, y in zip(a, b)])
    return out


def _generalize(a: ir.Type, b: ir.Type) -> ir.Type:
    """The most precise type covering both `a` and `b` (same element type assumed)."""
    if a == b:
        return a
    sa, sb = U.shape_of(a), U.shape_of(b)
    elem = U.element_type_of(a)
    if elem is None or elem != U.element_type_of(b):
        return b
    if sa is None or sb is None or len(sa) != len(sb):
        return ir.UnrankedTensorType.get(elem)
    return U.ranked_type([x if x == y else -1 for x, y in zip(sa, sb)], elem)


def _fully_static(t: ir.Type) -> bool:
    """A `none` type, or a tensor type with a static shape (nothing left to refine)."""
    if isinstance(t, ir.NoneType):
        return True
    shape = U.shape_of(t)
    return shape is not None and all(d >= 0 for d in shape)


def _merge_dims(a: list[Dim] | None, b: list[Dim] | None) -> list[Dim] | None:
    if a is None or b is None or len(a) != len(b):
        return None
    return [x if x == y else None for x, y in zip(a, b)]


def _rule_loop(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    """Loop results: carried values keep the dims their initial and yielded values agree on; scan
    outputs stack the yielded values along a new leading dim of unknown size."""
    if not op.regions or not op.regions[0].blocks:
        return None
    term = U.terminator(op.regions[0].blocks[0])
    if term is None:
        return None
    yielded = list(term.operands)
    n_carried = len(op.operands) - 2
    out: list[Any] = []
    for k, res in enumerate(op.results):
        if k < n_carried:
            init, body = op.operands[2 + k], yielded[1 + k] if 1 + k < len(yielded) else None
            if body is None or not (U.is_tensor_type(init.type) and U.is_tensor_type(body.type)):
                out.append(False)
                continue
            out.append(_merge_dims(inf.shape(init), inf.shape(body)))
        else:
            j = 1 + k
            if j >= len(yielded) or not U.is_tensor_type(yielded[j].type):
                out.append(False)
                continue
            dims = inf.shape(yielded[j])
            out.append(None if dims is None else [None] + list(dims))
    return out


def _rule_scan(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    """Scan-9+ results: final states keep the dims initial and yielded states agree on; scan
    outputs stack the yielded slices along their scan output axis, whose length is the scan
    inputs' sequence length."""
    if info.since_versions[0] < 9 or not op.regions or not op.regions[0].blocks:
        return None
    n_scan = int(U.attr_value(op, "num_scan_inputs", 0) or 0)
    n_states = len(op.operands) - n_scan
    term = U.terminator(op.regions[0].blocks[0])
    if term is None:
        return None
    yielded = list(term.operands)
    in_axes = list(U.attr_value(op, "scan_input_axes", None) or [0] * n_scan)
    seq_len: Dim = None
    if n_scan > 0:
        first = inf.shape(op.operands[n_states])
        if first is not None and in_axes:
            a = int(in_axes[0]) + len(first) if int(in_axes[0]) < 0 else int(in_axes[0])
            seq_len = first[a] if 0 <= a < len(first) else None
    out_axes = list(U.attr_value(op, "scan_output_axes", None) or [])
    out: list[Any] = []
    for k, res in enumerate(op.results):
        if k >= len(yielded) or not U.is_tensor_type(yielded[k].type):
            out.append(False)
            continue
        dims = inf.shape(yielded[k])
        if k < n_states:
            out.append(_merge_dims(inf.shape(op.operands[k]), dims))
            continue
        if dims is None:
            out.append(None)
            continue
        j = k - n_states
        axis = int(out_axes[j]) if j < len(out_axes) else 0
        axis = axis + len(dims) + 1 if axis < 0 else axis
        out.append(list(dims[:axis]) + [seq_len] + list(dims[axis:]))
    return out


_REDUCE_OPS = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
               "ReduceProd", "ReduceSum", "ReduceSumSquare")  # fmt: skip


def _rule_reduce_runtime_axes(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    """A reduction whose `axes` input is known only at run time still keeps the rank with
    keepdims=1 (each dim is itself or 1); everything else is onnx's rule."""
    if len(op.operands) < 2 or U.is_none_value(op.operands[1]) or inf.static_value(op.operands[1]) is not None:
        return None
    if int(U.attr_value(op, "keepdims", 1)) != 1:
        return None
    dims = inf.shape(op.operands[0])
    if dims is None:
        return None
    return [[1 if d == 1 else None for d in dims]]


def _rule_same_as_input(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    """Ops onnx has no inference function for whose output has the input's shape."""
    return [inf.shape(op.operands[0])] + [False] * (len(op.results) - 1)


def _batch(inf: _Inferer, v: ir.Value) -> Dim:
    """N of an ML operator's [N, C] (or [C]) input."""
    dims = inf.shape(v)
    if dims is None:
        return None
    return dims[0] if len(dims) == 2 else (1 if len(dims) == 1 else None)


def _count(op: ir.Operation, *names: str) -> int | None:
    for name in names:
        value = U.attr_value(op, name, None)
        if value is not None:
            return len(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    return None


def _rule_ml_regressor(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    """LinearRegressor, SVMRegressor, TreeEnsembleRegressor: [N, targets]."""
    key = {"LinearRegressor": "targets", "TreeEnsembleRegressor": "n_targets"}.get(info.op_type)
    targets = int(U.attr_value(op, key, 1) or 1) if key else 1
    return [[_batch(inf, op.operands[0]), targets]]


def _rule_tree_classifier(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    """TreeEnsembleClassifier: labels [N], scores [N, classes]."""
    n = _batch(inf, op.operands[0])
    classes = _count(op, "classlabels_int64s", "classlabels_strings")
    return [[n], [n, classes]]


def _rule_feature_vectorizer(inf: _Inferer, op: ir.Operation, info: OpInfo) -> list[Any] | None:
    """FeatureVectorizer: [N, sum(inputdimensions)]."""
    dims = U.attr_value(op, "inputdimensions", None)
    if not op.operands:
        return None
    return [[_batch(inf, op.operands[0]), int(sum(dims)) if dims else None]]


_SHAPE_RULES: dict[str, Callable[[_Inferer, ir.Operation, OpInfo], list[Any] | None]] = {
    "LinearRegressor": _rule_ml_regressor,
    "SVMRegressor": _rule_ml_regressor,
    "TreeEnsembleRegressor": _rule_ml_regressor,
    "TreeEnsembleClassifier": _rule_tree_classifier,
    "FeatureVectorizer": _rule_feature_vectorizer,
    "Loop": _rule_loop,
    **{t: _rule_reduce_runtime_axes for t in _REDUCE_OPS},
    "Scan": _rule_scan,
    "GroupNormalization": _rule_same_as_input,
    "MeanVarianceNormalization": _rule_same_as_input,
    "Scaler": _rule_same_as_input,
    "Normalizer": _rule_same_as_input,
    "Imputer": _rule_same_as_input,
    "Reshape": _rule_reshape,
    "Expand": _rule_expand,
    "ConstantOfShape": _rule_constant_of_shape,
    "Tile": _rule_tile,
    "Slice": _rule_slice,
    "If": _rule_if,
}


# --- value rules (the contents of small integer tensors) ------------------------------------------


def _val_shape(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    dims = inf.shape(op.operands[0])
    if dims is None:
        return None
    start, end = U.shape_slice(op, len(dims))
    items = list(dims[start:end]) if end > start else []
    return Tracked((len(items),), items)


def _val_size(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    dims = inf.shape(op.operands[0])
    if dims is None:
        return None
    return Tracked((), [dims_product(dims)])


def _val_passthrough(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    t = inf.tracked(op.operands[0])
    shp = inf.shape(op.results[0])
    if t is None or shp is None:
        return None
    return Tracked(tuple(int(d) for d in shp), list(t.items))


def _val_cast(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    t = inf.tracked(op.operands[0])
    if t is None:
        return None
    to_elem = ir.ShapedType(op.results[0].type).element_type
    dtype = U.numpy_dtype_of(to_elem)
    if dtype is None:
        return None
    items: list[Any] = []
    for x in t.items:
        if x is None or isinstance(x, Sym):
            items.append(x if dtype.kind in "iu" else None)
        else:
            items.append(np.array(x).astype(dtype).item())
    return Tracked(t.shape, items)


def _val_gather(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    t = inf.tracked(op.operands[0])
    idx = inf.static_value(op.operands[1])
    if t is None or idx is None or len(t.shape) != 1 or int(U.attr_value(op, "axis", 0) or 0) not in (0, -1):
        return None
    n = t.shape[0]
    items = [t.items[int(i) + n if int(i) < 0 else int(i)] for i in idx.reshape(-1)]
    return Tracked(tuple(idx.shape), items)


def _val_concat(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    items: list[Any] = []
    for v in op.operands:
        t = inf.tracked(v)
        if t is None or len(t.shape) != 1:
            return None
        items.extend(t.items)
    return Tracked((len(items),), items)


def _val_slice(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    t = inf.tracked(op.operands[0])
    if t is None or len(t.shape) != 1 or info.since_version < 10:
        return None
    params = _slice_params(inf, op, 1)
    if params is None or len(params) != 1:
        return None
    _, s, e, st = params[0]
    items = t.items[slice(s, e, st)]
    return Tracked((len(items),), items)


def _elementwise(fn: Callable[[Any, Any], Any]) -> Callable[[_Inferer, ir.Operation, OpInfo], Tracked | None]:
    def rule(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
        # Variadic ops (Max, Min) fold their operands left to right.
        ts = [inf.tracked(v) for v in op.operands]
        if not ts or any(t is None for t in ts):
            return None
        acc = ts[0]
        for b in ts[1:]:
            shape = np.broadcast_shapes(acc.shape, b.shape)
            ia = np.broadcast_to(np.arange(len(acc.items)).reshape(acc.shape), shape).reshape(-1)
            ib = np.broadcast_to(np.arange(len(b.items)).reshape(b.shape), shape).reshape(-1)
            acc = Tracked(tuple(shape), [fn(acc.items[i], b.items[j]) for i, j in zip(ia, ib)])
        return acc

    return rule


def _known(x: Any) -> bool:
    return x is not None and not isinstance(x, Sym)


def _add(a: Any, b: Any) -> Any:
    if _known(a) and _known(b):
        return a + b
    if b == 0:
        return a
    if a == 0:
        return b
    return None


def _sub(a: Any, b: Any) -> Any:
    if _known(a) and _known(b):
        return a - b
    if b == 0:
        return a
    return None


def _mul(a: Any, b: Any) -> Any:
    if _known(a) and _known(b):
        return a * b
    if (a is None or b is None) or isinstance(a, float) or isinstance(b, float):
        return None
    return dim_mul(a, b)


def _div(a: Any, b: Any) -> Any:
    if _known(a) and _known(b):
        if isinstance(a, float) or isinstance(b, float):
            return a / b
        return int(a / b) if b != 0 else None  # ONNX integer Div truncates like C
    if b == 1:
        return a
    if a is None or b is None or isinstance(a, float) or isinstance(b, float):
        return None
    return dim_div(a, b)


def _max(a: Any, b: Any) -> Any:
    if _known(a) and _known(b):
        return max(a, b)
    if a == b:
        return a
    if isinstance(a, Sym) and _known(b) and b <= 1:
        return a  # symbols are sizes >= 1
    if isinstance(b, Sym) and _known(a) and a <= 1:
        return b
    return None


def _min(a: Any, b: Any) -> Any:
    if _known(a) and _known(b):
        return min(a, b)
    if a == b:
        return a
    return None


def _equal(a: Any, b: Any) -> Any:
    if _known(a) and _known(b):
        return bool(a == b)
    if a is not None and a == b:
        return True
    if isinstance(a, Sym) and _known(b) and b < 1 or isinstance(b, Sym) and _known(a) and a < 1:
        return False
    return None


def _val_unary(fn: Callable[[Any], Any]) -> Callable[[_Inferer, ir.Operation, OpInfo], Tracked | None]:
    def rule(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
        t = inf.tracked(op.operands[0])
        if t is None:
            return None
        return Tracked(t.shape, [fn(x) for x in t.items])

    return rule


def _val_where(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    ts = [inf.tracked(v) for v in op.operands[:3]]
    if any(t is None for t in ts):
        return None
    c, a, b = ts
    shape = np.broadcast_shapes(c.shape, a.shape, b.shape)
    idx = [np.broadcast_to(np.arange(len(t.items)).reshape(t.shape), shape).reshape(-1) for t in ts]
    items = []
    for ic, ia, ib in zip(*idx):
        cond = c.items[ic]
        items.append(None if cond is None else (a.items[ia] if cond else b.items[ib]))
    return Tracked(tuple(shape), items)


def _val_constant_of_shape(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    target = inf.static_value(op.operands[0])
    if target is None:
        return None
    value = U.attr_value(op, "value", None)
    fill = 0 if value is None or not isinstance(value, np.ndarray) else value.reshape(-1)[0].item()
    shape = tuple(int(x) for x in target.reshape(-1))
    return Tracked(shape, [fill] * int(np.prod(shape)))


def _val_range(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
    vals = [inf.static_value(v) for v in op.operands[:3]]
    if any(v is None for v in vals):
        return None
    start, limit, delta = (v.item() for v in vals)
    items = np.arange(start, limit, delta).tolist()
    return Tracked((len(items),), items)


def _val_reduce(fn: Callable[[Any, Any], Any]) -> Callable[[_Inferer, ir.Operation, OpInfo], Tracked | None]:
    def rule(inf: _Inferer, op: ir.Operation, info: OpInfo) -> Tracked | None:
        t = inf.tracked(op.operands[0])
        if t is None or len(t.shape) != 1:
            return None
        acc = t.items[0] if t.items else None
        for x in t.items[1:]:
            acc = fn(acc, x)
        shp = inf.shape(op.results[0])
        if shp is None or int(np.prod([int(d) for d in shp])) != 1:
            return None
        return Tracked(tuple(int(d) for d in shp), [acc])

    return rule


_VALUE_RULES: dict[str, Callable[[_Inferer, ir.Operation, OpInfo], Tracked | None]] = {
    "Shape": _val_shape,
    "Size": _val_size,
    "Identity": _val_passthrough,
    "Squeeze": _val_passthrough,
    "Unsqueeze": _val_passthrough,
    "Reshape": _val_passthrough,
    "Flatten": _val_passthrough,
    "Cast": _val_cast,
    "Gather": _val_gather,
    "Concat": _val_concat,
    "Slice": _val_slice,
    "Add": _elementwise(_add),
    "Sub": _elementwise(_sub),
    "Mul": _elementwise(_mul),
    "Div": _elementwise(_div),
    "Max": _elementwise(_max),
    "Min": _elementwise(_min),
    "Equal": _elementwise(_equal),
    "Neg": _val_unary(lambda x: -x if _known(x) else None),
    "Abs": _val_unary(lambda x: abs(x) if _known(x) else (x if isinstance(x, Sym) else None)),
    "Not": _val_unary(lambda x: (not x) if _known(x) else None),
    "Where": _val_where,
    "ConstantOfShape": _val_constant_of_shape,
    "Range": _val_range,
    "ReduceProd": _val_reduce(_mul),
    "ReduceSum": _val_reduce(_add),
}

SHAPE_RULE_OPS = tuple(sorted(_SHAPE_RULES))
VALUE_RULE_OPS = tuple(sorted(_VALUE_RULES))

__all__ = ["OnnxShapeInferencePass", "Sym", "infer_shapes", "SHAPE_RULE_OPS", "VALUE_RULE_OPS"]
