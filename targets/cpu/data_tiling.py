"""Data tiling of f32 contractions: ``linalg.matmul``/``batch_matmul`` -> pack, mmt4d, unpack.

What: ``pack_contractions(module, options)`` rewrites every eligible f32 matmul
``C(M,N) += A(M,K) B(K,N)`` into

    A' = linalg.pack A  [M1, K, m0, 1]           (rows in m0-blocks, contiguous per k)
    B' = linalg.pack B  [N1, K, n0, 1]           (outer_dims_perm = [1, 0]: n0-blocks, per k)
    C' = linalg.mmt4d A', B' -> [M1, N1, m0, n0]  (accumulator tile of the register tile)
    C  = linalg.unpack C'                         (drops the padding of a partial tile)

with (m0, n0) from the ISA's tile table (``tiles.matmul_tile``). The innermost loop of the
mmt4d then reads one m0-vector of A and one n0-vector of B per k from contiguous memory and
does m0 x n0 FMAs into registers: what BLAS micro-kernels do (a prototype reached 0.98x
single-thread OpenBLAS on an AVX2 machine). ``plan_packed`` gives the tile plans of the new
ops (cache-level and register-level tiles of the mmt4d, vector sizes of pack/unpack), used by
``pipeline.plan_tiles``.

Constant operands (a weight ``arith.constant``, dense or ``dense_resource``, possibly through a
``linalg.transpose`` as Gemm's ``transB`` leaves it) are packed here with numpy into a new
constant, so no weight is packed at run time. Dynamic M (batch, sequence) packs with padding
value 0 and unpacks only the valid rows.

Long float reductions keep the accuracy of the unpacked path (``pipeline.split_reduction_factor``):
a static K longer than ``max_sequential_reduction`` is split into F chunks of kc = K/F. A is
reshaped to [M, F, kc] and packed to [F, M1, kc, m0, 1], B to [F, N1, kc, n0, 1], a
``linalg.batch_mmt4d`` computes the F partial products into a zero tile each, and a reduction
adds them to C: every output sums F partial dot products of kc terms instead of one of K.

Other element types, non-default indexing maps and batch matmuls with long K keep the
existing (plain-layout) path.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg, tensor

from onnxc.importers.tensors import BLOB_ALIGNMENT, aligned_empty

from .isa import CpuFeatures, host_cpu
from .tiles import A_SLICE_L2_SHARE, MatmulTile, matmul_cache_tiles, matmul_tile, pack_tile

__all__ = ["fills_to_constants", "pack_contractions", "plan_packed", "numpy_pack", "PACKED_OPS", "ACC_BUFFER_ATTR"]

#: Attribute on the ``tensor.empty`` of a packed accumulator that is a fill (its value: the
#: contraction's name), keeping CSE from merging equal fills; removed after the vector stage.
ACC_BUFFER_ATTR = "onnxc.acc_buffer"

#: The ops data tiling creates, whose tile plans come from ``plan_packed``.
PACKED_OPS: frozenset[str] = frozenset({"linalg.pack", "linalg.unpack", "linalg.mmt4d", "linalg.batch_mmt4d"})

_DYN = ir.ShapedType.get_dynamic_size()


#: Pack an operand produced by a `linalg.transpose` straight from the transpose's source
#: (`_through_transpose`). A module flag so that benchmarks can compare both in one process.
PACK_THROUGH_TRANSPOSE: bool = True

def numpy_pack(
    x: np.ndarray,
    inner_dims_pos: Sequence[int],
    inner_tiles: Sequence[int],
    outer_dims_perm: Sequence[int] | None = None,
    padding: float = 0.0,
) -> np.ndarray:
    """``linalg.pack`` semantics on a numpy array (the compile-time packing of constants)."""
    pads = [(0, 0)] * x.ndim
    for d, t in zip(inner_dims_pos, inner_tiles):
        pads[d] = (0, (-x.shape[d]) % t)
    x = np.pad(x, pads, constant_values=padding) if any(p[1] for p in pads) else x
    tile_of = dict(zip(inner_dims_pos, inner_tiles))
    shape: list[int] = []
    outer_axis: list[int] = []
    inner_axis: dict[int, int] = {}
    for d, size in enumerate(x.shape):
        if d in tile_of:
            outer_axis.append(len(shape))
            inner_axis[d] = len(shape) + 1
            shape += [size // tile_of[d], tile_of[d]]
        else:
            outer_axis.append(len(shape))
            shape.append(size)
    perm = list(outer_dims_perm) if outer_dims_perm else list(range(x.ndim))
    axes = [outer_axis[p] for p in perm] + [inner_axis[d] for d in inner_dims_pos]
    # Straight into a blob-aligned buffer: the importer's blob then takes it as it is (a
    # numpy allocation is 16-byte aligned and was copied again to 64: BERT-base's weights twice).
    out = aligned_empty([shape[a] for a in axes], x.dtype, BLOB_ALIGNMENT)
    _parallel_copy(*_as_records(out, x.reshape(shape).transpose(axes), x))
    return out


def _as_records(out: np.ndarray, src: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``out`` and ``src`` (a strided view of the C-contiguous ``base``) with their trailing axes
    that are contiguous in ``src`` merged into one element of a void dtype of their byte size.

    Why: a packed layout keeps whole inner tiles contiguous (a 16-float row of an mmt4d RHS
    tile), and numpy's strided copy runs its inner loop over those 16 floats once per tile; as
    64-byte records the inner loop walks the tiles instead (a 768x3072 f32 weight packs in 2.2
    instead of 4.3 ms). The bytes copied are the same."""
    if out.size == 0 or not base.flags.c_contiguous or not out.flags.c_contiguous:
        return out, src
    size, k = src.itemsize, src.ndim
    while k > 0 and (src.shape[k - 1] == 1 or src.strides[k - 1] == size):
        size *= src.shape[k - 1]
        k -= 1
    if k == 0 or size == src.itemsize:
        return out, src  # contiguous already, or nothing to merge
    record = np.dtype((np.void, size))
    offset = src.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    src_records = np.ndarray(src.shape[:k], record, buffer=base, offset=offset, strides=src.strides[:k])
    return out.reshape(*out.shape[:k], -1).view(record)[..., 0], src_records


