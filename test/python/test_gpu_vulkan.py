"""The Vulkan target on small ONNX models: numerics against `onnx.reference`, SPIR-V through `spirv-val`.

Runs on any Vulkan device; in CI that is Mesa's lavapipe (a CPU driver), installed with
`spirv-tools` by tools/install_system_deps.sh. When they are missing the tests skip only if this
process could not have installed them (not root); as root a missing driver is a failure, since
the README's test command installs it. The models (`MODELS`) are shared with test_gpu_cuda.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnxc.compiler import lower

IR_VERSION = 10
# The backend suite's default float tolerances (onnx.backend.test: rtol 1e-3, atol 1e-7), with
# atol raised to 1e-5 where an output is a sum of many products (float32 order of summation).
RTOL, ATOL = 1e-3, 1e-5


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    return model


def _f32(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def elementwise_chain() -> onnx.ModelProto:
    """Add -> Mul -> Sigmoid -> Sub -> Relu on a [5, 37] input with a broadcast row: one kernel."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Add", ["x", "c"], ["a"]),
        helper.make_node("Mul", ["a", "x"], ["m"]),
        helper.make_node("Sigmoid", ["m"], ["s"]),
        helper.make_node("Sub", ["s", "c"], ["d"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    return _model(nodes, [_f32("x", [5, 37])], [_f32("y", [5, 37])], [_init(rng, "c", (37,))])


def matmul_add_relu() -> onnx.ModelProto:
    """relu(x @ W + b) with shapes that divide no tile (37x50 @ 50x70)."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    return _model(nodes, [_f32("x", [37, 50])], [_f32("y", [37, 70])], [_init(rng, "W", (50, 70)), _init(rng, "b", (70,))])


def softmax() -> onnx.ModelProto:
    """Softmax over the last axis of [6, 100]: max, exp-sum, divide (reductions + elementwise)."""
    return _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [_f32("x", [6, 100])], [_f32("y", [6, 100])], [])


def reduce_sum() -> onnx.ModelProto:
    """ReduceSum over axis 1 (row sums, keepdims) and over axis 0 (column sums) of [12, 40]."""
    axes1 = numpy_helper.from_array(np.array([1], np.int64), "axes1")
    axes0 = numpy_helper.from_array(np.array([0], np.int64), "axes0")
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes1"], ["rows"], keepdims=1),
        helper.make_node("ReduceSum", ["x", "axes0"], ["cols"], keepdims=0),
    ]
    return _model(nodes, [_f32("x", [12, 40])], [_f32("rows", [12, 1]), _f32("cols", [40])], [axes1, axes0])


def long_rows() -> onnx.ModelProto:
    """ReduceMax and ReduceMean over rows of 1000 (per-workgroup tree reductions on every device
    table) and a Softmax over them."""
    nodes = [  # opset 17: ReduceMax/ReduceMean still take `axes` as an attribute
        helper.make_node("ReduceMax", ["x"], ["mx"], axes=[1], keepdims=0),
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[1], keepdims=1),
        helper.make_node("Softmax", ["x"], ["sm"], axis=1),
    ]
    return _model(nodes, [_f32("x", [3, 1000])], [_f32("mx", [3]), _f32("mean", [3, 1]), _f32("sm", [3, 1000])], [])


def conv_relu() -> onnx.ModelProto:
    """A 3x3 Conv (pads 1, bias) from 3 to 4 channels on 10x10, then Relu."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    return _model(nodes, [_f32("x", [1, 3, 10, 10])], [_f32("y", [1, 4, 10, 10])], [_init(rng, "W", (4, 3, 3, 3)), _init(rng, "B", (4,))])


def conv_tiles() -> onnx.ModelProto:
    """Convolutions on the register-tiled plan (`conv_plan`): a 3x3 conv 8->16 on 14x14 (a width
    with power-of-two tiles), a depthwise stride-2 conv after it (width 7: no power-of-two
    tile), a dilated conv, and a batch of two images (three long output loops beside the batch:
    the one-output-per-thread plan)."""
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "D", "DB"], ["dw"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=16),
        helper.make_node("Conv", ["x", "L"], ["dil"], kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2]),
        helper.make_node("Conv", ["xb", "Q"], ["batch"], kernel_shape=[3, 3]),
    ]
    inits = [_init(rng, "W", (16, 8, 3, 3)), _init(rng, "D", (16, 1, 3, 3)), _init(rng, "DB", (16,)), _init(rng, "L", (8, 8, 3, 3)), _init(rng, "Q", (8, 4, 3, 3))]
    ins = [_f32("x", [1, 8, 14, 14]), _f32("xb", [2, 4, 6, 6])]
    outs = [_f32("dw", [1, 16, 7, 7]), _f32("dil", [1, 8, 14, 14]), _f32("batch", [2, 8, 4, 4])]
    return _model(nodes, ins, outs, inits)


