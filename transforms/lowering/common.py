"""Shared machinery of the ONNX -> linalg lowering: the pattern registry, the `Node` adaptor
patterns receive, type conversion, shapes with dynamic dims, and builders for `linalg.generic`.

Why this shape: the Python dialect-conversion API does not exist in the MLIR 22 wheels, so the
pass (`onnxc.transforms.convert_onnx_to_linalg`) walks every function in block order with a
value map (ONNX value -> lowered value) and builds the lowered ops into a new function. A
pattern is a plain function registered per ONNX op type with `@lowers("Add", "Sub")`; it gets a
`Node` (the ONNX op, its lowered operands, attributes with schema defaults, original ONNX types
so unsigned semantics survive the switch to signless integers) and returns the lowered result
values. An optional `check` function registered beside it rejects what the pattern cannot handle
*before* anything is built, so the pass can report every problem of a module at once and never
hands MLIR's C++ (built with assertions) IR it would choke on.

Shapes: a `Dim` is an `int` (static size) or an index `ir.Value` (a dynamic size, from
`tensor.dim` or computed). Numpy broadcasting treats a static 1 as broadcastable. A dynamic dim
that meets a static dim other than 1, or another dynamic dim, may be 1 or not at run time, so
`elementwise` decides at run time (issue 11: assuming it is not 1, the rule of IREE and
torch-mlir, returned wrong answers): the result dim is computed from the runtime sizes
(`broadcast_plan`), and such an input is read at run-time indices (0 where its size is 1).
`broadcast_plan(values, ranks=...)` plans the batch dims of contractions the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, tensor

from onnxc.importers.proto import location_label
from onnxc.dialect.opinfo import OpInfo
from onnxc.errors import OnnxcError

Dim = Union[int, ir.Value]
Body = Callable[[list[ir.Value]], list[ir.Value]]


class LoweringError(OnnxcError):
    """An op the lowering cannot handle (found while building; the pre-check should catch most)."""


# --- registry ------------------------------------------------------------------------------------

PatternFn = Callable[["Node"], Sequence[ir.Value | None]]
CheckFn = Callable[["Node"], str | None]


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A lowering for some ONNX op types: `fn(node) -> results`, and `check(node) -> reason or None`
    run on the unlowered op before anything is built. `min_version` is the oldest schema
    since_version handled (older ones need the upgrade pass)."""

    op_types: tuple[str, ...]
    fn: PatternFn
    check: CheckFn | None = None
    min_version: int = 1
    domain: str = ""


PATTERNS: dict[tuple[str, str], Pattern] = {}


def lowers(*op_types: str, check: CheckFn | None = None, min_version: int = 1, domain: str = "") -> Callable[[PatternFn], PatternFn]:
    """Register the decorated function as the lowering of `op_types` (ONNX names: "Add")."""

    def deco(fn: PatternFn) -> PatternFn:
        pat = Pattern(tuple(op_types), fn, check, min_version, domain)
        for t in op_types:
            PATTERNS[(domain, t)] = pat
        return fn

    return deco


def find_pattern(info: OpInfo) -> Pattern | None:
    """The pattern lowering this dialect op (by ONNX domain and op type), or None."""
    return PATTERNS.get((info.domain, info.op_type))


# --- types ---------------------------------------------------------------------------------------


def is_unsigned(t: ir.Type) -> bool:
    """Whether an element type is an unsigned integer (`ui8`...)."""
    return isinstance(t, ir.IntegerType) and ir.IntegerType(t).is_unsigned


def is_int(t: ir.Type) -> bool:
    """Integer element type (including i1 and unsigned ones)."""
    return isinstance(t, ir.IntegerType)


def is_bool(t: ir.Type) -> bool:
    return isinstance(t, ir.IntegerType) and ir.IntegerType(t).width == 1


def is_float(t: ir.Type) -> bool:
    return isinstance(t, ir.FloatType)


def bitwidth(t: ir.Type) -> int:
    if isinstance(t, ir.IntegerType):
        return ir.IntegerType(t).width
    if isinstance(t, ir.FloatType):
        return ir.FloatType(t).width
    if isinstance(t, ir.IndexType):
        return 64
    raise LoweringError(f"type {t} has no bit width")


def accumulator_type(elem: ir.Type) -> ir.Type:
    """The type sums and products of `elem` values accumulate in: f32 for floats narrower than
    32 bits (f16, bf16), `elem` itself otherwise.

    Why: f16 has 11 significant bits and bf16 8, so a long f16/bf16 sum loses the low terms
    (onnxruntime and the reference accumulate halves in f32 too); the one definition keeps every
    lowering (MatMul, Conv, pools, reductions, normalizations, softmax) rounding the same way.
    Integers accumulate in their own type, wrapping as ONNX specifies."""
    return ir.F32Type.get() if is_float(elem) and bitwidth(elem) < 32 else elem


def element_supported(t: ir.Type) -> bool:
    """Element types the lowering handles (no strings or complex; float8/float4/int4/int2 as
    bytes, see `minifloat.py`): f16, bf16, f32, f64, i1 and signless or unsigned 8 to 64 bits."""
    from onnxc.transforms.lowering.minifloat import is_exotic

    if t in (ir.F16Type.get(), ir.BF16Type.get(), ir.F32Type.get(), ir.F64Type.get()):
        return True
    if isinstance(t, ir.IntegerType):
        it = ir.IntegerType(t)
        if it.is_signless and it.width in (1, 8, 16, 32, 64):
            return True
        if it.is_unsigned and it.width in (8, 16, 32, 64):
            return True
    return is_exotic(t)  # includes float8 E8M0


def convert_element(t: ir.Type) -> ir.Type:
    """Signless version of an element type (`ui8` -> `i8`); float8/float4/int4/int2 become the
    `i8` bytes that store them; other types unchanged."""
    from onnxc.transforms.lowering.minifloat import is_exotic

    if is_exotic(t):
        return ir.IntegerType.get_signless(8)
    from onnxc.transforms.lowering.strings import is_string

    if is_string(t):  # ONNX strings are i64 handles in lowered code (strings.py)
        return ir.IntegerType.get_signless(64)
    if isinstance(t, ir.IntegerType) and not ir.IntegerType(t).is_signless:
        return ir.IntegerType.get_signless(ir.IntegerType(t).width)
    return t


