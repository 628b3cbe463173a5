"""Run-time specialization for the GPU targets: dynamic shapes and host-read inputs made static per call.

Why: the GPU mapping tiles static loop extents, and its host program has fixed buffer sizes and
launch grids. A model with a dynamic dim (a `dim_param` batch or sequence length) or whose
shapes depend on input *values* (Resize's `scales`, Range's `limit`, OneHot's `depth`: the
output shape is data) has neither at compile time. The issue's design keeps data-dependent
shapes on the host: here the host is the Python side of the runtime, which, at each call, reads
the call's shapes and the few inputs that shape computations read (`host_read_arguments`),
makes them static in a copy of the linalg module (`specialize`), and compiles that copy for the
target once per distinct key (`SpecializingFunction`, cached). Every kernel then sees static
sizes, so nothing is guessed: a call whose shapes or host-read values differ gets its own
program, never another call's.

Dynamic dims are specialized by default (`VulkanOptions`/`CudaOptions` `dynamic_shapes=
"specialize"`; "refuse" refuses them naming the node). Shape-generic lowering produces IR that
static models do not (gathers by index inside reductions, clamped broadcast indices), and the
first differential run over it found a mapping bug (fixed); the default flipped once the hub
architectures with dynamic axes matched the CPU target (test_gpu_differential.py).

What is made static:
- an argument with dynamic dims gets the call's static type (a `tensor.cast` back to the
  declared type feeds its old uses, so canonicalization folds the sizes through every op);
- an argument read on the host (`tensor.extract` outside a kernel body, through view-like ops)
  of at most `MAX_VALUE_ELEMENTS` elements is replaced by an `arith.constant` of the call's value
  (the argument stays in the signature, unused), so the sizes computed from it fold;
- function results whose value is then a cast from a static type return that static type;
- small linalg results that host code reads and that depend on constants alone once the above
  is done (Compress's count of true conditions, from the condition made a constant) are computed
  on the CPU target and become constants (`_host_values_on_cpu`): upstream's canonicalization
  folds no linalg op, and without it such a size stays dynamic (a host-side `memref.load`).

A module that needs none of this is compiled ahead of time as before (`needs_specialization`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith, tensor
from mlir.dialects import func as func_dialect

from onnxc.errors import OnnxcError

__all__ = ["MAX_VALUE_ELEMENTS", "SpecializingFunction", "host_read_arguments", "needs_specialization", "specialize"]

#: Host-read arguments up to this many elements are specialized by value (shape-like inputs:
#: scales, sizes, limits); larger ones are data, read by kernels, and stay arguments.
MAX_VALUE_ELEMENTS = 64

#: Specialized programs kept per compiled model (least recently used dropped first).
CACHE_SIZE = 8

#: Ops through which an argument is still "the argument" for the host-read analysis.
_VIEWS = ("tensor.cast", "tensor.collapse_shape", "tensor.expand_shape", "tensor.extract_slice", "tensor.reshape")


class SpecializationError(OnnxcError):
    """A call's arrays cannot specialize the module (a rank or dtype the signature refuses)."""


def _entry(module: ir.Module, name: str) -> ir.Operation:
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    raise SpecializationError(f"no function @{name} in the module")


def _in_kernel_body(op: ir.Operation, func: ir.Operation) -> bool:
    """Whether `op` sits in the body of a linalg op (per-element code, which becomes a kernel)."""
    parent = op.parent
    while parent is not None and parent != func:
        if parent.name.startswith("linalg."):
            return True
        parent = parent.parent
    return False


def host_read_arguments(module: ir.Module, name: str) -> set[int]:
    """Indices of @name's tensor arguments whose elements the host code reads (`tensor.extract`
    outside any linalg body, directly or through view-like ops): the inputs that sizes, trip
    counts or host-side values are computed from."""
    func = _entry(module, name)
    found: set[int] = set()
    for i, arg in enumerate(func.regions[0].blocks[0].arguments):
        work = [arg]
        while work:
            v = work.pop()
            for use in v.uses:
                owner = use.owner
                if owner.name == "tensor.extract" and not _in_kernel_body(owner, func):
                    found.add(i)
                elif owner.name in _VIEWS:
                    work.extend(owner.results)
    return found


def _dynamic(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType) and not ir.RankedTensorType(t).has_static_shape


