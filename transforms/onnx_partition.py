"""`onnx-partition`: split each function's ONNX ops into connected subgraphs and assign each to
the backend a roofline says is fastest, the CPU when nothing beats it (ONNXIFI's steps 1-3d).

Why a pass on the ONNX dialect: the decision is visible in IR (`onnx-opt -p onnx-partition`,
lit tests) and reproducible from it, and the figures it uses are data in the IR, so this module
imports nothing of `onnxc.targets` (transforms sit below targets; `onnxc.targets.backends`
writes the data from its backends' `info()` and compatibility answers, then runs the pass).

Input, read from the IR:

- module attribute `onnxc.backend_profiles`: `{name = {macs = {f32 = 1.0e12 : f64, ...},
  mem_bw = .., h2d_bw = .., d2h_bw = .., host, ops = ["MatMul", ...]}, ...}`. `macs`: peak
  multiply-accumulates/s per element type; `mem_bw`: device memory bytes/s; `h2d_bw`/`d2h_bw`:
  transfer bytes/s; `host` (unit) marks the CPU, which needs no transfers and is the fallback;
  `ops` (optional) the op types the backend accepts when a node carries no mark of its own.
- op attribute `onnxc.accepted_by = ["cpu", "vulkan"]` (optional): the backends whose
  compatibility query said "supported" for this node; without it, a backend accepts a node when
  its `ops` list (if any) names the op type and its `macs` has the node's element type.
- options: `backends` (`onnx-partition{backends=vulkan,cpu}`): the backends to consider
  (default: every profile; the host profile is always the fallback); `force`: a backend that
  gets every node it accepts (several, comma-separated, when each node's marks name at most
  one of them: `onnxc.compile(target=[...])`'s preference order, resolved per node by the
  caller); `pin-host`: ONNX node names kept on the host (the user's
  overrides); `profiles`: a JSON file with the same figures, used instead of the attribute.

Algorithm, per function (`onnx.constant`/`onnx.none` are not nodes: weights are uploaded once at
graph initialization, so they count neither as work nor as per-run transfers):

1. Mark: every node gets `onnxc.accepted_by` (the host always accepts).
2. Cost: per node, MACs (MatMul/Gemm: output elements x the reduced dim; Conv/ConvTranspose:
   output elements x the weight's elements per output channel; everything else one per output
   element) and bytes (every operand and result; a dynamic dim counts as 1, so dynamic models
   are under-estimated, never refused); a node's time on a backend is
   max(MACs / peak MACs[type], bytes / memory bandwidth).
3. Subgraphs: for each non-host backend, the nodes it accepts that are not assigned yet are
   grouped (`form_subgraphs`) into connected subgraphs that keep the graph acyclic once every
   subgraph is contracted to one node; each costs its nodes' times plus its inputs' bytes / h2d
   and its outputs' (used outside, or returned) bytes / d2h. The subgraph with the largest gain
   over running its nodes on the host is assigned; repeat until no subgraph gains.
4. The rest go to the host, grouped the same way, so every node belongs to one subgraph and the
   contracted graph of subgraphs is acyclic: ids are numbered in a topological order of it (the
   order to run them in).

Output: every node gets `onnxc.subgraph` (i64) and `onnxc.backend` (string); the function gets
`onnxc.partition`, one dictionary per subgraph: `id`, `backend`, `nodes`, `est` (seconds per
backend that accepts all of it), `transfer` (seconds of transfers on the chosen backend).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Iterable, Sequence

from mlir import ir

from onnxc.transforms import onnx_utils as U
from onnxc.transforms.lowering.common import node_name
from onnxc.transforms.pass_base import ModulePass, PassFailure

__all__ = ["OnnxPartitionPass", "Profile", "form_subgraphs", "is_acyclic_contraction"]

PROFILES_ATTR = "onnxc.backend_profiles"
ACCEPTED_ATTR = "onnxc.accepted_by"
SUBGRAPH_ATTR = "onnxc.subgraph"
BACKEND_ATTR = "onnxc.backend"
PARTITION_ATTR = "onnxc.partition"


@dataclasses.dataclass(frozen=True)
class Profile:
    """One backend's roofline figures (see the module doc for the attribute they come from)."""

    name: str
    macs: dict[str, float]
    mem_bw: float
    h2d_bw: float
    d2h_bw: float
    host: bool = False
    ops: frozenset[str] | None = None

    def node_time(self, macs: float, nbytes: float, dtype: str) -> float:
        """The roofline time of one node (inf where the backend has no usable figure)."""
        # A type without its own figure (a node the backend said it runs, e.g. i32 on a device
        # that declared f32 only) is costed at the best declared figure.
        peak = self.macs.get(dtype) or max(self.macs.values(), default=0.0)
        if peak <= 0 or self.mem_bw <= 0:
            return math.inf
        return max(macs / peak, nbytes / self.mem_bw)

    def transfer_time(self, in_bytes: float, out_bytes: float) -> float:
        """Seconds to move a subgraph's inputs in and its outputs out (0 on the host)."""
        if self.host:
            return 0.0
        if self.h2d_bw <= 0 or self.d2h_bw <= 0:
            return math.inf
        return in_bytes / self.h2d_bw + out_bytes / self.d2h_bw


