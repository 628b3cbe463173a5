"""The child process of `partition._isolated`: partition one rank's module, bytecode in and out.

    python -m onnxc.targets.distributed.partition_worker IN.mlirbc OUT.mlirbc RANK

Why a process of its own: MLIR 22.1.8's sharding propagation and partition abort the process on
some IR (see `partition._isolated`); here an abort costs only this child. A module of its own (not
`partition.py` itself) so that `-m` does not re-execute a module the package already imported.
"""

from __future__ import annotations

import sys

from mlir import ir

from onnxc.targets.distributed.partition import grid_shapes, partition_in_context


def main(argv: list[str]) -> int:
    """Partition IN for RANK (steps 1-4 of `partition.py`) and write OUT."""
    source, target, rank = argv[0], argv[1], int(argv[2])
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        with open(source, "rb") as f:
            module = ir.Module.parse(f.read())
        partition_in_context(module, rank, grid_shapes(module))
        with open(target, "wb") as f:
            module.operation.write_bytecode(f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
