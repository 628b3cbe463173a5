"""`onnx-validate-attributes`: check index-like attributes (and constant index inputs) against the
ranks and shapes of the values they index, before the conversion to linalg builds anything.

Why: the lowering turns `Concat{axis}`, `Transpose{perm}`, `Conv{pads,strides,group}` and their
kin into affine maps, `tensor.dim` indices and reassociations. An axis out of range or a perm that
is not a permutation reaches MLIR's C++ as a bad index, and the wheels are built with assertions:
the process aborts (issue 11). The importer's validator sees the model before shapes are known, so
it cannot check `axis < rank`; this pass runs after the ONNX-level shape inference, right before
`convert-onnx-to-linalg`, when ranks and many dims are known, and reports every problem of the
module at once.

How: one schema-driven table instead of per-op code in the lowerings. For every ONNX op, each
attribute the op's schema declares (explicitly set, or its schema default) and each formal input
given by a constant gets a rule looked up first by `(op_type, name)` in `OVERRIDES`, then by name
alone in `BY_NAME` (an `axis` of any op indexes its first input in `[-r, r-1]`, a `perm` is a
permutation of `range(r)`, `pads` of a windowed op has `2*(r-2)` entries, and so on). A rule is a
small dataclass that returns problem sentences; a check whose operand rank is unknown is skipped
(the lowering refuses unranked values itself). Every problem names the node, its op type, domain
and opset, and the attribute or input at fault.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
from mlir import ir

from onnxc.importers.proto import location_label
from onnxc.importers.validate import FLAGS
from onnxc.dialect.attributes import from_mlir, onnx_attributes
from onnxc.dialect.opinfo import VARIADIC, OpInfo
from onnxc.transforms.onnx_utils import collect_ops, constant_value, info_of, shape_of
from onnxc.transforms.pass_base import ModulePass, PassFailure

# Constant index inputs larger than this are not read (they are never index lists in practice).
_MAX_CONST = 4096


class OpView:
    """What a rule sees of one ONNX op: schema, attribute values (explicit or schema default),
    operand shapes (-1 dynamic, None unranked or omitted) and constant operand values."""

    def __init__(self, op: ir.Operation, info: OpInfo) -> None:
        self.op = op
        self.info = info
        self.explicit: dict[str, Any] = {}
        for k, v in onnx_attributes(op).items():
            try:
                self.explicit[k] = from_mlir(v)
            except (TypeError, ValueError):  # tensors numpy cannot hold (bf16): never index-like
                continue
        self.operands = list(op.operands)

    def attr(self, name: str) -> Any:
        """The attribute's value, else the schema default, else None."""
        if name in self.explicit:
            return self.explicit[name]
        spec = self.info.attr(name)
        return None if spec is None else spec.default

    def input_index(self, name: str) -> int | None:
        """The operand index of the formal input `name` (None when absent or after a variadic)."""
        for i, p in enumerate(self.info.inputs):
            if p.onnx_name == name:
                return i if i < len(self.operands) else None
            if p.option == VARIADIC:
                return None
        return None

    def input_name(self, i: int) -> str:
        formal = self.info.inputs
        if not formal:
            return f"#{i}"
        return formal[min(i, len(formal) - 1)].onnx_name

    def shape(self, i: int) -> list[int] | None:
        if i >= len(self.operands) or isinstance(self.operands[i].type, ir.NoneType):
            return None
        return shape_of(self.operands[i].type)

    def rank(self, i: int) -> int | None:
        s = self.shape(i)
        return None if s is None else len(s)

    def const(self, i: int | None) -> np.ndarray | None:
        if i is None or i >= len(self.operands) or isinstance(self.operands[i].type, ir.NoneType):
            return None
        try:
            return constant_value(self.operands[i], _MAX_CONST)
        except (TypeError, ValueError):  # element types numpy cannot hold (bf16): never index-like
            return None

    def const_ints(self, name: str) -> list[int] | None:
        """The values of the constant formal input `name` as ints, None when not a constant."""
        v = self.const(self.input_index(name))
        if v is None or v.dtype.kind not in "iu":
            return None
        return [int(x) for x in v.reshape(-1)]

    def value(self, name: str) -> Any:
        """An index-like parameter that is an attribute in some versions and an input in others."""
        if self.info.attr(name) is not None:
            return self.attr(name)
        return self.const_ints(name)


