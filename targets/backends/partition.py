"""Partition a model over the present backends and run it that way (ONNXIFI's framework side).

`partition(model, backends)`:
1. imports the model and runs the ONNX passes (types inferred: the roofline needs shapes);
2. asks every backend, node by node, whether it takes the node, each node cut out as a
   single-node ONNX model (`node_model`) exactly as the proposal's `onnxGetBackendCompatibility`
   receives it, and writes the answers on the ops (`onnxc.accepted_by`);
3. writes the backends' figures (`BackendInfo.profile()`) as the module's
   `onnxc.backend_profiles` and runs the `onnx-partition` pass, which forms the subgraphs and
   assigns them (see `onnxc.transforms.onnx_partition`);
4. returns a `Partition`: the annotated module and the decision table (`Decision` per subgraph).

`PartitionedModel(model, backends)` cuts each subgraph out as its own ONNX model
(`subgraph_model`) and initializes it on its backend (`init_graph`) once; `run(feeds)` runs the
subgraphs in the pass's order, moving each value from the subgraph that makes it to those that
read it. A backend that refuses a subgraph at `init_graph` (compile time, or its library's
lazy initialization) is replaced for that subgraph by the next choice (`Decision.fallbacks`: the
other backends that support all of its nodes, by estimate or in the user's preference order, the
CPU last), with a warning naming its nodes: a refusal never fails the compile.
`run_partitioned(model, feeds, backends)` compiles, runs once and releases.

Why subgraphs travel as ONNX models: that is the proposal's contract (`onnxInitGraph` takes a
serialized ModelProto), so a plug-in needs nothing of onnxc's IR.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from mlir import ir
from mlir.dialects import func

from onnxc.importers import export_model
from onnxc.targets.backends.base import Backend, BackendError, Graph, Support
from onnxc.targets.backends.builtin import onnx_module
from onnxc.transforms import onnx_utils as U
from onnxc.transforms.lowering.common import node_name
from onnxc.transforms.onnx_partition import ACCEPTED_ATTR, BACKEND_ATTR, PARTITION_ATTR, PROFILES_ATTR, SUBGRAPH_ATTR
from onnxc.transforms.pass_base import element_text
from onnxc.transforms.pipeline import run_pipeline

__all__ = ["BACKEND_KEY", "FUNCTION_DOMAIN", "Decision", "Partition", "PartitionedModel", "Plan", "Subgraph", "partitioned_onnx", "plan_subgraphs", "profiles_json", "decision_table", "node_model", "partition", "run_partitioned", "subgraph_model"]

_OURS = (ACCEPTED_ATTR, BACKEND_ATTR, SUBGRAPH_ATTR)


@dataclasses.dataclass(frozen=True)
class Decision:
    """One subgraph: its id (run order), chosen backend, op names, estimated seconds per backend
    that accepts all of it, and the transfer seconds on the chosen one."""

    id: int
    backend: str
    nodes: tuple[str, ...]
    estimates: dict[str, float]
    transfer: float
    #: The backends to try next, in order, if `backend` refuses the subgraph at init or compile
    #: time: every other backend that said it supports all of its nodes (by estimate, or in the
    #: user's preference order), the CPU last.
    fallbacks: tuple[str, ...] = ()


@dataclasses.dataclass
class Partition:
    """The annotated module (`onnxc.subgraph`/`onnxc.backend` on each op) and the decisions."""

    module: ir.Module
    decisions: list[Decision]
    host: str = "cpu"  # the name of the CPU backend (the fallback)


def _main(module: ir.Module) -> ir.Operation:
    name = ir.FlatSymbolRefAttr(module.operation.attributes["onnx.main"]).value
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.operation.attributes["sym_name"]).value == name:
            return op.operation
    raise BackendError(f"the module has no main function @{name}")


def _nodes(f: ir.Operation) -> list[ir.Operation]:
    return [op for op in U.block_ops(f.regions[0].blocks[0]) if U.is_onnx_op(op) and not U.is_constant_op(op) and op.name != U.NONE_OP]


def _label(op: ir.Operation, i: int) -> str:
    """How a node is named in decisions and warnings: `onnx.mul#3`, with its ONNX name if any."""
    name = node_name(op)
    return f"{op.name}#{i}" + (f" ({name})" if name else "")


def _uncuttable(f: ir.Operation) -> str | None:
    """Why the main function cannot be cut into subgraphs (None when it can): ops with regions
    (If/Loop/Scan bodies may read enclosing values) or ops of other dialects (a call left in)."""
    for op in U.block_ops(f.regions[0].blocks[0]):
        if op.name == "func.return":
            continue
        if not U.is_onnx_op(op):
            return f"the graph holds a non-ONNX op ({op.name})"
        if any(len(r.blocks) for r in op.regions):
            return "partitioning models with If/Loop/Scan is not implemented"
    return None


def _value_key(v: ir.Value, index: dict[int, int]) -> str:
    """A name for a value of the main function, the same in every subgraph model."""
    if isinstance(v, ir.BlockArgument):
        return f"arg{v.arg_number}"
    return f"n{index[U.id_key(v.owner)]}_{v.result_number}"


def subgraph_model(module: ir.Module, ops: Sequence[ir.Operation], index: dict[int, int], outputs: Sequence[ir.Value]) -> onnx.ModelProto:
    """`ops` (ONNX ops of the main function, in program order) as a model of their own: inputs are
    the values they read from outside (named by `_value_key`), constants and `onnx.none` they use
    are copied in, `outputs` (values of `ops`) are the graph outputs."""
    inside = {U.id_key(op) for op in ops}
    for op in ops:
        if any(len(r.blocks) for r in op.regions):
            raise BackendError(f"{U.location_text(op)}: ops with subgraphs (If/Loop/Scan) are not partitioned yet")
    inputs: list[ir.Value] = []
    seen: set[str] = set()
    for op in ops:
        for v in op.operands:
            if isinstance(v, ir.OpResult) and (U.id_key(v.owner) in inside or U.is_constant_op(v.owner) or v.owner.name == U.NONE_OP):
                continue
            key = _value_key(v, index)
            if key not in seen:
                seen.add(key)
                inputs.append(v)
    with module.context, ir.Location.unknown():
        sub = ir.Module.create()
        attrs = module.operation.attributes
        for name in list(attrs):
            if name not in (PROFILES_ATTR, "onnx.main"):
                sub.operation.attributes[name] = attrs[name]
        sub.operation.attributes["onnx.main"] = ir.FlatSymbolRefAttr.get("main")
        with ir.InsertionPoint(sub.body):
            f = func.FuncOp("main", ([v.type for v in inputs], [v.type for v in outputs]))
            f.arg_attrs = ir.ArrayAttr.get([ir.DictAttr.get({"onnx.name": ir.StringAttr.get(_value_key(v, index))}) for v in inputs])
            f.result_attrs = ir.ArrayAttr.get([ir.DictAttr.get({"onnx.name": ir.StringAttr.get(_value_key(v, index))}) for v in outputs])
            block = f.add_entry_block()
        mapped: dict[str, ir.Value] = {_value_key(v, index): a for v, a in zip(inputs, block.arguments)}
        copied: dict[int, ir.Operation] = {}
        with ir.InsertionPoint(block):
            for op in ops:
                new_operands = []
                for v in op.operands:
                    if isinstance(v, ir.OpResult) and (U.is_constant_op(v.owner) or v.owner.name == U.NONE_OP):
                        k = U.id_key(v.owner)
                        if k not in copied:
                            copied[k] = v.owner.clone()
                        new_operands.append(copied[k].results[v.result_number])
                    else:
                        new_operands.append(mapped[_value_key(v, index)])
                new = op.clone()
                for i, v in enumerate(new_operands):
                    new.operands[i] = v
                for name in _OURS:
                    if name in new.attributes:
                        del new.attributes[name]
                for r, nr in zip(op.results, new.results):
                    mapped[_value_key(r, index)] = nr
            func.ReturnOp([mapped[_value_key(v, index)] for v in outputs])
    return export_model(sub)


def node_model(module: ir.Module, op: ir.Operation, index: dict[int, int]) -> onnx.ModelProto:
    """One node as a single-node model with typed inputs (what compatibility queries take)."""
    return subgraph_model(module, [op], index, [r for r in op.results if not isinstance(r.type, ir.NoneType)])


def _profiles_attr(backends: Sequence[Backend]) -> ir.Attribute:
    out = {}
    for b in backends:
        p = b.info().profile()
        entry: dict[str, ir.Attribute] = {
            "macs": ir.DictAttr.get({k: ir.FloatAttr.get_f64(v) for k, v in p["macs"].items()}),
            "mem_bw": ir.FloatAttr.get_f64(p["mem_bw"]),
        }
        if p["host"]:
            entry["host"] = ir.UnitAttr.get()
        else:
            entry["h2d_bw"] = ir.FloatAttr.get_f64(p["h2d_bw"])
            entry["d2h_bw"] = ir.FloatAttr.get_f64(p["d2h_bw"])
        out[b.name] = ir.DictAttr.get(entry)
    return ir.DictAttr.get(out)


def profiles_json(backends: Sequence[Backend]) -> str:
    """The backends' figures as the JSON `onnx-partition{profiles=<file>}` reads."""
    import json

    return json.dumps({b.name: b.info().profile() for b in backends}, indent=1)