def convert_type(t: ir.Type) -> ir.Type:
    """Lowered type of an ONNX-level value type: tensors get signless element types."""
    if isinstance(t, ir.RankedTensorType):
        rt = ir.RankedTensorType(t)
        return ir.RankedTensorType.get(list(rt.shape), convert_element(rt.element_type))
    if isinstance(t, ir.UnrankedTensorType):
        return ir.UnrankedTensorType.get(convert_element(ir.ShapedType(t).element_type))
    return convert_element(t)


def elem_of(t: ir.Type) -> ir.Type:
    return ir.ShapedType(t).element_type


def is_ranked(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType)


def static_shape(t: ir.Type) -> list[int | None]:
    """Dims of a ranked tensor type, None for dynamic."""
    rt = ir.RankedTensorType(t)
    return [None if rt.is_dynamic_dim(i) else rt.get_dim_size(i) for i in range(rt.rank)]


def rank_of(v: ir.Value | ir.Type) -> int:
    t = v if isinstance(v, ir.Type) else v.type
    return ir.RankedTensorType(t).rank


DYN = ir.ShapedType.get_dynamic_size()


def tensor_type(shape: Sequence[Dim | None], elem: ir.Type) -> ir.RankedTensorType:
    """Ranked tensor type of a shape of `Dim`s (a Value or None is a dynamic dim)."""
    return ir.RankedTensorType.get([d if isinstance(d, int) else DYN for d in shape], elem)


# --- constants -----------------------------------------------------------------------------------


def _dense_to_numpy(attr: ir.Attribute) -> np.ndarray | None:
    if not isinstance(attr, ir.DenseElementsAttr):
        return None
    shape = static_shape(attr.type)
    try:
        # np.array of a rank-0 attribute comes back 1-D: give it the attribute's shape.
        return np.array(attr).reshape(shape)
    except Exception:  # noqa: BLE001 - element types numpy cannot read (bf16) or odd packing
        return None


def constant_value(v: ir.Value | None) -> np.ndarray | None:
    """The value of `v` when it is a compile-time constant: the result of `onnx.constant`
    (attribute `value`, `value_int(s)`, `value_float(s)`) or `arith.constant` with dense elements.
    None otherwise (including constants whose elements numpy cannot read)."""
    if v is None or not isinstance(v, ir.OpResult):
        return None
    op = v.owner
    name = op.name
    attrs = op.attributes
    if name == "arith.constant":
        return _dense_to_numpy(attrs["value"])
    if not name.startswith("onnx.constant") or name.startswith("onnx.constant_of"):
        return None
    if "value" in attrs:
        return _dense_to_numpy(attrs["value"])
    if "value_int" in attrs:
        return np.array(ir.IntegerAttr(attrs["value_int"]).value, dtype=np.int64)
    if "value_ints" in attrs:
        return np.array(list(ir.DenseI64ArrayAttr(attrs["value_ints"])), dtype=np.int64)
    if "value_float" in attrs:
        return np.array(ir.FloatAttr(attrs["value_float"]).value, dtype=np.float32)
    if "value_floats" in attrs:
        return np.array(list(ir.DenseF32ArrayAttr(attrs["value_floats"])), dtype=np.float32)
    return None


def attr_to_python(attr: ir.Attribute) -> Any:
    """A plain Python value of an ONNX attribute as the dialect spells it (see DEVELOPERS.md)."""
    if isinstance(attr, ir.IntegerAttr):
        return ir.IntegerAttr(attr).value
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value
    if isinstance(attr, ir.StringAttr):
        return ir.StringAttr(attr).value
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return list(ir.DenseI64ArrayAttr(attr))
    if isinstance(attr, ir.DenseF32ArrayAttr):
        return list(ir.DenseF32ArrayAttr(attr))
    if isinstance(attr, ir.ArrayAttr):
        return [attr_to_python(a) for a in ir.ArrayAttr(attr)]
    if isinstance(attr, ir.TypeAttr):
        return ir.TypeAttr(attr).value
    return attr


# --- the adaptor patterns receive ----------------------------------------------------------------


def node_name(op: ir.Operation) -> str:
    """The ONNX node name carried by an op's location (`loc("name"(...))`), or ""."""
    return location_label(op.location)[0]


class Node:
    """One ONNX op being lowered, as a pattern sees it.

    `inputs[i]` is the lowered value of ONNX input i (None when omitted: `onnx.none`);
    `onnx_types[i]` its original type (unsigned element types kept); `result_types` the declared
    result types (converted: signless); `attr(name)` a Python value with the schema default.
    During the pre-check, `inputs` holds the unlowered values (patterns' `check` functions only
    look at types and constants).
    """

    def __init__(self, op: ir.Operation, info: OpInfo, inputs: list[ir.Value | None], lowering: Any = None) -> None:
        self.op = op
        self.info = info
        self.inputs = inputs
        self.lowering = lowering
        self.onnx_types: list[ir.Type | None] = [None if _is_none(v) else v.type for v in op.operands]
        self.onnx_result_types: list[ir.Type] = [r.type for r in op.results]

    # identity
    @property
    def op_type(self) -> str:
        return self.info.op_type

    @property
    def version(self) -> int:
        return self.info.since_version

    @property
    def name(self) -> str:
        return node_name(self.op)

    def describe(self) -> str:
        nm = self.name
        return f"{self.info.op_type} (opset {self.info.since_version}, {self.op.name})" + (f" node '{nm}'" if nm else "")

    # operands
    def has(self, i: int) -> bool:
        """Whether ONNX input i was given."""
        return i < len(self.onnx_types) and self.onnx_types[i] is not None

    def input(self, i: int) -> ir.Value:
        v = self.inputs[i] if i < len(self.inputs) else None
        if v is None:
            raise LoweringError(f"{self.describe()}: input {i} is required")
        return v

    def in_elem(self, i: int) -> ir.Type:
        """Original (ONNX) element type of input i: `ui8` stays unsigned."""
        t = self.onnx_types[i]
        assert t is not None
        return elem_of(t)

    def out_elem(self, i: int = 0) -> ir.Type:
        """Original (ONNX) element type of result i."""
        return elem_of(self.onnx_result_types[i])

    def result_type(self, i: int = 0) -> ir.Type:
        """Converted (signless) declared type of result i."""
        return convert_type(self.onnx_result_types[i])

    def const(self, i: int) -> np.ndarray | None:
        """Compile-time value of input i, or None (also None when omitted)."""
        if not self.has(i):
            return None
        v = self.inputs[i] if i < len(self.inputs) else None
        found = constant_value(v)
        if found is None:
            found = constant_value(self.op.operands[i])
        return found

    def const_ints(self, i: int) -> list[int] | None:
        c = self.const(i)
        return None if c is None else [int(x) for x in np.asarray(c).reshape(-1)]

    # attributes
    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute's value as plain Python, else the schema default, else `default`."""
        attrs = self.op.attributes
        if name in attrs:
            return attr_to_python(attrs[name])
        spec = self.info.attr(name)
        if spec is not None and spec.default is not None:
            return spec.default
        return default

    def has_attr(self, name: str) -> bool:
        return name in self.op.attributes

    def fail(self, msg: str) -> LoweringError:
        return LoweringError(f"{self.describe()}: {msg}")


