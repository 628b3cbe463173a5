"""Model validation before import: every problem of a model at once, each naming its model element.

The importer calls `validate_model` before it builds any IR, so that nothing invalid reaches MLIR's
C++ (the wheels are built with assertions: a bad op kills the process) and so that a user sees all
problems of a model in one report instead of fixing them one run at a time (onnx-mlir and
torch-mlir stop at the first). Every problem is a complete sentence naming the node (its name, or
its index when unnamed), op type, domain and opset, and the input or attribute concerned.

The checks follow the ONNX IR spec and versioning rules:

* IR version 3 .. `onnx.IR_VERSION`; opset imports with versions the installed schemas know
  (newer ones only with `ImportConfig.allow_newer_opset`), one import per domain, an import for
  every domain a node uses.
* Names: single assignment (a value is defined once, by an input, an initializer or one node
  output, and a subgraph's node outputs do not reuse names visible from outer scopes); every used
  name is defined in the graph or an enclosing one (`""` marks an omitted optional input);
  graph outputs are defined.
* Nodes against their schema (bound with the versioning rule: greatest since_version <= opset):
  the op exists at that opset, input and output counts fit the formal parameters (required,
  optional, variadic with minimum arity), no required input or output is left empty, required
  attributes are present, attributes have the schema's type, no unknown attributes (the spec makes
  them invalid for standard ops). Calls of model-local functions are checked against the function.
  Ops of domains without schemas (custom ops) are only checked for names.
* Data: tensor element types, dims (>= 0, at most 2^40 elements in a declared type), tensor data of
  the size its dims ask for in the right field, UTF-8 strings where the spec requires them.
* Subgraphs (GRAPH/GRAPHS attributes) recursively with their outer scope; model-local functions
  with their own opset imports, `ref_attr_name` references, and no recursion between functions.

`onnx.checker` is not used: it stops at the first problem, and its messages do not name the node
the way onnxc's diagnostics do. `topological_order` sorts nodes for the importer and names the
nodes of a cycle when there is one.
"""

from __future__ import annotations

import heapq
from pathlib import Path
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Iterable

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import AttributeProto as AP

from onnxc.dialect.opinfo import SINGLE, VARIADIC, OpInfo
from onnxc.dialect.table import bound_version, known_domain, lookup, schema_versions
from onnxc.dialect.types import BY_ONNX
from onnxc.importers.config import ImportConfig
from onnxc.importers.errors import ImportError_

MIN_IR_VERSION = 3
# A declared tensor type with more elements than this is treated as a corrupt model: 2^40 elements
# is 4 TiB of float32, far past any model, while products of corrupt dims easily overflow int64.
MAX_ELEMENTS = 2**40
# A report longer than this is cut (with a count of the rest): nobody reads a million lines.
MAX_PROBLEMS = 1000

_KIND_NAMES = {v: k for k, v in AP.AttributeType.items()}

#: INT attributes of standard ops the spec defines as flags (0 or 1): another value has no meaning,
#: and onnxc and onnx.reference read it differently (found by the compile fuzzer: Mod fmod=-1,
#: Attention is_causal=4). Checked here, on the model, because ops with a function body
#: (Attention, the window functions) are expanded before onnx-validate-attributes sees them.
FLAGS = (
    "keepdims", "fmod", "is_causal", "exclusive", "reverse", "ceil_mode", "count_include_pad", "transA", "transB",
    "upper", "largest", "sorted", "select_last_index", "noop_with_empty_axes", "allowzero", "training_mode",
    "detect_negative", "detect_positive", "align_corners", "exclude_outside", "center_point_box",
    "linear_before_reset", "input_forget", "layout", "interleaved", "periodic", "onesided", "inverse", "new_axis",
    "storage_order",
)  # fmt: skip
#: (op_type, INT attribute) -> the values the spec gives a meaning, besides the flags.
INT_CHOICES: dict[tuple[str, str], tuple[int, ...]] = {
    ("Attention", "qk_matmul_output_mode"): (0, 1, 2, 3),
    ("LpNormalization", "p"): (1, 2),  # the spec's only norms (the fuzzer: p=5 read differently by onnxc and onnx.reference)
}
#: (op_type, STRING attribute, since_version) -> the values that version of the spec defines,
#: where versions renamed them: GridSample-20's `linear`/`cubic` at opset 16 were answered by
#: onnx.reference as if the model were opset 20 and refused by onnxruntime (the compile fuzzer).
STRING_CHOICES: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("GridSample", "mode", "16"): ("bilinear", "nearest", "bicubic"),
    ("GridSample", "mode", "20"): ("linear", "nearest", "cubic"),
}
#: INT attributes that must not be negative, checked on the model because onnx's own shape
#: inference (run by the importer) reads out of bounds with them: GatherND batch_dims = -2
#: crashed the process (SIGSEGV in onnx.shape_inference; the compile fuzzer).
NON_NEGATIVE: frozenset[tuple[str, str]] = frozenset({("GatherND", "batch_dims")})
#: INTS attributes whose entries must be positive, for ops `onnx-validate-attributes` has no rule
#: for: Col2Im strides = [2, -2] was answered (the compile fuzzer; onnx.reference refuses).
POSITIVE_LISTS: frozenset[tuple[str, str]] = frozenset({("Col2Im", "strides"), ("Col2Im", "dilations")})
#: op_type -> {input index: rank} for ops the importer expands into their function body before
#: `onnx-validate-attributes` checks input ranks: GroupNormalization's scale fed as [1, C] was
#: reshaped by the body into another grouping and answered wrong (the compile fuzzer; onnxruntime
#: and onnx.reference agree with each other).
FUNCTION_INPUT_RANKS: dict[str, dict[int, int]] = {"GroupNormalization": {1: 1, 2: 1}}
#: op_type -> its INT attribute naming the result's element type (standard domain).
TYPE_ATTRIBUTES: dict[str, str] = {"Cast": "to", "BitCast": "to", "EyeLike": "dtype"}
# The field holding each attribute kind's value, to infer the kind of old (IR < 2 style) protos
# that leave `type` unset.
_KIND_FIELDS = (
    ("f", AP.FLOAT), ("i", AP.INT), ("s", AP.STRING), ("t", AP.TENSOR), ("g", AP.GRAPH),
    ("sparse_tensor", AP.SPARSE_TENSOR), ("tp", AP.TYPE_PROTO),
)  # fmt: skip
_LIST_FIELDS = (
    ("floats", AP.FLOATS), ("ints", AP.INTS), ("strings", AP.STRINGS), ("tensors", AP.TENSORS),
    ("graphs", AP.GRAPHS), ("sparse_tensors", AP.SPARSE_TENSORS), ("type_protos", AP.TYPE_PROTOS),
)  # fmt: skip