def gelu_erf() -> onnx.ModelProto:
    """GELU as torch exports it before opset 20: x * 0.5 * (1 + Erf(x / sqrt(2))) (math.erf has
    no GPU instruction: the targets expand it to a polynomial)."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("r2", 2**0.5), ("one", 1.0), ("half", 0.5))]
    nodes = [
        helper.make_node("Div", ["x", "r2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    return _model(nodes, [_f32("x", [4, 50])], [_f32("y", [4, 50])], consts)


def gather_argmax() -> onnx.ModelProto:
    """An embedding lookup (Gather with i64 indices given as an input) and an ArgMax (i64 result):
    64-bit index buffers."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Gather", ["W", "ids"], ["g"], axis=0),
        helper.make_node("Relu", ["g"], ["emb"]),
        helper.make_node("ArgMax", ["g"], ["best"], axis=1, keepdims=0),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [6])],
        [_f32("emb", [6, 16]), helper.make_tensor_value_info("best", TensorProto.INT64, [6])],
        [_init(rng, "W", (50, 16))],
    )


def driver_mlp() -> onnx.ModelProto:
    """test_driver's MLP: y = relu(x @ W + b), z = y * 2 (two outputs)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "B")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "B"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["y"]),
        helper.make_node("Mul", ["y", "two"], ["z"]),
    ]
    return _model(nodes, [_f32("x", [2, 4])], [_f32("y", [2, 3]), _f32("z", [2, 3])], [w, b, two])


def matmul_partial_k() -> onnx.ModelProto:
    """A MatMul whose K (83) is no multiple of any device's K-step and whose M and N (45, 39)
    leave partial workgroup tiles, both operands graph inputs: the workgroup-memory promotion's
    last K-step and edge tiles copy and read only the valid part of their buffers."""
    return _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [_f32("a", [45, 83]), _f32("b", [83, 39])], [_f32("y", [45, 39])], [])


def batch_matmul() -> onnx.ModelProto:
    """A batched MatMul [3, 21, 40] @ [3, 40, 35] (linalg.batch_matmul: one workgroup per batch
    element along z, promoted A and B slices with a unit batch dim) plus a 4-D one
    [2, 2, 9, 20] @ [2, 2, 20, 11] and a K smaller than every K-step (5)."""
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["y"]),
        helper.make_node("MatMul", ["c", "d"], ["z"]),
        helper.make_node("MatMul", ["e", "f"], ["w"]),
    ]
    return _model(
        nodes,
        [_f32("a", [3, 21, 40]), _f32("b", [3, 40, 35]), _f32("c", [2, 2, 9, 20]), _f32("d", [2, 2, 20, 11]), _f32("e", [17, 5]), _f32("f", [5, 33])],
        [_f32("y", [3, 21, 35]), _f32("z", [2, 2, 9, 11]), _f32("w", [17, 33])],
        [],
    )


def mod_float() -> onnx.ModelProto:
    """Mod with fmod=1 (C's fmod) and fmod=0 (numpy's mod: the divisor's sign) on [6, 40]:
    kernels with the exact fmod loop of `mapping._exact_remf`."""
    nodes = [
        helper.make_node("Mod", ["a", "b"], ["f"], fmod=1),
        helper.make_node("Mod", ["a", "b"], ["m"], fmod=0),
    ]
    return _model(nodes, [_f32("a", [6, 40]), _f32("b", [6, 40])], [_f32("f", [6, 40]), _f32("m", [6, 40])], [])


#: Name -> builder; no model's graph inputs have initializer defaults.
def f16_block() -> onnx.ModelProto:
    """A float16 transformer-ish block: x @ W + b, Softmax, LayerNormalization (its statistics
    in f32, the spec's default stash type), GELU by Erf, and a 3x3 Conv in f16 beside it: f16
    buffers and arithmetic (shaderFloat16, storageBuffer16BitAccess)."""
    rng = np.random.default_rng(7)
    h = TensorProto.FLOAT16

    def init16(name: str, shape: tuple[int, ...], scale: float = 0.3) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float16), name)

    consts = [numpy_helper.from_array(np.array(v, np.float16), n) for n, v in (("r2", 2**0.5), ("one", 1.0), ("half", 0.5))]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Softmax", ["a"], ["s"], axis=-1),
        helper.make_node("LayerNormalization", ["a", "g", "beta"], ["n"], axis=-1),
        helper.make_node("Div", ["n", "r2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["n", "e1"], ["ge"]),
        helper.make_node("Mul", ["ge", "half"], ["y"]),
        helper.make_node("Conv", ["img", "K"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    inits = [init16("W", (48, 40)), init16("b", (40,)), init16("g", (40,), 1.0), init16("beta", (40,)), init16("K", (4, 3, 3, 3)), *consts]
    ins = [helper.make_tensor_value_info("x", h, [6, 48]), helper.make_tensor_value_info("img", h, [1, 3, 9, 9])]
    outs = [helper.make_tensor_value_info(n, h, shape) for n, shape in (("s", [6, 40]), ("y", [6, 40]), ("c", [1, 4, 9, 9]))]
    return _model(nodes, ins, outs, inits)


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "elementwise_chain": elementwise_chain,
    "matmul_add_relu": matmul_add_relu,
    "softmax": softmax,
    "reduce_sum": reduce_sum,
    "long_rows": long_rows,
    "conv_relu": conv_relu,
    "conv_tiles": conv_tiles,
    "driver_mlp": driver_mlp,
    "gelu_erf": gelu_erf,
    "gather_argmax": gather_argmax,
    "matmul_partial_k": matmul_partial_k,
    "batch_matmul": batch_matmul,
    "mod_float": mod_float,
    "f16_block": f16_block,
}

#: Tolerances of the f16 models against onnx.reference: 4 f16 ulps at 1 (an ulp is 2^-10
#: relative), since the reference rounds each op's result to f16 at other points than the fused
#: kernels do (f16_block: 2 ulps at most on Vulkan and on the CPU target alike).
F16_RTOL, F16_ATOL = 4e-3, 4e-3


def feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for the graph inputs that are not initializers: standard-normal float32 (or
    float16 where the input is), or int64 indices valid for axis 0 of every initializer (Gather's table)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    rows = min((t.dims[0] for t in model.graph.initializer if t.dims), default=1)
    out = {}
    for v in model.graph.input:
        if v.name not in inits:
            shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
            if v.type.tensor_type.elem_type == TensorProto.INT64:
                out[v.name] = rng.integers(0, rows, shape).astype(np.int64)
            elif v.type.tensor_type.elem_type == TensorProto.FLOAT16:
                out[v.name] = rng.standard_normal(shape).astype(np.float16)
            else:
                out[v.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def check_against_reference(compiled, model: onnx.ModelProto, name: str) -> None:
    """`compiled` (an `onnxc.compile` result for any target) on `feeds(model)` against
    onnx.reference, output by output, at RTOL/ATOL."""
    x = feeds(model)
    want = ReferenceEvaluator(model).run(None, x)
    got = compiled(**x)
    assert len(got) == len(want)
    for g, w, out in zip(got, want, model.graph.output):
        assert g.shape == w.shape and g.dtype == w.dtype, out.name
        rtol, atol = (F16_RTOL, F16_ATOL) if w.dtype == np.float16 else (RTOL, ATOL)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, err_msg=f"{name}: output {out.name}")


def _vulkan_or_skip() -> None:
    """Skip (not root: nothing could install the driver) or fail (root: it should be there)."""
    from onnxc.targets.vulkan import VulkanUnavailable, vulkan_context

    try:
        vulkan_context()
    except VulkanUnavailable as e:
        if os.geteuid() != 0:
            pytest.skip(f"no Vulkan device and not root, so tools/install_system_deps.sh could not install Mesa's lavapipe: {e}")
        pytest.fail(f"no Vulkan device although running as root: run tools/install_system_deps.sh and install onnxc[gpu] ({e})")


@pytest.fixture(scope="module")
def vulkan() -> None:
    _vulkan_or_skip()


@pytest.fixture(scope="module")
def spirv_val() -> str:
    tool = shutil.which("spirv-val")
    if tool is None:
        if os.geteuid() != 0:
            pytest.skip("spirv-val (Debian spirv-tools) is missing and not root, so tools/install_system_deps.sh could not install it")
        pytest.fail("spirv-val is missing although running as root: run tools/install_system_deps.sh")
    return tool


def _compile(model: onnx.ModelProto):  # -> VulkanFunction
    from onnxc.targets.vulkan import compile_module

    return compile_module(lower(model, "linalg"))


@pytest.mark.parametrize("device", ["auto", "vulkan"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_vulkan_matches_reference(name: str, device: str, vulkan: None, spirv_val: str, tmp_path) -> None:
    """`onnxc.compile(model, target="vulkan")` end to end, against onnx.reference, with the tile
    sizes this device gets by default (`auto`: `vulkan_cpu` on lavapipe, no promotion, 4x4
    register tiles) and with a GPU's (`vulkan`: contraction operands promoted to workgroup
    memory, as on CUDA)."""
    import onnxc
    from onnxc.targets.vulkan import VulkanOptions

    model = MODELS[name]()
    compiled = onnxc.compile(model, target="vulkan", options=VulkanOptions(device=device))
    fn = compiled.function
    check_against_reference(compiled, model, name)
    # Every kernel module is valid SPIR-V for Vulkan 1.1 (the version the runtime asks for).
    assert fn.spirv
    for kernel, words in fn.spirv.items():
        path = tmp_path / f"{kernel}.spv"
        path.write_bytes(words)
        r = subprocess.run([spirv_val, "--target-env", "vulkan1.1", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, f"{name}/{kernel}: spirv-val: {r.stdout}{r.stderr}"


def test_conv_plan_tiles_divide_the_loops() -> None:
    """The register-tiled convolution plans of ResNet-50's and MobileNetV2's shapes on the CPU
    driver's table: each thread's tile (block / threads) is more than one output, divides its
    loop, is at most twice the table's conv thread tile on a side, and the workgroup fits the
    device; a batch beside three long output loops, pooling (no channel loop) and the GPU
    tables (one output per thread, measured faster on an H200) get none."""
    from onnxc.targets.gpu.device import device_for
    from onnxc.targets.gpu.mapping import conv_plan

    dev = device_for("vulkan_cpu")
    iters = ["parallel"] * 4 + ["reduction"] * 3
    image, channels = (1, 2), (3,)
    for hw, cout in ((112, 64), (56, 64), (56, 256), (28, 128), (14, 256), (7, 512), (7, 2048), (10, 4)):
        extents = [1, hw, hw, cout, 3, 3, 64]
        plan = conv_plan(extents, iters, image, channels, dev)
        assert plan is not None, (hw, cout)
        tiles = {d: plan.block_tiles[d] // plan.threads[d] for d in (2, 3)}
        assert tiles[2] * tiles[3] > 1
        for d, t in zip((2, 3), dev.conv_thread_tile):
            assert extents[d] % plan.block_tiles[d] == 0 and plan.block_tiles[d] % plan.threads[d] == 0
            assert 1 <= tiles[d] <= 2 * t
        assert plan.block_tiles[1] == plan.threads[1] and extents[1] % plan.block_tiles[1] == 0  # height: one row each
        assert plan.workgroup_size <= dev.max_workgroup_size
    assert conv_plan([2, 7, 7, 512, 3, 3, 64], iters, image, channels, dev) is None  # batch of 2
    assert conv_plan([1, 7, 7, 64, 3, 3], ["parallel"] * 4 + ["reduction"] * 2, image, (), dev) is None  # pooling
    for gpu in ("vulkan", "sm_80", "sm_90"):
        assert conv_plan([1, 56, 56, 64, 3, 3, 64], iters, image, channels, device_for(gpu)) is None


def test_step_times_time_every_step_and_name_its_node(vulkan: None) -> None:
    """`VulkanProgram.step_times`: one non-negative, finite time per step of the program (device
    timestamps between steps), and each launch names the ONNX node it computes (what
    `bench/gpu_models.py --kernels` prints)."""
    from onnxc.targets.gpu.host import Launch

    model = conv_relu()
    fn = _compile(model)
    x = feeds(model)
    times = fn.program.step_times(*fn.signature.validate([x["x"]]), repeat=2)
    steps = fn.program.program.steps
    assert len(times) == len(steps) and all(np.isfinite(t) and t >= 0 for t in times)
    nodes = {s.node for s in steps if isinstance(s, Launch)}
    assert any(n.endswith("(Conv)") for n in nodes), nodes
    # The program still computes the right thing after being timed.
    check_against_reference(lambda **kw: fn(kw["x"]), model, "conv_relu")


def test_elementwise_chain_is_one_kernel(vulkan: None) -> None:
    """Fusion: five elementwise ops make one kernel (intermediates never reach memory)."""
    assert len(_compile(elementwise_chain()).spirv) == 1


def test_a_copy_of_a_view_onto_itself_is_dropped() -> None:
    """Bufferization of a padded convolution's input (written into the interior of a
    zero-filled buffer) leaves a host copy of that interior onto itself, which became a copy
    kernel of its own per padded Conv. `_host_copies_to_kernels` drops such a copy (same buffer,
    same static view) and still turns a copy between two different views into a kernel."""
    from mlir import ir

    from onnxc.targets.gpu import device_for
    from onnxc.targets.gpu.mapping import _host_copies_to_kernels

    text = """
    func.func @f(%arg0: memref<4x6xf32>) -> memref<4x6xf32> {
      %a = memref.alloc() : memref<4x6xf32>
      %v1 = memref.subview %a[1, 1] [2, 3] [1, 1] : memref<4x6xf32> to memref<2x3xf32, strided<[6, 1], offset: 7>>
      %v2 = memref.subview %a[1, 1] [2, 3] [1, 1] : memref<4x6xf32> to memref<2x3xf32, strided<[6, 1], offset: 7>>
      memref.copy %v1, %v2 : memref<2x3xf32, strided<[6, 1], offset: 7>> to memref<2x3xf32, strided<[6, 1], offset: 7>>
      %w = memref.subview %arg0[0, 0] [2, 3] [1, 1] : memref<4x6xf32> to memref<2x3xf32, strided<[6, 1]>>
      memref.copy %w, %v1 : memref<2x3xf32, strided<[6, 1]>> to memref<2x3xf32, strided<[6, 1], offset: 7>>
      return %a : memref<4x6xf32>
    }
    """
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert _host_copies_to_kernels(module, device_for("vulkan")) == 1  # the real copy only
        printed = str(module)
    assert "memref.copy" not in printed and printed.count("linalg.copy") == 1, printed


def test_long_rows_use_workgroup_memory(vulkan: None) -> None:
    """Rows of 1000 are reduced by a workgroup each (a Workgroup-class SPIR-V variable holds
    the partial results), not by one thread per row."""
    from onnxc.targets.gpu import device_for, map_to_gpu
    from onnxc.targets.vulkan import lower_to_spirv

    module = lower(long_rows(), "linalg")
    map_to_gpu(module, device_for("vulkan"))
    lower_to_spirv(module, serialize=False)
    assert "Workgroup>" in str(module)


def test_program_runs_twice_with_new_inputs(vulkan: None) -> None:
    """Buffers are reused across calls: the second call sees its own inputs, not the first's."""
    model = matmul_add_relu()
    fn = _compile(model)
    ref = ReferenceEvaluator(model)
    for seed in (1, 2):
        x = feeds(model, seed)
        np.testing.assert_allclose(fn(*x.values())[0], ref.run(None, x)[0], rtol=RTOL, atol=ATOL)


