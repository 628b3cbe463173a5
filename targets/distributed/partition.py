"""Partition an annotated linalg module for one rank of an MPI run (issue 13).

What, in order (`partition_for_rank`):

1. `hoist_constants`: every non-splat tensor `arith.constant` of a function becomes a new argument
   of that function. Why: upstream `shard-partition` partitions `arith.constant` only when it is a
   splat (it fails, without a diagnostic, on a real weight matrix); an argument partitions to its
   local shard like any other value.
2. `sharding-propagation` and `shard-partition` (upstream, per function): the `shard` annotations
   of `onnx-to-shard` spread to every linalg op, then each op is rewritten on local shards with
   the collectives (`shard.all_reduce` for a contraction split on its reduction, ...) in place.
3. `rematerialize_constants`: each hoisted argument becomes a constant again, holding this rank's
   shard of the weight (computed with numpy from the argument's local type and the grid), and the
   argument is removed. Why per rank: each process keeps only its slice of the weights (the
   memory a tensor-parallel run saves) and the CPU pipeline still sees compile-time constants
   (packed once at compile time by data tiling).
4. `all_gather_to_all_reduce`: `shard.all_gather` does not legalize in 22.1.8's
   `convert-shard-to-mpi`, so each becomes the sum (an all-reduce) of zero tensors of the gathered
   shape into which every rank inserted its shard at its own offset: the same values, one
   collective that lowers.

Steps 1-4 run in a child process (`_isolated`): upstream aborts the process on some IR, and the
model must then still run (unpartitioned). The collectives become MPI in `lower_collectives` (`convert-shard-to-mpi` after vectorization,
see `pipeline.py`). Everything here is upstream MLIR; the module attribute `mpi.dlti` picks the
MPI ABI (MPICH by default).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, shard, tensor

from onnxc.errors import OnnxcError
from onnxc.importers.proto import location_label
from onnxc.transforms.onnx_to_shard import ShardingIgnoredWarning
from onnxc.transforms.onnx_utils import collect_ops, elements_attr, elements_to_numpy, numpy_dtype_of

__all__ = [
    "HoistedConstant",
    "PartitionError",
    "all_gather_to_all_reduce",
    "grid_shapes",
    "hoist_constants",
    "first_dynamic_value",
    "partition_for_rank",
    "partition_in_context",
    "strip_sharding",
    "pin_boundary",
    "process_index",
    "rematerialize_constants",
    "set_mpi_abi",
]


class PartitionError(OnnxcError):
    """The annotated module cannot be partitioned (an op upstream cannot partition, ...)."""


@dataclasses.dataclass
class HoistedConstant:
    """A weight turned into argument `index` of function `function` (by symbol); `value` is the
    whole (unpartitioned) array."""

    function: str
    index: int
    value: np.ndarray


def _functions(module: ir.Module) -> list[ir.Operation]:
    return [op.operation for op in module.body.operations if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)]


def _symbol(fn: ir.Operation) -> str:
    return ir.StringAttr(fn.attributes["sym_name"]).value


def grid_shapes(module: ir.Module) -> dict[str, tuple[int, ...]]:
    """Grid symbol -> shape of every `shard.grid` of the module."""
    out: dict[str, tuple[int, ...]] = {}
    for op in module.body.operations:
        if op.operation.name == "shard.grid":
            attrs = op.operation.attributes
            out[ir.StringAttr(attrs["sym_name"]).value] = tuple(int(d) for d in ir.DenseI64ArrayAttr(attrs["shape"]))
    return out


def process_index(rank: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The multi-index of `rank` in a grid of `shape` (row-major, as `shard` numbers processes)."""
    index = []
    for size in reversed(shape):
        index.append(rank % size)
        rank //= size
    return tuple(reversed(index))


def _set_function_inputs(fn: ir.Operation, inputs: list[ir.Type]) -> None:
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, list(ftype.results)))


def _arg_attrs(fn: ir.Operation, count: int) -> list[ir.Attribute]:
    empty = ir.DictAttr.get({}, context=fn.context)
    attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"])) if "arg_attrs" in fn.attributes else []
    return attrs + [empty] * (count - len(attrs))


def _constant_array(value: ir.Attribute, t: ir.RankedTensorType) -> np.ndarray | None:
    """A constant's value as numpy. `dense_resource` weights (the importer's form for large
    tensors) come back from `op.attributes` as plain `ir.Attribute`s, which
    `onnx_utils.elements_to_numpy` does not recognize, so the importer's reader is asked first."""
    from onnxc.importers.tensors import attribute_to_array

    try:
        array, _ = attribute_to_array(value)
        return np.asarray(array).reshape(list(t.shape))
    except (OnnxcError, ValueError, TypeError):
        return elements_to_numpy(value)


