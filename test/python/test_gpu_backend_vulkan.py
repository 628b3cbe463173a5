"""The ONNX backend node tests on the Vulkan target (lavapipe in CI): every float32 case.

What: every node test case (built in memory by onnx, as `test_backend.py` runs them on the CPU)
whose inputs and outputs are float32 (with i64 index tensors beside them where they are data:
Gather's indices, ArgMax/ArgMin's results), no `_expanded` variants (they repeat the same
kernels and would double the time), each compiled with `onnxc.compile(model, target="vulkan")`
and compared with the case's expected outputs at the case's own tolerances (the backend suite's
rtol/atol).

`XFAILS` are strict, grouped by reason: a listed case that passes fails the test, so the list
cannot go stale. Nearly all are refusals (an `OnnxcError` naming the node before any kernel
runs), never a wrong answer, except Bernoulli, whose expected values are one particular random
draw. A case whose model does not lower to linalg (the target-independent stage, shared with the
CPU target and covered by test_backend.py) is skipped with that error as its reason; it is not a
GPU failure.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

_SCAN_HOST = (
    "Scan (opset 8) keeps an i64 constant on the host beside its loop (a host-side computation the "
    "GPU host program does not run)"
)
_F64_TRIG = (
    "DFT computes its twiddle factors with f64 cos/sin: GLSL.std.450 has no 64-bit trigonometry, "
    "so the conversion to SPIR-V refuses math.cos on f64 (naming the node)"
)
_INDEX = "Det keeps its pivot order in an index-typed buffer between kernels, not a Vulkan storage-buffer element type"
_RANDOM = (
    "random draw: the expected values are one draw of numpy's generator, which no compiled code "
    "reproduces; the CPU target is checked by the draw's distribution instead (test_property_checks)"
)


def _xfail(reason: str, *names: str) -> list[tuple[str, str]]:
    return [(n, reason) for n in names]


#: Strict expected failures on the Vulkan target, with the reason.
XFAILS: dict[str, str] = dict(
    [
        *_xfail(_INDEX, "test_det_2d", "test_det_nd"),
        *_xfail(_SCAN_HOST, "test_scan_sum"),
        *_xfail(_F64_TRIG,
            "test_dft_axis_opset19",
            "test_dft_inverse_opset19",
            "test_dft_irfft_opset19",
            "test_dft_opset19",
            "test_dft_rfft_opset19",
        ),
        *_xfail(_RANDOM,
            "test_bernoulli_seed",
        ),
    ]
)


def _f32_only(case_name: str, model: onnx.ModelProto) -> bool:
    """Float32 inputs and outputs, except int64 indices where they are data (Gather's indices,
    ArgMax/ArgMin's results); int64 inputs elsewhere (Reduce*'s `axes` given at run time) mean
    host-side control flow, which the GPU targets refuse."""
    index_data = case_name.startswith(("test_gather_", "test_argmax_", "test_argmin_"))
    ok = (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64) if index_data else (onnx.TensorProto.FLOAT,)
    values = list(model.graph.input) + list(model.graph.output)
    return all(v.type.HasField("tensor_type") and v.type.tensor_type.elem_type in ok for v in values)


def _cases() -> list:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case builders divide by zero on purpose
        cases = node.collect_testcases(None)
    return sorted(
        (c for c in cases if "_expanded" not in c.name and _f32_only(c.name, c.model)),
        key=lambda c: c.name,
    )


CASES = _cases()


def test_xfails_are_in_the_slice() -> None:
    names = {c.name for c in CASES}
    assert set(XFAILS) <= names, sorted(set(XFAILS) - names)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case_on_vulkan(case, request) -> None:
    import onnxc
    from onnxc.compiler import lower
    from test_gpu_vulkan import _vulkan_or_skip

    _vulkan_or_skip()
    if case.name in XFAILS:
        request.applymarker(pytest.mark.xfail(reason=XFAILS[case.name], strict=True, raises=(onnxc.errors.OnnxcError, AssertionError)))
    try:
        compiled = onnxc.compile(case.model, target="vulkan")
    except onnxc.errors.OnnxcError as e:
        try:  # only on failure (it costs a second import): is the target-independent stage at fault?
            lower(case.model, "linalg")
        except onnxc.errors.OnnxcError as early:
            pytest.skip(f"does not lower to linalg (target-independent, see test_backend.py): {str(early).splitlines()[0][:200]}")
        raise e
    for inputs, outputs in case.data_sets:
        got = compiled(*inputs)
        assert len(got) == len(outputs)
        for g, w in zip(got, outputs):
            np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol)