def test_bad_argument_is_refused_before_the_device(vulkan: None) -> None:
    from onnxc.targets.cpu.abi import ArgumentError

    fn = _compile(softmax())
    with pytest.raises(ArgumentError, match="dim 1 must be 100"):
        fn(np.zeros((6, 99), np.float32))


def test_bool_buffers_and_ieee_specials(vulkan: None) -> None:
    """Bool buffers (i1, held as bytes: SPIR-V addresses them as i32 words, so buffers are
    rounded up to whole words) between kernels and at the boundary, at a size that is no
    multiple of 4; IsNaN/IsInf/Less at infinities and NaN (the kernels ask for IEEE specials:
    SignedZeroInfNanPreserve, without which lavapipe said IsNaN(inf) is true). Against numpy."""
    import onnxc

    b7 = lambda n: helper.make_tensor_value_info(n, TensorProto.BOOL, [7])  # noqa: E731
    nodes = [
        helper.make_node("IsNaN", ["x"], ["nan"]),
        helper.make_node("IsInf", ["x"], ["pinf"], detect_negative=0),
        helper.make_node("Less", ["x", "y"], ["less"]),
        helper.make_node("Not", ["m"], ["notm"]),
        helper.make_node("And", ["less", "notm"], ["both"]),
        helper.make_node("Where", ["both", "x", "y"], ["pick"]),
    ]
    model = _model(nodes, [_f32("x", [7]), _f32("y", [7]), b7("m")], [b7("nan"), b7("pinf"), b7("notm"), b7("both"), _f32("pick", [7])], [])
    x = np.array([-1.5, np.nan, np.inf, 2.0, -np.inf, np.inf, 0.0], np.float32)
    y = np.array([0.0, 1.0, np.inf, np.nan, 0.0, 1.0, -0.0], np.float32)
    m = np.array([False, True, False, False, True, False, False])
    nan, pinf, notm, both, pick = onnxc.compile(model, target="vulkan")(x, y, m)
    with np.errstate(invalid="ignore"):
        less = x < y
    np.testing.assert_array_equal(nan, np.isnan(x))
    np.testing.assert_array_equal(pinf, np.isposinf(x))
    np.testing.assert_array_equal(notm, ~m)
    np.testing.assert_array_equal(both, less & ~m)
    np.testing.assert_array_equal(pick, np.where(less & ~m, x, y))


