"""TreeEnsemble (ai.onnx.ml opset 5): a forest of decision trees, aggregated per target.

What: the trees are attributes, so they are unfolded at compile time (depth first, true branch
first) into their root-to-leaf paths. Set-membership nodes take their sets from
`membership_values` in the order `nodes_modes` lists them, as the schema says and onnxruntime
does; onnx.reference gives them out in the order its walk meets the nodes instead, so where the
two readings differ the forest is refused (a node shared by two trees keeps its one set: the
reference runs out of sets there and refuses). One `linalg.generic` over
(sample, target) then evaluates every node's comparison once (in f64, as the reference compares
Python floats; NaN features follow `nodes_missing_value_tracks_true`) and folds in the weight of
each leaf whose path holds and whose target is the output column (SUM, AVERAGE: weight / trees,
MIN, MAX). Why paths rather than a traversal loop: a sample reaches exactly one leaf per tree,
so "all conditions of the path hold" is a branch-free test the generic can vectorize; forests
whose unfolded paths would make the body very large are refused by the pre-check.
post_transform other than NONE is refused (the reference ignores it, so its meaning is not
checked by anything).
"""

from __future__ import annotations

import math as pymath
from typing import Any

import numpy as np
from mlir import ir
from mlir.dialects import arith, tensor

from onnxc.transforms.lowering.common import (
    Node,
    affine_map,
    const_index,
    const_scalar,
    convert_element,
    convert_scalar,
    dim,
    dim_value,
    empty,
    filled,
    generic,
    index_of,
    is_float,
    lowers,
    rank_of,
    static_shape,
)

F = arith.CmpFPredicate
P = arith.CmpIPredicate

# (node id, taken branch) per step of a path; a leaf: (weight, target).
Path = tuple[list[tuple[int, bool]], float, int]
_MAX_PATH_STEPS = 20000  # body size bound: unfolded path steps over the whole forest


def _arr(v: Any) -> list[Any]:
    if v is None:
        return []
    return list(np.asarray(v).reshape(-1))


def _forest(node: Node) -> tuple[list[Path], dict[int, tuple[int, int, Any, bool]], int] | str:
    """(paths, node id -> (feature, mode, split or set, missing tracks true), tree count)."""
    modes = [int(m) for m in _arr(node.attr("nodes_modes"))]
    splits = [float(s) for s in _arr(node.attr("nodes_splits"))]
    feats = [int(f) for f in _arr(node.attr("nodes_featureids"))]
    t_ids, f_ids = [int(v) for v in _arr(node.attr("nodes_truenodeids"))], [int(v) for v in _arr(node.attr("nodes_falsenodeids"))]
    t_leaf, f_leaf = [int(v) for v in _arr(node.attr("nodes_trueleafs"))], [int(v) for v in _arr(node.attr("nodes_falseleafs"))]
    weights = [float(w) for w in _arr(node.attr("leaf_weights"))]
    targets = [int(t) for t in _arr(node.attr("leaf_targetids"))]
    roots = [int(r) for r in _arr(node.attr("tree_roots"))]
    missing = [bool(m) for m in _arr(node.attr("nodes_missing_value_tracks_true"))] or [False] * len(modes)
    members = [float(v) for v in _arr(node.attr("membership_values"))]
    n = len(modes)
    if not roots or any(len(a) != n for a in (splits, feats, t_ids, f_ids, t_leaf, f_leaf, missing)):
        return "the nodes_* attributes must all have one value per node, and tree_roots must not be empty"
    if len(weights) != len(targets):
        return "leaf_weights and leaf_targetids differ in length"
    if any(f < 0 for f in feats):
        # A column of X: -1 read the element before each row (onnx.reference reads the last
        # column, numpy's negative index; fuzz seed 407 case 6446).
        return "nodes_featureids must not be negative"
    member_nodes = [i for i, m in enumerate(modes) if m == 6]
    if sum(pymath.isnan(v) for v in members) != len(member_nodes):
        return "membership_values must hold one NaN-terminated set per BRANCH_MEMBER node"
    sets: dict[int, list[float]] = {}
    it = iter(members)
    for i in member_nodes:
        sets[i] = []
        for v in it:
            if pymath.isnan(v):
                break
            sets[i].append(v)
    visits: list[int] = []  # member nodes in the order the depth-first walk meets them
    info: dict[int, tuple[int, int, Any, bool]] = {}
    paths: list[Path] = []
    steps = 0

    def leaf(i: int, conds: list[tuple[int, bool]]) -> str | None:
        if not 0 <= i < len(weights):
            return f"leaf index {i} is out of range"
        paths.append((list(conds), weights[i], targets[i]))
        return None

    def build(i: int, conds: list[tuple[int, bool]], depth: int) -> str | None:
        nonlocal steps
        if not 0 <= i < n or depth > n:
            return f"node index {i} is out of range (or the trees have a cycle)"
        steps += len(conds) + 1
        if steps > _MAX_PATH_STEPS:
            return "the forest is too large to unfold into one body"
        if modes[i] == 6:
            visits.append(i)
            info[i] = (feats[i], 6, sets[i], missing[i])
        elif 0 <= modes[i] <= 5:
            info[i] = (feats[i], modes[i], splits[i], missing[i])
        else:
            return f"node mode {modes[i]} is unknown"
        for taken, nxt, is_leaf in ((True, t_ids[i], t_leaf[i]), (False, f_ids[i], f_leaf[i])):
            sub = conds + [(i, taken)]
            err = leaf(nxt, sub) if is_leaf else build(nxt, sub, depth + 1)
            if err:
                return err
        return None

    for r in roots:
        if not 0 <= r < n:
            return f"tree root {r} is out of range"
        if t_leaf[r] and f_leaf[r] and t_ids[r] == f_ids[r]:
            err = leaf(r, [])  # a tree that is one leaf (the reference reads the leaf at the root's index)
        else:
            err = build(r, [], 0)
        if err:
            return err
    # onnx.reference gives the k-th visit the k-th set (and refuses once they run out).
    by_walk = [sets[i] for i in member_nodes]
    if len(visits) <= len(by_walk) and any(by_walk[k] != sets[i] for k, i in enumerate(visits)):
        return ("the trees meet their BRANCH_MEMBER nodes in another order than nodes_modes lists them, so "
                "membership_values reads differently by the schema and by onnx.reference")
    return paths, info, len(roots)