def needs_specialization(module: ir.Module, name: str, dynamic_dims: bool = False) -> bool:
    """Whether @name is compiled per call (`SpecializingFunction`): it reads a small argument on
    the host (the values set shapes), or, with `dynamic_dims` (the targets' default
    `dynamic_shapes="specialize"`), it has a dynamically shaped argument or result. Without
    `dynamic_dims` such a module is compiled ahead of time, and the mapping refuses its dynamic
    shapes naming the node."""
    func = _entry(module, name)
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    if any(_dynamic(t) for t in list(ftype.inputs) + list(ftype.results)):
        return dynamic_dims
    return any(
        int(np.prod(ir.RankedTensorType(ftype.inputs[i]).shape, dtype=np.int64)) <= MAX_VALUE_ELEMENTS
        for i in host_read_arguments(module, name)
        if isinstance(ftype.inputs[i], ir.RankedTensorType) and ir.RankedTensorType(ftype.inputs[i]).has_static_shape
    )


def _constant(value: np.ndarray, t: ir.RankedTensorType) -> ir.Value:
    if value.dtype == np.bool_:  # i1 elements are taken bit-packed, least significant bit first
        attr = ir.DenseElementsAttr.get(np.packbits(value.ravel(), bitorder="little"), type=t)
    else:
        attr = ir.DenseElementsAttr.get(np.ascontiguousarray(value), type=t)
    return arith.ConstantOp(t, attr).result


def specialize(module: ir.Module, name: str, arrays: Sequence[np.ndarray], by_value: set[int]) -> ir.Module:
    """A copy of `module` with @name specialized to `arrays` (see the module doc): dynamic
    argument dims made the arrays' dims, arguments in `by_value` (small enough) replaced by
    their values, then canonicalized so that the sizes fold; results made static where they
    became so."""
    from onnxc.targets.cpu.jit import copy_module

    from .mapping import run_pipeline

    out = copy_module(module)
    with out.context, ir.Location.unknown():
        func = _entry(out, name)
        block = func.regions[0].blocks[0]
        ip = ir.InsertionPoint.at_block_begin(block)
        for i, (arg, a) in enumerate(zip(block.arguments, arrays)):
            if not isinstance(arg.type, ir.RankedTensorType):
                continue
            declared = ir.RankedTensorType(arg.type)
            if declared.rank != a.ndim:
                raise SpecializationError(f"@{name} argument {i}: rank {a.ndim}, the function takes {declared}")
            static = ir.RankedTensorType.get(list(a.shape), declared.element_type)
            if i in by_value and a.size <= MAX_VALUE_ELEMENTS:
                with ip:
                    value = _constant(a, static)
                    if static != declared:
                        value = tensor.CastOp(declared, value).result
                arg.replace_all_uses_with(value)
            elif static != declared:
                arg.set_type(static)
                with ip:
                    cast = tensor.CastOp(declared, arg)
                arg.replace_all_uses_except(cast.result, cast.operation)
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([a.type for a in block.arguments], list(ftype.results)))
        run_pipeline(out, "builtin.module(canonicalize,cse,canonicalize)", "specialization to the call's shapes")
        for _ in range(8):  # each round may expose more constant shapes downstream
            if not (_fold_extracts_of_inserts(func) + _static_reshapes(func) + _host_values_on_cpu(out, name, arrays)):
                break
            run_pipeline(out, "builtin.module(canonicalize,cse)", "specialization to the call's shapes")
        _static_results(func)
        run_pipeline(out, "builtin.module(canonicalize,cse)", "specialization to the call's shapes")
    return out


def _constant_index(v: ir.Value) -> int | None:
    """The value of an `arith.constant` of index type, else None."""
    if not isinstance(v, ir.OpResult):
        return None
    owner = v.owner.operation if hasattr(v.owner, "operation") else v.owner
    if owner.name != "arith.constant" or not isinstance(owner.attributes["value"], ir.IntegerAttr):
        return None
    return ir.IntegerAttr(owner.attributes["value"]).value


def _fold_extracts_of_inserts(func: ir.Operation) -> int:
    """`tensor.extract` at constant indices from a `tensor.insert_slice` with static offsets,
    sizes and unit strides reads the inserted source (inside the slice) or the destination
    (outside): shape vectors built by Concat of constants (Reshape's target computed from
    Shape(x)) then fold to constants, which upstream's canonicalization does not do."""
    from .mapping import collect

    count = 0
    for op in collect(func, lambda op: op.name == "tensor.extract"):
        src = op.operands[0]
        owner = (src.owner.operation if hasattr(src.owner, "operation") else src.owner) if isinstance(src, ir.OpResult) else None
        if owner is None or owner.name != "tensor.insert_slice" or len(owner.operands) != 2:
            continue  # dynamic offsets/sizes/strides are operands beyond source and dest
        indices = [_constant_index(v) for v in list(op.operands)[1:]]
        if any(i is None for i in indices):
            continue
        offsets = list(ir.DenseI64ArrayAttr(owner.attributes["static_offsets"]))
        sizes = list(ir.DenseI64ArrayAttr(owner.attributes["static_sizes"]))
        strides = list(ir.DenseI64ArrayAttr(owner.attributes["static_strides"]))
        source_type = ir.RankedTensorType(owner.operands[0].type)
        if any(s != 1 for s in strides) or source_type.rank != len(indices):
            continue  # rank-reducing or strided inserts: left alone
        inside = all(o <= i < o + n for i, o, n in zip(indices, offsets, sizes))
        if inside:
            with ir.InsertionPoint(op), op.location:
                shifted = [arith.ConstantOp(ir.IndexType.get(), i - o).result for i, o in zip(indices, offsets)]
                new = tensor.ExtractOp(owner.operands[0], shifted).result
            op.results[0].replace_all_uses_with(new)
            op.erase()
        else:
            op.operands[0] = owner.operands[1]
        count += 1
    return count


