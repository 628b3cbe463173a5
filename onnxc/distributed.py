"""`onnxc.compile` of an IR 11 multi-device model on one rank of an MPI job (issue 13): the API half.

What: `compile_if_distributed(model, options)` is `onnxc.compile`'s hook. When the process was
started by an MPI launcher and `model` carries a device configuration, it builds this rank's code
with `onnxc.targets.distributed.rank_function` and wraps it in a `DistributedModel`, a plain
`CompiledModel` (whole inputs in, whole outputs out on every rank) that also says which rank it
is (`onnxc run` lets rank 0 report). Otherwise it returns None and the model runs on one device, as
the IR spec allows a backend to ignore the annotations.

Why here and not in targets/: the wrapper is an API object (`CompiledModel` lives in
`onnxc.compiler`), and the layering rule (test_layering.py) lets the API import the targets, not
the reverse.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import onnx

from onnxc.compiler import CompiledModel, io_specs
from onnxc.targets.distributed.runtime import is_annotated, mpi_world, rank_function, share_cores

__all__ = ["DistributedModel", "compile_distributed", "compile_if_distributed"]


@dataclasses.dataclass
class DistributedModel(CompiledModel):
    """One rank's compiled model: called like any `CompiledModel` (whole inputs, whole outputs on
    every rank); `rank`/`size` say where it runs (`onnxc run` lets rank 0 report)."""

    rank: int = 0
    size: int = 1


def compile_distributed(
    model: onnx.ModelProto,
    options: Any = None,
    *,
    world: tuple[int, int] | None = None,
    configuration: str = "",
) -> DistributedModel:
    """This rank's `DistributedModel` for an annotated `model`. `world` is (rank, size); by
    default the MPI launcher's."""
    function, rank, size = rank_function(model, options, world=world, configuration=configuration)
    inputs = io_specs(list(model.graph.input), {t.name: t for t in model.graph.initializer})
    outputs = io_specs(list(model.graph.output))
    return DistributedModel(inputs, outputs, function, "cpu", rank=rank, size=size)


def compile_if_distributed(model: onnx.ModelProto, options: Any = None, *, source: Any = None) -> DistributedModel | None:
    """`onnxc.compile`'s hook: this rank's model when `model` is annotated and the process was
    started by an MPI launcher; None otherwise. `source` is what the caller gave: a path's
    external data is loaded from beside it (`model` was read without it)."""
    world = mpi_world()
    if world is None or not is_annotated(model):
        return None
    options = share_cores(options)
    if isinstance(source, (str, os.PathLike)) and any(
        t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer
    ):
        onnx.load_external_data_for_model(model, os.path.dirname(os.path.abspath(os.fspath(source))))
    return compile_distributed(model, options, world=world)
