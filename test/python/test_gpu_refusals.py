"""What the GPU targets refuse, and how (and the wrong answers found on the way, fixed): an `OnnxcError` naming the ONNX node, never an internal
error (IndexError, an MLIR assertion that kills the process); and what they now take instead of
refusing (f64 kernels on Vulkan, uint8 graphs through target="auto").

The refusal cases come from a sweep of the ONNX backend node suite through both GPU pipelines
(every case that lowers to linalg on the CPU): string and image ops (host runtime calls) gave
"internal error in gpu-map: IndexError", and an If on a bool condition killed the process in the
NVVM lowering (`MemRefToLLVM`: integral element width >= 8; bool buffers are bytes now).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

IR_VERSION = 10


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], opset: int = 18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    return model


def _string_model() -> onnx.ModelProto:
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER", name="normalize0")
    return _model([node], [helper.make_tensor_value_info("x", TensorProto.STRING, [2])], [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])


@pytest.mark.parametrize("target", ["vulkan", "cuda"])
def test_string_ops_are_refused_naming_the_node(target: str) -> None:
    """A string op calls the CPU host runtime: refused with the node and op named."""
    from onnxc.targets.gpu import GpuMappingError

    import onnxc

    with pytest.raises(GpuMappingError, match=r"node 'normalize0' \(StringNormalizer\): calls the CPU host runtime.*do not take it"):
        onnxc.compile(_string_model(), target=target)


@pytest.mark.parametrize("stage_target", [("gpu", "vulkan"), ("gpu", "cuda")])
def test_string_ops_are_refused_in_the_gpu_stage(stage_target: tuple[str, str]) -> None:
    """The same refusal from the `gpu-map` stage alone (`--emit gpu`, onnx-opt), which before
    failed with "internal error in onnxc pass 'gpu-map': IndexError"."""
    import onnxc
    from onnxc.compiler import lower

    stage, target = stage_target
    with pytest.raises(onnxc.errors.OnnxcError, match=r"normalize0.*StringNormalizer") as info:
        lower(_string_model(), stage, target=target)
    assert "internal error" not in str(info.value)


def _backend_case(name: str) -> onnx.ModelProto:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return next(c for c in node.collect_testcases(None) if c.name == name).model


def test_a_bool_read_on_the_host_lowers_for_cuda() -> None:
    """An If on a bool condition reads an i1 on the host: the NVVM lowering's assertion on
    sub-byte loads killed the process; bool buffers are now bytes (the host reads a byte)."""
    from onnxc.compiler import lower

    module = lower(_backend_case("test_if"), "ptx", target="cuda")  # (its branches are constants: no kernel)
    assert module.operation.verify()
    assert "xi1>" not in str(module)  # every bool buffer is a byte buffer


def test_auto_target_takes_uint8() -> None:
    """target="auto" places a uint8 graph on the CPU backend, which holds uint8 as i8: the
    arrays are viewed as onnxc.compile views them (it refused uint8 with an ArgumentError)."""
    import onnxc

    model = _model(
        [helper.make_node("Add", ["x", "x"], ["y"], name="add0")],
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [4])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [4])],
    )
    x = np.array([1, 100, 200, 255], np.uint8)
    got = onnxc.compile(model, target="auto")(x)[0]
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, x + x)  # wraps modulo 256, as numpy's uint8 does


def test_spirv_capabilities_are_read_from_the_binary() -> None:
    """The runtime reads OpCapability from the SPIR-V words (Float64 = 10, Int64 = 11) to check
    the device's shaderFloat64/shaderInt64 before loading a program."""
    from onnxc.targets.vulkan.runtime import spirv_capabilities

    header = [0x07230203, 0x00010000, 0, 10, 0]
    capability = (2 << 16) | 17
    memory_model = (3 << 16) | 14
    entry_point = (4 << 16) | 15
    words = [capability, 1, capability, 10, memory_model, 0, 1]
    assert spirv_capabilities(np.array(header + words, np.uint32).tobytes()) == {1, 10}
    words += [entry_point, 5, 1, 0, capability, 11]  # words after the preamble are not read as capabilities
    assert spirv_capabilities(np.array(header + words, np.uint32).tobytes()) == {1, 10}


