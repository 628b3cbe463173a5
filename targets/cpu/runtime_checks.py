"""The CPU target's run-time status channel: failure exits in the generated code, errors in Python.

What, in the code:

- `prepare_failure_exits` (structured memrefs, before `convert-scf-to-cf`): after each check the
  lowering emitted in a function's body (`onnxc.transforms.lowering.runtime_checks.require`:
  contradicted shapes, indices out of range; it has recorded the failure in the status words),
  the function leaves at once when the check failed: a function returns `ub.poison` results.
  The code after a contradicted shape assumption is not memory-safe (a Squeeze of a dim assumed
  1 fed 3 copied 12 elements into a buffer of 4). A check nested in a loop (or another region)
  records, and the function leaves right after the op of its body holding that loop when a
  failure was recorded: the loop's later iterations still run, the code after it does not. It
  also marks the allocations to test: those of a function's body and those of a dynamic size.
- `insert_failure_exits` (after `convert-scf-to-cf`, before `finalize-memref-to-llvm`): each
  marked `memref.alloc` is followed by a test of its pointer: a NULL (a run-time shape of 4e14
  bytes) records `could not allocate N bytes`, naming the node from the alloc's location, and
  leaves (a function returns poison, an OpenMP region body skips to its terminator). Without it
  the code stored into NULL (SIGSEGV). Each call of a function of the module (the outlined parts)
  is followed by a test of the *exit* word: a callee that left early returned poison, which the
  caller must not use either. A public function `onnxc_status_words() -> i64` gives the status'
  address, and the public constant `onnxc_runtime_checks` holds the check table (JSON).

Every exit sets the exit word, so after a call (`StatusChannel`): exit word set -> the results
are poison (not read, not freed; an exit after a lowering's check frees the buffers of the
function's body live there, `_buffers_live_at`; an allocation failure's exit and buffers freed
conditionally or allocated in loops still leak: an error path only); status word 0 set -> a `RuntimeCheckError` naming node, op type and the values.

Why tests there and not everywhere: a test with an exit edge inside a hot loop would stop LLVM's
loop optimizations; the lowering's checks run once per op (an index tensor's min and max, a few
dims), the allocation tests once per buffer outside loops.

Concurrency: the status is one global per compiled module, so two concurrent calls of one
compiled function would share it: `StatusChannel` serializes the calls of one function (a lock);
separate compiled functions, and the OpenMP threads inside one call, are unaffected.
"""

from __future__ import annotations

import ctypes
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith, cf, func, memref, ub

from onnxc.importers.proto import location_label
from onnxc.transforms.lowering.runtime_checks import (
    CHECK_MARKER,
    STATUS_GLOBAL,
    STATUS_WORDS,
    check_table,
    describe,
    ensure_status_global,
    format_check,
    record_failure,
    set_check_table,
    status_memref_type,
)

from .abi import CpuTargetError

__all__ = [
    "EXIT_WORD",
    "CHECKS_SYMBOL",
    "STATUS_FUNCTION",
    "RuntimeCheckError",
    "StatusChannel",
    "format_failure",
    "insert_failure_exits",
    "prepare_failure_exits",
    "status_channel_of_library",
]

#: Word of the status set when the code left early: its results are poison.
EXIT_WORD = STATUS_WORDS - 1
#: The public function returning the status' address (`i64`).
STATUS_FUNCTION = "onnxc_status_words"
#: Unit attribute on the allocations `prepare_failure_exits` chose to test (and on the module).
ALLOC_MARKER = "onnxc.checked_alloc"
#: The public constant holding the check table as NUL-terminated JSON.
CHECKS_SYMBOL = "onnxc_runtime_checks"


class RuntimeCheckError(CpuTargetError):
    """A compiled model found its input invalid at run time (or could not allocate memory)."""


# --- the IR side ----------------------------------------------------------------------------------


def _functions(module: ir.Module) -> list[ir.Operation]:
    return [op.operation for op in module.body.operations if op.operation.name == "func.func"]


def _defined(fn: ir.Operation) -> bool:
    return bool(len(fn.regions[0].blocks))