Problem = str
RuleFn = Callable[[OpView, str, Any], list[Problem]]


def _ints(value: Any) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return [int(value)]
    try:
        return [int(v) for v in value]
    except (TypeError, ValueError):
        return None


def _what(v: OpView, name: str) -> str:
    return f"attribute '{name}'" if v.info.attr(name) is not None else f"input '{name}'"


# --- rules ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Axis:
    """An axis of input `of` (by formal name, default the first input): in `[-r-extra, r-1+extra]`
    (`extra=1` for an axis of the output, one rank higher: OneHot; `upper=r` for Flatten)."""

    of: int = 0
    extra: int = 0
    upper_inclusive: bool = False

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        r = v.rank(self.of)
        vals = _ints(value)
        if r is None or not vals or len(vals) != 1:
            return []
        lo, hi = -r - self.extra, r - 1 + self.extra + (1 if self.upper_inclusive else 0)
        if not lo <= vals[0] <= hi:
            return [f"{_what(v, name)} = {vals[0]} is out of range [{lo}, {hi}] for input '{v.input_name(self.of)}' of rank {r}"]
        return []


@dataclasses.dataclass(frozen=True)
class Axes:
    """A list of axes of input `of`, each in `[-r, r-1]` and none repeated; with `grow` the axes
    index the output, whose rank is `r + len(axes)` (Unsqueeze)."""

    of: int = 0
    grow: bool = False

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        r = v.rank(self.of)
        vals = _ints(value)
        if r is None or vals is None:
            return []
        rr = r + len(vals) if self.grow else r
        what = f"output of rank {rr}" if self.grow else f"input '{v.input_name(self.of)}' of rank {r}"
        bad = [a for a in vals if not -rr <= a < rr]
        if bad:
            return [f"{_what(v, name)} = {vals} has axes {bad} out of range [{-rr}, {rr - 1}] for the {what}"]
        norm = [a % rr if rr else a for a in vals]
        if len(set(norm)) != len(norm):
            return [f"{_what(v, name)} = {vals} names an axis twice (for the {what})"]
        return []


@dataclasses.dataclass(frozen=True)
class Perm:
    """A permutation of `range(r)` of input `of` (Transpose)."""

    of: int = 0

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        r = v.rank(self.of)
        vals = _ints(value)
        if r is None or vals is None:
            return []
        if sorted(vals) != list(range(r)):
            return [f"{_what(v, name)} = {vals} is not a permutation of 0..{r - 1} (input '{v.input_name(self.of)}' has rank {r})"]
        return []


@dataclasses.dataclass(frozen=True)
class Spatial:
    """A per-spatial-dim list of a windowed op (Conv, pools): `r-2` entries for input `of` of rank
    `r` (`per=2` for pads: begin and end of each), each `>= minimum`."""

    of: int = 0
    per: int = 1
    minimum: int = 1

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        vals = _ints(value)
        if vals is None or (name not in v.explicit and not vals):
            return []
        out = []
        r = v.rank(self.of)
        if r is not None and r < 2:
            return [f"input '{v.input_name(self.of)}' has rank {r}; {v.info.op_type} needs (N, C, spatial...) of rank >= 3"]
        if r is not None and len(vals) != self.per * (r - 2):
            out.append(f"{_what(v, name)} = {vals} has {len(vals)} entries; input '{v.input_name(self.of)}' of rank {r} "
                       f"has {r - 2} spatial dims, so {self.per * (r - 2)} are needed")  # fmt: skip
        low = [x for x in vals if x < self.minimum]
        if low:
            out.append(f"{_what(v, name)} = {vals} has entries below {self.minimum}")
        return out