def _matches(op: ir.Operation, entries: Sequence[str]) -> bool:
    """Whether an allow/deny entry names `op`: its ONNX node name or its ONNX op type (`Conv`)."""
    info = U.info_of(op)
    return node_name(op) in entries or (info is not None and info.op_type in entries)


def partition(
    model: onnx.ModelProto,
    backends: Sequence[Backend] | None = None,
    force: str | Sequence[str] | None = None,
    pin_host: Sequence[str] = (),
    prefer: Sequence[str] | None = None,
    allow: Sequence[str] | None = None,
) -> Partition:
    """Import `model`, ask each backend about each node, and run `onnx-partition` (see the module
    doc). `backends` default: every discovered one; the CPU must be among them (the fallback).
    `force` names backends that get every node they accept, whatever the roofline says;
    `pin_host` (the deny list) names ONNX nodes (by node name or op type) that stay on the CPU;
    `allow`, when given, is the only nodes (names or op types) that may leave the CPU.
    `prefer` (backend names, most preferred first: onnxruntime's provider order) replaces the
    roofline: each node goes to the first of them that supports it, connected runs of such nodes
    form the subgraphs, and a refused subgraph falls back along the same order."""
    from onnxc.targets.backends import backends as discover

    chosen = []
    for b in list(backends) if backends is not None else discover():
        try:
            b.info()
        except Exception as e:  # noqa: BLE001 - a (plug-in) backend that cannot describe itself gets no nodes
            warnings.warn(f"backend '{b.name}' failed to give its figures ({type(e).__name__}: {e}); it gets no nodes", stacklevel=2)
            continue
        chosen.append(b)
    if not any(b.info().device_kind == "cpu" for b in chosen):
        raise BackendError(f"the backends ({', '.join(b.name for b in chosen)}) include no CPU backend to fall back to")
    module = onnx_module(model)
    with module.context:
        f = _main(module)
        ops = _nodes(f)
        index = {U.id_key(op): i for i, op in enumerate(ops)}
        # A graph that cannot be cut stays on the CPU whole: no backend is asked about its nodes.
        whole = _uncuttable(f) is not None
        singles = [None if whole else node_model(module, op, index) for op in ops]
    # The compatibility queries run pipelines, which may invalidate every Python op handle of the
    # (shared) context: the ops are looked up again afterwards, by position.
    broken: set[str] = set()

    def takes(b: Backend, single: onnx.ModelProto | None) -> bool:
        if b.info().device_kind == "cpu":
            return True
        if single is None or b.name in broken:
            return False
        try:
            return b.compatibility(single).support is Support.SUPPORTED
        except Exception as e:  # noqa: BLE001 - a (plug-in) backend whose query fails is asked nothing more
            broken.add(b.name)
            warnings.warn(f"backend '{b.name}' failed a compatibility query ({type(e).__name__}: {e}); it gets no nodes", stacklevel=3)
            return False

    accepted = [[b.name for b in chosen if takes(b, single)] for single in singles]
    host = next(b.name for b in chosen if b.info().device_kind == "cpu")
    rank = {name: i for i, name in enumerate(prefer or ())}
    denied: list[bool] = []
    with module.context:
        f = _main(module)
        for op, names in zip(_nodes(f), accepted):
            kept = list(names)
            denied.append(_matches(op, pin_host) or (allow is not None and not _matches(op, allow)))
            if denied[-1]:
                kept = [host]
            elif prefer is not None:
                # The first preferred backend that supports the node is its only device choice;
                # a preferred CPU keeps it (onnxruntime's provider order).
                ranked = sorted((n for n in kept if n in rank), key=rank.__getitem__)
                kept = [host] + ([ranked[0]] if ranked and ranked[0] != host else [])
            op.attributes[ACCEPTED_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(n) for n in kept])
        module.operation.attributes[PROFILES_ATTR] = _profiles_attr(chosen)
    options: dict[str, object] = {}
    forced = [force] if isinstance(force, str) else list(force or ())
    if prefer is not None:
        forced += [n for n in prefer if n != host and n not in forced and n in {b.name for b in chosen}]
    if forced:
        options["force"] = tuple(forced)
    run_pipeline(module, element_text("onnx-partition", options), reraise=True)
    with module.context:
        f = _main(module)
        by_id: dict[int, list[str]] = {}
        able: dict[int, set[str]] = {}  # backends that support every node of the subgraph
        for i, op in enumerate(_nodes(f)):
            sid = ir.IntegerAttr(op.attributes[SUBGRAPH_ATTR]).value
            by_id.setdefault(sid, []).append(_label(op, i))
            ok = {host} if denied[i] else set(accepted[i])
            able[sid] = able[sid] & ok if sid in able else ok
        decisions = []
        for d in ir.ArrayAttr(f.attributes[PARTITION_ATTR]):
            d = ir.DictAttr(d)
            sid = ir.IntegerAttr(d["id"]).value
            est = {n.name: ir.FloatAttr(n.attr).value for n in ir.DictAttr(d["est"])}
            backend = ir.StringAttr(d["backend"]).value
            others = [n for n in able.get(sid, {host}) if n not in (backend, host)]
            if prefer is not None:
                others.sort(key=lambda n: (rank.get(n, len(rank)), n))
            else:  # by the roofline: only backends estimated faster than the CPU are worth a try
                others = sorted((n for n in others if est.get(n, float("inf")) < est.get(host, float("inf"))), key=lambda n: (est[n], n))
            fallbacks = tuple(others + ([host] if backend != host else []))
            decisions.append(Decision(sid, backend, tuple(by_id.get(sid, [])), est, ir.FloatAttr(d["transfer"]).value, fallbacks))
    return Partition(module, sorted(decisions, key=lambda x: x.id), host)