def _name(fn: ir.Operation) -> str:
    return ir.StringAttr(fn.attributes["sym_name"]).value


def _element_bytes(t: ir.Type) -> int | None:
    if isinstance(t, (ir.IntegerType, ir.FloatType)):
        return max(1, (t.width + 7) // 8)
    if isinstance(t, ir.IndexType):
        return 8
    return None


def _exit_word_set() -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    status = memref.get_global(status_memref_type(), STATUS_GLOBAL)
    word = memref.load(status, [arith.constant(ir.IndexType.get(), EXIT_WORD)])
    return arith.cmpi(arith.CmpIPredicate.ne, word, arith.constant(i64, 0))


def _failure_recorded() -> ir.Value:
    """i1: whether a check recorded a failure in this call (status word 0, the check id, is set)."""
    i64 = ir.IntegerType.get_signless(64)
    status = memref.get_global(status_memref_type(), STATUS_GLOBAL)
    word = memref.load(status, [arith.constant(ir.IndexType.get(), 0)])
    return arith.cmpi(arith.CmpIPredicate.ne, word, arith.constant(i64, 0))


def _set_exit_word() -> None:
    status = memref.get_global(status_memref_type(), STATUS_GLOBAL)
    i64 = ir.IntegerType.get_signless(64)
    memref.store(arith.constant(i64, 1), status, [arith.constant(ir.IndexType.get(), EXIT_WORD)])


def _leave(region: ir.Region, fn: ir.Operation, can_return: bool) -> bool:
    """Build, at the insertion point, a terminator that leaves `region` without results:
    `return poison` in the function body (unless `can_return` is False: a coroutine of the async
    runtime must reach its end), else a copy of an operand- and successor-less terminator of the
    region (omp.yield, omp.terminator). False when the region cannot be left."""
    if region.owner.operation == fn:
        if not can_return:
            return False
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        func.ReturnOp([ub.PoisonOp(t).result for t in ftype.results])
        return True
    for block in region.blocks:
        ops = list(block.operations)
        last = ops[-1].operation if ops else None
        if last is not None and not len(last.operands) and not len(last.successors) and not len(last.regions):
            last.clone(ip=ir.InsertionPoint.current)
            return True
    return False


def _split_after(test: ir.Operation, leave: ir.Value, fn: ir.Operation, before_exit: Callable[[], None] | None = None, can_return: bool = True) -> None:
    """Split the block of `test` (the op computing `leave`, i1) after it and branch to a new exit
    block when `leave` holds. Where the region cannot be left (no suitable terminator), the exit
    block records the failure and continues."""
    block = test.block
    region = block.region
    rest: list[ir.Operation] = []
    seen = False
    for o in block.operations:
        o = o.operation
        if seen:
            rest.append(o)
        elif o == test:
            seen = True
    cont = block.create_after()
    for o in rest:
        cont.append(o)
    fail = cont.create_after()
    with ir.InsertionPoint(fail), test.location:
        if before_exit is not None:
            before_exit()
        _set_exit_word()
        if not _leave(region, fn, can_return):
            cf.BranchOp([], cont)
    with ir.InsertionPoint(block), test.location:
        cf.CondBranchOp(leave, [], [], fail, cont)


def _alloc_check(op: ir.Operation, table: list[dict[str, Any] | None], fn: ir.Operation, ids: dict[tuple[str, str], int], can_return: bool) -> None:
    node, kind = location_label(op.location)
    key = (node, kind)
    if key not in ids:  # one description per node: a table entry per buffer would only repeat it
        table.append(describe(node, kind, "could not allocate {bytes} bytes (out of memory)", [("bytes", 1)]))
        ids[key] = len(table)
    check_id = ids[key]
    mt = ir.MemRefType(op.results[0].type)
    sizes = list(op.operands)  # the dynamic sizes (identity layout: no symbol operands)

    def record() -> None:  # in the exit block only: the size in bytes, for the message
        i64 = ir.IntegerType.get_signless(64)
        static = max(1, _element_bytes(mt.element_type) or 1)
        for i in range(mt.rank):
            if not mt.is_dynamic_dim(i):
                static *= mt.get_dim_size(i)
        count: ir.Value = arith.constant(i64, static)
        for v in sizes:
            count = arith.muli(count, arith.index_cast(i64, v))
        record_failure(check_id, [count])

    with ir.InsertionPoint.after(op), op.location:
        ptr = memref.extract_aligned_pointer_as_index(op.results[0])
        null = arith.cmpi(arith.CmpIPredicate.eq, ptr, arith.constant(ir.IndexType.get(), 0))
    _split_after(null.owner.operation, null, fn, before_exit=record, can_return=can_return)


def _call_check(op: ir.Operation, fn: ir.Operation, can_return: bool) -> None:
    with ir.InsertionPoint.after(op), op.location:
        left = _exit_word_set()
    _split_after(left.owner.operation, left, fn, can_return=can_return)


def _buffers_live_at(fn: ir.Operation) -> Callable[[ir.Operation], Callable[[], None]]:
    """For an exit after op `at` of `fn`'s body: a builder of `memref.dealloc`s of the buffers the
    body allocated before `at` and would free (or return) only after it. Why: an exit returns
    poison, so those buffers were leaked by every call that failed a check (a server fed invalid
    inputs grew without bound). Only what is plain in the body is freed: a top-level
    `memref.alloc` whose top-level `memref.dealloc` comes after `at`, or which the body's
    `func.return` returns (directly or through a `memref.cast`); a buffer freed conditionally
    (ownership-based deallocation's `scf.if`) or allocated in a region still leaks. Positions are
    taken before any split (the body is one block then; the splits keep the ops' order)."""
    blocks = list(fn.regions[0].blocks)
    if len(blocks) != 1:
        return lambda at: (lambda: None)
    ops = [o.operation for o in blocks[0].operations]
    pos = {o: i for i, o in enumerate(ops)}
    allocs = [o for o in ops if o.name == "memref.alloc"]
    freed_at: dict[ir.Operation, int] = {}
    for i, o in enumerate(ops):
        if o.name == "memref.dealloc" and isinstance(o.operands[0].owner, ir.Operation | ir.OpView):
            freed_at.setdefault(o.operands[0].owner.operation, i)
        elif o.name == "func.return":
            for v in o.operands:
                owner = v.owner
                if isinstance(owner, ir.Operation | ir.OpView) and owner.operation.name == "memref.cast":
                    owner = owner.operation.operands[0].owner
                if isinstance(owner, ir.Operation | ir.OpView) and owner.operation.name == "memref.alloc":
                    freed_at.setdefault(owner.operation, i)

    def builder(at: ir.Operation) -> Callable[[], None]:
        p = pos.get(at)
        live = [] if p is None else [a for a in allocs if pos[a] < p and freed_at.get(a, -1) > p]

        def emit() -> None:
            for a in live:
                memref.dealloc(a.results[0])

        return emit

    return builder


def prepare_failure_exits(module: ir.Module) -> int:
    """On structured memrefs (before `convert-scf-to-cf`, while loops are still `scf`):

    - mark the allocations to test (`insert_failure_exits`): those of a function's body (outside
      loops) and those of a dynamic size anywhere. A static-size buffer in a loop is a tile's
      scratch (small, and one it failed to get would fail at the top too), while an exit edge out
      of a hot loop would stop LLVM's loop optimizations;
    - leave the function right after a failed check of the lowering (an `scf.if` marked
      `onnxc.runtime_check` in a function's body): the code after a contradicted shape assumption
      is not memory-safe (a Squeeze of a dim assumed 1 copied 12 elements into a buffer of 4 and
      corrupted the heap);
    - after an op of a function's body that holds checks in its regions (a loop: a Loop/Scan body,
      an scf.if of a branch), leave when a failure was recorded: no exit edge inside the loop
      (LLVM's loop optimizations stay), but nothing after it runs on a contradicted assumption.

    Each exit frees the body's buffers that are live there (`_buffers_live_at`).

    Returns how many checks or ops holding checks got an exit."""
    exits = 0
    with module.context:
        for fn in _functions(module):
            if not _defined(fn):
                continue
            guards: list[ir.Operation] = []
            holders: list[ir.Operation] = []  # ops of the body holding nested checks
            coroutine = False

            def visit(op: ir.Operation) -> ir.WalkResult:
                nonlocal coroutine
                coroutine = coroutine or op.name.startswith("llvm.intr.coro.")
                if op.name == "memref.alloc" and (op.parent.operation == fn or len(op.operands)):
                    op.attributes[ALLOC_MARKER] = ir.UnitAttr.get()
                elif op.name in ("scf.if", "memref.store") and CHECK_MARKER in op.attributes:
                    if op.parent.operation == fn:
                        guards.append(op)  # a store: the guard was folded away (fails whatever the data)
                    elif not (op.name == "memref.store" and CHECK_MARKER in op.parent.operation.attributes):  # not a guard's own record
                        top = op.parent.operation
                        while top.parent.operation != fn:
                            top = top.parent.operation
                        # A walk visits one holder's checks together; a guard of the body has its exit.
                        if CHECK_MARKER not in top.attributes and (not holders or holders[-1] != top):
                            holders.append(top)
                return ir.WalkResult.ADVANCE

            fn.walk(visit)
            if coroutine:
                continue
            free = _buffers_live_at(fn)
            for guard in guards:
                with ir.Location.unknown():
                    if guard.name == "scf.if":
                        _split_after(guard, guard.operands[0], fn, before_exit=free(guard))
                    else:
                        with ir.InsertionPoint.after(guard):
                            always = arith.constant(ir.IntegerType.get_signless(1), 1)
                        _split_after(always.owner.operation, always, fn, before_exit=free(guard))
                exits += 1
            for top in holders:
                with top.location, ir.InsertionPoint.after(top):
                    failed = _failure_recorded()
                _split_after(failed.owner.operation, failed, fn, before_exit=free(top))
                exits += 1
        module.operation.attributes[ALLOC_MARKER] = ir.UnitAttr.get()
        # The guards' descriptions, before convert-scf-to-cf dissolves the guards.
        set_check_table(module.operation, check_table(module.operation))
    return exits


def insert_failure_exits(module: ir.Module) -> None:
    """Add the allocation tests, the exit tests after calls and `onnxc_status_words` (module docstring)."""
    with module.context, ir.Location.unknown():
        ensure_status_global(module.operation)
        defined = {_name(f) for f in _functions(module) if _defined(f)}
        marked = ALLOC_MARKER in module.operation.attributes  # else: test every allocation
        table = check_table(module.operation)
        ids: dict[tuple[str, str], int] = {}
        for fn in _functions(module):
            if not _defined(fn) or _name(fn) == STATUS_FUNCTION:
                continue
            allocs: list[ir.Operation] = []
            calls: list[ir.Operation] = []
            coroutine = False

            def visit(op: ir.Operation) -> ir.WalkResult:
                nonlocal coroutine
                coroutine = coroutine or op.name.startswith("llvm.intr.coro.")
                if op.name == "memref.alloc" and (ALLOC_MARKER in op.attributes or not marked):
                    allocs.append(op)
                elif op.name == "func.call" and ir.FlatSymbolRefAttr(op.attributes["callee"]).value in defined:
                    calls.append(op)
                return ir.WalkResult.ADVANCE

            fn.walk(visit)
            for op in allocs:
                _alloc_check(op, table, fn, ids, not coroutine)
            for op in calls:
                _call_check(op, fn, not coroutine)
        # The check table travels inside the code too (a NUL-terminated JSON string), so a
        # library (AOT, or the compile cache's) can name the failing node without MLIR.
        set_check_table(module.operation, table)
        text = json.dumps(table, separators=(",", ":")).encode() + b"\0"
        i8 = ir.IntegerType.get_signless(8)
        table_type = ir.RankedTensorType.get([len(text)], i8)
        with ir.InsertionPoint(module.body):
            memref.GlobalOp(CHECKS_SYMBOL, ir.TypeAttr.get(ir.MemRefType.get([len(text)], i8)), sym_visibility="public",
                            initial_value=ir.DenseElementsAttr.get(np.frombuffer(text, dtype=np.int8).copy(), type=table_type),
                            constant=True)  # fmt: skip
        with ir.InsertionPoint(module.body):
            i64 = ir.IntegerType.get_signless(64)
            status_fn = func.FuncOp(STATUS_FUNCTION, ir.FunctionType.get([], [i64]))
            with ir.InsertionPoint(status_fn.add_entry_block()):
                g = memref.get_global(status_memref_type(), STATUS_GLOBAL)
                func.ReturnOp([arith.index_cast(i64, memref.extract_aligned_pointer_as_index(g))])


# --- the caller's side ----------------------------------------------------------------------------


def format_failure(check: dict[str, Any] | None, values: Sequence[int]) -> str:
    """The sentence of a failed check: `Reshape node 'r1': the run-time target shape (2, 7) ...`."""
    if check is None:  # an id without a description (none is expected: see record_failure)
        return "a run-time check of the model failed (run-time check)"
    return f"{format_check(check, values)} (run-time check)"


class StatusChannel:
    """Reads and resets the status words of one compiled function around its calls.

    address: the status' address (from `onnxc_status_words`); checks: the module's check table
    (`onnxc.transforms.lowering.runtime_checks.check_table`, or an AOT library's metadata)."""

    def __init__(self, address: int, checks: Sequence[dict[str, Any] | None]) -> None:
        self._words = (ctypes.c_int64 * STATUS_WORDS).from_address(address)
        self.checks = list(checks)
        self.lock = threading.Lock()

    def reset(self) -> None:
        ctypes.memset(ctypes.addressof(self._words), 0, ctypes.sizeof(self._words))

    @property
    def exited(self) -> bool:
        """Whether the last call left early (its results are poison: neither read nor freed)."""
        return bool(self._words[EXIT_WORD])

    def raise_if_exited(self) -> None:
        """The Invoker's hook right after the native call: a call that left early returned poison
        results, which must be neither read nor freed."""
        if self.exited:
            self.check()

    def run(self, call: Callable[..., list[Any]], arrays: Sequence[Any]) -> list[Any]:
        """`call(*arrays)` with the status reset before and checked after, one call at a time."""
        with self.lock:
            self.reset()
            outs = call(*arrays)
            self.check()
            return outs

    def check(self) -> None:
        """Raise `RuntimeCheckError` for a failure recorded by the last call, and reset."""
        check_id = int(self._words[0])
        if not check_id and not self.exited:
            return
        values = [int(v) for v in self._words[1:EXIT_WORD]]
        self.reset()
        if not 1 <= check_id <= len(self.checks):
            raise RuntimeCheckError("the compiled code left early without naming a check (run-time check)")
        raise RuntimeCheckError(format_failure(self.checks[check_id - 1], values))


def status_address_from_engine(engine: Any) -> int:
    """Call the JIT's packed wrapper of `onnxc_status_words` once and return the address."""
    address = engine.raw_lookup(STATUS_FUNCTION)
    if not address:
        raise CpuTargetError(f"JIT: the module has no @{STATUS_FUNCTION} (run-time status)")
    result = ctypes.c_int64(0)
    slots = (ctypes.c_void_p * 1)(ctypes.addressof(result))
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)(slots)
    return int(result.value)



def status_channel_of_library(lib: ctypes.CDLL) -> StatusChannel | None:
    """The status channel of a loaded library (AOT or the compile cache's); None for a library
    built before the channel existed (its code has no checks)."""
    try:
        words = lib[STATUS_FUNCTION]
        table = ctypes.cast(lib[CHECKS_SYMBOL], ctypes.c_void_p).value
    except AttributeError:
        return None
    words.argtypes = []
    words.restype = ctypes.c_int64
    text = ctypes.string_at(table) if table else b"[]"
    return StatusChannel(int(words()), json.loads(text.decode()))
