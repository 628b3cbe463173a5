"""A partitioned module through the CPU pipeline, with its collectives lowered to MPI (issue 13).

What (`lower_partitioned`): the CPU target's stages run as they do for one device, with three
steps of this module between them:

1. `specialize_process_index` (before vectorization): `shard.process_multi_index` /
   `shard.process_linear_index` become constants. Each process compiles its own code (the weights
   it holds are its own shards already), so its place in the grid is known at compile time, and
   the partition's `scf.if (rank == 0)` branches fold away.
2. `outline_collectives` (after `cpu-to-vector`, before `cpu-bufferize`): every remaining `shard`
   collective (all-reduce, all-slice, ...) becomes a `func.call` of a private, bodiless function.
   Why: `buffer-deallocation-pipeline` (part of `cpu-bufferize`) refuses the MPI ops
   (`ops with unknown memory side effects are not supported`), and one-shot bufferization has no
   model for `shard` ops on tensors; a call to an external function both understand. The
   collectives go into a module of their own, lowered by `convert-shard-to-mpi` and
   bufferized without the deallocation pass: each function copies its argument into a fresh
   buffer, reduces it in place with MPI and returns it (the caller owns and frees it).
3. `merge_collectives` (after `cpu-bufferize`): the lowered bodies replace the declarations, and
   `cpu-to-llvm` lowers everything (the `mpi` ops through the MPI dialect's LLVM conversion
   interface, which the CPU pipeline's `convert-func-to-llvm` picks up).

A collective over the whole grid uses `MPI_COMM_WORLD` itself: `convert-shard-to-mpi` emits an
`MPI_Comm_split` per call, which would create (and never free) a communicator per inference; a
split with one color over every process is `MPI_COMM_WORLD` in rank order, so it is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith, func

from onnxc.transforms.onnx_utils import collect_ops

from .partition import PartitionError, grid_shapes, process_index, set_mpi_abi

__all__ = [
    "COLLECTIVE_PREFIX",
    "collective_symbols",
    "lower_collectives_module",
    "merge_collectives",
    "outline_collectives",
    "patch_openmpi",
    "check_openmpi",
    "specialize_process_index",
]

#: Symbol prefix of the outlined collective functions.
COLLECTIVE_PREFIX = "onnxc_collective_"

#: `shard` ops that are annotations or queries, not communication.
_NOT_COLLECTIVES = {"shard.grid", "shard.sharding", "shard.shard", "shard.process_multi_index",
                    "shard.process_linear_index", "shard.grid_shape", "shard.shard_shape", "shard.get_sharding"}


def _grid_of(op: ir.Operation, grids: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    name = ir.FlatSymbolRefAttr(op.attributes["grid"]).value
    if name not in grids:
        raise PartitionError(f"{op.name} refers to an unknown grid @{name}")
    return grids[name]


def specialize_process_index(module: ir.Module, rank: int) -> int:
    """Step 1: this process's grid coordinates as constants; returns how many ops were replaced."""
    grids = grid_shapes(module)
    count = 0
    ops = collect_ops(module.operation, lambda o: o.name in ("shard.process_multi_index", "shard.process_linear_index"))
    for op in ops:
        shape = _grid_of(op, grids)
        coords = process_index(rank, shape)
        if op.name == "shard.process_linear_index":
            values = [rank]
        else:
            axes = list(ir.DenseI16ArrayAttr(op.attributes["axes"])) if "axes" in op.attributes else []
            values = [coords[a] for a in axes] if axes else list(coords)
        with ir.InsertionPoint(op), op.location:
            consts = [arith.ConstantOp(ir.IndexType.get(), v).result for v in values]
        for result, const in zip(op.results, consts):
            result.replace_all_uses_with(const)
        op.erase()
        count += 1
    return count


def outline_collectives(module: ir.Module) -> ir.Module | None:
    """Step 2: replace each collective by a call of a bodiless private function; returns the
    module of their definitions (still `shard` ops on tensors), or None when there are none."""
    ops = collect_ops(module.operation, lambda o: o.name.startswith("shard.") and o.name not in _NOT_COLLECTIVES)
    if not ops:
        return None
    context = module.context
    with context, ir.Location.unknown(context):
        side = ir.Module.create()
    for name in module.operation.attributes:
        if name == "mpi.dlti":
            side.operation.attributes[name] = module.operation.attributes[name]
    for op in module.body.operations:
        if op.operation.name == "shard.grid":
            op.operation.clone(ip=ir.InsertionPoint(side.body))
    first_fn = next(op for op in module.body.operations if op.operation.name == "func.func")
    for i, op in enumerate(ops):
        for v in op.operands:
            if not isinstance(v.type, ir.RankedTensorType):
                raise PartitionError(f"{op.name} has a non-tensor operand ({v.type}); it cannot be outlined")
        symbol = f"{COLLECTIVE_PREFIX}{i}"
        in_types = [v.type for v in op.operands]
        out_types = [r.type for r in op.results]
        ftype = ir.FunctionType.get(in_types, out_types, context=context)
        with ir.InsertionPoint(first_fn), op.location:
            func.FuncOp(symbol, ftype, visibility="private")
        with ir.InsertionPoint(side.body), op.location:
            definition = func.FuncOp(symbol, ftype, visibility="private")
            block = definition.add_entry_block()
        with ir.InsertionPoint(block), op.location:
            mapping = list(block.arguments)
            clone = op.clone()
            for j, arg in enumerate(mapping):
                clone.operands[j] = arg
            func.ReturnOp(list(clone.results))
        with ir.InsertionPoint(op), op.location:
            call = func.CallOp(out_types, ir.FlatSymbolRefAttr.get(symbol, context), list(op.operands))
        for old, new in zip(op.results, call.results):
            old.replace_all_uses_with(new)
        op.erase()
    return side


