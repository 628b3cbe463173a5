"""Tests of the CPU pipeline's machine-derived choices: tile tables per ISA, data tiling of
contractions (pack -> mmt4d -> unpack) with constant weights packed at compile time, and the
options that select the target CPU. Numerics are checked against onnx.reference (and float64
numpy for the long-reduction accuracy) on both the AVX-512 and the AVX2 tables: the JIT runs on
this host, and code built from the AVX2 table (256-bit tiles) runs on an AVX-512 host as well."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from mlir import ir

from onnxc.targets.cpu import CpuPipelineOptions
from onnxc.targets.cpu.data_tiling import numpy_pack, pack_contractions
from onnxc.targets.cpu.isa import KNOWN_CPUS, CpuFeatures, TargetCpuError, host_cpu
from onnxc.targets.cpu.tiles import MatmulTile, matmul_cache_tiles, matmul_tile

AVX512 = KNOWN_CPUS["znver4"]
AVX2 = KNOWN_CPUS["znver3"]
RNG = np.random.default_rng(3)


# --- tile tables ------------------------------------------------------------------------------


def test_general_tiles_per_isa() -> None:
    """8x32 f32 on AVX-512 (16 accumulators, fewer loads per FMA than IREE's 16x16); 5x16 on
    AVX2 (10 accumulators: two FMA pipes of latency 4 need 8 in flight); both fit the register
    file with a B row and an A broadcast to spare."""
    assert matmul_tile(AVX512) == MatmulTile(8, 32)
    assert matmul_tile(AVX2) == MatmulTile(5, 16)
    for cpu in (AVX512, AVX2, KNOWN_CPUS["x86-64-v3"], KNOWN_CPUS["skylake-avx512"]):
        for m in (None, 1, 2, 3, 5, 8, 64):
            t = matmul_tile(cpu, 32, m)
            lanes = cpu.lanes(32)
            assert t.n0 % lanes == 0
            # Live at once: the accumulators, the B row (one vector when m0 = 1: each B vector
            # feeds one FMA and dies), one broadcast of A.
            b_live = t.n0 // lanes if t.m0 > 1 else 1
            assert t.accumulators(lanes) + b_live + 1 <= cpu.vector_registers, (cpu.name, m, t)


def test_skinny_tiles() -> None:
    """M = 1..8 (decode steps, classifier heads): no padded rows, wider n0."""
    assert matmul_tile(AVX2, 32, 1) == MatmulTile(1, 64)
    assert matmul_tile(AVX2, 32, 2) == MatmulTile(2, 32)
    assert matmul_tile(AVX2, 32, 3) == MatmulTile(4, 16)  # 4 rows of 2 vectors: the accumulators of 5x16 or fewer
    assert matmul_tile(AVX2, 32, 4) == MatmulTile(4, 16)
    assert matmul_tile(AVX2, 32, 5) == MatmulTile(5, 16)  # general tile from 5 rows up
    assert matmul_tile(AVX512, 32, 1) == MatmulTile(1, 32)  # memory-bound: 2 vectors stream fastest
    assert matmul_tile(AVX512, 32, 4) == MatmulTile(4, 64)
    assert matmul_tile(AVX512, 32, 8) == MatmulTile(8, 32)
    assert matmul_tile(AVX512, 32, 16) == MatmulTile(8, 32)


def test_narrow_n_takes_one_vector_per_row() -> None:
    """The same accumulators as one B vector per row when that pads the work a tenth less: a
    ShuffleNet group of 34 output channels pads to 48 with n0 = 16, to 64 with n0 = 32; not
    where the narrow tile's broadcasts would not fit the registers (AVX2)."""
    assert matmul_tile(AVX512, 32, 784, 34) == MatmulTile(16, 16)
    assert matmul_tile(AVX512, 32, None, 34) == MatmulTile(16, 16)
    assert matmul_tile(AVX512, 32, 784, 1536) == MatmulTile(8, 32)  # no padding either way
    assert matmul_tile(AVX512, 32, 49, 136) == MatmulTile(8, 32)  # 56 x 160 beats 64 x 144
    # AVX2 broadcasts A into registers: 8 accumulators + 8 broadcasts + B spill 16 registers.
    assert matmul_tile(AVX2, 32, 784, 34) == MatmulTile(5, 16)
    assert matmul_tile(AVX2, 32, 784, 64) == MatmulTile(5, 16)
    for n in (1, 17, 34, 68, 100, 1000):
        t = matmul_tile(AVX512, 32, 200, n)
        assert t.accumulators(AVX512.lanes(32)) == 16


def test_cache_tiles_follow_cache_sizes() -> None:
    """k-slices fit L1 with the micro-panels, B blocks fit half of L2; small shapes get none."""
    assert matmul_cache_tiles(AVX512, MatmulTile(16, 16), 64, 64, 64) is None
    assert matmul_cache_tiles(AVX512, MatmulTile(1, 32), 1, 4096, 4096) is None  # one row block: no reuse
    _, n1, k1 = matmul_cache_tiles(AVX2, MatmulTile(4, 16), 2048, 2048, 2048)
    assert (4 + 16) * k1 * 4 <= AVX2.l1d_bytes
    assert n1 * 16 * k1 * 4 <= AVX2.l2_bytes // 2
    big_l2 = KNOWN_CPUS["sapphirerapids"]  # 2 MiB L2: B blocks 4x wider than with 512 KiB
    wide = 16 * 4096
    assert matmul_cache_tiles(big_l2, MatmulTile(4, 16), 2048, wide, 2048)[1] == 4 * n1


def test_products_whose_a_fits_l2_run_without_cache_tiles() -> None:
    """Where all of A (padded rows by all of K) fits 1 / A_SLICE_L2_SHARE of L2, the columns-outer
    order keeps it there and streams B once: no k-slices or B blocks, so the product can run
    inside its unpack's tiles. BERT's 128 x 768 x 768 products (384 KiB of A) have none on
    AVX-512 Zen 4's 1 MiB L2 and keep them on Zen 3's 512 KiB; GPT-2's LM head (64 x 50257 x
    768) has none on either, and a 128-row product with K = 3072 keeps them on both."""
    from onnxc.targets.cpu.data_tiling import A_SLICE_L2_SHARE as shared
    from onnxc.targets.cpu.tiles import A_SLICE_L2_SHARE

    assert shared == A_SLICE_L2_SHARE  # the columns-outer order and this rule use one share
    zen4, zen3 = KNOWN_CPUS["znver4"], KNOWN_CPUS["znver3"]
    assert zen3.l2_bytes // A_SLICE_L2_SHARE < 128 * 768 * 4 <= zen4.l2_bytes // A_SLICE_L2_SHARE
    assert matmul_cache_tiles(zen4, MatmulTile(8, 32), 128, 768, 768) is None
    assert matmul_cache_tiles(zen3, MatmulTile(5, 16), 128, 768, 768) is not None
    assert matmul_cache_tiles(zen4, MatmulTile(8, 32), 64, 50257, 768) is None
    assert matmul_cache_tiles(zen3, MatmulTile(5, 16), 64, 50257, 768) is None
    assert matmul_cache_tiles(zen4, MatmulTile(8, 32), 128, 768, 3072) is not None
    assert matmul_cache_tiles(zen3, MatmulTile(5, 16), 128, 768, 3072) is not None


def test_options_select_the_cpu() -> None:
    assert CpuPipelineOptions().cpu == host_cpu()
    assert CpuPipelineOptions(target_cpu="znver3").cpu.vector_bits == 256
    with pytest.raises(TargetCpuError, match="known"):
        CpuPipelineOptions(target_cpu="no-such-cpu")


def test_numpy_pack_matches_layout() -> None:
    """The compile-time packing puts B[k, n] at [n // n0, k, n % n0, 0] (zero padding)."""
    b = RNG.standard_normal((5, 7)).astype(np.float32)
    p = numpy_pack(b, [1, 0], [4, 1], [1, 0])
    assert p.shape == (2, 5, 4, 1)
    for k in range(5):
        for n in range(8):
            assert p[n // 4, k, n % 4, 0] == (b[k, n] if n < 7 else 0.0)


def test_large_pack_copied_in_slices_matches_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A constant above PARALLEL_COPY_BYTES is copied in slices on several threads (forced to 3
    here, whatever the host has): the same layout as `test_numpy_pack_matches_layout`, padding
    included, for a 2-D weight and a batch of them with an outer permutation."""
    from onnxc.targets.cpu import data_tiling

    monkeypatch.setattr(data_tiling, "PARALLEL_COPY_BYTES", 0)
    monkeypatch.setattr(data_tiling, "host_cpu", lambda: dataclasses.replace(host_cpu(), cores=3))
    monkeypatch.setattr(data_tiling, "_copy_pool", None)
    b = RNG.standard_normal((37, 70)).astype(np.float32)
    p = numpy_pack(b, [1, 0], [16, 1], [1, 0])
    want = np.zeros((5, 37, 16, 1), np.float32)
    for k in range(37):
        for n in range(70):
            want[n // 16, k, n % 16, 0] = b[k, n]
    np.testing.assert_array_equal(p, want)
    batch = RNG.standard_normal((3, 20, 33)).astype(np.float32)
    q = numpy_pack(batch, [2, 1], [8, 1], [0, 2, 1])
    assert q.shape == (3, 5, 20, 8, 1)
    for i in range(3):
        np.testing.assert_array_equal(q[i], numpy_pack(batch[i], [1, 0], [8, 1], [1, 0]))


@pytest.mark.parametrize(
    "shape, pos, tiles, perm",
    [((37, 70), [1, 0], [16, 1], [1, 0]), ((3, 20, 33), [2, 1], [8, 1], [0, 2, 1]), ((37, 45), [0, 1], [8, 4], None),
     ((5, 7, 9), [1, 2], [4, 1], [2, 0, 1]), ((64, 3, 3, 3), [0], [8], [1, 2, 3, 0]), ((16, 16), [0, 1], [16, 16], None),
     ((0, 16), [1], [16], None)],
)
def test_pack_as_records_matches_element_copy(shape: tuple[int, ...], pos: list[int], tiles: list[int],
                                              perm: list[int] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Packing copies whole inner tiles as void records (`_as_records`); the result is the
    element-wise strided copy's, for contiguous and transposed (non-contiguous) constants."""
    from onnxc.targets.cpu import data_tiling

    x = RNG.standard_normal(shape).astype(np.float32)
    for arr in (x, np.ascontiguousarray(x.T).T):
        fast = numpy_pack(arr, pos, tiles, perm, padding=-1.0)
        with monkeypatch.context() as m:
            m.setattr(data_tiling, "_as_records", lambda out, src, base: (out, src))
            plain = numpy_pack(arr, pos, tiles, perm, padding=-1.0)
        assert fast.shape == plain.shape
        np.testing.assert_array_equal(fast, plain)


def test_packed_weight_becomes_a_blob_without_a_copy() -> None:
    """A weight packed at compile time is on a cache line already, so the importer's blob takes
    its memory as it is instead of copying it once more (BERT-base: a second copy of every
    packed weight, 0.5 s of compile time)."""
    from onnx import TensorProto

    from onnxc.importers import tensors as tz

    for shape in ((768, 768), (64, 64), (768, 200), (100, 48), (30, 64), (512, 96)):  # numpy's own: 16-byte aligned
        b = RNG.standard_normal(shape).astype(np.float32)
        p = numpy_pack(b, [1, 0], [16, 1], [1, 0])
        assert p.ctypes.data % tz.BLOB_ALIGNMENT == 0 and p.flags.c_contiguous, shape
        with ir.Context(), ir.Location.unknown():
            values, _ = tz.attribute_to_array(tz.array_to_attribute(p, TensorProto.FLOAT, name="packed", resource_threshold=1024))
            assert np.shares_memory(values, p)
            np.testing.assert_array_equal(values.reshape(p.shape), p)


# --- data tiling ------------------------------------------------------------------------------


def _matmul_model(m: int | str, k: int, n: int, weight: np.ndarray | None, op: str = "MatMul"):
    from onnx import TensorProto, helper, numpy_helper

    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])]
    inits = []
    b_shape = [n, k] if op == "Gemm" else [k, n]
    if weight is None:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape))
    else:
        inits.append(numpy_helper.from_array(weight, "b"))
    attrs = {"transB": 1} if op == "Gemm" else {}
    node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ops(module: ir.Module) -> list[ir.Operation]:
    out: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        out.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return out


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_constant_weight_is_packed_at_compile_time(op: str) -> None:
    """A constant B (Gemm's transB included) becomes a packed constant: the only linalg.pack
    left packs the activation A, and it reads a function argument."""
    from onnxc.compiler import lower

    k, n = 48, 40
    w = RNG.standard_normal((n, k) if op == "Gemm" else (k, n)).astype(np.float32)
    module = lower(_matmul_model(8, k, n, w, op), "linalg")
    assert pack_contractions(module, AVX2) == 1
    ops = _ops(module)
    packs = [o for o in ops if o.name == "linalg.pack"]
    assert len(packs) == 1
    assert isinstance(packs[0].operands[0], ir.BlockArgument)
    assert any(o.name == "linalg.mmt4d" for o in ops)
    tile = matmul_tile(AVX2, 32, 8, n)
    packed_type = f"tensor<{-(-n // tile.n0)}x{k}x{tile.n0}x1xf32>"
    # Stored flat (one LLVM constant array), viewed in the packed shape.
    assert any(o.name == "tensor.expand_shape" and o.operands[0].owner.name == "arith.constant"
               and str(o.results[0].type) == packed_type for o in ops)


