"""`onnx-to-shard`: the IR 11 multi-device annotations of a model become upstream `shard` dialect ops.

What: the model's device configuration (module attribute `onnx.configuration`, kept by the importer)
becomes a `shard.grid`, and each node's `NodeDeviceConfigurationProto` (kept in the node's
`onnx.node_extras`) for that configuration becomes, per `ShardingSpecProto`:

- for an input of the node: `shard.sharding` + `shard.shard ... annotate_for_users` on the operand the
  node reads (the node wants its input laid out so);
- for an output: `shard.sharding` + `shard.shard ... annotate_for_users` on the result, which every
  other user then reads (the value is laid out so after the node; how the node itself computes it,
  e.g. as partial sums, is left to propagation).

`pipeline_stage` is kept as the op attribute `onnxc.pipeline_stage` (i64) for the pipeline split.
Upstream `sharding-propagation` and `shard-partition` then do the rest, after the ONNX ops are lowered
to linalg (the shard ops are plain users of tensors, so the lowering keeps them in place).

How a spec maps to the grid. A configuration of N devices is a 1-D grid `(N)`. Device groups
(`index_to_device_group_map`) whose groups are the contiguous, equal blocks of g devices make the grid
2-D `(N/g, g)`: a spec over the groups splits along grid axis 0 and is replicated inside each group
(axis 1); a spec over all N devices splits along both axes `[0, 1]`. A sharded axis with one
`SimpleShardedDimProto` whose `num_shards` equals the device (or group) count is honored; a static dim
must divide evenly (upstream's partition of an uneven static split is not relied upon); a symbolic
dim (`dim_param`) is split as it is at run time.

Why a warning and not an error: the spec makes the annotations hints ("a backend may ignore them, the
semantics do not change"), so one onnxc cannot honor (a permuted device order, a sharded axis fused
from several dims, a shard count that is not the device count, uneven groups, a tensor name the node
does not have) is reported as a `ShardingIgnoredWarning` naming the node and why, and left out.

Tensor names: the importer keeps a node's extra fields, not its input/output names, so the pass
matches a spec's `tensor_name` to an operand through, in order: the node's `onnxc.io_names` metadata
(added by `annotate_io_names` before import: exact), a graph input's `onnx.name`, an initializer's
or a named producer's location, a graph output's `onnx.name` for a returned result, and, for the
node's only result, the node's name (an unnamed node is located at its first output's name).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence

import onnx
from mlir import ir
from mlir.dialects import shard

from onnxc.importers.proto import location_label, unb64
from onnxc.transforms.pass_base import ModulePass

__all__ = [
    "IO_NAMES_KEY",
    "GridPlan",
    "OnnxToShardPass",
    "ShardReport",
    "ShardingIgnoredWarning",
    "annotate_io_names",
    "grid_plan",
    "node_device_configurations",
    "to_shard",
]

#: Node metadata key holding the node's input and output names (JSON), added by `annotate_io_names`.
IO_NAMES_KEY = "onnxc.io_names"
#: Op attribute carrying a node's `pipeline_stage`.
STAGE_ATTR = "onnxc.pipeline_stage"


class ShardingIgnoredWarning(UserWarning):
    """A multi-device annotation onnxc cannot honor; it is ignored, as the IR spec allows."""


def annotate_io_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose annotated main-graph nodes carry their input/output names in the
    metadata entry `onnxc.io_names` (the importer keeps metadata, not the names), so `onnx-to-shard`
    resolves every `tensor_name` exactly."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if not len(node.device_configurations):
            continue
        for entry in list(node.metadata_props):
            if entry.key == IO_NAMES_KEY:
                node.metadata_props.remove(entry)
        node.metadata_props.add(key=IO_NAMES_KEY, value=json.dumps({"in": list(node.input), "out": list(node.output)}))
    return out


@dataclasses.dataclass(frozen=True)
class GridPlan:
    """The grid for one device configuration: its symbol, shape, and device-group size (1: none)."""

    symbol: str
    name: str
    num_devices: int
    group_size: int = 1

    @property
    def shape(self) -> tuple[int, ...]:
        g = self.group_size
        return (self.num_devices,) if g == 1 else (self.num_devices // g, g)


@dataclasses.dataclass
class ShardReport:
    """What `to_shard` did: the grid (None: no configuration), annotations honored and ignored."""

    grid: GridPlan | None = None
    honored: int = 0
    ignored: list[str] = dataclasses.field(default_factory=list)
    stages: dict[str, int] = dataclasses.field(default_factory=dict)


def _configurations(module: ir.Module | ir.Operation) -> list[tuple[str, int]]:
    op = module.operation if isinstance(module, ir.Module) else module
    if "onnx.configuration" not in op.attributes:
        return []
    out = []
    for entry in ir.ArrayAttr(op.attributes["onnx.configuration"]):
        d = ir.DictAttr(entry)
        out.append((ir.StringAttr(d["name"]).value, ir.IntegerAttr(d["num_devices"]).value))
    return out


def node_device_configurations(op: ir.Operation) -> tuple[list[onnx.NodeDeviceConfigurationProto], dict[str, list[str]]]:
    """The node's device configurations and its `onnxc.io_names` ({} when absent), from `onnx.node_extras`."""
    if "onnx.node_extras" not in op.attributes:
        return [], {}
    extras = onnx.NodeProto()
    extras.ParseFromString(unb64(ir.StringAttr(op.attributes["onnx.node_extras"]).value))
    io: dict[str, list[str]] = {}
    for entry in extras.metadata_props:
        if entry.key == IO_NAMES_KEY:
            io = json.loads(entry.value)
    return list(extras.device_configurations), io