def decision_table(p: Partition) -> str:
    """The decisions as text: subgraph, nodes, estimated time per backend, transfers, choice."""
    names = sorted({n for d in p.decisions for n in d.estimates})
    head = ["subgraph", "nodes"] + [f"{n} (us)" for n in names] + ["transfer (us)", "backend"]
    rows = [head]
    for d in p.decisions:
        nodes = ", ".join(d.nodes) if len(d.nodes) <= 3 else f"{', '.join(d.nodes[:3])}, ... ({len(d.nodes)})"
        rows.append([str(d.id), nodes] + [f"{d.estimates[n] * 1e6:.1f}" if n in d.estimates else "-" for n in names] + [f"{d.transfer * 1e6:.1f}", d.backend])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


@dataclasses.dataclass
class _Step:
    """One subgraph ready to run: its graph on the backend that took it, and the names of the
    values it reads and writes (`_value_key` names, shared by all steps)."""

    id: int
    backend: str
    nodes: list[str]
    model: onnx.ModelProto
    graph: Graph


@dataclasses.dataclass
class Subgraph:
    """One subgraph cut out as an ONNX model: its id (run order), backend, node labels, and the
    model (inputs and outputs named by `_value_key`: `arg<i>` for graph inputs, `n<k>_<r>` for
    result r of node k)."""

    id: int
    backend: str
    nodes: list[str]
    model: onnx.ModelProto