def hoist_constants(module: ir.Module) -> list[HoistedConstant]:
    """Turn the non-splat tensor constants of every function into trailing arguments (step 1)."""
    hoisted: list[HoistedConstant] = []
    for fn in _functions(module):
        block = fn.regions[0].blocks[0]
        for op in collect_ops(fn, lambda o: o.name == "arith.constant"):
            value = op.attributes["value"]
            if not isinstance(op.results[0].type, ir.RankedTensorType):
                continue
            if isinstance(value, ir.DenseElementsAttr) and ir.DenseElementsAttr(value).is_splat:
                continue
            array = _constant_array(value, ir.RankedTensorType(op.results[0].type))
            if array is None:
                continue  # unreadable (f8...): left as a constant; partition refuses it if sharded
            arg = block.add_argument(op.results[0].type, op.location)
            op.results[0].replace_all_uses_with(arg)
            op.erase()
            hoisted.append(HoistedConstant(_symbol(fn), arg.arg_number, array))
        count = len(block.arguments)
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get(_arg_attrs(fn, count))
        _set_function_inputs(fn, [a.type for a in block.arguments])
    return hoisted


def _grid_axes_for(factor: int, shape: Sequence[int]) -> list[int] | None:
    """The grid axes a tensor axis split into `factor` shards was split over: every axis when
    their product is the factor, else the first single axis of that size (`onnx-to-shard` splits
    over all devices, axes [0, 1] of a grouped grid, or over the groups, axis 0). None if none fits."""
    if int(np.prod(shape)) == factor:
        return list(range(len(shape)))
    for a, size in enumerate(shape):
        if size == factor:
            return [a]
    return None