# ------------------------------------------------------------------- graph algorithm (pure)


def _topo_order(n: int, succ: Sequence[set[int]]) -> list[int]:
    """A topological order (shorter than `n` when there is a cycle) taking the smallest ready
    node first, so that numberings derived from it are deterministic and follow program order."""
    indeg = [0] * n
    for u in range(n):
        for v in succ[u]:
            indeg[v] += 1
    ready = [u for u in range(n) if indeg[u] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        u = heapq.heappop(ready)
        order.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, v)
    return order


def is_acyclic_contraction(n: int, edges: Iterable[tuple[int, int]], groups: Sequence[Iterable[int]]) -> bool:
    """Whether contracting each group (the rest stay single nodes) leaves a DAG."""
    label = list(range(n))
    for g, members in enumerate(groups):
        for u in members:
            label[u] = n + g
    ids = sorted(set(label))
    index = {x: i for i, x in enumerate(ids)}
    succ: list[set[int]] = [set() for _ in ids]
    for u, v in edges:
        a, b = index[label[u]], index[label[v]]
        if a != b:
            succ[a].add(b)
    return len(_topo_order(len(ids), succ)) == len(ids)


def form_subgraphs(n: int, edges: Iterable[tuple[int, int]], eligible: Iterable[int]) -> list[list[int]]:
    """Group the `eligible` nodes of a DAG (`n` nodes, `edges` u->v) into connected subgraphs such
    that contracting every subgraph keeps the graph acyclic.

    Nodes are visited in topological order; a node first forms its own subgraph and is then merged
    with the subgraph of each eligible producer unless the merge would close a cycle: some path
    leaves the merged pair and comes back to it through other nodes or subgraphs, checked on the
    graph with the current subgraphs contracted (a path through another subgraph's nodes counts,
    as that subgraph becomes one node too).
    """
    succ: list[set[int]] = [set() for _ in range(n)]
    pred: list[set[int]] = [set() for _ in range(n)]
    for u, v in edges:
        if u != v:
            succ[u].add(v)
            pred[v].add(u)
    ok = set(eligible)
    group: dict[int, int] = {}  # node -> representative
    members: dict[int, set[int]] = {}

    def closes_cycle(merged: set[int]) -> bool:
        # Walk out of `merged` over contracted subgraphs; reaching `merged` again is a cycle.
        seen: set[int] = set()
        stack = [v for u in merged for v in succ[u] if v not in merged]
        while stack:
            x = stack.pop()
            if x in merged:
                return True
            if x in seen:
                continue
            nodes = members[group[x]] if x in group else {x}
            seen |= nodes
            for y in nodes:
                for z in succ[y]:
                    if z in merged:
                        return True
                    if z not in seen:
                        stack.append(z)
        return False

    for u in _topo_order(n, succ):
        if u not in ok:
            continue
        group[u] = u
        members[u] = {u}
        for p in sorted(pred[u]):
            if p not in ok or group[p] == group[u]:
                continue
            a, b = group[p], group[u]
            merged = members[a] | members[b]
            if closes_cycle(merged):
                continue
            for x in members[b]:
                group[x] = a
            members[a] = merged
            del members[b]
    return [sorted(m) for _, m in sorted(members.items())]


# ------------------------------------------------------------------------------- IR reading


def _f(attr: ir.Attribute) -> float:
    if isinstance(attr, ir.FloatAttr):
        return attr.value
    if isinstance(attr, ir.IntegerAttr):
        return float(attr.value)
    raise ValueError(f"expected a number, got {attr}")


def _dict(attr: ir.Attribute, what: str) -> dict[str, ir.Attribute]:
    if not isinstance(attr, ir.DictAttr):
        raise ValueError(f"{what} must be a dictionary, got {attr}")
    return {named.name: named.attr for named in attr}