def test_f64_rounding_on_vulkan_is_exact() -> None:
    """f64 Floor/Ceil/Round/Abs run on Vulkan (Float64 capability; the math ops rewritten to
    exact integer arithmetic by `f64_math.f64_math_to_arith`), at the edges: halves (Round is half to
    even), -0.0, values beyond 2^52 (already integers), infinities and NaN, against numpy."""
    import onnxc
    from test_gpu_vulkan import _vulkan_or_skip

    _vulkan_or_skip()
    ops = ["Floor", "Ceil", "Round", "Abs"]
    model = _model(
        [helper.make_node(op, ["x"], [f"y{i}"], name=f"{op.lower()}0") for i, op in enumerate(ops)],
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [24])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.DOUBLE, [24]) for i in range(len(ops))],
    )
    x = np.array(
        [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, -0.0, 0.0, 1e300, -1e300, 2.0**52 + 1, -(2.0**53) - 2,
         4503599627370495.5, -4503599627370495.5, np.inf, -np.inf, np.nan, 3.7, -3.7, 1e-310, -1e-310, 7.0, -7.0],
        np.float64,
    )
    got = onnxc.compile(model, target="vulkan")(x)
    for want, g in zip([np.floor(x), np.ceil(x), np.round(x), np.abs(x)], got):
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(want))  # -0.0 stays -0.0


def test_f64_transcendentals_on_vulkan() -> None:
    """f64 Exp, Log, Sin and Cos run on Vulkan (GLSL.std.450 has no 64-bit transcendentals; the
    math ops become arith code, `f64_math.f64_math_to_arith`), against numpy: random values over
    each function's range and the edges (overflow and subnormal results of exp, subnormal and
    non-positive inputs of log, multiples of pi/2, signed zeros, infinities, NaN). Sin and Cos
    beyond 2^20 pi/2, where the reduction would not be accurate, give NaN."""
    import onnxc
    from test_gpu_vulkan import _vulkan_or_skip

    _vulkan_or_skip()
    rng = np.random.default_rng(0)
    ops = ["Exp", "Log", "Sin", "Cos"]
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, np.nan, 709.78, 709.79, -708.3, -744.0, -745.2, -746.0,
             1e-310, 5e-324, -1e-310, 2.2250738585072014e-308, 1.0000000001, 0.9999999999, 1e300, -1e300,
             np.pi / 2, -np.pi / 2, np.pi, 3 * np.pi / 2, 1e5 * np.pi, 1.6e6, -1.6e6, 1e7, -1e20]
    x = np.concatenate([
        np.array(edges), rng.uniform(-745, 709, 200), rng.uniform(-50, 50, 200), np.exp(rng.uniform(-700, 700, 200)),
        rng.uniform(-1.6e6, 1.6e6, 200),
    ]).astype(np.float64)
    n = x.size
    model = _model(
        [helper.make_node(op, ["x"], [f"y{i}"], name=f"{op.lower()}0") for i, op in enumerate(ops)],
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [n])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.DOUBLE, [n]) for i in range(len(ops))],
    )
    got = onnxc.compile(model, target="vulkan")(x)
    with np.errstate(all="ignore"):
        want = [np.exp(x), np.log(x), np.sin(x), np.cos(x)]
    trig_range = np.abs(x) <= 2.0**20 * np.pi / 2
    for op, g, w in zip(ops, got, want):
        if op in ("Sin", "Cos"):
            assert np.isnan(g[~trig_range]).all(), (op, x[~trig_range], g[~trig_range])
            g, w = g[trig_range], w[trig_range]
            np.testing.assert_allclose(g, w, rtol=1e-15, atol=4e-16, err_msg=op)
        else:
            np.testing.assert_allclose(g, w, rtol=4e-16, atol=5e-323, err_msg=op)  # about 2 ulp (subnormals: units)
            np.testing.assert_array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))
    assert np.signbit(got[2][1]) and got[2][1] == 0.0  # sin(-0.0) = -0.0


