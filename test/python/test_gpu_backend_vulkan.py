"""A slice of the ONNX backend node tests on the Vulkan target (lavapipe in CI).

What: the node test cases (built in memory by onnx, as `test_backend.py` runs them on the CPU)
of the op families the GPU mapping covers: elementwise math and activations, MatMul/Gemm,
ReduceSum/Mean/Max/Min, Softmax/LogSoftmax, Transpose, Concat, Conv, norms and a few shape ops,
each compiled with `onnxc.compile(model, target="vulkan")` and compared with the case's expected
outputs at the case's own tolerances (the backend suite's rtol/atol). Only cases whose inputs
and outputs are float32 (with i64/i32 index tensors beside them) are taken, and no
`_expanded` variants (they repeat the same kernels and would double the time).

`XFAILS` are strict: a case listed there that passes fails the test, so the list cannot go stale.
A case whose model does not lower to linalg (the target-independent stage, shared with the CPU
target and covered by test_backend.py) is skipped with that error as its reason; it is not a GPU
failure. Pooling and InstanceNormalization are left out of the slice: their lowering currently
aborts the process on some cases (an MLIR assertion in the ONNX->linalg stage, on the CPU too).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

PREFIXES = (
    "test_abs", "test_add", "test_sub", "test_mul", "test_div", "test_neg", "test_exp", "test_log", "test_sqrt",
    "test_reciprocal", "test_pow", "test_max_", "test_min_", "test_relu", "test_sigmoid", "test_tanh", "test_leakyrelu",
    "test_elu", "test_selu", "test_celu", "test_softplus", "test_softsign", "test_hardsigmoid", "test_hardswish", "test_mish",
    "test_prelu", "test_thresholdedrelu", "test_shrink", "test_clip", "test_erf", "test_gelu", "test_cos", "test_sin",
    "test_floor", "test_ceil", "test_sign", "test_mean", "test_sum_",
    "test_matmul_", "test_gemm_",
    "test_reduce_sum_", "test_reduce_mean_", "test_reduce_max_", "test_reduce_min_",
    "test_softmax_", "test_logsoftmax_", "test_hardmax", "test_argmax_", "test_argmin_", "test_gather_",
    "test_layer_normalization", "test_batchnorm",
    "test_transpose_", "test_concat_", "test_flatten", "test_conv_",
)

#: Strict expected failures on the Vulkan target, with the reason.
XFAILS: dict[str, str] = {}


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
        (c for c in cases if c.name.startswith(PREFIXES) and "_expanded" not in c.name and _f32_only(c.name, c.model)),
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
