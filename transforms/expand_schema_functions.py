"""The `expand-schema-functions` pass: replace ONNX ops whose schema defines a function body by the
ops of that body.

Many ONNX operators (Celu, HardSwish, LayerNormalization, Softmax-13, MeanVarianceNormalization,
Gelu, ...) are defined by the spec as a function of simpler operators; a backend that lowers the
simple operators then supports these for free. The bodies come from onnx itself: the schema's
`get_function_with_opset_version` (a fixed body, whose `ref_attr_name` references are bound to the
node's attributes or the schema's defaults) or `get_context_dependent_function_with_opset_version`
(a body that onnx builds for the node's attributes and input types). The body is imported with the
importer's own machinery (types from onnx shape inference where it works, the schema otherwise) in
front of the op, and its outputs replace the op's results; where a body's output type is less (or
differently) refined than the op's result type, an `onnx.identity` carries the op's type.

Version safety: a body is written for an opset (its `opset_import`); the expanded ops are written
back under the model's opset. When some body node would bind to a different schema version under the
model's opset than under the body's, the body is first converted to the model's opset by onnx's
version converter; if that fails, the op is left alone rather than risking a changed meaning.
An op's subgraphs go to onnx's body builder as GRAPH attributes (FlexAttention's score_mod: the
builder inlines them); a body that still holds a subgraph, ops inside functions with their own
opsets, and ops whose schemas have no body are left alone. A body that imports only its own domain
while using ai.onnx ops (FlexAttention's) binds those at the model's ai.onnx opset. Location of an expanded op: `loc("<op name>/<body node>"("<OpType>"))`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx
from mlir import ir

from onnxc.dialect.names import ONNX_DIALECTS
from onnxc.dialect.opinfo import OpInfo
from onnxc.dialect.table import bound_version, op_info
from onnxc.importers.config import ImportConfig
from onnxc.importers.errors import ModelImportError
from onnxc.importers.exporter import ModelExporter
from onnxc.importers.onnx_importer import ModelImporter, Scope
from onnxc.importers.proto import location_label, node_label, node_location, opset_entries, opsets, substitute, type_proto
from onnxc.transforms.onnx_validate_attributes import describe
from onnxc.transforms.pass_base import ModulePass, PassFailure

# Rounds of `unlowered_only` expansion: a body's ops may have bodies of their own.
_MAX_NESTED_EXPANSIONS = 4


def _module_opsets(module: ir.Operation) -> dict[str, int]:
    if "onnx.opset_import" not in module.attributes:
        return {"": onnx.defs.onnx_opset_version()}
    return opsets(opset_entries(module.attributes["onnx.opset_import"]))


def _schema(info: OpInfo, opset: int) -> Any:
    try:
        return onnx.defs.get_schema(info.op_type, opset, info.domain)
    except onnx.defs.SchemaError:  # no schema of the op at this opset
        return None


def function_body(info: OpInfo, opset: int, node: onnx.NodeProto, input_types: list[onnx.TypeProto]) -> onnx.FunctionProto | None:
    """The schema function body of `node` (an op of `info`) at `opset`, or None if it has none."""
    schema = _schema(info, opset)
    if schema is None:
        return None
    data = b""
    try:
        if schema.has_function:
            versions = [v for v in schema.function_opset_versions if v <= opset]
            if versions:
                data = schema.get_function_with_opset_version(max(versions))
        elif schema.has_context_dependent_function:
            versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
            if versions:
                data = schema.get_context_dependent_function_with_opset_version(
                    max(versions), node.SerializeToString(), [t.SerializeToString() for t in input_types]
                )
    except Exception:  # noqa: BLE001 - onnx's C++ refuses with RuntimeError, SchemaError or its
        # InferenceError (e.g. a context-dependent body needing unknown input types): no body then
        return None
    if not data:
        return None
    fp = onnx.FunctionProto()
    fp.ParseFromString(data)
    return fp if len(fp.node) else None


def _defaults(info: OpInfo, opset: int) -> dict[str, onnx.AttributeProto]:
    schema = _schema(info, opset)
    out: dict[str, onnx.AttributeProto] = {}
    if schema is None:
        return out
    for name, a in schema.attributes.items():
        d = a.default_value
        if d is not None and d.type != onnx.AttributeProto.UNDEFINED:
            bound = onnx.AttributeProto()
            bound.CopyFrom(d)
            bound.name = name
            out[name] = bound
    return out


def _versions_agree(fp: onnx.FunctionProto, model_opsets: dict[str, int]) -> bool:
    body_opsets = opsets(fp.opset_import)
    for n in fp.node:
        d = "" if n.domain == "ai.onnx" else n.domain
        if d not in model_opsets or d not in body_opsets:
            return False
        if bound_version(n.op_type, d, body_opsets[d]) != bound_version(n.op_type, d, model_opsets[d]):
            return False
        for a in n.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                return False  # bodies with subgraphs: not checked node by node, left alone
    return True


def _convert_body(fp: onnx.FunctionProto, model_opsets: dict[str, int], input_types: list[onnx.TypeProto]) -> onnx.FunctionProto | None:
    """The body rewritten for the model's ai.onnx opset by onnx's version converter (which knows
    each operator's adapters), or None when it cannot (other domains, no adapter)."""
    body_opsets = opsets(fp.opset_import)
    if set(body_opsets) - {""} or "" not in model_opsets:
        return None
    graph = onnx.GraphProto(name="body")
    for name, tp in zip(fp.input, input_types):
        vi = graph.input.add()
        vi.name = name
        if tp.WhichOneof("value") is not None:
            vi.type.CopyFrom(tp)
    produced = {o for n in fp.node for o in n.output}
    graph.output.extend(onnx.ValueInfoProto(name=n) for n in fp.output if n in produced)
    graph.node.extend(fp.node)
    model = onnx.helper.make_model(graph, opset_imports=list(fp.opset_import), ir_version=onnx.IR_VERSION)
    try:
        converted = onnx.version_converter.convert_version(model, model_opsets[""])
    except Exception:  # noqa: BLE001 - the C++ converter raises RuntimeError, ValueError or its own
        # ConvertError for a body it cannot convert: the op is then left as it is, not expanded
        return None
    out = onnx.FunctionProto()
    out.CopyFrom(fp)
    del out.node[:]
    out.node.extend(converted.graph.node)
    del out.opset_import[:]
    out.opset_import.extend(converted.opset_import)
    return out


def _refusal(info: OpInfo, operands: list[ir.Value]) -> str | None:
    """Why `info`'s op with these operands is refused rather than expanded, or None.

    Attention's `attn_mask` admits integer types (its type constraint U), but the spec gives a
    meaning only to a boolean mask (True: take part) and a float mask (added to the scores). Its
    function body adds an integer mask to the scores, while onnx.reference and onnxruntime read it
    as boolean: two answers for one model, so onnxc refuses rather than pick one (compile fuzzer,
    seed 412 case 97651: an INT8 mask answered by the body's sum)."""
    if info.domain == "" and info.op_type == "Attention" and len(operands) > 3:
        t = operands[3].type
        if isinstance(t, ir.ShapedType) and isinstance(t.element_type, ir.IntegerType) and t.element_type.width != 1:
            return (f"attn_mask of integer type {t.element_type} has no meaning the spec defines (a boolean mask selects, "
                    "a float mask is added; the function body adds an integer one, onnxruntime reads it as boolean): "
                    "Cast it to bool or to the scores' float type")
    return None


class _Expander:
    def __init__(self, module: ir.Operation, only: tuple[str, ...], config: ImportConfig) -> None:
        self.module = module
        self.only = set(only)
        self.opsets = _module_opsets(module)
        self.exporter = ModelExporter(module)
        model = onnx.ModelProto(ir_version=onnx.IR_VERSION)
        model.opset_import.extend(opset_entries(module.attributes["onnx.opset_import"]) if "onnx.opset_import" in module.attributes else [])
        self.importer = ModelImporter(model, None, config, module.context)
        self.importer.opsets = dict(self.opsets)
        self.importer.module = ir.Module.create(ir.Location.unknown())  # never used: bodies of schema functions call no model function
        self.config = config
        # Ops refused by `_refusal`: reported together once every candidate has been seen.
        self.refused: list[tuple[ir.Location, str]] = []

    def candidates(self) -> list[ir.Operation]:
        found: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            name = op.name
            if name == "func.func" and "onnx.opset_import" in op.attributes and "onnx.function" in op.attributes:
                if opsets(opset_entries(op.attributes["onnx.opset_import"])) != self.opsets:
                    return ir.WalkResult.SKIP  # a function with its own opsets: its ops bind differently
            if name.split(".")[0] in ONNX_DIALECTS and name not in ("onnx.none", "onnx.custom"):
                info = op_info(name)
                if info is not None and (not self.only or info.op_type in self.only):
                    if not any(len(r.blocks) for r in op.regions):  # an omitted graph: an empty region
                        found.append(op)
                    elif self._has_body(info):
                        # A subgraph a schema function may take (`expand` exports it as a GRAPH
                        # attribute: FlexAttention's score_mod). Its nested ops are not candidates:
                        # expanding the op erases them (they come back in the imported body, for
                        # the next round). Control flow (If/Loop/Scan) has no body: visited inside.
                        found.append(op)
                        return ir.WalkResult.SKIP
            return ir.WalkResult.ADVANCE

        self.module.walk(visit, ir.WalkOrder.PRE_ORDER)
        return found

    def _has_body(self, info: OpInfo) -> bool:
        opset = self.opsets.get(info.domain)
        schema = None if opset is None else _schema(info, opset)
        return schema is not None and bool(schema.has_function or schema.has_context_dependent_function)

    def expand(self, op: ir.Operation) -> bool:
        info = op_info(op.name)
        assert info is not None
        opset = self.opsets.get(info.domain)
        if opset is None:
            return False
        operands = list(op.operands)
        why = _refusal(info, operands)
        if why is not None:
            self.refused.append((op.location, f"{describe(op, info)}: {why}."))
            return False
        node = onnx.NodeProto(op_type=info.op_type, domain=info.domain)
        input_types: list[onnx.TypeProto] = []
        for i, v in enumerate(operands):
            if isinstance(v.type, ir.NoneType):
                node.input.append("")
                input_types.append(onnx.TypeProto())
            else:
                node.input.append(f"in{i}")
                input_types.append(type_proto(v.type))
        while node.input and node.input[-1] == "":
            node.input.pop()
            input_types.pop()
        node.output.extend(f"out{i}" if not isinstance(r.type, ir.NoneType) else "" for i, r in enumerate(op.results))
        try:
            for key, value in op.attributes.items():
                if "." not in key:
                    node.attribute.append(self.exporter._attribute(info, key, value, op))
            # Given subgraphs travel as GRAPH attributes: a context-dependent builder inlines them
            # (FlexAttention's score_mod/prob_mod); a body that keeps them is left alone below.
            for region, gname in zip(op.regions, info.regions):
                if region.blocks:
                    node.attribute.append(onnx.helper.make_attribute(gname, self.exporter.region_graph(region, gname)))
        except ModelImportError:
            return False
        fp = function_body(info, opset, node, input_types)
        if fp is None:
            return False
        if "" not in opsets(fp.opset_import) and "" in self.opsets:
            # Some context-dependent builders (FlexAttention's) import only their own domain
            # while using ai.onnx ops; those bind at the model's opset, as onnx's own expanded
            # test models (`*_expanded_ver<model opset>`) bind them.
            fp.opset_import.add(domain="", version=self.opsets[""])
        binding = _defaults(info, opset)
        binding.update({a.name: a for a in node.attribute})
        present = {fp.input[i] for i, name in enumerate(node.input) if i < len(fp.input) and name}
        omitted = {n for n in fp.input if n not in present}
        # Bind the attributes first: the version converter below does not keep ref_attr_name.
        bound = [substitute(n, binding, omitted) for n in fp.node]
        del fp.node[:]
        fp.node.extend(bound)
        if not _versions_agree(fp, self.opsets):
            fp = _convert_body(fp, self.opsets, [input_types[i] if i < len(input_types) else onnx.TypeProto() for i in range(len(fp.input))])
            if fp is None or not _versions_agree(fp, self.opsets):
                return False
        label, _ = location_label(op.location)
        graph = onnx.GraphProto(name=f"{info.op_type}_body")
        for i, name in enumerate(fp.input):
            if name in present:
                vi = graph.input.add()
                vi.name = name
                vi.type.CopyFrom(input_types[i])
        # Only the outputs the op uses: context-dependent bodies leave out the ones the node omits.
        wanted = [i for i, r in enumerate(op.results) if not isinstance(r.type, ir.NoneType) and i < len(fp.output)]
        graph.output.extend(onnx.ValueInfoProto(name=fp.output[i]) for i in wanted)
        for n in fp.node:
            body_node = onnx.NodeProto()
            body_node.CopyFrom(n)
            body_node.name = f"{label or info.op_type}/{node_label(n)}"
            graph.node.append(body_node)
        typed = self.importer._infer_function(graph, self.opsets)
        scope = Scope()
        for i, name in enumerate(fp.input):
            if name in present:
                scope.values[name] = operands[i]
        with ir.InsertionPoint(op), op.location:
            try:
                results = self.importer._import_body(typed, scope, self.opsets)
            except ModelImportError as exc:
                raise PassFailure("expand-schema-functions", [(op.location, f"cannot expand {info.op_type}: {exc}")]) from None
            for i, new in zip(wanted, results):
                r = op.results[i]
                if new.type != r.type:
                    ident = self.importer_identity(new, r.type, label or info.op_type)
                    new = ident
                r.replace_all_uses_with(new)
        op.erase()
        return True

    def importer_identity(self, value: ir.Value, t: ir.Type, label: str) -> ir.Value:
        from onnxc.dialect.builder import onnx_op

        return onnx_op("Identity", [value], [t], version=self.opsets.get(""), loc=node_location(f"{label}/type", "Identity")).results[0]


def expand_schema_functions(module: ir.Operation, only: tuple[str, ...] = (), config: ImportConfig | None = None) -> int:
    """Expand every ONNX op with a schema function body (or those whose op types are in `only`);
    returns how many were expanded."""
    module = module.operation
    with module.context:
        expander = _Expander(module, only, config or ImportConfig(validate=False, warn_custom_ops=False))
        count = 0
        for op in expander.candidates():
            if expander.expand(op):
                count += 1
        if expander.refused:
            raise PassFailure("expand-schema-functions", expander.refused)
        return count


@dataclass(frozen=True)
class ExpandSchemaFunctionsPass(ModulePass):
    """Replace ONNX ops whose schemas define function bodies by the body's ops."""

    name = "expand-schema-functions"
    # Only ops of these ONNX op types (comma-separated); empty: every op with a body.
    ops: tuple[str, ...] = ()
    # Only ops that convert-onnx-to-linalg has no pattern for, so the CPU pipeline lowers any op
    # with a schema function through its body while direct lowerings (faster) stay preferred.
    # Bodies may hold such ops themselves, so expansion repeats (bodies are not recursive).
    unlowered_only: bool = False

    def run(self, module: ir.Operation) -> None:
        if not self.unlowered_only:
            expand_schema_functions(module, self.ops)
            return
        from onnxc.dialect import all_ops
        from onnxc.transforms.lowering import lowered_op_types

        lowered = {op_type for _, op_type in lowered_op_types()}
        wanted = {o.op_type for o in all_ops() if o.has_function} - lowered
        if self.ops:
            wanted &= set(self.ops)
        if not wanted:  # an empty `only` would mean every op
            return
        for _ in range(_MAX_NESTED_EXPANSIONS):
            if not expand_schema_functions(module, tuple(sorted(wanted))):
                break
