"""The records of the generated op table (`optable.py`): one `OpInfo` per ONNX-dialect op.

These are plain frozen dataclasses so that the table is a Python literal that imports fast and
can be read by people. Everything the IRDL file, the builder and the verifier need about an op is
here: its ONNX identity (domain, op type, the since_versions it stands for), its formal inputs and
outputs, attributes (kind, required, default) and type constraints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SINGLE, OPTIONAL, VARIADIC = "single", "optional", "variadic"

# An ONNX variadic parameter is this many independently typed IRDL slots plus a variadic tail
# of one type (see `variadic_slots` in tools/gen_onnx_dialect.py for why).
VARIADIC_SLOTS = 16

# ONNX AttributeProto.AttributeType names; GRAPH/GRAPHS attributes become regions.
ATTR_KINDS = (
    "FLOAT", "INT", "STRING", "TENSOR", "GRAPH", "SPARSE_TENSOR", "TYPE_PROTO",
    "FLOATS", "INTS", "STRINGS", "TENSORS", "GRAPHS", "SPARSE_TENSORS", "TYPE_PROTOS",
)  # fmt: skip


@dataclass(frozen=True)
class Param:
    """A formal input or output: its ONNX name, IRDL name, type string (a constraint name such as
    `T` or a literal type such as `tensor(int64)`), option, homogeneity and minimum arity."""

    onnx_name: str
    name: str
    type_str: str
    option: str = SINGLE
    homogeneous: bool = True
    min_arity: int = 1


@dataclass(frozen=True)
class Attr:
    """An attribute: ONNX name, kind (an `ATTR_KINDS` entry), whether required, and its default
    value as a plain Python value (None where the schema gives none)."""

    name: str
    kind: str
    required: bool = False
    default: Any = None


@dataclass(frozen=True)
class OpInfo:
    """One op of the ONNX dialect (one or more ONNX schema versions with the same signature)."""

    dialect: str  # `onnx`, `onnx_ml`, ...
    name: str  # dialect-local op name: `mat_mul`, `reduce_sum_v11`
    domain: str  # ONNX domain ("" for ai.onnx)
    op_type: str  # ONNX op type: `MatMul`
    since_versions: tuple[int, ...]  # every ONNX since_version this op stands for, ascending
    inputs: tuple[Param, ...] = ()
    outputs: tuple[Param, ...] = ()
    attributes: tuple[Attr, ...] = ()
    type_constraints: tuple[tuple[str, tuple[str, ...]], ...] = ()
    has_function: bool = False  # the schema defines a function body (expandable)
    deprecated: bool = False
    _attr_index: dict[str, Attr] = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    @property
    def full_name(self) -> str:
        """`onnx.mat_mul`."""
        return f"{self.dialect}.{self.name}"

    @property
    def since_version(self) -> int:
        """The oldest ONNX version this op stands for."""
        return self.since_versions[0]

    @property
    def regions(self) -> tuple[str, ...]:
        """Names of GRAPH attributes, in region order (sorted by name)."""
        return tuple(sorted(a.name for a in self.attributes if a.kind == "GRAPH"))

    def attr(self, name: str) -> Attr | None:
        """The attribute named `name`, or None."""
        if self._attr_index is None:
            object.__setattr__(self, "_attr_index", {a.name: a for a in self.attributes})
        return self._attr_index.get(name)

    def constraint(self, type_str: str) -> tuple[str, ...] | None:
        """Allowed type strings of a constraint name, or None if `type_str` is a literal type."""
        for name, allowed in self.type_constraints:
            if name == type_str:
                return allowed
        return None


# `onnx.custom`: a node of a domain without schemas (custom ops, `com.microsoft`), with any
# inputs, outputs and attributes; `domain` and `op_type` say what it is.
CUSTOM_OP = OpInfo(
    "onnx", "custom", "", "", (1,),
    inputs=(Param("inputs", "inputs", "T", VARIADIC, False, 0),),
    outputs=(Param("outputs", "outputs", "T", VARIADIC, False, 0),),
    attributes=(Attr("domain", "STRING", True), Attr("op_type", "STRING", True)),
)
