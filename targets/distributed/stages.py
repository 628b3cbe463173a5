"""Pipeline parallelism: the nodes of each `pipeline_stage` run on their own rank (issue 13).

What: a model whose nodes carry `NodeDeviceConfigurationProto.pipeline_stage` is cut into one
sub-model per stage (`stage_model`); stage s runs on rank s. Every value crossing from one stage
to a later one, and every graph output, is a `Transfer`: an `MPI_Send` on the producing rank and
an `MPI_Recv` on the consuming one (outputs go to every other rank, so each rank returns the whole
outputs, as with tensor parallelism). No micro-batching: one inference flows through the stages
in turn, so pipelining saves memory per rank (each holds its stages' weights only), not time.

How the rank's function is made (`pipeline_module`): its stage sub-model (inputs: the graph's,
then the values it receives; outputs: the graph outputs it produces, then the values it sends) is
imported and lowered to linalg as usual; then each received input becomes a call of a bodiless
`onnxc_recv_<tag>() -> tensor` and each sent value an argument of `onnxc_send_<tag>(tensor)`,
so the function has the model's signature again. The send/recv functions are written on buffers
from the checked-in template `p2p.mlir` and merged after bufferization, as the collectives are
(`lowering.py`: the deallocation pass refuses MPI ops).

Deadlock freedom: all transfers are numbered in one global order sorted by the producing rank.
Rank r first receives everything produced by lower ranks, computes, sends what it produced, then
receives what higher ranks produce: each rank meets its transfers in the global order, so the
earliest unfinished transfer always has both its ranks waiting on it.
"""

from __future__ import annotations

import dataclasses
import string
import warnings
from pathlib import Path

import onnx
from mlir import ir
from mlir.dialects import func

from .partition import PartitionError, set_mpi_abi

__all__ = ["Transfer", "pipeline_module", "stage_of_nodes", "stage_model", "transfers"]

_TEMPLATES = Path(__file__).with_name("p2p.mlir")


@dataclasses.dataclass(frozen=True)
class Transfer:
    """Value `name` (static tensor type `type`) sent from rank `source` to rank `dest` with `tag`."""

    name: str
    type: onnx.TypeProto
    source: int
    dest: int
    tag: int


def stage_of_nodes(model: onnx.ModelProto, configuration: str) -> list[int] | None:
    """The stage of every main-graph node for `configuration`, or None when no node has one.
    A node without a stage runs with the latest stage among its inputs' producers (0 if none)."""
    given: dict[int, int] = {}
    for i, node in enumerate(model.graph.node):
        for dc in node.device_configurations:
            if dc.configuration_id == configuration and dc.HasField("pipeline_stage"):
                given[i] = dc.pipeline_stage
    if not given:
        return None
    producer: dict[str, int] = {}
    stages: list[int] = []
    for i, node in enumerate(model.graph.node):
        inherited = max((producer[v] for v in node.input if v in producer), default=0)
        stage = given.get(i, inherited)
        if stage < inherited:
            label = node.name or node.output[0]
            raise PartitionError(f"node '{label}' has pipeline_stage {stage} but reads a value of stage {inherited}: stages must not go back")
        stages.append(stage)
        for v in node.output:
            producer[v] = stage
    return stages


def _types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    g = inferred.graph
    return {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}


def _static(name: str, tp: onnx.TypeProto | None) -> onnx.TypeProto:
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape") or any(
        not d.HasField("dim_value") for d in tp.tensor_type.shape.dim
    ):
        raise PartitionError(f"pipeline stages exchange '{name}', whose shape is not static: onnxc sends static tensors only")
    return tp


def transfers(model: onnx.ModelProto, stages: list[int], size: int) -> list[Transfer]:
    """Every transfer of one inference, in the global order (by producing rank, then tag)."""
    types = _types(model)
    producer = {v: stages[i] for i, n in enumerate(model.graph.node) for v in n.output}
    wanted: list[tuple[int, str, int]] = []  # (source, value, dest)
    for i, node in enumerate(model.graph.node):
        for v in node.input:
            if v in producer and producer[v] != stages[i]:
                wanted.append((producer[v], v, stages[i]))
    for out in model.graph.output:
        if out.name in producer:
            wanted += [(producer[out.name], out.name, r) for r in range(size) if r != producer[out.name]]
    unique = sorted(dict.fromkeys(wanted), key=lambda w: (w[0], w[1], w[2]))
    return [Transfer(v, _static(v, types.get(v)), s, d, tag) for tag, (s, v, d) in enumerate(unique)]


