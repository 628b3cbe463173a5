"""An ONNX-dialect module -> `onnx.ModelProto`: the inverse of `onnx_importer`.

It reads the conventions the importer writes (see `onnx_importer`'s docstring): module attributes
become the model fields, the `onnx.main` function the graph, private functions with `onnx.function`
FunctionProtos, `onnx.custom` ops nodes of their own domain, regions graph attributes. Node names
come from op locations (`loc("name"("OpType"))`); value names from `onnx.name` argument/result
attributes, block-argument locations, and otherwise from the producing node's name (the first output
of a node the importer found unnamed keeps its original name, because that node's location carries
it). `onnx.constant` ops located at `loc("x"("initializer"))` become initializers; every other
intermediate value gets a value_info with its type, so types survive a later re-import even where
shape inference cannot recover them.

Attribute values are written by the schema's attribute kind (`onnxc.dialect.attributes.from_mlir`
spellings); tensors through `onnxc.importers.tensors.attribute_to_tensor`. Anything that is not ONNX
(an op of another dialect after partial lowering) is refused with an `ModelImportError` naming it.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable

import numpy as np
import onnx
from mlir import ir
from mlir.dialects import func

from onnxc.dialect.names import ONNX_DIALECTS
from onnxc.dialect import attributes as attr_mod
from onnxc.dialect import types as T
from onnxc.dialect.builder import is_subgraph_terminator
from onnxc.dialect.opinfo import OpInfo
from onnxc.dialect.table import op_info
from onnxc.importers.errors import ModelImportError
from onnxc.importers.tensors import is_sparse_elements
from onnxc.importers.proto import INITIALIZER_KIND, SPARSE_INITIALIZER_KIND, location_label, opset_entries, type_proto, unb64

AP = onnx.AttributeProto
_KIND_TYPES = {name: AP.AttributeType.Value(name) for name in AP.AttributeType.keys()}


def export_model(module: ir.Module | ir.Operation) -> onnx.ModelProto:
    """Write an imported (and possibly transformed, still ONNX-dialect) module back as a model."""
    op = module.operation if isinstance(module, ir.Module) else module.operation
    with op.context:
        return ModelExporter(op).run()


# ------------------------------------------------------------------------------------ helpers


def _str(attrs: Any, key: str, default: str = "") -> str:
    return ir.StringAttr(attrs[key]).value if key in attrs else default


def _int(attrs: Any, key: str, default: int = 0) -> int:
    return ir.IntegerAttr(attrs[key]).value if key in attrs else default


def _props(attr: ir.Attribute) -> list[onnx.StringStringEntryProto]:
    out = []
    if isinstance(attr, ir.DictAttr):
        for named in attr:
            out.append(onnx.StringStringEntryProto(key=named.name, value=ir.StringAttr(named.attr).value))
    else:
        for pair in ir.ArrayAttr(attr):
            k, v = list(ir.ArrayAttr(pair))
            out.append(onnx.StringStringEntryProto(key=ir.StringAttr(k).value, value=ir.StringAttr(v).value))
    return out


def _signature_attrs(f: ir.Operation) -> tuple[ir.Block, list[dict[str, ir.Attribute]], list[dict[str, ir.Attribute]]]:
    """A function's entry block and its argument and result attribute dicts (ONNX names,
    dim_params, defaults), one per argument; results may have none."""
    a = f.attributes
    block = f.regions[0].blocks[0]
    arg_attrs = [_dict(x) for x in ir.ArrayAttr(a["arg_attrs"])] if "arg_attrs" in a else [{} for _ in block.arguments]
    res_attrs = [_dict(x) for x in ir.ArrayAttr(a["res_attrs"])] if "res_attrs" in a else []
    return block, arg_attrs, res_attrs


def _dict(attr: ir.Attribute | None) -> dict[str, ir.Attribute]:
    if attr is None:
        return {}
    return {named.name: named.attr for named in ir.DictAttr(attr)}


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


class _Namer:
    """Unique value names across a graph and its subgraphs (ONNX forbids shadowing outer names)."""

    def __init__(self) -> None:
        self.taken: set[str] = {""}

    def claim(self, name: str) -> str:
        """`name` if free, else `name_1`, `name_2`, ..."""
        if name not in self.taken:
            self.taken.add(name)
            return name
        for i in itertools.count(1):
            candidate = f"{name}_{i}"
            if candidate not in self.taken:
                self.taken.add(candidate)
                return candidate
        raise AssertionError("unreachable")


# -------------------------------------------------------------------------------- the exporter


class ModelExporter:
    def __init__(self, module_op: ir.Operation) -> None:
        self.module_op = module_op
        self.funcs: dict[str, ir.Operation] = {}
        for op in module_op.regions[0].blocks[0].operations:
            if op.operation.name == "func.func":
                self.funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op.operation
        self.tensors: Any = None

    def _tensors(self) -> Any:
        if self.tensors is None:
            from onnxc.importers import tensors

            self.tensors = tensors
        return self.tensors

    def fail(self, problem: str) -> ModelImportError:
        return ModelImportError("cannot export the module as an ONNX model", [problem])

    def run(self) -> onnx.ModelProto:
        a = self.module_op.attributes
        m = onnx.ModelProto()
        m.ir_version = _int(a, "onnx.ir_version", onnx.IR_VERSION)
        if "onnx.opset_import" in a:
            m.opset_import.extend(opset_entries(a["onnx.opset_import"]))
        else:
            m.opset_import.append(onnx.helper.make_opsetid("", onnx.defs.onnx_opset_version()))
        for field in ("producer_name", "producer_version", "domain", "doc_string"):
            if f"onnx.{field}" in a:
                setattr(m, field, _str(a, f"onnx.{field}"))
        if "onnx.model_version" in a:
            m.model_version = _int(a, "onnx.model_version")
        if "onnx.metadata_props" in a:
            m.metadata_props.extend(_props(a["onnx.metadata_props"]))
        if "onnx.training_info" in a:
            for s in ir.ArrayAttr(_dict(a["onnx.training_info"])["protos"]):
                t = onnx.TrainingInfoProto()
                t.ParseFromString(unb64(ir.StringAttr(s).value))
                m.training_info.append(t)
        if "onnx.configuration" in a:
            for entry in ir.ArrayAttr(a["onnx.configuration"]):
                d = _dict(entry)
                c = m.configuration.add()
                c.name = ir.StringAttr(d["name"]).value
                c.num_devices = ir.IntegerAttr(d["num_devices"]).value
                c.device.extend(ir.StringAttr(x).value for x in ir.ArrayAttr(d["device"]))
        main = self._main()
        self._export_main(main, m.graph)
        for f in self._functions_callees_first(main):
            m.functions.append(self._export_function(f))
        if "onnx.unused_functions" in a:
            for s in ir.ArrayAttr(a["onnx.unused_functions"]):
                fp = onnx.FunctionProto()
                fp.ParseFromString(unb64(ir.StringAttr(s).value))
                m.functions.append(fp)
        return m

    def _functions_callees_first(self, main: ir.Operation) -> list[ir.Operation]:
        """The ONNX functions, each after the functions it calls (consumers such as onnx.reference
        resolve calls against the functions defined before), otherwise in module order."""
        order: list[ir.Operation] = []
        state: dict[str, int] = {}

        def callees(f: ir.Operation) -> list[str]:
            found: list[str] = []

            def visit(op: ir.Operation) -> ir.WalkResult:
                if op.name == "func.call":
                    found.append(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
                return ir.WalkResult.ADVANCE

            f.walk(visit, ir.WalkOrder.PRE_ORDER)
            return found

        def visit_function(name: str) -> None:
            f = self.funcs.get(name)
            if f is None or f is main or "onnx.function" not in f.attributes or state.get(name) == 2:
                return
            if state.get(name) == 1:
                raise self.fail(f"function @{name} calls itself (ONNX functions cannot recurse)")
            state[name] = 1
            for callee in callees(f):
                visit_function(callee)
            state[name] = 2
            order.append(f)

        for name in self.funcs:
            visit_function(name)
        return order

    def _main(self) -> ir.Operation:
        a = self.module_op.attributes
        if "onnx.main" in a:
            name = ir.FlatSymbolRefAttr(a["onnx.main"]).value
            if name not in self.funcs:
                raise self.fail(f"onnx.main names @{name}, which is not a function of the module")
            return self.funcs[name]
        public = [f for f in self.funcs.values() if "sym_visibility" not in f.attributes or _str(f.attributes, "sym_visibility") == "public"]
        if len(public) != 1:
            raise self.fail(f"the module has {len(public)} public functions and no onnx.main attribute naming the graph")
        return public[0]

    # ----------------------------------------------------------------- graphs
    def _export_main(self, f: ir.Operation, g: onnx.GraphProto) -> None:
        a = f.attributes
        g.name = _str(a, "onnx.name", ir.StringAttr(a["sym_name"]).value)
        if "onnx.doc_string" in a:
            g.doc_string = _str(a, "onnx.doc_string")
        if "onnx.graph_extras" in a:
            extras = onnx.GraphProto()
            extras.ParseFromString(unb64(_str(a, "onnx.graph_extras")))
            g.quantization_annotation.extend(extras.quantization_annotation)
            g.metadata_props.extend(extras.metadata_props)
        block, arg_attrs, res_attrs = _signature_attrs(f)
        namer = _Namer()
        env: dict[ir.Value, str] = {}
        for i, arg in enumerate(block.arguments):
            attrs = arg_attrs[i] if i < len(arg_attrs) else {}
            name = namer.claim(self._arg_name(arg, attrs, f"input_{i}"))
            env[arg] = name
            g.input.append(self._value_info(name, arg.type, attrs))
            if "onnx.default" in attrs:
                g.initializer.append(self._tensor(attrs["onnx.default"], name))
        self._export_block(block, g, namer, env, res_attrs, in_function=False)

    def _arg_name(self, arg: ir.Value, attrs: dict[str, ir.Attribute], fallback: str) -> str:
        if "onnx.name" in attrs:
            return ir.StringAttr(attrs["onnx.name"]).value
        name, _ = location_label(arg.location)
        return name or fallback

    def _value_info(self, name: str, t: ir.Type, attrs: dict[str, ir.Attribute] | None = None) -> onnx.ValueInfoProto:
        vi = onnx.ValueInfoProto(name=name)
        try:
            vi.type.CopyFrom(type_proto(t))
        except T.UnsupportedTypeError as exc:
            raise self.fail(f"value '{name}' has type {t}: {exc}") from None
        attrs = attrs or {}
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else (vi.type.sparse_tensor_type if vi.type.HasField("sparse_tensor_type") else None)
        if tt is not None and tt.HasField("shape"):
            if "onnx.dim_params" in attrs:
                params = [ir.StringAttr(x).value for x in ir.ArrayAttr(attrs["onnx.dim_params"])]
                for dim, p in zip(tt.shape.dim, params):
                    if p and not dim.HasField("dim_value"):
                        dim.dim_param = p
            if "onnx.denotations" in attrs:
                for dim, d in zip(tt.shape.dim, ir.ArrayAttr(attrs["onnx.denotations"])):
                    if ir.StringAttr(d).value:
                        dim.denotation = ir.StringAttr(d).value
        if "onnx.type_denotation" in attrs:
            vi.type.denotation = _str(attrs, "onnx.type_denotation")
        if "onnx.doc_string" in attrs:
            vi.doc_string = _str(attrs, "onnx.doc_string")
        return vi

    def _export_block(self, block: ir.Block, g: Any, namer: _Namer, env: dict[ir.Value, str],
                      res_attrs: list[dict[str, ir.Attribute]] | None, *, in_function: bool) -> list[str]:  # fmt: skip
        """Write the ops of `block` into `g` (a GraphProto or FunctionProto); returns the output names."""
        ops = list(block.operations)
        last = ops[-1] if ops else None
        # A function body ends with func.return, a subgraph region with the subgraph terminator.
        terminator = last if last is not None and (isinstance(last.operation.opview, func.ReturnOp) or is_subgraph_terminator(last)) else None
        returned = list(terminator.operands) if terminator is not None else []
        body = ops[:-1] if terminator is not None else ops
        # Graph outputs keep their names: name the producing op's result after the output where possible.
        wanted: dict[ir.Value, str] = {}
        out_names: list[str | None] = []
        for i, v in enumerate(returned):
            want = ir.StringAttr(res_attrs[i]["onnx.name"]).value if res_attrs and i < len(res_attrs) and "onnx.name" in res_attrs[i] else None
            owner = v.owner
            local = not isinstance(owner, ir.Block) and owner.operation.block == block
            if want is not None and local and v not in wanted and want not in namer.taken:
                label, kind = location_label(owner.operation.location)
                if kind not in (INITIALIZER_KIND, SPARSE_INITIALIZER_KIND) or label == want:
                    wanted[v] = namer.claim(want)
                    out_names.append(wanted[v])
                    continue
            out_names.append(want)
        nodes: list[onnx.NodeProto] = []
        value_infos: list[onnx.ValueInfoProto] = []
        for op in body:
            self._export_op(op.operation, g, nodes, value_infos, namer, env, wanted, in_function)
        g.node.extend(nodes)
        # Outputs: identity nodes where the output's name cannot be the value's own name
        names: list[str] = []
        for i, v in enumerate(returned):
            src = env.get(v)
            if src is None:
                raise self.fail(f"returned value #{i} has no ONNX name (it is defined by an op that was not exported)")
            want = out_names[i]
            if want is None:
                if src in names:  # the same value returned twice needs a second name
                    want = src
                else:
                    names.append(src)
                    continue
            if want == src:
                names.append(src)
                continue
            new = namer.claim(want)
            node = onnx.helper.make_node("Identity", [src], [new], name=new)
            g.node.append(node)
            names.append(new)
        attrs_per_out = res_attrs or []
        if isinstance(g, onnx.GraphProto):
            for i, (name, v) in enumerate(zip(names, returned)):
                g.output.append(self._value_info(name, v.type, attrs_per_out[i] if i < len(attrs_per_out) else None))
            outs = set(names)
            g.value_info.extend(vi for vi in value_infos if vi.name not in outs)
        else:
            g.output.extend(names)
            outs = set(names)
            g.value_info.extend(vi for vi in value_infos if vi.name not in outs)
        return names

    def _export_op(self, op: ir.Operation, g: Any, nodes: list[onnx.NodeProto], value_infos: list[onnx.ValueInfoProto],
                   namer: _Namer, env: dict[ir.Value, str], wanted: dict[ir.Value, str], in_function: bool) -> None:  # fmt: skip
        name = op.name
        label, kind = location_label(op.location)
        if name == "onnx.none":
            env[op.results[0]] = ""
            return
        if name == "onnx.constant" and kind in (INITIALIZER_KIND, SPARSE_INITIALIZER_KIND) and not in_function:
            res = op.results[0]
            vname = wanted.get(res) or namer.claim(label or "initializer")
            env[res] = vname
            if kind == SPARSE_INITIALIZER_KIND and "sparse_value" in op.attributes:
                sp = self._sparse(op.attributes["sparse_value"], vname)
                g.sparse_initializer.append(sp)
            else:
                g.initializer.append(self._tensor(op.attributes["value"], vname))
            return
        node = onnx.NodeProto()
        node.name = label
        if name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            f = self.funcs.get(callee)
            if f is None or "onnx.function" not in f.attributes:
                raise self.fail(f"{op.location}: call of @{callee}, which is not an imported ONNX function")
            node.op_type = _str(f.attributes, "onnx.function")
            node.domain = _str(f.attributes, "onnx.domain")
            if "onnx.overload" in f.attributes:
                node.overload = _str(f.attributes, "onnx.overload")
        elif name == "onnx.custom":
            node.op_type = _str(op.attributes, "op_type")
            node.domain = _str(op.attributes, "domain")
            for key, value in attr_mod.onnx_attributes(op).items():
                if key in ("domain", "op_type"):
                    continue
                node.attribute.append(self._custom_attribute(key, value))
        elif name.split(".")[0] in ONNX_DIALECTS:
            info = op_info(name)
            if info is None:
                raise self.fail(f"{op.location}: '{name}' is not an op of the ONNX dialect")
            node.op_type = info.op_type
            node.domain = info.domain
            for key, value in attr_mod.onnx_attributes(op).items():
                node.attribute.append(self._attribute(info, key, value, op))
            for region, gname in zip(op.regions, info.regions):
                if not region.blocks:
                    continue
                sub = self._export_region(region, f"{label}_{gname}" if label else gname, namer, env, in_function)
                node.attribute.append(onnx.helper.make_attribute(gname, sub))
        else:
            raise self.fail(f"{op.location}: '{name}' is not an ONNX op (lowered IR cannot be exported)")
        if "onnx.node_extras" in op.attributes:
            extras = onnx.NodeProto()
            extras.ParseFromString(unb64(_str(op.attributes, "onnx.node_extras")))
            node.MergeFrom(extras)
        for v in op.operands:
            src = env.get(v)
            if src is None:
                raise self.fail(f"{op.location}: operand of '{name}' has no ONNX name (defined by an op not exported)")
            node.input.append(src)
        # trailing omitted inputs are dropped: ONNX spells them by leaving them out
        while len(node.input) and node.input[-1] == "":
            node.input.pop()
        results = list(op.results)
        for i, r in enumerate(results):
            if isinstance(r.type, ir.NoneType):
                env[r] = ""
                node.output.append("")
                continue
            vname = wanted.get(r)
            if vname is None:
                base = label or node.op_type
                vname = namer.claim(base if i == 0 else f"{base}_{i}")
                value_infos.append(self._value_info(vname, r.type))
            env[r] = vname
            node.output.append(vname)
        while len(node.output) and node.output[-1] == "":
            node.output.pop()
        nodes.append(node)

    def region_graph(self, region: ir.Region, gname: str) -> onnx.GraphProto:
        """One op's subgraph region as a standalone GraphProto (for passes that rebuild the op as
        a NodeProto, e.g. to ask onnx for its function body). A region using values from outside
        it cannot stand alone: that raises `ModelImportError`."""
        env: dict[ir.Value, str] = {}
        try:
            return self._export_region(region, gname, _Namer(), env, in_function=False)
        except KeyError as exc:  # an operand defined outside the region has no name in `env`
            raise self.fail(f"subgraph '{gname}' uses a value from outside it") from exc

    def _export_region(self, region: ir.Region, gname: str, namer: _Namer, env: dict[ir.Value, str], in_function: bool) -> onnx.GraphProto:
        block = region.blocks[0]
        sub = onnx.GraphProto(name=gname)
        for i, arg in enumerate(block.arguments):
            name = namer.claim(self._arg_name(arg, {}, f"{gname}_in{i}"))
            env[arg] = name
            sub.input.append(self._value_info(name, arg.type))
        self._export_block(block, sub, namer, env, None, in_function=in_function)
        return sub

    # -------------------------------------------------------------- functions
    def _export_function(self, f: ir.Operation) -> onnx.FunctionProto:
        a = f.attributes
        fp = onnx.FunctionProto()
        fp.name = _str(a, "onnx.function")
        fp.domain = _str(a, "onnx.domain")
        if "onnx.overload" in a:
            fp.overload = _str(a, "onnx.overload")
        if "onnx.opset_import" in a:
            fp.opset_import.extend(opset_entries(a["onnx.opset_import"]))
        if "onnx.doc_string" in a:
            fp.doc_string = _str(a, "onnx.doc_string")
        if "onnx.function_extras" in a:
            extras = onnx.FunctionProto()
            extras.ParseFromString(unb64(_str(a, "onnx.function_extras")))
            fp.MergeFrom(extras)
        # The body was specialized with the call's attributes; they are written back as the
        # attribute parameters' defaults, so a re-import binds exactly the same values.
        for key, value in _dict(a.get("onnx.attributes") if "onnx.attributes" in a else None).items():
            fp.attribute_proto.append(self._binding(key, value))
        block, arg_attrs, res_attrs = _signature_attrs(f)
        namer = _Namer()
        env: dict[ir.Value, str] = {}
        for i, arg in enumerate(block.arguments):
            name = namer.claim(self._arg_name(arg, arg_attrs[i] if i < len(arg_attrs) else {}, f"input_{i}"))
            env[arg] = name
            fp.input.append(name)
        self._export_block(block, fp, namer, env, res_attrs, in_function=True)
        return fp

    def _binding(self, key: str, value: ir.Attribute) -> onnx.AttributeProto:
        return self._custom_attribute(key, value)

    # ------------------------------------------------------------- attributes
    def _tensor(self, attr: ir.Attribute, name: str) -> onnx.TensorProto:
        try:
            return self._tensors().attribute_to_tensor(attr, name)
        except ModelImportError:
            raise
        except Exception as exc:  # noqa: BLE001 - numpy/onnx refusing a value (ValueError, TypeError,
            # OverflowError...) becomes the exporter's error naming the tensor
            raise self.fail(f"tensor '{name}' ({str(attr)[:80]}): {exc}") from None

    def _sparse(self, attr: ir.Attribute, name: str) -> onnx.SparseTensorProto:
        tensors = self._tensors()
        convert = getattr(tensors, "attribute_to_sparse_tensor", None)
        if convert is None:
            raise self.fail(f"sparse tensor '{name}': no sparse tensor export available")
        sp = convert(attr, name)
        return sp

    def _attribute(self, info: OpInfo, name: str, attr: ir.Attribute, op: ir.Operation) -> onnx.AttributeProto:
        spec = info.attr(name)
        if spec is None:
            raise self.fail(f"{op.location}: {info.op_type} has no attribute '{name}'")
        return self._make_attribute(name, spec.kind, attr)

    def _custom_attribute(self, name: str, attr: ir.Attribute) -> onnx.AttributeProto:
        if isinstance(attr, ir.DictAttr):
            d = _dict(attr)
            if "onnx_graph" in d or "onnx_graphs" in d:
                graphs = []
                for s in ir.ArrayAttr(d.get("onnx_graph") or d["onnx_graphs"]):
                    g = onnx.GraphProto()
                    g.ParseFromString(unb64(ir.StringAttr(s).value))
                    graphs.append(g)
                if "onnx_graph" in d:
                    return onnx.helper.make_attribute(name, graphs[0])
                return onnx.AttributeProto(name=name, type=AP.GRAPHS, graphs=graphs)
        kind = attr_mod.kind_of(attr)
        if kind == "EMPTY_LIST":
            kind = "INTS"
        if kind == "TENSORS" and any(is_sparse_elements(x) for x in ir.ArrayAttr(attr)):
            kind = "SPARSE_TENSORS"
        elif kind == "TENSOR" and is_sparse_elements(attr):
            kind = "SPARSE_TENSOR"
        if kind is None:
            raise self.fail(f"attribute '{name}' ({attr}) has no ONNX attribute kind")
        return self._make_attribute(name, kind, attr)

    def _make_attribute(self, name: str, kind: str, attr: ir.Attribute) -> onnx.AttributeProto:
        a = onnx.AttributeProto(name=name)
        got = attr_mod.kind_of(attr)
        if kind == "SPARSE_TENSOR" and got == "TENSOR" and not is_sparse_elements(attr):
            kind = "TENSOR"  # verifier allows a dense value where a sparse one is expected
        a.type = _KIND_TYPES[kind]
        if kind == "INT":
            a.i = ir.IntegerAttr(attr).value
        elif kind == "FLOAT":
            a.f = ir.FloatAttr(attr).value
        elif kind == "STRING":
            a.s = _encode(ir.StringAttr(attr).value)
        elif kind == "INTS":
            a.ints.extend(list(ir.DenseI64ArrayAttr(attr)) if isinstance(attr, ir.DenseI64ArrayAttr) else [])
        elif kind == "FLOATS":
            a.floats.extend(list(ir.DenseF32ArrayAttr(attr)) if isinstance(attr, ir.DenseF32ArrayAttr) else [])
        elif kind == "STRINGS":
            a.strings.extend(_encode(ir.StringAttr(x).value) for x in ir.ArrayAttr(attr))
        elif kind == "TENSOR":
            a.t.CopyFrom(self._tensor(attr, ""))
        elif kind == "TENSORS":
            a.tensors.extend(self._tensor(x, "") for x in ir.ArrayAttr(attr))
        elif kind == "SPARSE_TENSOR":
            a.sparse_tensor.CopyFrom(self._sparse(attr, ""))
        elif kind == "SPARSE_TENSORS":
            a.sparse_tensors.extend(self._sparse(x, "") for x in ir.ArrayAttr(attr))
        elif kind == "TYPE_PROTO":
            a.tp.CopyFrom(type_proto(ir.TypeAttr(attr).value))
        elif kind == "TYPE_PROTOS":
            a.type_protos.extend(type_proto(ir.TypeAttr(x).value) for x in ir.ArrayAttr(attr))
        else:
            raise self.fail(f"attribute '{name}' of kind {kind} cannot be exported")
        return a


__all__ = ["export_model", "location_label"]