def _dims(v: OpView, i: int) -> list[int] | None:
    return v.shape(i)


@dataclasses.dataclass(frozen=True)
class Group:
    """`group` of a convolution against the channel counts of data `x` and weight `w`:
    `C == W[1] * group` and `M % group == 0` (transposed: `C == W[0]`, `C % group == 0`)."""

    x: int = 0
    w: int = 1
    transposed: bool = False

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        g = _ints(value)
        if not g:
            return []
        group = g[0]
        if group < 1:
            return [f"attribute 'group' = {group} must be at least 1"]
        xs, ws = _dims(v, self.x), _dims(v, self.w)
        if xs is None or ws is None:
            return []
        if len(xs) != len(ws):
            return [f"input '{v.input_name(self.x)}' has rank {len(xs)} but weight '{v.input_name(self.w)}' has rank {len(ws)}"]
        if len(xs) < 3:
            return []
        c = xs[1]
        if self.transposed:
            if c >= 0 and ws[0] >= 0 and c != ws[0]:
                return [f"attribute 'group' = {group}: input '{v.input_name(self.x)}' has {c} channels but weight "
                        f"'{v.input_name(self.w)}' has {ws[0]} (W[0])"]
            if c >= 0 and c % group:
                return [f"attribute 'group' = {group} does not divide the {c} input channels"]
            return []
        if c >= 0 and ws[1] >= 0 and c != ws[1] * group:
            return [f"attribute 'group' = {group}: input '{v.input_name(self.x)}' has {c} channels, but weight "
                    f"'{v.input_name(self.w)}' has W[1] = {ws[1]} "
                    f"per group x group {group} = {ws[1] * group}"]  # fmt: skip
        if ws[0] >= 0 and ws[0] % group:
            return [f"attribute 'group' = {group} does not divide the {ws[0]} output channels (W[0])"]
        return []


@dataclasses.dataclass(frozen=True)
class KernelShape:
    """`kernel_shape` of a convolution equals the weight's spatial dims; otherwise a Spatial check."""

    w: int | None = None

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        out = Spatial(0, 1, 1)(v, name, value)
        vals = _ints(value)
        ws = None if self.w is None else _dims(v, self.w)
        if not out and vals and ws is not None and len(ws) == len(vals) + 2:
            if any(k != d for k, d in zip(vals, ws[2:]) if d >= 0):
                out.append(f"attribute 'kernel_shape' = {vals} does not match the weight's spatial dims {ws[2:]}")
        return out


@dataclasses.dataclass(frozen=True)
class BlockSize:
    """`blocksize` of DepthToSpace / SpaceToDepth: positive, input of rank 4, dims divisible."""

    depth_to_space: bool

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        b = (_ints(value) or [None])[0]
        if b is None:
            return []
        if b < 1:
            return [f"attribute 'blocksize' = {b} must be at least 1"]
        s = v.shape(0)
        if s is None:
            return []
        if len(s) != 4:
            return [f"input 'input' has rank {len(s)}; {v.info.op_type} needs rank 4 (N, C, H, W)"]
        if self.depth_to_space and s[1] >= 0 and s[1] % (b * b):
            return [f"attribute 'blocksize' = {b}: the {s[1]} channels are not divisible by blocksize^2 = {b * b}"]
        if not self.depth_to_space and any(d >= 0 and d % b for d in s[2:]):
            return [f"attribute 'blocksize' = {b} does not divide the spatial dims {s[2:]}"]
        return []