def _norm(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _dname(domain: str) -> str:
    return _norm(domain) or "ai.onnx"


@lru_cache(maxsize=None)
def max_known_opset(domain: str) -> int | None:
    """The newest opset version the installed onnx defines for a domain (None: no schemas)."""
    d = _norm(domain)
    if not known_domain(d):
        return None
    row = onnx.helper.VERSION_TABLE[-1]  # (release, IR, ai.onnx, ai.onnx.ml, ai.onnx.training)
    by_table = {"": row[2], "ai.onnx.ml": row[3], "ai.onnx.training": row[4]}
    if d == "":
        return max(by_table[""], onnx.defs.onnx_opset_version())
    newest = max((max(schema_versions(op.op_type, d)) for op in _ops_of(d)), default=1)
    return max(by_table.get(d, 1), newest)


@lru_cache(maxsize=None)
def _ops_of(domain: str) -> list[OpInfo]:
    from onnxc.dialect.table import all_ops

    return [op for op in all_ops() if op.domain == domain]


@dataclass
class _Scope:
    """Names visible in a graph: its own definitions plus those of enclosing graphs."""

    own: set[str] = field(default_factory=set)
    outer: frozenset[str] = frozenset()

    def visible(self) -> set[str]:
        return self.own | set(self.outer)


@dataclass
class _Context:
    """Where a graph lives: its opsets, the enclosing function (if any), for messages its path."""

    opsets: dict[str, int]
    where: str  # "graph 'main'", "graph 'body' of node 'loop' ...", "function 'local.F'"
    function: onnx.FunctionProto | None = None


class Validator:
    """Collects problems of one model; `validate_model` is the entry point."""

    def __init__(self, model: onnx.ModelProto, config: ImportConfig, base_dir: Path | None = None) -> None:
        self.model = model
        self.config = config
        self.base_dir = base_dir
        self.problems: list[str] = []
        self.functions: dict[tuple[str, str, str], onnx.FunctionProto] = {}
        # id(node) -> the since_version the node binds to, for messages ("Relu-14").
        self._bound: dict[int, int] = {}

    def _version(self, schema: OpInfo, node: onnx.NodeProto) -> str:
        """The since_version the node binds to (the versioning rule), e.g. `14` for Relu at opset 18."""
        return str(self._bound.get(id(node), schema.since_version))

    def add(self, problem: str) -> None:
        self.problems.append(problem)

    # ------------------------------------------------------------------ model level
    def run(self) -> list[str]:
        m = self.model
        bad_strings = _non_utf8_fields(m, "model")
        for path, value in bad_strings[:20]:
            self.add(f"The field {path} is not valid UTF-8 ({value[:24]!r}); ONNX strings are UTF-8.")
        if bad_strings:
            # Names that are bytes instead of str would make every later message (and the
            # importer) trip over them; the model must be fixed first.
            if len(bad_strings) > 20:
                self.add(f"{len(bad_strings) - 20} more fields are not valid UTF-8.")
            return self.problems
        self._check_ir_version()
        opsets = self._check_opsets(m.opset_import, "The model")
        if not len(m.opset_import):
            self.add("The model imports no opset; the spec requires at least one opset_import.")
        for f in m.functions:
            key = (f.domain, f.name, f.overload)
            if key in self.functions:
                self.add(f"Model-local function '{f.domain}.{f.name}'{_overload(f)} is defined twice.")
            self.functions[key] = f
        if not m.HasField("graph"):
            self.add("The model has no graph.")
        else:
            name = m.graph.name or "main"
            self._check_graph(m.graph, _Context(opsets, f"graph '{name}'"), frozenset(), top=True)
        for f in m.functions:
            self._check_function(f)
        self._check_function_recursion()
        return self.problems

    def _check_ir_version(self) -> None:
        ir = self.model.ir_version
        if not self.model.HasField("ir_version") or ir == 0:
            self.add("The model has no ir_version; the spec requires one (3 or newer).")
        elif ir < MIN_IR_VERSION:
            self.add(f"The model has IR version {ir}; onnxc reads IR versions {MIN_IR_VERSION} to {onnx.IR_VERSION}.")
        elif ir > onnx.IR_VERSION and not self.config.allow_newer_opset:
            self.add(
                f"The model has IR version {ir}, newer than the newest the installed onnx defines ({onnx.IR_VERSION}); "
                "ImportConfig(allow_newer_opset=True) imports it anyway."
            )

    def _check_opsets(self, imports: Iterable[onnx.OperatorSetIdProto], owner: str) -> dict[str, int]:
        opsets: dict[str, int] = {}
        for entry in imports:
            d = _norm(entry.domain)
            if d in opsets:
                self.add(f"{owner} imports domain '{_dname(d)}' twice (versions {opsets[d]} and {entry.version}).")
                continue
            opsets[d] = entry.version
            if entry.version < 1:
                self.add(f"{owner} imports domain '{_dname(d)}' at opset {entry.version}; opset versions start at 1.")
                continue
            newest = max_known_opset(d)
            if newest is not None and entry.version > newest and not self.config.allow_newer_opset:
                self.add(
                    f"{owner} imports domain '{_dname(d)}' at opset {entry.version}, newer than the installed schemas "
                    f"(newest {newest}); ImportConfig(allow_newer_opset=True) binds to the newest known schemas instead."
                )
        return opsets

    # ------------------------------------------------------------------ graphs
    def _check_graph(self, g: onnx.GraphProto, ctx: _Context, outer: frozenset[str], top: bool = False) -> None:
        where = ctx.where
        own: dict[str, str] = {}  # name -> what defines it

        def define(name: str, what: str) -> None:
            if not name:
                return
            if name in own:
                self.add(f"In {where}, the name '{name}' is defined twice ({own[name]} and {what}); values must be assigned once.")
            else:
                own[name] = what

        for i, vi in enumerate(g.input):
            if not vi.name:
                self.add(f"In {where}, input #{i} has no name.")
            define(vi.name, f"graph input '{vi.name}'")
            self._check_value_info(vi, f"input '{vi.name}' of {where}", require_type=top)
        inputs = {vi.name for vi in g.input}
        initializer_names: set[str] = set()
        for t in g.initializer:
            label = f"initializer '{t.name}' of {where}"
            if not t.name:
                self.add(f"In {where}, an initializer has no name.")
            elif t.name in initializer_names:
                self.add(f"In {where}, the initializer '{t.name}' is given twice.")
            elif t.name not in inputs:  # an initializer named like an input is that input's default
                define(t.name, f"initializer '{t.name}'")
                if top and 0 < self.model.ir_version < 4:
                    self.add(f"In {where}, the initializer '{t.name}' is not a graph input, which IR version "
                             f"{self.model.ir_version} requires (initializers may stand alone from IR 4).")  # fmt: skip
            initializer_names.add(t.name)
            self._check_tensor(t, label)
        for sp in g.sparse_initializer:
            name = sp.values.name
            if not name:
                self.add(f"In {where}, a sparse initializer has no name.")
            elif name in initializer_names:
                self.add(f"In {where}, the sparse initializer '{name}' has the name of another initializer.")
            elif name not in inputs:
                define(name, f"sparse initializer '{name}'")
            initializer_names.add(name)
            self._check_sparse(sp, f"sparse initializer '{name}' of {where}")
        for i, node in enumerate(g.node):
            for out in node.output:
                if out in outer and out not in own:
                    self.add(f"{_node_label(node, i, ctx)} in {where} defines '{out}', a name already visible from an outer scope; "
                             "a subgraph must not reuse it.")  # fmt: skip
                define(out, f"output of {_short_label(node, i)}")
        visible = set(own) | set(outer)
        for i, node in enumerate(g.node):
            self._check_node(node, i, ctx, visible)
        self._check_type_attributes(g, ctx)
        self._check_quantize_types(g, ctx)
        self._check_attention_shapes(g, ctx)
        for vi in g.value_info:
            self._check_value_info(vi, f"value_info '{vi.name}' of {where}", require_type=False)
        for i, vi in enumerate(g.output):
            if not vi.name:
                self.add(f"In {where}, output #{i} has no name.")
            elif vi.name not in visible:
                self.add(f"In {where}, the graph output '{vi.name}' is not defined by any input, initializer or node.")
            self._check_value_info(vi, f"output '{vi.name}' of {where}", require_type=top)

    def _check_type_attributes(self, g: onnx.GraphProto, ctx: _Context) -> None:
        """The element-type attribute of Cast, BitCast and EyeLike (`TYPE_ATTRIBUTES`): a defined ONNX type
        (not UNDEFINED; BitCast not STRING), and the type the graph declares for the output
        (a graph output or value_info) equal to it. Why: the importer types a node's result from
        its declaration, so `Cast(to=INT64)` declared FLOAT16 computed a float16 cast, and
        `BitCast(to=0)` reinterpreted as the declared type (the compile fuzzer: answers where
        onnx.reference refuses)."""
        declared = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.value_info) + list(g.output)
                    if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type}  # fmt: skip
        for i, node in enumerate(g.node):
            attr_name = TYPE_ATTRIBUTES.get(node.op_type) if _norm(node.domain) == "" else None
            a = next((a for a in node.attribute if a.name == attr_name and not a.ref_attr_name), None)
            if a is None or _attr_kind(a) != AP.INT:
                continue
            label = _node_label(node, i, ctx)
            names = onnx.TensorProto.DataType.values()
            if a.i == onnx.TensorProto.UNDEFINED or a.i not in names or (node.op_type == "BitCast" and a.i == onnx.TensorProto.STRING):
                self.add(f"{label} in {ctx.where}: attribute '{a.name}' = {a.i} is not an element type {node.op_type} can produce.")
                continue
            out = node.output[0] if len(node.output) else ""
            if out in declared and declared[out] != a.i:
                want, got = onnx.TensorProto.DataType.Name(a.i), onnx.TensorProto.DataType.Name(declared[out]) if declared[out] in names else declared[out]
                self.add(f"{label} in {ctx.where}: attribute '{a.name}' = {want}, but the graph declares its output '{out}' as {got}.")

    def _check_quantize_types(self, g: onnx.GraphProto, ctx: _Context) -> None:
        """QuantizeLinear's and DequantizeLinear's result type against the graph's declaration.
        The spec fixes it: QuantizeLinear gives `output_dtype`, else the zero point's type, else
        uint8 (with both, they must agree); DequantizeLinear gives `output_dtype`, else the
        scale's type. Why: the importer types a node's result from its declaration and the
        lowering quantizes to that type, so a model declaring int16 for a QuantizeLinear whose
        spec result is uint8 got int16 values (-5 where onnx.reference saturates to 0: the compile
        fuzzer, seed 102 case 38574, `output_dtype` = 0 on a blocked quantization)."""
        elem: dict[str, int] = {t.name: t.data_type for t in g.initializer}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type:
                elem.setdefault(vi.name, vi.type.tensor_type.elem_type)
        declared = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.value_info) + list(g.output)
                    if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type}  # fmt: skip

        def type_name(t: int) -> str:
            return onnx.TensorProto.DataType.Name(t) if t in onnx.TensorProto.DataType.values() else str(t)

        for i, node in enumerate(g.node):
            if _norm(node.domain) != "" or node.op_type not in ("QuantizeLinear", "DequantizeLinear") or not node.output:
                continue
            a = next((a for a in node.attribute if a.name == "output_dtype" and not a.ref_attr_name and _attr_kind(a) == AP.INT), None)
            out_dtype = a.i if a is not None else 0
            label = _node_label(node, i, ctx)
            # QuantizeLinear: the zero point (input 2) decides without output_dtype; DequantizeLinear: the scale (input 1).
            j = 2 if node.op_type == "QuantizeLinear" else 1
            source = node.input[j] if j < len(node.input) and node.input[j] else ""
            source_type = elem.get(source, 0) if source else 0
            if out_dtype and source_type and node.op_type == "QuantizeLinear" and out_dtype != source_type:
                self.add(f"{label} in {ctx.where}: attribute 'output_dtype' = {type_name(out_dtype)}, but the zero point "
                         f"'{source}' is {type_name(source_type)}; the two must agree.")  # fmt: skip
                continue
            if out_dtype:
                want, why = out_dtype, f"attribute 'output_dtype' = {type_name(out_dtype)}"
            elif source_type:
                role = "zero point" if node.op_type == "QuantizeLinear" else "scale"
                want, why = source_type, f"its {role} '{source}' is {type_name(source_type)} (no 'output_dtype')"
            elif node.op_type == "QuantizeLinear" and not source:
                want, why = onnx.TensorProto.UINT8, "without 'output_dtype' or a zero point it is UINT8"
            else:
                continue  # the deciding input's type is not declared: onnx's inference types the result
            out = node.output[0]
            if out in declared and declared[out] != want:
                self.add(f"{label} in {ctx.where}: its result is {type_name(want)} ({why}), but the graph declares "
                         f"its output '{out}' as {type_name(declared[out])}.")  # fmt: skip

    def _check_attention_shapes(self, g: onnx.GraphProto, ctx: _Context) -> None:
        """Transpose's perm against its input's declared rank (see below), and Attention's inputs, where the graph declares their shapes: Q, K and V all 3-D or all
        4-D, and a static attn_mask last dim no longer than a static total sequence length
        (past + kv; the spec pads a shorter one). Why here: the importer expands Attention into
        its function body before `onnx-validate-attributes` sees it, and the body's Reshapes and
        Pad accepted a 2-D V (read as if 3-D) and cropped a mask longer than the keys (the
        compile fuzzer: answers where onnx.reference and onnxruntime refuse)."""
        shapes: dict[str, list[int | None]] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            tt = vi.type.tensor_type if vi.type.WhichOneof("value") == "tensor_type" else None
            if tt is not None and tt.HasField("shape"):
                shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        for t in g.initializer:
            shapes[t.name] = list(t.dims)
        for i, node in enumerate(g.node):
            for j, want in FUNCTION_INPUT_RANKS.get(node.op_type, {}).items() if _norm(node.domain) == "" else ():
                name = node.input[j] if j < len(node.input) else ""
                if name in shapes and len(shapes[name]) != want:
                    self.add(f"{_node_label(node, i, ctx)} in {ctx.where}: input '{name}' has rank {len(shapes[name])}; "
                             f"{node.op_type} takes a {want}-D tensor there.")  # fmt: skip
            if node.op_type == "SwiGLU" and _norm(node.domain) == "" and len(node.input) >= 2 and node.input[0] in shapes and node.input[1] in shapes:
                # The spec: A and B of identical shapes, no broadcasting; its function body
                # (which the importer expands) is a broadcasting Mul, and answered (1, 2, 4) for
                # a (1, 2, 4) gate and a (2, 4) value (the compile fuzzer; both references refuse).
                sa, sb = shapes[node.input[0]], shapes[node.input[1]]
                if len(sa) != len(sb) or any(a is not None and b is not None and a != b for a, b in zip(sa, sb)):
                    self.add(f"{_node_label(node, i, ctx)} in {ctx.where}: inputs '{node.input[0]}' {_dims_text(sa)} and '{node.input[1]}' "
                             f"{_dims_text(sb)} differ; SwiGLU takes A and B of identical shapes (no broadcasting).")  # fmt: skip
            if node.op_type == "Resize" and _norm(node.domain) == "":
                # scales/sizes hold one entry per axis: with more axes than entries the lowering read
                # past them (the compile fuzzer: axes [2, 3, 1] for 2 sizes, answered by a guess).
                axes = next((list(a.ints) for a in node.attribute if a.name == "axes" and _attr_kind(a) == AP.INTS), None)
                for j in (2, 3):
                    sh = shapes.get(node.input[j]) if j < len(node.input) and node.input[j] else None
                    if axes is not None and sh is not None and len(sh) == 1 and sh[0] is not None and sh[0] != len(axes):
                        self.add(f"{_node_label(node, i, ctx)} in {ctx.where}: input '{node.input[j]}' has {sh[0]} entries "
                                 f"for the {len(axes)} axes {axes}.")  # fmt: skip
            if node.op_type == "Transpose" and _norm(node.domain) == "" and node.input and node.input[0] in shapes:
                # Checked on the model too: a Transpose whose declared result type equals its input's
                # is dropped as a no-op before `onnx-validate-attributes` sees its perm ([0, 1] on a
                # rank-3 input with the output declared (2, 3, 4) was answered; the compile fuzzer).
                # Only there: elsewhere onnx-validate-attributes reports it with the model's other problems.
                perm = next((list(a.ints) for a in node.attribute if a.name == "perm" and _attr_kind(a) == AP.INTS), None)
                r = len(shapes[node.input[0]])
                # An identity perm of another length is dropped as a no-op too ([0, 1, 2] on a
                # rank-2 input answered it unchanged where onnx.reference refuses; seed 212 case 3664).
                unchanged = (bool(node.output) and shapes.get(node.output[0]) == shapes[node.input[0]]) or (
                    perm is not None and perm == list(range(len(perm))))
                if unchanged and perm is not None and sorted(perm) != list(range(r)):
                    self.add(f"{_node_label(node, i, ctx)} in {ctx.where}: attribute 'perm' = {perm} is not a permutation of "
                             f"0..{r - 1} (input '{node.input[0]}' has rank {r}).")  # fmt: skip
                continue
            if node.op_type != "Attention" or _norm(node.domain) != "":
                continue
            ins = list(node.input) + [""] * 7
            q, k, v, mask, past_key = (shapes.get(ins[j]) if ins[j] else None for j in (0, 1, 2, 3, 4))
            label = _node_label(node, i, ctx)
            heads = {a.name: a.i for a in node.attribute if a.name in ("q_num_heads", "kv_num_heads") and _attr_kind(a) == AP.INT}
            qh, kvh = heads.get("q_num_heads"), heads.get("kv_num_heads")
            if (qh is not None and qh <= 0) or (kvh is not None and kvh <= 0):
                self.add(f"{label} in {ctx.where}: q_num_heads and kv_num_heads must be positive ({qh}, {kvh}).")
                continue
            if qh is not None and kvh is not None and qh % kvh:
                # The body's grouped-query reshape (q_num_heads // kv_num_heads groups) then has 0 or
                # a wrong number of groups: with symbolic dims its code wrote past a buffer
                # (heap corruption; the compile fuzzer, kv_num_heads mutated from 3 to 6).
                self.add(f"{label} in {ctx.where}: q_num_heads ({qh}) must be a multiple of kv_num_heads ({kvh}).")
                continue
            ranks = {name: len(sh) for name, sh in (("Q", q), ("K", k), ("V", v)) if sh is not None}
            bad = {n: r for n, r in ranks.items() if r not in (3, 4)}
            if bad:
                self.add(f"{label} in {ctx.where}: " + ", ".join(f"{n} has rank {r}" for n, r in bad.items()) + "; Attention takes 3-D or 4-D Q, K, V.")
            elif len(set(ranks.values())) > 1:
                self.add(f"{label} in {ctx.where}: Q, K and V must have the same rank (" + ", ".join(f"{n} {r}-D" for n, r in ranks.items()) + ").")
            elif k is not None and mask is not None and mask:
                kv = k[1] if len(k) == 3 else k[2]
                past = 0 if not ins[4] else (past_key[2] if past_key is not None and len(past_key) == 4 else None)
                if kv is not None and past is not None and mask[-1] is not None and mask[-1] > kv + past:
                    self.add(f"{label} in {ctx.where}: attn_mask's last dim {mask[-1]} is longer than the total sequence length {kv + past}.")

    def _check_value_info(self, vi: onnx.ValueInfoProto, label: str, require_type: bool) -> None:
        if not vi.HasField("type") or vi.type.WhichOneof("value") is None:
            if require_type:
                self.add(f"The {label} has no type; the main graph's inputs and outputs must be typed.")
            return
        self._check_type(vi.type, label, require_elem=require_type)

    def _check_type(self, tp: onnx.TypeProto, label: str, require_elem: bool) -> None:
        kind = tp.WhichOneof("value")
        if kind in ("tensor_type", "sparse_tensor_type"):
            tt = getattr(tp, kind)
            if tt.elem_type == 0:
                if require_elem:
                    self.add(f"The {label} has a tensor type without an element type.")
            elif tt.elem_type not in BY_ONNX:
                self.add(f"The {label} has element type {tt.elem_type}, which is not an ONNX tensor element type.")
            if tt.HasField("shape"):
                total = 1
                for j, d in enumerate(tt.shape.dim):
                    if d.HasField("dim_value"):
                        if d.dim_value < 0:
                            self.add(f"The {label} has a negative dimension {d.dim_value} at axis {j}.")
                        else:
                            total *= d.dim_value
                if total > MAX_ELEMENTS:
                    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
                    self.add(f"The {label} has shape {dims} with {total} elements, more than 2^40: the dims are corrupt.")
        elif kind == "sequence_type":
            self._check_type(tp.sequence_type.elem_type, label, require_elem)
        elif kind == "optional_type":
            self._check_type(tp.optional_type.elem_type, label, require_elem)
        elif kind == "map_type":
            if tp.map_type.key_type not in BY_ONNX or tp.map_type.key_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
                self.add(f"The {label} is a map with key type {tp.map_type.key_type}; keys must be integers or strings.")
            self._check_type(tp.map_type.value_type, label, require_elem)

    def _check_tensor(self, t: onnx.TensorProto, label: str) -> None:
        from onnxc.importers.external_data import external_extent, uses_external_data
        from onnxc.importers.tensors import check_tensor, packed_size

        try:
            _, _, count = check_tensor(t)
            if uses_external_data(t) and self.base_dir is not None:
                _, _, length = external_extent(t, self.base_dir)
                need = packed_size(t.data_type, count)
                if length != need:
                    self.add(f"The {label} has {length} bytes of external data, but its dims {list(t.dims)} need {need}.")
        except ImportError_ as e:
            self.problems += [f"The {label} is invalid: {p[0].lower()}{p[1:]}" for p in e.problems]
            return
        if t.data_type == onnx.TensorProto.STRING:
            for s in t.string_data:
                if not _utf8(s):
                    self.add(f"The {label} holds a string that is not UTF-8 ({bytes(s[:20])!r}); ONNX strings are UTF-8.")
                    break

    def _check_sparse(self, sp: onnx.SparseTensorProto, label: str) -> None:
        dims = list(sp.dims)
        if not dims or any(d < 0 for d in dims):
            self.add(f"The {label} has invalid dims {dims}; a sparse tensor needs rank >= 1 and dims >= 0.")
        self._check_tensor(sp.values, label + " (values)")
        self._check_tensor(sp.indices, label + " (indices)")
        if sp.indices.data_type != onnx.TensorProto.INT64:
            self.add(f"The {label} has indices of element type {sp.indices.data_type}; they must be int64.")

    # ------------------------------------------------------------------ nodes
    def _check_node(self, node: onnx.NodeProto, index: int, ctx: _Context, visible: set[str]) -> None:
        label = _node_label(node, index, ctx)
        where = ctx.where
        if not node.op_type:
            self.add(f"{label} in {where} has no op_type.")
        for name in node.input:
            if name and name not in visible:
                self.add(f"{label} in {where} uses input '{name}', which no input, initializer, node output or outer scope defines.")
        seen_outputs: set[str] = set()
        for name in node.output:
            if name and name in seen_outputs:
                self.add(f"{label} in {where} names the output '{name}' twice.")
            seen_outputs.add(name)
        d = _norm(node.domain)
        schema: OpInfo | None = None
        fn = self._local_function(node)
        if d not in ctx.opsets and fn is None:
            self.add(f"{label} in {where} uses domain '{_dname(d)}', which the {'function' if ctx.function else 'model'} does not import.")
        elif fn is not None:
            self._check_call(node, label, where, fn)
        elif known_domain(d):
            opset = ctx.opsets[d]
            if self.config.allow_newer_opset:
                opset = min(opset, max_known_opset(d) or opset)
            schema = lookup(node.op_type, d, opset)
            bound = bound_version(node.op_type, d, opset)
            if bound is not None:
                self._bound[id(node)] = bound
            if schema is None:
                versions = schema_versions(node.op_type, d)
                if versions:
                    self.add(f"{label} in {where}: {node.op_type} has no version at opset {opset} of domain "
                             f"'{_dname(d)}' (its first version is {versions[0]}).")  # fmt: skip
                else:
                    self.add(f"{label} in {where}: '{node.op_type}' is not an operator of domain '{_dname(d)}'.")
            else:
                self._check_arity(node, label, where, schema)
        self._check_attributes(node, label, where, ctx, schema, visible)

    def _local_function(self, node: onnx.NodeProto) -> onnx.FunctionProto | None:
        return self.functions.get((node.domain, node.op_type, node.overload))

    def _check_call(self, node: onnx.NodeProto, label: str, where: str, fn: onnx.FunctionProto) -> None:
        if len(node.input) > len(fn.input):
            self.add(f"{label} in {where} has {len(node.input)} inputs; function '{fn.name}' takes at most {len(fn.input)}.")
        if len(node.output) > len(fn.output):
            self.add(f"{label} in {where} has {len(node.output)} outputs; function '{fn.name}' has {len(fn.output)}.")

    def _check_arity(self, node: onnx.NodeProto, label: str, where: str, schema: OpInfo) -> None:
        for kind, actual, formals in (("input", list(node.input), schema.inputs), ("output", list(node.output), schema.outputs)):
            variadic = bool(formals) and formals[-1].option == VARIADIC
            fixed = len(formals) - 1 if variadic else len(formals)
            minimum = 0
            for j, p in enumerate(formals[:fixed]):
                if p.option == SINGLE:
                    minimum = j + 1
            if variadic:
                minimum = fixed + formals[-1].min_arity
            maximum = None if variadic else len(formals)
            if len(actual) < minimum or (maximum is not None and len(actual) > maximum):
                want = f"{minimum} or more" if maximum is None else (f"{minimum}" if minimum == maximum else f"{minimum} to {maximum}")
                self.add(f"{label} in {where} has {len(actual)} {kind}s; {schema.op_type}-{self._version(schema, node)} takes {want}.")
                continue
            for j, p in enumerate(formals[:fixed]):
                if p.option == SINGLE and j < len(actual) and not actual[j]:
                    self.add(f"{label} in {where} leaves the required {kind} '{p.onnx_name}' (#{j}) empty.")

    def _check_attributes(
        self, node: onnx.NodeProto, label: str, where: str, ctx: _Context, schema: OpInfo | None, visible: set[str]
    ) -> None:
        seen: set[str] = set()
        for a in node.attribute:
            if not a.name:
                self.add(f"{label} in {where} has an attribute without a name.")
                continue
            if a.name in seen:
                self.add(f"{label} in {where} gives the attribute '{a.name}' twice.")
            seen.add(a.name)
            kind = _attr_kind(a)
            if a.ref_attr_name:
                if ctx.function is None:
                    self.add(f"{label} in {where}: attribute '{a.name}' refers to '{a.ref_attr_name}', but references "
                             "are only allowed inside functions.")  # fmt: skip
                else:
                    names = set(ctx.function.attribute) | {p.name for p in ctx.function.attribute_proto}
                    if a.ref_attr_name not in names:
                        self.add(f"{label} in {where}: attribute '{a.name}' refers to '{a.ref_attr_name}', which function "
                                 f"'{ctx.function.name}' does not declare.")  # fmt: skip
            elif kind is None:
                self.add(f"{label} in {where}: attribute '{a.name}' has no type and no value.")
                continue
            if schema is not None:
                spec = schema.attr(a.name)
                if spec is None:
                    self.add(f"{label} in {where} has the attribute '{a.name}', which {schema.op_type}-{self._version(schema, node)} "
                             "does not define.")  # fmt: skip
                elif kind is not None and _KIND_NAMES.get(kind) != spec.kind:
                    self.add(f"{label} in {where}: attribute '{a.name}' is {_KIND_NAMES.get(kind, kind)}, but "
                             f"{schema.op_type}-{self._version(schema, node)} wants {spec.kind}.")  # fmt: skip
                elif kind == AP.INT and not a.ref_attr_name:
                    choices = INT_CHOICES.get((schema.op_type, a.name), (0, 1) if a.name in FLAGS else None)
                    if choices is not None and a.i not in choices:
                        self.add(f"{label} in {where}: attribute '{a.name}' = {a.i} is not one of "
                                 f"{', '.join(map(str, choices))}.")  # fmt: skip
                    if (schema.op_type, a.name) in NON_NEGATIVE and a.i < 0:
                        self.add(f"{label} in {where}: attribute '{a.name}' = {a.i} must not be negative.")
                    if (schema.op_type, a.name) == ("Split", "num_outputs") and a.i != len(node.output):
                        # onnx's shape inference indexed past a vector (SIGABRT; the compile fuzzer).
                        self.add(f"{label} in {where}: attribute 'num_outputs' = {a.i}, but the node has {len(node.output)} outputs.")
                elif kind == AP.STRING and not a.ref_attr_name:
                    words = STRING_CHOICES.get((schema.op_type, a.name, self._version(schema, node)))
                    if words is not None and a.s.decode("utf-8", "replace") not in words:
                        self.add(f"{label} in {where}: attribute '{a.name}' = '{a.s.decode('utf-8', 'replace')}' is not one of "
                                 f"{', '.join(words)} ({schema.op_type}-{self._version(schema, node)}).")  # fmt: skip
                elif kind == AP.INTS and not a.ref_attr_name and (schema.op_type, a.name) in POSITIVE_LISTS and any(x < 1 for x in a.ints):
                    self.add(f"{label} in {where}: attribute '{a.name}' = {list(a.ints)} must hold positive values.")
            if a.ref_attr_name:
                continue
            self._check_attribute_value(a, kind, label, where, ctx, visible)
        if schema is not None:
            for spec in schema.attributes:
                if spec.required and spec.name not in seen:
                    self.add(f"{label} in {where} lacks the required attribute '{spec.name}' ({spec.kind}).")

    def _check_attribute_value(
        self, a: onnx.AttributeProto, kind: int | None, label: str, where: str, ctx: _Context, visible: set[str]
    ) -> None:
        what = f"attribute '{a.name}' of {label} in {where}"
        if kind == AP.STRING and not _utf8(a.s):
            self.add(f"The {what} is not UTF-8; ONNX strings are UTF-8.")
        if kind == AP.STRINGS and not all(_utf8(s) for s in a.strings):
            self.add(f"The {what} holds a string that is not UTF-8; ONNX strings are UTF-8.")
        if kind == AP.TENSOR:
            self._check_tensor(a.t, what)
        if kind == AP.TENSORS:
            for t in a.tensors:
                self._check_tensor(t, what)
        if kind == AP.SPARSE_TENSOR:
            self._check_sparse(a.sparse_tensor, what)
        if kind == AP.SPARSE_TENSORS:
            for sp in a.sparse_tensors:
                self._check_sparse(sp, what)
        if kind == AP.TYPE_PROTO:
            self._check_type(a.tp, what, require_elem=False)
        if kind in (AP.GRAPH, AP.GRAPHS):
            graphs = [a.g] if kind == AP.GRAPH else list(a.graphs)
            for k, g in enumerate(graphs):
                sub = f"graph '{g.name or a.name}' (attribute '{a.name}' of {label})"
                if kind == AP.GRAPHS:
                    sub = f"graph #{k} '{g.name}' (attribute '{a.name}' of {label})"
                self._check_graph(g, _Context(ctx.opsets, sub, ctx.function), frozenset(visible))

    # ------------------------------------------------------------------ functions
    def _check_function(self, f: onnx.FunctionProto) -> None:
        where = f"function '{f.domain}.{f.name}'{_overload(f)}"
        if not f.name:
            self.add("A model-local function has no name.")
        if not f.domain:
            self.add(f"The {where} has no domain; model-local functions need one.")
        opsets = self._check_opsets(f.opset_import, f"The {where}")
        if not f.opset_import:
            opsets = {_norm(e.domain): e.version for e in self.model.opset_import}
        ctx = _Context(opsets, where, f)
        own: dict[str, str] = {}
        for name in f.input:
            if name in own:
                self.add(f"The {where} names the input '{name}' twice.")
            own[name] = "input"
        for i, node in enumerate(f.node):
            for out in node.output:
                if out and out in own:
                    self.add(f"In {where}, the name '{out}' is defined twice ({own[out]} and {_short_label(node, i)}).")
                elif out:
                    own[out] = f"output of {_short_label(node, i)}"
        visible = set(own)
        for i, node in enumerate(f.node):
            self._check_node(node, i, ctx, visible)
        for name in f.output:
            if name not in visible:
                self.add(f"The {where} returns '{name}', which no input or node of the function defines.")

    def _check_function_recursion(self) -> None:
        calls: dict[tuple[str, str, str], set[tuple[str, str, str]]] = {}
        for key, f in self.functions.items():
            calls[key] = {k for k in ((n.domain, n.op_type, n.overload) for n in _all_nodes(f.node)) if k in self.functions}
        state: dict[tuple[str, str, str], int] = {}

        def visit(k: tuple[str, str, str], path: list[tuple[str, str, str]]) -> None:
            state[k] = 1
            for c in sorted(calls[k]):
                if state.get(c) == 1:
                    cycle = path[path.index(c) :] + [c] if c in path else [k, c]
                    self.add("Model-local functions call each other recursively: " + " -> ".join(f"{d}.{n}" for d, n, _ in cycle) + ".")
                elif c not in state:
                    visit(c, path + [c])
            state[k] = 2

        for k in sorted(calls):
            if k not in state:
                visit(k, [k])