@dataclasses.dataclass
class Plan:
    """A partition cut into runnable pieces. `input_keys`: graph input name -> value key;
    `result_keys`: the value key of each graph output, in order. `whole`: why the model cannot
    be cut (then `subgraphs` is empty and it runs whole on the CPU; `whole_nodes` names its ops)."""

    input_names: list[str]
    output_names: list[str]
    input_keys: dict[str, str]
    result_keys: list[str]
    subgraphs: list[Subgraph]
    whole: str | None = None
    whole_nodes: list[str] = dataclasses.field(default_factory=list)


def plan_subgraphs(p: Partition) -> Plan:
    """Cut each subgraph of `p` out as its own ONNX model (`subgraph_model`): its outputs are
    the values read by other subgraphs or returned."""
    module = p.module
    with module.context:
        f = _main(module)
        ops = _nodes(f)
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        input_names = _signature_names(f, "arg_attrs", len(ftype.inputs), "input")
        output_names = _signature_names(f, "res_attrs", len(ftype.results), "output")
        why = _uncuttable(f)
        if why is not None:
            return Plan(input_names, output_names, {n: n for n in input_names}, list(output_names), [], why, [op.name for op in ops])
        index = {U.id_key(op): i for i, op in enumerate(ops)}
        groups: dict[int, list[ir.Operation]] = {}
        for op in ops:
            groups.setdefault(ir.IntegerAttr(op.attributes[SUBGRAPH_ATTR]).value, []).append(op)
        results: list[str] = []
        for v in U.terminator(f.regions[0].blocks[0]).operands:
            if isinstance(v, ir.BlockArgument):
                results.append(f"arg{v.arg_number}")
            elif U.id_key(v.owner) in index:
                results.append(_value_key(v, index))
            else:
                raise BackendError(f"graph output '{output_names[len(results)]}' is a constant; such models are not partitioned yet")
        returned_keys = set(results)
        subgraphs = []
        for sid in sorted(groups):
            members = groups[sid]
            inside = {U.id_key(op) for op in members}
            outs = [
                r for op in members for r in op.results
                if not isinstance(r.type, ir.NoneType)
                and (any(U.id_key(u.owner) not in inside for u in r.uses) or _value_key(r, index) in returned_keys)
            ]
            names = [_label(op, index[U.id_key(op)]) for op in members]
            backend = ir.StringAttr(members[0].attributes[BACKEND_ATTR]).value
            subgraphs.append(Subgraph(sid, backend, names, subgraph_model(module, members, index, outs)))
    return Plan(input_names, output_names, {name: f"arg{i}" for i, name in enumerate(input_names)}, results, subgraphs)