@dataclasses.dataclass(frozen=True)
class SplitSizes:
    """Split's sizes (attribute before opset 13, constant input after): non-negative, one per
    output, summing to the split dim; `num_outputs` (opset 18) at least 1 and at most the dim."""

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        vals = _ints(value)
        if vals is None:
            return []
        s = v.shape(0)
        axis = _ints(v.attr("axis")) or [0]
        if name == "num_outputs":
            if vals[0] < 1:
                return [f"attribute 'num_outputs' = {vals[0]} must be at least 1"]
            if len(v.op.results) != vals[0]:
                return [f"attribute 'num_outputs' = {vals[0]} but the node has {len(v.op.results)} outputs"]
            return []
        out = []
        if any(x < 0 for x in vals):
            out.append(f"{_what(v, name)} = {vals} has negative sizes")
        if len(vals) != len(v.op.results):
            out.append(f"{_what(v, name)} = {vals} has {len(vals)} sizes but the node has {len(v.op.results)} outputs")
        if s is not None and -len(s) <= axis[0] < len(s):
            d = s[axis[0]]
            if d >= 0 and sum(vals) != d:
                out.append(f"{_what(v, name)} = {vals} sums to {sum(vals)}, but dim {axis[0]} of input 'input' is {d}")
        return out


@dataclasses.dataclass(frozen=True)
class PadsOfPad:
    """Pad's `pads`: `2 * len(axes)` entries (all axes when `axes` is omitted)."""

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        vals = _ints(value)
        r = v.rank(0)
        if vals is None or r is None:
            return []
        axes = v.const_ints("axes") if v.input_index("axes") is not None else None
        n = len(axes) if axes is not None else r
        if len(vals) != 2 * n:
            return [f"{_what(v, name)} has {len(vals)} entries; {2 * n} are needed (begin and end of {n} axes)"]
        return []


@dataclasses.dataclass(frozen=True)
class SameLength:
    """An index list whose length must equal that of `other` (Slice's starts/ends/axes/steps),
    or the input rank when `other` is None (Tile's repeats), with entries `>= minimum` when set."""

    other: str | None = None
    nonzero: bool = False
    minimum: int | None = None

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        vals = _ints(value)
        if vals is None:
            return []
        out = []
        if self.other is None:
            r = v.rank(0)
            if r is not None and len(vals) != r:
                out.append(f"{_what(v, name)} has {len(vals)} entries; input '{v.input_name(0)}' has rank {r}")
        else:
            ref = _ints(v.value(self.other))
            if ref is not None and len(ref) != len(vals):
                out.append(f"{_what(v, name)} has {len(vals)} entries but '{self.other}' has {len(ref)}")
        if self.nonzero and any(x == 0 for x in vals):
            out.append(f"{_what(v, name)} = {vals} has a zero step")
        if self.minimum is not None and any(x < self.minimum for x in vals):
            out.append(f"{_what(v, name)} = {vals} has entries below {self.minimum}")
        return out


@dataclasses.dataclass(frozen=True)
class ReshapeShape:
    """Reshape's constant `shape`: at most one -1, no entry below -1, a 0 (copy) within the input
    rank unless `allowzero`, and (static input) an element count that matches."""

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        vals = _ints(value)
        s = v.shape(0)
        if vals is None:
            return []
        if any(x < -1 for x in vals):
            return [f"input 'shape' = {vals} has entries below -1"]
        if vals.count(-1) > 1:
            return [f"input 'shape' = {vals} has more than one -1"]
        allowzero = bool((_ints(v.attr("allowzero")) or [0])[0])
        if allowzero and 0 in vals and -1 in vals:
            return [f"input 'shape' = {vals} has both 0 and -1 with allowzero=1"]
        if s is None:
            return []
        if not allowzero and any(x == 0 and i >= len(s) for i, x in enumerate(vals)):
            return [f"input 'shape' = {vals} copies (0) a dim past the input's rank {len(s)}"]
        if any(d < 0 for d in s):
            return []
        out_dims = [s[i] if x == 0 and not allowzero else x for i, x in enumerate(vals)]
        total = int(np.prod(s, dtype=np.int64))
        known = int(np.prod([d for d in out_dims if d != -1], dtype=np.int64))
        if -1 in out_dims:
            if known == 0 or total % known:
                if not (known == 0 and total == 0):
                    return [f"input 'shape' = {vals} cannot hold the {total} elements of input 'data' {s}"]
        elif known != total:
            return [f"input 'shape' = {vals} has {known} elements but input 'data' {s} has {total}"]
        return []