def read_profiles(module: ir.Operation) -> list[Profile]:
    """The module's `onnxc.backend_profiles`; `PassFailure` naming the bad entry."""
    if PROFILES_ATTR not in module.attributes:
        raise PassFailure("onnx-partition", [(module.location, f"the module has no '{PROFILES_ATTR}' attribute (the backends' figures); onnxc.targets.backends.partition writes it")])
    out = []
    try:
        for name, raw in _dict(module.attributes[PROFILES_ATTR], PROFILES_ATTR).items():
            d = _dict(raw, f"profile '{name}'")
            ops = None
            if "ops" in d:
                ops = frozenset(ir.StringAttr(a).value for a in ir.ArrayAttr(d["ops"]))
            macs = {k: _f(v) for k, v in _dict(d.get("macs", ir.DictAttr.get({})), f"profile '{name}' macs").items()}
            out.append(Profile(name, macs, _f(d["mem_bw"]), _f(d.get("h2d_bw", d["mem_bw"])), _f(d.get("d2h_bw", d["mem_bw"])), "host" in d, ops))
    except (ValueError, KeyError) as e:
        raise PassFailure("onnx-partition", [(module.location, f"{PROFILES_ATTR}: {e}")]) from None
    return out


def profiles_from_json(path: str, where: ir.Location) -> list[Profile]:
    """Profiles from a JSON file `{name: {"macs": {"f32": ..}, "mem_bw": .., "h2d_bw": ..,
    "d2h_bw": .., "host": true, "ops": [..]}}` (what `onnxc.targets.backends.partition.
    profiles_json` writes from the backends' `info()`); `PassFailure` naming the bad entry."""
    import json

    def fail(msg: str) -> PassFailure:
        return PassFailure("onnx-partition", [(where, f"profiles={path}: {msg}")])

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        raise fail(str(e)) from None
    if not isinstance(data, dict):
        raise fail("expected an object mapping backend names to figures")
    out = []
    for name, d in data.items():
        try:
            macs = {str(k): float(v) for k, v in dict(d.get("macs", {})).items()}
            ops = frozenset(str(x) for x in d["ops"]) if d.get("ops") is not None else None
            bw = float(d["mem_bw"])
            out.append(Profile(str(name), macs, bw, float(d.get("h2d_bw", bw)), float(d.get("d2h_bw", bw)), bool(d.get("host", False)), ops))
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise fail(f"backend '{name}': bad or missing figure {e}") from None
    return out


def _nbytes(t: ir.Type) -> float:
    if not isinstance(t, ir.ShapedType) or not t.has_rank:
        return 0.0
    et = t.element_type
    width = getattr(et, "width", None) or 32  # complex/index: counted as 4 bytes
    count = 1
    for d in t.shape:
        count *= d if d >= 0 else 1
    return count * width / 8


def _elements(t: ir.Type) -> float:
    if not isinstance(t, ir.ShapedType) or not t.has_rank:
        return 1.0
    return float(math.prod(d if d >= 0 else 1 for d in t.shape))


def _dtype(op: ir.Operation) -> str:
    for v in list(op.results) + list(op.operands):
        if isinstance(v.type, ir.ShapedType):
            return str(v.type.element_type)
    return "f32"


def node_macs(op: ir.Operation) -> float:
    """Multiply-accumulates of one node (see the module doc for the rule per op kind)."""
    info = U.info_of(op)
    kind = info.op_type if info is not None else ""
    out = _elements(op.results[0].type) if len(op.results) else 1.0
    if kind in ("MatMul", "Gemm", "MatMulInteger") and len(op.operands) >= 2:
        a = op.operands[0].type
        if isinstance(a, ir.ShapedType) and a.has_rank and a.rank >= 1:
            trans_a = kind == "Gemm" and "transA" in op.attributes and ir.IntegerAttr(op.attributes["transA"]).value == 1
            k = a.shape[0] if trans_a and a.rank == 2 else a.shape[-1]
            return out * max(k, 1)
    if kind in ("Conv", "ConvTranspose", "ConvInteger") and len(op.operands) >= 2:
        w = op.operands[1].type
        if isinstance(w, ir.ShapedType) and w.has_rank and w.rank >= 2:
            return out * math.prod(max(d, 1) for d in w.shape[1:])
    return out


def node_bytes(op: ir.Operation) -> float:
    """Bytes a node reads and writes (operands and results)."""
    return sum(_nbytes(v.type) for v in op.operands) + sum(_nbytes(r.type) for r in op.results)


def _is_node(op: ir.Operation) -> bool:
    return U.is_onnx_op(op) and not U.is_constant_op(op) and op.name != U.NONE_OP


# -------------------------------------------------------------------------------- the pass


