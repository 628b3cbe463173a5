"""`onnx-eliminate-sequences`: replace sequence and optional values whose structure is known at
compile time by the tensors they hold.

Why: the CPU target lowers ranked tensors only; `!onnx.seq<...>` and `!onnx.opt<...>` values have
no lowering. Yet in most models (and in the ONNX backend tests) a sequence is built and consumed
with lengths and positions fixed when the model is compiled: SplitToSequence of a static dim,
then SequenceAt of a constant index; SequenceConstruct then ConcatFromSequence; an Optional that
is always present. Tracking such a sequence as a compile-time list of tensor SSA values turns its
ops into plain tensor ops (Slice, Concat, Unsqueeze, Squeeze, Where) that lower like any other.

How: each sweep walks the module in program order. A sequence value's *elements* (a Python list
of tensor values) and its *length* are derived on demand from the op that produced it:

- SequenceEmpty -> []; SequenceConstruct(x...) -> [x...]; Identity and OptionalGetElement of a
  sequence -> the input's list;
- SequenceInsert / SequenceErase at an absent or constant position -> the new list; at a runtime
  position (a rank-0 tensor, or a one-element 1-D one) over elements of one rank and element
  type -> each element becomes a chain choosing among the candidates by the normalized position
  (the length is known either way): `Where` when the candidates share one static type, else `If`
  (a Where would broadcast different shapes; the If's result has the dims they disagree on
  dynamic);
- SplitToSequence with an absent or constant `split` over a static dim -> one Slice per piece
  (Squeeze for `keepdims=0`); a 1-D `split` of static length n whose values are run-time data
  -> the n results of `Split(x, split)` (pieces at run-time offsets, whose lowering checks at run
  time that the sizes add up to the dim);
- SequenceMap over sequences of known, equal length -> its body cloned once per element, block
  arguments bound to the elements (or to the tensor inputs, the same each time); the body may
  use values from outside, and sequence ops in the clones are handled by the next sweep.

A Loop that carries a sequence or optional value, with a constant trip count (up to
`MAX_UNROLL` iterations) and a condition that stays a constant true (or turns a constant false,
ending the loop there), is unrolled first: its body
is cloned once per iteration (the iteration number a constant, the carried values those of the
previous iteration), scan outputs are stacked with Unsqueeze and Concat. This is how SequenceMap's
schema function (a Loop over SequenceLength) and exporters' list-building loops become
sequences of known structure. An If whose two branches yield sequences of one known length is
rebuilt to yield their elements as tensors (types joined per position: differing dims become
dynamic), a SequenceConstruct of its results standing for the sequence.

Consumers are then replaced: SequenceAt (constant index, negative too; a runtime index as a
`Where`/`If` chain over elements of one rank), SequenceLength (a constant), ConcatFromSequence
(Concat, or Unsqueeze then Concat for `new_axis=1`), Identity of a sequence or optional,
OptionalHasElement (a constant: from a known Optional, and per the spec `true` for a plain tensor
or sequence input, `false` for an omitted one), OptionalGetElement (of a tensor: the tensor; of a
sequence: the sequence; of a known present Optional: its value). Producers left without users
are erased after each sweep. New ops keep the location of the op they replace.

Anything whose structure is not known (a sequence argument of the function, one carried through
a Loop with a runtime trip count, an If whose branches yield sequences of different lengths or an
optional present in one branch only, a runtime index into elements of differing ranks) is left
as it is; the lowering's pre-check then names those ops.

Function boundaries: `bind_boundary` serves a runtime that specializes a model per call on the
structure of its sequence/optional inputs (how many elements, which optionals are present, the
element types), and, where a result's structure is decided by the values of small integer/bool
inputs (a Loop's trip count and condition, a scalar split, an If's condition), on those values:
such an input given as a `ValueLayout` becomes a constant, and when a result's structure is still
unknown after elimination, constants are folded and Ifs of known condition inlined
(`BOUNDARY_FOLD_ROUNDS` rounds) before eliminating again. It rewrites the main function so that each such argument becomes its tensors,
eliminates sequences, and flattens sequence/optional results of known structure into tensors,
returning the layout of every result so the runtime can regroup them into lists and Nones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence, Union

import numpy as np
from mlir import ir

from mlir.dialects import func as func_dialect

from onnxc.dialect import types as types_mod
from onnxc.dialect.attributes import onnx_attributes
from onnxc.dialect.builder import onnx_op, yield_values
from onnxc.errors import OnnxcError
from onnxc.transforms import onnx_utils as U
from onnxc.transforms.pass_base import ModulePass

#: Sweeps before giving up: one suffices unless SequenceMap bodies hold sequence ops of their own
#: (each nesting level needs one more); the cap only guards against a rewrite that never settles.
MAX_SWEEPS = 16

#: Rounds of constant folding and If inlining `bind_boundary` tries when a result's structure is
#: not known after the first elimination (each round can resolve one more level of Ifs).
BOUNDARY_FOLD_ROUNDS = 4

#: The largest trip count of a Loop that is unrolled, and the most body ops all the copies may hold.
MAX_UNROLL = 256
MAX_UNROLLED_OPS = 20000

#: Op types whose results are erased once unused (they have no effect besides their results).
_PRODUCERS = frozenset(
    {"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SplitToSequence", "SequenceMap", "Optional"}
)


@dataclass(frozen=True)
class OnnxEliminateSequencesPass(ModulePass):
    """Replace sequences and optionals of compile-time structure by the tensors they hold.

    Sequence ops with constant (or absent) positions and static split sizes become tensor ops
    (Slice, Concat, Unsqueeze, Squeeze; `Where`/`If` chains for runtime positions over elements of
    one rank); SequenceMap over known lengths and Loops carrying sequences with a constant trip
    count are unrolled; Ifs yielding sequences of one known length yield their elements;
    Optional/OptionalHasElement/OptionalGetElement of known presence are resolved. Sequences of
    unknown structure stay.
    """

    name = "onnx-eliminate-sequences"

    def run(self, module: ir.Operation) -> None:
        module = module.operation
        with module.context, ir.Location.unknown():
            eliminate_sequences(module)


def eliminate_sequences(module: ir.Operation) -> dict[str, int]:
    """Run sweeps until nothing changes; returns counts of consumers replaced and ops erased."""
    stats = {"replaced": 0, "erased": 0, "sweeps": 0}
    for _ in range(MAX_SWEEPS):
        stats["sweeps"] += 1
        replaced = _Sweep().run(module)
        erased = _erase_dead(module)
        stats["replaced"] += replaced
        stats["erased"] += erased
        if not replaced and not erased:
            break
    return stats


# --- types ------------------------------------------------------------------------------------


def _kind(t: ir.Type) -> str:
    """'seq', 'opt', 'tensor', 'none' or 'other' for a value's type."""
    if isinstance(t, ir.NoneType):
        return "none"
    if U.is_tensor_type(t):
        return "tensor"
    text = str(t)
    for kind in ("seq", "opt"):
        if text.startswith(f"!onnx.{kind}<"):
            return kind
    return "other"