@dataclasses.dataclass(frozen=True)
class OneOf:
    """An attribute whose values must lie in a small set (ReverseSequence's batch/time axis)."""

    allowed: tuple[int, ...]

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        vals = _ints(value)
        if vals and vals[0] not in self.allowed:
            return [f"attribute '{name}' = {vals[0]} must be one of {list(self.allowed)}"]
        return []


@dataclasses.dataclass(frozen=True)
class AtLeast:
    """A count attribute that must be at least `minimum` (LRN size, GroupNormalization groups)."""

    minimum: int = 1
    divides_channels: bool = False

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        vals = _ints(value)
        if not vals:
            return []
        if vals[0] < self.minimum:
            return [f"attribute '{name}' = {vals[0]} must be at least {self.minimum}"]
        s = v.shape(0)
        if self.divides_channels and s is not None and len(s) >= 2 and s[1] >= 0 and s[1] % vals[0]:
            return [f"attribute '{name}' = {vals[0]} does not divide the {s[1]} channels of input '{v.input_name(0)}'"]
        return []


@dataclasses.dataclass(frozen=True)
class BatchDims:
    """GatherND's `batch_dims`: non-negative and below both input ranks."""

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        b = (_ints(value) or [0])[0]
        r0, r1 = v.rank(0), v.rank(1)
        if b < 0:
            return [f"attribute 'batch_dims' = {b} must be non-negative"]
        if r0 is not None and r1 is not None and b >= min(r0, r1):
            return [f"attribute 'batch_dims' = {b} must be below the ranks of 'data' ({r0}) and 'indices' ({r1})"]
        return []


@dataclasses.dataclass(frozen=True)
class QuantAxis:
    """The `axis` of (De)QuantizeLinear matters only for per-axis scales (a 1-D or blocked scale)."""

    def __call__(self, v: OpView, name: str, value: Any) -> list[Problem]:
        sr = v.rank(1)
        if sr is None or sr == 0:
            return []
        return Axis(0)(v, name, value)


def _concat_inputs(v: OpView, name: str, value: Any) -> list[Problem]:
    """Concat: every input has the rank of the first, and the same static dims off the axis."""
    out = Axis(0)(v, name, value)
    shapes = [v.shape(i) for i in range(len(v.operands))]
    if out or any(s is None for s in shapes) or not shapes:
        return out
    r = len(shapes[0])
    for i, s in enumerate(shapes[1:], 1):
        if len(s) != r:
            return [f"input #{i} has rank {len(s)} but input #0 has rank {r}; Concat needs equal ranks"]
    axis = _ints(value)[0] % r if r else 0  # type: ignore[index]
    for k in range(r):
        if k == axis:
            continue
        sizes = {s[k] for s in shapes if s[k] >= 0}
        if len(sizes) > 1:
            return [f"inputs differ in dim {k} ({sorted(sizes)}), which is not the concatenation axis {axis}"]
    return out


#: Rules by attribute (or index input) name, for every op whose schema has one: the generic meaning.
BY_NAME: dict[str, RuleFn] = {
    "axis": Axis(0),
    "axes": Axes(0),
    "perm": Perm(0),
    "kernel_shape": KernelShape(),
    "strides": Spatial(0, 1, 1),
    "dilations": Spatial(0, 1, 1),
    "pads": Spatial(0, 2, 0),
    "output_padding": Spatial(0, 1, 0),
}

# Flags (importers.validate.FLAGS) are checked on the model too, before schema functions are expanded.
BY_NAME.update({name: OneOf((0, 1)) for name in FLAGS})

_CONV_W = {"Conv": 1, "ConvInteger": 1, "ConvTranspose": 1, "DeformConv": 1, "QLinearConv": 3}