def _group_size(spec: onnx.ShardingSpecProto, num_devices: int) -> int | None:
    """The size of the spec's device groups when they are the contiguous, equal blocks the grid can
    express (1 when the spec has no groups); None when they are not."""
    groups = {e.key: list(e.value) for e in spec.index_to_device_group_map}
    if not groups:
        return 1
    sizes = {len(v) for v in groups.values()}
    if len(sizes) != 1:
        return None
    g = sizes.pop()
    if g < 1 or num_devices % g:
        return None
    for key, members in groups.items():
        if members != list(range(key * g, key * g + g)):
            return None
    return g


def grid_plan(module: ir.Module | ir.Operation, configuration: str = "") -> GridPlan | None:
    """The grid for `configuration` (default: the model's first one); None without one. The group
    size is the one the annotated nodes' device groups agree on (1 when they use none or disagree:
    the disagreeing specs are then ignored with a warning)."""
    configs = _configurations(module)
    if not configs:
        return None
    chosen = next(((n, d) for n, d in configs if n == configuration), None) if configuration else configs[0]
    if chosen is None:
        warnings.warn(
            f"onnx-to-shard: the model has no device configuration '{configuration}' "
            f"(it has {', '.join(n for n, _ in configs)}); running on one device",
            ShardingIgnoredWarning,
            stacklevel=2,
        )
        return None
    name, num = chosen
    sizes: set[int] = set()
    root = module.operation if isinstance(module, ir.Module) else module

    def visit(op: ir.Operation) -> ir.WalkResult:
        confs, _ = node_device_configurations(op)
        for c in confs:
            if c.configuration_id == name:
                for s in c.sharding_spec:
                    g = _group_size(s, num)
                    if g and g > 1:
                        sizes.add(g)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return GridPlan(_symbol(name), name, num, sizes.pop() if len(sizes) == 1 else 1)