def stage_model(model: onnx.ModelProto, stages: list[int], rank: int, moves: list[Transfer]) -> onnx.ModelProto:
    """Rank `rank`'s sub-model: its nodes; inputs: the graph inputs then the values it receives
    (in tag order); outputs: the graph outputs it produces then the values it sends."""
    g = model.graph
    received = [t for t in moves if t.dest == rank and t.name not in {o.name for o in g.output}]
    sent = [t for t in moves if t.source == rank]
    sub = onnx.GraphProto(name=g.name)
    sub.node.extend(n for i, n in enumerate(g.node) if stages[i] == rank)
    specs = [n.name or n.output[0] for n in sub.node if any(len(dc.sharding_spec) for dc in n.device_configurations)]
    if specs:
        from onnxc.transforms.onnx_to_shard import ShardingIgnoredWarning

        warnings.warn(
            f"onnx-to-shard: sharding specs inside pipeline stages are ignored (nodes {', '.join(specs[:5])}): "
            "each stage runs whole on its rank",
            ShardingIgnoredWarning,
            stacklevel=2,
        )
    for n in sub.node:
        del n.device_configurations[:]  # the stage is this whole sub-model now
    sub.input.extend(g.input)
    seen: set[str] = set()
    for t in received:
        if t.name not in seen:
            sub.input.append(onnx.helper.make_value_info(t.name, t.type))
            seen.add(t.name)
    produced = {v for n in sub.node for v in n.output}
    used = {v for n in sub.node for v in n.input} | produced
    sub.initializer.extend(t for t in g.initializer if t.name in used)
    sub.output.extend(o for o in g.output if o.name in produced)
    seen = set()
    for t in sent:
        if t.name not in seen and t.name not in {o.name for o in g.output}:
            sub.output.append(onnx.helper.make_value_info(t.name, t.type))
            seen.add(t.name)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.CopyFrom(sub)
    del out.configuration[:]
    return out


def _memref(t: ir.RankedTensorType) -> ir.Type:
    return ir.MemRefType.get(list(t.shape), t.element_type, loc=ir.Location.unknown(t.context))


def _p2p_functions(context: ir.Context, specs: list[tuple[str, str, ir.RankedTensorType, int, int]]) -> ir.Module:
    """The send/recv functions on buffers, from the template file: (kind, name, type, tag, peer)."""
    text = _TEMPLATES.read_text()
    bodies = {part.split("\n", 1)[0].strip(): part.split("\n", 1)[1] for part in text.split("// @@")[1:]}
    parts = []
    for kind, name, t, tag, peer in specs:
        if t.rank == 0:
            raise PartitionError(f"pipeline stages exchange a scalar ({name}); onnxc sends tensors of rank >= 1 only")
        count = 1
        for d in t.shape:
            count *= d
        flat = ir.RankedTensorType.get([count], t.element_type, loc=ir.Location.unknown(context))
        groups = "[[" + ", ".join(str(i) for i in range(t.rank)) + "]]"
        parts.append(string.Template(bodies[kind]).substitute(
            name=name, memref=str(_memref(t)), flat=str(_memref(flat)), groups=groups, tag=tag, peer=peer))  # fmt: skip
    source = 'module attributes {mpi.dlti = #dlti.map<"MPI:Implementation" = "MPICH">} {\n' + "\n".join(parts) + "}\n"
    return ir.Module.parse(source, context=context)