#: The domain of the model-local functions `partitioned_onnx` writes, one per subgraph.
FUNCTION_DOMAIN = "onnxc.partition"
#: The metadata key (on each function and on the node calling it) naming the subgraph's backend.
BACKEND_KEY = "onnxc.backend"


def partitioned_onnx(model: onnx.ModelProto, p: Partition) -> onnx.ModelProto:
    """`model` rewritten as `p` cut it: each subgraph a model-local function
    (`onnxc.partition.subgraph_<id>`, its weights as Constant nodes) carrying its backend in
    `metadata_props[onnxc.backend]`, the node that calls it too, the main graph calling them in
    run order. The result is a valid ONNX model computing what `model` computes (onnx.reference
    runs it), so the partition can be inspected, versioned and handed to another tool."""
    from onnx import helper

    plan = plan_subgraphs(p)
    if plan.whole is not None:
        raise BackendError(f"{plan.whole}: the model is not cut into subgraphs (it runs whole on the CPU)")
    main_name = {key: name for name, key in plan.input_keys.items()}
    tail: list[onnx.NodeProto] = []
    for name, key in zip(plan.output_names, plan.result_keys):
        if key in main_name:  # a graph input returned as is, or a value returned twice
            tail.append(helper.make_node("Identity", [main_name[key]], [name]))
        else:
            main_name[key] = name

    def outer(key: str) -> str:
        return main_name.get(key, key)

    functions, calls = [], []
    opsets: dict[str, int] = {}
    for sg in plan.subgraphs:
        g = sg.model.graph
        weights = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
        body = [helper.make_node("Constant", [], [t.name], value=t) for t in g.initializer]
        body += [helper.make_node("Constant", [], [t.values.name], sparse_value=t) for t in g.sparse_initializer]
        body += list(g.node)
        inputs = [v.name for v in g.input if v.name not in weights]
        outputs = [v.name for v in g.output]
        fname = f"subgraph_{sg.id}"
        fn = helper.make_function(
            FUNCTION_DOMAIN, fname, inputs, outputs, body, list(sg.model.opset_import),
            doc_string=f"subgraph {sg.id} on backend '{sg.backend}': {', '.join(sg.nodes)}",
        )
        helper.set_metadata_props(fn, {BACKEND_KEY: sg.backend})
        functions.append(fn)
        call = helper.make_node(fname, [outer(i) for i in inputs], [outer(o) for o in outputs], name=f"{fname}_{sg.backend}", domain=FUNCTION_DOMAIN)
        helper.set_metadata_props(call, {BACKEND_KEY: sg.backend})
        calls.append(call)
        for o in sg.model.opset_import:
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
    for o in model.opset_import:
        opsets.setdefault(o.domain, o.version)
    opsets[FUNCTION_DOMAIN] = 1
    kept = {v.name for v in model.graph.input}  # initializers that are inputs stay overridable inputs
    graph = helper.make_graph(
        calls + tail, model.graph.name, list(model.graph.input), list(model.graph.output),
        [t for t in model.graph.initializer if t.name in kept],
    )
    out = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())], functions=functions)
    out.ir_version = max(model.ir_version, out.ir_version)
    out.producer_name = "onnxc partition"
    return out