#: Rules for one (op_type, attribute or input name), where the generic meaning does not apply
#: (None: no check, e.g. an axis of a sequence, or an attribute unrelated to indexing).
OVERRIDES: dict[tuple[str, str], RuleFn | None] = {
    ("Concat", "axis"): _concat_inputs,
    ("ConcatFromSequence", "axis"): None,  # indexes the sequence's tensors, not the input
    ("Flatten", "axis"): Axis(0, 0, upper_inclusive=True),
    ("OneHot", "axis"): Axis(0, 1),
    ("Unsqueeze", "axes"): Axes(0, grow=True),
    ("QuantizeLinear", "axis"): QuantAxis(),
    ("DequantizeLinear", "axis"): QuantAxis(),
    ("Unique", "axis"): Axis(0),
    ("TensorScatter", "axis"): Axis(0),
    ("ReverseSequence", "batch_axis"): OneOf((0, 1)),
    ("ReverseSequence", "time_axis"): OneOf((0, 1)),
    ("GatherND", "batch_dims"): BatchDims(),
    ("DepthToSpace", "blocksize"): BlockSize(True),
    ("SpaceToDepth", "blocksize"): BlockSize(False),
    ("Split", "split"): SplitSizes(),
    ("Split", "num_outputs"): SplitSizes(),
    ("Pad", "pads"): PadsOfPad(),
    ("Slice", "starts"): SameLength("ends"),
    ("Slice", "axes"): Axes(0),
    ("Slice", "steps"): SameLength("starts", nonzero=True),
    ("Tile", "repeats"): SameLength(None, minimum=0),
    ("Reshape", "shape"): ReshapeShape(),
    ("LRN", "size"): AtLeast(1),
    ("GroupNormalization", "num_groups"): AtLeast(1, divides_channels=True),
    ("MaxUnpool", "pads"): Spatial(0, 2, 0),
    ("Col2Im", "pads"): None,  # Col2Im's spatial rank comes from its image_shape input
    ("Col2Im", "strides"): None,
    ("Col2Im", "dilations"): None,
    ("Resize", "axes"): Axes(0),
    ("CenterCropPad", "axes"): Axes(0),
    ("CumSum", "axis"): Axis(0),
    ("CumProd", "axis"): Axis(0),
    **{(op, "group"): Group(0, w, op == "ConvTranspose") for op, w in _CONV_W.items()},
    **{(op, "kernel_shape"): KernelShape(w) for op, w in _CONV_W.items()},
}

#: Index-like *inputs* that a constant may give (after `onnx-upgrade-ops` most index attributes
#: of old opsets are such inputs): checked with the rule of their name when constant.
INDEX_INPUTS = ("axes", "axis", "split", "pads", "starts", "steps", "repeats", "shape", "perm")


#: Inputs of a fixed rank (the spec's shapes), checked before the lowering indexes their dims (the
#: fuzzer found RNN with a rank-2 W aborting in ShapedType::isDynamicDim).
RANKS: dict[str, dict[str, int]] = {
    **{op: {"X": 3, "W": 3, "R": 3, "B": 2, "sequence_lens": 1, "initial_h": 3, "initial_c": 3, "P": 2} for op in ("RNN", "GRU", "LSTM")},
    "Gemm": {"A": 2, "B": 2},
    "BatchNormalization": {"scale": 1, "B": 1, "input_mean": 1, "input_var": 1},
    "InstanceNormalization": {"scale": 1, "B": 1},
    # Scalars by the spec, read as element 0 otherwise (the fuzzer: DFT with a [1]-shaped axis gave
    # an answer onnx.reference refuses and onnxruntime computes differently).
    "DFT": {"dft_length": 0, "axis": 0},
    "Range": {"start": 0, "limit": 0, "delta": 0},
    # [N, C * prod(block_shape), L] (a rank-2 input aborted in ShapedType::isDynamicDim: the
    # compile fuzzer, seed 212 cases 4282 and 4758).
    "Col2Im": {"input": 3, "image_shape": 1, "block_shape": 1},
}