def _symbol(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "devices"
    return "grid_" + cleaned


def _split_axes(spec: onnx.ShardingSpecProto, value: ir.Value, plan: GridPlan) -> tuple[list[list[int]] | None, str]:
    """Grid axes per tensor axis for `spec` on `value` (trailing unsplit axes left out), or
    (None, why) when onnxc cannot honor it."""
    n, g = plan.num_devices, plan.group_size
    groups = {e.key for e in spec.index_to_device_group_map}
    spec_g = _group_size(spec, n)
    devices = list(spec.device)
    if spec_g is None:
        return None, "its device groups are not contiguous blocks of one size"
    if groups and spec_g != g:
        return None, f"its device groups have {spec_g} devices where the model's others have {g}"
    if groups:
        if devices != list(range(n // g)):
            return None, f"it lists groups {devices}, not every group in order"
        count, axes = n // g, [0]
    else:
        if devices and devices != list(range(n)):
            return None, f"it lists devices {devices}, not the configuration's {n} devices in order"
        count, axes = n, ([0] if g == 1 else [0, 1])
    t = value.type
    if not isinstance(t, ir.RankedTensorType):
        return None, "the tensor's rank is unknown"
    shape = ir.RankedTensorType(t)
    rank = shape.rank
    split: list[list[int]] = [[] for _ in range(rank)]
    used = 0
    for d in spec.sharded_dim:
        axis = d.axis + rank if d.axis < 0 else d.axis
        if not 0 <= axis < rank:
            return None, f"axis {d.axis} is out of range for rank {rank}"
        if len(d.simple_sharding) != 1:
            return None, f"axis {d.axis} is sharded as {len(d.simple_sharding)} fused dims"
        simple = d.simple_sharding[0]
        if simple.num_shards == 1:
            continue
        if simple.num_shards != count:
            return None, f"axis {d.axis} has num_shards={simple.num_shards}, not the {count} devices/groups it lists"
        if used:
            return None, "more than one axis is split over the same devices"
        dim = shape.get_dim_size(axis) if not shape.is_dynamic_dim(axis) else None
        if simple.HasField("dim_value") and dim is not None and simple.dim_value != dim:
            return None, f"axis {d.axis} is {dim}, not the annotated dim_value {simple.dim_value}"
        if dim is not None and dim % count:
            return None, f"axis {d.axis} of size {dim} does not split evenly into {count} shards"
        split[axis] = list(axes)
        used += 1
    while split and not split[-1]:
        split.pop()
    return split or [[]], ""


def _axes_attr(split: Sequence[Sequence[int]]) -> ir.Attribute:
    # The bindings have no builder for the shard dialect's axis-array attribute: it is parsed from
    # its (integers-only) syntax.
    inner = ", ".join("[" + ", ".join(str(a) for a in axes) + "]" for axes in split)
    return ir.Attribute.parse(f"#shard<axisarray[{inner}]>")


def _name_of(value: ir.Value) -> set[str]:
    """Names a value is known by in imported IR: a graph input's `onnx.name`, or its producer's
    location label (an initializer's name; an unnamed node's first output)."""
    names: set[str] = set()
    if isinstance(value, ir.BlockArgument):
        owner = value.owner.owner if value.owner is not None else None
        if owner is not None and owner.name == "func.func" and "arg_attrs" in owner.attributes:
            d = ir.DictAttr(ir.ArrayAttr(owner.attributes["arg_attrs"])[value.arg_number])
            if "onnx.name" in d:
                names.add(ir.StringAttr(d["onnx.name"]).value)
        return names
    producer = value.owner
    label, _ = location_label(producer.location)
    if label and len(producer.results) == 1:
        names.add(label)
    return names


def _resolve(op: ir.Operation, tensor: str, io: dict[str, list[str]]) -> tuple[str, int] | None:
    """("in", i) or ("out", j) for `tensor` among the node's inputs/outputs; None when unknown."""
    if io:
        ins, outs = io.get("in", []), io.get("out", [])
        if tensor in outs and outs.index(tensor) < len(op.results):
            return "out", outs.index(tensor)
        if tensor in ins:
            # Omitted optional inputs ("") are not operands: count only the present ones.
            present = [n for n in ins if n]
            if tensor in present and present.index(tensor) < len(op.operands):
                return "in", present.index(tensor)
        return None
    for i, operand in enumerate(op.operands):
        if tensor in _name_of(operand):
            return "in", i
    for j, result in enumerate(op.results):
        if tensor in _output_names(result):
            return "out", j
    label, _ = location_label(op.location)
    if len(op.results) == 1 and tensor == label:
        return "out", 0
    return None


def _output_names(value: ir.Value) -> set[str]:
    """The graph output names (`onnx.name` result attributes) `value` is returned as."""
    names: set[str] = set()
    for use in value.uses:
        user = use.owner
        if user.name != "func.return":
            continue
        fn = user.parent
        while fn is not None and fn.name != "func.func":
            fn = fn.parent
        if fn is None or "res_attrs" not in fn.attributes:
            continue
        d = ir.DictAttr(ir.ArrayAttr(fn.attributes["res_attrs"])[use.operand_number])
        if "onnx.name" in d:
            names.add(ir.StringAttr(d["onnx.name"]).value)
    return names


def _node_label(op: ir.Operation) -> str:
    label, kind = location_label(op.location)
    return f"node '{label}' ({kind or op.name})" if label else f"a {op.name} node"


def _grid_op(module_op: ir.Operation, plan: GridPlan) -> None:
    body = module_op.regions[0].blocks[0]
    for existing in body.operations:
        if existing.operation.name == "shard.grid" and ir.StringAttr(existing.operation.attributes["sym_name"]).value == plan.symbol:
            return
    first = body.operations[0] if len(body.operations) else None
    ip = ir.InsertionPoint(first) if first is not None else ir.InsertionPoint(body)
    with ip, ir.Location.name(plan.name):
        shard.GridOp(plan.symbol, list(plan.shape))


def _annotated_ops(root: ir.Operation) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if "onnx.node_extras" in op.attributes:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


def to_shard(module: ir.Module | ir.Operation, configuration: str = "") -> ShardReport:
    """Add the `shard` annotations of `configuration` (default: the first) to `module` in place;
    see the module docstring. Returns what was honored and what was ignored (each ignored
    annotation is also a `ShardingIgnoredWarning`)."""
    root = module.operation if isinstance(module, ir.Module) else module
    report = ShardReport(grid_plan(root, configuration))
    plan = report.grid
    if plan is None:
        return report
    known = {n for n, _ in _configurations(root)}
    context = root.context
    i64 = ir.IntegerType.get_signless(64, context)
    pending: list[tuple[ir.Operation, str, int, list[list[int]]]] = []
    for op in _annotated_ops(root):
        confs, io = node_device_configurations(op)
        for conf in confs:
            if conf.configuration_id != plan.name:
                if conf.configuration_id not in known:
                    report.ignored.append(f"{_node_label(op)}: configuration '{conf.configuration_id}' is not one of the model's")
                continue
            if conf.HasField("pipeline_stage"):
                op.attributes[STAGE_ATTR] = ir.IntegerAttr.get(i64, conf.pipeline_stage)
                report.stages[_node_label(op)] = conf.pipeline_stage
            for spec in conf.sharding_spec:
                where = _resolve(op, spec.tensor_name, io)
                if where is None:
                    report.ignored.append(f"{_node_label(op)}: it has no input or output '{spec.tensor_name}' onnxc can find")
                    continue
                kind, index = where
                value = op.operands[index] if kind == "in" else op.results[index]
                split, why = _split_axes(spec, value, plan)
                if split is None:
                    report.ignored.append(f"{_node_label(op)}: the sharding of '{spec.tensor_name}' is ignored: {why}")
                    continue
                pending.append((op, kind, index, split))
    if pending or report.stages:
        _grid_op(root, plan)
    grid_ref = ir.FlatSymbolRefAttr.get(plan.symbol, context)
    for op, kind, index, split in pending:
        with op.location:
            if kind == "in":
                with ir.InsertionPoint(op):
                    sharding = shard.ShardingOp(grid_ref, _axes_attr(split), [], []).result
                    annotated = shard.ShardOp(op.operands[index], sharding, annotate_for_users=True).result
                op.operands[index] = annotated
            else:
                result = op.results[index]
                with ir.InsertionPoint.after(op):
                    sharding_op = shard.ShardingOp(grid_ref, _axes_attr(split), [], [])
                with ir.InsertionPoint.after(sharding_op):
                    # For its users: the node's own result sharding is left to propagation (a
                    # K-split MatMul whose output is annotated replicated yields a partial sum that
                    # partition then all-reduces; pinning the result itself replicated would not).
                    annotated_op = shard.ShardOp(result, sharding_op.result, annotate_for_users=True)
                result.replace_all_uses_except(annotated_op.result, annotated_op.operation)
        report.honored += 1
    for message in report.ignored:
        warnings.warn(f"onnx-to-shard: {message}", ShardingIgnoredWarning, stacklevel=2)
    return report


@dataclasses.dataclass(frozen=True)
class OnnxToShardPass(ModulePass):
    """Turn the IR 11 device configuration and node sharding specs into `shard` dialect ops."""

    name = "onnx-to-shard"
    configuration: str = ""

    def run(self, module: ir.Operation) -> None:
        to_shard(module, self.configuration)