def _is_none(v: ir.Value) -> bool:
    return isinstance(v.type, ir.NoneType)


# --- scalar builders -----------------------------------------------------------------------------

def index_type() -> ir.Type:
    return ir.IndexType.get()


def const_scalar(value: float | int | bool, elem: ir.Type) -> ir.Value:
    """`arith.constant` of a scalar of type `elem` (signless int, float, index or i1)."""
    if isinstance(elem, ir.FloatType):
        return arith.constant(elem, float(value))
    if isinstance(elem, ir.IntegerType):
        w = ir.IntegerType(elem).width
        iv = int(value)
        # Wrap into the signed range of the width (an unsigned max becomes -1, as bits).
        iv &= (1 << w) - 1
        if w > 1 and iv >= 1 << (w - 1):
            iv -= 1 << w
        if w == 1:
            iv = -1 if iv else 0
        return arith.constant(elem, ir.IntegerAttr.get(elem, iv))
    if isinstance(elem, ir.IndexType):
        return arith.constant(elem, int(value))
    raise LoweringError(f"no scalar constant of type {elem}")


def const_index(i: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), int(i))


def const_tensor(array: np.ndarray, elem: ir.Type) -> ir.Value:
    """`arith.constant dense<...>` of a numpy array, with the signless element type `elem`."""
    array = np.array(array, order="C")  # np.ascontiguousarray would make a 0-d array 1-d
    if is_bool(elem):
        attr = ir.DenseElementsAttr.get(array.astype(np.bool_))
    elif isinstance(elem, ir.IntegerType):
        w = ir.IntegerType(elem).width
        attr = ir.DenseElementsAttr.get(array.astype(f"int{w}"), type=elem)
    elif elem == ir.BF16Type.get():
        attr = ir.DenseElementsAttr.get(array.astype(np.float32), type=ir.F32Type.get())
        # bf16 arrays: build f32 and truncate at compile time via a splat-free path is not
        # available in Python; use arith.truncf on the constant instead.
        c = arith.constant(attr.type, attr)
        return convert_tensor(c, ir.F32Type.get(), elem)
    else:
        np_dtype = next(d for t, d in ((ir.F16Type.get(), np.float16), (ir.F32Type.get(), np.float32), (ir.F64Type.get(), np.float64)) if elem == t)
        attr = ir.DenseElementsAttr.get(array.astype(np_dtype), type=elem)
    return arith.constant(attr.type, attr)


def dim(v: ir.Value, i: int) -> Dim:
    """Size of dim i of a ranked tensor value: an int if static, else a `tensor.dim`."""
    rt = ir.RankedTensorType(v.type)
    if not rt.is_dynamic_dim(i):
        return rt.get_dim_size(i)
    return tensor.dim(v, const_index(i))


def shape_of(v: ir.Value) -> list[Dim]:
    return [dim(v, i) for i in range(rank_of(v))]


def dim_value(d: Dim) -> ir.Value:
    """A Dim as an index value."""
    return const_index(d) if isinstance(d, int) else d


def dim_mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    return arith.muli(dim_value(a), dim_value(b))


def dim_add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(b, int) and b == 0:
        return a
    if isinstance(a, int) and a == 0:
        return b
    return arith.addi(dim_value(a), dim_value(b))


