"""The CUDA target: every model of test_gpu_vulkan.MODELS lowered to PTX for sm_80 and for sm_90,
each PTX assembled by NVIDIA's ptxas for its chip (a rejected PTX fails the test), and the `-v`
resource report read back. ptxas comes from the `gpu` extra (`nvidia-cuda-nvcc`), so a missing
ptxas is a failure, not a skip.

The tests that run kernels (`cuda` fixture: `onnxc.compile(model, target="cuda")` against
onnx.reference, tensor cores, repeated calls, per-kernel timing) need an NVIDIA GPU and are
skipped, saying so, on machines without one (CI); they ran on an H200 (docs/gpu.md).
"""

from __future__ import annotations

import pytest
from test_gpu_vulkan import MODELS

from onnxc.compiler import lower


@pytest.fixture(scope="module")
def ptxas() -> str:
    from onnxc.targets.cuda import find_ptxas

    tool = find_ptxas()
    if tool is None:
        pytest.fail("ptxas not found: install onnxc[gpu] (nvidia-cuda-nvcc)")
    return tool


@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_ptx_assembles(name: str, chip: str, ptxas: str) -> None:
    from onnxc.targets.cuda import CudaOptions, assemble, compile_ptx

    artifact = compile_ptx(lower(MODELS[name](), "linalg"), CudaOptions(chip, "+ptx80"))
    launched = {step.module for step in artifact.program.steps}
    assert artifact.ptx and set(artifact.ptx) == launched  # one PTX module per launched kernel
    for kernel, ptx in artifact.ptx.items():
        assert f".target {chip}" in ptx
        result = assemble(ptx, chip, ptxas)
        assert result.cubin[:4] == b"\x7fELF", f"{name}/{kernel}: ptxas wrote no ELF cubin"
        assert len(result.kernels) == 1 and result.kernels[0].registers > 0, result.log
        assert result.kernels[0].spill_stores == 0, f"{name}/{kernel} spills: {result.log}"


def test_tree_reduction_uses_shared_memory(ptxas: str) -> None:
    """A row of 1000 is reduced by one block of many threads (3 rows: 3 blocks) whose partial
    results, one float per thread, sit in shared memory."""
    from onnxc.targets.cuda import CudaOptions, compile_ptx

    artifact = compile_ptx(lower(MODELS["long_rows"](), "linalg"), CudaOptions("sm_80"))
    reports = artifact.assemble()
    trees = [s for s in artifact.program.steps if reports[s.module].kernels[0].shared_bytes]
    assert trees, "no kernel uses shared memory"
    for step in trees:
        threads = step.block[0] * step.block[1] * step.block[2]
        assert threads >= 128 and step.grid == (3, 1, 1), step
        assert reports[step.module].kernels[0].shared_bytes == 4 * threads


