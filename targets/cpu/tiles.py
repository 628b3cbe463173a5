"""Per-ISA tile tables of the CPU target: register tiles of packed matmuls and their cache tiles.

What: ``matmul_tile(cpu, element_bits, m)`` gives the inner tile (m0 x n0, k0 = 1) that a
contraction's operands are packed into for ``linalg.mmt4d`` (see ``data_tiling.py``), and
``matmul_cache_tiles(cpu, tile, m, n, k)`` the cache-level tile sizes of the mmt4d loops.

Why a table and not a constant: the register tile must keep its m0 x (n0 / lanes) accumulators
plus one row of B and one broadcast of A within the CPU's vector registers, or LLVM spills
inside the innermost loop (the old plain-layout 8x32 tile needed 32 registers and ran at a third
of BLAS on a 16-register AVX2 machine). The rows follow IREE's x86 choices
(``enumerateMatmulTileX86_64`` in ``CPUEncodingExternalModels.cpp``: 16x16 f32 on AVX-512) and
a prototype measured on an AVX2 Zen 3 (a 4x16 tile ran a 1024^3 f32 GEMM at 0.98x single-thread
OpenBLAS; 5x16, BLIS's choice of 6x16 shortened to keep two spare registers, ran faster
still). Skinny products (M = 1..8: decode steps, classifier heads) get a narrow-M tile whose n0
is widened so the same accumulator budget is used (1x64 on AVX2 reached 1.02x OpenBLAS on
1x2048x1000), except a single row on AVX-512, which streams B fastest two vectors wide (1x32);
a single block of rows gets no cache tiles (B has no reuse to keep).
"""

from __future__ import annotations

import dataclasses

from .isa import CpuFeatures

__all__ = ["A_SLICE_L2_SHARE", "MatmulTile", "matmul_tile", "matmul_cache_tiles", "pack_tile"]