def pipeline_module(model: onnx.ModelProto, stages: list[int], rank: int, size: int) -> tuple[ir.Module, ir.Module | None]:
    """Rank `rank`'s linalg module with the model's signature (see the module docstring) and the
    module of its send/recv functions (None when it has no transfers)."""
    from onnxc.importers import import_model
    from onnxc.transforms.pipeline import run_pipeline

    if max(stages) >= size:
        raise PartitionError(f"the model has pipeline stages 0..{max(stages)} but the job has {size} ranks")
    moves = transfers(model, stages, size)
    sub = stage_model(model, stages, rank, moves)
    module = import_model(sub)
    run_pipeline(module, "onnx-to-linalg", reraise=True)
    fns = [op.operation for op in module.body.operations if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)]
    main = next(f for f in fns if "sym_visibility" not in f.attributes or ir.StringAttr(f.attributes["sym_visibility"]).value != "private")
    block = main.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    n_in = len(model.graph.input)
    outputs = [o.name for o in model.graph.output]
    produced = [o.name for o in sub.graph.output]
    context = module.context
    specs: list[tuple[str, str, ir.RankedTensorType, int, int]] = []
    by_name = {name: ret.operands[i] for i, name in enumerate(produced)}
    received_inputs = [v.name for v in sub.graph.input[n_in:]]
    first = block.operations[0]
    with context, main.location:
        # Receives from lower ranks first (boundary values and outputs), in tag order.
        got: dict[str, ir.Value] = {}
        for t in (t for t in moves if t.dest == rank and t.source < rank):
            if t.name in received_inputs:  # the type the lowering gave the input
                arg_type = ir.RankedTensorType(block.arguments[n_in + received_inputs.index(t.name)].type)
            else:
                arg_type = _tensor_type(t.type, context)
            name = f"onnxc_recv_{t.tag}"
            specs.append(("recv", name, arg_type, t.tag, t.source))
            _declare(module, name, [], [arg_type])
            with ir.InsertionPoint(first):
                got[t.name] = func.CallOp([arg_type], ir.FlatSymbolRefAttr.get(name), []).result
        for i, name in enumerate(received_inputs):
            block.arguments[n_in + i].replace_all_uses_with(got[name])
        with ir.InsertionPoint(ret):
            for t in (t for t in moves if t.source == rank):
                name = f"onnxc_send_{t.tag}"
                value = by_name[t.name]
                specs.append(("send", name, ir.RankedTensorType(value.type), t.tag, t.dest))
                _declare(module, name, [value.type], [])
                func.CallOp([], ir.FlatSymbolRefAttr.get(name), [value])
            for t in (t for t in moves if t.dest == rank and t.source > rank):
                arg_type = _tensor_type(t.type, context)
                name = f"onnxc_recv_{t.tag}"
                specs.append(("recv", name, arg_type, t.tag, t.source))
                _declare(module, name, [], [arg_type])
                got[t.name] = func.CallOp([arg_type], ir.FlatSymbolRefAttr.get(name), []).result
            results = [by_name[o] if o in by_name else got[o] for o in outputs]
            func.ReturnOp(results)
        ret.erase()
        for i in reversed(range(n_in, len(block.arguments))):
            block.erase_argument(i)
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in block.arguments], [v.type for v in results])
        )
        if "arg_attrs" in main.attributes:
            main.attributes["arg_attrs"] = ir.ArrayAttr.get(list(ir.ArrayAttr(main.attributes["arg_attrs"]))[:n_in])
        main.attributes["res_attrs"] = ir.ArrayAttr.get(
            [ir.DictAttr.get({"onnx.name": ir.StringAttr.get(o)}) for o in outputs]
        )
    run_pipeline(module, "canonicalize,cse", reraise=True)
    set_mpi_abi(module)
    return module, (_p2p_functions(context, specs) if specs else None)


def _tensor_type(tp: onnx.TypeProto, context: ir.Context) -> ir.RankedTensorType:
    from onnxc.dialect.types import element_type

    with context:
        elem = element_type(tp.tensor_type.elem_type)
    return ir.RankedTensorType.get([d.dim_value for d in tp.tensor_type.shape.dim], elem)


def _declare(module: ir.Module, name: str, inputs: list[ir.Type], results: list[ir.Type]) -> None:
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.operation.attributes["sym_name"]).value == name:
            return
    first = module.body.operations[0]
    with ir.InsertionPoint(first):
        func.FuncOp(name, ir.FunctionType.get(inputs, results), visibility="private")