def _dynamic_model() -> onnx.ModelProto:
    """softmax(relu(x) @ W) with a dynamic batch N: x [N, 4] -> [N, 3]."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu0"),
        helper.make_node("MatMul", ["r", "w"], ["m"], name="matmul0"),
        helper.make_node("Softmax", ["m"], ["y"], name="softmax0", axis=-1),
    ]
    return _model(nodes, [_f32("x", ["N", 4])], [_f32("y", ["N", 3])], [_init(rng, "w", (4, 3))])


def test_dynamic_shapes_run_per_call_shape(vulkan: None) -> None:
    """By default (`dynamic_shapes="specialize"`) a dynamic batch runs: each call's shapes are
    made static in a copy of the module, which is compiled once per distinct shape
    (targets/gpu/specialize.py); every size is checked against onnx.reference, and a size seen
    before reuses its program."""
    import onnxc
    model = _dynamic_model()
    compiled = onnxc.compile(model, target="vulkan")
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(0)
    for n in (3, 7, 3, 1):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        got = compiled(x)[0]
        assert got.shape == (n, 3)
        np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)
    assert compiled.function.specializations == 3


@pytest.mark.parametrize("target", ["vulkan", "cuda"])
def test_dynamic_shapes_are_refused_when_asked_naming_the_node(target: str) -> None:
    """With `dynamic_shapes="refuse"` (one ahead-of-time program or none), a dynamic dim is
    refused before any kernel runs, with the ONNX node's name (the op's location) in the message."""
    import onnxc
    from onnxc.targets.cuda import CudaOptions
    from onnxc.targets.gpu import GpuMappingError
    from onnxc.targets.vulkan import VulkanOptions

    options = VulkanOptions(dynamic_shapes="refuse") if target == "vulkan" else CudaOptions(dynamic_shapes="refuse")
    with pytest.raises(GpuMappingError, match=r"relu0.*dynamic shape"):
        onnxc.compile(_dynamic_model(), target=target, options=options)


@pytest.mark.parametrize("target", ["vulkan", "cuda"])
def test_dynamic_shapes_in_a_stage_are_refused_naming_the_node(target: str) -> None:
    """The `gpu` stage (`--emit gpu`, onnx-opt) has no call to take shapes from: a dynamic
    shape there is refused with the ONNX node's name, never a crash."""
    from onnxc.targets.gpu import GpuMappingError

    with pytest.raises(GpuMappingError, match=r"relu0.*dynamic shape"):
        lower(_dynamic_model(), "gpu", target=target)