@pytest.mark.parametrize("axis", [0, 1, None])
def test_compress_runs_on_vulkan_per_condition(axis: int | None) -> None:
    """Compress, whose output length is the count of true conditions: per call, the condition
    (a small input read on the host) becomes a constant, the count is computed on the CPU target
    (`specialize._host_values_on_cpu`: no upstream fold for a linalg reduction) and the host loop
    that picks the slices is unrolled (`mapping._slice_loop`), so the kernels see static sizes;
    each condition gets its own program, and each result matches numpy."""
    import onnxc
    from onnxc.targets.vulkan import VulkanOptions
    from test_gpu_vulkan import _vulkan_or_skip

    _vulkan_or_skip()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((24, 6)).astype(np.float32)
    length = x.size if axis is None else x.shape[axis]
    attrs = {} if axis is None else {"axis": axis}
    out_shape = ["n"] if axis is None else (["n", 6] if axis == 0 else [24, "n"])
    model = _model(
        [helper.make_node("Compress", ["x", "c"], ["y"], name="compress0", **attrs)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)), helper.make_tensor_value_info("c", TensorProto.BOOL, [length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
    )
    if length > 64:  # MAX_VALUE_ELEMENTS: a larger condition is data, not specialized by value
        with pytest.raises(onnxc.errors.OnnxcError, match="Compress"):
            onnxc.compile(model, target="vulkan", options=VulkanOptions(dynamic_shapes="specialize"))(x, np.ones(length, bool))
        return
    compiled = onnxc.compile(model, target="vulkan", options=VulkanOptions(dynamic_shapes="specialize"))
    for c in (rng.random(length) < 0.5, np.ones(length, bool), np.eye(1, length, length - 1, dtype=bool)[0], np.zeros(length, bool)):
        (got,) = compiled(x, c)
        np.testing.assert_array_equal(got, np.compress(c, x, axis=axis))


def test_reduction_to_a_scalar_keeps_its_gather_positions() -> None:
    """NegativeLogLikelihoodLoss with class weights and the mean reduction: sum(w[t] * -x[t]) /
    sum(w[t]) reduces to a scalar with the weight and input gathers fused into the reduction's
    body, which reads its loop positions (`linalg.index`). The leading unit loop that gives such a
    reduction a workgroup loop (`_add_unit_parallel_loop`) shifted the loops but not those
    positions: every gathered row was row 0's, a wrong answer (-0.578 for -0.518) on Vulkan.
    Against onnx.reference, with and without weights, over 3-D and 5-D inputs."""
    import onnxc
    from onnx.reference import ReferenceEvaluator
    from test_gpu_vulkan import _vulkan_or_skip

    _vulkan_or_skip()
    rng = np.random.default_rng(3)
    for shape, weighted, reduction in (((3, 5, 2), True, "mean"), ((2, 4, 3, 2), False, "mean"), ((3, 5, 2), True, "sum")):
        n, c, rest = shape[0], shape[1], list(shape[2:])
        x = rng.standard_normal(shape).astype(np.float32)
        t = rng.integers(0, c, [n, *rest]).astype(np.int64)
        w = rng.random(c).astype(np.float32) + 0.1
        ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape)), helper.make_tensor_value_info("t", TensorProto.INT64, [n, *rest])]
        ins += [helper.make_tensor_value_info("w", TensorProto.FLOAT, [c])] if weighted else []
        model = _model(
            [helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"] if weighted else ["x", "t"], ["y"], reduction=reduction, name="nll0")],
            ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        )
        feeds = [x, t, w] if weighted else [x, t]
        (want,) = ReferenceEvaluator(model).run(None, dict(zip(["x", "t", "w"], feeds)))
        (got,) = onnxc.compile(model, target="vulkan")(*feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{shape} weighted={weighted} {reduction}")


def test_integer_pow_on_vulkan() -> None:
    """Pow on int32 and int64 (`math.ipowi`, which neither GPU conversion lowers; refused before)
    runs as exponentiation by squaring (`mapping._integer_powers`): against numpy for exponents
    0..9 with wrap-around, and against the CPU target for negative exponents (1 for a base of 1,
    +-1 for -1, else 0, upstream's meaning)."""
    import onnxc
    from test_gpu_vulkan import _vulkan_or_skip

    _vulkan_or_skip()
    for dtype, onnx_type in ((np.int32, TensorProto.INT32), (np.int64, TensorProto.INT64)):
        model = _model(
            [helper.make_node("Pow", ["a", "b"], ["y"], name="pow0")],
            [helper.make_tensor_value_info("a", onnx_type, [70]), helper.make_tensor_value_info("b", onnx_type, [70])],
            [helper.make_tensor_value_info("y", onnx_type, [70])],
        )
        a = np.tile(np.array([-3, -2, -1, 0, 1, 2, 3, 5, 7, 100], dtype), 7)
        b = np.repeat(np.arange(0, 7, dtype=dtype), 10) + (np.arange(70) % 3).astype(dtype)
        (got,) = onnxc.compile(model, target="vulkan")(a, b)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(got, np.power(a, b))
        a_neg = np.tile(np.array([1, -1, 2, -2, 3, -3, 7], dtype), 10)
        b_neg = -np.repeat(np.arange(1, 11, dtype=dtype), 7)
        (got,) = onnxc.compile(model, target="vulkan")(a_neg, b_neg)
        (want,) = onnxc.compile(model, target="cpu")(a_neg, b_neg)
        np.testing.assert_array_equal(got, want)


def test_gather_by_index_in_a_reduction_is_not_split() -> None:
    """A reduction whose body reads its reduction position (`linalg.index`: the shape-generic
    broadcast of a MatMul operand, GELU(x) @ W with a dynamic sequence, lowers to a gather in the
    contraction's body) runs one thread per output element, not as a tree: the partial-reduction
    op of the tree split gave each thread's chunk indices from 0 (every element wrong, max abs
    78). Against the CPU target, specialized to a call's shapes."""
    import onnxc
    from onnx import numpy_helper
    from onnxc.targets.vulkan import VulkanOptions
    from test_gpu_vulkan import _vulkan_or_skip

    _vulkan_or_skip()
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Erf", ["x"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("MatMul", ["m", "w"], ["y"]),
    ]
    inits = [numpy_helper.from_array(rng.standard_normal((256, 64)).astype(np.float32), "w"), numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "seq", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "seq", 64])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    x = rng.standard_normal((2, 7, 256)).astype(np.float32)
    want = onnxc.compile(model, target="cpu")(x)[0]
    got = onnxc.compile(model, target="vulkan", options=VulkanOptions(dynamic_shapes="specialize"))(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dims", ["static", "dynamic"])
def test_out_of_range_indices_are_refused_not_clamped(dims: str) -> None:
    """An index out of range (GatherElements with 2 on an axis of 2; a token id past the end of
    an embedding table for Gather) fails the model's run-time check on the CPU before any kernel
    runs (`targets/gpu/checks.py`), with the CPU target's message naming the node; the GPU code
    itself clamps, and gave numbers (found by `fuzz_compile --target vulkan`). In-range calls
    of the same compiled model still match onnx.reference."""
    import onnxc
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    from onnxc.targets.cpu.runtime_checks import RuntimeCheckError
    from test_gpu_vulkan import _vulkan_or_skip

    _vulkan_or_skip()
    def shape(name: str, *d: int) -> list:  # the dims, or a dim_param per dim of this value
        return list(d) if dims == "static" else [f"{name}{i}" for i in range(len(d))]

    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    nodes = [
        helper.make_node("GatherElements", ["data", "indices"], ["picked"], axis=0, name="pick"),
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0, name="embed"),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, shape("data", 2, 3)), helper.make_tensor_value_info("indices", TensorProto.INT64, shape("indices", 2, 3)),
         helper.make_tensor_value_info("ids", TensorProto.INT64, shape("ids", 5))],
        [helper.make_tensor_value_info("picked", TensorProto.FLOAT, shape("picked", 2, 3)), helper.make_tensor_value_info("rows", TensorProto.FLOAT, shape("rows", 5, 3))],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    compiled = onnxc.compile(model, target="vulkan")
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    good = {"data": data, "indices": np.array([[1, 1, 0], [0, -1, 1]], np.int64), "ids": np.array([0, 3, -1, 2, 1], np.int64)}
    bad_index = {**good, "indices": np.array([[1, 2, 0], [2, 0, 0]], np.int64)}
    bad_id = {**good, "ids": np.array([0, 4, 1, 2, 1], np.int64)}
    with pytest.raises(RuntimeCheckError, match=r"GatherElements node 'pick'.*out of range"):
        compiled.run(bad_index)
    with pytest.raises(RuntimeCheckError, match=r"Gather node 'embed'.*out of range"):
        compiled.run(bad_id)
    got = compiled.run(good)
    for name, want in zip(["picked", "rows"], ReferenceEvaluator(model).run(None, good)):
        np.testing.assert_array_equal(got[name], want)