class PartitionedModel:
    """A model compiled over several backends: each subgraph initialized on its backend once
    (`init_graph`), the CPU taking any subgraph its backend refuses (with a warning naming the
    nodes). Call `run(feeds)` (or the object) any number of times; `release()` frees the graphs.

    Models whose top-level ops carry subgraphs (If/Loop/Scan), or that keep a non-ONNX op, are
    compiled whole for the CPU, with a warning: a region may read values of the enclosing graph
    that cutting would lose.
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        backends: Sequence[Backend] | None = None,
        force: str | Sequence[str] | None = None,
        *,
        prefer: Sequence[str] | None = None,
        pin_host: Sequence[str] = (),
        allow: Sequence[str] | None = None,
    ) -> None:
        from onnxc.targets.backends import backends as discover

        present = list(backends) if backends is not None else discover()
        self.partition = partition(model, present, force, pin_host=pin_host, prefer=prefer, allow=allow)
        fallbacks = {d.id: d.fallbacks for d in self.partition.decisions}
        by_name = {b.name: b for b in present}
        cpu = next(b for b in present if b.name == self.partition.host)
        plan = plan_subgraphs(self.partition)
        self.input_names, self.output_names = plan.input_names, plan.output_names
        self._keys, self._results = plan.input_keys, plan.result_keys
        self.steps: list[_Step] = []
        if plan.whole is not None:
            warnings.warn(f"{plan.whole}: the whole model runs on the CPU", stacklevel=2)
            self.steps.append(_Step(0, cpu.name, plan.whole_nodes, model, cpu.init_graph(model)))
            return
        for sg in plan.subgraphs:
            chain = [by_name[sg.backend]] + [by_name[n] for n in fallbacks.get(sg.id, ()) if n != sg.backend]
            graph, used = _init_with_fallback(chain, cpu, sg.model, sg.nodes)
            self.steps.append(_Step(sg.id, used.name, sg.nodes, sg.model, graph))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph outputs by name for `feeds` (every graph input, by name)."""
        env: dict[str, np.ndarray] = {}
        for name, key in self._keys.items():
            if name not in feeds:
                raise BackendError(f"input '{name}' is not fed (inputs: {', '.join(self.input_names)})")
            env[key] = np.asarray(feeds[name])
        for step in self.steps:
            step.graph.set_graph_io({i.name: env[i.name] for i in step.graph.inputs})
            env.update(step.graph.run_graph().result())
        return {name: env[k] for name, k in zip(self.output_names, self._results)}

    __call__ = run

    def release(self) -> None:
        """Release every subgraph's graph (and with it the backends' references)."""
        for step in self.steps:
            step.graph.release_graph()


def _init_with_fallback(chain: Sequence[Backend], cpu: Backend, sub: onnx.ModelProto, names: list[str]) -> tuple[Graph, Backend]:
    """`init_graph(sub)` on the first backend of `chain` that takes it (the CPU last, whatever
    `chain` holds), with a warning naming the nodes and the next choice for each refusal."""
    order = [b for b in chain if b is not cpu] + [cpu]
    for i, backend in enumerate(order[:-1]):
        try:
            return backend.init_graph(sub), backend
        except Exception as e:  # noqa: BLE001 - any refusal or failure of a (plug-in) backend falls back to the next choice
            nxt = order[i + 1].name
            warnings.warn(
                f"backend '{backend.name}' failed on nodes {', '.join(names)} ({type(e).__name__}: {e}); "
                + ("running them on the CPU" if order[i + 1] is cpu else f"trying backend '{nxt}' next"),
                stacklevel=3,
            )
    return cpu.init_graph(sub), cpu


def run_partitioned(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], backends: Sequence[Backend] | None = None, force: str | Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Compile `model` over the backends (`PartitionedModel`), run it once on `feeds`, release it."""
    compiled = PartitionedModel(model, backends, force)
    try:
        return compiled.run(feeds)
    finally:
        compiled.release()


def _signature_names(f: ir.Operation, key: str, count: int, prefix: str) -> list[str]:
    names = [f"{prefix}_{i}" for i in range(count)]
    if key in f.attributes:
        for i, d in enumerate(ir.ArrayAttr(f.attributes[key])):
            d = ir.DictAttr(d)
            if "onnx.name" in d:
                names[i] = ir.StringAttr(d["onnx.name"]).value
    return names