def test_reductions_to_a_scalar(vulkan: None) -> None:
    """ReduceSum over every axis and a 1-D dot product (no parallel loop) run as one workgroup."""
    import onnxc

    model = _model(
        [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0), helper.make_node("MatMul", ["v", "v"], ["dot"])],
        [_f32("x", [7, 300]), _f32("v", [500])], [_f32("total", []), _f32("dot", [])], [],
    )
    x = feeds(model)
    got = onnxc.compile(model, target="vulkan")(**x)
    for g, w in zip(got, ReferenceEvaluator(model).run(None, x)):
        assert g.shape == w.shape == ()
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=1e-4)


def test_empty_tensors(vulkan: None) -> None:
    """A reduction over an empty axis gives its neutral value and an elementwise op on an empty
    tensor an empty result (tiling an empty loop would abort the process in MLIR)."""
    import onnxc

    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    model = _model(
        [helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1), helper.make_node("Relu", ["x"], ["r"])],
        [_f32("x", [0, 4])], [_f32("s", [1, 4]), _f32("r", [0, 4])], [axes],
    )
    s, r = onnxc.compile(model, target="vulkan")(np.zeros((0, 4), np.float32))
    np.testing.assert_array_equal(s, np.zeros((1, 4), np.float32))
    assert r.shape == (0, 4)