def _uniform_static_type(values: list[ir.Value]) -> ir.Type | None:
    """The one fully static ranked tensor type of all `values`, or None (a runtime choice among
    them with `Where` is only right when every candidate has exactly the same shape)."""
    if not values:
        return None
    t = values[0].type
    shape = U.shape_of(t)
    if shape is None or any(d < 0 for d in shape):
        return None
    return t if all(v.type == t for v in values) else None


def _with_dim(t: ir.Type, axis: int, size: int | None) -> ir.Type:
    """`t` with dim `axis` set to `size` (dropped when `size` is None)."""
    shape = U.shape_of(t)
    assert shape is not None
    if size is None:
        shape = shape[:axis] + shape[axis + 1 :]
    else:
        shape = shape[:axis] + [size] + shape[axis + 1 :]
    return U.ranked_type(shape, U.element_type_of(t))


def _scalar_int(v: ir.Value) -> int | None:
    """The value of a one-element integer constant, or None."""
    arr = U.constant_value(v, 1)
    if arr is None or arr.size != 1 or arr.dtype.kind not in "iu":
        return None
    return int(arr.reshape(-1)[0])


# --- one sweep ----------------------------------------------------------------------------------


@dataclass
class _Sweep:
    """Derives sequence structure on demand (memoized for the sweep) and replaces consumers."""

    elements_memo: dict[ir.Value, list[ir.Value] | None] = field(default_factory=dict)
    map_memo: dict[int, list[list[ir.Value]] | None] = field(default_factory=dict)

    def run(self, module: ir.Operation) -> int:
        handlers: dict[str, Callable[[ir.Operation], list[ir.Value] | None]] = {
            "SequenceAt": self._sequence_at,
            "SequenceLength": self._sequence_length,
            "ConcatFromSequence": self._concat_from_sequence,
            "OptionalHasElement": self._optional_has_element,
            "OptionalGetElement": self._optional_get_element,
            "Identity": self._identity,
        }
        replaced = 0
        # Loops first, outermost first; after each unrolling the loops are collected again, as
        # the list may hold erased ops and the copies may hold inner loops. Each unrolling
        # removes a loop and copies at most MAX_UNROLLED_OPS ops, so this ends; the bound on
        # rounds only keeps a pathological model's compile time in check.
        for _ in range(1000):
            if not any(_unroll_loop(op) for op in U.collect_ops(module, lambda o: o.name.startswith("onnx.loop"))):
                break
            replaced += 1
        # Ifs yielding sequences: innermost first, one at a time (each rebuilds its op).
        for _ in range(1000):
            ifs = U.collect_ops(module, lambda o: o.name.startswith("onnx.if") and any(_kind(r.type) == "seq" for r in o.results))
            if not any(self._split_if(op) for op in reversed(ifs)):
                break
            self.elements_memo.clear()
            replaced += 1
        # What the failed attempts derived may name values the consumers below replace.
        self.elements_memo.clear()
        self.map_memo.clear()
        for op in U.collect_ops(module, U.is_onnx_op):
            info = U.info_of(op)
            handler = handlers.get(info.op_type) if info is not None else None
            if handler is None or not op.results:
                continue
            new = handler(op)
            if new is not None:
                self._forward(list(op.results), new)
                _replace(op, new)
                replaced += 1
        return replaced

    def _forward(self, old: list[ir.Value], new: list[ir.Value]) -> None:
        """Keep the derived lists valid when a consumer's results (about to be erased) are
        replaced: an element may be such a result (SequenceConstruct of a SequenceAt)."""
        subst = dict(zip(old, new))
        for lists in [list(self.elements_memo.values())] + [outs for outs in self.map_memo.values() if outs is not None]:
            for elems in lists:
                if elems is not None:
                    elems[:] = [subst.get(e, e) for e in elems]

    # -- structure ------------------------------------------------------------------------------

    def elements(self, v: ir.Value) -> list[ir.Value] | None:
        """The tensor values sequence `v` holds, in order, or None when not known."""
        if v in self.elements_memo:
            return self.elements_memo[v]
        self.elements_memo[v] = None  # guards against cycles (none in SSA, but cheap)
        got = self._elements(v)
        self.elements_memo[v] = got
        return got

    def _elements(self, v: ir.Value) -> list[ir.Value] | None:
        op = _producer(v)
        info = U.info_of(op) if op is not None else None
        if info is None:
            return None
        t = info.op_type
        if t == "SequenceEmpty":
            return []
        if t == "SequenceConstruct":
            return list(op.operands)
        if t in ("Identity", "OptionalGetElement"):
            src = op.operands[0]
            if _kind(src.type) == "seq":
                return self.elements(src)
            if _kind(src.type) == "opt":
                present = _optional_state(src)
                if present is not None and present[0] and _kind(present[1].type) == "seq":
                    return self.elements(present[1])
            return None
        if t == "SequenceInsert":
            return self._insert(op)
        if t == "SequenceErase":
            return self._erase(op)
        if t == "SplitToSequence":
            return self._split(op)
        if t == "SequenceMap":
            outs = self._map(op)
            return None if outs is None else outs[v.result_number]
        return None

    def length(self, v: ir.Value) -> int | None:
        """The number of elements of sequence `v`, or None; known in some cases where the
        elements are not (runtime insert positions, runtime split sizes of static count)."""
        op = _producer(v)
        info = U.info_of(op) if op is not None else None
        if info is None:
            return None
        t = info.op_type
        if t == "SequenceEmpty":
            return 0
        if t == "SequenceConstruct":
            return len(op.operands)
        if t in ("Identity", "OptionalGetElement") and _kind(op.operands[0].type) == "seq":
            return self.length(op.operands[0])
        if t == "SequenceInsert":
            n = self.length(op.operands[0])
            return None if n is None else n + 1
        if t == "SequenceErase":
            n = self.length(op.operands[0])
            return None if n is None or n < 1 else n - 1
        if t == "SplitToSequence":
            sizes = _split_sizes(op)
            if sizes is not None:
                return len(sizes)
            split = op.operands[1]
            shape = U.shape_of(split.type)
            if shape is not None and len(shape) == 1 and shape[0] >= 0:
                return shape[0]  # one piece per entry, whatever the values
            return None
        if t == "SequenceMap":
            return self.length(op.operands[0])
        got = self.elements(v)
        return None if got is None else len(got)

    # -- producers ------------------------------------------------------------------------------

    def _insert(self, op: ir.Operation) -> list[ir.Value] | None:
        base = self.elements(op.operands[0])
        if base is None:
            return None
        tensor = op.operands[1]
        pos = op.operands[2] if len(op.operands) > 2 else None
        n = len(base)
        if pos is None or U.is_none_value(pos):
            return base + [tensor]
        p = _scalar_int(pos)
        if p is not None:
            if not -n <= p <= n:
                return None  # invalid position: leave the op for the runtime check to report
            p = p + n if p < 0 else p
            return base[:p] + [tensor] + base[p:]
        if not _choosable(base + [tensor]) or not _is_scalar_index(pos):
            return None
        with ir.InsertionPoint(op), op.location:
            idx = _normalized_index(_scalar_position(pos), n)
            out = []
            for k in range(n + 1):
                # k < p: base[k]; k == p: tensor; k > p: base[k - 1].
                chosen = base[k - 1] if k >= 1 else tensor
                if k < n:
                    chosen = _where(_compare("Greater", idx, k), base[k], chosen)
                out.append(_where(_compare("Equal", idx, k), tensor, chosen))
        return out

    def _erase(self, op: ir.Operation) -> list[ir.Value] | None:
        base = self.elements(op.operands[0])
        if base is None or not base:
            return None
        pos = op.operands[1] if len(op.operands) > 1 else None
        n = len(base)
        if pos is None or U.is_none_value(pos):
            return base[:-1]
        p = _scalar_int(pos)
        if p is not None:
            if not -n <= p < n:
                return None
            p = p + n if p < 0 else p
            return base[:p] + base[p + 1 :]
        if not _choosable(base) or not _is_scalar_index(pos):
            return None
        with ir.InsertionPoint(op), op.location:
            idx = _normalized_index(_scalar_position(pos), n)
            # k < p: base[k]; k >= p: base[k + 1].
            return [_where(_compare("Greater", idx, k), base[k], base[k + 1]) for k in range(n - 1)]

    def _split(self, op: ir.Operation) -> list[ir.Value] | None:
        sizes = _split_sizes(op)
        if sizes is None:
            return self._split_runtime_sizes(op)
        x = op.operands[0]
        shape = U.shape_of(x.type)
        assert shape is not None  # _split_sizes needs the rank
        axis = _split_axis(op, len(shape))
        squeeze = U.is_none_value(op.operands[1]) and int(U.attr_value(op, "keepdims", 1)) == 0
        out = []
        with ir.InsertionPoint(op), op.location:
            axes = U.make_constant(np.array([axis], dtype=np.int64))
            start = 0
            for size in sizes:
                starts = U.make_constant(np.array([start], dtype=np.int64))
                ends = U.make_constant(np.array([start + size], dtype=np.int64))
                piece = onnx_op("Slice", [x, starts, ends, axes], [_with_dim(x.type, axis, size)]).result
                if squeeze:
                    piece = onnx_op("Squeeze", [piece, axes], [_with_dim(x.type, axis, None)]).result
                out.append(piece)
                start += size
        return out

    def _split_runtime_sizes(self, op: ir.Operation) -> list[ir.Value] | None:
        """SplitToSequence with a 1-D `split` of static length n whose values are run-time data:
        the n pieces of `Split(x, split, axis)` (the same semantics; `keepdims` does not apply
        when `split` is given). Split's lowering slices at the run-time offsets and checks at run
        time that the sizes add up to the dim (a `RuntimeCheckError` naming the node otherwise)."""
        x = op.operands[0]
        shape = U.shape_of(x.type)
        split = op.operands[1] if len(op.operands) > 1 else None
        if shape is None or split is None or U.is_none_value(split):
            return None
        split_shape = U.shape_of(split.type)
        if split_shape is None or len(split_shape) != 1 or split_shape[0] < 1:
            return None
        rank = len(shape)
        axis = int(U.attr_value(op, "axis", 0))
        if not -rank <= axis < rank:
            return None
        axis = _split_axis(op, rank)
        n = split_shape[0]
        piece = _with_dim(x.type, axis, -1)
        with ir.InsertionPoint(op), op.location:
            pieces = onnx_op("Split", [x, split], [piece] * n, {"axis": axis})
        return list(pieces.results)

    def _map(self, op: ir.Operation) -> list[list[ir.Value]] | None:
        """SequenceMap unrolled: per result, the list of its elements (memoized per op, since
        each of its results asks)."""
        key = U.id_key(op)
        if key in self.map_memo:
            return self.map_memo[key]
        self.map_memo[key] = None
        got = self._unroll_map(op)
        self.map_memo[key] = got
        return got

    def _unroll_map(self, op: ir.Operation) -> list[list[ir.Value]] | None:
        inputs = list(op.operands)
        per_input: list[list[ir.Value] | None] = []
        n: int | None = None
        for v in inputs:
            kind = _kind(v.type)
            if kind == "seq":
                elems = self.elements(v)
                if elems is None or (n is not None and len(elems) != n):
                    return None
                n = len(elems)
                per_input.append(elems)
            elif kind == "tensor":
                per_input.append(None)
            else:
                return None
        if n is None or len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
            return None
        block = op.regions[0].blocks[0]
        args = list(block.arguments)
        body = U.block_ops(block)
        if len(args) != len(inputs) or not body or len(body[-1].operands) != len(op.results):
            return None
        outs: list[list[ir.Value]] = [[] for _ in op.results]
        for i in range(n):
            mapping: dict[ir.Value, ir.Value] = {}
            for arg, v, elems in zip(args, inputs, per_input):
                mapping[arg] = v if elems is None else elems[i]
            for inner in body[:-1]:
                clone = inner.clone(ip=ir.InsertionPoint(op))
                _remap(clone, mapping)
                for old, new in zip(inner.results, clone.results):
                    mapping[old] = new
            for k, v in enumerate(body[-1].operands):
                outs[k].append(mapping.get(v, v))
        return outs

    def _split_if(self, op: ir.Operation) -> bool:
        """An If whose branches yield sequences of the same known length (elements of one rank
        and element type at each position) becomes an If yielding the elements as tensors, with
        SequenceConstruct of its results after it. False, with the IR untouched, otherwise."""
        info = U.info_of(op)
        if info is None or info.op_type != "If" or len(op.regions) != 2:
            return False
        terms = []
        for region in op.regions:
            if len(region.blocks) != 1:
                return False
            term = U.terminator(region.blocks[0])
            if term is None or len(term.operands) != len(op.results):
                return False
            terms.append(term)
        # Per result: its new result types and, per branch, the values to yield.
        types: list[ir.Type] = []
        yields: list[list[ir.Value]] = [[], []]
        counts: list[int | None] = []  # None: a tensor result (one value), else the length
        for j, res in enumerate(op.results):
            kind = _kind(res.type)
            if kind == "tensor":
                types.append(res.type)
                for b in range(2):
                    yields[b].append(terms[b].operands[j])
                counts.append(None)
                continue
            if kind != "seq":
                return False
            lists = [self.elements(t.operands[j]) for t in terms]
            if lists[0] is None or lists[1] is None or len(lists[0]) != len(lists[1]):
                return False
            for a, b in zip(lists[0], lists[1]):
                joined = _join_types(a.type, b.type)
                if joined is None:
                    return False
                types.append(joined)
            for b in range(2):
                yields[b].extend(lists[b])
            counts.append(len(lists[0]))
        with ir.InsertionPoint(op), op.location:
            new = onnx_op(info.full_name, [op.operands[0]], types)
        for name, attr in onnx_attributes(op).items():
            new.attributes[name] = attr
        for old_region, new_region, values in zip(op.regions, new.regions, yields):
            old_block = old_region.blocks[0]
            block = new_region.blocks.append()
            anchor = yield_values(values, loc=op.location, ip=ir.InsertionPoint(block))
            for inner in U.block_ops(old_block)[:-1]:
                inner.move_before(anchor)
        replacements: list[ir.Value] = []
        at = 0
        with ir.InsertionPoint(op), op.location:
            for res, count in zip(op.results, counts):
                if count is None:
                    replacements.append(new.results[at])
                    at += 1
                    continue
                parts = list(new.results[at : at + count])
                at += count
                if parts:
                    replacements.append(onnx_op("SequenceConstruct", parts, [res.type]).result)
                else:
                    elem = U.element_type_of(_inner_type(res.type))
                    if elem is None:
                        return False  # (unreachable for ONNX sequences: tensor element types)
                    dtype = types_mod.onnx_element_type(elem).onnx_dtype
                    replacements.append(onnx_op("SequenceEmpty", [], [res.type], {"dtype": dtype}).result)
        _replace(op, replacements)
        return True

    # -- consumers --------------------------------------------------------------------------------

    def _sequence_at(self, op: ir.Operation) -> list[ir.Value] | None:
        elems = self.elements(op.operands[0])
        if not elems:
            return None
        n = len(elems)
        pos = op.operands[1]
        p = _scalar_int(pos)
        if p is not None:
            if not -n <= p < n:
                return None
            return [elems[p + n if p < 0 else p]]
        if not _choosable(elems) or not _is_scalar_index(pos):
            return None
        with ir.InsertionPoint(op), op.location:
            idx = _normalized_index(_scalar_position(pos), n)
            chosen = elems[-1]
            for k in range(n - 2, -1, -1):
                chosen = _where(_compare("Equal", idx, k), elems[k], chosen)
        return [chosen]

    def _sequence_length(self, op: ir.Operation) -> list[ir.Value] | None:
        n = self.length(op.operands[0])
        if n is None:
            return None
        with ir.InsertionPoint(op), op.location:
            return [U.make_constant(np.array(n, dtype=np.int64))]

    def _concat_from_sequence(self, op: ir.Operation) -> list[ir.Value] | None:
        elems = self.elements(op.operands[0])
        if not elems or not all(_kind(e.type) == "tensor" for e in elems):
            return None  # an empty sequence is an error at run time: leave it to be reported
        axis = int(U.attr_value(op, "axis", 0))
        new_axis = int(U.attr_value(op, "new_axis", 0))
        out_type = op.results[0].type
        with ir.InsertionPoint(op), op.location:
            if new_axis:
                axes = U.make_constant(np.array([axis], dtype=np.int64))
                parts = [onnx_op("Unsqueeze", [e, axes], [_unsqueezed_type(e.type, axis)]).result for e in elems]
            else:
                parts = elems
            if len(parts) == 1 and parts[0].type == out_type:
                return [parts[0]]
            return [onnx_op("Concat", parts, [out_type], {"axis": axis}).result]

    def _optional_has_element(self, op: ir.Operation) -> list[ir.Value] | None:
        has: bool | None = None
        if not op.operands:
            has = False
        else:
            v = op.operands[0]
            kind = _kind(v.type)
            if kind == "none":
                has = False
            elif kind in ("tensor", "seq"):
                has = True
            elif kind == "opt":
                state = _optional_state(v)
                has = None if state is None else state[0]
        if has is None:
            return None
        with ir.InsertionPoint(op), op.location:
            return [U.make_constant(np.array(has, dtype=np.bool_))]

    def _optional_get_element(self, op: ir.Operation) -> list[ir.Value] | None:
        v = op.operands[0]
        kind = _kind(v.type)
        if kind == "tensor" or (kind == "seq" and v.type == op.results[0].type):
            # (A sequence of another spelling stays: the structure is derived through the op,
            # and replacing it would only put an Identity in its place.)
            return [v]
        if kind == "opt":
            state = _optional_state(v)
            if state is not None and state[0]:
                return [state[1]]
        return None

    def _identity(self, op: ir.Operation) -> list[ir.Value] | None:
        v = op.operands[0]
        return [v] if _kind(v.type) in ("seq", "opt") and v.type == op.results[0].type else None