def _last_column(info: dict[int, tuple[int, int, Any, bool]]) -> int:
    """The largest column of X the forest's nodes read (-1: none)."""
    return max((feat for feat, _, _, _ in info.values()), default=-1)


def _check_tree_ensemble(node: Node) -> str | None:
    """A 2-D float input, NONE post-transform, a known aggregate, a forest that unfolds."""
    t = node.onnx_types[0]
    if not isinstance(t, ir.RankedTensorType) or rank_of(t) != 2 or not is_float(node.in_elem(0)):
        return "X must be a 2-D float tensor"
    if int(node.attr("post_transform", 0) or 0) != 0:
        return "only post_transform NONE is lowered"
    if int(node.attr("aggregate_function", 1)) not in (0, 1, 2, 3):
        return "aggregate_function must be AVERAGE, SUM, MIN or MAX"
    if node.attr("n_targets") is None or int(node.attr("n_targets")) < 1:
        return "n_targets must be positive"
    f = _forest(node)
    if isinstance(f, str):
        return f
    if any(not 0 <= tgt < int(node.attr("n_targets")) for _, _, tgt in f[0]):
        return "a leaf target is out of range"
    columns = static_shape(t)[1]
    used = _last_column(f[1])
    if columns is not None and used >= columns:
        return f"nodes_featureids reads column {used} of an X with {columns} columns"
    return None


@lowers("TreeEnsemble", check=_check_tree_ensemble, domain="ai.onnx.ml")
def lower_tree_ensemble(node: Node) -> list[ir.Value]:
    """TreeEnsemble (see the module docstring)."""
    f64 = ir.F64Type.get()
    x = node.input(0)
    x_elem = node.in_elem(0)
    out_elem = convert_element(node.out_elem(0))
    paths, info, n_trees = _forest(node)  # type: ignore[misc]
    n_targets = int(node.attr("n_targets"))
    agg = int(node.attr("aggregate_function", 1))
    finfo = np.finfo(np.float64 if out_elem == ir.F64Type.get() else np.float32)
    init = {0: 0.0, 1: 0.0, 2: float(finfo.max), 3: float(finfo.min)}[agg]
    batch = dim(x, 0)
    used = _last_column(info)
    if used >= 0 and not isinstance(dim(x, 1), int):
        # A run-time feature count: the columns the trees read must exist (static: the check).
        from onnxc.transforms.lowering.runtime_checks import require

        columns = dim_value(dim(x, 1))
        require(arith.cmpi(P.ugt, columns, const_index(used)), node.op, f"the trees read column {used} of an X with {{columns}} columns",
                [("columns", columns)])

    def c(v: float) -> ir.Value:
        return const_scalar(v, f64)

    def body(args: list[ir.Value]) -> list[ir.Value]:
        b, t = index_of(0), index_of(1)
        feats: dict[int, ir.Value] = {}
        tests: dict[int, ir.Value] = {}

        def feature(f: int) -> ir.Value:
            if f not in feats:
                feats[f] = convert_scalar(tensor.extract(x, [b, const_index(f)]), x_elem, f64)
            return feats[f]

        def test(i: int) -> ir.Value:
            if i in tests:
                return tests[i]
            f, mode, value, miss = info[i]
            v = feature(f)
            if mode == 6:
                hit = const_scalar(0, ir.IntegerType.get_signless(1))
                for m in value:
                    hit = arith.ori(hit, arith.cmpf(F.OEQ, v, c(m)))
            else:  # NEQ is UNE: a NaN feature differs from every split, as in Python
                pred = {0: F.OLE, 1: F.OLT, 2: F.OGE, 3: F.OGT, 4: F.OEQ, 5: F.UNE}[mode]
                hit = arith.cmpf(pred, v, c(value))
            if miss:
                hit = arith.ori(hit, arith.cmpf(F.UNO, v, v))
            tests[i] = hit
            return hit

        acc = args[-1]
        true = const_scalar(1, ir.IntegerType.get_signless(1))
        for conds, w, tgt in paths:
            ok = arith.cmpi(P.eq, t, const_index(tgt))
            for i, taken in conds:
                h = test(i)
                ok = arith.andi(ok, h if taken else arith.xori(h, true))
            wv = const_scalar(w / n_trees if agg == 0 else w, out_elem)
            if agg in (0, 1):
                new = arith.addf(acc, wv)
            elif agg == 2:
                new = arith.minimumf(acc, wv)
            else:
                new = arith.maximumf(acc, wv)
            acc = arith.select(ok, new, acc)
        return [acc]

    targets = empty([n_targets], out_elem)
    out = filled([batch, n_targets], out_elem, init)
    return [generic([x, targets], [out], [affine_map(2, [0, "0"]), affine_map(2, [1]), affine_map(2, [0, 1])], ["parallel", "parallel"], body)[0]]
