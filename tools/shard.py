"""`onnxc shard`: write IR 11 multi-device annotations into a model that has none (issue 13).

    onnxc shard model.onnx --devices 2 --strategy tensor-parallel -o out.onnx

What `tensor-parallel` annotates (Megatron-LM's split of a transformer layer, so that each
layer needs one all-reduce and no all-gather):

- **MLP**: a MatMul/Gemm-free chain `MatMul(x, W1) -> [elementwise ops, bias Adds] -> MatMul(., W2)`
  with constant 2-D weights: W1 split on its columns (axis 1), W2 on its rows (axis 0), the second
  MatMul's output replicated (partition all-reduces its partial sums there).
- **Attention** with head-batched weights (`MatMul(x, Wq)` with Wq of shape (heads, d_model,
  d_head), as a head-major export writes Q/K/V, and an output projection Wo of shape (heads,
  d_head, d_model) summed over heads by `ReduceSum(axes=[0])`): every such weight split on the
  head axis, the head sum's output replicated.

The model gets a `DeviceConfigurationProto` named `tensor_parallel` with `--devices` devices and
IR version 11 (at least). The annotations are hints: the model's meaning is unchanged, onnxc runs
it on one device outside `mpirun` and on `--devices` ranks under it. A weight whose split axis does
not divide by the device count is left unannotated (and listed).

`--emit STAGE --rank R` prints rank R's IR instead (`partition`: local shards and `shard`
collectives; `llvm`: the MPI calls), annotating first when the model has no annotations.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from onnxc.errors import OnnxcError

__all__ = ["CONFIGURATION", "ShardError", "add_subparser", "main", "sharding_spec", "tensor_parallel"]

#: The name of the device configuration `onnxc shard` writes.
CONFIGURATION = "tensor_parallel"

#: Ops between the two MatMuls of an MLP that keep the split of the hidden axis (elementwise).
_ELEMENTWISE = {"Relu", "Gelu", "Sigmoid", "Tanh", "Erf", "Mul", "Add", "Sub", "Div", "Sqrt", "Exp", "Neg", "Abs", "Softplus", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Swish", "Identity", "Cast"}


class ShardError(OnnxcError):
    """`onnxc shard` cannot annotate the model as asked."""


def sharding_spec(tensor: str, devices: int, axis: int | None = None, dim: int | None = None) -> onnx.ShardingSpecProto:
    """A spec for `tensor` over devices 0..devices-1: split on `axis` into `devices` shards
    (`dim`: the axis's size when known), or replicated when `axis` is None."""
    spec = onnx.ShardingSpecProto(tensor_name=tensor, device=list(range(devices)))
    if axis is not None:
        simple = onnx.SimpleShardedDimProto(num_shards=devices)
        if dim is not None:
            simple.dim_value = dim
        spec.sharded_dim.append(onnx.ShardedDimProto(axis=axis, simple_sharding=[simple]))
    return spec


def _annotate(node: onnx.NodeProto, specs: Sequence[onnx.ShardingSpecProto]) -> None:
    for dc in node.device_configurations:
        if dc.configuration_id == CONFIGURATION:
            dc.sharding_spec.extend(specs)
            return
    node.device_configurations.append(onnx.NodeDeviceConfigurationProto(configuration_id=CONFIGURATION, sharding_spec=list(specs)))


def tensor_parallel(model: onnx.ModelProto, devices: int) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of `model` annotated as the module docstring says; returns it and a line per
    annotated (or skipped) block."""
    if devices < 2:
        raise ShardError(f"--devices must be at least 2, got {devices}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    weights = {t.name: list(t.dims) for t in g.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    report: list[str] = []
    done: set[int] = set()

    def weight(n: onnx.NodeProto) -> list[int] | None:
        if n.op_type != "MatMul" or len(n.input) != 2:
            return None
        return weights.get(n.input[1])

    def label(n: onnx.NodeProto) -> str:
        return n.name or n.output[0]

    for n in g.node:
        w = weight(n)
        if w is None or id(n) in done:
            continue
        if len(w) == 3:  # head-batched attention weight: split the heads
            if w[0] % devices:
                report.append(f"skipped {label(n)}: {w[0]} heads do not split into {devices}")
                continue
            _annotate(n, [sharding_spec(n.input[1], devices, 0, w[0])])
            done.add(id(n))
            report.append(f"attention {label(n)}: heads of {n.input[1]} split over {devices} devices")
            for c in consumers.get(n.output[0], []):
                if c.op_type == "ReduceSum":
                    # Its input split on the heads too: the sum is then partial per rank and one
                    # all-reduce of the (seq, d_model) result replaces gathering every head.
                    _annotate(c, [sharding_spec(c.input[0], devices, 0, w[0]), sharding_spec(c.output[0], devices)])
            continue
        if len(w) != 2:
            continue
        # Follow the single-consumer elementwise chain to a second MatMul with a 2-D weight.
        value, second = n.output[0], None
        while True:
            users = consumers.get(value, [])
            if len(users) != 1:
                break
            u = users[0]
            if weight(u) is not None and len(weight(u) or []) == 2 and u.input[0] == value:
                second = u
                break
            if u.op_type not in _ELEMENTWISE:
                break
            value = u.output[0]
        if second is None:
            continue
        w2 = weights[second.input[1]]
        if w[1] % devices or w2[0] != w[1]:
            report.append(f"skipped MLP {label(n)} -> {label(second)}: hidden size {w[1]} does not split into {devices}")
            continue
        _annotate(n, [sharding_spec(n.input[1], devices, 1, w[1])])
        _annotate(second, [sharding_spec(second.input[1], devices, 0, w2[0]), sharding_spec(second.output[0], devices)])
        done.update({id(n), id(second)})
        report.append(f"MLP {label(n)} -> {label(second)}: hidden size {w[1]} split over {devices} devices")
    if not report or all(r.startswith("skipped") for r in report):
        raise ShardError("no MLP (MatMul -> elementwise -> MatMul with constant weights) or head-batched attention MatMul to split")
    del out.configuration[:]
    out.configuration.append(onnx.DeviceConfigurationProto(name=CONFIGURATION, num_devices=devices))
    out.ir_version = max(out.ir_version, 11)
    return out, report


def cmd_shard(args: argparse.Namespace) -> int:
    """`onnxc shard`."""
    from onnxc.tools.driver import _load_model  # the driver's reader: clear errors for bad files

    model = _load_model(args.model)
    if args.strategy != "tensor-parallel":
        raise ShardError(f"unknown strategy {args.strategy!r} (known: tensor-parallel)")
    if args.emit:
        return _emit(model, args)
    annotated, report = tensor_parallel(model, args.devices)
    for line in report:
        print(line)
    output = args.output or args.model.removesuffix(".onnx") + f".tp{args.devices}.onnx"
    onnx.save(annotated, output)
    print(f"wrote {output} (configuration '{CONFIGURATION}', {args.devices} devices)", file=sys.stderr)
    return 0


def _emit(model: onnx.ModelProto, args: argparse.Namespace) -> int:
    """`--emit STAGE --rank R`: rank R's IR of an annotated model (annotated first with the
    strategy when it carries no annotations), for a job of `num_devices` ranks."""
    from onnxc.targets.distributed import configuration_of, is_annotated, lower_distributed

    if not is_annotated(model):
        model, _ = tensor_parallel(model, args.devices)
    config = configuration_of(model)
    assert config is not None  # is_annotated or tensor_parallel guarantee one
    if not 0 <= args.rank < config.num_devices:
        raise ShardError(f"--rank must be in 0..{config.num_devices - 1} for configuration '{config.name}'")
    module = lower_distributed(model, args.rank, config.num_devices, stage=args.emit, mpi=args.mpi)
    text = str(module)
    if args.output:
        Path(args.output).write_text(text)
    else:
        print(text)
    return 0


def add_subparser(sub: Any) -> argparse.ArgumentParser:
    """Register `shard` on the driver's sub-parsers."""
    s = sub.add_parser("shard", help="annotate a model for multi-device runs (IR 11 sharding specs)")
    s.add_argument("model", help="the ONNX model (.onnx)")
    s.add_argument("--devices", type=int, default=2, help="number of devices (MPI ranks) (default 2)")
    s.add_argument("--strategy", default="tensor-parallel", choices=("tensor-parallel",), help="how to split (default tensor-parallel)")
    s.add_argument("-o", "--output", help="the annotated model (default: <model>.tp<N>.onnx); with --emit, the IR file (default stdout)")
    s.add_argument("--emit", choices=("linalg", "partition", "vector", "bufferize", "llvm"),
                   help="print one rank's IR at this stage instead (the partitioned code and its MPI calls)")  # fmt: skip
    s.add_argument("--rank", type=int, default=0, help="the rank whose IR --emit prints (default 0)")
    s.add_argument("--mpi", choices=("MPICH", "OpenMPI"), default="MPICH", help="the MPI ABI of --emit llvm (default MPICH)")
    s.set_defaults(func=cmd_shard)
    return s


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m onnxc.tools.shard model.onnx ...` (same as `onnxc shard`)."""
    from onnxc.tools.driver import main as driver_main

    return driver_main(["shard", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