def dim_sub(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if isinstance(b, int) and b == 0:
        return a
    return arith.subi(dim_value(a), dim_value(b))


def dim_floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(b, int) and b == 1:
        return a
    return arith.floordivsi(dim_value(a), dim_value(b))


def empty(shape: Sequence[Dim], elem: ir.Type) -> ir.Value:
    """`tensor.empty` of a shape of Dims; a dynamic size computed from tensor data is checked to be
    non-negative at run time (`runtime_checks.require_sizes`)."""
    from onnxc.transforms.lowering.runtime_checks import require_sizes

    require_sizes([d for d in shape if isinstance(d, ir.Value)])
    return tensor.empty(list(shape), elem)


def filled(shape: Sequence[Dim], elem: ir.Type, value: float | int | ir.Value) -> ir.Value:
    """A tensor of `shape` filled with `value` (`linalg.fill`)."""
    init = empty(shape, elem)
    scalar = value if isinstance(value, ir.Value) else const_scalar(value, elem)
    return linalg.fill(scalar, outs=[init])


# --- linalg.generic ------------------------------------------------------------------------------

def iterator(kind: str) -> ir.Attribute:
    return ir.Attribute.parse(f"#linalg.iterator_type<{kind}>")


def affine_map(n_dims: int, exprs: Sequence[int | str | ir.AffineExpr]) -> ir.AffineMap:
    """An affine map over `n_dims` loop dims: an int is the loop dim d<int>, "0" the constant 0,
    an AffineExpr itself."""
    out: list[ir.AffineExpr] = []
    for e in exprs:
        if isinstance(e, ir.AffineExpr):
            out.append(e)
        elif isinstance(e, str):
            out.append(ir.AffineConstantExpr.get(int(e)))
        else:
            if not 0 <= e < n_dims:
                # AffineMap::get asserts on this (the process aborts); an operand of higher rank than
                # the loop nest gets here (issue 11: RMSNormalization with a rank-5 scale on rank 4).
                raise LoweringError(f"an operand is indexed by loop {e} of a {n_dims}-loop nest (is its rank higher than the result's?)")
            out.append(ir.AffineDimExpr.get(e))
    return ir.AffineMap.get(n_dims, 0, out)


def identity_map(n: int) -> ir.AffineMap:
    return ir.AffineMap.get_identity(n)


def generic(
    inputs: Sequence[ir.Value],
    outputs: Sequence[ir.Value],
    maps: Sequence[ir.AffineMap],
    iterators: Sequence[str],
    body: Body,
) -> list[ir.Value]:
    """Build a `linalg.generic`; `body(block_args)` builds the scalar region and returns the
    values to yield (block args: one per input, then one per output)."""
    op = linalg.GenericOp(
        [o.type for o in outputs],
        list(inputs),
        list(outputs),
        ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
        ir.ArrayAttr.get([iterator(k) for k in iterators]),
    )
    arg_types = [elem_of(v.type) if isinstance(v.type, ir.ShapedType) or isinstance(v.type, ir.RankedTensorType) else v.type for v in [*inputs, *outputs]]
    block = op.regions[0].blocks.append(*arg_types)
    with ir.InsertionPoint(block):
        results = body(list(block.arguments))
        linalg.YieldOp(list(results))
    return list(op.results)


def broadcast_shapes(shapes: Sequence[Sequence[int | None]]) -> list[int | None] | str:
    """Numpy broadcast of static shapes (None = dynamic). Returns an error string on mismatch."""
    r = max((len(s) for s in shapes), default=0)
    out: list[int | None] = []
    for k in range(r):
        static: set[int] = set()
        dyn = False
        for s in shapes:
            j = k - (r - len(s))
            if j < 0:
                continue
            d = s[j]
            if d is None:
                dyn = True
            elif d != 1:
                static.add(d)
        if len(static) > 1:
            return f"shapes {[list(s) for s in shapes]} do not broadcast"
        if static:
            out.append(static.pop())
        elif dyn:
            out.append(None)
        else:
            out.append(1)
    return out


@dataclasses.dataclass
class BroadcastPlan:
    """How the inputs of a numpy-broadcasting op read the result's index space.

    `out` is the result shape; `reads[i][j]` says how dim j of input i is indexed: `ZERO` (a
    static 1 broadcast), `LOOP` (the loop index: the dim equals the result dim), or `RUNTIME` (a
    dynamic dim that may be 1 or the result dim: decided at run time, `_runtime_generic`).
    `ambiguous` lists the (input, dim, result dim) triples that are `RUNTIME`.
    """

    out: list[Dim]
    reads: list[list[str]]

    @property
    def ambiguous(self) -> list[tuple[int, int, int]]:
        return [(i, j, j + len(self.out) - len(r)) for i, r in enumerate(self.reads) for j, k in enumerate(r) if k == RUNTIME]


ZERO, LOOP, RUNTIME = "zero", "loop", "runtime"


def _equal_or_invalid(a: tuple[ir.Value, int], b: tuple[ir.Value, int]) -> tuple[ir.Value, int] | None:
    """Of two dynamic dims that broadcast only when equal, the unclamped one (`dim_sources.equal_or_invalid`)."""
    from onnxc.transforms.lowering.dim_sources import equal_or_invalid

    return equal_or_invalid(a, b)


def _is_size_of(d: ir.Value, v: ir.Value, j: int) -> bool:
    """Whether the index value `d` is provably dim j of `v` (one source: `dim_sources`)."""
    from onnxc.transforms.lowering.dim_sources import is_size_of

    return is_size_of(d, v, j)


def _same_dim(a: tuple[ir.Value, int], b: tuple[ir.Value, int]) -> bool:
    """Whether two (value, dim) pairs are provably the same size (one source: `dim_sources`)."""
    from onnxc.transforms.lowering.dim_sources import same_size

    return same_size(a, b)


def broadcast_plan(values: Sequence[ir.Value], out_shape: Sequence[Dim] | None = None, ranks: Sequence[int] | None = None) -> BroadcastPlan:
    """The numpy-broadcast result shape of ranked tensor values and how each input reads it.

    A dynamic result dim is computed at run time from the inputs' sizes: 1 if all are 1, else the
    smallest size that is not 1 (for sizes that broadcast, the one size that is not 1; for sizes
    that do not, a size every input can be read at, so invalid inputs never read out of bounds).
    With `out_shape` given (Expand), only the reads are planned. With `ranks`, only the first
    `ranks[i]` dims of value i broadcast (the batch dims of a contraction).
    """
    shapes = [static_shape(v.type) for v in values]
    if ranks is not None:
        shapes = [sh[: max(n, 0)] for sh, n in zip(shapes, ranks)]
    if out_shape is not None and any(len(sh) > len(out_shape) for sh in shapes):
        ranks_text = ", ".join(str(len(sh)) for sh in shapes)
        raise LoweringError(f"operands of ranks {ranks_text} cannot broadcast to a result of rank {len(out_shape)}")
    r = len(out_shape) if out_shape is not None else max((len(sh) for sh in shapes), default=0)
    if out_shape is None:
        res = broadcast_shapes(shapes)
        if isinstance(res, str):
            raise LoweringError(res)
    out: list[Dim] = []
    reads: list[list[str]] = [[LOOP] * len(sh) for sh in shapes]
    for k in range(r):
        cover = [(i, k - (r - len(sh))) for i, sh in enumerate(shapes) if k - (r - len(sh)) >= 0]
        for i, j in cover:
            if shapes[i][j] == 1:
                reads[i][j] = ZERO
        dynamic = [(i, j) for i, j in cover if shapes[i][j] is None]
        if out_shape is not None:
            o = out_shape[k]
            if isinstance(o, int) and o == 1:
                for i, j in cover:
                    reads[i][j] = ZERO
                # A dynamic operand dim read at 0 for a result dim of 1 must be 1 at run time: a
                # per-axis DequantizeLinear scale of 3 for an input axis of 1 (dims symbolic) was
                # read at its first entry and answered (the compile fuzzer, seed 412 case 59267).
                _require_broadcast(values, dynamic, const_index(1), k)
                out.append(o)
                continue
            for i, j in dynamic:
                # The result dim is this very dim (Expand of a value to its own shape): the loop index.
                if not (isinstance(o, ir.Value) and (_is_dim_of(o, values[i], j) or _is_size_of(o, values[i], j))):
                    reads[i][j] = RUNTIME
            _require_broadcast(values, [(i, j) for i, j in cover if reads[i][j] == RUNTIME], dim_value(o), k)
            # A static dim other than 1 is read at the loop index: it must be the result dim (a
            # LayerNormalization bias of 4 or 15 for a last dim of 5, other dims symbolic, was
            # read past its end or answered: the compile fuzzer, seed 211 case 13978).
            for i, j in cover:
                s = shapes[i][j]
                if s is None or s == 1:
                    continue
                if isinstance(o, int) and s != o:
                    raise LoweringError(f"operand {i} dim {j} ({s}) does not broadcast to dim {k} of the result ({o})")
                if not isinstance(o, int):
                    from onnxc.transforms.lowering.runtime_checks import require

                    require(arith.cmpi(arith.CmpIPredicate.eq, o, const_index(s)), None,
                            f"operand dim {s} does not broadcast to dim {k} of the result ({{size}})", [("size", o)])  # fmt: skip
            out.append(o)
            continue
        d = res[k]  # type: ignore[index]
        if d is not None:  # a static size other than 1 decides; dynamic inputs are 1 or d
            out.append(d)
            for i, j in dynamic:
                reads[i][j] = RUNTIME
            _require_broadcast(values, cover, const_index(d), k)
            continue
        if not dynamic:
            out.append(1)
            continue
        distinct: list[tuple[int, int]] = []
        for i, j in dynamic:
            if not any(_same_dim((values[i], j), (values[a], b)) for a, b in distinct):
                distinct.append((i, j))
        if len(distinct) == 1:  # one dynamic size (perhaps read by several inputs) and static 1s
            out.append(tensor.dim(values[distinct[0][0]], const_index(distinct[0][1])))
            continue
        whole = _equal_or_invalid(*((values[i], j) for i, j in distinct)) if len(distinct) == 2 else None
        if whole is not None:
            # Two sizes that broadcast only when equal (a table sliced to the other's length):
            # checked to be 1 or the result size, then read at the loop index.
            size = tensor.dim(whole[0], const_index(whole[1]))
            out.append(size)
            _require_broadcast(values, cover, size, k)
            continue
        size: ir.Value = tensor.dim(values[distinct[0][0]], const_index(distinct[0][1]))
        one = const_index(1)
        for i, j in distinct[1:]:
            e = tensor.dim(values[i], const_index(j))
            smaller = arith.minui(size, e)
            size = arith.select(arith.cmpi(arith.CmpIPredicate.eq, size, one), e,
                                arith.select(arith.cmpi(arith.CmpIPredicate.eq, e, one), size, smaller))  # fmt: skip
        out.append(size)
        for i, j in dynamic:
            reads[i][j] = RUNTIME
        _require_broadcast(values, cover, size, k)
    return BroadcastPlan(out, reads)


def _require_broadcast(values: Sequence[ir.Value], cover: Sequence[tuple[int, int]], size: ir.Value, k: int) -> None:
    """A run-time error unless every dynamic dim of `cover` ((input, dim) pairs read for result
    dim `k` of size `size`) is 1 or `size`. Why: sizes that do not broadcast were read at a size
    every input has (memory-safe) and answered, e.g. Add of (3,) and (4,) with symbolic dims
    returned 3 sums (the compile fuzzer); onnx.reference refuses them."""
    from onnxc.transforms.lowering.runtime_checks import require

    one = const_index(1)
    ok: ir.Value | None = None
    for i, j in cover:
        if not ir.RankedTensorType(values[i].type).is_dynamic_dim(j):
            continue
        e = tensor.dim(values[i], const_index(j))
        fits = arith.ori(arith.cmpi(arith.CmpIPredicate.eq, e, one), arith.cmpi(arith.CmpIPredicate.eq, e, size))
        ok = fits if ok is None else arith.andi(ok, fits)
    if ok is not None:
        dims = [dim_value(dim(values[i], j)) for i, j in cover]
        require(ok, None, f"operand dims {{dims}} do not broadcast to dim {k} of the result (each must be 1 or {{size}})",
                [("dims", dims), ("size", size)])  # fmt: skip


def _is_dim_of(d: ir.Value, v: ir.Value, j: int) -> bool:
    """Whether `d` is `tensor.dim v, j` (with a constant index)."""
    owner = d.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)) or owner.operation.name != "tensor.dim":
        return False
    op = owner.operation
    if op.operands[0] != v:
        return False
    idx = op.operands[1].owner
    if not isinstance(idx, (ir.Operation, ir.OpView)) or idx.operation.name != "arith.constant":
        return False
    return ir.IntegerAttr(idx.operation.attributes["value"]).value == j