def test_ptxas_rejection_is_an_error(ptxas: str) -> None:
    from onnxc.targets.cuda import PtxasError, assemble

    with pytest.raises(PtxasError, match="rejected the PTX"):
        assemble(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k() { bogus; }\n", "sm_80", ptxas)


@pytest.mark.parametrize(
    "chip, features, message",
    [
        ("sm_80", "+ptx60", r"sm_80 needs PTX 7\.0 or newer"),  # LLVM would abort the process
        ("sm_90", "+ptx75", r"sm_90 needs PTX 7\.8 or newer"),
        ("sm_75", "+ptx80", "chip must be one of"),
        ("sm_80", "ptx80", "features must look like"),
        ("sm_80", "+ptx99", "newer than"),
    ],
)
def test_bad_chip_feature_pairs_are_refused_before_mlir(chip: str, features: str, message: str) -> None:
    from onnxc.targets.cuda import CudaLoweringError, CudaOptions, compile_ptx

    with pytest.raises(CudaLoweringError, match=message):
        compile_ptx(lower(MODELS["driver_mlp"](), "linalg"), CudaOptions(chip, features))


def test_compile_without_gpu_says_so() -> None:
    import onnxc
    from onnxc.targets.cuda import CudaUnavailable, cuda_device_count

    if cuda_device_count():
        pytest.skip("an NVIDIA GPU is present: this test is about machines without one")
    with pytest.raises(CudaUnavailable, match="no NVIDIA GPU is present"):
        onnxc.compile(MODELS["driver_mlp"](), target="cuda")


def test_ptx_stage_without_gpu(ptxas: str) -> None:
    """`lower(model, "ptx", target="cuda")` (what `--emit ptx` runs) needs no GPU; its PTX assembles."""
    from onnxc.targets.cuda import CudaOptions, assemble, ptx_of
    from onnxc.targets.base import TargetError

    module = lower(MODELS["softmax"](), "ptx", target="cuda", options=CudaOptions("sm_90", "+ptx80"))
    texts = ptx_of(module)
    assert texts and all(assemble(t, "sm_90", ptxas).kernels for t in texts.values())
    with pytest.raises(TargetError, match=r"sm_90 needs PTX 7\.8"):
        lower(MODELS["softmax"](), "ptx", target="cuda", options=CudaOptions("sm_90", "+ptx70"))


def test_onnx_opt_pipelines_are_registered() -> None:
    """`onnx-to-gpu` and `gpu-to-nvvm` are named pipelines of the registry (what onnx-opt -p runs)."""
    from onnxc.compiler import lower as lower_model
    from onnxc.transforms.pipeline import run_pipeline

    module = lower_model(MODELS["driver_mlp"](), "onnx")
    run_pipeline(module, "onnx-to-gpu", reraise=True)
    assert "gpu.launch_func" in str(module)
    run_pipeline(module, "gpu-to-nvvm", reraise=True)
    assert ".target sm_80" in str(module)


def test_driver_emit_ptx_writes_ptx(tmp_path, ptxas: str) -> None:
    """`onnxc compile --target cuda --emit ptx` writes the PTX text (one section per kernel
    module), each section of which ptxas assembles."""
    import subprocess
    import sys

    import onnx

    from onnxc.targets.cuda import assemble

    model = tmp_path / "softmax.onnx"
    onnx.save(MODELS["softmax"](), model)
    out = tmp_path / "softmax.ptx"
    r = subprocess.run([sys.executable, "-m", "onnxc.tools.driver", "compile", str(model), "--target", "cuda", "--emit", "ptx", "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    sections = out.read_text().split("// onnxc kernel module: ")[1:]
    assert sections
    for section in sections:
        name, _, ptx = section.partition("\n")
        assert ".entry" in ptx and ".target sm_80" in ptx, name
        assert assemble(ptx, "sm_80", ptxas).kernels, name


def _matmul_model(m: int, k: int, n: int, elem: int = 1):  # -> onnx.ModelProto; 1 = FLOAT
    import onnx
    from onnx import helper

    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "mm",
        [helper.make_tensor_value_info("a", elem, [m, k]), helper.make_tensor_value_info("b", elem, [k, n])],
        [helper.make_tensor_value_info("y", elem, [m, n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
def test_tf32_tensor_cores_when_allowed(chip: str, ptxas: str) -> None:
    """An f32 MatMul of whole tensor-core tiles (64x96 @ 96x64) runs as mma.sync m16n8k4 tf32
    only with allow_tf32 (tf32 rounds the products: a precision change the user must ask for);
    the PTX assembles for the chip, with the promoted operands in shared memory."""
    from onnxc.targets.cuda import CudaOptions, assemble, compile_ptx

    linalg = lower(_matmul_model(64, 96, 64), "linalg")
    (ptx,) = compile_ptx(linalg, CudaOptions(chip, "+ptx80", allow_tf32=True)).ptx.values()
    assert "mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32" in ptx
    result = assemble(ptx, chip, ptxas)
    assert result.kernels[0].shared_bytes == (32 + 32) * 32 * 4 and result.kernels[0].spill_stores == 0, result.log
    for opts in (CudaOptions(chip, "+ptx80"), CudaOptions(chip, "+ptx80", tensor_cores="off", allow_tf32=True)):
        (ptx,) = compile_ptx(linalg, opts).ptx.values()
        assert "mma.sync" not in ptx, opts


def test_tensor_cores_need_whole_tiles(ptxas: str) -> None:
    """Shapes that leave partial tiles (the upstream rewrite needs static m16n8 pieces) stay on
    the SIMT path, with promoted operands, and still assemble."""
    from onnxc.targets.cuda import CudaOptions, assemble, compile_ptx

    (ptx,) = compile_ptx(lower(_matmul_model(45, 83, 39), "linalg"), CudaOptions("sm_80", allow_tf32=True)).ptx.values()
    assert "mma.sync" not in ptx
    assert assemble(ptx, "sm_80", ptxas).kernels[0].shared_bytes > 0


def test_f16_matmul_accumulates_in_f32_without_tensor_cores(ptxas: str) -> None:
    """ONNX MatMul on f16 accumulates in f32 (common.accumulator_type); upstream's mma.sync
    rewrite builds f16 accumulation only, so such a MatMul is not put on tensor cores (which
    would round every partial sum to f16): no mma.sync, and the PTX assembles."""
    from onnxc.targets.cuda import CudaOptions, assemble, compile_ptx

    texts = compile_ptx(lower(_matmul_model(64, 64, 64, 10), "linalg"), CudaOptions("sm_80")).ptx.values()
    assert texts
    for ptx in texts:
        assert "mma.sync" not in ptx
        assert assemble(ptx, "sm_80", ptxas).kernels


def test_bad_tensor_core_options_are_refused() -> None:
    from onnxc.targets.cuda import CudaLoweringError, CudaOptions

    with pytest.raises(CudaLoweringError, match="tensor_cores must be 'auto' or 'off'"):
        CudaOptions(tensor_cores="on").validate()
    with pytest.raises(CudaLoweringError, match="allow_tf32 must be a bool"):
        CudaOptions(allow_tf32="yes").validate()  # type: ignore[arg-type]


def test_contractions_promote_operands(ptxas: str) -> None:
    """Every contraction kernel of batch_matmul (a batch_matmul, a 4-D MatMul, a K smaller than
    the K-step) keeps its A and B slices in shared memory: (32 + 64) x min(K, 32) floats per
    step on sm_80. The 4-D MatMul stays a batch_matmul over its collapsed batch of 4 (elementwise
    fusion's reshape propagation no longer reaches contractions, `_fused_elementwise`), one
    workgroup per batch element, where as a generic with two batch loops each workgroup held
    2 batch elements' slices."""
    from onnxc.targets.cuda import CudaOptions, compile_ptx

    artifact = compile_ptx(lower(MODELS["batch_matmul"](), "linalg"), CudaOptions("sm_80"))
    shared = sorted(r.kernels[0].shared_bytes for r in artifact.assemble().values())
    assert shared == sorted([96 * 32 * 4, 96 * 20 * 4, 96 * 5 * 4]), shared


def test_bool_buffers_are_held_as_bytes(ptxas: str) -> None:
    """Bool (i1) buffers are held as bytes (`bool_buffers_as_bytes`): the kernel loads and stores
    bytes, b8 (the NVVM lowering of i1 loads asserts, which killed the process before), and ptxas
    assembles it; the host entry takes i8 memrefs, numpy's bool layout."""
    from onnx import TensorProto, helper

    from onnxc.targets.cuda import CudaOptions, compile_ptx

    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Not", ["x"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.BOOL, [4])], [helper.make_tensor_value_info("y", TensorProto.BOOL, [4])],
        ),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=10,
    )
    artifact = compile_ptx(lower(model, "linalg"), CudaOptions("sm_80"))
    (ptx,) = artifact.ptx.values()
    assert "ld.global.b8" in ptx and "st.global.b8" in ptx
    assert all(r.kernels for r in artifact.assemble().values())


def test_large_bool_constants_are_held_as_bytes(ptxas: str) -> None:
    """A bool initializer large enough to be imported as a `dense_resource` blob (GPT-2's 64x64
    causal mask: 4096 bytes) becomes a global of bytes too. The bindings hand a resource back as
    a plain Attribute, which `bool_buffers_as_bytes` left as i1 values in an i8 global: GPT-2
    failed in the NVVM pipeline with a raw 'initial value element expected to be of type i8'."""
    import numpy as np
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    from onnxc.targets.cuda import CudaOptions, compile_ptx

    mask = np.tril(np.ones((64, 64), bool))
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Where", ["causal", "x", "fill"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])],
            [nh.from_array(mask, "causal"), nh.from_array(np.array(-1e4, np.float32), "fill")],
        ),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=10,
    )
    linalg = lower(model, "linalg")
    assert "dense_resource" in str(linalg)  # the case this test is about
    artifact = compile_ptx(linalg, CudaOptions("sm_80"))
    assert all(r.kernels for r in artifact.assemble().values())


def test_launch_parameters_are_memref_descriptors() -> None:
    """Per memref argument: allocated and aligned pointer, offset, sizes, strides (MLIR's
    descriptor, what the NVVM lowering gives a kernel); a view keeps its offset and strides."""
    from onnxc.targets.cuda.runtime import launch_parameters, ptx_parameter_count
    from onnxc.targets.gpu.host import ArgLayout

    views = [ArgLayout(0, (4, 8), (8, 1)), ArgLayout(12, (3,), (2,)), ArgLayout(0, (), ())]
    assert launch_parameters([100, 200, 300], views) == [100, 100, 0, 4, 8, 8, 1, 200, 200, 12, 3, 2, 300, 300, 0]
    ptx = ".visible .entry k(\n\t.param .u64 .ptr .align 1 k_param_0,\n\t.param .u64 k_param_1\n)\n{\n\tld.param.b64 %rd1, [k_param_0];\n}"
    assert ptx_parameter_count(ptx, "k") == 2


def _has_gpu() -> bool:
    from onnxc.targets.cuda import cuda_device_count

    return cuda_device_count() > 0


@pytest.fixture(scope="module")
def cuda() -> None:
    if not _has_gpu():
        pytest.skip("no NVIDIA GPU on this machine (no libcuda.so.1 or no device): running kernels needs one; "
                    "the PTX is assembled by ptxas in the other tests")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cuda_matches_reference(name: str, cuda: None) -> None:
    """`onnxc.compile(model, target="cuda")` end to end on the GPU, against onnx.reference."""
    from test_gpu_vulkan import check_against_reference

    import onnxc

    model = MODELS[name]()
    check_against_reference(onnxc.compile(model, target="cuda"), model, name)


@pytest.mark.parametrize("tf32", [False, True])
def test_gemm_on_the_gpu(tf32: bool, cuda: None) -> None:
    """A MatMul of whole tensor-core tiles, SIMT (f32) and on tensor cores (tf32: mma.sync), on
    the device's own chip; tf32 keeps 10 mantissa bits, hence its looser tolerance. Two calls
    with new inputs reuse the loaded program and the uploaded weights."""
    import numpy as np

    from onnxc.compiler import lower as lower_model
    from onnxc.targets.cuda import CudaOptions, compile_module, cuda_context

    chip = cuda_context().chip if cuda_context().chip in ("sm_80", "sm_86", "sm_89", "sm_90") else "sm_80"
    fn = compile_module(lower_model(_matmul_model(128, 256, 96), "linalg"), CudaOptions(chip, "+ptx80", allow_tf32=tf32))
    assert any("mma.sync" in p for p in fn.ptx.values()) == tf32
    rng = np.random.default_rng(1)
    for _ in range(2):
        a, b = rng.standard_normal((128, 256), dtype=np.float32), rng.standard_normal((256, 96), dtype=np.float32)
        (got,) = fn(a, b)
        want = a.astype(np.float64) @ b.astype(np.float64)
        # tf32 rounds each operand to 10 mantissa bits (2^-11 relative): over K = 256 products
        # the error reaches ~1e-3 of the largest magnitude; f32 stays near 1e-6.
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err < (4e-3 if tf32 else 1e-5), err
    times = fn.program.step_times(a, b, repeat=3)
    assert len(times) == len(fn.program.program.steps) and all(t > 0 for t in times)


def test_chip_newer_than_the_device_is_refused(cuda: None) -> None:
    """PTX for a chip newer than the GPU cannot load: a clear error naming both."""
    from onnxc.compiler import lower as lower_model
    from onnxc.targets.cuda import CudaOptions, CudaUnavailable, compile_module, cuda_context

    newer = [c for c in ("sm_80", "sm_86", "sm_89", "sm_90") if int(c[3:]) > int(cuda_context().chip[3:])]
    if not newer:
        pytest.skip(f"the GPU ({cuda_context().chip}) is at least as new as every supported chip")
    with pytest.raises(CudaUnavailable, match="was compiled for"):
        compile_module(lower_model(MODELS["softmax"](), "linalg"), CudaOptions(newer[-1], "+ptx80"))
