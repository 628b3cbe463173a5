"""TfIdfVectorizer (opset 9) on integer tokens: n-gram counts (with skips) over each row,
weighted as TF, IDF or TFIDF.

What: the pool of n-grams is an attribute, so it is unpacked at compile time into constant
tables: per counted n-gram its tokens (padded to the longest size), its size and its output
column. One reduction `linalg.generic` over (row, n-gram, skip, start) counts the matches: an
n-gram of size n matches at `start` with skip distance d (1 .. max_skip_count + 1) when
x[start + j * d] equals its token j for every j < n, all inside the row; unigrams count at
d = 1 only (skips do not change them), exactly as the reference's trie walk counts them. A
second generic gathers the counts into the output columns (`ngram_indexes`) and applies the
weighting. Why closed form rather than the reference's trie: the pool is small and static, and
a match test per (n-gram, skip, start) is a plain parallel reduction. String pools (string
tensors) are not lowered here.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, tensor

from onnxc.transforms.lowering.common import (
    Node,
    affine_map,
    const_index,
    const_scalar,
    const_tensor,
    convert_scalar,
    dim,
    empty,
    filled,
    generic,
    index_of,
    is_bool,
    is_int,
    lowers,
    rank_of,
    reshape,
)

P = arith.CmpIPredicate


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _pool(node: Node) -> tuple[list[tuple[int, ...]], list[int], int] | str:
    """(counted n-grams, their output columns, output width), as the reference loads them:
    n-grams of sizes outside [min_gram_length, max_gram_length] keep their ids but never count."""
    pool = [int(v) for v in (node.attr("pool_int64s") or [])]
    counts = [int(v) for v in (node.attr("ngram_counts") or [])]
    indexes = [int(v) for v in (node.attr("ngram_indexes") or [])]
    lo, hi = int(node.attr("min_gram_length", 0)), int(node.attr("max_gram_length", 0))
    if not pool or not counts or not indexes:
        return "pool_int64s, ngram_counts and ngram_indexes are required (string pools are not lowered)"
    # The start of each n-gram size in the pool: from 0, non-decreasing, inside the pool. Others
    # (ngram_counts = [4, -4]: the compile fuzzer) sliced the pool from the end and counted
    # n-grams the model does not have.
    if counts[0] != 0 or any(b < a for a, b in zip(counts, counts[1:])) or counts[-1] > len(pool):
        return f"ngram_counts {counts} must start at 0 and rise within the pool of {len(pool)}"
    grams: list[tuple[int, ...]] = []
    cols: list[int] = []
    seen: set[tuple[int, ...]] = set()
    gid = 0
    for size, start in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        n = (end - start) // size if end > start else 0
        for k in range(n):
            gram = tuple(pool[start + k * size : start + (k + 1) * size])
            # An n-gram listed twice has two output columns: which one counts it is not defined
            # (onnx.reference counted it in one, onnxruntime refuses the model: fuzz seed 302).
            if gram in seen:
                return f"pool_int64s lists the {size}-gram {list(gram)} twice"
            seen.add(gram)
            if lo <= size <= hi:
                if gid >= len(indexes):
                    return "ngram_indexes is shorter than the pool"
                grams.append(gram)
                cols.append(indexes[gid])
            gid += 1
    if any(c < 0 for c in indexes):
        return "ngram_indexes must not be negative"
    return grams, cols, max(indexes) + 1


def _check_tfidf(node: Node) -> str | None:
    """Integer tokens of rank 1 or 2 with a static row length, a known mode, an int64 pool."""
    t = node.onnx_types[0]
    if not isinstance(t, ir.RankedTensorType) or rank_of(t) not in (1, 2):
        return "X must be a ranked 1-D or 2-D tensor"
    if not is_int(node.in_elem(0)) or is_bool(node.in_elem(0)):
        return "only integer tokens are lowered (string tensors are not)"
    if _text(node.attr("mode", "")) not in ("TF", "IDF", "TFIDF"):
        return f"mode '{_text(node.attr('mode', ''))}' is not TF, IDF or TFIDF"
    if int(node.attr("min_gram_length", 0)) < 1 or int(node.attr("max_gram_length", 0)) < int(node.attr("min_gram_length", 0)):
        return "min_gram_length must be >= 1 and <= max_gram_length"
    if int(node.attr("max_skip_count", 0)) < 0:
        return "max_skip_count must not be negative"
    p = _pool(node)
    if isinstance(p, str):
        return p
    weights = node.attr("weights")
    if weights is not None and len(weights) and len(weights) < p[2]:
        return "weights must have one value per output column"
    return None


@lowers("TfIdfVectorizer", check=_check_tfidf)
def lower_tfidf(node: Node) -> list[ir.Value]:
    """TfIdfVectorizer (see the module docstring)."""
    f32 = ir.F32Type.get()
    i64 = ir.IntegerType.get_signless(64)
    idx = ir.IndexType.get()
    x = node.input(0)
    x_elem = node.in_elem(0)
    one_row = rank_of(x) == 1
    if one_row:
        x = reshape(x, [1, dim(x, 0)])
    rows, width = dim(x, 0), dim(x, 1)
    grams, cols, n_out = _pool(node)  # type: ignore[misc]
    mode = _text(node.attr("mode"))
    weights = [float(w) for w in (node.attr("weights") or [])]
    n_skip = int(node.attr("max_skip_count", 0)) + 1
    longest = max((len(g) for g in grams), default=1)
    n_grams = max(len(grams), 1)

    table = np.zeros((n_grams, longest), np.int64)
    sizes = np.zeros((n_grams,), np.int64)  # size 0 (no n-gram at all) never matches below
    for k, g in enumerate(grams):
        table[k, : len(g)] = g
        sizes[k] = len(g)
    table_v = const_tensor(table, i64)
    sizes_v = const_tensor(sizes, i64)
    width_v = width if isinstance(width, ir.Value) else const_index(width)

    def count(args: list[ir.Value]) -> list[ir.Value]:
        b, k, s, start = (index_of(i) for i in range(4))
        size = arith.index_cast(idx, args[0])
        dist = arith.addi(s, const_index(1))
        ok = arith.andi(arith.cmpi(P.sgt, size, const_index(0)), arith.ori(arith.cmpi(P.sgt, size, const_index(1)), arith.cmpi(P.eq, s, const_index(0))))
        for j in range(longest):
            at = arith.addi(start, arith.muli(const_index(j), dist))
            used = arith.cmpi(P.slt, const_index(j), size)
            inside = arith.cmpi(P.slt, at, width_v)
            tok = convert_scalar(tensor.extract(x, [b, arith.select(inside, at, const_index(0))]), x_elem, i64)
            same = arith.andi(inside, arith.cmpi(P.eq, tok, tensor.extract(table_v, [k, const_index(j)])))
            ok = arith.andi(ok, arith.ori(arith.xori(used, const_scalar(1, ir.IntegerType.get_signless(1))), same))
        return [arith.addi(args[2], arith.extui(i64, ok))]

    skips = empty([n_skip], i64)
    # x is read by extract in the body; as an operand it gives the start loop its range.
    counts = generic(
        [sizes_v, skips, x], [filled([rows, n_grams], i64, 0)],
        [affine_map(4, [1]), affine_map(4, [2]), affine_map(4, [0, 3]), affine_map(4, [0, 1])],
        ["parallel", "parallel", "reduction", "reduction"],
        lambda a: count([a[0], a[1], a[3]]),
    )[0]

    col_of = np.full((n_grams,), -1, np.int64)
    col_of[: len(cols)] = cols
    cols_v = const_tensor(col_of, i64)
    w_v = const_tensor(np.array(weights[:n_out] if weights else [1.0] * n_out, np.float32), f32)

    def gather(args: list[ir.Value]) -> list[ir.Value]:
        o = arith.index_cast(i64, index_of(1))
        hit = arith.cmpi(P.eq, args[1], o)
        return [arith.addi(args[3], arith.select(hit, args[0], const_scalar(0, i64)))]

    col_range = empty([n_out], i64)
    freq = generic(
        [counts, cols_v, col_range], [filled([rows, n_out], i64, 0)],
        [affine_map(3, [0, 2]), affine_map(3, [2]), affine_map(3, [1]), affine_map(3, [0, 1])],
        ["parallel", "parallel", "reduction"],
        lambda a: gather([a[0], a[1], a[2], a[3]]),
    )[0]

    def weigh(args: list[ir.Value]) -> list[ir.Value]:
        f = arith.sitofp(f32, args[0])
        w = args[1]
        if mode == "TF":
            return [f]
        if mode == "IDF":
            return [arith.select(arith.cmpi(P.sgt, args[0], const_scalar(0, i64)), w, const_scalar(0.0, f32))]
        return [arith.mulf(w, f)]

    y = generic(
        [freq, w_v], [empty([rows, n_out], f32)],
        [affine_map(2, [0, 1]), affine_map(2, [1]), affine_map(2, [0, 1])], ["parallel"] * 2, weigh,
    )[0]
    if one_row:
        y = reshape(y, [n_out])
    return [y]
