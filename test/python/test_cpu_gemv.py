"""Matrix-vector products (M = 1: classifier heads, decode steps) through the packed path: the
1 x n0 register tile's contraction becomes one FMA per B vector
(targets/cpu/pipeline.py: ``contracts_to_outer_products``), not the upstream fallback of scalar
multiplies and reductions. Answers checked against numpy; the structure on both tile tables."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh

import onnxc
from onnxc.compiler import lower
from onnxc.targets.cpu.pipeline import CpuPipelineOptions, contracts_to_outer_products
from onnxc.transforms.onnx_utils import collect_ops


def _gemv(k: int, n: int, const_b: bool, rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    b = rng.standard_normal((k, n)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", TP.FLOAT, [1, k])]
    inits = [nh.from_array(b, "b")] if const_b else []
    if not const_b:
        inputs.append(helper.make_tensor_value_info("b", TP.FLOAT, [k, n]))
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "gemv", inputs,
                              [helper.make_tensor_value_info("y", TP.FLOAT, [1, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), b


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k,n", [(2048, 1000), (96, 70), (768, 256)])
@pytest.mark.parametrize("const_b", [True, False])
def test_matches_numpy(k: int, n: int, const_b: bool, threads: int) -> None:
    rng = np.random.default_rng(k + n)
    model, b = _gemv(k, n, const_b, rng)
    a = rng.standard_normal((1, k)).astype(np.float32)
    feeds = {"a": a} if const_b else {"a": a, "b": b}
    got = onnxc.compile(model, threads=threads, cache_dir=False)(**feeds)
    got = got[0] if isinstance(got, (list, tuple)) else got
    expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("cpu", ["znver3", "skylake-avx512"])
def test_no_contract_left(cpu: str) -> None:
    model, _ = _gemv(2048, 1000, True, np.random.default_rng(0))
    module = lower(model, "vector", options=CpuPipelineOptions(target_cpu=cpu, threads=1))
    contracts = collect_ops(module.operation, lambda o: o.name == "vector.contract")
    assert contracts
    assert contracts_to_outer_products(module) == len(contracts)
    assert not collect_ops(module.operation, lambda o: o.name == "vector.contract")
    assert collect_ops(module.operation, lambda o: o.name == "vector.fma")
