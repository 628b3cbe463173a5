"""Compile and run an annotated ONNX model on one rank of an MPI job (issue 13).

What: `compile_distributed(model)` is what `onnxc.compile` does for a model that carries an IR 11
device configuration when the process was started by `mpirun` (`mpi_world()` reads the launcher's
environment): MPI is initialized through mpi4py, the rank count is checked against the
configuration's `num_devices`, and this rank's code is built:

    import -> onnx-passes -> onnx-to-shard -> ONNX to linalg            (same as one device)
    -> partition for this rank (`partition.py`: propagation, shard-partition, weight shards)
    -> cpu-to-vector -> collectives outlined and lowered to MPI -> cpu-bufferize -> cpu-to-llvm
    -> JIT (the MPI library loaded into the process)                    (`lowering.py`)

Every rank is called with the whole inputs and returns the whole outputs (the function's
arguments and results are pinned replicated), so the result is a plain `CompiledModel`: callers,
`onnxc run` and scripts treat it as any other. The compiled code calls MPI collectives, so every
rank must call it the same number of times (as with any MPI program).

Why MPICH by default: 22.1.8's OpenMPI lowering names `ompi_mpi_sum` (libmpi exports
`ompi_mpi_op_sum`) and truncates the split communicator to i32; MPICH works as generated.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import onnx
from mlir import ir

from onnxc.compiler import CompiledModel
from onnxc.errors import OnnxcError

__all__ = [
    "DistributedError",
    "DistributedModel",
    "compile_distributed",
    "compile_if_distributed",
    "configuration_of",
    "cpu_stages",
    "is_annotated",
    "lower_distributed",
    "mpi_world",
    "rank_module",
]


class DistributedError(OnnxcError):
    """A multi-device run cannot start (rank count, MPI missing, a model onnxc cannot split)."""


#: (rank, size) environment variables of the MPI launchers: MPICH's hydra (PMI), Open MPI, PMIx.
_LAUNCHER_ENV: tuple[tuple[str, str], ...] = (
    ("PMI_RANK", "PMI_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMIX_RANK", "PMIX_SIZE"),
)


def mpi_world(environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(rank, size) when this process was started by an MPI launcher, else None (read from the
    environment, so nothing is initialized just to ask)."""
    env = os.environ if environ is None else environ
    for rank_var, size_var in _LAUNCHER_ENV:
        if rank_var in env and size_var in env:
            try:
                return int(env[rank_var]), int(env[size_var])
            except ValueError:
                continue
    return None


def configuration_of(model: onnx.ModelProto, name: str = "") -> onnx.DeviceConfigurationProto | None:
    """The device configuration `name` of `model` (default: the first one a node refers to, else
    the first), or None."""
    if not name:
        used = {dc.configuration_id for n in model.graph.node for dc in n.device_configurations}
        name = next((c.name for c in model.configuration if c.name in used), "")
    for c in model.configuration:
        if not name or c.name == name:
            return c
    return None


def is_annotated(model: onnx.ModelProto) -> bool:
    """Whether `model` carries a device configuration that some main-graph node refers to."""
    names = {c.name for c in model.configuration}
    return bool(names) and any(dc.configuration_id in names for n in model.graph.node for dc in n.device_configurations)


@dataclasses.dataclass
class DistributedModel(CompiledModel):
    """One rank's compiled model: called like any `CompiledModel` (whole inputs, whole outputs on
    every rank); `rank`/`size` say where it runs (`onnxc run` lets rank 0 report)."""

    rank: int = 0
    size: int = 1


def _mpi_library() -> None:
    """Initialize MPI (mpi4py does it on import) and make the MPI library's symbols global, so the
    JIT resolves the compiled code's MPI calls (an extension module's libraries stay local)."""
    try:
        from mpi4py import MPI  # importing initializes MPI
    except ImportError as e:
        raise DistributedError(
            f"running a multi-device model under MPI needs mpi4py (pip install 'onnxc[mpi]') and an MPI library: {e}"
        ) from None
    from onnxc.targets.cpu.jit import _load_global

    version = MPI.Get_library_version()
    if "Open MPI" in version:
        raise DistributedError(
            "this MPI is Open MPI; onnxc generates MPICH-ABI code (MLIR 22.1.8's Open MPI lowering names "
            "ompi_mpi_sum instead of ompi_mpi_op_sum and truncates communicators): run under MPICH's mpirun"
        )
    errors = []
    for name in ("libmpi.so.12", "libmpich.so.12", "libmpi.so"):
        try:
            _load_global(name)
            return
        except OSError as e:
            errors.append(str(e))
    raise DistributedError("cannot load the MPI library for the compiled code: " + "; ".join(errors))