def rematerialize_constants(
    module: ir.Module, hoisted: Sequence[HoistedConstant], rank: int, shape: Sequence[int]
) -> None:
    """Step 3: each hoisted argument becomes a constant holding this rank's shard; the argument
    is removed. The shard of each axis is read off the argument's local type: the number of
    shards (whole size / local size) names the grid axes it was split over (`_grid_axes_for`),
    this rank's coordinates on them the shard."""
    index = process_index(rank, shape)
    by_fn: dict[str, list[HoistedConstant]] = {}
    for h in hoisted:
        by_fn.setdefault(h.function, []).append(h)
    for fn in _functions(module):
        entries = sorted(by_fn.get(_symbol(fn), []), key=lambda h: h.index, reverse=True)
        if not entries:
            continue
        block = fn.regions[0].blocks[0]
        first = block.operations[0]
        for h in entries:
            arg = block.arguments[h.index]
            local = ir.RankedTensorType(arg.type)
            slices = []
            for axis, (full, part) in enumerate(zip(h.value.shape, local.shape)):
                if full == part:
                    slices.append(slice(None))
                    continue
                axes = _grid_axes_for(full // part, shape) if part and full % part == 0 else None
                if axes is None:
                    raise PartitionError(f"weight of shape {h.value.shape} was partitioned to {local.shape}, not an even split over the grid")
                shard_index = 0
                for a in axes:  # the linear index over the grid axes this tensor axis is split on
                    shard_index = shard_index * shape[a] + index[a]
                slices.append(slice(shard_index * part, (shard_index + 1) * part))
            piece = np.ascontiguousarray(h.value[tuple(slices)])
            attr = elements_attr(piece, local.element_type, name=f"shard{rank}_{h.index}")
            if attr is None:
                raise PartitionError(f"cannot hold a weight shard of element type {local.element_type}")
            with ir.InsertionPoint(first), arg.location:
                const = arith.ConstantOp(local, attr).result
            arg.replace_all_uses_with(const)
            block.erase_argument(h.index)
            attrs = _arg_attrs(fn, len(block.arguments) + 1)
            del attrs[h.index]
            fn.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
            _set_function_inputs(fn, [a.type for a in block.arguments])


def all_gather_to_all_reduce(module: ir.Module, rank: int) -> int:
    """Step 4: `shard.all_gather` -> zero-padded `shard.all_reduce` (sum); returns the count.
    The shard's offset is static: this rank's coordinate on the gathered grid axis. Only static
    shapes and one grid axis are rewritten; anything else stays and `convert-shard-to-mpi`
    reports it."""
    from mlir.dialects import linalg

    grids = grid_shapes(module)
    count = 0
    for op in collect_ops(module.operation, lambda o: o.name == "shard.all_gather"):
        src, result = op.operands[0], op.results[0]
        st, rt = ir.RankedTensorType(src.type), ir.RankedTensorType(result.type)
        grid = ir.FlatSymbolRefAttr(op.attributes["grid"]).value
        grid_axes = list(ir.DenseI16ArrayAttr(op.attributes["grid_axes"])) if "grid_axes" in op.attributes else []
        axis = ir.IntegerAttr(op.attributes["gather_axis"]).value
        if not (st.has_static_shape and rt.has_static_shape and len(grid_axes) == 1 and grid in grids):
            continue
        elem = rt.element_type
        dtype = numpy_dtype_of(elem)
        if dtype is None:
            continue
        coordinate = process_index(rank, grids[grid])[grid_axes[0]]
        offsets = [coordinate * st.shape[axis] if d == axis else 0 for d in range(st.rank)]
        with ir.InsertionPoint(op), op.location:
            zero = arith.ConstantOp(elem, 0.0 if dtype.kind == "f" else 0).result
            empty = tensor.EmptyOp(list(rt.shape), elem).result
            zeros = linalg.fill(zero, outs=[empty])
            placed = tensor.InsertSliceOp(src, zeros, [], [], [], offsets, list(st.shape), [1] * st.rank).result
            summed = shard.AllReduceOp(rt, grid, placed, grid_axes=ir.DenseI16ArrayAttr.get(grid_axes)).result
        result.replace_all_uses_with(summed)
        op.erase()
        count += 1
    return count


def pin_boundary(module: ir.Module, grid: str) -> None:
    """Every function's tensor arguments and results replicated: each process is called with the
    whole inputs and returns the whole outputs, so the compiled function keeps the model's
    signature (propagation could otherwise make an argument a local shard). A split input becomes
    a local slice (no communication); a split output is gathered."""
    ref = ir.FlatSymbolRefAttr.get(grid, module.context)
    for fn in _functions(module):
        block = fn.regions[0].blocks[0]
        ret = block.operations[len(block.operations) - 1]
        first = block.operations[0]
        for arg in block.arguments:
            if not isinstance(arg.type, ir.RankedTensorType):
                continue
            with ir.InsertionPoint(first), arg.location:
                sharding = shard.ShardingOp(ref, _replicated(), [], []).result
                pinned = shard.ShardOp(arg, sharding)
            arg.replace_all_uses_except(pinned.result, pinned.operation)
        for i, v in enumerate(list(ret.operands)):
            if not isinstance(v.type, ir.RankedTensorType):
                continue
            with ir.InsertionPoint(ret), ret.location:
                sharding = shard.ShardingOp(ref, _replicated(), [], []).result
                ret.operands[i] = shard.ShardOp(v, sharding, annotate_for_users=True).result


def _replicated() -> ir.Attribute:
    # No builder for the axis-array attribute in the bindings: parsed from its syntax.
    return ir.Attribute.parse("#shard<axisarray[[]]>")


def set_mpi_abi(module: ir.Module, implementation: str = "MPICH") -> None:
    """The module attribute `mpi.dlti` that picks the MPI ABI of `convert-shard-to-mpi`."""
    module.operation.attributes["mpi.dlti"] = ir.Attribute.parse(f'#dlti.map<"MPI:Implementation" = "{implementation}">', context=module.context)


def _run(module: ir.Module, text: str, what: str) -> None:
    from onnxc.transforms.pipeline import PipelineFailure, run_pipeline

    try:
        run_pipeline(module, text, reraise=True)
    except PipelineFailure as e:
        raise PartitionError(f"{what}: {e}") from None


def partition_for_rank(module: ir.Module, rank: int) -> ir.Module:
    """Steps 1-4 on a linalg module carrying `shard` annotations, for process `rank`. Returns the
    partitioned module, in a new context: the importing context keeps every weight blob of the
    whole model alive as long as it lives, so a rank that keeps only its shards must leave it. A
    module without a grid, or one left unpartitioned (with a warning), is returned itself."""
    grids = grid_shapes(module)
    if not grids:
        return module
    dynamic = first_dynamic_value(module)
    if dynamic is not None:
        # Upstream's sharding propagation asserts (a C++ abort) on `tensor.empty` with dynamic
        # sizes, so a model with dynamic shapes is not partitioned: each rank computes it whole,
        # which gives the same outputs, as the spec allows for annotations a backend ignores.
        warnings.warn(
            f"onnx-to-shard: {dynamic} has a dynamic shape; onnxc partitions static shapes only, so the "
            "sharding annotations are ignored and every rank computes the whole model",
            ShardingIgnoredWarning,
            stacklevel=2,
        )
        strip_sharding(module)
        return module
    try:
        partitioned = _isolated(module, rank)
        why = "aborted (an assertion in MLIR 22.1.8, printed above)"
    except PartitionError as e:  # e.g. an op on a split value without a sharding model (a reshape)
        partitioned, why = None, f"failed: {e}"
    if partitioned is None:
        # The annotations are hints (IR spec): one onnxc cannot partition is ignored, not an error.
        warnings.warn(
            f"onnx-to-shard: sharding propagation/partition {why}; the sharding annotations are "
            "ignored and every rank computes the whole model",
            ShardingIgnoredWarning,
            stacklevel=2,
        )
        strip_sharding(module)
        return module
    return partitioned


def partition_in_context(module: ir.Module, rank: int, grids: dict[str, tuple[int, ...]]) -> None:
    """Steps 1-4 in this process (the partition worker's body; `partition_for_rank` isolates it)."""
    with module.context, ir.Location.unknown():
        _partition(module, rank, grids)


def _isolated(module: ir.Module, rank: int) -> ir.Module | None:
    """Steps 1-4 on `module` run in a child Python process (`python -m
    onnxc.targets.distributed.partition_worker IN OUT RANK`, MLIR bytecode both ways); the result parsed
    back into a new context (see `partition_for_rank`), or None when the child was killed by a
    signal.

    Why: upstream's sharding propagation and partition abort the process on IR they do not
    support (a value whose users ask for different shardings, `tensor.empty` with dynamic sizes),
    and which IR does cannot be told beforehand; in a child the abort costs this attempt only and
    the model then runs unpartitioned. (A fork would be cheaper, but the bindings' thread pool makes
    a forked child deadlock.) An error in the child comes back as a `PartitionError`."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="onnxc-partition-") as tmp:
        source, target = os.path.join(tmp, "in.mlirbc"), os.path.join(tmp, "out.mlirbc")
        with open(source, "wb") as f:
            module.operation.write_bytecode(f)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_", "HYDRA_", "MPIR_"))}
        r = subprocess.run(
            [sys.executable, "-m", "onnxc.targets.distributed.partition_worker", source, target, str(rank)],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
        if r.returncode < 0:
            sys.stderr.write(r.stderr)
            return None
        if r.returncode != 0:
            lines = [l.strip() for l in r.stderr.strip().splitlines() if l.strip()]
            errors = [l for l in lines if "error:" in l and not l.startswith("File ")]
            raise PartitionError(errors[0] if errors else lines[-1] if lines else f"the partition worker failed (exit {r.returncode})")
        with open(target, "rb") as f:
            data = f.read()
    context = ir.Context()
    context.allow_unregistered_dialects = True
    return ir.Module.parse(data, context=context)


def first_dynamic_value(module: ir.Module) -> str | None:
    """A description of the first value of a ranked tensor type with a dynamic dim (an op's
    result or a function argument), or None when every shape is static."""
    for fn in _functions(module):
        for arg in fn.regions[0].blocks[0].arguments:
            if isinstance(arg.type, ir.RankedTensorType) and not ir.RankedTensorType(arg.type).has_static_shape:
                return f"argument {arg.arg_number} of @{_symbol(fn)}"
        for op in collect_ops(fn):
            for r in op.results:
                if isinstance(r.type, ir.RankedTensorType) and not ir.RankedTensorType(r.type).has_static_shape:
                    label, kind = location_label(op.location)
                    return f"node '{label}' ({kind})" if label else f"a {op.name} op"
    return None


def strip_sharding(module: ir.Module) -> None:
    """Remove every `shard` annotation and grid: the module then runs whole on each rank."""
    for op in collect_ops(module.operation, lambda o: o.name == "shard.shard"):
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
    for op in collect_ops(module.operation, lambda o: o.name == "shard.sharding"):
        op.erase()
    for op in list(module.body.operations):
        if op.operation.name == "shard.grid":
            op.operation.erase()


def _partition(module: ir.Module, rank: int, grids: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    if len(grids) != 1:
        raise PartitionError(f"one device grid per model is supported, found {len(grids)}")
    (shape,) = grids.values()
    pin_boundary(module, next(iter(grids)))
    hoisted = hoist_constants(module)
    # Keep-dims reductions (Softmax, normalizations) lower to a reduction, a `tensor.expand_shape`
    # adding a unit dim, and a generic reading it through a constant-0 index map; neither the
    # reshape nor such a map has a sharding model upstream. Folding unit dims removes both.
    _run(module, "linalg-fold-unit-extent-dims,canonicalize,cse", "unit-dim folding")
    _run(module, "func.func(sharding-propagation),func.func(shard-partition),canonicalize,cse", "shard-partition")
    rematerialize_constants(module, hoisted, rank, shape)
    all_gather_to_all_reduce(module, rank)
    _run(module, "canonicalize,cse", "cleanup after partition")
    return grids

