"""Channels-last convolution: numerics of CNN blocks end to end, layout, folding and tile plans.

The blocks are the patterns real CNNs are made of (ResNet basic and bottleneck blocks with
BatchNormalization, a MobileNet depthwise-separable block with Clip, grouped and dilated
convolutions, a stem with MaxPool and global pooling, dynamic batch, weights given at run time),
built with onnx.helper and random weights, compiled by `onnxc.compile` (so through
`onnx-fold-conv-bn`, the NHWC lowering, `layout-propagation` and the vectorizing CPU plan), and
compared with `onnx.reference.ReferenceEvaluator` at the ONNX backend tests' relative tolerance
(1e-3). The absolute tolerance is 1e-5 rather than the backend's 1e-7: these outputs sum hundreds
of products of O(1) values, so outputs that cancel to near zero carry float32 rounding of about
1e-6 in any summation order (the reference's own order included).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.compiler import lower
from onnxc.targets.cpu.conv_plan import plan_conv
from onnxc.targets.cpu.isa import KNOWN_CPUS

RNG = np.random.default_rng(7)
RTOL, ATOL = 1e-3, 1e-5


def _r(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


class Graph:
    """A small builder: nodes and initializers named in order."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.count = 0

    def _name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value: np.ndarray) -> str:
        name = self._name("c")
        self.inits[name] = value
        return name

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, bias: bool = True, group: int = 1, **attrs: Any) -> str:
        w = self.const(_r(cout, cin // group, k, k, lo=-0.5, hi=0.5))
        ins = [x, w] + ([self.const(_r(cout))] if bias else [])
        return self.op("Conv", ins, group=group, **attrs)

    def bn(self, x: str, c: int) -> str:
        params = [_r(c, lo=0.5, hi=1.5), _r(c), _r(c), _r(c, lo=0.5, hi=2.0)]
        return self.op("BatchNormalization", [x] + [self.const(p) for p in params], epsilon=1e-5)

    def model(self, x_dims: list[Any], out: str, extra_inputs: list[tuple[str, list[Any]]] = ()) -> onnx.ModelProto:  # type: ignore[assignment]
        self.nodes.append(helper.make_node("Identity", [out], ["y"]))
        inputs = [helper.make_tensor_value_info("x", TP.FLOAT, x_dims)]
        inputs += [helper.make_tensor_value_info(n, TP.FLOAT, d) for n, d in extra_inputs]
        g = helper.make_graph(
            self.nodes, "g", inputs, [helper.make_tensor_value_info("y", TP.FLOAT, None)],
            initializer=[nh.from_array(v, k) for k, v in self.inits.items()],
        )
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    got = onnxc.compile(model)(**feeds)[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def _ir(model: onnx.ModelProto, stage: str) -> str:
    """The model's IR after `stage` ('onnx': after the ONNX-level passes, 'linalg', 'vector')."""
    return str(lower(model, stage))


def _basic_block(c: int) -> tuple[Graph, str]:
    g = Graph()
    y = g.op("Relu", [g.bn(g.conv("x", c, c, 3, bias=False, pads=[1, 1, 1, 1]), c)])
    y = g.bn(g.conv(y, c, c, 3, bias=False, pads=[1, 1, 1, 1]), c)
    return g, g.op("Relu", [g.op("Add", [y, "x"])])


def test_resnet_basic_block_runs_nhwc_end_to_end() -> None:
    """conv-BN-relu-conv-BN-add-relu on odd spatial sizes: right values, BN folded, and the
    linalg IR holds exactly the two boundary transposes."""
    g, out = _basic_block(8)
    model = g.model([1, 8, 9, 9], out)
    _check(model, {"x": _r(1, 8, 9, 9)})
    assert "onnx.batch_normalization" not in _ir(model, "onnx")
    linalg_ir = _ir(model, "linalg")
    assert linalg_ir.count("linalg.conv_2d_nhwc_hwcf") == 2
    assert linalg_ir.count("linalg.transpose") == 2
    # The CPU plan vectorizes both convolutions (none is left as a linalg op to become loops).
    assert "linalg.conv" not in _ir(model, "vector")


def test_resnet_bottleneck_stride2_projection() -> None:
    """1x1 (as matmul) -> 3x3/2 -> 1x1 with a strided 1x1 projection shortcut, BN everywhere."""
    g = Graph()
    y = g.op("Relu", [g.bn(g.conv("x", 16, 8, 1, bias=False), 8)])
    y = g.op("Relu", [g.bn(g.conv(y, 8, 8, 3, bias=False, pads=[1, 1, 1, 1], strides=[2, 2]), 8)])
    y = g.bn(g.conv(y, 8, 32, 1, bias=False), 32)
    s = g.bn(g.conv("x", 16, 32, 1, bias=False, strides=[2, 2]), 32)
    out = g.op("Relu", [g.op("Add", [y, s])])
    model = g.model([2, 16, 11, 11], out)
    _check(model, {"x": _r(2, 16, 11, 11)})


def test_one_by_one_as_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    """With `ONE_BY_ONE_AS_MATMUL`, unpadded 1x1 convolutions (strided ones too) are matmuls over
    the pixels and still right."""
    from onnxc.transforms.lowering import conv

    monkeypatch.setattr(conv, "ONE_BY_ONE_AS_MATMUL", True)
    g = Graph()
    y = g.op("Relu", [g.bn(g.conv("x", 16, 8, 1, bias=False), 8)])
    out = g.op("Add", [g.conv(y, 8, 12, 1), g.conv(y, 8, 12, 1, bias=False)])
    model = g.model(["N", 16, 11, 11], out)
    _check(model, {"x": _r(2, 16, 11, 11)})
    assert _ir(model, "linalg").count("linalg.matmul") == 3
    g2 = Graph()
    model2 = g2.model([1, 16, 11, 11], g2.conv("x", 16, 12, 1, strides=[2, 2]))
    _check(model2, {"x": _r(1, 16, 11, 11)})
    assert "linalg.matmul" in _ir(model2, "linalg")


@pytest.mark.parametrize("strides", [[2, 2], [3, 2]])
def test_strided_pointwise_reads_a_compact_copy(strides: list[int]) -> None:
    """A strided 1x1 convolution becomes a copy of the pixels it reads and a stride-1
    convolution of it (`conv_filters.subsample_strided_pointwise`), and is still right (odd
    sizes: the last row and column are read or skipped as the stride says)."""
    g = Graph()
    model = g.model([1, 16, 11, 13], g.op("Relu", [g.conv("x", 16, 24, 1, strides=strides)]))
    _check(model, {"x": _r(1, 16, 11, 13)})
    from onnxc.targets.cpu import conv_filters

    module = lower(model, "linalg")
    with module.context:
        assert conv_filters.subsample_strided_pointwise(module) == 1
    text = str(module)
    assert "linalg.copy" in text and "strides = dense<1> : tensor<2xi64>" in text, text


@pytest.mark.parametrize("stride", [1, 2])
def test_mobilenet_depthwise_separable_block(stride: int) -> None:
    """1x1 expand -> depthwise 3x3 -> 1x1 project, Clip(0, 6) activations, residual at stride 1."""
    g = Graph()
    lo, hi = g.const(np.array(0.0, np.float32)), g.const(np.array(6.0, np.float32))
    y = g.op("Clip", [g.bn(g.conv("x", 8, 24, 1), 24), lo, hi])
    y = g.op("Clip", [g.bn(g.conv(y, 24, 24, 3, group=24, pads=[1, 1, 1, 1], strides=[stride, stride]), 24), lo, hi])
    y = g.bn(g.conv(y, 24, 8, 1), 8)
    if stride == 1:
        y = g.op("Add", [y, "x"])
    model = g.model([1, 8, 10, 10], y)
    _check(model, {"x": _r(1, 8, 10, 10)})
    assert "linalg.depthwise_conv_2d_nhwc_hwc " in _ir(model, "linalg")
    assert "linalg.depthwise" not in _ir(model, "vector")


@pytest.mark.parametrize(
    "cin,cout,k,attrs",
    [
        (6, 12, 3, {"group": 6}),  # depthwise with channel multiplier 2 (HWCM)
        (8, 12, 3, {"group": 4, "pads": [1, 0, 2, 1]}),  # grouped, asymmetric pads
        (4, 6, 3, {"group": 2, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),  # grouped, dilated
        (3, 8, 7, {"strides": [2, 2], "pads": [3, 3, 3, 3]}),  # ResNet stem 7x7/2
        (5, 7, 3, {"dilations": [1, 2], "strides": [2, 1], "auto_pad": "SAME_UPPER"}),
        (4, 4, 1, {"pads": [1, 1, 1, 1]}),  # padded 1x1: a direct convolution, not a matmul
    ],
    ids=["depthwise-x2", "group4-pads", "group2-dilated", "stem-7x7-s2", "same-upper", "1x1-padded"],
)
def test_conv_variants(cin: int, cout: int, k: int, attrs: dict[str, Any]) -> None:
    g = Graph()
    out = g.op("Relu", [g.conv("x", cin, cout, k, **attrs)])
    _check(g.model([1, cin, 13, 11], out), {"x": _r(1, cin, 13, 11)})


@pytest.mark.parametrize("batch", [1, "n"])
def test_grouped_pointwise_as_batch_matmul(batch: int | str) -> None:
    """ShuffleNet's grouped 1x1 convolution (4 groups of 28 -> 34 channels, not a vector's
    multiple) with bias: one batch matmul over the groups (packed: the transposes around it fold
    into its pack and unpack), checked at two batch sizes when the batch is symbolic."""
    g = Graph()
    out = g.op("Relu", [g.conv("x", 112, 136, 1, group=4)])
    model = g.model([batch, 112, 9, 7], out)
    for n in ([1] if batch == 1 else [1, 3]):
        _check(model, {"x": _r(n, 112, 9, 7)})
    linalg_ir = _ir(model, "linalg")
    assert linalg_ir.count("linalg.batch_matmul") == 1 and "linalg.conv_2d" not in linalg_ir


@pytest.mark.parametrize(
    "length, attrs",
    [(32, {"pads": [1, 1]}), (33, {"pads": [1, 1], "strides": [2]}), (20, {"pads": [2, 1], "dilations": [2]})],
    ids=["k3", "k3-s2", "dilated"],
)
def test_conv1d_channels_last(length: int, attrs: dict[str, Any]) -> None:
    """Whisper's 1-D convolutions: a static length takes the 2-D channels-last path (height 1);
    a symbolic one is one matmul of the k shifted windows (`_conv1d_patches`); both checked
    against the reference, the symbolic one at two lengths and batches."""
    w = _r(12, 10, 3, lo=-0.5, hi=0.5)
    for dims in ([2, 10, length], ["n", 10, "frames"]):
        g = Graph()
        out = g.op("Relu", [g.op("Conv", ["x", g.const(w), g.const(_r(12))], **attrs)])
        model = g.model(dims, out)
        for n, frames in [(2, length)] + ([(1, length + 5)] if isinstance(dims[0], str) else []):
            _check(model, {"x": _r(n, 10, frames)})
        linalg_ir = _ir(model, "linalg")
        want = "linalg.matmul" if isinstance(dims[0], str) else "linalg.conv_2d_nhwc_hwcf"
        assert want in linalg_ir  # the group generic (scalar loops) before


def test_stem_with_pools_and_classifier() -> None:
    """7x7/2 conv-BN-relu, MaxPool 3x3/2, conv, AveragePool without padded counts, global pool,
    Flatten, Gemm: the pools run channels-last between the convolutions."""
    g = Graph()
    y = g.op("Relu", [g.bn(g.conv("x", 3, 16, 7, strides=[2, 2], pads=[3, 3, 3, 3]), 16)])
    y = g.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.op("Relu", [g.conv(y, 16, 16, 3, pads=[1, 1, 1, 1])])
    y = g.op("AveragePool", [y], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = g.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y])])
    out = g.op("Gemm", [y, g.const(_r(10, 16)), g.const(_r(10))], transB=1)
    model = g.model([1, 3, 29, 27], out)
    _check(model, {"x": _r(1, 3, 29, 27)})
    linalg_ir = _ir(model, "linalg")
    assert "linalg.pooling_nhwc_max" in linalg_ir and "linalg.pooling_nhwc_sum" in linalg_ir


def test_dynamic_batch() -> None:
    """A basic block and a depthwise conv with a symbolic batch, run at two batch sizes."""
    g, out = _basic_block(4)
    out = g.conv(out, 4, 4, 3, group=4, pads=[1, 1, 1, 1])
    model = g.model(["N", 4, 7, 7], out)
    # The pass must terminate here (two transposes of one Add once pushed it back and forth).
    # With static shapes the residual Add reads the input's NHWC copy (one transpose in, one
    # out). With a symbolic batch the Add's two batch dims are not provably equal when it is
    # lowered, so it reads them at run-time indices (a correct broadcast, issue 11), and the
    # transposes cannot pass through that generic: two more. Proving the dims equal (both are
    # the input's `N`) would bring it back to 2.
    assert _ir(model, "linalg").count("linalg.transpose") <= 4
    compiled = onnxc.compile(model)
    for n in (1, 3):
        x = _r(n, 4, 7, 7)
        expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
        np.testing.assert_allclose(compiled(x=x)[0], expected, rtol=RTOL, atol=ATOL)


def test_squeezenet_fire_concat() -> None:
    """Squeeze 1x1 -> expand 1x1 and 3x3 -> channel Concat -> Conv, dynamic batch: the Concat
    runs channels-last (no transpose but the boundary ones) and the values are right."""
    g = Graph()
    s = g.op("Relu", [g.conv("x", 8, 4, 1)])
    a = g.op("Relu", [g.conv(s, 4, 6, 1)])
    b = g.op("Relu", [g.conv(s, 4, 10, 3, pads=[1, 1, 1, 1])])
    out = g.conv(g.op("Concat", [a, b], axis=1), 16, 5, 3, pads=[1, 1, 1, 1])
    model = g.model(["N", 8, 9, 9], out)
    _check(model, {"x": _r(2, 8, 9, 9)})
    assert _ir(model, "linalg").count("linalg.transpose") == 2


def test_weights_given_at_run_time() -> None:
    """Filters that are graph inputs are rearranged at run time (conv, depthwise, 1x1)."""
    g = Graph()
    y = g.op("Conv", ["x", "w"], pads=[1, 1, 1, 1])
    y = g.op("Conv", [y, "wd"], group=6, pads=[1, 1, 1, 1])
    y = g.op("Conv", [y, "w1"])
    model = g.model([1, 4, 6, 6], y, [("w", [6, 4, 3, 3]), ("wd", [6, 1, 3, 3]), ("w1", [5, 6, 1, 1])])
    feeds = {"x": _r(1, 4, 6, 6), "w": _r(6, 4, 3, 3), "wd": _r(6, 1, 3, 3), "w1": _r(5, 6, 1, 1)}
    _check(model, feeds)


def test_batchnorm_not_folded_when_conv_result_is_shared() -> None:
    """A Conv whose result also feeds another op keeps its BN (folding would change the other)."""
    g = Graph()
    c = g.conv("x", 4, 4, 3, pads=[1, 1, 1, 1])
    out = g.op("Add", [g.bn(c, 4), c])
    model = g.model([1, 4, 6, 6], out)
    _check(model, {"x": _r(1, 4, 6, 6)})
    assert "onnx.batch_normalization" in _ir(model, "onnx")


# --- tile plans --------------------------------------------------------------------------------

_CONV_IR = """
func.func @f(%x: tensor<1x58x58x64xf32>, %w: tensor<3x3x64x64xf32>, %o: tensor<1x56x56x64xf32>) -> tensor<1x56x56x64xf32> {
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
    ins(%x, %w : tensor<1x58x58x64xf32>, tensor<3x3x64x64xf32>) outs(%o : tensor<1x56x56x64xf32>) -> tensor<1x56x56x64xf32>
  return %r : tensor<1x56x56x64xf32>
}
func.func @dw(%x: tensor<1x9x9x24xf32>, %w: tensor<3x3x24xf32>, %o: tensor<1x7x7x24xf32>) -> tensor<1x7x7x24xf32> {
  %r = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
    ins(%x, %w : tensor<1x9x9x24xf32>, tensor<3x3x24xf32>) outs(%o : tensor<1x7x7x24xf32>) -> tensor<1x7x7x24xf32>
  return %r : tensor<1x7x7x24xf32>
}
"""


def _named_ops() -> tuple[ir.Context, list[ir.Operation]]:
    ctx = ir.Context()
    module = ir.Module.parse(_CONV_IR, ctx)
    ops: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in ("linalg.conv_2d_nhwc_hwcf", "linalg.depthwise_conv_2d_nhwc_hwc"):
            ops.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    ctx._keep = module  # type: ignore[attr-defined]
    return ctx, ops


@pytest.mark.parametrize(
    "cpu,conv_tiles,dw_tiles",
    [
        # AVX2 (8 f32 lanes, 16 registers): 5 pixels x 16 channels (56 = 11 x 5 + a peeled 1);
        # depthwise 24 = 3 x 8 lanes, 7 pixels (a peeled tile would not fill FMA_DEPTH).
        ("x86-64-v3", (1, 1, 5, 16, 1, 0, 1), (1, 1, 7, 8, 1, 0)),
        # AVX-512 (16 lanes, 32 registers): 8 pixels x 32 channels; 24 channels: a half vector (8).
        ("x86-64-v4", (1, 1, 8, 32, 1, 0, 1), (1, 1, 7, 8, 1, 0)),
    ],
)
def test_plan_follows_the_isa(cpu: str, conv_tiles: tuple[int, ...], dw_tiles: tuple[int, ...]) -> None:
    """Tile sizes come from the CPU's lanes and registers (24 channels give a divisor, not a
    partial tile or a 1.5-vector channel tile; the pixel tile may leave a last, partial tile,
    which is peeled); every plan decomposes to the 1-D form."""
    _ctx, (conv, dw) = _named_ops()
    options = types.SimpleNamespace(cpu=KNOWN_CPUS[cpu])
    p = plan_conv(conv, options)
    assert p is not None and p.decompose and p.vector_sizes == ()
    assert p.tile_sizes == conv_tiles
    q = plan_conv(dw, options)
    assert q is not None and q.decompose
    assert q.tile_sizes == dw_tiles


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("ow", [7, 13, 14, 26, 27, 55, 56])
def test_register_tile_keeps_the_fma_pipes_busy(cpu: str, ow: int) -> None:
    """Every width, those with few small divisors too (SqueezeNet's and AlexNet's 13, 26, 27,
    55), gets a register tile of two vectors of channels and at least FMA_DEPTH independent
    accumulators that fits the register file beside its filter vectors (twice) and two
    broadcasts; on AVX-512 within half the file (a fuller file spilled)."""
    from onnxc.targets.cpu.conv_plan import FMA_DEPTH, _register_tile

    feats = KNOWN_CPUS[cpu]
    lanes, registers = feats.lanes(32), feats.vector_registers
    o, f_t = _register_tile(ow, 64, lanes, registers // 2)
    vectors = f_t // lanes
    assert f_t == 2 * lanes and o <= ow
    assert o * vectors >= FMA_DEPTH and o * vectors + 2 * vectors + 2 <= registers
    if registers == 32:
        assert o * vectors <= registers // 2


@pytest.mark.parametrize(
    ("ow", "channels", "tile"),
    [
        (13, 64, (5, 16)),  # 2 x 5 + a peeled 3 (before: 13 x 1 vector, the whole file, spilling)
        (27, 64, (5, 16)),  # 5 x 5 + 2 (before: 9 x 1 vector)
        (55, 64, (5, 16)),  # 11 x 5
        (13, 24, (8, 8)),  # 24 channels: one vector; 8 + a peeled 5
        (112, 24, (8, 8)),  # one vector at FMA_DEPTH (the 3x3/2 stem: 12 pixels spilled, 4.7x slower)
        (112, 136, (8, 8)),  # ShuffleNet's 136 channels: one vector as well
        (14, 64, (5, 16)),  # 2 x 5 + 4 (before: 7 x 1 vector)
        (6, 64, (6, 16)),  # too short to fill a peeled tile: the divisor rule's whole-file tile
    ],
)
def test_avx2_pixel_tile_need_not_divide_the_width(ow: int, channels: int, tile: tuple[int, int]) -> None:
    """On AVX2 (8 lanes, 16 registers) the pixel tile is the one that costs an output row the
    fewest issue slots, whether or not it divides the width: its last, partial tile is peeled
    (peel_tiles.peel_conv_tiles). Off (`PARTIAL_PIXEL_TILES`), the tile divides the width."""
    from onnxc.targets.cpu import conv_plan

    assert conv_plan._register_tile(ow, channels, 8, 8) == tile
    assert conv_plan._divisor_tile(ow, channels, 8, 8)[0] in [d for d in range(1, ow + 1) if ow % d == 0]


def _odd_width_model(kind: str) -> onnx.ModelProto:
    """A 13- or 27-wide block of `kind`: a 3x3 convolution + BatchNormalization + Relu (the
    epilogue fused into the convolution's tiles), the same at stride 2, a depthwise convolution
    (stride 1 and 2), or a convolution followed by a 3x3/2 max pool."""
    g = Graph()
    if kind == "conv_bn_relu":
        return g.model([1, 16, 13, 13], g.op("Relu", [g.bn(g.conv("x", 16, 32, 3, pads=[1, 1, 1, 1]), 32)]))
    if kind == "stride2":
        return g.model([1, 16, 27, 27], g.op("Relu", [g.bn(g.conv("x", 16, 32, 3, strides=[2, 2], pads=[1, 1, 1, 1]), 32)]))
    if kind == "depthwise":
        return g.model([1, 32, 13, 13], g.op("Relu", [g.conv("x", 32, 32, 3, group=32, pads=[1, 1, 1, 1])]))
    if kind == "depthwise_stride2":
        return g.model([1, 32, 27, 27], g.conv("x", 32, 32, 3, group=32, strides=[2, 2], pads=[1, 1, 1, 1]))
    assert kind == "pool"
    y = g.op("Relu", [g.conv("x", 16, 16, 1)])
    return g.model([1, 16, 27, 27], g.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2]))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["conv_bn_relu", "stride2", "depthwise", "depthwise_stride2", "pool"])
