"""ONNX model builders shared by the pytest tests: small networks with seeded random weights.

The tests compare onnxc against onnxruntime and `onnx.reference`, so the models here must be
valid for all three: they are written at IR version 10 (onnxruntime 1.31 refuses the IR 14 that
onnx 1.23 writes by default) with an explicit default-domain opset. Weights come from
`numpy.random.default_rng(seed)`, so a model is the same on every run and every machine.

Builders:
- `resnet_stack`: Conv (3x3 with pads, one stride-2 block with a 1x1 stride-2 projection),
  BatchNormalization (inference, random statistics), Relu, MaxPool, two residual blocks joined by
  Add, GlobalAveragePool, Flatten, Gemm.
- `transformer_encoder`: one post-norm encoder layer with a dynamic sequence length (`dim_param`
  "seq"), Q/K/V projections, 4 heads of 16, masked scaled dot-product attention with Softmax,
  output projection, residual Add, LayerNormalization, a Gelu (the opset-20 op or the Erf formula)
  feed-forward block, residual Add, LayerNormalization.
- `light_models`: the nine `data/light` models shipped in the onnx wheel.
- `random_feeds`: seeded random inputs for a model's graph inputs (not its initializers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10  # onnxruntime 1.31 reads IR <= 11; 10 is what onnx 1.16-1.17 wrote


def make_model(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    """Wrap `graph` in a checked model at `IR_VERSION` importing the default domain at `opset`."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    model.producer_name = "onnxc-tests"
    onnx.checker.check_model(model, full_check=True)
    return model