def broadcast_dims(values: Sequence[ir.Value]) -> list[Dim]:
    """Numpy-broadcast result shape of ranked tensor values; dynamic dims computed at run time."""
    return broadcast_plan(values).out


def broadcast_map(value_shape: Sequence[int | None], out_shape: Sequence[Dim]) -> ir.AffineMap:
    """Indexing map reading a value of `value_shape` broadcast (numpy rules) into `out_shape`.
    A dynamic dim is read at the loop index: only valid where it equals the result dim (see
    `broadcast_plan` for the cases where that is not known)."""
    r = len(out_shape)
    off = r - len(value_shape)
    exprs: list[int | str] = []
    for j, d in enumerate(value_shape):
        o = out_shape[j + off]
        exprs.append("0" if d == 1 and not (isinstance(o, int) and o == 1) else j + off)
    return affine_map(r, exprs)


def _plain_generic(inputs: Sequence[ir.Value], reads: list[list[str]], shape: Sequence[Dim], out_elem: ir.Type, body: Callable[..., ir.Value]) -> ir.Value:
    """The elementwise generic with affine reads only (`RUNTIME` dims read at the loop index)."""
    r = len(shape)
    maps = []
    for v, rd in zip(inputs, reads):
        off = r - len(rd)
        maps.append(affine_map(r, ["0" if k == ZERO else j + off for j, k in enumerate(rd)]))
    init = empty(shape, out_elem)
    return generic(list(inputs), [init], maps + [identity_map(r)], ["parallel"] * r, lambda args: [body(*args[: len(inputs)])])[0]