# --- helpers --------------------------------------------------------------------------------------


def _producer(v: ir.Value) -> ir.Operation | None:
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None  # a block argument
    return owner.operation


def _optional_state(v: ir.Value) -> tuple[bool, ir.Value | None] | None:
    """(present, value) for an optional whose presence is known, else None."""
    op = _producer(v)
    info = U.info_of(op) if op is not None else None
    if info is None:
        return None
    if info.op_type == "Optional":
        if not op.operands or U.is_none_value(op.operands[0]):
            return (False, None)
        return (True, op.operands[0])
    if info.op_type == "Identity" and _kind(op.operands[0].type) == "opt":
        return _optional_state(op.operands[0])
    return None


def _split_axis(op: ir.Operation, rank: int) -> int:
    axis = int(U.attr_value(op, "axis", 0))
    return axis + rank if axis < 0 else axis


def _split_sizes(op: ir.Operation) -> list[int] | None:
    """The piece sizes of a SplitToSequence known at compile time, or None."""
    x = op.operands[0]
    shape = U.shape_of(x.type)
    if shape is None:
        return None
    rank = len(shape)
    axis = int(U.attr_value(op, "axis", 0))
    if not -rank <= axis < rank:
        return None
    axis = _split_axis(op, rank)
    dim = shape[axis]
    split = op.operands[1] if len(op.operands) > 1 else None
    if split is None or U.is_none_value(split):
        return None if dim < 0 else [1] * dim
    arr = U.constant_value(split, 1 << 16)
    if arr is None or arr.dtype.kind not in "iu":
        return None
    if arr.ndim == 0:
        size = int(arr)
        if dim < 0 or size <= 0:
            return None
        return [size] * (dim // size) + ([dim % size] if dim % size else [])
    if arr.ndim != 1:
        return None
    sizes = [int(s) for s in arr]
    if any(s < 0 for s in sizes) or (dim >= 0 and sum(sizes) != dim):
        return None
    return sizes


def _unsqueezed_type(t: ir.Type, axis: int) -> ir.Type:
    shape = U.shape_of(t)
    elem = U.element_type_of(t)
    if shape is None:
        return ir.UnrankedTensorType.get(elem)
    a = axis + len(shape) + 1 if axis < 0 else axis
    return U.ranked_type(shape[:a] + [1] + shape[a:], elem)


def _is_scalar_index(v: ir.Value) -> bool:
    """A rank-0 int32/int64 tensor (a position, as the sequence ops take it), or a one-element
    1-D one (what the backend suite's SequenceInsert passes; onnx.reference reads its one value)."""
    shape = U.shape_of(v.type)
    return shape in ([], [1]) and U.element_type_of(v.type) in (ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64))