class _Graph:
    """Accumulates nodes and initializers with unique names (a tiny graph builder)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def const(self, stem: str, value: np.ndarray) -> str:
        name = self.fresh(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def normal(self, stem: str, shape: tuple[int, ...], std: float) -> str:
        return self.const(stem, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def uniform(self, stem: str, shape: tuple[int, ...], lo: float, hi: float) -> str:
        return self.const(stem, self.rng.uniform(lo, hi, shape).astype(np.float32))

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str | list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.fresh(f"n_{op_type}"), **attrs))
        return outs[0] if n_out == 1 else outs


# ----------------------------------------------------------------------------------------------
# ResNet-style CNN


def _conv_bn(g: _Graph, x: str, cin: int, cout: int, k: int, stride: int, relu: bool, bias: bool = False) -> str:
    """Conv(k x k, same padding, `stride`) -> BatchNormalization (inference) [-> Relu]."""
    w = g.normal("conv_w", (cout, cin, k, k), math.sqrt(2.0 / (cin * k * k)))  # He init: activations stay O(1)
    ins = [x, w] + ([g.normal("conv_b", (cout,), 0.1)] if bias else [])
    pad = k // 2
    y = g.op("Conv", ins, kernel_shape=[k, k], pads=[pad, pad, pad, pad], strides=[stride, stride])
    scale = g.uniform("bn_scale", (cout,), 0.5, 1.5)
    shift = g.normal("bn_bias", (cout,), 0.1)
    mean = g.normal("bn_mean", (cout,), 0.1)
    var = g.uniform("bn_var", (cout,), 0.5, 1.5)
    y = g.op("BatchNormalization", [y, scale, shift, mean, var], epsilon=1e-5)
    return g.op("Relu", [y]) if relu else y


def resnet_stack(batch: int | str = 1, seed: int = 0, opset: int = 17) -> onnx.ModelProto:
    """A ResNet-style CNN on [batch, 3, 32, 32] inputs with 10 logits out.

    stem: Conv 3->8 (3x3, pad 1, bias) + BN + Relu, MaxPool 3x3 stride 2 pad 1 -> 8x16x16;
    block 1 (identity shortcut): (Conv+BN+Relu, Conv+BN) + x -> Relu;
    block 2 (downsampling): (Conv 8->16 stride 2 + BN + Relu, Conv + BN) + (Conv 1x1 stride 2 + BN)
    -> Relu -> 16x8x8; GlobalAveragePool, Flatten, Gemm (transB) 16->10.
    `batch` is an int for a static batch or a string for a `dim_param`.
    """
    g = _Graph(np.random.default_rng(seed))
    x = "input"
    y = _conv_bn(g, x, 3, 8, 3, 1, relu=True, bias=True)
    y = g.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    # Block 1: identity shortcut.
    r = _conv_bn(g, y, 8, 8, 3, 1, relu=True)
    r = _conv_bn(g, r, 8, 8, 3, 1, relu=False)
    y = g.op("Relu", [g.op("Add", [r, y])])
    # Block 2: stride-2 main path and a 1x1 stride-2 projection shortcut.
    r = _conv_bn(g, y, 8, 16, 3, 2, relu=True)
    r = _conv_bn(g, r, 16, 16, 3, 1, relu=False)
    s = _conv_bn(g, y, 8, 16, 1, 2, relu=False, bias=True)
    y = g.op("Relu", [g.op("Add", [r, s])])
    y = g.op("GlobalAveragePool", [y])
    y = g.op("Flatten", [y], axis=1)
    w = g.normal("fc_w", (10, 16), math.sqrt(1.0 / 16))
    b = g.normal("fc_b", (10,), 0.1)
    g.nodes.append(helper.make_node("Gemm", [y, w, b], ["logits"], name="fc", transB=1))
    graph = helper.make_graph(
        g.nodes,
        "resnet_stack",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        g.inits,
    )
    return make_model(graph, opset)


# ----------------------------------------------------------------------------------------------
# Transformer encoder layer

D_MODEL = 64
HEADS = 4
HEAD_DIM = D_MODEL // HEADS
D_FF = 256


def _linear(g: _Graph, x: str, din: int, dout: int) -> str:
    """MatMul by a [din, dout] weight plus a bias Add, as exporters write a Linear layer."""
    w = g.normal("w", (din, dout), math.sqrt(1.0 / din))
    b = g.normal("b", (dout,), 0.02)
    return g.op("Add", [g.op("MatMul", [x, w]), b])


def _gelu_erf(g: _Graph, x: str) -> str:
    """x * 0.5 * (1 + Erf(x / sqrt(2))), the exact Gelu as exporters write it before opset 20."""
    e = g.op("Erf", [g.op("Div", [x, g.const("sqrt2", np.array(math.sqrt(2.0), np.float32))])])
    one_plus = g.op("Add", [e, g.const("one", np.array(1.0, np.float32))])
    return g.op("Mul", [g.op("Mul", [x, g.const("half", np.array(0.5, np.float32))]), one_plus])


def transformer_encoder(
    gelu: str = "op",
    batch: int = 2,
    seed: int = 0,
    mask: str = "full",
    shape_from_input: bool = False,
) -> onnx.ModelProto:
    """One post-norm transformer encoder layer; inputs `x` [batch, seq, 64] and `mask`, output `y`.

    `seq` is a dynamic dim (`dim_param` "seq"). `mask` is an additive attention mask (0 to attend,
    -1e4 to ignore): "full" gives it shape [batch, 1, seq, seq], "keys" [batch, 1, 1, seq] (key
    padding, broadcast over queries). `gelu` is "op" (the opset-20 Gelu op; the model is opset 20)
    or "erf" (the Erf formula; opset 17, the first with LayerNormalization). With
    `shape_from_input` the head reshapes take their target shapes from Shape(x) (start/end
    attributes) and Concat, as exporters write them, instead of constants with 0 (copy) entries.
    """
    if gelu not in ("op", "erf"):
        raise ValueError(f"gelu must be 'op' or 'erf', got {gelu!r}")
    if mask not in ("full", "keys"):
        raise ValueError(f"mask must be 'full' or 'keys', got {mask!r}")
    opset = 20 if gelu == "op" else 17
    g = _Graph(np.random.default_rng(seed))
    x, m = "x", "mask"

    if shape_from_input:
        batch_seq = g.op("Shape", [x], start=0, end=2)  # [batch, seq]
        heads_shape = g.op("Concat", [batch_seq, g.const("hs", np.array([HEADS, HEAD_DIM], np.int64))], axis=0)
        merge_shape = g.op("Concat", [batch_seq, g.const("ms", np.array([D_MODEL], np.int64))], axis=0)
    else:
        heads_shape = g.const("hs", np.array([0, 0, HEADS, HEAD_DIM], np.int64))
        merge_shape = g.const("ms", np.array([0, 0, D_MODEL], np.int64))

    def heads(v: str, perm: list[int]) -> str:
        return g.op("Transpose", [g.op("Reshape", [v, heads_shape])], perm=perm)

    q = heads(_linear(g, x, D_MODEL, D_MODEL), [0, 2, 1, 3])  # [b, h, s, d]
    kt = heads(_linear(g, x, D_MODEL, D_MODEL), [0, 2, 3, 1])  # [b, h, d, s]
    v = heads(_linear(g, x, D_MODEL, D_MODEL), [0, 2, 1, 3])  # [b, h, s, d]
    scores = g.op("MatMul", [q, kt])  # [b, h, s, s]
    scale = g.const("scale", np.array(1.0 / math.sqrt(HEAD_DIM), np.float32))
    scores = g.op("Add", [g.op("Mul", [scores, scale]), m])
    probs = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])  # [b, s, h, d]
    ctx = g.op("Reshape", [ctx, merge_shape])
    attn = _linear(g, ctx, D_MODEL, D_MODEL)

    def layer_norm(t: str) -> str:
        gamma = g.uniform("ln_g", (D_MODEL,), 0.5, 1.5)
        beta = g.normal("ln_b", (D_MODEL,), 0.1)
        return g.op("LayerNormalization", [t, gamma, beta], axis=-1, epsilon=1e-5)

    h = layer_norm(g.op("Add", [x, attn]))
    f = _linear(g, h, D_MODEL, D_FF)
    f = g.op("Gelu", [f]) if gelu == "op" else _gelu_erf(g, f)
    f = _linear(g, f, D_FF, D_MODEL)
    g.nodes.append(
        helper.make_node(
            "LayerNormalization",
            [g.op("Add", [h, f]), g.uniform("ln_g", (D_MODEL,), 0.5, 1.5), g.normal("ln_b", (D_MODEL,), 0.1)],
            ["y"],
            name="ln_out",
            axis=-1,
            epsilon=1e-5,
        )
    )
    mask_dims: list[int | str] = [batch, 1, "seq", "seq"] if mask == "full" else [batch, 1, 1, "seq"]
    graph = helper.make_graph(
        g.nodes,
        f"transformer_encoder_{gelu}",
        [
            helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, "seq", D_MODEL]),
            helper.make_tensor_value_info(m, TensorProto.FLOAT, mask_dims),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, "seq", D_MODEL])],
        g.inits,
    )
    return make_model(graph, opset)


def attention_mask(rng: np.random.Generator, batch: int, seq: int, kind: str = "full") -> np.ndarray:
    """An additive mask for `transformer_encoder`: 0 where attended, -1e4 where masked.

    "full": [batch, 1, seq, seq], causal for even batch items and random (about a quarter masked,
    the diagonal always kept so no row is all masked) for odd ones. "keys": [batch, 1, 1, seq],
    item i ignores its last i keys (key padding), keeping at least one.
    """
    if kind == "full":
        keep = np.empty((batch, 1, seq, seq), bool)
        for b in range(batch):
            keep[b, 0] = np.tril(np.ones((seq, seq), bool)) if b % 2 == 0 else rng.random((seq, seq)) > 0.25
            np.fill_diagonal(keep[b, 0], True)
    else:
        keep = np.ones((batch, 1, 1, seq), bool)
        for b in range(batch):
            keep[b, 0, 0, max(1, seq - b) :] = False
    return np.where(keep, 0.0, -1e4).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# The onnx wheel's light models and random inputs

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)


def light_model(name: str, expose_logits: bool = False) -> onnx.ModelProto:
    """The onnx wheel's `light_<name>.onnx` (IR 3, opset 9, weights built by ConstantOfShape).

    With `expose_logits`, the input of every Softmax that makes a graph output becomes an extra
    graph output (typed by onnx shape inference): with all weights equal, 7 of the 9 models
    output a uniform 0.001 whatever the input, which checks nothing, while the logits before the
    Softmax still depend on every layer's arithmetic.
    """
    model = onnx.load(str(LIGHT_DIR / f"light_{name}.onnx"))
    if expose_logits:
        outputs = {o.name for o in model.graph.output}
        inferred = onnx.shape_inference.infer_shapes(model)
        typed = {v.name: v for v in inferred.graph.value_info}
        for node in model.graph.node:
            if node.op_type == "Softmax" and node.output[0] in outputs and node.input[0] not in outputs:
                if node.input[0] not in typed:
                    raise ValueError(f"light_{name}: shape inference gave no type for {node.input[0]}")
                model.graph.output.append(typed[node.input[0]])
                outputs.add(node.input[0])
    return model


@dataclass(frozen=True)
class InputInfo:
    """A graph input that is not an initializer: name, numpy dtype, dims (str for dim_param)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | str, ...]


def graph_inputs(model: onnx.ModelProto) -> list[InputInfo]:
    """The inputs a caller must feed (graph inputs without an initializer), with declared dims."""
    inits = {t.name for t in model.graph.initializer}
    out = []
    for v in model.graph.input:
        if v.name in inits:
            continue
        tt = v.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in tt.shape.dim)
        out.append(InputInfo(v.name, helper.tensor_dtype_to_np_dtype(tt.elem_type), dims))
    return out


def random_feeds(model: onnx.ModelProto, seed: int = 0, dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded standard-normal float inputs of the declared shapes; `dims` binds `dim_param`s."""
    rng = np.random.default_rng(seed)
    dims = dims or {}
    feeds = {}
    for inp in graph_inputs(model):
        shape = tuple(d if isinstance(d, int) else dims[d] for d in inp.dims)
        if not np.issubdtype(inp.dtype, np.floating):
            raise ValueError(f"random_feeds makes float inputs only; {inp.name} is {inp.dtype}")
        feeds[inp.name] = rng.standard_normal(shape).astype(inp.dtype)
    return feeds