def _check_ranks(config: onnx.DeviceConfigurationProto, size: int) -> None:
    if config.num_devices != size:
        raise DistributedError(
            f"the model's device configuration '{config.name}' asks for {config.num_devices} devices, "
            f"but the MPI job has {size} ranks: start it with `mpirun -n {config.num_devices}`"
        )


def lower_distributed(
    model: onnx.ModelProto, rank: int, size: int, options: Any = None, *, stage: str = "llvm", configuration: str = ""
) -> ir.Module:
    """This rank's module at `stage`: 'linalg' (annotated, before partition), 'partition' (local
    shards and `shard` collectives; for pipeline stages, this rank's stage with send/recv calls),
    'vector', 'bufferize' or 'llvm' (MPI calls)."""
    from onnxc.targets.cpu.pipeline import CpuPipelineOptions

    stages = ("linalg", "partition", "vector", "bufferize", "llvm")
    if stage not in stages:
        raise DistributedError(f"unknown stage {stage!r}; expected one of {', '.join(stages)}")
    opts = options if options is not None else CpuPipelineOptions()
    module, p2p = rank_module(model, rank, size, configuration=configuration, stop_at_linalg=stage == "linalg")
    if stage in ("linalg", "partition"):
        return module
    return cpu_stages(module, size, opts, stage, p2p)


def rank_module(
    model: onnx.ModelProto, rank: int, size: int, *, configuration: str = "", stop_at_linalg: bool = False
) -> tuple[ir.Module, ir.Module | None]:
    """This rank's linalg module, partitioned (or, with `stop_at_linalg`, annotated only), and
    the module of its pipeline send/recv functions (None without pipeline stages)."""
    from onnxc.importers import import_model
    from onnxc.transforms import registry
    from onnxc.transforms.onnx_to_shard import annotate_io_names, to_shard
    from onnxc.transforms.pipeline import run_pipeline

    from .lowering import specialize_process_index
    from .partition import partition_for_rank, set_mpi_abi
    from .stages import pipeline_module, stage_of_nodes

    config = configuration_of(model, configuration)
    if config is None:
        raise DistributedError(f"the model has no device configuration{' ' + repr(configuration) if configuration else ''}")
    _check_ranks(config, size)
    staged = stage_of_nodes(model, config.name)
    if staged is not None:  # pipeline parallelism: this rank's stage, send/recv at the boundaries
        return pipeline_module(model, staged, rank, size)
    # The single-device `onnx-to-linalg` stage with onnx-to-shard after its ONNX passes (called,
    # not named in pipeline text, so any configuration name works).
    stage = registry.get_pipeline("onnx-to-linalg")
    head, _, rest = stage.text.partition(",") if stage is not None else ("", "", "")
    if head != "onnx-passes" or not rest:
        raise DistributedError(f"internal: the onnx-to-linalg pipeline no longer starts with onnx-passes: {stage}")
    module = import_model(annotate_io_names(model))
    run_pipeline(module, head, reraise=True)
    to_shard(module, config.name)
    run_pipeline(module, rest, reraise=True)
    if stop_at_linalg:
        return module, None
    module = partition_for_rank(module, rank)
    set_mpi_abi(module)
    specialize_process_index(module, rank)
    run_pipeline(module, "canonicalize,cse", reraise=True)
    return module, None


def compile_if_distributed(model: onnx.ModelProto, options: Any = None, *, source: Any = None) -> Any:
    """`onnxc.compile`'s hook: this rank's model when `model` is annotated and the process was
    started by an MPI launcher; None otherwise (the model then runs on one device, as the IR spec
    allows a backend to ignore the annotations). `source` is what the caller gave: a path's
    external data is loaded from beside it (`model` was read without it)."""
    world = mpi_world()
    if world is None or not is_annotated(model):
        return None
    options = _share_cores(options)
    if isinstance(source, (str, os.PathLike)) and any(
        t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer
    ):
        onnx.load_external_data_for_model(model, os.path.dirname(os.path.abspath(os.fspath(source))))
    return compile_distributed(model, options, world=world)