def test_odd_width_peeled_tiles_vectorize_and_match_reference(kind: str, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled for AVX2 (znver3), the convolutions and poolings of 13- and 27-wide blocks get
    a pixel tile that does not divide their width; both the whole tiles and the peeled last one
    are vectorized (no linalg op is left after the vector stage), with one thread and with the
    rows split over two (`scf.forall`), and the results match onnx.reference."""
    from onnxc.targets.cpu import CpuPipelineOptions

    monkeypatch.setattr(sys.modules[__name__], "RNG", np.random.default_rng(13))
    model = _odd_width_model(kind)
    cpu = KNOWN_CPUS["znver3"]
    module = lower(model, "linalg", target_cpu="znver3")
    widths: list[tuple[int, int]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        plan = plan_conv(op, CpuPipelineOptions(target_cpu="znver3", threads=threads))
        if plan is not None and plan.decompose:
            widths.append((ir.RankedTensorType(op.results[0].type).get_dim_size(2), plan.tile_sizes[2]))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    assert widths and any(ow % o for ow, o in widths), widths
    assert cpu.vector_registers == 16
    vector_ir = str(lower(model, "vector", target_cpu="znver3", threads=threads))
    assert "linalg." not in vector_ir
    x = _r(*[d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim])
    (got,) = onnxc.compile(model, cpu_options=CpuPipelineOptions(target_cpu="znver3", threads=threads))(x)
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(ref).max())))


def test_prime_width_conv_on_avx2_matches_reference() -> None:
    """A 3x3 convolution to a 13-pixel-wide output compiled for AVX2 (znver3: 24 channels are
    one vector, and its register tile is 8 pixels x 1 vector, the last 5 pixels peeled) against
    onnx.reference."""
    x, w = _r(1, 16, 15, 15), _r(24, 16, 3, 3)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 0, 0, 0])], "g",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [1, 16, 15, 15])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 24, 13, 13])], [nh.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    got = onnxc.compile(m, target_cpu="znver3").run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


_STRIDED_IR = """
func.func @s(%x: tensor<1x57x57x128xf32>, %w: tensor<3x3x128x128xf32>, %o: tensor<1x28x28x128xf32>) -> tensor<1x28x28x128xf32> {
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
    ins(%x, %w : tensor<1x57x57x128xf32>, tensor<3x3x128x128xf32>) outs(%o : tensor<1x28x28x128xf32>) -> tensor<1x28x28x128xf32>
  return %r : tensor<1x28x28x128xf32>
}
func.func @p(%x: tensor<1x113x113x64xf32>, %w: tensor<3x3xf32>, %o: tensor<1x56x56x64xf32>) -> tensor<1x56x56x64xf32> {
  %r = linalg.pooling_nhwc_max {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
    ins(%x, %w : tensor<1x113x113x64xf32>, tensor<3x3xf32>) outs(%o : tensor<1x56x56x64xf32>) -> tensor<1x56x56x64xf32>
  return %r : tensor<1x56x56x64xf32>
}
"""


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4"])
def test_strided_windows_step_one_tap_at_a_time(cpu: str) -> None:
    """A stride-2 convolution or pooling tiles its kernel width by 1 (`conv_plan._kw_steps`: the
    taps' shared pixels spilled the accumulators); stride 1 keeps the kernel row whole."""
    ctx = ir.Context()
    module = ir.Module.parse(_STRIDED_IR, ctx)
    ops = [op for f in module.body.operations for op in f.regions[0].blocks[0].operations if op.name.startswith("linalg.")]
    options = types.SimpleNamespace(cpu=KNOWN_CPUS[cpu])
    conv, pool = (plan_conv(op.operation, options) for op in ops)
    assert conv is not None and conv.tile_sizes[4:] == (1, 1, 1)  # kh, kw, c
    assert pool is not None and pool.tile_sizes[4:] == (1, 1)  # kh, kw
    _ctx, (unit_stride, _dw) = _named_ops()
    whole = plan_conv(unit_stride, options)
    assert whole is not None and whole.tile_sizes[4:] == (1, 0, 1)


def test_plan_ignores_other_ops() -> None:
    ctx = ir.Context()
    module = ir.Module.parse(
        "func.func @m(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>, %c: tensor<4x4xf32>) -> tensor<4x4xf32> {\n"
        "  %r = linalg.matmul ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>\n"
        "  return %r : tensor<4x4xf32>\n}",
        ctx,
    )
    matmul = module.body.operations[0].regions[0].blocks[0].operations[0].operation
    assert plan_conv(matmul, None) is None


@pytest.mark.parametrize("cpu,tiles", [("x86-64-v3", (1, 4, 1, 8)), ("x86-64-v4", (1, 8, 1, 16))])
def test_plan_layout_transpose(cpu: str, tiles: tuple[int, ...]) -> None:
    """NHWC -> NCHW gets a 2-D tile (output's innermost by a vector, the input's innermost by half
    of one); a transpose that keeps the innermost dim keeps the generic plan."""
    ctx = ir.Context()
    module = ir.Module.parse(
        "func.func @t(%x: tensor<1x112x112x64xf32>, %y: tensor<2x3x4xf32>) -> (tensor<1x64x112x112xf32>, tensor<3x2x4xf32>) {\n"
        "  %e = tensor.empty() : tensor<1x64x112x112xf32>\n"
        "  %t = linalg.transpose ins(%x : tensor<1x112x112x64xf32>) outs(%e : tensor<1x64x112x112xf32>) permutation = [0, 3, 1, 2]\n"
        "  %f = tensor.empty() : tensor<3x2x4xf32>\n"
        "  %u = linalg.transpose ins(%y : tensor<2x3x4xf32>) outs(%f : tensor<3x2x4xf32>) permutation = [1, 0, 2]\n"
        "  return %t, %u : tensor<1x64x112x112xf32>, tensor<3x2x4xf32>\n}",
        ctx,
    )
    ops = [op.operation for op in module.body.operations[0].regions[0].blocks[0].operations if op.operation.name == "linalg.transpose"]
    options = types.SimpleNamespace(cpu=KNOWN_CPUS[cpu])
    plan = plan_conv(ops[0], options)
    assert plan is not None and plan.tile_sizes == tiles and plan.vector_sizes == tiles and not plan.decompose
    assert plan_conv(ops[1], options) is None


# --- threads ----------------------------------------------------------------------------------


def _forall_loops(model: onnx.ModelProto, threads: int) -> list[list[int]]:
    """The `num_threads` lists of the `scf.forall` loops the CPU plan puts around the model's
    convolutions/poolings (one list per forall, one count per loop of the op)."""
    from onnxc.targets.cpu import CpuPipelineOptions
    from onnxc.targets.cpu.pipeline import plan_tiles

    module = lower(model, "linalg")
    found: list[list[int]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        plan = plan_conv(op, CpuPipelineOptions(threads=threads))
        if plan is not None and plan.decompose:
            assert plan == plan_tiles(op, CpuPipelineOptions(threads=threads))
            found.append(list(plan.forall_threads or ()))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


@pytest.mark.parametrize(
    ("c", "hw", "split_loop"),
    [
        (32, 32, 1),  # 32 output rows: split by rows
        (512, 7, 3),  # 7 rows split 4/3, 512 channels split evenly: split by channels
    ],
)
def test_two_threads_split_convolutions_and_pools(c: int, hw: int, split_loop: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Convolutions, depthwise convolutions and max pools of a batch of 1 are split over the
    threads by output rows or channels (whole register tiles per thread, so the results are
    bit-identical to one thread's) and match onnx.reference.

    The data come from a generator of this test's own (with the module's, they depended on
    which tests ran before in the same worker), and the absolute tolerance scales with the
    output's largest magnitude: a 3x3 convolution over 512 channels sums 4,608 products, and
    float32 rounding of such a sum is about 1e-6 of the terms' size, not of the (possibly
    cancelled, near-zero) result."""
    from onnxc.targets.cpu import CpuPipelineOptions

    monkeypatch.setattr(sys.modules[__name__], "RNG", np.random.default_rng(c * 100 + hw))
    g = Graph()
    y = g.op("Relu", [g.conv("x", c, c, 3, pads=[1, 1, 1, 1])])
    y = g.conv(y, c, c, 3, group=c, pads=[1, 1, 1, 1])  # depthwise
    y = g.op("MaxPool", [y], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    model = g.model([1, c, hw, hw], y)
    loops = _forall_loops(model, threads=2)
    assert len(loops) == 3 and all(f and f[split_loop] == 2 and sum(f) == 2 for f in loops), loops
    assert _forall_loops(model, threads=1) == [[], [], []]
    x = _r(1, c, hw, hw)
    (one,) = onnxc.compile(model, cpu_options=CpuPipelineOptions(threads=1))(x)
    (two,) = onnxc.compile(model, cpu_options=CpuPipelineOptions(threads=2))(x)
    np.testing.assert_array_equal(one, two)
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(two, ref, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(ref).max())))


def test_small_convolution_stays_on_one_thread() -> None:
    """Below MIN_THREADED_MACS a task's wake-up costs more than it saves: no forall."""
    g = Graph()
    model = g.model([1, 4, 6, 6], g.conv("x", 4, 4, 3, pads=[1, 1, 1, 1]))
    assert _forall_loops(model, threads=2) == [[]]


@pytest.mark.parametrize(
    ("x_dims", "cout", "kernel", "bias"),
    [
        ([1, 3, 32, 32], 24, [8, 8], True),  # a patch embedding
        ([2, 3, 30, 31], 8, [4, 4], False),  # windows do not cover the last rows/columns
        ([1, 5, 9, 9], 4, [3, 2], True),  # rectangular windows
        (["n", 3, 16, 16], 6, [4, 4], True),  # symbolic batch
    ],
)
def test_patch_convolution_is_a_matmul(x_dims: list[Any], cout: int, kernel: list[int], bias: bool) -> None:
    """stride = kernel without padding (ViT's patch embedding): one linalg.matmul of the
    patches, no convolution op; values match onnx.reference."""
    g = Graph()
    y = g.conv("x", x_dims[1], cout, kernel[0], bias=bias) if kernel[0] == kernel[1] else None
    if y is None:
        w = g.const(_r(cout, x_dims[1], *kernel, lo=-0.5, hi=0.5))
        y = g.op("Conv", ["x", w, g.const(_r(cout))], kernel_shape=kernel, strides=kernel)
    else:
        g.nodes[-1].attribute.extend([helper.make_attribute("strides", kernel)])
    model = g.model(x_dims, y)
    linalg_ir = _ir(model, "linalg")
    assert "linalg.matmul" in linalg_ir and "linalg.conv" not in linalg_ir
    shape = [2 if d == "n" else d for d in x_dims]
    _check(model, {"x": _r(*shape)})


@pytest.mark.parametrize("op", ["LpPool", "MaxPool", "Conv"])
def test_run_time_size_shorter_than_the_window_is_an_error(op: str) -> None:
    """A dynamic spatial size shorter than the dilated window is a run-time error naming the node
    (the output size came out negative: "could not allocate -1440 bytes", or a negative dim
    reaching numpy as a raw ValueError; compile fuzzer seed 401 case 15001: LpPool with dilations
    [2, 9], every dim symbolic). A size that fits runs and matches onnx.reference."""
    from onnxc.targets.cpu.runtime_checks import RuntimeCheckError

    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, ["n", "c", "h", "w"])]
    inits = []
    if op == "Conv":
        inits.append(nh.from_array(np.random.default_rng(0).standard_normal((2, 3, 2, 2)).astype(np.float32), "k"))
        node = helper.make_node("Conv", ["x", "k"], ["y"], name="win", dilations=[2, 9])
    else:
        node = helper.make_node(op, ["x"], ["y"], name="win", kernel_shape=[2, 2], dilations=[2, 9])
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    compiled = onnxc.compile(model)
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 12)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(np.asarray(compiled(x)[0]), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeCheckError, match=r"node 'win'.*spatial size of 5 .*shorter than the window \(10 with dilation 9\)"):
        compiled(np.ones((1, 3, 6, 5), np.float32))


# --- filters packed per channel tile (conv_filters.py) ----------------------------------------


def _packed_convs(model: onnx.ModelProto, cpu: str, threads: int) -> tuple[int, list[list[int]], int]:
    """(convolutions rewritten, filter shapes of the convolutions after, scf.forall count) when
    `pack_conv_filters` runs on the model's linalg IR for `cpu`."""
    from onnxc.targets.cpu.conv_filters import pack_conv_filters

    module = lower(model, "linalg")
    with module.context:
        count = pack_conv_filters(module, KNOWN_CPUS[cpu], threads)
    filters: list[list[int]] = []
    foralls = [0]

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "linalg.conv_2d_nhwc_hwcf":
            filters.append(list(ir.RankedTensorType(op.operands[1].type).shape))
        foralls[0] += op.name == "scf.forall"
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count, filters, foralls[0]


def test_large_constant_filter_is_packed_per_channel_tile() -> None:
    """A constant filter larger than half of L2 (haswell: 256 KB; 3x3x96x96 floats = 324 KB)
    whose input fits in it is packed per channel tile: one convolution per contiguous
    [3, 3, 96, 16] slice (AVX2: two 8-lane vectors), its 6 tiles split over an scf.forall of
    2 or 3 threads (the most that divide 6). Results match onnx.reference and are the same
    bit for bit at 1, 2 and 3 threads (each tile is computed the same way)."""
    from onnxc.targets.cpu import CpuPipelineOptions

    g = Graph()
    model = g.model([1, 96, 8, 8], g.op("Relu", [g.conv("x", 96, 96, 3, pads=[1, 1, 1, 1])]))
    assert _packed_convs(model, "haswell", 1) == (1, [[3, 3, 96, 16]], 0)
    assert _packed_convs(model, "haswell", 2) == (1, [[3, 3, 96, 16]], 1)
    assert _packed_convs(model, "haswell", 4) == (1, [[3, 3, 96, 16]], 1)
    # x86-64-v4's L2 (1 MB) holds the filter: left whole.
    assert _packed_convs(model, "x86-64-v4", 1) == (0, [[3, 3, 96, 96]], 0)
    x = _r(1, 96, 8, 8)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    outs = [onnxc.compile(model, cpu_options=CpuPipelineOptions(target_cpu="haswell", threads=t), cache_dir=False)(x)[0] for t in (1, 2, 3)]
    np.testing.assert_allclose(outs[0], want, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


@pytest.mark.parametrize("attrs", [{"strides": [2, 2], "pads": [1, 1, 1, 1]}, {"dilations": [2, 2], "pads": [2, 2, 2, 2]}])
def test_packed_filter_keeps_strides_and_dilations(attrs: dict[str, Any]) -> None:
    """The convolutions on the packed filter's slices keep the strides and dilations."""
    from onnxc.targets.cpu import CpuPipelineOptions

    g = Graph()
    model = g.model([1, 96, 10, 10], g.conv("x", 96, 96, 3, **attrs))
    assert _packed_convs(model, "haswell", 2)[0] == 1
    x = _r(1, 96, 10, 10)
    got = onnxc.compile(model, cpu_options=CpuPipelineOptions(target_cpu="haswell", threads=2), cache_dir=False)(x)[0]
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)


def test_run_time_filter_is_not_packed() -> None:
    """A filter given at run time cannot be rearranged at compile time: the convolution stays one."""
    g = Graph()
    g.nodes.append(helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]))
    model = g.model([1, 96, 8, 8], "c", extra_inputs=[("w", [96, 96, 3, 3])])
    assert _packed_convs(model, "haswell", 1) == (0, [[3, 3, 96, 96]], 0)