def _runtime_generic(inputs: Sequence[ir.Value], reads: list[list[str]], shape: Sequence[Dim], out_elem: ir.Type, body: Callable[..., ir.Value]) -> ir.Value:
    """The elementwise generic where inputs with `RUNTIME` dims are read by `tensor.extract` at
    `min(i, size - 1)`: the loop index where the size is the result dim, 0 where it is 1, and never
    out of bounds where the sizes do not broadcast (those inputs give an unspecified result: the
    compiled code has no error channel, see issue 11). Other inputs are read through maps."""
    r = len(shape)
    direct = [i for i, rd in enumerate(reads) if RUNTIME not in rd]
    last: dict[tuple[int, int], ir.Value] = {}
    one = const_index(1)
    for i, rd in enumerate(reads):
        for j, k in enumerate(rd):
            if k == RUNTIME:
                size = tensor.dim(inputs[i], const_index(j))
                last[(i, j)] = arith.subi(arith.maxui(size, one), one)
    maps = []
    for i in direct:
        off = r - len(reads[i])
        maps.append(affine_map(r, ["0" if k == ZERO else j + off for j, k in enumerate(reads[i])]))
    init = empty(shape, out_elem)

    def region(args: list[ir.Value]) -> list[ir.Value]:
        scalars: list[ir.Value | None] = [None] * len(inputs)
        for n, i in enumerate(direct):
            scalars[i] = args[n]
        loops = [index_of(k) for k in range(r)]
        zero = const_index(0)
        for i, rd in enumerate(reads):
            if scalars[i] is not None:
                continue
            off = r - len(rd)
            idx = [zero if k == ZERO else loops[j + off] if k == LOOP else arith.minui(loops[j + off], last[(i, j)]) for j, k in enumerate(rd)]
            scalars[i] = tensor.extract(inputs[i], idx)
        return [body(*scalars)]

    return generic([inputs[i] for i in direct], [init], maps + [identity_map(r)], ["parallel"] * r, region)[0]


def elementwise(inputs: Sequence[ir.Value], out_elem: ir.Type, body: Callable[..., ir.Value], out_shape: Sequence[Dim] | None = None) -> ir.Value:
    """Numpy-broadcasting elementwise map: `body(*scalars) -> scalar` over `inputs`.

    Where a dynamic dim may or may not be broadcast (see `broadcast_plan`), that input is read at
    run-time indices (`_runtime_generic`). Versioning the op instead (`scf.if` the sizes are equal,
    the plain generic, else a copy broadcasting the input) was tried: at run time no faster on
    dynamic shapes, and the CPU pipeline's `loop-invariant-subset-hoisting` took 100 s on a rank-4
    Add with every dim dynamic (the extract form: 3 s).
    """
    plan = broadcast_plan(inputs, out_shape)
    if plan.ambiguous:
        return _runtime_generic(inputs, plan.reads, plan.out, out_elem, body)
    return _plain_generic(inputs, plan.reads, plan.out, out_elem, body)


def broadcast_to(v: ir.Value, shape: Sequence[Dim]) -> ir.Value:
    """`v` broadcast (numpy rules) to `shape`; returns `v` when already that shape statically."""
    src = static_shape(v.type)
    if len(src) == len(shape) and all(isinstance(o, int) and s == o for s, o in zip(src, shape)):
        return v
    return elementwise([v], elem_of(v.type), lambda x: x, out_shape=shape)


# --- scalar conversions --------------------------------------------------------------------------


def convert_scalar(x: ir.Value, src: ir.Type, dst: ir.Type, saturate: bool = False, round_mode: str = "up") -> ir.Value:
    """Convert a scalar from ONNX element type `src` to `dst` (both may be unsigned: the
    signedness picks extui/uitofp/fptoui; the values themselves are signless). float8/float4/
    int4/int2 go through their byte codes (`minifloat.py`); `saturate` is ONNX Cast's flag for
    float8 results."""
    from onnxc.transforms.lowering import minifloat as mf

    if src == dst:
        return x
    f32 = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)
    if mf.is_e8m0(src):
        return convert_scalar(mf.decode_e8m0(x), f32, dst, saturate)
    if mf.is_e8m0(dst):
        return mf.encode_e8m0(convert_scalar(x, src, f32), saturate, round_mode)
    if (src_mf := mf.minifloat_of(src)) is not None:
        return convert_scalar(mf.decode(x, src_mf), f32, dst, saturate)
    if (src_int := mf.small_int_of(src)) is not None:
        bits, signed = src_int
        return convert_scalar(mf.small_int_to_i32(x, bits, signed), i32, dst, saturate)
    if (dst_mf := mf.minifloat_of(dst)) is not None:
        return mf.encode(convert_scalar(x, src, f32), dst_mf, saturate)
    if (dst_int := mf.small_int_of(dst)) is not None:
        bits, _ = dst_int
        if is_float(src):
            wide = ir.F64Type.get() if src == ir.F64Type.get() else f32
            xi = arith.fptosi(ir.IntegerType.get_signless(64), convert_scalar(x, src, wide))
            return mf.i64_to_small_int(xi, bits)
        if is_bool(src):
            x = arith.extui(ir.IntegerType.get_signless(8), x)
        return mf.i64_to_small_int(x, bits)
    s, d = convert_element(src), convert_element(dst)
    if s == d:
        return x
    if is_float(s) and is_float(d):
        if bitwidth(d) > bitwidth(s):
            return arith.extf(d, x)
        if bitwidth(d) < bitwidth(s):
            return arith.truncf(d, x)
        return _float_same_width(x, s, d)
    if is_float(s) and is_int(d):
        if is_bool(d):
            return arith.cmpf(arith.CmpFPredicate.UNE, x, const_scalar(0.0, s))
        if bitwidth(s) < 32:  # f16 -> int: go through f32 so large ints are not lost
            x = arith.extf(ir.F32Type.get(), x)
        return arith.fptoui(d, x) if is_unsigned(dst) else arith.fptosi(d, x)
    if is_int(s) and is_float(d):
        if is_unsigned(src) or is_bool(s):
            return arith.uitofp(d, x)
        return arith.sitofp(d, x)
    if is_int(s) and is_int(d):
        if is_bool(d):
            return arith.cmpi(arith.CmpIPredicate.ne, x, const_scalar(0, s))
        if bitwidth(d) > bitwidth(s):
            return arith.extui(d, x) if (is_unsigned(src) or is_bool(s)) else arith.extsi(d, x)
        if bitwidth(d) < bitwidth(s):
            return arith.trunci(d, x)
        return x
    if isinstance(s, ir.IndexType):
        return arith.index_cast(d, x)
    if isinstance(d, ir.IndexType):
        return arith.index_castui(d, x) if is_unsigned(src) else arith.index_cast(d, x)
    raise LoweringError(f"cannot convert {src} to {dst}")