def _non_utf8_fields(msg: Message, path: str) -> list[tuple[str, bytes]]:
    """(path, value) of every protobuf `string` field holding invalid UTF-8.

    protobuf's Python runtime hands such proto2 fields back as `bytes` instead of `str`; bytes
    fields (raw_data, string_data, attribute strings) are data and checked where they are used.
    """
    out: list[tuple[str, bytes]] = []
    if isinstance(msg, onnx.TensorProto):
        # ListFields would hand back raw_data too (a copy of possibly gigabytes): look only at
        # the tensor's string fields.
        for name in ("name", "doc_string"):
            if isinstance(getattr(msg, name), bytes):
                out.append((f"{path}.{name}", getattr(msg, name)))
        for field_name in ("external_data", "metadata_props"):
            for k, entry in enumerate(getattr(msg, field_name)):
                out += _non_utf8_fields(entry, f"{path}.{field_name}[{k}]")
        return out
    for fd, value in msg.ListFields():
        if fd.type == FieldDescriptor.TYPE_STRING:
            values = value if _is_repeated(fd) else [value]
            for k, v in enumerate(values):
                if isinstance(v, bytes):
                    out.append((f"{path}.{fd.name}" + (f"[{k}]" if _is_repeated(fd) else ""), v))
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            if _is_repeated(fd):
                for k, v in enumerate(value):
                    out += _non_utf8_fields(v, f"{path}.{fd.name}[{k}]")
            else:
                out += _non_utf8_fields(value, f"{path}.{fd.name}")
    return out


