"""`onnx-upgrade-ops`: rewrite every ONNX-dialect op to the newest version of its operator.

Why: the importer keeps each node at the version its model's opset binds it to (`onnx.reduce_sum_v1`,
`onnx.slice_v1`...), so nothing is lost and export writes the model back as it was. Lowering,
shape rules and folding should each know one version per operator, not every version since
opset 1. This pass makes the versioning rules executable: it walks each op forward through the
dialect's versions of its operator, one signature change at a time (as onnx's own
`version_converter` does on ModelProtos, whose adapters cannot run on our IR).

Each step either
* renames (the versions differ only in allowed types, in attributes added with defaults that keep
  the old behaviour, in optional inputs/outputs added at the end, or in attributes that carry no
  semantics any more such as `consumed_inputs`); an attribute whose default changed gets the old
  default written out, so behaviour never changes silently; or
* runs an adapter for a real signature change: attributes that became inputs (Reshape-5, Slice-10,
  TopK-10, Pad-11, Clip-11, Dropout-12, Squeeze/Unsqueeze/ReduceSum-13, Split-13, the other
  Reduce ops at 18, DFT-20), legacy `broadcast`/`axis` of the binary ops (7), Softmax/LogSoftmax/
  Hardmax-13 (no more coercion to 2-D: an axis other than the last gets Flatten + Reshape),
  BatchNormalization (`is_test`, `spatial`, the outputs of 14), Dropout's bool mask (10), Cast's
  string `to` (6), LpPool/GlobalLpPool's float `p` (2), Pad's `paddings` (2), Split's input (2)
  and `num_outputs` (18), Tile-6, Upsample (7, 9, then Resize-10), Resize (11), RoiAlign-16,
  Scan-9 (the batch axis of Scan-8 becomes a Loop around a Scan-9),
  GridSample-20 (mode names), GroupNormalization-21, LabelEncoder-2, Scatter -> ScatterElements.

Some semantics changed without a signature change, so one dialect op covers both: PRelu-6 and
PRelu-7 share `onnx.prelu_v6`, but PRelu-6 applies a [C] slope per channel while PRelu-7
broadcasts it numpy-style. The module's (or function's) `onnx.opset_import` says which one a node
meant, and such ops get their old meaning spelled out first (the slope gets trailing unit dims).

After every step the new op is checked with the dialect's verifier (type constraints, attribute
kinds); a step that cannot be done safely (Scan-8 with per-batch sequence lengths, a non-constant Tile-1 count,
BatchNormalization with `spatial = 0`, Erf on integers...) leaves the op at the version it
reached, and the op is reported: all of them in one warning, or, with `strict`, as a pass
failure. When every op of a domain ends at its newest version, the module's (and functions')
`onnx.opset_import` entry for that domain is raised to the smallest opset binding all of them (and
`onnx.ir_version` to the smallest IR version that opset needs), so export writes a consistent model.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import onnx
from mlir import ir

from onnxc.dialect import attributes as attrs_mod
from onnxc.dialect.builder import onnx_op, yield_values
from onnxc.dialect.opinfo import OpInfo
from onnxc.dialect.optable import OPS
from onnxc.dialect.table import lookup, op_info
from onnxc.dialect.types import element_type
from onnxc.dialect.verifier import verify_op
from onnxc.errors import OnnxcError
from onnxc.transforms import onnx_utils as U
from onnxc.transforms.pass_base import ModulePass, PassFailure

# Attributes that carry no semantics in any version (legacy memory-optimization hints), or whose
# removal the adapters below account for.
_DROPPABLE = frozenset({"consumed_inputs"})
# Attributes the builder derives from the operands and results (variadic groups).
_SEGMENT_ATTRS = frozenset({"operandSegmentSizes", "resultSegmentSizes"})


class Unsupported(OnnxcError):
    """An upgrade step that cannot be done safely; the message says why. Caught inside the pass,
    which turns it into a diagnostic; an OnnxcError so that one escaping by mistake still ends
    in a message, not a traceback."""


@lru_cache(maxsize=None)
def _chains() -> dict[tuple[str, str], list[OpInfo]]:
    """Per (domain, op type), its dialect ops oldest first."""
    out: dict[tuple[str, str], list[OpInfo]] = {}
    for info in OPS:
        out.setdefault((info.domain, info.op_type), []).append(info)
    for chain in out.values():
        chain.sort(key=lambda i: i.since_versions[0])
    return out


# Deprecated operators replaced by another operator with the same signature and semantics.
_SUCCESSOR: dict[tuple[str, str], tuple[str, str, int]] = {
    ("", "Upsample"): ("", "Resize", 10),
    ("", "Scatter"): ("", "ScatterElements", 11),
}


def next_version(info: OpInfo) -> OpInfo | None:
    """The dialect op one signature change after `info`, or None at the newest."""
    chain = _chains()[(info.domain, info.op_type)]
    i = chain.index(info)
    if i + 1 < len(chain):
        return chain[i + 1]
    succ = _SUCCESSOR.get((info.domain, info.op_type))
    if succ is not None:
        return lookup(succ[1], succ[0], succ[2])
    return None


def is_newest(info: OpInfo) -> bool:
    """Whether `info` is the newest dialect op of its operator (with no successor operator)."""
    return next_version(info) is None


@dataclass(frozen=True)
class OnnxUpgradeOpsPass(ModulePass):
    """Rewrite every ONNX op to the newest version of its operator (the versioning rules).

    Options: `strict` fails the pass when some op cannot be upgraded (instead of leaving it at the
    newest version it could reach and warning).
    """

    name = "onnx-upgrade-ops"
    strict: bool = False

    def run(self, module: ir.Operation) -> None:
        module = module.operation
        with module.context, ir.Location.unknown():
            upgrader = Upgrader()
            upgrader.run(module)
        if upgrader.failures:
            if self.strict:
                raise PassFailure(self.name, upgrader.failures)
            lines = "\n".join(f"  {loc}: {msg}" for loc, msg in upgrader.failures)
            warnings.warn(f"onnx-upgrade-ops left {len(upgrader.failures)} op(s) at an older version:\n{lines}", stacklevel=2)


class Upgrader:
    """Upgrades ops one step at a time; `upgraded` counts ops changed, `failures` lists the rest."""

    def __init__(self) -> None:
        self.upgraded = 0
        self.steps = 0
        self.failures: list[tuple[ir.Location | None, str]] = []

    def run(self, module: ir.Operation) -> None:
        module = module.operation
        with module.context, ir.Location.unknown():
            module_opsets = _opsets_of(module)
            for fn in U.functions(module):
                opsets = {**module_opsets, **_opsets_of(fn)}
                for op in U.collect_ops(fn, U.is_onnx_op):
                    self.upgrade(op, opsets)
            _update_opsets(module)

    def upgrade(self, op: ir.Operation, opsets: dict[str, int] | None = None) -> ir.Operation:
        """Upgrade one op as far as possible; returns the op now standing in its place.

        `opsets` (domain -> version the model imports) tells semantics apart that one dialect op
        covers: PRelu-6 and PRelu-7 share a signature but not their broadcasting."""
        info = U.info_of(op)
        if info is None:
            return op
        changed = False
        bound = (opsets or {}).get(info.domain)
        fix = _SEMANTIC_FIXES.get((info.domain, info.op_type))
        if fix is not None and bound is not None and bound < fix[0] and info.since_versions[0] < fix[0]:
            try:
                changed = fix[1](op) or changed
            except Unsupported as exc:
                self.failures.append((op.location, f"{info.op_type} {info.name} at opset {bound}: {exc}"))
                return op
        while True:
            dst = next_version(info)
            if dst is None:
                break
            try:
                op = Step(op, info, dst).run()
            except Unsupported as exc:
                self.failures.append((op.location, f"{info.op_type} {info.name} -> {dst.name}: {exc}"))
                break
            self.steps += 1
            changed = True
            info = dst
        if changed:
            self.upgraded += 1
        return op


@lru_cache(maxsize=None)
def _widens_by_name(src: str, dst: str) -> bool:
    a, b = op_info(src), op_info(dst)
    if a is None or b is None:
        return False
    if [(p.type_str, p.option) for p in a.inputs] != [(p.type_str, p.option) for p in b.inputs[: len(a.inputs)]]:
        return False
    if [(p.type_str, p.option) for p in a.outputs] != [(p.type_str, p.option) for p in b.outputs[: len(a.outputs)]]:
        return False
    tb = dict(b.type_constraints)
    return all(name in tb and set(allowed) <= set(tb[name]) for name, allowed in a.type_constraints)


def _widens(src: OpInfo, dst: OpInfo) -> bool:
    """Whether every operand/result type `src` allows, `dst` allows at the same position."""
    return _widens_by_name(src.full_name, dst.full_name)


# --- one step -------------------------------------------------------------------------------------


class Step:
    """Rewriting one op from dialect op `src` to dialect op `dst`.

    Adapters edit `operands`, `attrs` (name -> MLIR attribute), `result_types` and `result_map`
    (new result index for each old result, None for an old result that is dropped and must be
    unused), or set `replacement` (values replacing the old results) to build the new IR
    themselves. Helper ops they create go in `created`, erased again if the step fails.
    """

    def __init__(self, op: ir.Operation, src: OpInfo, dst: OpInfo) -> None:
        self.op = op
        self.src = src
        self.dst = dst
        self.operands: list[ir.Value | None] = [None if U.is_none_value(v) else v for v in op.operands]
        # ONNX attributes go through the builder; anything else on the op (discardable
        # attributes such as `onnx.node_extras`) is copied over after building, except the
        # segment sizes the builder computes itself.
        all_attrs = dict(op.attributes.items())
        self.attrs: dict[str, ir.Attribute] = {k: v for k, v in all_attrs.items() if src.attr(k) is not None}
        self.extra_attrs: dict[str, ir.Attribute] = {
            k: v for k, v in all_attrs.items() if src.attr(k) is None and k not in _SEGMENT_ATTRS
        }
        self.result_types: list[ir.Type | None] = [r.type for r in op.results]
        self.result_map: list[int | None] = list(range(len(op.results)))
        self.replacement: list[ir.Value] | None = None
        self.replacement_op: ir.Operation | None = None  # the op of `dst` inside the replacement
        self.post: Callable[[ir.Operation], list[ir.Value]] | None = None
        self.created: list[ir.Operation] = []
        self.adapted = False

    # -- helpers for adapters --

    def get(self, name: str, default: Any = None) -> Any:
        """The plain value of a source attribute (or the source schema's default, or `default`)."""
        if name in self.attrs:
            return attrs_mod.from_mlir(self.attrs[name])
        spec = self.src.attr(name)
        return spec.default if spec is not None and spec.default is not None else default

    def pop(self, name: str, default: Any = None) -> Any:
        """`get`, then remove the attribute."""
        value = self.get(name, default)
        self.attrs.pop(name, None)
        return value

    def set(self, name: str, value: Any) -> None:
        """Set a destination attribute from a plain value (converted by the destination's kind)."""
        spec = self.dst.attr(name)
        if spec is None:
            raise Unsupported(f"{self.dst.op_type} has no attribute '{name}'")
        self.attrs[name] = attrs_mod.to_mlir(spec.kind, value)

    def const(self, array: np.ndarray, elem: ir.Type | None = None) -> ir.Value:
        """A constant before the op."""
        with ir.InsertionPoint(self.op), self.op.location:
            v = U.make_constant(np.asarray(array), elem)
        if v is None:
            raise Unsupported(f"cannot make a constant of {np.asarray(array).dtype}")
        self.created.append(v.owner.operation)
        return v

    def build(self, op_type: str, operands: list[ir.Value | None], result_types: list[ir.Type], attrs: dict[str, Any] | None = None, **kw: Any) -> ir.Operation:
        """A helper op (newest version unless `version`) before the op."""
        with ir.InsertionPoint(self.op), self.op.location:
            new = onnx_op(op_type, operands, result_types, attrs or {}, **kw)
        self.created.append(new)
        return new

    def input_elem(self, i: int = 0) -> ir.Type:
        v = self.op.operands[i]
        elem = U.element_type_of(v.type)
        if elem is None:
            raise Unsupported(f"input {i} is not a tensor")
        return elem

    def input_rank(self, i: int = 0) -> int:
        shape = U.shape_of(self.op.operands[i].type)
        if shape is None:
            raise Unsupported(f"input {i} has unknown rank")
        return len(shape)

    def int_const(self, values: Any, scalar: bool = False) -> ir.Value:
        return self.const(np.array(values, dtype=np.int64).reshape(() if scalar else (-1,)))

    # -- running --

    def run(self) -> ir.Operation:
        adapter = _ADAPTERS.get((self.dst.op_type, self.dst.since_versions[0]))
        self.adapted = adapter is not None
        try:
            if adapter is not None:
                adapter(self)
            if self.replacement is not None:
                return self._finish_replacement()
            self._generic()
            return self._build()
        except Unsupported:
            self._rollback()
            raise
        except (attrs_mod.AttributeKindError, ValueError, TypeError, RuntimeError) as exc:
            # RuntimeError: the bindings refused something (raised in Python, not an assertion).
            self._rollback()
            raise Unsupported(f"{type(exc).__name__}: {exc}") from None

    def _rollback(self) -> None:
        for op in reversed(self.created):
            if not U.has_uses(op):
                op.erase()
        self.created.clear()

    def _generic(self) -> None:
        src, dst = self.src, self.dst
        # Attributes the new version does not have.
        for name in list(self.attrs):
            if dst.attr(name) is None and src.attr(name) is not None:
                if name in _DROPPABLE:
                    del self.attrs[name]
                else:
                    raise Unsupported(f"attribute '{name}' has no counterpart in {dst.op_type}-{dst.since_versions[0]}")
        # Defaults that changed: write the old one out so the behaviour stays.
        for a in src.attributes:
            b = dst.attr(a.name)
            if b is None or a.name in self.attrs or a.default is None or a.default == b.default:
                continue
            if a.kind != b.kind:
                raise Unsupported(f"attribute '{a.name}' changed kind ({a.kind} -> {b.kind})")
            self.attrs[a.name] = attrs_mod.to_mlir(b.kind, a.default)
        # Inputs: the new version may only add optional ones at the end (the builder fills them).
        n_formal = len(dst.inputs)
        variadic = bool(dst.inputs) and dst.inputs[-1].option == "variadic"
        if not variadic and len(self.operands) > n_formal:
            if any(v is not None for v in self.operands[n_formal:]):
                raise Unsupported("the new version has fewer inputs")
            self.operands = self.operands[:n_formal]
        # Outputs: extra optional ones are appended as none; dropped ones must be unused.
        n_out = len(dst.outputs)
        out_variadic = bool(dst.outputs) and dst.outputs[-1].option == "variadic"
        if not out_variadic:
            while len(self.result_types) < n_out:
                self.result_types.append(None)
            if len(self.result_types) > n_out:
                for k in range(n_out, len(self.result_types)):
                    if self.result_map[k] is not None and U.value_used(self.op.results[k]):
                        raise Unsupported(f"output {k} is used but the new version has no such output")
                    self.result_map[k] = None
                self.result_types = self.result_types[:n_out]

    def _build(self) -> ir.Operation:
        op = self.op
        types = [None if t is None or isinstance(t, ir.NoneType) else t for t in self.result_types]
        with ir.InsertionPoint(op), op.location:
            none = None
            for v in op.operands:
                if U.is_none_value(v):
                    none = v
                    break
            try:
                new = onnx_op(self.dst.full_name, self.operands, types, self.attrs, none=none)
            except U_BuildError as exc:
                raise Unsupported(str(exc)) from None
        for k, v in self.extra_attrs.items():
            if k not in new.attributes:
                new.attributes[k] = v
        # The verifier is only needed where the new version allows fewer types (or names its
        # type constraints differently); widening steps, the common case, cannot fail it.
        problems = verify_op(new) if self.adapted or not _widens(self.src, self.dst) else []
        if problems:
            new.erase()
            raise Unsupported("; ".join(problems))
        # Subgraphs move over (blocks keep their ops and SSA values).
        for old_region, new_region in zip(op.regions, new.regions):
            for block in list(old_region.blocks):
                block.append_to(new_region)
        values: list[ir.Value] = list(new.results)
        if self.post is not None:
            values = self.post(new)
        for k, res in enumerate(op.results):
            j = self.result_map[k]
            if j is None:
                continue
            target = values[j]
            if target.type != res.type:
                if not U.replace_value(res, target):
                    raise Unsupported(f"result {k} changes type and feeds a non-ONNX op")
            else:
                res.replace_all_uses_with(target)
        op.erase()
        return new

    def _finish_replacement(self) -> ir.Operation:
        for created in self.created:
            problems = verify_op(created)
            if problems:
                raise Unsupported("; ".join(problems))
        op = self.op
        assert self.replacement is not None and self.replacement_op is not None
        for res, new in zip(op.results, self.replacement):
            if res.type == new.type:
                res.replace_all_uses_with(new)
            elif not U.replace_value(res, new):
                raise Unsupported("a result changes type and feeds a non-ONNX op")
        op.erase()
        return self.replacement_op


from onnxc.dialect.builder import OnnxBuildError as U_BuildError  # noqa: E402 - after Step for readability


# --- adapters ---------------------------------------------------------------------------------------


def _binary_broadcast_7(s: Step) -> None:
    """Add/Sub/Mul/Div/Pow/And/Or/Xor/Equal/Greater/Less: legacy `broadcast`/`axis` -> numpy rules."""
    broadcast = int(s.pop("broadcast", 0) or 0)
    axis = s.pop("axis", None)
    if not broadcast or axis is None:
        return  # same shapes, or trailing alignment: numpy broadcasting gives the same result
    rank_a, rank_b = s.input_rank(0), s.input_rank(1)
    axis = int(axis) + rank_a if int(axis) < 0 else int(axis)
    trailing = rank_a - axis - rank_b
    if trailing < 0:
        raise Unsupported("broadcast axis leaves no room for B")
    if trailing == 0:
        return
    b = s.op.operands[1]
    b_shape = U.shape_of(b.type) or []
    new_type = U.ranked_type(list(b_shape) + [1] * trailing, U.element_type_of(b.type))
    axes = s.int_const(list(range(rank_b, rank_b + trailing)))
    s.operands[1] = s.build("Unsqueeze", [b, axes], [new_type]).result


def _pop_is_test(s: Step) -> None:
    s.pop("is_test")


def _pop_output_sequence(s: Step) -> None:
    s.pop("output_sequence")


def _gemm_7(s: Step) -> None:
    s.pop("broadcast")  # Gemm-7 broadcasts C unidirectionally, a superset of both old modes


def _batchnorm_9(s: Step) -> None:
    spatial = int(s.pop("spatial", 1))
    if spatial != 1 and s.input_rank(0) > 2:
        raise Unsupported("spatial = 0 (per-activation statistics) has no counterpart in BatchNormalization-9")


def _batchnorm_14(s: Step) -> None:
    # Outputs (Y, mean, var, saved_mean, saved_var) -> (Y, running_mean, running_var).
    used = [k for k in range(1, len(s.op.results)) if not U.is_none_value(s.op.results[k]) and U.value_used(s.op.results[k])]
    if any(k >= 3 for k in used):
        raise Unsupported("saved_mean/saved_var are used; BatchNormalization-14 has no such outputs")
    if used:
        s.set("training_mode", 1)
    for k in range(1, len(s.result_types)):
        if k >= 3 or k not in used:
            s.result_types[k] = None
    for k in range(3, len(s.result_map)):
        s.result_map[k] = None
    s.result_types = s.result_types[:3]


def _cast_6(s: Step) -> None:
    to = s.pop("to")
    if isinstance(to, str):
        name = to.upper()
        try:
            s.set("to", int(onnx.TensorProto.DataType.Value(name)))
        except ValueError:
            raise Unsupported(f"Cast-1 'to' names no element type: {to!r}") from None


def _clip_11(s: Step) -> None:
    lo, hi = s.pop("min"), s.pop("max")
    dtype = U.numpy_dtype_of(s.input_elem(0))
    if dtype is None:
        raise Unsupported("element type has no numpy dtype")
    elem = s.input_elem(0)
    s.operands = [s.operands[0], None if lo is None else s.const(np.array(lo, dtype=dtype), elem), None if hi is None else s.const(np.array(hi, dtype=dtype), elem)]


def _concat_4(s: Step) -> None:
    if s.get("axis") is None:
        s.set("axis", 1)  # Concat-1's documented default


def _dft_20(s: Step) -> None:
    given = s.pop("axis", None)
    axis = 1 if given is None else int(given)  # DFT-17's default; `or 1` turned axis=0 into 1 (compile fuzzer)
    s.operands = [s.operands[0], s.operands[1] if len(s.operands) > 1 else None, s.int_const(axis, scalar=True)]


def _dropout_10(s: Step) -> None:
    # The mask became bool; give users of an old float mask a Cast of the new one.
    if len(s.op.results) > 1 and not U.is_none_value(s.op.results[1]):
        old_type = s.op.results[1].type
        elem = U.element_type_of(old_type)
        if elem is None:
            raise Unsupported("mask is not a tensor")
        shape = U.shape_of(old_type)
        bool_type = U.ranked_type(shape, ir.IntegerType.get_signless(1)) if shape is not None else ir.UnrankedTensorType.get(ir.IntegerType.get_signless(1))
        s.result_types[1] = bool_type
        if elem != ir.IntegerType.get_signless(1) and U.value_used(s.op.results[1]):
            to = onnx.helper.np_dtype_to_tensor_dtype(U.numpy_dtype_of(elem))

            def post(new: ir.Operation) -> list[ir.Value]:
                with ir.InsertionPoint.after(new), new.location:
                    cast = onnx_op("Cast", [new.results[1]], [old_type], {"to": int(to)})
                return [new.results[0], cast.result]

            s.post = post


def _dropout_12(s: Step) -> None:
    ratio = s.pop("ratio", None)
    if ratio is None or "ratio" not in s.op.attributes:
        s.operands = [s.operands[0]]
        return
    elem = s.input_elem(0)
    dtype = U.numpy_dtype_of(elem)
    if dtype is None or dtype.kind != "f":
        elem, dtype = ir.F32Type.get(), np.dtype(np.float32)
    s.operands = [s.operands[0], s.const(np.array(ratio, dtype=dtype), elem)]


def _gru_3(s: Step) -> None:
    if s.get("direction") is None or "direction" not in s.attrs:
        s.attrs.pop("direction", None)
    elif s.get("direction") == "foward":
        s.set("direction", "forward")
    # GRU-1's default spelled 'foward' (sic): the generic default rule must not write it out.
    s.src = _with_default(s.src, "direction", None)


def _with_default(info: OpInfo, name: str, default: Any) -> OpInfo:
    attrs = tuple(replace(a, default=default) if a.name == name else a for a in info.attributes)
    return replace(info, attributes=attrs, _attr_index=None)


def _lp_p_int(s: Step) -> None:
    p = s.pop("p", 2.0)
    if float(p) != int(p):
        raise Unsupported(f"p = {p} is not an integer")
    s.set("p", int(p))
    s.src = _with_default(s.src, "p", None)


def _lppool_2(s: Step) -> None:
    if s.get("kernel_shape") is None:
        raise Unsupported("LpPool-1 without kernel_shape (global pooling) has no LpPool-2 form")
    _lp_p_int(s)


def _gridsample_20(s: Step) -> None:
    mode = s.get("mode", "bilinear")
    s.set("mode", {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode))
    s.src = _with_default(s.src, "mode", None)


def _softmax_13(s: Step) -> None:
    """Softmax/LogSoftmax/Hardmax-1/11 coerce the input to 2-D at `axis`; 13 works on one axis."""
    rank = s.input_rank(0)
    axis = int(s.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    s.attrs.pop("axis", None)
    if axis == rank - 1 or rank == 0:
        s.set("axis", -1)
        return
    x = s.op.operands[0]
    elem = s.input_elem(0)
    shape = U.shape_of(x.type) or []
    outer = int(np.prod(shape[:axis])) if all(d >= 0 for d in shape[:axis]) else -1
    inner = int(np.prod(shape[axis:])) if all(d >= 0 for d in shape[axis:]) else -1
    flat_type = U.ranked_type([outer, inner], elem)
    shp = s.build("Shape", [x], [U.ranked_type([rank], ir.IntegerType.get_signless(64))]).result
    flat = s.build("Flatten", [x], [flat_type], {"axis": axis}).result
    inner_op = s.build(s.dst.full_name, [flat], [flat_type], {"axis": -1})
    out = s.build("Reshape", [inner_op.result, shp], [s.op.results[0].type]).result
    s.replacement = [out]
    s.replacement_op = inner_op


def _label_encoder_2(s: Step) -> None:
    classes = s.pop("classes_strings", None)
    if classes is None:
        return
    ids = list(range(len(classes)))
    if s.input_elem(0) == element_type(onnx.TensorProto.STRING):
        s.set("keys_strings", classes)
        s.set("values_int64s", ids)
    else:
        s.set("keys_int64s", ids)
        s.set("values_strings", classes)


def _pad_2(s: Step) -> None:
    paddings = s.pop("paddings", None)
    if paddings is None:
        raise Unsupported("Pad-1 without paddings")
    s.set("pads", list(paddings))


def _pad_11(s: Step) -> None:
    pads = s.pop("pads")
    value = s.pop("value", 0.0)
    elem = s.input_elem(0)
    dtype = U.numpy_dtype_of(elem)
    if dtype is None:
        raise Unsupported("element type has no numpy dtype")
    pads_value = s.int_const(list(pads))
    cv = None if value in (None, 0.0) else s.const(np.array(value, dtype=dtype), elem)
    s.operands = [s.operands[0], pads_value, cv]


def _reshape_5(s: Step) -> None:
    shape = s.pop("shape")
    if shape is None:
        raise Unsupported("Reshape-1 without shape")
    s.operands = [s.operands[0], s.int_const(list(shape))]


def _resize_11(s: Step) -> None:
    mode = s.get("mode", "nearest")
    s.set("coordinate_transformation_mode", "asymmetric")
    if mode == "nearest":
        s.set("nearest_mode", "floor")
    roi = s.const(np.zeros([0], dtype=np.float32))
    s.operands = [s.operands[0], roi, s.operands[1], None]


def _resize_13(s: Step) -> None:
    if s.get("coordinate_transformation_mode") == "tf_half_pixel_for_nn":
        raise Unsupported("coordinate_transformation_mode 'tf_half_pixel_for_nn' was removed in Resize-13")


def _roialign_16(s: Step) -> None:
    if "coordinate_transformation_mode" not in s.attrs:
        s.set("coordinate_transformation_mode", "output_half_pixel")


def _slice_10(s: Step) -> None:
    starts, ends, axes = s.pop("starts"), s.pop("ends"), s.pop("axes")
    if starts is None or ends is None:
        raise Unsupported("Slice-1 without starts/ends")
    s.operands = [s.operands[0], s.int_const(list(starts)), s.int_const(list(ends)), None if axes is None else s.int_const(list(axes)), None]


def _split_2(s: Step) -> None:
    if len(s.operands) > 1 and s.operands[1] is not None:
        split = U.constant_value(s.operands[1])
        if split is None:
            raise Unsupported("Split-1 with a non-constant split input")
        s.set("split", [int(x) for x in split.reshape(-1)])
    s.operands = s.operands[:1]


def _split_13(s: Step) -> None:
    split = s.pop("split")
    s.operands = [s.operands[0], None if split is None else s.int_const(list(split))]


def _split_18(s: Step) -> None:
    if len(s.operands) < 2 or s.operands[1] is None:
        s.set("num_outputs", len(s.op.results))


def _axes_to_input(optional: bool) -> Callable[[Step], None]:
    def adapt(s: Step) -> None:
        axes = s.pop("axes")
        if axes is None and not optional:
            raise Unsupported("axes missing")
        s.operands = [s.operands[0], None if axes is None else s.int_const(list(axes))]

    return adapt


def _tile_6(s: Step) -> None:
    tiles = U.constant_value(s.op.operands[1])
    axis = U.constant_value(s.op.operands[2])
    if tiles is None or axis is None:
        raise Unsupported("Tile-1 with non-constant tiles/axis")
    rank = s.input_rank(0)
    reps = np.ones([rank], dtype=np.int64)
    a = int(axis.reshape(-1)[0])
    reps[a + rank if a < 0 else a] = int(tiles.reshape(-1)[0])
    s.operands = [s.operands[0], s.const(reps)]


def _topk_10(s: Step) -> None:
    k = s.pop("k")
    if k is None:
        raise Unsupported("TopK-1 without k")
    s.operands = [s.operands[0], s.int_const([int(k)])]


def _upsample_7(s: Step) -> None:
    h, w = s.pop("height_scale"), s.pop("width_scale")
    if h is None or w is None:
        raise Unsupported("Upsample-1 without height_scale/width_scale")
    s.set("scales", [1.0, 1.0, float(h), float(w)])


def _upsample_9(s: Step) -> None:
    scales = s.pop("scales")
    if scales is None:
        raise Unsupported("Upsample-7 without scales")
    s.operands = [s.operands[0], s.const(np.array(scales, dtype=np.float32))]


def _groupnorm_21(s: Step) -> None:
    x = s.op.operands[0]
    shape = U.shape_of(x.type)
    groups = s.get("num_groups")
    if shape is None or len(shape) < 2 or shape[1] < 0 or groups is None:
        raise Unsupported("needs a static channel count to expand per-group scale/bias")
    channels = shape[1]
    if channels % int(groups):
        raise Unsupported("channels not divisible by num_groups")
    new = []
    for i in (1, 2):
        arr = U.constant_value(s.op.operands[i])
        if arr is None:
            raise Unsupported("GroupNormalization-18 with non-constant scale/bias")
        new.append(s.const(np.repeat(arr.reshape(-1), channels // int(groups)), U.element_type_of(s.op.operands[i].type)))
    s.operands = [s.operands[0], new[0], new[1]]


def _scan_9(s: Step) -> None:
    """Scan-8 runs its body over a leading batch axis that Scan-9 no longer has: the upgrade is a
    Loop over the batch whose body takes each batch element (Gather) and runs a Scan-9 with the
    original body; the Loop's scan outputs stack the per-element results back along axis 0.
    Per-element sequence lengths (`sequence_lens`) have no Scan-9 form."""
    op = s.op
    if not U.is_none_value(op.operands[0]):
        raise Unsupported("Scan-8 with sequence_lens (per-batch lengths) has no Scan-9 form")
    values = list(op.operands[1:])
    n_scan = int(s.get("num_scan_inputs", 0) or 0)
    directions = list(s.get("directions", None) or [0] * n_scan)
    if not values or n_scan <= 0 or len(directions) != n_scan or len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        raise Unsupported("malformed Scan-8")
    shapes = [U.shape_of(v.type) for v in values] + [U.shape_of(r.type) for r in op.results]
    if any(sh is None or len(sh) < 1 for sh in shapes):
        raise Unsupported("needs ranked inputs and outputs (with their batch axis)")

    def unbatched(t: ir.Type) -> ir.Type:
        return U.ranked_type(U.shape_of(t)[1:], U.element_type_of(t))

    i64 = ir.IntegerType.get_signless(64)
    rank0 = len(U.shape_of(values[0].type))
    shape = s.build("Shape", [values[0]], [U.ranked_type([rank0], i64)]).result
    zero = s.const(np.array(0, dtype=np.int64))
    count = s.build("Gather", [shape, zero], [U.ranked_type([], i64)], {"axis": 0}).result
    true = s.const(np.array(True))
    loop = s.build("Loop", [count, true], [r.type for r in op.results])
    body = ir.Block.create_at_start(loop.regions[0], [U.ranked_type([], i64), U.ranked_type([], ir.IntegerType.get_signless(1))])
    with ir.InsertionPoint(body), op.location:
        index = body.arguments[0]
        sliced = [onnx_op("Gather", [v, index], [unbatched(v.type)], {"axis": 0}).result for v in values]
        inner = onnx_op(s.dst.full_name, sliced, [unbatched(r.type) for r in op.results],
                        {"num_scan_inputs": n_scan, "scan_input_directions": directions})  # fmt: skip
        yield_values([body.arguments[1]] + list(inner.results))
    for block in list(op.regions[0].blocks):
        block.append_to(inner.regions[0])
    s.replacement = list(loop.results)
    s.replacement_op = inner


_ADAPTERS: dict[tuple[str, int], Callable[[Step], None]] = {
    **{(t, 7): _binary_broadcast_7 for t in ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less")},
    ("Gemm", 7): _gemm_7,
    ("BatchNormalization", 7): _pop_is_test,
    ("BatchNormalization", 9): _batchnorm_9,
    ("BatchNormalization", 14): _batchnorm_14,
    ("Cast", 6): _cast_6,
    ("Clip", 11): _clip_11,
    ("Concat", 4): _concat_4,
    ("DFT", 20): _dft_20,
    ("Dropout", 7): _pop_is_test,
    ("Dropout", 10): _dropout_10,
    ("Dropout", 12): _dropout_12,
    ("GRU", 3): _gru_3,
    ("GRU", 7): _pop_output_sequence,
    ("LSTM", 7): _pop_output_sequence,
    ("RNN", 7): _pop_output_sequence,
    ("GlobalLpPool", 2): _lp_p_int,
    ("LpPool", 2): _lppool_2,
    ("GridSample", 20): _gridsample_20,
    ("Softmax", 13): _softmax_13,
    ("LogSoftmax", 13): _softmax_13,
    ("Hardmax", 13): _softmax_13,
    ("LabelEncoder", 2): _label_encoder_2,
    ("Pad", 2): _pad_2,
    ("Pad", 11): _pad_11,
    ("Reshape", 5): _reshape_5,
    ("Resize", 11): _resize_11,
    ("Resize", 13): _resize_13,
    ("RoiAlign", 16): _roialign_16,
    ("Slice", 10): _slice_10,
    ("Split", 2): _split_2,
    ("Split", 13): _split_13,
    ("Split", 18): _split_18,
    ("Squeeze", 13): _axes_to_input(True),
    ("Unsqueeze", 13): _axes_to_input(False),
    ("ReduceSum", 13): _axes_to_input(True),
    **{(t, 18): _axes_to_input(True) for t in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSumSquare")},
    ("Tile", 6): _tile_6,
    ("TopK", 10): _topk_10,
    ("Upsample", 7): _upsample_7,
    ("Upsample", 9): _upsample_9,
    ("GroupNormalization", 21): _groupnorm_21,
    ("Scan", 9): _scan_9,
}

ADAPTED = tuple(sorted(f"{t}-{v}" for t, v in _ADAPTERS))


# --- semantics that changed under one signature -------------------------------------------------------


def _prelu_per_channel(op: ir.Operation) -> bool:
    """PRelu-1/6 apply a rank-1 slope of length C per channel (axis 1); from PRelu-7 the slope
    broadcasts numpy-style (aligned to the last axis). A [C] slope of an input of rank >= 3 gets
    trailing unit dims, so that numpy broadcasting applies it per channel."""
    x, slope = op.operands[0], op.operands[1]
    xs, ss = U.shape_of(x.type), U.shape_of(slope.type)
    if xs is None or ss is None:
        raise Unsupported("needs ranked input and slope to apply the slope per channel")
    if len(ss) != 1 or len(xs) < 3 or ss[0] == 1:
        return False  # a scalar-like slope, or a 2-D input: both rules agree
    if xs[1] >= 0 and ss[0] >= 0 and xs[1] != ss[0]:
        return False  # not a per-channel slope; numpy rules it is
    trailing = len(xs) - 2
    with ir.InsertionPoint(op), op.location:
        axes = U.make_constant(np.arange(1, 1 + trailing, dtype=np.int64))
        new_type = U.ranked_type([ss[0]] + [1] * trailing, U.element_type_of(slope.type))
        unsq = onnx_op("Unsqueeze", [slope, axes], [new_type])
    op.operands[1] = unsq.result
    return True


# (domain, op type) -> (the first opset with the new semantics, the fix for older ones)
_SEMANTIC_FIXES: dict[tuple[str, str], tuple[int, Callable[[ir.Operation], bool]]] = {
    ("", "PRelu"): (7, _prelu_per_channel),
}


def _opsets_of(op: ir.Operation) -> dict[str, int]:
    """domain -> version from an `onnx.opset_import` attribute (the default domain as "")."""
    if "onnx.opset_import" not in op.attributes:
        return {}
    out: dict[str, int] = {}
    try:
        for entry in ir.ArrayAttr(op.attributes["onnx.opset_import"]):
            pair = ir.ArrayAttr(entry)
            domain = ir.StringAttr(pair[0]).value
            out["" if domain == "ai.onnx" else domain] = ir.IntegerAttr(pair[1]).value
    except (ValueError, TypeError, IndexError):
        return {}
    return out


# --- opset_import -----------------------------------------------------------------------------------


def _update_opsets(module: ir.Operation) -> None:
    """Raise each domain's opset to bind every (now newest) op, when all ops of the domain are."""
    needed: dict[str, int] = {}
    stale: set[str] = set()
    for op in U.collect_ops(module, U.is_onnx_op):
        info = U.info_of(op)
        if info is None:
            continue
        if not is_newest(info):
            stale.add(info.domain)
        needed[info.domain] = max(needed.get(info.domain, 1), info.since_versions[0])
    targets = [module] + [fn for fn in U.functions(module)]
    for target in targets:
        if "onnx.opset_import" not in target.attributes:
            continue
        try:
            entries = [ir.ArrayAttr(e) for e in ir.ArrayAttr(target.attributes["onnx.opset_import"])]
            pairs = [(ir.StringAttr(e[0]).value, ir.IntegerAttr(e[1]).value) for e in entries]
        except (ValueError, TypeError, IndexError):
            continue
        changed = False
        new_pairs = []
        for domain, version in pairs:
            key = "" if domain == "ai.onnx" else domain
            if key in needed and key not in stale and needed[key] > version:
                version = needed[key]
                changed = True
            new_pairs.append((domain, version))
        if changed:
            i64 = ir.IntegerType.get_signless(64)
            target.attributes["onnx.opset_import"] = ir.ArrayAttr.get(
                [ir.ArrayAttr.get([ir.StringAttr.get(d), ir.IntegerAttr.get(i64, v)]) for d, v in new_pairs]
            )
            if target == module:
                _raise_ir_version(module, new_pairs)


def _raise_ir_version(module: ir.Operation, pairs: list[tuple[str, int]]) -> None:
    """A model's IR version must be recent enough for its opsets (opset 13 needs IR 7): raise
    `onnx.ir_version` to the smallest one onnx's version table allows, if it is below."""
    if "onnx.ir_version" not in module.attributes:
        return
    try:
        current = ir.IntegerAttr(module.attributes["onnx.ir_version"]).value
        needed = onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid(d, v) for d, v in pairs], ignore_unknown=True)
    except (ValueError, TypeError, KeyError):
        return
    if needed > current:
        module.attributes["onnx.ir_version"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(needed))