def _static_reshapes(func: ir.Operation) -> int:
    """`tensor.reshape` whose shape operand became a constant gets that static result type (a
    `tensor.cast` back to the old type feeds its users, and canonicalization folds it onward):
    upstream's canonicalization has no such fold, and ONNX Reshape lowers to tensor.reshape."""
    from .mapping import collect

    def constant_of(v: ir.Value) -> ir.Operation | None:
        if not isinstance(v, ir.OpResult):
            return None
        owner = v.owner.operation if hasattr(v.owner, "operation") else v.owner
        return owner if owner.name == "arith.constant" else None

    found = [
        op for op in collect(func, lambda op: op.name == "tensor.reshape")
        if _dynamic(op.results[0].type) and constant_of(op.operands[1]) is not None
    ]
    count = 0
    for op in collect(func, lambda op: op.name == "tensor.reshape"):  # a cast to a dynamic source folds away
        src = op.operands[0]
        owner = (src.owner.operation if hasattr(src.owner, "operation") else src.owner) if isinstance(src, ir.OpResult) else None
        if owner is not None and owner.name == "tensor.cast" and _dynamic(src.type) and not _dynamic(owner.operands[0].type):
            op.operands[0] = owner.operands[0]
            count += 1
    for op in found:
        value = constant_of(op.operands[1]).attributes["value"]
        if not isinstance(value, ir.DenseIntElementsAttr):
            continue
        shape = [int(v) for v in np.array(ir.DenseIntElementsAttr(value))] if not ir.DenseIntElementsAttr(value).is_splat else None
        if shape is None or any(d < 0 for d in shape):
            continue
        old = ir.RankedTensorType(op.results[0].type)
        static = ir.RankedTensorType.get(shape, old.element_type)
        with ir.InsertionPoint(op), op.location:
            new = tensor.ReshapeOp(static, op.operands[0], op.operands[1]).result
            cast = tensor.CastOp(old, new).result
        op.results[0].replace_all_uses_with(cast)
        op.erase()
        count += 1
    return count


def _defining_op(v: ir.Value) -> ir.Operation | None:
    if not isinstance(v, ir.OpResult):
        return None
    return v.owner.operation if hasattr(v.owner, "operation") else v.owner


def _depends_on_arguments(op: ir.Operation, func: ir.Operation, memo: dict[ir.Operation, bool]) -> bool:
    """Whether `op`'s operands, or values its regions use from outside, come from @func's
    arguments, directly or through the ops that compute them."""
    if op in memo:
        return memo[op]
    from .mapping import collect

    memo[op] = True  # a cycle (none in SSA at this level) would count as dependent
    entry_args = set(func.regions[0].blocks[0].arguments)
    nested = collect(op, lambda o: True)  # op and every op in its regions
    inside = {r for o in nested for r in o.results} | {a for o in nested for region in o.regions for b in region.blocks for a in b.arguments}
    result = False
    for o in nested:
        for v in o.operands:
            if v in inside:
                continue
            if v in entry_args:
                result = True
                break
            owner = _defining_op(v)
            if owner is None or _depends_on_arguments(owner, func, memo):
                result = True  # a block argument of an enclosing loop, or an argument-fed op
                break
        if result:
            break
    memo[op] = result
    return result


def entry_returning(module: ir.Module, name: str, pick: Callable[[list[ir.Operation]], list[ir.Value]], what: str) -> ir.Module:
    """A copy of `module` whose @name returns `pick(its top-level ops)` instead of the model's
    results, canonicalized: every computation neither those values nor a side effect (a run-time
    check's store into the status channel) needs is gone. The slice of the model that
    `_host_values_on_cpu` and the GPU targets' run-time checks (`checks.py`) run on the CPU."""
    from onnxc.targets.cpu.jit import copy_module

    from .mapping import run_pipeline

    probe = copy_module(module)
    with probe.context, ir.Location.unknown():
        pfunc = _entry(probe, name)
        pops = [o.operation for o in pfunc.regions[0].blocks[0].operations]
        values = pick(pops)
        ret = pops[-1]
        with ir.InsertionPoint(ret), ret.location:
            func_dialect.ReturnOp(values)
        ret.erase()
        ftype = ir.FunctionType(ir.TypeAttr(pfunc.attributes["function_type"]).value)
        pfunc.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), [v.type for v in values]))
        if "res_attrs" in pfunc.attributes:  # they describe the model's results, not these
            del pfunc.attributes["res_attrs"]
        run_pipeline(probe, "builtin.module(canonicalize,cse)", what)
    return probe