def _is_repeated(fd: FieldDescriptor) -> bool:
    if hasattr(fd, "is_repeated"):  # protobuf >= 5.28 (upb descriptors have no `label`)
        return bool(fd.is_repeated)
    return fd.label == FieldDescriptor.LABEL_REPEATED  # pragma: no cover - older protobuf


def _all_nodes(nodes: Iterable[onnx.NodeProto]) -> Iterable[onnx.NodeProto]:
    for n in nodes:
        yield n
        for a in n.attribute:
            if a.type == AP.GRAPH or a.HasField("g"):
                yield from _all_nodes(a.g.node)
            for g in a.graphs:
                yield from _all_nodes(g.node)


def _attr_kind(a: onnx.AttributeProto) -> int | None:
    """The attribute's kind: its `type`, or (old protos) the one field that holds a value."""
    if a.type != AP.UNDEFINED:
        return a.type
    for name, kind in _KIND_FIELDS:
        if a.HasField(name):
            return kind
    for name, kind in _LIST_FIELDS:
        if len(getattr(a, name)):
            return kind
    return None


def _utf8(b: bytes) -> bool:
    try:
        bytes(b).decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _overload(f: onnx.FunctionProto) -> str:
    return f" (overload '{f.overload}')" if f.overload else ""





def _short_label(node: onnx.NodeProto, index: int) -> str:
    return f"node '{node.name}'" if node.name else f"node #{index} ({node.op_type})"