@pytest.mark.parametrize(("m", "columns_outer"), [(120, True), (200, True), (2048, False)])
def test_row_tiles_innermost_while_the_a_slice_fits_l2(m: int, columns_outer: bool) -> None:
    """The mmt4d's register tiles run columns outer, rows inner (a B micro-panel stays in L1
    across the row tiles) while the packed A k-slice (rows x kc floats, kc = all of K without
    cache tiles) fits in 1 / A_SLICE_L2_SHARE of znver3's 512 KB L2: 120 rows by all 384 of K
    (180 KB) fit with no cache tiles at all, 200 rows by a k-slice, 2048 rows keep the rows
    outer. (K = 384 stays one reduction: longer ones are split into partial sums, a
    batch_mmt4d.)"""
    from onnxc.compiler import lower
    from onnxc.targets.cpu.data_tiling import plan_packed
    from onnxc.targets.cpu.tiles import A_SLICE_L2_SHARE

    w = RNG.standard_normal((384, 64)).astype(np.float32)
    module = lower(_matmul_model(m, 384, 64, w, "MatMul"), "linalg")
    assert pack_contractions(module, AVX2) == 1
    (mmt4d,) = [o for o in _ops(module) if o.name == "linalg.mmt4d"]
    plan = plan_packed(mmt4d, AVX2)
    assert plan is not None
    whole_a_fits = m * 384 * 4 <= AVX2.l2_bytes // A_SLICE_L2_SHARE
    assert (plan[2] is None) == whole_a_fits
    kc = plan[2][2] if plan[2] and plan[2][2] else 384
    assert (m * kc * 4 <= AVX2.l2_bytes // A_SLICE_L2_SHARE) == columns_outer
    assert plan[5] == ((1, 0, 2, 3, 4, 5) if columns_outer else None)


@pytest.mark.parametrize(("m", "n", "split"), [(64, 512, "columns"), (512, 64, "rows"), (64, 64, "rows")])
def test_threads_split_the_wider_operand(m: int, n: int, split: str) -> None:
    """With two threads a mmt4d is split by the columns of B where B is wider than A is tall
    (each thread streams half of the weights), else by the rows of A."""
    from onnxc.compiler import lower
    from onnxc.targets.cpu.data_tiling import plan_packed

    w = RNG.standard_normal((256, n)).astype(np.float32)
    module = lower(_matmul_model(m, 256, n, w, "MatMul"), "linalg")
    assert pack_contractions(module, AVX2) == 1
    (mmt4d,) = [o for o in _ops(module) if o.name == "linalg.mmt4d"]
    plan = plan_packed(mmt4d, AVX2, threads=2)
    assert plan is not None and plan[4] == ((0, 2, 0, 0, 0, 0) if split == "columns" else (2, 0, 0, 0, 0, 0))


def _reference(model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize("target", ["host", "znver3"])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 17, 100), (17, 100, 3), (100, 3, 17), (1, 1000, 17), (64, 48, 96)])
@pytest.mark.parametrize("const_b", [True, False])
def test_packed_matmul_matches_reference(target: str, m: int, k: int, n: int, const_b: bool) -> None:
    import onnxc

    b = RNG.standard_normal((k, n)).astype(np.float32)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    model = _matmul_model(m, k, n, b if const_b else None)
    compiled = onnxc.compile(model, cpu_options=CpuPipelineOptions(target_cpu=target))
    feeds = {"a": a} if const_b else {"a": a, "b": b}
    (y,) = compiled(*feeds.values())
    np.testing.assert_allclose(y, _reference(model, feeds), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("target", ["host", "znver3"])
@pytest.mark.parametrize("const_b", [True, False])
def test_packed_matmul_dynamic_m(target: str, const_b: bool) -> None:
    """One compiled model, several batch sizes (padding rows never leak into the result)."""
    import onnxc

    k, n = 37, 45
    b = RNG.standard_normal((k, n)).astype(np.float32)
    model = _matmul_model("batch", k, n, b if const_b else None)
    compiled = onnxc.compile(model, cpu_options=CpuPipelineOptions(target_cpu=target))
    for m in (1, 3, 17, 100):
        a = RNG.standard_normal((m, k)).astype(np.float32)
        feeds = {"a": a} if const_b else {"a": a, "b": b}
        (y,) = compiled(*feeds.values())
        assert y.shape == (m, n)
        np.testing.assert_allclose(y, _reference(model, feeds), rtol=1e-3, atol=1e-4)


def test_packed_batch_matmul() -> None:
    import onnxc
    from onnx import TensorProto, helper

    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["y"])],
            "g",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 19, 33]),
             helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 33, 21])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 19, 21])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    feeds = {"a": RNG.standard_normal((3, 19, 33)).astype(np.float32), "b": RNG.standard_normal((3, 33, 21)).astype(np.float32)}
    (y,) = onnxc.compile(model)(*feeds.values())
    np.testing.assert_allclose(y, _reference(model, feeds), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("target", ["host", "znver3"])
def test_packed_long_reduction_keeps_partial_sums(target: str) -> None:
    """K = 4096 through the packed path: split into batch_mmt4d chunks of 512, as accurate as
    the split plain path (rel < 1e-6 against float64 on positive data, where one sequential
    accumulator loses about 3e-6)."""
    import onnxc
    from onnxc.compiler import lower

    m, k, n = 4, 4096, 96
    # Data of its own: drawn from the shared RNG it depended on which tests ran before it on the
    # same xdist worker, and the largest error (5.5e-7 to 7.5e-7 over seeds) is close to the bound.
    rng = np.random.default_rng(0)
    w = rng.random((k, n), dtype=np.float32)
    model = _matmul_model(m, k, n, w)
    module = lower(model, "linalg")
    pack_contractions(module, CpuFeatures.for_target(target))
    assert any(o.name == "linalg.batch_mmt4d" for o in _ops(module))
    a = rng.random((m, k), dtype=np.float32)
    (y,) = onnxc.compile(model, cpu_options=CpuPipelineOptions(target_cpu=target))(a)
    want = a.astype(np.float64) @ w.astype(np.float64)
    assert np.max(np.abs(y - want) / np.abs(want)) < 1e-6


# --- threads ----------------------------------------------------------------------------------


def test_threads_option_is_validated() -> None:
    from onnxc.errors import OnnxcError

    assert CpuPipelineOptions().threads == host_cpu().cores
    for bad in (0, -1, True, 1.5):
        with pytest.raises(OnnxcError, match="threads"):
            CpuPipelineOptions(threads=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("m", [1, 37, "batch"])
def test_two_threads_equal_one(m: int | str) -> None:
    """Threads split whole output tiles, never a sum: the results are bit-identical."""
    import onnxc
    from onnxc.targets.cpu.pipeline import lower_to_vector

    k, n = 300, 200
    w = RNG.standard_normal((k, n)).astype(np.float32)
    model = _matmul_model(m, k, n, w)
    from onnxc.compiler import lower

    module = lower(model, "linalg")
    with module.context:
        lower_to_vector(module, CpuPipelineOptions(threads=2))
    assert any(o.name == "scf.forall" for o in _ops(module))
    rows = 37 if m == "batch" else m
    a = RNG.standard_normal((rows, k)).astype(np.float32)
    (one,) = onnxc.compile(model, cpu_options=CpuPipelineOptions(threads=1))(a)
    (two,) = onnxc.compile(model, cpu_options=CpuPipelineOptions(threads=2))(a)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(two, _reference(model, {"a": a}), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("runtime", ["openmp", "async"])
def test_thread_runtimes_give_the_one_thread_results(runtime: str, tmp_path) -> None:
    """Both thread runtimes run the forall loops (OpenMP: an omp.parallel region, libiomp5;
    async: MLIR's async runtime) and match one thread bit for bit; the libraries the JIT loads
    are the runtime's. The runs happen in a fresh process per runtime: one process is meant to
    use one thread runtime (the default), and a crash there fails this test instead of taking the
    test worker down (a CI run once segfaulted after the async case ran beside OpenMP code)."""
    import subprocess
    import sys

    import onnx

    from onnxc.targets.cpu.pipeline import runtime_libraries
    from onnxc.targets.cpu.threads import async_runtime_library, openmp_library

    opts = CpuPipelineOptions(threads=2, thread_runtime=runtime)
    lib = openmp_library() if runtime == "openmp" else async_runtime_library()
    assert lib is not None, f"{runtime}: its runtime library is installed by the project's dependencies"
    assert runtime_libraries(opts) == [lib]
    assert runtime_libraries(CpuPipelineOptions(threads=1, thread_runtime=runtime)) == []
    k, n = 300, 200
    w = RNG.standard_normal((k, n)).astype(np.float32)
    model = _matmul_model(64, k, n, w)
    from onnxc.compiler import lower

    llvm_ir = str(lower(model, "llvm", options=opts))
    # omp.parallel stays an op of the LLVM-dialect module: LLVM IR translation emits its
    # __kmpc_fork_call.
    assert ("omp.parallel" in llvm_ir) == (runtime == "openmp")
    assert ("mlirAsyncRuntimeExecute" in llvm_ir) == (runtime == "async")
    onnx.save(model, tmp_path / "mm.onnx")
    np.save(tmp_path / "a.npy", RNG.standard_normal((64, k)).astype(np.float32))
    script = (
        "import numpy as np, onnxc\n"
        "from onnxc.targets.cpu import CpuPipelineOptions\n"
        f"a = np.load({str(tmp_path / 'a.npy')!r})\n"
        f"m = {str(tmp_path / 'mm.onnx')!r}\n"
        "(one,) = onnxc.compile(m, cpu_options=CpuPipelineOptions(threads=1))(a)\n"
        f"(two,) = onnxc.compile(m, cpu_options=CpuPipelineOptions(threads=2, thread_runtime={runtime!r}))(a)\n"
        "np.testing.assert_array_equal(one, two)\n"
        "print('equal')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "equal" in proc.stdout, proc.stderr


def test_thread_runtime_option_is_validated() -> None:
    from onnxc.errors import OnnxcError

    with pytest.raises(OnnxcError, match="thread_runtime must be one of auto, openmp, async"):
        CpuPipelineOptions(thread_runtime="tbb")


def test_threaded_aot_library_runs(tmp_path) -> None:
    """A threaded library links the thread runtime and runs without MLIR loaded."""
    from onnxc.compiler import lower
    from onnxc.targets.cpu import compile_aot, load_library

    k, n = 64, 48
    w = RNG.standard_normal((k, n)).astype(np.float32)
    module = lower(_matmul_model(32, k, n, w), "linalg")
    lib = compile_aot(module, tmp_path / "mm.so", options=CpuPipelineOptions(threads=2))
    a = RNG.standard_normal((32, k)).astype(np.float32)
    (y,) = load_library(lib)(a)
    np.testing.assert_allclose(y, a @ w, rtol=1e-4, atol=1e-4)


ROWS_SOFTMAX_PARTS = """
func.func @f(%x: tensor<256x512xf32>) -> (tensor<256x512xf32>, tensor<256xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x512xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<256x512xf32>) outs(%e : tensor<256x512xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  } -> tensor<256x512xf32>
  %e1 = tensor.empty() : tensor<256xf32>
  %f = linalg.fill ins(%z : f32) outs(%e1 : tensor<256xf32>) -> tensor<256xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<256x512xf32>) outs(%f : tensor<256xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = arith.addf %o, %a : f32
    linalg.yield %t : f32
  } -> tensor<256xf32>
  return %y, %s : tensor<256x512xf32>, tensor<256xf32>
}
"""


def test_large_elementwise_and_row_reduction_are_threaded() -> None:
    """Large ops split their outer parallel loop over the threads; results equal one thread."""
    from onnxc.targets.cpu import compile_module
    from onnxc.targets.cpu.pipeline import lower_to_vector

    with ir.Context():
        module = ir.Module.parse(ROWS_SOFTMAX_PARTS)
        lower_to_vector(module, CpuPipelineOptions(threads=2))
        assert sum(o.name == "scf.forall" for o in _ops(module)) >= 2
        x = RNG.standard_normal((256, 512)).astype(np.float32)
        one = compile_module(ir.Module.parse(ROWS_SOFTMAX_PARTS), options=CpuPipelineOptions(threads=1))(x)
        two = compile_module(ir.Module.parse(ROWS_SOFTMAX_PARTS), options=CpuPipelineOptions(threads=2))(x)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(two[0], np.maximum(x, 0))
    np.testing.assert_allclose(two[1], x.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_batched_activation_times_weight_is_one_named_matmul() -> None:
    """(batch..., m, k) x (k, n): the batch dims fold into M (one linalg.matmul, so the packed
    path takes it), with static, one and two symbolic dims; numerics against onnx.reference."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    import onnxc
    from onnxc.compiler import lower

    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((16, 24)).astype(np.float32), "w")
    for declared, runs in (([2, 3, 16], [(2, 3, 16)]), (["b", 5, 16], [(4, 5, 16), (1, 5, 16)]), (["b", "s", 16], [(2, 3, 16), (1, 7, 16)])):
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, declared)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w],
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        text = str(lower(model, "linalg"))
        assert text.count("linalg.matmul") == 1 and "linalg.generic" not in text, declared
        compiled = onnxc.compile(model)
        for shape in runs:
            x = rng.standard_normal(shape).astype(np.float32)
            (want,) = ReferenceEvaluator(model).run(None, {"x": x})
            (got,) = compiled(x)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_elementwise_producer_is_not_fused_into_a_packed_contraction() -> None:
    """A Gelu between two MatMuls (a transformer FFN) stays its own kernel: both contractions
    are packed (two vector.contract at the vector stage), erf is computed once per element."""
    from onnx import TensorProto, helper, numpy_helper

    from onnxc.compiler import lower

    rng = np.random.default_rng(8)
    w1 = numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Erf", ["h"], ["e"]),
        helper.make_node("Mul", ["h", "e"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    text = str(lower(model, "vector", options=CpuPipelineOptions(threads=1, target_cpu="x86-64-v4")))
    assert text.count("vector.contract") == 2, text


def test_softmax_is_not_fused_into_a_runtime_contraction() -> None:
    """Attention's probabilities x V (both operands computed at run time, so not packed): the
    Softmax's final scaling stays its own kernel instead of being recomputed inside the
    product's reduction loop, so the product is still vectorized as a contraction (the fused
    form ran 25x slower); the values match onnx.reference."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    import onnxc
    from onnxc.compiler import lower
    from onnxc.targets.cpu.pipeline import insulate_contractions

    shape_p, shape_v = [1, 2, 16, 16], [1, 2, 16, 8]
    nodes = [helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(
        nodes, "pv",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, shape_p), helper.make_tensor_value_info("v", TensorProto.FLOAT, shape_v)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    from mlir.dialects import linalg
    from mlir.passmanager import PassManager

    from onnxc.targets.cpu.pipeline import vector_pre_pipeline

    def _is_contraction(op: ir.Operation) -> bool:
        try:
            return bool(linalg.isa_contraction_op(op.opview))
        except (TypeError, ValueError):  # linalg.yield and other non-structured ops
            return False

    def contractions_after_fusion(insulate: bool) -> tuple[int, str]:
        module = lower(model, "linalg")
        with module.context:
            if insulate:
                assert insulate_contractions(module) == 1  # the probabilities; v is an argument
            PassManager.parse(vector_pre_pipeline(CpuPipelineOptions(threads=1))).run(module.operation)
        found = [op for op in _ops(module) if op.name.startswith("linalg.") and _is_contraction(op)]
        return len(found), str(module)

    count, text = contractions_after_fusion(insulate=True)
    assert count == 1 and "tensor.cast" not in text
    # Without the insulation the fusion pass makes the product a non-contraction (the check
    # above can fail).
    assert contractions_after_fusion(insulate=False)[0] == 0
    s = RNG.standard_normal(shape_p).astype(np.float32)
    v = RNG.standard_normal(shape_v).astype(np.float32)
    (y,) = onnxc.compile(model)(s, v)
    np.testing.assert_allclose(y, ReferenceEvaluator(model).run(None, {"s": s, "v": v})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("ranges", "candidates", "tiles", "want"),
    [
        ([1, 56, 56, 64], [0, 1, 2], None, (0, 2, 0, 0)),  # batch of 1: the rows, not the batch
        ([4, 56, 56, 64], [0, 1, 2], None, (2, 0, 0, 0)),  # outermost on a tie
        ([1, 7, 7, 512], [0, 1, 3], [1, 1, 7, 32], (0, 0, 0, 2)),  # 7 rows 4/3: channels even
        ([1, 7, 7, 48], [0, 1, 3], [1, 1, 7, 16], (0, 2, 0, 0)),  # 3 channel tiles: no whole split
        ([1, 55, 55, 64], [0, 1, 3], [1, 1, 5, 32], (0, 2, 0, 0)),  # 55 rows 28/27: within the slack of even channels
        ([1, 1, 1, 64], [0, 1, 2], None, None),  # nothing with a tile per thread
        ([1, None, 8, 64], [0, 1, 2], None, (0, 0, 2, 0)),  # dynamic loops are not split
    ],
)
def test_forall_split_picks_the_best_balanced_loop(ranges, candidates, tiles, want) -> None:
    from onnxc.targets.cpu.pipeline import forall_split

    assert forall_split(ranges, candidates, 2, tiles) == want
    assert forall_split(ranges, candidates, 1, tiles) is None


def test_batch_of_one_elementwise_op_is_threaded() -> None:
    """A large elementwise op of a batch of 1 (NHWC activations) splits a non-batch loop."""
    from onnxc.targets.cpu.pipeline import plan_tiles

    text = """
    func.func @f(%x: tensor<1x56x56x64xf32>) -> tensor<1x56x56x64xf32> {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<1x56x56x64xf32>
      %y = linalg.generic {indexing_maps = [affine_map<(n, h, w, c) -> (n, h, w, c)>, affine_map<(n, h, w, c) -> (n, h, w, c)>],
                           iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
          ins(%x : tensor<1x56x56x64xf32>) outs(%e : tensor<1x56x56x64xf32>) {
      ^bb0(%a: f32, %o: f32):
        %m = arith.maximumf %a, %z : f32
        linalg.yield %m : f32
      } -> tensor<1x56x56x64xf32>
      return %y : tensor<1x56x56x64xf32>
    }
    """
    with ir.Context():
        module = ir.Module.parse(text)
        (op,) = [o for o in _ops(module) if o.name == "linalg.generic"]
        assert plan_tiles(op, CpuPipelineOptions(threads=2)).forall_threads == (0, 2, 0, 0)
        assert plan_tiles(op, CpuPipelineOptions(threads=1)).forall_threads is None


@pytest.mark.parametrize(
    ("dims_a", "dims_b", "shape_a", "shape_b"),
    [
        ([1, 6, 197, 64], [1, 6, 64, 197], [1, 6, 197, 64], [1, 6, 64, 197]),  # ViT's Q x K^T
        ([1, 2, 3, 4, 5], [1, 2, 3, 5, 6], [1, 2, 3, 4, 5], [1, 2, 3, 5, 6]),  # rank 5
    ],
)
def test_rank4_matmul_with_equal_batch_is_one_batch_matmul(dims_a, dims_b, shape_a, shape_b) -> None:
    """(b..., m, k) x (b..., k, n) with equal static batch dims lowers to one
    `linalg.batch_matmul` (the general contraction generic left a sequence length its tile does
    not divide to scalar code: 15x slower); values match onnx.reference."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    import onnxc
    from onnxc.compiler import lower

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "mm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, dims_a), helper.make_tensor_value_info("b", TensorProto.FLOAT, dims_b)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    names = [op.name for op in _ops(lower(model, "linalg"))]
    assert names.count("linalg.batch_matmul") == 1 and "linalg.generic" not in names, names
    a = RNG.standard_normal(shape_a).astype(np.float32)
    b = RNG.standard_normal(shape_b).astype(np.float32)
    (y,) = onnxc.compile(model)(a, b)
    np.testing.assert_allclose(y, ReferenceEvaluator(model).run(None, {"a": a, "b": b})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", [128, 197, 5, 3000])
def test_row_reductions_take_the_row_in_one_tile(width: int) -> None:
    """A reduction over the innermost loop tiles the whole row (up to MAX_REDUCTION_VECTORS
    vectors, the tail masked) so the horizontal reduction runs once per row; Softmax and
    ReduceMax over such rows (all-negative rows included: the masked max tail must not leak
    its padding) match onnx.reference."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    import onnxc
    from onnxc.targets.cpu.pipeline import MAX_REDUCTION_VECTORS, plan_tiles

    cpu = CpuFeatures.for_target("x86-64-v4")
    lanes = cpu.lanes(32)
    text = f"""
    func.func @f(%x: tensor<6x{width}xf32>) -> tensor<6xf32> {{
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<6xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<6xf32>) -> tensor<6xf32>
      %s = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                           iterator_types = ["parallel", "reduction"]}}
          ins(%x : tensor<6x{width}xf32>) outs(%f : tensor<6xf32>) {{
      ^bb0(%a: f32, %o: f32):
        %t = arith.addf %o, %a : f32
        linalg.yield %t : f32
      }} -> tensor<6xf32>
      return %s : tensor<6xf32>
    }}
    """
    with ir.Context():
        module = ir.Module.parse(text)  # kept alive while its ops are used
        (op,) = [o for o in _ops(module) if o.name == "linalg.generic"]
        plan = plan_tiles(op, CpuPipelineOptions(threads=1, target_cpu="x86-64-v4"))
    want = -(-min(width, MAX_REDUCTION_VECTORS * lanes) // lanes) * lanes
    assert plan is not None and plan.tile_sizes == (1, want) and plan.vector_sizes == (1, want)
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=-1), helper.make_node("ReduceMax", ["x"], ["m"], axes=[-1])]
    graph = helper.make_graph(
        nodes, "rows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("m", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((3, width)).astype(np.float32)
    x[1] = -np.abs(x[1]) - 1.0
    got = onnxc.compile(model)(x)
    for g, w in zip(got, ReferenceEvaluator(model).run(None, {"x": x})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


def test_packed_tile_contraction_lowers_to_broadcast_fmas() -> None:
    """The packed mmt4d register tile (a 6-D contract with unit m1/n1/k1/k0 dims) becomes one
    vector.outerproduct, lowered to lanes-many FMAs, not one multiply and horizontal reduction
    per output element; runtime packing transposes become shuffles. Values match numpy."""
    import onnxc
    from onnxc.compiler import lower
    from onnxc.targets.cpu.pipeline import bufferize, contracts_to_outer_products, lower_to_llvm, lower_to_vector

    k, n = 64, 48
    w = RNG.standard_normal((k, n)).astype(np.float32)
    model = _matmul_model(32, k, n, w)
    opts = CpuPipelineOptions(threads=1, target_cpu="x86-64-v4")
    module = lower(model, "linalg")
    with module.context:
        lower_to_vector(module, opts)
        bufferize(module)
        contracts = sum(o.name == "vector.contract" for o in _ops(module))
        assert contracts >= 1
        assert contracts_to_outer_products(module) == contracts
        names = [o.name for o in _ops(module)]
        assert "vector.contract" not in names and "vector.outerproduct" in names
        lower_to_llvm(module, opts)
    names = [o.name for o in _ops(module)]
    assert "llvm.intr.vector.reduce.fadd" not in names
    assert "llvm.intr.fma" in names or "llvm.intr.fmuladd" in names, sorted(set(names))
    a = RNG.standard_normal((32, k)).astype(np.float32)
    (y,) = onnxc.compile(model, cpu_options=opts)(a)
    np.testing.assert_allclose(y, a.astype(np.float64) @ w.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_gather_of_one_element_compiles_and_matches_reference() -> None:
    """A Gather with a rank-0 index gives a 0-d linalg op reading with `tensor.extract`; its 0-d
    vectorization made a `vector.gather` that canonicalization broke ('operand #2 must be vector
    of integer or index values'), a raw MLIR error. It stays scalar now (plan_tiles)."""
    from onnx import TensorProto
    from onnx import helper as oh
    from onnx import numpy_helper as onh
    from onnx.reference import ReferenceEvaluator

    import onnxc

    nodes = [oh.make_node("Gather", ["x", "i"], ["g"], axis=0), oh.make_node("Mul", ["g", "g"], ["y"])]
    graph = oh.make_graph(
        nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [])], [onh.from_array(np.array(2, np.int64), "i")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    x = np.arange(4, dtype=np.float32) + 0.5
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = onnxc.compile(model, threads=1, cache_dir=False)(x=x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_strided_copies_as_vectors_match_reference(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Concatenations and pads whose data is copied into a slice of a larger buffer go through
    `_vector_copy` (rows of 1000 and 77 elements: whole 64-element chunks and a rest; a padded
    interior), and the results equal onnx.reference's exactly (a copy rounds nothing)."""
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    import onnxc
    from onnxc.targets.cpu import pipeline

    used: list[tuple[str, str]] = []
    original = pipeline._vector_copy

    def counting(src: ir.Value, dst: ir.Value) -> bool:
        done = original(src, dst)
        used.append((str(src.type), str(dst.type)) if done else ("", ""))
        return done

    monkeypatch.setattr(pipeline, "_vector_copy", counting)
    nodes = [
        helper.make_node("Exp", ["a"], ["ea"]),  # computed data: the concat copies its inputs
        helper.make_node("Exp", ["b"], ["eb"]),
        helper.make_node("Concat", ["ea", "eb"], ["y"], axis=1),
        helper.make_node("Pad", ["b", "pads"], ["z"], mode="constant"),
    ]
    graph = helper.make_graph(
        nodes, "copies",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 1000]), helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 77])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1077]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [5, 80])],
        initializer=[helper.make_tensor("pads", TensorProto.INT64, [4], [1, 2, 1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    a, b = RNG.standard_normal((3, 1000)).astype(np.float32), RNG.standard_normal((3, 77)).astype(np.float32)
    y, z = onnxc.compile(model, cpu_options=CpuPipelineOptions(threads=threads))(a, b)
    ref_y, ref_z = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
    assert any(done for done in used if done[0]), used
    np.testing.assert_allclose(y, ref_y, rtol=1e-6)  # exp: the one rounding step
    np.testing.assert_array_equal(z, ref_z)


def test_large_transposes_packs_and_unpacks_are_threaded() -> None:
    """A layout transpose, a pack of a run-time operand and an unpack with at least
    MIN_THREADED_ELEMENTS elements split an outer loop over the threads in whole tiles; one
    thread, or a small transpose, keeps them on the calling thread."""
    from onnxc.targets.cpu.pipeline import plan_tiles

    text = """
    func.func @f(%x: tensor<1x64x56x56xf32>, %s: tensor<1x8x28x28xf32>, %a: tensor<256x512xf32>, %p: tensor<32x16x8x32xf32>)
        -> (tensor<1x56x56x64xf32>, tensor<1x28x28x8xf32>, tensor<32x512x8x1xf32>, tensor<256x512xf32>) {
      %e = tensor.empty() : tensor<1x56x56x64xf32>
      %t = linalg.transpose ins(%x : tensor<1x64x56x56xf32>) outs(%e : tensor<1x56x56x64xf32>) permutation = [0, 2, 3, 1]
      %es = tensor.empty() : tensor<1x28x28x8xf32>
      %ts = linalg.transpose ins(%s : tensor<1x8x28x28xf32>) outs(%es : tensor<1x28x28x8xf32>) permutation = [0, 2, 3, 1]
      %ep = tensor.empty() : tensor<32x512x8x1xf32>
      %pk = linalg.pack %a inner_dims_pos = [0, 1] inner_tiles = [8, 1] into %ep : tensor<256x512xf32> -> tensor<32x512x8x1xf32>
      %eu = tensor.empty() : tensor<256x512xf32>
      %up = linalg.unpack %p inner_dims_pos = [0, 1] inner_tiles = [8, 32] into %eu : tensor<32x16x8x32xf32> -> tensor<256x512xf32>
      return %t, %ts, %pk, %up : tensor<1x56x56x64xf32>, tensor<1x28x28x8xf32>, tensor<32x512x8x1xf32>, tensor<256x512xf32>
    }
    """
    with ir.Context():
        module = ir.Module.parse(text)
        ops = [o for o in _ops(module) if o.name in ("linalg.transpose", "linalg.pack", "linalg.unpack")]
        plans = [plan_tiles(op, CpuPipelineOptions(threads=2, target_cpu="znver4")) for op in ops]
        # The big transpose: 56 rows (tile 1) split 28/28; the small one (6,272 elements) not.
        assert plans[0].forall_threads == (0, 2, 0, 0)
        assert plans[1].forall_threads is None
        assert plans[2].forall_threads == (2, 0)  # 32 row tiles of the packed operand
        assert plans[3].forall_threads == (2, 0)  # 256 rows in tiles of 8: 16 per thread
        assert all(plan_tiles(op, CpuPipelineOptions(threads=1, target_cpu="znver4")).forall_threads is None for op in ops)


def test_thread_threshold_follows_the_thread_runtime() -> None:
    """A mid-size copy (12,544 elements) is split over OpenMP's spinning workers, whose hand-off
    costs about half a microsecond, but not over the async runtime's, whose tasks wake a sleeping
    worker (`pipeline.min_threaded_elements`); a small one (6,272) over neither."""
    from onnxc.targets.cpu.pipeline import ASYNC_MIN_THREADED_ELEMENTS, MIN_THREADED_ELEMENTS, min_threaded_elements, plan_tiles

    assert 6272 < MIN_THREADED_ELEMENTS <= 12544 < ASYNC_MIN_THREADED_ELEMENTS
    text = """
    func.func @f(%x: tensor<1x16x28x28xf32>, %s: tensor<1x8x28x28xf32>) -> (tensor<1x28x28x16xf32>, tensor<1x28x28x8xf32>) {
      %e = tensor.empty() : tensor<1x28x28x16xf32>
      %t = linalg.transpose ins(%x : tensor<1x16x28x28xf32>) outs(%e : tensor<1x28x28x16xf32>) permutation = [0, 2, 3, 1]
      %es = tensor.empty() : tensor<1x28x28x8xf32>
      %ts = linalg.transpose ins(%s : tensor<1x8x28x28xf32>) outs(%es : tensor<1x28x28x8xf32>) permutation = [0, 2, 3, 1]
      return %t, %ts : tensor<1x28x28x16xf32>, tensor<1x28x28x8xf32>
    }
    """
    openmp = CpuPipelineOptions(threads=2, target_cpu="znver4", thread_runtime="openmp")
    threads_async = CpuPipelineOptions(threads=2, target_cpu="znver4", thread_runtime="async")
    assert min_threaded_elements(openmp) == MIN_THREADED_ELEMENTS
    assert min_threaded_elements(threads_async) == ASYNC_MIN_THREADED_ELEMENTS
    with ir.Context():
        module = ir.Module.parse(text)
        mid, small = [o for o in _ops(module) if o.name == "linalg.transpose"]
        assert plan_tiles(mid, openmp).forall_threads == (0, 2, 0, 0)  # 28 rows, 14 per thread
        assert plan_tiles(mid, threads_async).forall_threads is None
        assert plan_tiles(small, openmp).forall_threads is None
        assert plan_tiles(small, threads_async).forall_threads is None