def _float_same_width(x: ir.Value, s: ir.Type, d: ir.Type) -> ir.Value:
    # f16 <-> bf16: through f32.
    return arith.truncf(d, arith.extf(ir.F32Type.get(), x))


def convert_tensor(v: ir.Value, src: ir.Type, dst: ir.Type, saturate: bool = False) -> ir.Value:
    """Elementwise conversion of a tensor from ONNX element type `src` to `dst`."""
    if src == dst:
        return v
    if convert_element(src) == convert_element(dst) and not _byte_coded(src) and not _byte_coded(dst):
        return v
    return elementwise([v], convert_element(dst), lambda x: convert_scalar(x, src, dst, saturate))


def _byte_coded(t: ir.Type) -> bool:
    from onnxc.transforms.lowering.minifloat import is_exotic

    return is_exotic(t)


def cast_to_type(v: ir.Value, t: ir.Type, check: bool = True) -> ir.Value:
    """`tensor.cast` to a compatible ranked type when types differ (refine or erase static dims).

    A dim refined from dynamic to static is checked at run time (`runtime_checks.py`, naming the
    op being lowered from the current location): the cast assumes it, and a run-time size that
    contradicts it (data-dependent shapes: a branch's result, a squeezed dim) is an error rather
    than a wrong answer. `check=False` when the caller checked already. Such a cast is always a
    `runtime_checks.guarded_cast`: a plain one was folded by canonicalization into `v`'s
    producer, whose loops then ran to the static sizes before the check (a crash)."""
    if v.type == t:
        return v
    if is_ranked(v.type) and is_ranked(t):
        from onnxc.transforms.lowering.runtime_checks import guarded_cast, require_declared_shape

        if check:
            require_declared_shape(v, t, None, "a value", "where the code assumes")
        return guarded_cast(v, t)
    return tensor.cast(t, v)


def compatible(a: ir.Type, b: ir.Type) -> bool:
    """Whether `tensor.cast` may go between two ranked tensor types."""
    if not (is_ranked(a) and is_ranked(b)):
        return False
    if elem_of(a) != elem_of(b):
        return False
    sa, sb = static_shape(a), static_shape(b)
    return len(sa) == len(sb) and all(x is None or y is None or x == y for x, y in zip(sa, sb))


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def reshape(v: ir.Value, shape: Sequence[Dim]) -> ir.Value:
    """Reshape to `shape` (static: `tensor.reshape` with a constant shape; dynamic: shape from
    `tensor.from_elements`). `tensor.reshape` keeps the row-major order, as ONNX Reshape does."""
    elem = elem_of(v.type)
    src = static_shape(v.type)
    if len(src) == len(shape) and all(isinstance(o, int) and s == o for s, o in zip(src, shape)):
        return v
    i64 = ir.IntegerType.get_signless(64)
    if not shape and all(d == 1 for d in src):
        # To rank 0 from static size-1 dims: a collapse (reshape wants a non-empty shape).
        return tensor.collapse_shape(tensor_type([], elem), v, ir.ArrayAttr.get([]))
    if all(isinstance(d, int) for d in shape):
        shp = const_tensor(np.array(list(shape), dtype=np.int64).reshape(len(shape)), i64)
    else:
        elems = [arith.index_cast(i64, dim_value(d)) for d in shape]
        shp = tensor.from_elements(ir.RankedTensorType.get([len(shape)], i64), elems)
    return tensor.reshape(tensor_type(shape, elem), v, shp)


def _unit_groups(out_rank: int, units: set[int]) -> list[list[int]]:
    """Reassociation attaching each unit dim to a neighbouring kept dim (empty if all are units)."""
    kept = [i for i in range(out_rank) if i not in units]
    if not kept:
        return []
    groups: list[list[int]] = [[] for _ in kept]
    g = 0
    for i in range(out_rank):
        if i in units:
            groups[g].append(i)
        else:
            if groups[g] and any(j not in units for j in groups[g]):
                g += 1
            groups[g].append(i)
    return groups


def reassociation_attr(groups: list[list[int]]) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, j) for j in g]) for g in groups])


def expand_unit_dims(v: ir.Value, units: Sequence[int]) -> ir.Value:
    """Insert size-1 dims at positions `units` of the result (`tensor.expand_shape`)."""
    if not units:
        return v
    src = shape_of(v)
    out_rank = len(src) + len(units)
    uset = set(units)
    out: list[Dim] = []
    it = iter(src)
    for i in range(out_rank):
        out.append(1 if i in uset else next(it))
    groups = _unit_groups(out_rank, uset)
    rtype = tensor_type(out, elem_of(v.type))
    dyn = [d for d in out if not isinstance(d, int)]
    static = [d if isinstance(d, int) else DYN for d in out]
    return tensor.expand_shape(rtype, v, reassociation_attr(groups), dyn, static)