def _dims_text(dims: list[int | None]) -> str:
    """A declared shape for a message: [2, ?, 4] (? for a dynamic dim)."""
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _node_label(node: onnx.NodeProto, index: int, ctx: _Context) -> str:
    d = _norm(node.domain)
    opset = ctx.opsets.get(d)
    who = f"Node '{node.name}'" if node.name else f"Node #{index}"
    version = f", opset {opset}" if opset is not None else ""
    return f"{who} ({node.op_type or '?'}, domain {_dname(d)}{version})"


def validate_model(model: onnx.ModelProto, config: ImportConfig, base_dir: Path | None = None) -> list[str]:
    """Every problem of `model`, each a complete sentence naming the model element; [] if valid.

    With `base_dir` (the model file's folder) external data is checked too: locations that leave
    the folder, missing files, offsets and lengths past the end, sizes that do not fit the dims.
    """
    validator = Validator(model, config, base_dir)
    try:
        problems = validator.run()
    except RecursionError:
        # Only an in-memory model can nest that deep: protobuf refuses to parse past 100 levels.
        problems = validator.problems + ["The model nests subgraphs too deeply to be checked (Python's recursion limit)."]
    if len(problems) > MAX_PROBLEMS:
        problems = problems[:MAX_PROBLEMS] + [f"{len(problems) - MAX_PROBLEMS} more problems are not listed."]
    return problems