@dataclasses.dataclass(frozen=True)
class MatmulTile:
    """Inner tile of a packed contraction: ``m0`` rows of A, ``n0`` columns of B, ``k0`` = 1."""

    m0: int
    n0: int
    k0: int = 1

    def accumulators(self, lanes: int) -> int:
        """Vector registers holding the m0 x n0 accumulator tile."""
        return self.m0 * max(1, self.n0 // lanes)


def _general_tile(cpu: CpuFeatures, element_bits: int) -> MatmulTile:
    """The table row for large M: (rows, vectors of B per row) by ISA."""
    lanes = cpu.lanes(element_bits)
    if cpu.arch == "aarch64":
        rows, vectors = 8, 2  # 16 accumulators of 32 registers (IREE: 8x8 f32 on NEON)
    elif cpu.vector_bits >= 512:
        # 16 zmm accumulators of 32 as 8 rows of 2 vectors: per k step 2 B loads and 8 A
        # broadcasts feed 16 FMAs, where IREE's 16x16 needs 1 + 16 loads (two loads per cycle
        # then bound the loop as much as the FMAs). Measured in one process on an AVX-512 EPYC
        # (Zen 4), 1 thread, against 16x16: ViT -5%, GPT-2 -5%, Llama -4.5%, BERT -1.3%, ResNet-50
        # -1.6% (2 layers each, bench_models); narrow N keeps 16x16 (`matmul_tile`).
        rows, vectors = 8, 2
    elif cpu.vector_bits >= 256:
        # 10 ymm accumulators of 16, as 5 rows of 2 vectors (+ 2 B vectors + 1 broadcast = 13):
        # two FMA pipes of 4 cycles' latency need 8 independent FMAs in flight, and 4x16's 8
        # accumulators left no slack for the loads. Constant-B GEMMs, one process, AVX2 Zen 3,
        # 1 thread, GFLOP/s 4x16 / 5x16 / 6x16: 197x768x3072 72.9 / 74.1 / 70.4, 197x768x768
        # 61.2 / 66.0 / 65.6, 128x3072x768 63.4 / 67.9 / 64.5, 1024^3 63.2 / 70.1 / 66.2. Models,
        # one process against 4x16: ViT -4.4%, GPT-2 -5.1%, BERT -3.9%, Llama -1.9%, ResNet-50
        # -0.9%; ShuffleNet, SqueezeNet, Inception-v2 within +-2.5% (noise).
        rows, vectors = 5, 2
    else:
        rows, vectors = 4, 2  # SSE: 8 xmm accumulators of 16
    return MatmulTile(rows, lanes * vectors)


def matmul_tile(cpu: CpuFeatures, element_bits: int = 32, m: int | None = None, n: int | None = None) -> MatmulTile:
    """The register tile for a contraction with ``m`` rows and ``n`` columns (None: dynamic /
    unknown).

    A general tile of several B vectors per row gives way to the same accumulators as one
    vector per row (twice or more the rows) when that pads the M x N work at least a tenth less
    (the narrower tile's loop is a few percent slower per FMA): ShuffleNet's grouped 1x1
    convolutions have N = 34 or 68 columns per group, padded to 64 or 96 with n0 = 32 and to 48
    or 80 with n0 = 16. Only where the narrow tile's broadcasts need no registers of their own
    (`_fits_registers`): AVX2 keeps its general tile.

    A static M smaller than the general tile's m0 gets the smallest power of two >= M as m0
    (no wasted padded rows) and a wider n0: as many B vectors per row as half the vector
    registers allow, at most 8 (the rest hold B and broadcasts of A).
    """
    general = _general_tile(cpu, element_bits)
    lanes = cpu.lanes(element_bits)
    if m is None or m >= general.m0:
        vectors = general.n0 // lanes
        if n is not None and vectors > 1:
            # A power of two of rows, at most the general tile's accumulators (AVX-512's 8x32
            # gives 16x16).
            narrow = MatmulTile(1 << (general.m0 * vectors).bit_length() - 1, lanes)
            if _fits_registers(cpu, narrow, lanes) and 10 * _padded(narrow, m, n) <= 9 * _padded(general, m, n):
                return narrow
        return general
    m0 = 1
    while m0 < m:
        m0 *= 2
    budget = cpu.vector_registers // 2
    vectors = max(1, min(8, budget // m0))
    if m0 == 1 and cpu.vector_bits >= 512:
        # A matrix-vector product streams B once and is bound by memory, not by FMAs: two
        # 512-bit B vectors (two cache lines) per k step streamed fastest (1x768x3072 f32 on an
        # AVX-512 EPYC, 1 thread: 11.4 GB/s with 16 vectors, 15.3 with 8, 20.5 with 4, 23.1
        # with 2; onnxruntime 22-25 GB/s). AVX2 keeps 8 (1x64 measured at 1.02x OpenBLAS).
        vectors = min(vectors, 2)
    return MatmulTile(m0, lanes * vectors)


def _fits_registers(cpu: CpuFeatures, tile: MatmulTile, lanes: int) -> bool:
    """Whether a one-vector-wide tile's accumulators, its B vector and its m0 broadcasts of A
    fit the vector registers. AVX-512 (and NEON's lane-indexed FMA) read the broadcast from memory
    inside the FMA; AVX2 broadcasts into a register first, and LLVM schedules the m0 broadcasts of
    a step (two, once it unrolls the k loop) ahead of their FMAs: the 8x8 tile that AVX2's 5x16
    narrows to spilled an accumulator inside its innermost loop (ShuffleNet's grouped 1x1
    convolutions, k = 34-136), where 5x16 does not. Measured in one process, AVX2 Zen 3, 1
    thread: ShuffleNet 10.64 -> 9.09 ms with 5x16 for those products (4x16 8.58, 3x16 8.97,
    6x8 10.0); 136 -> 136 in 4 groups at 28x28 0.306 -> 0.258 ms."""
    if cpu.vector_bits >= 512 or cpu.arch == "aarch64":
        return True
    return tile.accumulators(lanes) + tile.m0 + 1 <= cpu.vector_registers


def _padded(tile: MatmulTile, m: int | None, n: int) -> int:
    """The M x N work of a contraction padded to ``tile`` (an unknown M counted as unpadded)."""
    rows = 1 if m is None else -(-m // tile.m0) * tile.m0
    return rows * (-(-n // tile.n0) * tile.n0)


#: Share of L2 the A panels (all rows of A by one k-slice, or by all of K) may fill for the
#: register tiles to run columns outermost (`data_tiling._columns_outer`), and for a product whose
#: whole A fits that share to go without cache tiles (`matmul_cache_tiles`); the two rules share
#: it so a product that loses its k-slices keeps the columns-outer order. Half: one process,
#: medians, 1 thread, a quarter -> half, AVX-512 Zen 4: BERT 239 -> 229 ms, ViT 112 -> 109,
#: GPT-2 166 -> 162 (2 threads: BERT 288 -> 276, ViT 184 -> 170 on a loaded host); ResNet-50,
#: MobileNetV2, DenseNet-121 the same; compiled for znver3 (AVX2, 512 KiB L2): GPT-2 181 -> 173,
#: Llama, BERT, ViT the same.
A_SLICE_L2_SHARE: int = 2


def matmul_cache_tiles(cpu: CpuFeatures, tile: MatmulTile, m: int | None, n: int | None, k: int | None,
                       element_bits: int = 32) -> tuple[int, int, int] | None:
    """Cache-level tile sizes (m1, n1, k1 loops of ``linalg.mmt4d``; 0 = not tiled), or None.

    k1: a k-slice of one A micro-panel and one B micro-panel fills at most 2/3 of L1 (they are
    streamed through the innermost loop together). n1: the B block of that k-slice used by all
    rows of A fits in half of L2. Shapes where neither limit bites get no cache tiles (None),
    and so do products whose whole A (padded rows by all of K) fits ``1 / A_SLICE_L2_SHARE`` of
    L2.
    """
    if m is not None and m <= tile.m0:
        # One block of rows: every element of B is used once, so there is no reuse for cache
        # blocking to keep, and k-slices turn the one sequential stream through each B panel
        # into one stream per panel at a time (a GEMV 1x768x3072 read B at 12 GB/s, onnxruntime
        # 19). The whole K runs with the accumulators in registers.
        return None
    size = max(1, element_bits // 8)
    if m is not None and k is not None and -(-m // tile.m0) * tile.m0 * k * size <= cpu.l2_bytes // A_SLICE_L2_SHARE:
        # All of A stays in L2 while the columns-outer order (`data_tiling._columns_outer`) runs
        # every row tile against one B micro-panel, and B is streamed once: what the k-slices
        # and B blocks are for already holds without them. Without them the product runs all of
        # K with its accumulators in registers (no reload and store of the C tile per k-slice)
        # and can be computed inside the tiles of its unpack and elementwise consumer
        # (`epilogue.FUSE_UNPACK_PRODUCT`, which needs a product without cache tiles): no zero
        # fill, packed C and unpack pass over the whole output. Measured in one process (bench
        # models, medians, with -> without, the share then a quarter), AVX-512 Zen 4, 1 thread:
        # GPT-2 183 -> 166 ms, Llama 67.2 -> 59.0, BERT 249 -> 243, ViT 109 -> 110; 2 threads
        # (loaded host): GPT-2 224 -> 199, Llama 85.9 -> 77.8, BERT the same; ResNet-50,
        # MobileNetV2 and Inception-v2 did not change when every product with K <= 1024 went
        # without. Compiled for znver3 (AVX2, 512 KiB L2): GPT-2 190 -> 185, Llama and BERT the
        # same, where dropping the cache tiles of every product with K <= 1024 cost GPT-2 18%:
        # its LM head's A then no longer fit the share and the rows went outermost, streaming
        # 154 MB of B once per row tile.
        return None
    kc = (cpu.l1d_bytes * 2 // 3) // ((tile.m0 + tile.n0) * size)
    kc = max(64, kc - kc % 64)
    nc = max(1, (cpu.l2_bytes // 2) // (tile.n0 * kc * size))
    n1 = None if n is None else -(-n // tile.n0)
    tile_k = k is None or k > kc
    tile_n = n1 is None or n1 > nc
    if not (tile_k or tile_n):
        return None
    return (0, nc if tile_n else 0, kc if tile_k else 0)


def pack_tile(cpu: CpuFeatures, element_bits: int = 32) -> int:
    """Elements of K copied per step when packing an operand (one vector register's worth)."""
    return cpu.lanes(element_bits)