def test_bad_options_are_refused() -> None:
    import onnxc
    from onnxc.targets.base import TargetError
    from onnxc.targets.gpu import GpuDeviceError
    from onnxc.targets.vulkan import VulkanLoweringError, VulkanOptions

    with pytest.raises(VulkanLoweringError, match="spirv_version"):
        VulkanOptions(spirv_version="2.0").validate()
    with pytest.raises(GpuDeviceError, match="unknown GPU device 'tpu'"):
        VulkanOptions(device="tpu").validate()
    with pytest.raises(TargetError, match="vulkan option: unknown GPU device 'tpu'"):
        onnxc.compile(driver_mlp(), target="vulkan", options=VulkanOptions(device="tpu"))


def test_stages_are_pipeline_text() -> None:
    """The target's stages are registered passes: `lower(..., stage)` and onnx-opt run the same text."""
    from onnxc.targets import get_target

    target = get_target("vulkan")
    assert target.pipeline(None) == (
        "onnxc-approximate-math{functions={erf,erfc}},gpu-map{device=vulkan},gpu-to-spirv{spirv-version=v1.0 narrow-integers=true},spirv-serialize"
    )
    assert "gpu.launch_func" in str(lower(driver_mlp(), "gpu", target="vulkan"))
    spirv = str(lower(driver_mlp(), "spirv", target="vulkan"))
    assert "spirv.module" in spirv and "gpu.binary" not in spirv