#: Packed constants at least this large are copied by all cores (`_parallel_copy`).
PARALLEL_COPY_BYTES = 4 << 20
_copy_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _parallel_copy(out: np.ndarray, src: np.ndarray) -> None:
    """``np.copyto(out, src)``, in slices of ``out``'s first axis on the host's cores when the
    copy is large. Why: a packed layout copies rows of one tile (16 floats) from a strided view,
    about 0.5 GB/s on one core; BERT-base packs 340 MB of weights (0.55 s of its compile on Zen 3),
    and numpy releases the GIL while it copies."""
    global _copy_pool
    cores = host_cpu().cores
    if out.nbytes < PARALLEL_COPY_BYTES or cores < 2 or out.ndim == 0 or out.shape[0] < cores:
        np.copyto(out, src)
        return
    if _copy_pool is None:
        _copy_pool = concurrent.futures.ThreadPoolExecutor(cores, thread_name_prefix="onnxc-pack")
    bounds = np.linspace(0, out.shape[0], cores + 1).astype(int)
    jobs = [_copy_pool.submit(np.copyto, out[a:b], src[a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    for job in jobs:
        job.result()


# --- eligibility ------------------------------------------------------------------------------


def _ranked(v: ir.Value) -> ir.RankedTensorType | None:
    return v.type if isinstance(v.type, ir.RankedTensorType) else None


def _is_f32(t: ir.RankedTensorType) -> bool:
    return isinstance(t.element_type, ir.F32Type)


def _default_maps(op: ir.Operation, rank: int) -> bool:
    """Whether a (batch_)matmul uses the plain maps (no transposed or broadcast operands)."""
    maps = [ir.AffineMapAttr(a).value for a in linalg.get_indexing_maps(op.opview)]
    b = list(range(rank - 2))
    want = [b + [rank - 2, rank], b + [rank, rank - 1], b + [rank - 2, rank - 1]]
    for amap, dims in zip(maps, want):
        if amap.n_dims != rank + 1 or len(amap.results) != len(dims):
            return False
        for expr, d in zip(amap.results, dims):
            if not isinstance(expr, ir.AffineDimExpr) or ir.AffineDimExpr(expr).position != d:
                return False
    return True


def _split_factor(k: int | None, out_elems: int | None, max_seq: int, max_partial: int) -> int:
    """F partial sums for a static K (1: no split): the rule of ``split_reduction_factor``."""
    if k is None or max_seq <= 0 or k <= max_seq or out_elems is None:
        return 1
    divisors = [f for f in range(2, min(k - 1, max_seq) + 1) if k % f == 0]
    fits = [f for f in divisors if f * out_elems <= max_partial]
    if not fits:
        return 1
    wanted = [f for f in fits if k // f <= max_seq]
    return wanted[0] if wanted else fits[-1]


# --- IR building ------------------------------------------------------------------------------


def _size(v: ir.Value, i: int) -> int | ir.Value:
    t = ir.RankedTensorType(v.type)
    if t.is_dynamic_dim(i):
        return tensor.dim(v, arith.constant(ir.IndexType.get(), i))
    return t.get_dim_size(i)


def _ceil(size: int | ir.Value, tile: int) -> int | ir.Value:
    if isinstance(size, int):
        return -(-size // tile)
    return arith.ceildivui(size, arith.constant(ir.IndexType.get(), tile))


def _constant_array(v: ir.Value) -> np.ndarray | None:
    """The value of ``v`` when it is a readable f32 constant (or a transpose of one)."""
    from onnxc.errors import OnnxcError
    from onnxc.importers.tensors import attribute_to_array

    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None
    op = owner.operation
    if op.name == "arith.constant":
        t = _ranked(v)
        if t is None or not _is_f32(t) or not t.has_static_shape:
            return None
        try:
            # The importer's reader: dense and dense_resource (which the bindings do not
            # downcast, so elements_to_numpy's isinstance test would skip it).
            arr, _ = attribute_to_array(op.attributes["value"])
        except (OnnxcError, ValueError, TypeError):  # an unreadable blob: pack at run time
            return None
        arr = np.asarray(arr)
        if arr.dtype != np.float32 or arr.size != int(np.prod(t.shape)):
            return None
        return arr.reshape(list(t.shape))
    if op.name == "linalg.transpose":
        inner = _constant_array(op.operands[0])
        if inner is None:
            return None
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        return np.ascontiguousarray(inner.transpose(perm))
    if op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        t = _ranked(v)
        inner = _constant_array(op.operands[0])
        if inner is None or t is None or not t.has_static_shape:
            return None
        return inner.reshape(list(t.shape))  # row-major: what a reassociation of dims keeps
    return None


def _is_weight_consumer(op: ir.Operation) -> bool:
    """Contractions and convolutions: the ops whose constant inputs are laid out at compile time."""
    name = op.name
    return name in ("linalg.matmul", "linalg.batch_matmul") or name.startswith(("linalg.conv_", "linalg.depthwise_conv_"))


def fills_to_constants(module: ir.Module) -> int:
    """Turn a ``linalg.fill`` of a constant scalar into a static tensor into a splat constant where
    a contraction or convolution reads it as an input (not as its accumulator); returns how
    many uses were rewritten.

    Why: a weight made by ConstantOfShape whose shape is an overridable input (the `light`
    models of the onnx wheel: every weight) cannot fold at the ONNX level, but once the shapes
    are static it is a constant like any other. As a fill it was written at every run (AlexNet:
    215 MB per inference) and packed or transposed at run time; as a constant it is packed at
    compile time (``_constant_array``) and lives outside the code (``weights.py``), a zero
    splat in LLVM's zero-filled section."""
    from onnxc.transforms.onnx_utils import collect_ops

    rewritten = 0
    for fill in collect_ops(module.operation, lambda op: op.name == "linalg.fill"):
        value, dest = fill.operands[0], fill.operands[1]
        t = _ranked(fill.results[0])
        if t is None or not t.has_static_shape or isinstance(value.owner, ir.Block) or isinstance(dest.owner, ir.Block):
            continue
        if value.owner.operation.name != "arith.constant" or dest.owner.operation.name != "tensor.empty":
            continue
        scalar = value.owner.operation.attributes["value"]
        if not isinstance(scalar, (ir.FloatAttr, ir.IntegerAttr)):
            continue
        uses = [
            (u.owner.operation, u.operand_number)
            for u in fill.results[0].uses
            if _is_weight_consumer(u.owner.operation) and u.operand_number < len(u.owner.operation.opview.inputs)
        ]
        if not uses:
            continue
        with fill.location, ir.InsertionPoint(fill):
            splat = arith.ConstantOp(t, ir.DenseElementsAttr.get_splat(t, scalar)).result
        for user, operand in uses:
            user.operands[operand] = splat
            rewritten += 1
    return rewritten


def _packed_constant(arr: np.ndarray, name: str) -> ir.Value:
    from onnx import TensorProto

    from onnxc.importers.tensors import array_to_attribute

    # Stored flat and expanded in the IR: a 4-D global with a unit innermost dim becomes a
    # nested LLVM array of millions of one-element arrays (10 s of LLVM time for a 4 MB
    # weight); a flat one is one ConstantDataArray. The expand_shape of the global is a view.
    attr = array_to_attribute(arr.reshape(-1), TensorProto.FLOAT, name=name)
    flat = arith.constant(attr.type, attr)
    shape = [int(d) for d in arr.shape]
    return tensor.expand_shape(ir.RankedTensorType.get(shape, ir.F32Type.get()), flat,
                               [list(range(len(shape)))], [], shape)


def _producer(v: ir.Value, name: str) -> ir.Operation | None:
    """The op named ``name`` that defines ``v``, if one does."""
    owner = v.owner
    if isinstance(owner, (ir.Operation, ir.OpView)) and owner.operation.name == name:
        return owner.operation
    return None


def _through_transpose(
    src: ir.Value, inner_dims_pos: list[int], outer_dims_perm: list[int] | None
) -> tuple[ir.Value, list[int], list[int] | None]:
    """Fold a ``linalg.transpose`` producing ``src`` into the pack's positions.

    ``pack(transpose(x, perm), inner_dims_pos, outer_dims_perm)`` is ``pack(x, [perm[d] for d in
    inner_dims_pos], [perm[d] for d in outer_dims_perm])`` (dim d of the transpose is dim perm[d]
    of x): the pack reads x where the transpose would have copied it, and an accumulator that is
    a transposed broadcast (`_packed_init`) becomes a broadcast of the packed small input.

    (It was disabled for a while: ShuffleNet answered 4% off with it. The cause was the outliner,
    whose part returned a tensor beside a reshape of it, two owned memrefs of one buffer after
    bufferization: see `outline._return_view_roots`.)"""
    op = _producer(src, "linalg.transpose")
    if op is None:
        return src, inner_dims_pos, outer_dims_perm
    perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    odp = outer_dims_perm if outer_dims_perm else list(range(len(perm)))
    folded = [perm[d] for d in odp]
    return op.operands[0], [perm[d] for d in inner_dims_pos], (None if folded == sorted(folded) else folded)


def _pack(
    src: ir.Value,
    inner_dims_pos: list[int],
    inner_tiles: list[int],
    outer_dims_perm: list[int] | None,
    name: str,
) -> ir.Value:
    """``linalg.pack`` of ``src`` (padding 0), or a packed constant when ``src`` is constant."""
    arr = _constant_array(src)
    if arr is not None:
        return _packed_constant(numpy_pack(arr, inner_dims_pos, inner_tiles, outer_dims_perm), name)
    # Read through a transpose producing the operand (a grouped 1x1 convolution's [group, pixels,
    # channels] view, attention's K^T): the pack copies x once instead of after the transpose's
    # copy of it.
    if PACK_THROUGH_TRANSPOSE:
        src, inner_dims_pos, outer_dims_perm = _through_transpose(src, inner_dims_pos, outer_dims_perm)
    rank = ir.RankedTensorType(src.type).rank
    tile_of = dict(zip(inner_dims_pos, inner_tiles))
    outer = [_ceil(_size(src, d), tile_of[d]) if d in tile_of else _size(src, d) for d in range(rank)]
    if outer_dims_perm:
        outer = [outer[p] for p in outer_dims_perm]
    f32 = ir.F32Type.get()
    dest = tensor.empty(outer + list(inner_tiles), f32)
    zero = arith.constant(f32, 0.0)
    return linalg.pack(src, dest, inner_dims_pos, inner_tiles, padding_value=zero, outer_dims_perm=outer_dims_perm)


def _packed_init(c: ir.Value, shape: list[int | ir.Value], inner_dims_pos: list[int], inner_tiles: list[int],
                 name: str) -> ir.Value:
    """The packed accumulator ``shape`` of ``c``: a fill of the same scalar when ``c`` is a fill, a
    broadcast in the packed layout when ``c`` broadcasts a smaller tensor, perhaps through a
    transpose (a bias: its pack is a constant when it is one), else pack(c)."""
    f32 = ir.F32Type.get()
    fill = _producer(c, "linalg.fill")
    if fill is not None:
        # Its own buffer, tagged so CSE does not merge it with another accumulator's equal fill
        # (the tag is dropped after the vector stage): with a dynamic M the fill is not fused into
        # the mmt4d's tiles, and a shared one was filled once and copied (`memref.copy`, dynamic
        # shape) for every other user: the Q, K and V projections of a dynamic T5.
        empty = tensor.empty(shape, f32)
        empty.owner.attributes[ACC_BUFFER_ATTR] = ir.StringAttr.get(name)
        return linalg.fill(fill.operands[0], outs=[empty])
    src, pos, perm = _through_transpose(c, inner_dims_pos, None)
    bcast = _producer(src, "linalg.broadcast")
    if bcast is not None:
        rank = len(shape) - len(pos)  # dims of c: the packed shape's outer dims
        order = perm if perm else list(range(rank))
        added = set(ir.DenseI64ArrayAttr(bcast.attributes["dimensions"]))
        index = {d: i for i, d in enumerate(d for d in range(rank) if d not in added)}  # dims of the input
        tiled = [(index[d], t) for d, t in zip(pos, inner_tiles) if d in index]
        if tiled:
            small_perm = [index[d] for d in order if d in index]
            packed = _pack(bcast.operands[0], [d for d, _ in tiled], [t for _, t in tiled],
                           None if small_perm == sorted(small_perm) else small_perm, name)
            # Dims of the packed accumulator the packed input lacks: the broadcast's outer dims,
            # then its inner tiles.
            dims = [i for i, d in enumerate(order) if d in added] + [rank + i for i, d in enumerate(pos) if d in added]
            # Tagged like a fill's buffer: CSE merged the equal bias broadcasts of two products
            # (ShuffleNet's constant-weight layers), and a shared initializer is no longer fused
            # into its product's tiles (`epilogue._plan_unpack_epilogue` wants a single use), so
            # it was written whole, once, and read back by both.
            empty = tensor.empty(shape, f32)
            empty.owner.attributes[ACC_BUFFER_ATTR] = ir.StringAttr.get(name)
            return linalg.broadcast(packed, outs=[empty], dimensions=dims).results[0]
    zero = arith.constant(f32, 0.0)
    return linalg.pack(c, tensor.empty(shape, f32), inner_dims_pos, inner_tiles, padding_value=zero)


def _rewrite(op: ir.Operation, cpu: CpuFeatures, split: int, index: int) -> None:
    """Replace one eligible (batch_)matmul by pack -> (batch_)mmt4d -> unpack."""
    a, b, c = list(op.operands)
    rank = ir.RankedTensorType(c.type).rank
    batched = rank == 3
    m_static = ir.RankedTensorType(a.type).get_dim_size(rank - 2) if not ir.RankedTensorType(a.type).is_dynamic_dim(rank - 2) else None
    tile = matmul_tile(cpu, 32, m_static, _static(b.type)[rank - 1])
    m0, n0 = tile.m0, tile.n0
    f32 = ir.F32Type.get()
    name = f"packed_weight_{index}"
    with ir.InsertionPoint(op), op.location:
        m, n = _size(a, rank - 2), _size(b, rank - 1)
        m1, n1 = _ceil(m, m0), _ceil(n, n0)
        if split > 1:
            # [M, K] -> [M, F, kc]: each chunk of K becomes a batch of the batch_mmt4d.
            k = ir.RankedTensorType(a.type).get_dim_size(1)
            kc = k // split
            a3_type = ir.RankedTensorType.get([_DYN if not isinstance(m, int) else m, split, kc], f32)
            a3 = tensor.expand_shape(a3_type, a, [[0], [1, 2]], [] if isinstance(m, int) else [m],
                                     [m if isinstance(m, int) else _DYN, split, kc])
            arr = _constant_array(b)
            if arr is not None:
                pb = _packed_constant(numpy_pack(arr.reshape(split, kc, -1), [2, 1], [n0, 1], [0, 2, 1]), name)
            else:
                b3_type = ir.RankedTensorType.get([split, kc, _DYN if not isinstance(n, int) else n], f32)
                b3 = tensor.expand_shape(b3_type, b, [[0, 1], [2]], [] if isinstance(n, int) else [n],
                                         [split, kc, n if isinstance(n, int) else _DYN])
                pb = _pack(b3, [2, 1], [n0, 1], [0, 2, 1], name)
            pa = _pack(a3, [0, 2], [m0, 1], [1, 0, 2], name + "_lhs")
            zero = arith.constant(f32, 0.0)
            partial = linalg.fill(zero, outs=[tensor.empty([split, m1, n1, m0, n0], f32)])
            partial = linalg.batch_mmt4d(pa, pb, outs=[partial])
            acc = _packed_init(c, [m1, n1, m0, n0], [0, 1], [m0, n0], name + "_init")
            acc = _sum_leading(partial, acc)
            out_pos = [0, 1]
        else:
            lead = [0] if batched else []
            off = len(lead)
            pa = _pack(a, [off, off + 1], [m0, 1], None, name + "_lhs")
            pb = _pack(b, [off + 1, off], [n0, 1], lead + [off + 1, off], name)
            shape = ([_size(c, 0)] if batched else []) + [m1, n1, m0, n0]
            acc = _packed_init(c, shape, [off, off + 1], [m0, n0], name + "_init")
            acc = (linalg.batch_mmt4d if batched else linalg.mmt4d)(pa, pb, outs=[acc])
            out_pos = [off, off + 1]
        users = [u.owner.operation for u in op.results[0].uses]
        consumer = users[0] if len(users) == 1 and users[0].name == "linalg.transpose" else None
        if consumer is not None and consumer.operands[0] == op.results[0]:
            # Unpack straight into the transposed layout: dim d of C is dim inv[d] of the
            # transpose's result (no copy of the product for the transpose: a grouped 1x1
            # convolution's [group, pixels, channels] result goes back to NHWC this way).
            perm = list(ir.DenseI64ArrayAttr(consumer.attributes["permutation"]))
            inv = [perm.index(d) for d in range(rank)]
            out = consumer.results[0]
            dest = tensor.empty([_size(c, perm[d]) for d in range(rank)], f32)  # c's: out comes later
            result = linalg.unpack(acc, dest, [inv[d] for d in out_pos], [m0, n0],
                                   outer_dims_perm=None if inv == sorted(inv) else inv)
            out.replace_all_uses_with(result)
            consumer.erase()
            op.erase()
            return
        dest = tensor.empty([_size(c, d) for d in range(rank)], f32)
        result = linalg.unpack(acc, dest, out_pos, [m0, n0])
    op.results[0].replace_all_uses_with(result)
    op.erase()


def _sum_leading(partial: ir.Value, acc: ir.Value) -> ir.Value:
    """acc += sum over dim 0 of partial (a reduction generic, sequential over the F chunks)."""
    from onnxc.transforms.lowering.common import affine_map, generic

    rank = ir.RankedTensorType(partial.type).rank
    maps = [affine_map(rank, list(range(rank))), affine_map(rank, list(range(1, rank)))]
    iters = ["reduction"] + ["parallel"] * (rank - 1)
    return generic([partial], [acc], maps, iters, lambda x: [arith.addf(x[1], x[0])])[0]


def pack_contractions(module: ir.Module, cpu: CpuFeatures, max_sequential_reduction: int = 512,
                      max_partial_elements: int = 1 << 24) -> int:
    """Rewrite the eligible f32 matmuls of ``module`` into packed form; returns how many."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in ("linalg.matmul", "linalg.batch_matmul"):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    done = 0
    with module.context:
        for op in found:
            types = [_ranked(v) for v in op.operands]
            if len(types) != 3 or any(t is None or not _is_f32(t) for t in types):
                continue
            rank = types[2].rank
            if rank not in (2, 3) or not _default_maps(op, rank):
                continue
            k = types[0].get_dim_size(rank - 1) if not types[0].is_dynamic_dim(rank - 1) else None
            out = types[2]
            out_elems = int(np.prod(out.shape)) if out.has_static_shape else None
            m_static = None if types[0].is_dynamic_dim(rank - 2) else types[0].get_dim_size(rank - 2)
            if m_static is not None and m_static < matmul_tile(cpu, 32).m0 and _constant_array(op.operands[1]) is None:
                # Skinny product with a run-time B: packing B (K x N) on every call costs more
                # than the few rows of A gain from it (1x1000x2048 ran 10x slower packed).
                continue
            split = _split_factor(k, out_elems, max_sequential_reduction, max_partial_elements)
            if split > 1 and rank == 3:
                continue  # batched long-K: the plain path splits it (keeps the accuracy)
            _rewrite(op, cpu, split, done)
            done += 1
    return done


# --- tile plans of the packed ops ---------------------------------------------------------------


def _static(t: ir.Type) -> list[int | None]:
    st = ir.ShapedType(t)
    return [None if st.is_dynamic_dim(i) else st.get_dim_size(i) for i in range(st.rank)]


PackedPlan = tuple[tuple[int, ...], tuple[int, ...], "tuple[int, ...] | None", bool, "tuple[int, ...] | None", "tuple[int, ...] | None"]


def _columns_outer(lhs: list[int | None], batch: int, cache: tuple[int, int, int] | None, cpu: CpuFeatures) -> tuple[int, ...] | None:
    """The register-tile loop order (n1, m1, k1) of a mmt4d whose packed A k-slice (all M rows
    by the cache tile's kc, or all of K) fits in ``1 / A_SLICE_L2_SHARE`` of L2 (tiles.py); None
    (m1, n1, k1) else.

    Why: in the order m1, n1 each step of the innermost loop loads a new B micro-panel (n0 x kc
    floats, 24 KB for 32 x 192) from L2 while the A micro-panel stays in L1: 128 bytes of B
    per 16 FMAs. With the columns outer, the B micro-panel stays in L1 across the row tiles
    and the A micro-panels (32 bytes per step) come from L2: GotoBLAS's order. Measured in one
    process on an AVX-512 Xeon (2 vCPUs, 1 thread; constant B, GFLOP/s): 128x768x768 147 -> 165,
    128x3072x768 150 -> 163, 64x8192x768 117 -> 128; 4-layer models, 1 thread: BERT 68.3 -> 64.5 ms,
    GPT-2 96.3 -> 86.7, Llama 62.3 -> 55.0, ViT 31.4 -> 30.5 (2 threads: 2-6% faster);
    ResNet-50 and MobileNetV2 the same. A 1024-row A slice (768 KB) no longer stays in L2
    beside the B block and 1024^3 ran 5% slower in this order, hence the limit (a quarter then, half
    since products whose whole A fits it go without cache tiles)."""
    m1, m0, k = lhs[batch], lhs[batch + 2], lhs[batch + 1]
    kc = cache[2] if cache and cache[2] else k
    if m1 is None or m0 is None or kc is None or m1 < 2 or m1 * m0 * kc * 4 > cpu.l2_bytes // A_SLICE_L2_SHARE:
        return None
    return tuple(range(batch)) + (batch + 1, batch, batch + 2, batch + 3, batch + 4, batch + 5)


def _forall_copy(ranges: list[int | None], candidates: range, tiles: tuple[int, ...], shape: list[int | None],
                 threads: int, min_elements: int) -> tuple[int, ...] | None:
    """Thread counts splitting a large static pack or unpack over ``threads`` (one of its loops
    ``candidates``, in whole tiles: `pipeline.forall_split`); None for one thread, a dynamic
    shape or fewer than ``min_elements`` elements (``shape``; `pipeline.min_threaded_elements`).

    Why: packing a run-time operand (a grouped 1x1 convolution's input, an activation before a
    product) and unpacking a product nothing fuses with are copies of the whole tensor; on one
    thread they were part of what kept ShuffleNet from scaling to two."""
    from .pipeline import forall_split

    if threads <= 1 or None in shape or int(np.prod(shape)) < min_elements:
        return None
    return forall_split(ranges, candidates, threads, tiles)


def plan_packed(op: ir.Operation, cpu: CpuFeatures, threads: int = 1, min_elements: int | None = None) -> PackedPlan | None:
    """(register tile sizes, vector sizes, cache tile sizes or None, named contraction, forall
    thread counts or None, register-tile loop order or None) of one op made by
    ``pack_contractions``; None for an op of another shape (left to the caller). With
    ``threads > 1`` a mmt4d's outermost parallel loop with enough tiles (N1 where B is wider
    than A is tall, else M1, else N1) is split over the threads, and so is a pack or unpack of at
    least ``min_elements`` elements (`pipeline.min_threaded_elements`; None: OpenMP's
    `pipeline.MIN_THREADED_ELEMENTS`); `_columns_outer` gives the loop order."""
    if min_elements is None:
        from .pipeline import MIN_THREADED_ELEMENTS as min_elements
    if op.name in ("linalg.mmt4d", "linalg.batch_mmt4d"):
        lhs, rhs = _static(op.operands[0].type), _static(op.operands[1].type)
        batch = 1 if op.name == "linalg.batch_mmt4d" else 0
        m0, k0 = lhs[batch + 2], lhs[batch + 3]
        n0 = rhs[batch + 2]
        if None in (m0, n0, k0):
            return None
        tiles = (1,) * batch + (1, 1, 1, 0, 0, 0)
        vectors = (1,) * batch + (1, 1, 1, m0, n0, k0)
        m = None if lhs[batch] is None else lhs[batch] * m0
        n = None if rhs[batch] is None else rhs[batch] * n0
        cache = matmul_cache_tiles(cpu, MatmulTile(m0, n0), m, n, lhs[batch + 1])
        cache_sizes = None if cache is None else (0,) * batch + cache + (0, 0, 0)
        forall = None
        if threads > 1:
            outer = [0] * (batch + 6)
            # B wider than A is tall (a transformer's weights: 64-128 tokens by 768-50257
            # columns): columns of B, so each thread streams only its part of the larger
            # operand. Measured in one process (AVX-512 Xeon, 2 threads, 4-layer models, split by
            # rows -> columns): GPT-2 55.6 -> 44.0 ms (its 154 MB LM head read once instead of
            # twice), Llama 37.3 -> 29.7, BERT 37.8 -> 33.3, ViT 17.5 -> 17.0.
            if m is not None and n is not None and n > m and rhs[batch] is not None and rhs[batch] >= threads:
                outer[batch + 1] = threads
            elif lhs[batch] is None or lhs[batch] >= threads:
                outer[batch] = threads  # rows of A: each thread reads all of B
            elif rhs[batch] is not None and rhs[batch] >= threads:
                outer[batch + 1] = threads  # skinny: columns of B, each thread its own part
            forall = tuple(outer) if any(outer) else None
        return tiles, vectors, cache_sizes, True, forall, _columns_outer(lhs, batch, cache, cpu)
    if op.name == "linalg.pack":
        src = _static(op.operands[0].type)
        dest = _static(op.results[0].type)
        rank = len(src)
        inner = dest[rank:]
        if None in inner:
            return None
        # The last outer dim of every pack made here is K: copy one vector's worth per step.
        kt = pack_tile(cpu)
        last = dest[rank - 1]
        kt = kt if last is None else max(1, min(kt, last))
        tiles = (1,) * (rank - 1) + (kt,)
        forall = _forall_copy(dest[:rank], range(rank - 1), tiles, dest, threads, min_elements)
        return tiles, tiles + tuple(inner), None, False, forall, None  # vector sizes: one per dest dim
    if op.name == "linalg.unpack":
        src = _static(op.operands[0].type)
        dest = _static(op.results[0].type)
        rank = len(dest)
        inner = src[rank:]
        if None in inner or len(inner) != 2:
            return None
        # One packed tile per step: its inner tile along each unpacked dim it tiles (a transposed
        # unpack's need not be the last two).
        tile_of = dict(zip(ir.DenseI64ArrayAttr(op.attributes["inner_dims_pos"]), inner))
        tiles = tuple(tile_of.get(d, 1) for d in range(rank))
        forall = _forall_copy(dest, range(rank), tiles, dest, threads, min_elements)
        return tiles, (1,) * rank + tuple(inner), None, False, forall, None  # vector sizes: one per source dim
    return None
