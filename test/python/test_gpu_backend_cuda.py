"""The ONNX backend node tests compiled for CUDA: every float case of test_gpu_backend_vulkan's
list lowered to PTX (tensor cores allowed, tf32 included, so that the mma.sync kernels are
covered too) and each kernel module assembled by NVIDIA's ptxas for sm_80 and for sm_90 (issue 9:
"target=cuda produces cubins that ptxas accepts for the whole suite"). A rejected PTX or a spill
fails the test, and so does a launch whose parameters (the memref descriptors the CUDA runtime
passes, `runtime.launch_parameters`) differ in number from what the PTX entry declares.

`test_node_case_runs_on_cuda` runs every case with `onnxc.compile(model, target="cuda")` on an
NVIDIA GPU and compares with the case's expected outputs at its own tolerances; on a machine
without one (CI) it is skipped, saying so; the numerics of the shared mapping are then checked on
Vulkan (test_gpu_backend_vulkan.py).

`XFAILS` are strict and grouped by reason; every one is a refusal (an `OnnxcError` naming the
node), never a crash. A case whose model does not lower to linalg (target-independent, see
test_backend.py) is skipped with that error as its reason.
"""

from __future__ import annotations

import pytest
from test_gpu_backend_vulkan import _DFT_NOISE, _RANDOM, CASES, OTHER_CASES, run_case_on
from test_gpu_backend_vulkan import XFAILS as VULKAN_XFAILS
from test_gpu_cuda import ptxas  # noqa: F401  (the fixture: ptxas from the gpu extra, a failure when missing)

#: Strict expected failures of the CUDA compilation, with the reason: the Vulkan list's
#: mapping-level refusals (the shared mapping). None since Scan-8's counting loop became an
#: `scf.for` that the host unrolls (`mapping._counted_whiles_to_for`): every case assembles.
XFAILS: dict[str, str] = {}


def test_xfails_are_cases() -> None:
    names = {c.name for c in CASES}
    assert set(XFAILS) <= names, sorted(set(XFAILS) - names)


def assemble_case(case, ptxas: str) -> None:
    """Lower `case` to PTX as `onnxc.compile(target="cuda")` would (dynamic and data-dependent
    shapes specialized to its first inputs) and assemble every kernel module with ptxas for
    sm_80 and sm_90: no rejection, no spill, and each launch's parameters as many as its PTX
    entry declares. An `OnnxcError` (a refusal) propagates; a model that does not lower to linalg
    is skipped with why."""
    import onnxc
    from onnxc.compiler import lower
    from onnxc.targets.cpu.jit import select_entry
    from onnxc.targets.cuda import CudaOptions, assemble, compile_ptx
    from onnxc.targets.cuda.runtime import launch_parameters, ptx_parameter_count
    from onnxc.targets.gpu.host import Launch
    from onnxc.targets.gpu.specialize import host_read_arguments, needs_specialization, specialize

    try:
        linalg = lower(case.model, "linalg")
    except onnxc.errors.OnnxcError as early:
        pytest.skip(f"does not lower to linalg (target-independent, see test_backend.py): {str(early).splitlines()[0][:200]}")
    entry = select_entry(linalg, None)
    if needs_specialization(linalg, entry.name):
        # Dynamic or data-dependent shapes (Resize's scales, Range, OneHot's depth): compiled per
        # call's shapes and host-read values, as a run would; here for the case's first inputs.
        inputs = entry.validate(case.data_sets[0][0])
        linalg = specialize(linalg, entry.name, inputs, host_read_arguments(linalg, entry.name))
    artifact = compile_ptx(linalg, CudaOptions("sm_80", "+ptx80", allow_tf32=True))
    for chip in ("sm_80", "sm_90"):
        for kernel, ptx in artifact.ptx.items():
            result = assemble(ptx, chip, ptxas)
            assert result.kernels and result.kernels[0].spill_stores == 0, f"{kernel} on {chip}: {result.log}"
    for step in artifact.program.steps:
        if isinstance(step, Launch):
            params = launch_parameters([0] * len(step.args), step.layouts)
            assert len(params) == ptx_parameter_count(artifact.ptx[step.module], step.function), step


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case_assembles_for_cuda(case, ptxas: str, request) -> None:
    import onnxc

    if case.name in XFAILS:
        request.applymarker(pytest.mark.xfail(reason=XFAILS[case.name], strict=True, raises=onnxc.errors.OnnxcError))
    assemble_case(case, ptxas)


@pytest.mark.parametrize("case", OTHER_CASES, ids=[c.name for c in OTHER_CASES])
def test_node_case_assembles_for_cuda_or_is_refused(case, ptxas: str) -> None:
    """Every node case outside the float slice (integer, bfloat16, float8, string, sequence
    data) assembles for sm_80 and sm_90, or is refused with an `OnnxcError` that says why (a
    host-side computation, a string op): never a crash, a raw error or a PTX ptxas rejects."""
    import onnxc

    try:
        assemble_case(case, ptxas)
    except onnxc.errors.OnnxcError as e:
        assert str(e).strip(), "a refusal must say why"


#: Strict expected failures when the cases run on an NVIDIA GPU, with the reason: the
#: compilation's refusals above, the random draws (no compiled code reproduces numpy's), and
#: DFT's rounding noise. Checked on an H200 (sm_90): 585 cases pass.
RUN_XFAILS: dict[str, str] = {
    **XFAILS,
    **{name: reason for name, reason in VULKAN_XFAILS.items() if reason == _RANDOM},
    "test_dft_inverse_opset19": _DFT_NOISE,
}


def _cuda_or_skip() -> None:
    from onnxc.targets.cuda import cuda_device_count

    if cuda_device_count() == 0:
        pytest.skip("no NVIDIA GPU on this machine (no libcuda.so.1 or no device): the CUDA runs need one; "
                    "the PTX of every case is assembled by ptxas above and the mapping's numerics are checked on Vulkan")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case_runs_on_cuda(case, request) -> None:
    _cuda_or_skip()
    run_case_on("cuda", case, RUN_XFAILS, request)