def _scalar_position(v: ir.Value) -> ir.Value:
    """`v` as a rank-0 tensor (a Reshape to [] of a one-element 1-D position)."""
    if U.shape_of(v.type) == []:
        return v
    empty = U.make_constant(np.zeros((0,), dtype=np.int64))
    assert empty is not None
    return onnx_op("Reshape", [v, empty], [U.ranked_type([], U.element_type_of(v.type))]).result


def _scalar_constant(value: int, like: ir.Value) -> ir.Value:
    dtype = np.int32 if U.element_type_of(like.type) == ir.IntegerType.get_signless(32) else np.int64
    const = U.make_constant(np.array(value, dtype=dtype))
    assert const is not None  # int32/int64 scalars always fit an attribute
    return const


def _normalized_index(pos: ir.Value, n: int) -> ir.Value:
    """`pos + n if pos < 0 else pos`, as ops (at the current insertion point)."""
    negative = _compare("Less", pos, 0)
    shifted = onnx_op("Add", [pos, _scalar_constant(n, pos)], [pos.type]).result
    return onnx_op("Where", [negative, shifted, pos], [pos.type]).result


def _compare(op_type: str, idx: ir.Value, k: int) -> ir.Value:
    bool_t = U.ranked_type([], ir.IntegerType.get_signless(1))
    return onnx_op(op_type, [idx, _scalar_constant(k, idx)], [bool_t]).result