def _conv_shapes(module: ir.Module) -> list[list[int]]:
    """The result shapes of the module's `linalg.conv_2d_nhwc_hwcf`s, in program order."""
    from onnxc.transforms.onnx_utils import collect_ops

    convs = collect_ops(module.operation, lambda op: op.name == "linalg.conv_2d_nhwc_hwcf")
    return [list(ir.RankedTensorType(op.results[0].type).shape) for op in convs]


def test_output_channels_are_padded_to_split_evenly_over_threads() -> None:
    """With 2 threads, SqueezeNet's classifier convolution (1000 channels, AVX-512) is padded to
    1024 rather than 1008: 63 channel tiles of 16 split 32/31 and the plan split its 13 rows
    7/6 instead, where 1024 channels split into halves and each thread reads half the filter
    (2.4% more work). One thread keeps 1008; 20 channels on AVX2 keep 24 (32 would be a third
    more work). Results match onnx.reference at 2 threads (compiled for AVX2, which every CI host
    runs: 1004 channels padded to 1024, 64 tiles of 16, where 1008 would be 63)."""
    from onnxc.targets.cpu import CpuPipelineOptions
    from onnxc.targets.cpu.conv_filters import _padded_channels, pad_conv_channels

    assert _padded_channels(1000, 16, 2, 16) == 1024
    assert _padded_channels(1000, 16, 1, 16) == 1008
    assert _padded_channels(20, 8, 2, 8) == 24
    g = Graph()
    m = g.model([1, 64, 13, 13], g.op("Relu", [g.conv("x", 64, 1000, 1)]))
    for threads, padded in ((1, 1008), (2, 1024)):
        module = lower(m, "linalg")
        with module.context:
            assert pad_conv_channels(module, KNOWN_CPUS["znver4"], threads) == 1
        assert _conv_shapes(module) == [[1, 13, 13, padded]]
    g = Graph()
    m = g.model([1, 64, 13, 13], g.op("Relu", [g.conv("x", 64, 1004, 1)]))
    module = lower(m, "linalg")
    with module.context:
        assert pad_conv_channels(module, KNOWN_CPUS["haswell"], 2) == 1
    assert _conv_shapes(module) == [[1, 13, 13, 1024]]
    x = _r(1, 64, 13, 13)
    got = onnxc.compile(m, cpu_options=CpuPipelineOptions(target_cpu="haswell", threads=2), cache_dir=False)(x)[0]
    np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)