def test_mod_is_exact_at_the_edges(vulkan: None) -> None:
    """fmod/mod with infinite, zero and NaN operands and quotients beyond 2^24 give what numpy
    gives (a GPU frem computed as a - b * trunc(a / b) gave NaN for fmod(-3, inf) and a wrong
    remainder for 1e10 mod 3.1)."""
    import onnxc

    a = np.array([0, -0.0, -3, 3, -1, 1, np.inf, -np.inf, 1, 1, np.nan, 1, 1e10, -7.5e30, 5.5, -5.5], np.float32)
    b = np.array([-2, 2, np.inf, np.inf, -np.inf, -np.inf, 2, 2, 0, -0.0, 2, np.nan, 3.1, 1.3e-3, -2, 2], np.float32)
    model = _model(
        [helper.make_node("Mod", ["a", "b"], ["f"], fmod=1), helper.make_node("Mod", ["a", "b"], ["m"], fmod=0)],
        [_f32("a", [16]), _f32("b", [16])], [_f32("f", [16]), _f32("m", [16])], [],
    )
    f, m = onnxc.compile(model, target="vulkan")(a, b)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(f, np.fmod(a, b))
        np.testing.assert_array_equal(m, np.mod(a, b))


def test_scalar_slice_reads_its_element(vulkan: None) -> None:
    """A rank-reducing slice to a scalar (x[1, 3] as tensor<f32>) read by a kernel: as a rank-0
    view at an offset it read x[0, 0] in SPIR-V (a wrong answer, now refused by host.py); the
    mapping copies the unreduced [1, 1] slice with a kernel instead."""
    from mlir import ir

    from onnxc.targets.vulkan import compile_module

    src = """
    func.func @r0(%x: tensor<2x5xf32>, %y: tensor<5xf32>) -> tensor<5xf32> {
      %s = tensor.extract_slice %x[1, 3] [1, 1] [1, 1] : tensor<2x5xf32> to tensor<f32>
      %e = tensor.empty() : tensor<5xf32>
      %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> ()>, affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}
          ins(%y, %s : tensor<5xf32>, tensor<f32>) outs(%e : tensor<5xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32):
        %t = arith.addf %a, %b : f32
        linalg.yield %t : f32
      } -> tensor<5xf32>
      return %r : tensor<5xf32>
    }
    """
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    y = np.linspace(-1, 1, 5).astype(np.float32)
    with ir.Context():
        got = compile_module(ir.Module.parse(src))(x, y)[0]
    np.testing.assert_array_equal(got, y + x[1, 3])