def _share_cores(options: Any) -> Any:
    """`options` with the default thread count (every core) divided among the ranks that share
    this machine (the launcher's `MPI_LOCALNRANKS` / `OMPI_COMM_WORLD_LOCAL_SIZE`): N ranks each
    spawning one thread per core would run N times too many threads. Other counts are kept."""
    from onnxc.targets.cpu.isa import host_cpu

    local = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    if options is None or not local or not local.isdigit() or int(local) < 2:
        return options
    cores = host_cpu().cores
    if dataclasses.is_dataclass(options) and getattr(options, "threads", None) == cores:
        return dataclasses.replace(options, threads=max(1, cores // int(local)))
    return options


def compile_distributed(
    model: onnx.ModelProto,
    options: Any = None,
    *,
    world: tuple[int, int] | None = None,
    configuration: str = "",
) -> Any:
    """This rank's `CompiledModel` for an annotated `model` (see the module docstring). `world`
    is (rank, size); by default the MPI launcher's."""
    from mlir.execution_engine import ExecutionEngine

    from onnxc.compiler import io_specs
    from onnxc.targets.cpu.jit import CompiledFunction, _load_global, copy_module, runtime_libraries, select_entry
    from onnxc.targets.cpu.pipeline import CpuPipelineOptions
    from onnxc.targets.cpu.pipeline import runtime_libraries as cpu_runtime_libraries

    world = world or mpi_world()
    if world is None:
        raise DistributedError("not started by an MPI launcher (mpirun): no rank to compile for")
    rank, size = world
    config = configuration_of(model, configuration)
    if config is None:
        raise DistributedError("the model has no device configuration")
    _check_ranks(config, size)  # before MPI starts: a wrong count fails at once on every rank
    _mpi_library()
    opts = options if options is not None else CpuPipelineOptions()
    linalg_module, p2p = rank_module(model, rank, size, configuration=configuration)
    signature = select_entry(linalg_module, None)
    lowered = cpu_stages(copy_module(linalg_module), size, opts, "llvm", p2p)
    for lib in cpu_runtime_libraries(opts):  # MLIR's async runtime for threaded code, as jit.py does
        _load_global(lib)
    with lowered.context:
        try:
            engine = ExecutionEngine(lowered, opt_level=opts.jit_opt_level, shared_libs=runtime_libraries())
        except RuntimeError as e:
            raise DistributedError(f"JIT: cannot create the execution engine for rank {rank}: {e}") from None
    function = CompiledFunction(signature, engine, lowered)
    inputs = io_specs(list(model.graph.input), {t.name: t for t in model.graph.initializer})
    outputs = io_specs(list(model.graph.output))
    return DistributedModel(inputs, outputs, function, "cpu", rank=rank, size=size)


def cpu_stages(module: ir.Module, size: int, options: Any, stop: str = "llvm", p2p: ir.Module | None = None) -> ir.Module:
    """A partitioned module (stage 'partition') through the CPU stages up to `stop` ('vector',
    'bufferize', 'llvm'), the collectives outlined before bufferization and merged back after
    (`lowering.py`), with the pipeline stages' send/recv functions `p2p`, in place."""
    from onnxc.targets.cpu.passes import STAGE_PASSES
    from onnxc.transforms.pipeline import run_pipeline

    from .lowering import lower_collectives_module, merge_collectives, outline_collectives

    run_pipeline(module, STAGE_PASSES["vector"].element(options), reraise=True)
    side = outline_collectives(module)
    if side is not None:
        lower_collectives_module(side, size)
    if stop != "vector":
        run_pipeline(module, STAGE_PASSES["bufferize"].element(options), reraise=True)
    merge_collectives(module, side)
    if p2p is not None:
        merge_collectives(module, p2p)
    if stop == "llvm":
        run_pipeline(module, STAGE_PASSES["llvm"].element(options), reraise=True)
        if side is not None or p2p is not None:
            # The CPU pipeline's conversions have no patterns for `mpi` ops; `convert-to-llvm`
            # gathers every dialect's LLVM conversion interface, the MPI dialect's included.
            run_pipeline(module, "convert-to-llvm,reconcile-unrealized-casts", reraise=True)
    return module