def test_output_channels_are_padded_to_whole_vectors() -> None:
    """A constant-filter convolution with 20 output channels (AVX2: 8 lanes) is computed on 24
    (zero filter columns) and sliced back: its channel tile was 4 (half vectors, a broadcast per
    FMA). 8 channels (a multiple) and 5 (less than a vector) are left alone. Results match
    onnx.reference, bias included."""
    from onnxc.targets.cpu import CpuPipelineOptions
    from onnxc.targets.cpu.conv_filters import pad_conv_channels

    def model(cout: int) -> onnx.ModelProto:
        g = Graph()
        return g.model([1, 16, 9, 9], g.op("Relu", [g.conv("x", 16, cout, 3, pads=[1, 1, 1, 1])]))

    for cout, padded in ((20, 24), (8, None), (5, None)):
        module = lower(model(cout), "linalg")
        with module.context:
            assert pad_conv_channels(module, KNOWN_CPUS["haswell"]) == (1 if padded else 0)
        assert _conv_shapes(module) == [[1, 9, 9, padded or cout]]
    m = model(20)
    x = _r(1, 16, 9, 9)
    got = onnxc.compile(m, cpu_options=CpuPipelineOptions(target_cpu="haswell", threads=1), cache_dir=False)(x)[0]
    np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)