@dataclasses.dataclass(frozen=True)
class OnnxPartitionPass(ModulePass):
    """Assign connected, acyclic subgraphs of ONNX ops to backends by a roofline with transfers.

    Options: `backends` (the backend names to consider, default every profile of the module's
    `onnxc.backend_profiles`; the host profile is always the fallback); `force` (a backend that
    gets every node it accepts whatever the roofline says: the user's override, e.g. to test a
    device or when the figures are known to be wrong; several when each node's marks name at
    most one of them); `pin_host` (ONNX node names that stay on
    the host whatever the backends accept: the user's deny list, e.g. a node whose device result
    is known to be too imprecise); `profiles` (a JSON file of the figures, instead of the module's
    `onnxc.backend_profiles`, for `onnx-opt` on an imported model).
    """

    name = "onnx-partition"
    backends: tuple[str, ...] = ()
    force: tuple[str, ...] = ()
    pin_host: tuple[str, ...] = ()
    profiles: str = ""

    def run(self, module: ir.Operation) -> None:
        module = module.operation
        with module.context, ir.Location.unknown():
            profiles = profiles_from_json(self.profiles, module.location) if self.profiles else read_profiles(module)
            hosts = [p for p in profiles if p.host]
            if len(hosts) != 1:
                raise PassFailure(self.name, [(module.location, f"{PROFILES_ATTR} must mark exactly one profile 'host' (the CPU fallback), found {len(hosts)}")])
            host = hosts[0]
            if self.backends:
                unknown = [b for b in self.backends if b not in {p.name for p in profiles}]
                if unknown:
                    raise PassFailure(self.name, [(module.location, f"unknown backend(s) {', '.join(unknown)} (profiles: {', '.join(p.name for p in profiles)})")])
                profiles = [p for p in profiles if p.name in self.backends or p.host]
            missing = [b for b in self.force if b not in {p.name for p in profiles}]
            if missing:
                raise PassFailure(self.name, [(module.location, f"force={','.join(missing)}: no such backend among {', '.join(p.name for p in profiles)}")])
            for f in U.functions(module):
                if len(f.regions[0].blocks):
                    self._partition(f, profiles, host)

    def _partition(self, f: ir.Operation, profiles: list[Profile], host: Profile) -> None:
        ops = [op for op in U.block_ops(f.regions[0].blocks[0]) if _is_node(op)]
        index = {U.id_key(op): i for i, op in enumerate(ops)}
        n = len(ops)
        edges: list[tuple[int, int]] = []
        # Per node, per result: the nodes that read it, and whether it escapes (returned, or read
        # by an op that is not a node), i.e. must leave any subgraph that makes it.
        consumers: list[list[tuple[ir.Value, set[int], bool]]] = []
        for i, op in enumerate(ops):
            for v in op.operands:
                if isinstance(v, ir.OpResult) and U.id_key(v.owner) in index:
                    edges.append((index[U.id_key(v.owner)], i))
            outs = []
            for r in op.results:
                users: set[int] = set()
                escapes = False
                for use in r.uses:
                    owner = use.owner
                    k = U.id_key(owner)
                    if k in index:
                        users.add(index[k])
                    else:
                        escapes = True  # returned, or used by a non-node op (a region, a call)
                outs.append((r, users, escapes))
            consumers.append(outs)

        accepted: list[list[str]] = []
        for op in ops:
            dtype = _dtype(op)
            info = U.info_of(op)
            kind = info.op_type if info is not None else op.name
            marked = None
            if self.pin_host and node_name(op) in self.pin_host:
                marked = set()
            elif ACCEPTED_ATTR in op.attributes:
                marked = {ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes[ACCEPTED_ATTR])}
            names = []
            for p in profiles:
                if p.host:
                    ok = True
                elif marked is not None:
                    ok = p.name in marked
                else:
                    ok = (p.ops is None or kind in p.ops) and dtype in p.macs
                if ok:
                    names.append(p.name)
            accepted.append(names)
            op.attributes[ACCEPTED_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(s) for s in names])

        times = {p.name: [p.node_time(node_macs(op), node_bytes(op), _dtype(op)) for op in ops] for p in profiles}

        def transfers(nodes: set[int]) -> tuple[float, float]:
            inb = outb = 0.0
            seen: set[tuple[object, int]] = set()
            for i in nodes:
                for v in ops[i].operands:
                    owner = U.id_key(v.owner) if isinstance(v, ir.OpResult) else None
                    if owner is not None and owner in index and index[owner] in nodes:
                        continue
                    if isinstance(v, ir.OpResult) and U.is_constant_op(v.owner):
                        continue  # weights: uploaded once at graph init
                    key = ("arg", v.arg_number) if isinstance(v, ir.BlockArgument) else (owner, v.result_number)
                    if key not in seen:
                        seen.add(key)
                        inb += _nbytes(v.type)
                for r, users, escapes in consumers[i]:
                    if escapes or users - nodes:
                        outb += _nbytes(r.type)
            return inb, outb

        def cost(p: Profile, nodes: set[int]) -> tuple[float, float]:
            """(total seconds, of which transfers) of `nodes` on `p`."""
            moved = p.transfer_time(*transfers(nodes))
            return sum(times[p.name][i] for i in nodes) + moved, moved

        # Greedy: contract assigned groups, regroup the rest for each backend, take the best gain.
        assigned: list[tuple[set[int], str]] = []
        owner_of: dict[int, int] = {}
        while True:
            best: tuple[float, set[int], str] | None = None
            for p in profiles:
                if p.host and p.name not in self.force:
                    continue
                units, unit_edges, eligible_units, unit_nodes = _contract(n, edges, assigned, owner_of, lambda i: p.name in accepted[i])
                for group in form_subgraphs(units, unit_edges, eligible_units):
                    nodes = set().union(*(unit_nodes[u] for u in group))
                    gain = math.inf if p.name in self.force else cost(host, nodes)[0] - cost(p, nodes)[0]
                    if gain > 0 and (best is None or gain > best[0]):
                        best = (gain, nodes, p.name)
            if best is None:
                break
            for i in best[1]:
                owner_of[i] = len(assigned)
            assigned.append((best[1], best[2]))
        units, unit_edges, eligible_units, unit_nodes = _contract(n, edges, assigned, owner_of, lambda i: True)
        for group in form_subgraphs(units, unit_edges, eligible_units):
            nodes = set().union(*(unit_nodes[u] for u in group))
            for i in nodes:
                owner_of[i] = len(assigned)
            assigned.append((nodes, host.name))

        # Number the subgraphs in a topological order of the contracted graph.
        g_succ: list[set[int]] = [set() for _ in assigned]
        for u, v in edges:
            if owner_of[u] != owner_of[v]:
                g_succ[owner_of[u]].add(owner_of[v])
        order = _topo_order(len(assigned), g_succ)
        if len(order) != len(assigned):  # form_subgraphs guarantees a DAG; a bug otherwise
            raise PassFailure(self.name, [(f.location, "internal error: the contracted subgraph graph has a cycle")])
        renumber = {g: k for k, g in enumerate(order)}
        table = []
        for g, (nodes, backend) in sorted(enumerate(assigned), key=lambda t: renumber[t[0]]):
            est = {}
            for p in profiles:
                if all(p.name in accepted[i] for i in nodes):
                    est[p.name] = ir.FloatAttr.get_f64(cost(p, nodes)[0])
            chosen = next(p for p in profiles if p.name == backend)
            table.append(ir.DictAttr.get({
                "id": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), renumber[g]),
                "backend": ir.StringAttr.get(backend),
                "nodes": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), len(nodes)),
                "est": ir.DictAttr.get(est),
                "transfer": ir.FloatAttr.get_f64(cost(chosen, nodes)[1]),
            }))
            for i in nodes:
                ops[i].attributes[SUBGRAPH_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), renumber[g])
                ops[i].attributes[BACKEND_ATTR] = ir.StringAttr.get(backend)
        f.attributes[PARTITION_ATTR] = ir.ArrayAttr.get(table)


def _contract(n: int, edges: list[tuple[int, int]], assigned: list[tuple[set[int], str]], owner_of: dict[int, int], eligible: Callable[[int], bool]) -> tuple[int, list[tuple[int, int]], list[int], list[set[int]]]:
    """The node graph with each assigned group as one unit: (unit count, unit edges, eligible
    units (unassigned nodes passing `eligible`), each unit's nodes)."""
    unit_of: dict[int, int] = {}
    unit_nodes: list[set[int]] = []
    for g, (nodes, _) in enumerate(assigned):
        for i in nodes:
            unit_of[i] = g
        unit_nodes.append(set(nodes))
    eligible_units = []
    for i in range(n):
        if i not in owner_of:
            unit_of[i] = len(unit_nodes)
            unit_nodes.append({i})
            if eligible(i):
                eligible_units.append(unit_of[i])
    unit_edges = sorted({(unit_of[u], unit_of[v]) for u, v in edges if unit_of[u] != unit_of[v]})
    return len(unit_nodes), unit_edges, eligible_units, unit_nodes