def collapse_unit_dims(v: ir.Value, units: Sequence[int]) -> ir.Value:
    """Drop the size-1 dims at positions `units` (`tensor.collapse_shape`); they must be static 1."""
    if not units:
        return v
    src = static_shape(v.type)
    uset = set(units)
    for u in uset:
        if src[u] != 1:
            raise LoweringError(f"dim {u} of {v.type} is not a static 1")
    groups = _unit_groups(len(src), uset)
    out = [d for i, d in enumerate(src) if i not in uset]
    rtype = tensor_type([d if d is not None else None for d in out], elem_of(v.type))
    return tensor.collapse_shape(rtype, v, reassociation_attr(groups))


def min_value(elem: ir.Type, unsigned: bool = False) -> float | int:
    """The identity of max: -inf for floats, the least integer otherwise."""
    if is_float(elem):
        return float("-inf")
    w = bitwidth(elem)
    if w == 1 or unsigned:
        return 0
    return -(1 << (w - 1))


def max_value(elem: ir.Type, unsigned: bool = False) -> float | int:
    """The identity of min: +inf for floats, the greatest integer otherwise."""
    if is_float(elem):
        return float("inf")
    w = bitwidth(elem)
    if w == 1:
        return 1
    return (1 << w) - 1 if unsigned else (1 << (w - 1)) - 1


def reduce_dims(
    inputs: Sequence[ir.Value],
    axes: Sequence[int],
    inits: Sequence[ir.Value | float | int],
    out_elems: Sequence[ir.Type],
    body: Body,
) -> list[ir.Value]:
    """A reduction `linalg.generic` over `axes` of same-shaped `inputs`; results drop the reduced
    dims (no keepdims). `inits` are the initial values (scalars filled into the outputs);
    `body(args)` gets input scalars then accumulators and returns the new accumulators."""
    x = inputs[0]
    r = rank_of(x)
    aset = set(axes)
    shape = shape_of(x)
    out_shape = [d for i, d in enumerate(shape) if i not in aset]
    outs = []
    for init, oe in zip(inits, out_elems):
        outs.append(filled(out_shape, oe, init))
    in_maps = [identity_map(r)] * len(inputs)
    out_map = affine_map(r, [i for i in range(r) if i not in aset])
    iters = ["reduction" if i in aset else "parallel" for i in range(r)]
    return generic(list(inputs), outs, in_maps + [out_map] * len(outs), iters, body)


def _mixed(vals: Sequence[Dim]) -> tuple[list[ir.Value], list[int]]:
    dyn = [v for v in vals if not isinstance(v, int)]
    static = [v if isinstance(v, int) else DYN for v in vals]
    return dyn, static


def extract_slice(src: ir.Value, offsets: Sequence[Dim], sizes: Sequence[Dim], strides: Sequence[Dim] | None = None) -> ir.Value:
    """`tensor.extract_slice` with mixed static/dynamic offsets, sizes and strides.

    A slice with no elements (a static size of 0, or a source dim that is statically 0) is a
    `tensor.empty` instead: the verifier rejects an offset equal to the dim size even for an empty
    slice (a zero-size Split output at the end, a slice of an empty tensor), and it reads nothing.
    """
    src_shape = ir.RankedTensorType(src.type).shape if isinstance(src.type, ir.RankedTensorType) else None
    if src_shape is not None:
        sizes = [0 if src_shape[i] == 0 else s for i, s in enumerate(sizes)]
    if any(isinstance(s, int) and s == 0 for s in sizes):
        return empty(list(sizes), elem_of(src.type))
    strides = list(strides) if strides is not None else [1] * len(sizes)
    do, so = _mixed(offsets)
    dsz, ssz = _mixed(sizes)
    dst, sst = _mixed(strides)
    rtype = tensor_type(list(sizes), elem_of(src.type))
    return tensor.extract_slice(rtype, src, do, dsz, dst, so, ssz, sst)


def insert_slice(src: ir.Value, dest: ir.Value, offsets: Sequence[Dim], strides: Sequence[Dim] | None = None) -> ir.Value:
    """`tensor.insert_slice` of all of `src` into `dest` at `offsets`; `dest` itself when `src`
    statically has no elements (the verifier rejects the offset of an empty slice at the end)."""
    sizes = shape_of(src)
    if any(isinstance(s, int) and s == 0 for s in sizes):
        return dest
    strides = list(strides) if strides is not None else [1] * len(sizes)
    do, so = _mixed(offsets)
    dsz, ssz = _mixed(sizes)
    dst, sst = _mixed(strides)
    return tensor.insert_slice(src, dest, do, dsz, dst, so, ssz, sst)


def index_of(loop: int) -> ir.Value:
    """`linalg.index` of a loop dim inside a generic body."""
    return linalg.IndexOp(ir.IntegerAttr.get(ir.IntegerType.get_signless(64), loop)).result


def to_index(v: ir.Value, onnx_elem: ir.Type) -> ir.Value:
    """An integer scalar (ONNX element type `onnx_elem`) as an index."""
    if isinstance(v.type, ir.IndexType):
        return v
    return arith.index_castui(ir.IndexType.get(), v) if is_unsigned(onnx_elem) else arith.index_cast(ir.IndexType.get(), v)


def extract_dims(shape_tensor: ir.Value, onnx_elem: ir.Type) -> list[ir.Value]:
    """The elements of a 1-D static-length integer tensor as index values."""
    n = static_shape(shape_tensor.type)[0]
    if n is None:
        raise LoweringError("a shape tensor of unknown length")
    return [to_index(tensor.extract(shape_tensor, [const_index(i)]), onnx_elem) for i in range(n)]



def scalar_of(v: ir.Value) -> ir.Value:
    """The element of a one-element tensor of any rank (rank 0 or shape [1], [1, 1]...)."""
    return tensor.extract(v, [const_index(0)] * rank_of(v))