def _host_values_on_cpu(module: ir.Module, name: str, arrays: Sequence[np.ndarray]) -> int:
    """Compute on the CPU target the linalg results that host code reads (`tensor.extract`
    outside a kernel body) and that depend on constants alone: static, at most
    `MAX_VALUE_ELEMENTS` elements, in @name's top-level block. A copy of the module returns just
    them (everything else is dead and canonicalized away), is JIT-compiled for the CPU and run;
    their uses then take `arith.constant`s of the values. Returns how many were replaced."""
    from onnxc.targets.cpu import CpuPipelineOptions
    from onnxc.targets.cpu.jit import compile_module

    func = _entry(module, name)
    block = func.regions[0].blocks[0]
    memo: dict[ir.Operation, bool] = {}
    wanted: list[tuple[int, int]] = []  # (position of the op in the block, result number)
    for position, op in enumerate(block.operations):
        op = op.operation
        if not op.name.startswith("linalg.") or not op.results:
            continue
        for k, r in enumerate(op.results):
            t = r.type
            if not (isinstance(t, ir.RankedTensorType) and ir.RankedTensorType(t).has_static_shape):
                continue
            if int(np.prod(ir.RankedTensorType(t).shape, dtype=np.int64)) > MAX_VALUE_ELEMENTS:
                continue
            if not any(u.owner.name == "tensor.extract" and not _in_kernel_body(u.owner, func) for u in r.uses):
                continue
            if not _depends_on_arguments(op, func, memo):
                wanted.append((position, k))
    if not wanted:
        return 0
    probe = entry_returning(module, name, lambda pops: [pops[position].results[k] for position, k in wanted], "host-side values on the CPU")
    computed = compile_module(probe, name, CpuPipelineOptions(threads=1))(*arrays)
    ops = [o.operation for o in block.operations]
    with module.context, ir.Location.unknown():
        for (position, k), array in zip(wanted, computed):
            result = ops[position].results[k]
            with ir.InsertionPoint(ops[position]), ops[position].location:
                constant = _constant(np.asarray(array).reshape(ir.RankedTensorType(result.type).shape), ir.RankedTensorType(result.type))
            result.replace_all_uses_with(constant)
    return len(wanted)


def _static_results(func: ir.Operation) -> None:
    """Results returned through a `tensor.cast` from a static type get that type."""
    block = func.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    for i, v in enumerate(list(ret.operands)):
        owner = (v.owner.operation if hasattr(v.owner, "operation") else v.owner) if isinstance(v, ir.OpResult) else None
        if owner is not None and owner.name == "tensor.cast" and _dynamic(v.type) and not _dynamic(owner.operands[0].type):
            ret.operands[i] = owner.operands[0]
    results = [v.type for v in ret.operands]
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), results))


class SpecializingFunction:
    """A GPU runnable compiled per call's shapes and host-read values (see the module doc).

    `compile_one(module)` compiles a specialized module (the target's ahead-of-time path) into
    a runnable; `signature` is the declared (dynamic) signature, which every call is checked
    against first. Up to `CACHE_SIZE` specializations are kept."""

    def __init__(self, module: ir.Module, signature: Any, compile_one: Callable[[ir.Module], Any]) -> None:
        self.module = module
        self.signature = signature
        self._compile_one = compile_one
        self.by_value = host_read_arguments(module, signature.name)
        self._cache: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()

    def _key(self, arrays: Sequence[np.ndarray]) -> tuple[Any, ...]:
        return tuple(
            (a.shape, a.dtype.str, a.tobytes() if i in self.by_value and a.size <= MAX_VALUE_ELEMENTS else None)
            for i, a in enumerate(arrays)
        )

    def runnable(self, arrays: Sequence[np.ndarray]) -> Any:
        """The program specialized to `arrays` (compiled on first use of their key)."""
        key = self._key(arrays)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        compiled = self._compile_one(specialize(self.module, self.signature.name, arrays, self.by_value))
        self._cache[key] = compiled
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return compiled

    @property
    def specializations(self) -> int:
        """How many specialized programs are cached now."""
        return len(self._cache)

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        checked = self.signature.validate(arrays)
        return self.runnable(checked)(*checked)