def _where(cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    """`cond ? a : b` for a rank-0 bool `cond`: a Where when both have one fully static type;
    otherwise an If yielding `a` or `b` (a Where would broadcast two different shapes), its
    result of the type the two join to (dims they disagree on dynamic)."""
    if a == b:
        return a
    if a.type == b.type and _uniform_static_type([a, b]) is not None:
        return onnx_op("Where", [cond, a, b], [a.type]).result
    with a.type.context:
        joined = _join_types(a.type, b.type)
    assert joined is not None  # callers check _choosable first
    choice = onnx_op("If", [cond], [joined])
    # Regions in the schema's sorted graph-attribute order: else_branch, then then_branch.
    for region, value in zip(choice.regions, (b, a)):
        yield_values([value], ip=ir.InsertionPoint(region.blocks.append()))
    return choice.results[0]


def _choosable(values: list[ir.Value]) -> bool:
    """Whether a run-time choice among `values` can be built (`_where`): tensors of one rank and
    element type (shapes may differ: the If result has the dims they disagree on dynamic)."""
    if not values or not all(_kind(v.type) == "tensor" for v in values):
        return False
    t: ir.Type | None = values[0].type
    with values[0].type.context:  # joined types are built (callers test before building IR)
        for v in values[1:]:
            t = _join_types(t, v.type) if t is not None else None
    return t is not None and U.shape_of(t) is not None


def _join_types(a: ir.Type, b: ir.Type) -> ir.Type | None:
    """One tensor type for values of types `a` and `b` yielded by the two branches of an If: the
    type itself when equal, else the ranked type with the dims they disagree on dynamic; None
    when ranks or element types differ."""
    if a == b:
        return a
    sa, sb = U.shape_of(a), U.shape_of(b)
    if sa is None or sb is None or len(sa) != len(sb) or U.element_type_of(a) != U.element_type_of(b):
        return None
    return U.ranked_type([x if x == y else -1 for x, y in zip(sa, sb)], U.element_type_of(a))


def _known_false(v: ir.Value) -> bool:
    """Whether `v` is a constant false (through Identity ops)."""
    while True:
        arr = U.constant_value(v, 1)
        if arr is not None:
            return arr.size == 1 and not bool(arr.reshape(-1)[0])
        op = _producer(v)
        info = U.info_of(op) if op is not None else None
        if info is None or info.op_type != "Identity":
            return False
        v = op.operands[0]


def _known_true(v: ir.Value) -> bool:
    """Whether `v` is a constant true (through Identity ops)."""
    while True:
        arr = U.constant_value(v, 1)
        if arr is not None:
            return arr.size == 1 and bool(arr.reshape(-1)[0])
        op = _producer(v)
        info = U.info_of(op) if op is not None else None
        if info is None or info.op_type != "Identity":
            return False
        v = op.operands[0]


def _unroll_loop(op: ir.Operation) -> bool:
    """Unroll a Loop carrying a sequence/optional value (see the module docstring); False when it
    does not qualify, with the IR untouched."""
    info = U.info_of(op)
    if info is None or info.op_type != "Loop" or len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        return False
    operands = list(op.operands)
    if len(operands) < 2 or not any(_kind(v.type) in ("seq", "opt") for v in list(operands[2:]) + list(op.results)):
        return False
    trip = operands[0]
    if U.is_none_value(trip):
        return False
    m = _scalar_int(trip)
    if m is None or not 0 <= m <= MAX_UNROLL:
        return False
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    body = U.block_ops(block)
    carried = operands[2:]
    if len(args) != 2 + len(carried) or not body:
        return False
    outs = list(body[-1].operands)
    n_scan = len(outs) - 1 - len(carried)
    if n_scan < 0 or len(op.results) != len(carried) + n_scan or (n_scan and m == 0):
        return False
    if m * len(body) > MAX_UNROLLED_OPS:
        return False
    cond = operands[1]
    if not U.is_none_value(cond) and not _known_true(cond) and not _known_false(cond):
        return False
    if any(not U.is_tensor_type(v.type) for v in outs[1 + len(carried) :]):
        return False
    with ir.InsertionPoint(op), op.location:
        true = U.make_constant(np.array(True))
        cond_value = true if U.is_none_value(cond) else cond
        values = list(carried)
        scans: list[list[ir.Value]] = [[] for _ in range(n_scan)]
        clones: list[ir.Operation] = []
        for i in range(m):
            if _known_false(cond_value):
                break  # the loop ends here (before its first iteration when the input condition is false)
            if not _known_true(cond_value):
                for c in reversed(clones):  # the condition may turn false: keep the Loop
                    c.erase()
                return False
            mapping: dict[ir.Value, ir.Value] = {args[0]: U.make_constant(np.array(i, dtype=np.int64)), args[1]: cond_value}
            mapping.update(zip(args[2:], values))
            for inner in body[:-1]:
                clone = inner.clone(ip=ir.InsertionPoint(op))
                clones.append(clone)
                _remap(clone, mapping)
                for old, new in zip(inner.results, clone.results):
                    mapping[old] = new
            mapped = [mapping.get(v, v) for v in outs]
            cond_value = mapped[0]
            values = mapped[1 : 1 + len(carried)]
            for k in range(n_scan):
                scans[k].append(mapped[1 + len(carried) + k])
        finals = list(values)
        if n_scan and not scans[0]:
            for c in reversed(clones):  # no iteration ran: the scan outputs' element shape is unknown
                c.erase()
            return False
        if n_scan:
            axes = U.make_constant(np.array([0], dtype=np.int64))
            for k in range(n_scan):
                res_type = op.results[len(carried) + k].type
                parts = [onnx_op("Unsqueeze", [v, axes], [_unsqueezed_type(v.type, 0)]).result for v in scans[k]]
                finals.append(onnx_op("Concat", parts, [res_type], {"axis": 0}).result)
    _replace(op, finals)
    return True


def _remap(root: ir.Operation, mapping: dict[ir.Value, ir.Value]) -> None:
    """Point every operand of `root` and of the ops nested in it that `mapping` knows at its
    image (a cloned body op still uses the original block arguments and earlier body results)."""

    def visit(op: ir.Operation) -> ir.WalkResult:
        for i, v in enumerate(op.operands):
            new = mapping.get(v)
            if new is not None:
                op.operands[i] = new
        return ir.WalkResult.ADVANCE

    root.operation.walk(visit, ir.WalkOrder.PRE_ORDER)


def _replace(op: ir.Operation, values: list[ir.Value]) -> None:
    """Replace `op`'s results by `values` and erase it. Where a user cannot take a value of a
    different type (a subgraph's `gpu.yield`, a non-ONNX op), an Identity to the old type stands
    between them, so the op always goes."""
    for res, new in zip(op.results, values):
        if res.type == new.type:
            res.replace_all_uses_with(new)
            continue
        # A sequence/optional of another spelling (`!onnx.seq<tensor<*xf32>>` for
        # `!onnx.seq<tensor<f32>>`) is no refinement `replace_value` could put into a function's
        # signature: it always goes through an Identity, which the structure looks through.
        if _kind(res.type) not in ("seq", "opt") and U.replace_value(res, new):
            continue
        with ir.InsertionPoint(op), op.location:
            cast = onnx_op("Identity", [new], [res.type]).result
        res.replace_all_uses_with(cast)
    op.erase()


def _erase_dead(module: ir.Operation) -> int:
    """Erase sequence/optional producers (and Identity/OptionalGetElement of such values) that
    nothing uses any more; innermost and last first so whole chains go in one pass."""

    def candidate(op: ir.Operation) -> bool:
        info = U.info_of(op)
        if info is None:
            return False
        if info.op_type in _PRODUCERS:
            return True
        return info.op_type in ("Identity", "OptionalGetElement") and any(_kind(r.type) in ("seq", "opt") for r in op.results)

    erased = 0
    for op in reversed(U.collect_ops(module, candidate)):
        if not U.has_uses(op):
            op.erase()
            erased += 1
    return erased


# --- function boundaries -----------------------------------------------------------------------


@dataclass(frozen=True)
class SeqLayout:
    """A sequence value of known structure: the layout of each element, in order."""

    elements: tuple["Layout", ...]


@dataclass(frozen=True)
class OptLayout:
    """An optional value: the layout of its element, or None when absent."""

    value: "Layout | None"


#: How a value is laid out in tensors: a tensor (its MLIR type), a sequence, or an optional.
Layout = Union[ir.Type, SeqLayout, OptLayout]


@dataclass(frozen=True, eq=False)
class ValueLayout:
    """A tensor argument bound to this call's value: it becomes a constant of the specialized
    function (and no argument of it). For the small integer/bool inputs that decide a structure
    (a Loop's trip count and condition, a scalar split, an If's condition over sequences): with
    their values known, the structure is known when compiling. The runtime keys each
    specialization by these values."""

    value: np.ndarray


class BoundaryError(OnnxcError):
    """A sequence/optional input or output of a function cannot be bound to tensors."""


def layout_leaves(layout: Layout) -> list[ir.Type]:
    """The tensor types of a layout, in order (depth first): the flattened values."""
    if isinstance(layout, SeqLayout):
        return [t for e in layout.elements for t in layout_leaves(e)]
    if isinstance(layout, OptLayout):
        return [] if layout.value is None else layout_leaves(layout.value)
    return [layout]


def _inner_type(t: ir.Type) -> ir.Type:
    text = str(t)
    return ir.Type.parse(text[text.index("<") + 1 : -1])


def _build_from_layout(layout: Layout, declared: ir.Type, leaves: list[ir.Value], where: str) -> ir.Value:
    """Ops (at the current insertion point) that rebuild a value of type `declared` laid out as
    `layout` from its leaf values (consumed from the front of `leaves`)."""
    kind = _kind(declared)
    if isinstance(layout, SeqLayout):
        if kind != "seq":
            raise BoundaryError(f"{where}: a sequence was given for a value of type {declared}")
        elems = [_build_from_layout(e, _inner_type(declared), leaves, f"{where}[{i}]") for i, e in enumerate(layout.elements)]
        if elems:
            return onnx_op("SequenceConstruct", elems, [declared]).result
        elem = U.element_type_of(_inner_type(declared))
        if elem is None:
            raise BoundaryError(f"{where}: an empty sequence of {_inner_type(declared)} cannot be built")
        dtype = types_mod.onnx_element_type(elem).onnx_dtype
        return onnx_op("SequenceEmpty", [], [declared], {"dtype": dtype}).result
    if isinstance(layout, OptLayout):
        if kind != "opt":
            raise BoundaryError(f"{where}: an optional was given for a value of type {declared}")
        if layout.value is None:
            return onnx_op("Optional", [None], [declared], {"type": _inner_type(declared)}).result
        inner = _build_from_layout(layout.value, _inner_type(declared), leaves, where)
        return onnx_op("Optional", [inner], [declared]).result
    if kind != "tensor":
        raise BoundaryError(f"{where}: a tensor was given for a value of type {declared}")
    return leaves.pop(0)


def _main_function(module: ir.Operation) -> ir.Operation:
    funcs = U.functions(module)
    if "onnx.main" in module.attributes:
        name = ir.FlatSymbolRefAttr(module.attributes["onnx.main"]).value
        funcs = [f for f in funcs if ir.StringAttr(f.attributes["sym_name"]).value == name]
    if len(funcs) != 1:
        raise BoundaryError("the module has no single main function to bind")
    return funcs[0]


def _value_name(attrs: list[ir.Attribute], i: int, what: str) -> str:
    if i < len(attrs):
        d = ir.DictAttr(attrs[i])
        if "onnx.name" in d:
            return ir.StringAttr(d["onnx.name"]).value
    return f"{what} {i}"


def _named(name: str) -> ir.Attribute:
    return ir.DictAttr.get({"onnx.name": ir.StringAttr.get(name)})


def bind_boundary(module: ir.Operation, inputs: Sequence[Layout | ValueLayout | None]) -> list[Layout]:
    """Specialize the main function of `module` to the input layouts `inputs` (one per argument;
    None keeps an argument as it is, a `ValueLayout` makes it a constant) and flatten its outputs.

    Every argument given a layout is replaced by one argument per leaf tensor (types from the
    layout, so the runtime's arrays fix ranks and dims), the sequence/optional value is rebuilt
    from them at the top of the body, and `eliminate_sequences` runs. Each result of sequence or
    optional type whose structure is then known becomes its leaf tensors. Returns the layout of
    every original result (a plain tensor result's layout is its type), in order. Raises
    `BoundaryError` naming the input or output that cannot be bound."""
    module = module.operation
    fn = _main_function(module)
    block = fn.regions[0].blocks[0]
    old_args = list(block.arguments)
    if len(inputs) != len(old_args):
        raise BoundaryError(f"{len(inputs)} input layouts for {len(old_args)} arguments")
    arg_attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"])) if "arg_attrs" in fn.attributes else []
    res_attrs = list(ir.ArrayAttr(fn.attributes["res_attrs"])) if "res_attrs" in fn.attributes else []
    body = U.block_ops(block)
    if not body:
        raise BoundaryError("the main function has an empty body")
    new_attrs: list[ir.Attribute] = []
    with module.context, ir.InsertionPoint(body[0]):
        for i, (arg, layout) in enumerate(zip(old_args, inputs)):
            name = _value_name(arg_attrs, i, "input")
            if layout is None:
                new_attrs.append(arg_attrs[i] if i < len(arg_attrs) else ir.DictAttr.get({}))
                arg.replace_all_uses_with(block.add_argument(arg.type, arg.location))
                continue
            if isinstance(layout, ValueLayout):
                elem = U.element_type_of(arg.type)
                with arg.location:
                    const = U.make_constant(np.asarray(layout.value), elem)
                if const is None or not U.replace_value(arg, const):
                    raise BoundaryError(f"input '{name}': its value cannot be bound as a constant")
                continue
            leaves = [block.add_argument(t, arg.location) for t in layout_leaves(layout)]
            new_attrs += [_named(f"{name}[{j}]") for j in range(len(leaves))]
            with arg.location:
                value = _build_from_layout(layout, arg.type, list(leaves), f"input '{name}'")
            arg.replace_all_uses_with(value)
        for i in reversed(range(len(old_args))):
            block.erase_argument(i)
    with module.context, ir.Location.unknown():
        eliminate_sequences(module)
        ret = U.terminator(block)
        assert ret is not None and ret.name == "func.return"
        layouts: list[Layout] = []
        flat: list[ir.Value] = []
        flat_attrs: list[ir.Attribute] = []
        for attempt in range(BOUNDARY_FOLD_ROUNDS + 1):
            layouts, flat, flat_attrs = [], [], []
            sweep = _Sweep()
            try:
                for i, v in enumerate(ret.operands):
                    name = _value_name(res_attrs, i, "output")
                    layout, leaves = _result_layout(sweep, v, f"output '{name}'")
                    layouts.append(layout)
                    flat += leaves
                    if isinstance(layout, ir.Type):
                        flat_attrs.append(res_attrs[i] if i < len(res_attrs) else ir.DictAttr.get({}))
                    else:
                        flat_attrs += [_named(f"{name}[{j}]") for j in range(len(leaves))]
                break
            except BoundaryError:
                if attempt == BOUNDARY_FOLD_ROUNDS:
                    raise
                # Values bound as constants (ValueLayout) or optionals of known presence often
                # decide a structure only through arithmetic (Not of OptionalHasElement) and an If
                # on it: fold constants and inline Ifs of known condition, then eliminate again.
                from onnxc.transforms.onnx_canonicalize import OnnxCanonicalizePass
                from onnxc.transforms.onnx_constant_fold import OnnxConstantFoldPass

                OnnxConstantFoldPass().run(module)
                OnnxCanonicalizePass().run(module)
                eliminate_sequences(module)
                ret = U.terminator(block)
                assert ret is not None and ret.name == "func.return"
        func_dialect.ReturnOp(flat, loc=ret.location, ip=ir.InsertionPoint(ret))
        ret.erase()
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([a.type for a in block.arguments], [v.type for v in flat]))
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get(new_attrs)
        fn.attributes["res_attrs"] = ir.ArrayAttr.get(flat_attrs)
        _erase_dead(module)
    return layouts


def _result_layout(sweep: _Sweep, v: ir.Value, where: str) -> tuple[Layout, list[ir.Value]]:
    kind = _kind(v.type)
    if kind == "tensor":
        return v.type, [v]
    if kind == "seq":
        elems = sweep.elements(v)
        if elems is None:
            raise BoundaryError(f"{where}: a sequence whose length is not known when compiling")
        parts = [_result_layout(sweep, e, f"{where}[{i}]") for i, e in enumerate(elems)]
        return SeqLayout(tuple(p[0] for p in parts)), [x for p in parts for x in p[1]]
    if kind == "opt":
        state = _optional_state(v)
        if state is None:
            raise BoundaryError(f"{where}: an optional whose presence is not known when compiling")
        if not state[0]:
            return OptLayout(None), []
        inner, leaves = _result_layout(sweep, state[1], where)
        return OptLayout(inner), leaves
    raise BoundaryError(f"{where}: values of type {v.type} cannot be returned as tensors")


__all__ = [
    "MAX_SWEEPS", "BoundaryError", "Layout", "OnnxEliminateSequencesPass", "OptLayout", "SeqLayout", "ValueLayout", "bind_boundary",
    "eliminate_sequences", "layout_leaves",
]  # fmt: skip