def _quantized_block() -> onnx.ModelProto:
    """uint8 in, int8 weights: DequantizeLinear, MatMul, QuantizeLinear back to uint8, an int16
    Add beside it, and a bool mask from the uint8 data (Greater + Where)."""
    rng = np.random.default_rng(11)
    u8, i8, i16 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT16
    inits = [
        numpy_helper.from_array(rng.integers(-100, 100, (16, 8)).astype(np.int8), "w"),
        numpy_helper.from_array(np.array(0.02, np.float32), "xs"), numpy_helper.from_array(np.array(128, np.uint8), "xz"),
        numpy_helper.from_array(np.array(0.01, np.float32), "ws"), numpy_helper.from_array(np.array(0, np.int8), "wz"),
        numpy_helper.from_array(np.array(0.5, np.float32), "ys"), numpy_helper.from_array(np.array(100, np.uint8), "yz"),
        numpy_helper.from_array(np.array(200, np.uint8), "t"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
        helper.make_node("MatMul", ["xf", "wf"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Greater", ["x", "t"], ["mask"]),
        helper.make_node("Where", ["mask", "x", "t"], ["clipped"]),
    ]
    ins = [helper.make_tensor_value_info("x", u8, [4, 16]), helper.make_tensor_value_info("a", i16, [4, 16]), helper.make_tensor_value_info("b", i16, [16])]
    outs = [helper.make_tensor_value_info("y", u8, [4, 8]), helper.make_tensor_value_info("s", i16, [4, 16]), helper.make_tensor_value_info("clipped", u8, [4, 16])]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, outs, inits), opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_narrow_integers_run_and_can_be_turned_off(vulkan: None) -> None:
    """int8/uint8/int16 tensors run natively (Int8, Int16, StorageBuffer8BitAccess), exactly as
    onnx.reference computes them (a quantized MatMul, an int16 Add with wrap-around, a uint8
    Where through a bool mask). With `narrow_integers=False`, what a device without 8-bit
    storage gets, the same model is refused naming the element type, and bool buffers still run
    (through the 32-bit-word emulation)."""
    import onnxc
    from onnxc.targets.vulkan import VulkanOptions
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(12)
    model = _quantized_block()
    feeds = {
        "x": rng.integers(0, 256, (4, 16)).astype(np.uint8),
        "a": rng.integers(-32768, 32767, (4, 16)).astype(np.int16),
        "b": rng.integers(-32768, 32767, (16,)).astype(np.int16),
    }
    want = ReferenceEvaluator(model).run(None, feeds)
    got = onnxc.compile(model, target="vulkan")(**feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    with pytest.raises(onnxc.errors.OnnxcError, match="element type i8"):
        onnxc.compile(model, target="vulkan", options=VulkanOptions(narrow_integers=False))
    mask_model = _model(
        [helper.make_node("Greater", ["x", "zero"], ["m"]), helper.make_node("Not", ["m"], ["y"])],
        [_f32("x", [37])], [helper.make_tensor_value_info("y", TensorProto.BOOL, [37])],
        [numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )
    x = rng.standard_normal(37).astype(np.float32)
    for narrow in (True, False):
        (y,) = onnxc.compile(mask_model, target="vulkan", options=VulkanOptions(narrow_integers=narrow))(x)
        np.testing.assert_array_equal(y, ~(x > 0))