#: Ops whose scalar inputs may also be one-element 1-D tensors: onnx's own function bodies feed
#: Range such bounds (AffineGrid's expansion: `limit` of shape [1]), and onnx.reference and the
#: lowering read their one element; a longer tensor is still refused.
ONE_ELEMENT_SCALARS: frozenset[str] = frozenset({"Range"})


def _rank_problems(v: OpView) -> list[Problem]:
    out = []
    for name, want in RANKS.get(v.info.op_type, {}).items():
        i = v.input_index(name)
        r = None if i is None else v.rank(i)
        if r is not None and r != want:
            if want == 0 and r == 1 and v.info.op_type in ONE_ELEMENT_SCALARS and v.shape(i) == [1]:
                continue
            out.append(f"input '{name}' has rank {r}; {v.info.op_type} needs rank {want}")
    return out


def _rule(op_type: str, name: str) -> RuleFn | None:
    key = (op_type, name)
    if key in OVERRIDES:
        return OVERRIDES[key]
    return BY_NAME.get(name)


def _opsets(op: ir.Operation) -> dict[str, int]:
    """domain -> version of the nearest enclosing function's (else the module's) opset_import."""
    cur: Any = op
    while cur is not None:
        attrs = cur.attributes
        if "onnx.opset_import" in attrs:
            out: dict[str, int] = {}
            try:
                for entry in ir.ArrayAttr(attrs["onnx.opset_import"]):
                    pair = ir.ArrayAttr(entry)
                    d = ir.StringAttr(pair[0]).value
                    out["" if d == "ai.onnx" else d] = ir.IntegerAttr(pair[1]).value
            except (ValueError, TypeError, IndexError):
                pass
            return out
        parent = cur.parent
        cur = parent.operation if parent is not None else None
    return {}


def describe(op: ir.Operation, info: OpInfo) -> str:
    """`Node 'cat' (Concat, domain ai.onnx, opset 18)`."""
    opset = _opsets(op).get(info.domain)
    name = location_label(op.location)[0]
    who = f"Node '{name}'" if name else "A node"
    at = f", opset {opset}" if opset is not None else f", version {info.since_version}"
    return f"{who} ({info.op_type}, domain {info.domain or 'ai.onnx'}{at})"


def check_op(op: ir.Operation) -> list[str]:
    """Every problem of one ONNX op's index-like attributes and constant index inputs."""
    info = info_of(op)
    if info is None:
        return []
    v = OpView(op, info)
    problems: list[str] = _rank_problems(v)
    names = [a.name for a in info.attributes]
    names += [p.onnx_name for p in info.inputs if p.onnx_name in INDEX_INPUTS and p.onnx_name not in names]
    for name in names:
        rule = _rule(info.op_type, name)
        if rule is None:
            continue
        value = v.value(name)
        if value is None:
            continue
        try:
            problems += rule(v, name, value)
        except (TypeError, ValueError, IndexError, ZeroDivisionError, OverflowError) as exc:  # a rule must not crash the compile
            problems.append(f"{_what(v, name)} could not be checked ({exc})")
    return [f"{describe(op, info)}: {p}." for p in problems]


def check_module(module: ir.Operation) -> list[tuple[ir.Location, str]]:
    """(location, message) of every problem in the module, in program order."""
    out: list[tuple[ir.Location, str]] = []
    for op in collect_ops(module, lambda o: info_of(o) is not None):
        out += [(op.location, p) for p in check_op(op)]
    return out


@dataclasses.dataclass(frozen=True)
class OnnxValidateAttributesPass(ModulePass):
    """Check axes, perms, pads, strides, group counts, split sizes and other index-like attributes
    and constant index inputs against the operand ranks and shapes; report all problems at once."""

    name = "onnx-validate-attributes"

    def run(self, module: ir.Operation) -> None:
        problems = check_module(module)
        if problems:
            raise PassFailure(self.name, problems)