def _whole_grid_splits(side: ir.Module, world_size: int) -> None:
    """Drop `mpi.comm_split`s that keep every process in one group (see the module docstring)."""
    for split in collect_ops(side.operation, lambda o: o.name == "mpi.comm_split"):
        color = split.operands[1].owner
        if not (isinstance(color, (ir.Operation, ir.OpView)) and color.name == "arith.constant"):
            continue
        # The key is the rank modulo the group size; with one group of every process it is the
        # rank itself, so the new communicator is the old one in the same order.
        if world_size and _group_size(split) == world_size:
            split.results[0].replace_all_uses_with(split.operands[0])
            split.erase()


def _group_size(split: ir.Operation) -> int | None:
    """The modulus of `key = rank % n` that convert-shard-to-mpi computes for a comm_split."""
    key = split.operands[2].owner
    while isinstance(key, (ir.Operation, ir.OpView)) and key.name == "arith.index_cast":
        key = key.operands[0].owner
    if isinstance(key, (ir.Operation, ir.OpView)) and key.name == "arith.remsi":
        modulus = key.operands[1].owner
        if isinstance(modulus, (ir.Operation, ir.OpView)) and modulus.name == "arith.constant":
            return ir.IntegerAttr(modulus.attributes["value"]).value
    return None


def lower_collectives_module(side: ir.Module, world_size: int, implementation: str = "MPICH") -> None:
    """The outlined collectives to MPI on buffers (no deallocation pass: see step 2)."""
    from onnxc.transforms.pipeline import PipelineFailure, run_pipeline

    set_mpi_abi(side, implementation)
    try:
        run_pipeline(
            side,
            "convert-shard-to-mpi,canonicalize,cse,"
            "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},"
            "canonicalize,cse",
            reraise=True,
        )
    except PipelineFailure as e:
        raise PartitionError(f"lowering the collectives to MPI: {e}") from None
    _whole_grid_splits(side, world_size)
    leftovers = collect_ops(side.operation, lambda o: o.name.startswith("shard.") and o.name != "shard.grid")
    if leftovers:
        names = sorted({o.name for o in leftovers})
        raise PartitionError(f"collectives MPI lowering does not support in 22.1.8: {', '.join(names)}")


def merge_collectives(module: ir.Module, side: ir.Module | None) -> None:
    """Step 3: the lowered definitions of `side` (None: there were no collectives) replace their
    declarations in `module`; the grid ops, which nothing refers to any more, are removed (they
    have no LLVM lowering)."""
    definitions = {
        ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
        for op in (side.body.operations if side is not None else [])
        if op.operation.name == "func.func"
    }
    for op in list(module.body.operations):
        op = op.operation
        if op.name == "func.func":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if name in definitions and not len(op.regions[0].blocks):
                definitions[name].clone(ip=ir.InsertionPoint(op))
                op.erase()
    for op in list(module.body.operations):
        if op.operation.name == "shard.grid":
            op.operation.erase()


def collective_symbols(module: ir.Module) -> Sequence[str]:
    """The outlined collective functions of `module` (for tests and `--emit`)."""
    return [
        ir.StringAttr(op.operation.attributes["sym_name"]).value
        for op in module.body.operations
        if op.operation.name == "func.func" and ir.StringAttr(op.operation.attributes["sym_name"]).value.startswith(COLLECTIVE_PREFIX)
    ]


#: MPI reduction operations, as 22.1.8's Open MPI lowering names their handles (`ompi_mpi_<op>`);
#: libmpi exports them as `ompi_mpi_op_<op>`.
_OPENMPI_OPS = ("sum", "max", "min", "prod", "land", "band", "lor", "bor", "lxor", "bxor", "maxloc", "minloc", "replace", "no_op")


def patch_openmpi(module: ir.Module) -> int:
    """Fix 22.1.8's Open MPI lowering in an LLVM-dialect module: the reduction handles it refers
    to as `@ompi_mpi_sum` (etc.) are `@ompi_mpi_op_sum` in libmpi, so the global declarations and
    every `llvm.mlir.addressof` of them are renamed. Returns how many ops changed. (Its other
    problem, the communicator of `MPI_Comm_split` truncated to i32, is avoided, not patched:
    `check_openmpi` refuses modules that still split.)"""
    renames = {f"ompi_mpi_{op}": f"ompi_mpi_op_{op}" for op in _OPENMPI_OPS}
    count = 0
    for op in collect_ops(module.operation, lambda o: o.name in ("llvm.mlir.global", "llvm.mlir.addressof")):
        key = "sym_name" if op.name == "llvm.mlir.global" else "global_name"
        if key not in op.attributes:
            continue
        attr = op.attributes[key]
        name = ir.StringAttr(attr).value if op.name == "llvm.mlir.global" else ir.FlatSymbolRefAttr(attr).value
        if name in renames:
            new = renames[name]
            ctx = module.context
            op.attributes[key] = ir.StringAttr.get(new, ctx) if op.name == "llvm.mlir.global" else ir.FlatSymbolRefAttr.get(new, ctx)
            count += 1
    return count


def check_openmpi(module: ir.Module) -> None:
    """Refuse what 22.1.8 lowers wrongly for Open MPI: `MPI_Comm_split` (its communicator, a
    pointer in Open MPI's ABI, is truncated to i32: a segfault). Collectives over the whole grid
    use MPI_COMM_WORLD and do not split; device groups (part of a grid) do."""
    if collect_ops(module.operation, lambda o: o.name == "mpi.comm_split"):
        raise PartitionError(
            "with Open MPI, collectives over device groups need MPI_Comm_split, whose MLIR 22.1.8 lowering "
            "truncates Open MPI's communicator (a crash): run this model under MPICH"
        )