# ---------------------------------------------------------------------------------------------- order


def _free_names(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph uses but does not define (captured from outer scopes)."""
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    defined |= {s.values.name for s in graph.sparse_initializer}
    used: set[str] = set()
    for n in graph.node:
        used.update(i for i in n.input if i)
        used |= _node_captures(n)
        defined.update(o for o in n.output if o)
    used.update(vi.name for vi in graph.output)
    return used - defined


def _node_captures(node: onnx.NodeProto) -> set[str]:
    names: set[str] = set()
    for a in node.attribute:
        if a.HasField("g"):
            names |= _free_names(a.g)
        for g in a.graphs:
            names |= _free_names(g)
    return names


def topological_order(graph: onnx.GraphProto, outer_names: set[str]) -> list[int]:
    """Node indices of `graph` in an order where every value is defined before it is used.

    Stable: the given order is kept when it is already valid, and otherwise nodes move only as far
    as their inputs require (among ready nodes the one given first goes first). Inputs captured by
    subgraphs count as uses of the node that owns the subgraph. Names no node produces (graph
    inputs, initializers, outer scopes, undefined names the validator reports) impose no order.
    Raises `ImportError_` naming the nodes of a cycle.
    """
    producer: dict[str, int] = {}
    for i, n in enumerate(graph.node):
        for o in n.output:
            if o and o not in producer:
                producer[o] = i
    available = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    available |= {s.values.name for s in graph.sparse_initializer}
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in graph.node]
    for i, n in enumerate(graph.node):
        names = {x for x in n.input if x} | _node_captures(n)
        d = {producer[x] for x in names if x in producer and x not in available and producer[x] != i}
        deps.append(d)
        for p in d:
            users[p].append(i)
    remaining = [len(d) for d in deps]
    ready = [i for i, r in enumerate(remaining) if r == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            remaining[u] -= 1
            if remaining[u] == 0:
                heapq.heappush(ready, u)
    if len(order) == len(graph.node):
        return order
    stuck = {i for i, r in enumerate(remaining) if r > 0}
    cycle = _find_cycle(stuck, deps)
    names = " -> ".join(_short_label(graph.node[i], i) + f" [{graph.node[i].op_type}]" for i in cycle)
    gname = graph.name or "main"
    raise ImportError_(
        f"the nodes of graph '{gname}' cannot be ordered",
        [f"In graph '{gname}', these nodes depend on each other in a cycle: {names}."],
    )


def _find_cycle(stuck: set[int], deps: list[set[int]]) -> list[int]:
    """One cycle among `stuck` nodes (each has a stuck dependency), as a closed path."""
    start = min(stuck)
    path: list[int] = []
    pos: dict[int, int] = {}
    i = start
    while i not in pos:
        pos[i] = len(path)
        path.append(i)
        i = min(d for d in deps[i] if d in stuck)
    return path[pos[i] :] + [i]


def _has_dynamic_input(graph: onnx.GraphProto) -> bool:
    inits = {t.name for t in graph.initializer}
    for vi in graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        if any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
            return True
    return False


def loosen_declared_dims(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every declared static dim that follows a dynamic input dim made symbolic again.

    Why (issue 11): the importer merges the types declared in `value_info` and the graph outputs
    with onnx's inference, and a declared static dim wins over an inferred symbolic one. A model
    whose input is `[n, 3]` and whose output (or an intermediate value) is declared `[5, 3]` was
    compiled for 5 rows and returned a (5, 3) result for any n: a silent wrong answer. Here onnx's
    inference runs on a copy without the declared intermediate and output types; where it proves a
    declared static dim equal to a symbolic dim of the graph's inputs, that dim cannot be known
    when compiling, so the inferred (symbolic) dim replaces the declared one: the code is compiled
    for any n and returns what the ops compute (as `onnx.reference` and onnxruntime do).

    Only models with a dynamic input dim are looked at (with static inputs every dim onnx can
    infer is static, and a static contradiction is refused by the lowering). A declared static
    dim that depends on run-time *data* (a Reshape target fed as an input) is still trusted: the
    CPU code has no channel yet to report a run-time size that contradicts it (documented in
    docs/robustness.md). Returns `model` itself when nothing changes.
    """
    g = model.graph
    if not _has_dynamic_input(g):
        return model
    input_syms = {
        d.dim_param
        for vi in g.input
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
        for d in vi.type.tensor_type.shape.dim
        if d.HasField("dim_param")
    }
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for i, vi in enumerate(probe.graph.input):  # unnamed dynamic dims get a name to be traced by
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for j, d in enumerate(vi.type.tensor_type.shape.dim):
                if not d.HasField("dim_value") and not d.HasField("dim_param"):
                    d.dim_param = f"onnxc_input{i}_dim{j}"
                    input_syms.add(d.dim_param)
    del probe.graph.value_info[:]
    for vi in probe.graph.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx's inference raises InferenceError, ValidationError, RuntimeError...:
        # without it nothing can be proven, and the importer's own inference reports what is wrong
        return model
    found = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    out: onnx.ModelProto | None = None
    for field_name in ("value_info", "output"):
        for k, vi in enumerate(getattr(g, field_name)):
            inf = found.get(vi.name)
            if inf is None or not vi.type.HasField("tensor_type") or not inf.type.HasField("tensor_type"):
                continue
            dt, it = vi.type.tensor_type, inf.type.tensor_type
            if not dt.HasField("shape") or not it.HasField("shape") or len(dt.shape.dim) != len(it.shape.dim):
                continue
            loose = [
                j
                for j, (d, i) in enumerate(zip(dt.shape.dim, it.shape.dim))
                if d.HasField("dim_value") and i.HasField("dim_param") and i.dim_param in input_syms
            ]
            if not loose:
                continue
            if out is None:
                out = onnx.ModelProto()
                out.CopyFrom(model)
            dims = getattr(out.graph, field_name)[k].type.tensor_type.shape.dim
            for j in loose:
                dims[j].dim_param = it.shape.dim[j].dim_param  # clears dim_value (a oneof)
    return model if out is None else out


def _static_dim(vi: onnx.ValueInfoProto | None, axis: int) -> bool:
    if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return False
    dims = vi.type.tensor_type.shape.dim
    return -len(dims) <= axis < len(dims) and dims[axis].HasField("dim_value")


def drop_known_inference_errors(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (after onnx's shape inference) without inferred dims onnx is known to get wrong.

    Why (issue 11: a wrong inferred dim is compiled in and gives a wrong answer): onnx 1.23's
    inference of Attention gives `qk_matmul_output` a last dim of 0 (`dim_value` of a symbolic
    dim) when the key's sequence length is not static; compiled for 0 columns, the model returned
    wrong values for every output (the compile fuzzer's `symbolic` mutation). Such a dim is cleared
    (unknown), so the lowering computes it at run time. Returns `model` itself when nothing changes.
    """
    g = model.graph
    typed = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}
    fixes: list[tuple[str, int]] = []
    for node in g.node:
        if node.op_type == "Attention" and node.domain in ("", "ai.onnx") and len(node.output) > 3 and node.output[3]:
            key = typed.get(node.input[1]) if len(node.input) > 1 else None
            if _static_dim(typed.get(node.output[3]), -1) and not _static_dim(key, -2):
                fixes.append((node.output[3], -1))
        # ... and `Y` a last dim of 0 when the value's last dim is not static (Y's last dim is a
        # multiple of it, so a static one can only be wrong): the run-time check refused the model.
        if node.op_type == "Attention" and node.domain in ("", "ai.onnx") and len(node.input) > 2 and node.output[0]:
            if _static_dim(typed.get(node.output[0]), -1) and not _static_dim(typed.get(node.input[2]), -1):
                fixes.append((node.output[0], -1))
        # ... and any output a static 0 when an input has a dim that is not static (qk_matmul_output
        # 2x3x4x0 with only V symbolic: refused, or, reaching the CPU tiling, an MLIR assertion).
        if node.op_type == "Attention" and node.domain in ("", "ai.onnx"):
            ins = [typed.get(n) for n in node.input if n]
            if any(vi is None or not vi.type.tensor_type.HasField("shape") or any(not _static_dim(vi, j) for j in range(len(vi.type.tensor_type.shape.dim)))
                   for vi in ins):  # fmt: skip
                for name in node.output:
                    vi = typed.get(name) if name else None
                    if vi is not None and vi.type.tensor_type.HasField("shape"):
                        fixes.extend((name, j) for j, d in enumerate(vi.type.tensor_type.shape.dim) if d.HasField("dim_value") and d.dim_value == 0)
    if not fixes:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in list(out.graph.value_info) + list(out.graph.output):
        for name, axis in fixes:
            if vi.name == name:
                vi.type.tensor_type.shape.dim[axis].Clear()
    return out
