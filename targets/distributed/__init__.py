"""Multi-device execution of IR 11 annotated models under MPI (issue 13).

`runtime.compile_distributed` builds one rank's code: `onnx-to-shard` (transforms) turns the model's
device configuration and node sharding specs into `shard` dialect annotations, `partition.py` runs
upstream sharding propagation and partition and keeps only this rank's weight shards,
`lowering.py` lowers the collectives to the `mpi` dialect around the CPU pipeline. `onnxc.compile`
and `onnxc run` route an annotated model here when the process was started by `mpirun`.
"""

from __future__ import annotations

from .runtime import DistributedError, compile_distributed, configuration_of, is_annotated, lower_distributed, mpi_world

__all__ = ["DistributedError", "compile_distributed", "configuration_of", "is_annotated", "lower_distributed", "mpi_world"]
