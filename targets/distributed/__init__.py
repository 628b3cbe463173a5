"""Multi-device execution of IR 11 annotated models under MPI (issue 13).

`runtime.rank_function` builds one rank's code (`onnxc.distributed` wraps it as a `CompiledModel`): `onnx-to-shard` (transforms) turns the model's
device configuration and node sharding specs into `shard` dialect annotations, `partition.py` runs
upstream sharding propagation and partition and keeps only this rank's weight shards,
`lowering.py` lowers the collectives to the `mpi` dialect around the CPU pipeline. `onnxc.compile`
and `onnxc run` route an annotated model here when the process was started by `mpirun`.
"""

from __future__ import annotations

from .runtime import DistributedError, configuration_of, is_annotated, lower_distributed, mpi_world, rank_function

__all__ = ["DistributedError", "configuration_of", "is_annotated", "lower_distributed", "mpi_world", "rank_function"]
