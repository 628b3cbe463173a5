"""Benchmark models with random weights, built in the op patterns torch.onnx exports (no download).

What: builders for ResNet-50, MobileNetV2, BERT-base, GPT-2 small (a 64-token prefill and one
decode step with the KV cache as inputs), a small ViT and a Llama-style decoder block stack
(RMSNorm, RoPE, grouped-query attention, SwiGLU). Each returns a ``BenchModel``: the ONNX
``ModelProto`` (opset 17, IR 8, which onnxruntime and onnxc both take) and matching random
inputs. ``build(name, layers=N)`` shrinks the transformers to N layers; ``BUILDERS`` lists them.

Why these op patterns: a compiler is fast on the graphs users feed it, and those come from
torch.onnx: convolutions with BatchNormalization already folded in (eval-mode export), ReLU6 as
``Clip`` with min/max inputs, ``nn.Linear`` on 3-D input as ``MatMul`` + ``Add`` (``Gemm`` on 2-D),
HF Conv1D (GPT-2) as ``Gemm`` between two ``Reshape``s, attention heads split by
``Reshape``/``Transpose``, GELU as ``Erf`` (BERT, ViT) or the ``Tanh`` form (GPT-2), layer norm as
``LayerNormalization`` (opset 17), RMSNorm as ``Pow``/``ReduceMean``/``Add``/``Sqrt``/``Div``/``Mul``,
``rotate_half`` as ``Slice``/``Neg``/``Concat``, ``repeat_kv`` as ``Unsqueeze``/``Expand``/``Reshape``.

Weights are random (seeded) with the usual initialisation scales so activations stay in a
reasonable range through every layer: a comparison with onnxruntime at 1e-4 is then meaningful,
unlike the `light` models, whose constant weights make most outputs uniform.

Reusable by tests: ``sys.path.insert(0, "<repo>/bench"); import bench_models``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8

__all__ = ["BUILDERS", "BenchModel", "GraphBuilder", "build", "random_feeds"]


@dataclasses.dataclass
class BenchModel:
    """A benchmark model: its name, the ONNX model and inputs to run it on."""

    name: str
    proto: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    description: str = ""


_NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}


class GraphBuilder:
    """Appends nodes and initializers with fresh names; ``model()`` wraps them in a ModelProto."""

    def __init__(self, name: str, seed: int = 0) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._count = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    # --- values ------------------------------------------------------------------------------

    def const(self, value: np.ndarray | Sequence[int] | float, hint: str = "const", dtype: type | None = None) -> str:
        """An initializer holding ``value`` (a list becomes int64, a float float32)."""
        if isinstance(value, (float, np.floating)):
            arr = np.array(value, dtype=np.float32)
        elif isinstance(value, np.ndarray):
            arr = value if dtype is None else value.astype(dtype)
        else:
            arr = np.array(value, dtype=dtype or np.int64)
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def weight(self, shape: Sequence[int], std: float, hint: str = "w") -> str:
        return self.const(self.rng.standard_normal(tuple(shape), dtype=np.float32) * np.float32(std), hint)

    def input(self, name: str, dtype: type, shape: Sequence[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, _NP_TO_ONNX[np.dtype(dtype)], list(shape)))
        return name

    def output(self, value: str, dtype: type = np.float32, name: str | None = None) -> None:
        """Declare ``value`` a graph output (renamed through Identity when ``name`` is given)."""
        if name is not None and name != value:
            self.nodes.append(helper.make_node("Identity", [value], [name]))
            value = name
        self.outputs.append(helper.make_tensor_value_info(value, _NP_TO_ONNX[np.dtype(dtype)], None))

    def op(self, op_type: str, inputs: Sequence[str], **attrs: object) -> str:
        """Append one node with one output; returns the output's name."""
        return self.ops(op_type, inputs, 1, **attrs)[0]

    def ops(self, op_type: str, inputs: Sequence[str], n_out: int, **attrs: object) -> list[str]:
        """Append one node with ``n_out`` outputs; returns their names."""
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh(op_type), **attrs))
        return outs

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="onnxc-bench")
        model.ir_version = IR_VERSION
        # Output shapes as an exporter writes them: from ONNX shape inference.
        done = onnx.shape_inference.infer_shapes(model).graph
        inferred = {v.name: v.type for v in list(done.value_info) + list(done.output)}
        for out in model.graph.output:
            if out.name in inferred:
                out.type.CopyFrom(inferred[out.name])
        onnx.checker.check_model(model, full_check=False)
        return model

    # --- layers in torch.onnx's patterns -------------------------------------------------------

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, gain: float = 2.0) -> str:
        """Conv with bias (BatchNormalization folded in at export); He-scaled weights."""
        fan_in = cin // group * k * k
        w = self.weight((cout, cin // group, k, k), math.sqrt(gain / fan_in), "conv_w")
        b = self.weight((cout,), 0.01, "conv_b")
        pad = k // 2
        return self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=group, dilations=[1, 1])

    def linear(self, x: str, din: int, dout: int, bias: bool = True, std: float = 0.02) -> str:
        """nn.Linear on a 3-D input: MatMul by the transposed weight, then Add of the bias."""
        y = self.op("MatMul", [x, self.weight((din, dout), std, "linear_w")])
        return self.op("Add", [y, self.weight((dout,), 0.02, "linear_b")]) if bias else y

    def gemm(self, x: str, din: int, dout: int, trans_b: int = 1, std: float = 0.02) -> str:
        """nn.Linear on a 2-D input (transB=1) or HF Conv1D's addmm (transB=0)."""
        shape = (dout, din) if trans_b else (din, dout)
        return self.op("Gemm", [x, self.weight(shape, std, "gemm_w"), self.weight((dout,), 0.02, "gemm_b")], alpha=1.0, beta=1.0, transB=trans_b)

    def layer_norm(self, x: str, dim: int, eps: float = 1e-5) -> str:
        scale = self.const(1.0 + 0.1 * self.rng.standard_normal(dim, dtype=np.float32), "ln_scale")
        bias = self.const(0.1 * self.rng.standard_normal(dim, dtype=np.float32), "ln_bias")
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)

    def gelu_erf(self, x: str) -> str:
        """x * 0.5 * (1 + erf(x / sqrt(2))), as torch exports nn.GELU() before opset 20."""
        e = self.op("Erf", [self.op("Div", [x, self.const(1.4142135381698608)])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.const(1.0)])]), self.const(0.5)])

    def gelu_tanh(self, x: str) -> str:
        """GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
        cube = self.op("Mul", [self.op("Pow", [x, self.const(3.0)]), self.const(0.044715)])
        inner = self.op("Mul", [self.op("Add", [x, cube]), self.const(math.sqrt(2.0 / math.pi))])
        t = self.op("Add", [self.op("Tanh", [inner]), self.const(1.0)])
        return self.op("Mul", [self.op("Mul", [x, self.const(0.5)]), t])

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", [x, self.const(list(shape), "shape")])

    def heads(self, x: str, seq: int, heads: int, head_dim: int, perm: Sequence[int] = (0, 2, 1, 3)) -> str:
        """[1, seq, heads*head_dim] -> [1, heads, seq, head_dim] (or K^T with perm 0,2,3,1)."""
        return self.op("Transpose", [self.reshape(x, [1, seq, heads, head_dim])], perm=list(perm))

    def merge_heads(self, x: str, seq: int, hidden: int) -> str:
        return self.reshape(self.op("Transpose", [x], perm=[0, 2, 1, 3]), [1, seq, hidden])


# --- CNNs -------------------------------------------------------------------------------------


def _feeds_image(size: int, seed: int) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(seed).standard_normal((1, 3, size, size), dtype=np.float32)}


def resnet50(layers: int | None = None, seed: int = 0, size: int = 224, blocks: Sequence[int] = (3, 4, 6, 3)) -> BenchModel:
    """torchvision ResNet-50 v1.5 (stride on the 3x3 conv), BN folded: Conv/Relu/MaxPool/Add/
    GlobalAveragePool/Flatten/Gemm. ``layers`` caps the bottleneck blocks per stage."""
    if layers is not None:
        blocks = tuple(min(b, layers) for b in blocks)
    g = GraphBuilder("resnet50", seed)
    x = g.input("input", np.float32, [1, 3, size, size])
    x = g.op("Relu", [g.conv(x, 3, 64, 7, 2)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            cout = width * 4
            y = g.op("Relu", [g.conv(x, cin, width, 1)])
            y = g.op("Relu", [g.conv(y, width, width, 3, stride)])
            y = g.conv(y, width, cout, 1, gain=0.2)  # small last conv: residual sums stay bounded
            shortcut = g.conv(x, cin, cout, 1, stride) if i == 0 else x
            x = g.op("Relu", [g.op("Add", [y, shortcut])])
            cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    g.output(g.gemm(x, cin, 1000), name="logits")
    return BenchModel("resnet50", g.model(), _feeds_image(size, seed), f"ResNet-50 (blocks {list(blocks)}), 1x3x{size}x{size}")


def resnet_small(layers: int | None = None, seed: int = 0) -> BenchModel:
    """A quick ResNet: one bottleneck block per stage on 1x3x112x112 (same ops as ResNet-50)."""
    m = resnet50(seed=seed, size=112, blocks=(1, 1, 1, 1))
    m.name = "resnet_small"
    return m


def mobilenet_v2(layers: int | None = None, seed: int = 0, size: int = 224) -> BenchModel:
    """torchvision MobileNetV2: inverted residuals with depthwise convolutions, ReLU6 as Clip."""
    g = GraphBuilder("mobilenet_v2", seed)
    lo, hi = g.const(0.0), g.const(6.0)

    def relu6(v: str) -> str:
        return g.op("Clip", [v, lo, hi])

    x = g.input("input", np.float32, [1, 3, size, size])
    x = relu6(g.conv(x, 3, 32, 3, 2))
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = relu6(g.conv(x, cin, hidden, 1)) if t != 1 else x
            y = relu6(g.conv(y, hidden, hidden, 3, stride, group=hidden))
            y = g.conv(y, hidden, c, 1, gain=0.5)
            x = g.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = relu6(g.conv(x, cin, 1280, 1))
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    g.output(g.gemm(x, 1280, 1000), name="logits")
    return BenchModel("mobilenet_v2", g.model(), _feeds_image(size, seed), f"MobileNetV2, 1x3x{size}x{size}")


# --- transformers -----------------------------------------------------------------------------


def bert(layers: int | None = None, seed: int = 0, seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, vocab: int = 30522) -> BenchModel:
    """HF BertModel (base): embeddings (Gather), post-LN encoder layers, pooler (Gather, Gemm, Tanh).

    The attention mask comes in as int64 [1, seq] and becomes the additive mask
    ``(1 - mask) * -10000`` broadcast over heads, as the HF export computes it."""
    layers = 12 if layers is None else layers
    hd = hidden // heads
    g = GraphBuilder("bert", seed)
    ids = g.input("input_ids", np.int64, [1, seq])
    mask = g.input("attention_mask", np.int64, [1, seq])
    emb = g.op("Gather", [g.weight((vocab, hidden), 0.02, "word_emb"), ids], axis=0)
    pos = g.op("Gather", [g.weight((512, hidden), 0.02, "pos_emb"), g.const(np.arange(seq, dtype=np.int64).reshape(1, seq), "pos_ids")], axis=0)
    typ = g.op("Gather", [g.weight((2, hidden), 0.02, "type_emb"), g.const(np.zeros((1, seq), np.int64), "type_ids")], axis=0)
    x = g.layer_norm(g.op("Add", [g.op("Add", [emb, typ]), pos]), hidden, 1e-12)
    m = g.op("Cast", [g.op("Unsqueeze", [g.op("Unsqueeze", [mask, g.const([1])]), g.const([2])])], to=TensorProto.FLOAT)
    add_mask = g.op("Mul", [g.op("Sub", [g.const(1.0), m]), g.const(-10000.0)])
    for _ in range(layers):
        q = g.heads(g.linear(x, hidden, hidden), seq, heads, hd)
        kt = g.heads(g.linear(x, hidden, hidden), seq, heads, hd, perm=(0, 2, 3, 1))
        v = g.heads(g.linear(x, hidden, hidden), seq, heads, hd)
        scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, kt]), g.const(math.sqrt(hd))]), add_mask])
        ctx = g.merge_heads(g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v]), seq, hidden)
        x = g.layer_norm(g.op("Add", [g.linear(ctx, hidden, hidden), x]), hidden, 1e-12)
        h = g.linear(g.gelu_erf(g.linear(x, hidden, ffn)), ffn, hidden)
        x = g.layer_norm(g.op("Add", [h, x]), hidden, 1e-12)
    g.output(x, name="last_hidden_state")
    first = g.op("Gather", [x, g.const(np.array(0, dtype=np.int64), "cls")], axis=1)
    g.output(g.op("Tanh", [g.gemm(first, hidden, hidden)]), name="pooler_output")
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, vocab, (1, seq), dtype=np.int64), "attention_mask": np.ones((1, seq), np.int64)}
    return BenchModel("bert", g.model(), feeds, f"BERT-base ({layers} layers), seq {seq}")


def _gpt2_block(g: GraphBuilder, x: str, seq: int, hidden: int, heads: int, past: tuple[str, str] | None, mask: str | None) -> tuple[str, str, str]:
    """One GPT-2 block (pre-LN; Conv1D as Reshape/Gemm/Reshape); returns (x, key, value) with
    the keys/values including the past ones (the present cache)."""
    hd = hidden // heads

    def conv1d(v: str, din: int, dout: int) -> str:
        return g.reshape(g.gemm(g.reshape(v, [seq, din]), din, dout, trans_b=0), [1, seq, dout])

    h = g.layer_norm(x, hidden)
    q, k, v = g.ops("Split", [conv1d(h, hidden, 3 * hidden), g.const([hidden] * 3, "split")], 3, axis=2)
    q, k, v = (g.heads(t, seq, heads, hd) for t in (q, k, v))
    if past is not None:
        k = g.op("Concat", [past[0], k], axis=2)
        v = g.op("Concat", [past[1], v], axis=2)
    scores = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]), g.const(math.sqrt(hd))])
    if mask is not None:
        scores = g.op("Where", [mask, scores, g.const(np.float32(np.finfo(np.float32).min))])
    attn = g.merge_heads(g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v]), seq, hidden)
    x = g.op("Add", [conv1d(attn, hidden, hidden), x])
    h = conv1d(g.gelu_tanh(conv1d(g.layer_norm(x, hidden), hidden, 4 * hidden)), 4 * hidden, hidden)
    return g.op("Add", [h, x]), k, v


def _gpt2(name: str, layers: int | None, seed: int, seq: int, past_len: int, vocab: int = 50257, hidden: int = 768, heads: int = 12) -> BenchModel:
    layers = 12 if layers is None else layers
    g = GraphBuilder(name, seed)
    ids = g.input("input_ids", np.int64, [1, seq])
    wte = g.rng.standard_normal((vocab, hidden), dtype=np.float32) * np.float32(0.02)
    x = g.op("Gather", [g.const(wte, "wte"), ids], axis=0)
    positions = np.arange(past_len, past_len + seq, dtype=np.int64).reshape(1, seq)
    x = g.op("Add", [x, g.op("Gather", [g.weight((1024, hidden), 0.01, "wpe"), g.const(positions, "pos_ids")], axis=0)])
    mask = None
    if past_len == 0:  # prefill: causal mask; a decode step sees every cached position
        mask = g.const(np.tril(np.ones((seq, seq), dtype=np.bool_)).reshape(1, 1, seq, seq), "causal")
    presents = []
    feeds: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(seed + 1)
    for i in range(layers):
        past = None
        if past_len:
            past = (g.input(f"past_key_{i}", np.float32, [1, heads, past_len, hidden // heads]), g.input(f"past_value_{i}", np.float32, [1, heads, past_len, hidden // heads]))
            for p in past:
                feeds[p] = rng.standard_normal((1, heads, past_len, hidden // heads), dtype=np.float32)
        x, k, v = _gpt2_block(g, x, seq, hidden, heads, past, mask)
        presents += [k, v]
    x = g.layer_norm(x, hidden)
    g.output(g.op("MatMul", [x, g.const(np.ascontiguousarray(wte.T), "lm_head")]), name="logits")
    if past_len:
        for i in range(layers):
            g.output(presents[2 * i], name=f"present_key_{i}")
            g.output(presents[2 * i + 1], name=f"present_value_{i}")
    feeds["input_ids"] = np.random.default_rng(seed).integers(0, vocab, (1, seq), dtype=np.int64)
    what = f"seq {seq}" if not past_len else f"1 token, KV cache of {past_len}"
    return BenchModel(name, g.model(), feeds, f"GPT-2 small ({layers} layers), {what}")


def gpt2(layers: int | None = None, seed: int = 0) -> BenchModel:
    """GPT-2 small on a 64-token prompt (causal mask by Where), logits over the 50257 tokens."""
    return _gpt2("gpt2", layers, seed, seq=64, past_len=0)


def gpt2_decode(layers: int | None = None, seed: int = 0) -> BenchModel:
    """One GPT-2 small decode step: one token, past keys/values [1,12,63,64] per layer as inputs,
    logits and the present keys/values (Concat of past and new) as outputs."""
    return _gpt2("gpt2_decode", layers, seed, seq=1, past_len=63)


def vit(layers: int | None = None, seed: int = 0, size: int = 224, patch: int = 16, hidden: int = 384, heads: int = 6, mlp: int = 1536) -> BenchModel:
    """timm ViT-S/16: patch Conv, class token Concat, position Add, pre-LN blocks with a fused qkv
    projection split by Reshape/Transpose/Gather, GELU by Erf, head on the class token."""
    layers = 12 if layers is None else layers
    hd = hidden // heads
    n = (size // patch) ** 2
    tokens = n + 1
    g = GraphBuilder("vit", seed)
    x = g.input("input", np.float32, [1, 3, size, size])
    w = g.weight((hidden, 3, patch, patch), math.sqrt(1.0 / (3 * patch * patch)), "patch_w")
    x = g.op("Conv", [x, w, g.weight((hidden,), 0.02, "patch_b")], kernel_shape=[patch, patch], strides=[patch, patch])
    x = g.op("Transpose", [g.reshape(x, [1, hidden, n])], perm=[0, 2, 1])
    x = g.op("Concat", [g.weight((1, 1, hidden), 0.02, "cls"), x], axis=1)
    x = g.op("Add", [x, g.weight((1, tokens, hidden), 0.02, "pos")])
    for _ in range(layers):
        qkv = g.op("Transpose", [g.reshape(g.linear(g.layer_norm(x, hidden, 1e-6), hidden, 3 * hidden), [1, tokens, 3, heads, hd])], perm=[2, 0, 3, 1, 4])
        q, k, v = (g.op("Gather", [qkv, g.const(np.array(i, dtype=np.int64), "idx")], axis=0) for i in range(3))
        scores = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]), g.const(hd**-0.5)])
        attn = g.merge_heads(g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v]), tokens, hidden)
        x = g.op("Add", [x, g.linear(attn, hidden, hidden)])
        x = g.op("Add", [x, g.linear(g.gelu_erf(g.linear(g.layer_norm(x, hidden, 1e-6), hidden, mlp)), mlp, hidden)])
    x = g.layer_norm(x, hidden, 1e-6)
    first = g.op("Gather", [x, g.const(np.array(0, dtype=np.int64), "cls_idx")], axis=1)
    g.output(g.gemm(first, hidden, 1000), name="logits")
    return BenchModel("vit", g.model(), _feeds_image(size, seed), f"ViT-S/16 ({layers} layers), 1x3x{size}x{size}")


def llama(layers: int | None = None, seed: int = 0, seq: int = 64, hidden: int = 1024, heads: int = 16, kv_heads: int = 4, ffn: int = 2816) -> BenchModel:
    """A stack of Llama decoder blocks on hidden states [1, seq, hidden]: RMSNorm
    (Pow/ReduceMean/Add/Sqrt/Div/Mul), RoPE (Mul/Add with Slice/Neg/Concat rotate_half, cos/sin
    tables as constants), grouped-query attention (repeat_kv by Unsqueeze/Expand/Reshape), causal
    additive mask, SwiGLU MLP (Sigmoid/Mul), no biases, final RMSNorm."""
    layers = 4 if layers is None else layers
    hd = hidden // heads
    g = GraphBuilder("llama", seed)
    x = g.input("hidden_states", np.float32, [1, seq, hidden])
    inv = 1.0 / (10000.0 ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = np.outer(np.arange(seq, dtype=np.float64), inv)
    ang = np.concatenate([ang, ang], axis=-1).reshape(1, 1, seq, hd)
    cos, sin = g.const(np.cos(ang).astype(np.float32), "cos"), g.const(np.sin(ang).astype(np.float32), "sin")
    causal = g.const(np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), 1).reshape(1, 1, seq, seq), "mask")

    def rms_norm(v: str) -> str:
        var = g.op("ReduceMean", [g.op("Pow", [v, g.const(2.0)])], axes=[-1], keepdims=1)
        inv_rms = g.op("Div", [g.const(1.0), g.op("Sqrt", [g.op("Add", [var, g.const(1e-6)])])])
        return g.op("Mul", [g.const(1.0 + 0.1 * g.rng.standard_normal(hidden, dtype=np.float32), "rms_w"), g.op("Mul", [v, inv_rms])])

    def rope(v: str) -> str:
        x1 = g.op("Slice", [v, g.const([0]), g.const([hd // 2]), g.const([3])])
        x2 = g.op("Slice", [v, g.const([hd // 2]), g.const([hd]), g.const([3])])
        rot = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
        return g.op("Add", [g.op("Mul", [v, cos]), g.op("Mul", [rot, sin])])

    def repeat_kv(v: str) -> str:
        rep = heads // kv_heads
        e = g.op("Expand", [g.op("Unsqueeze", [v, g.const([2])]), g.const([1, kv_heads, rep, seq, hd])])
        return g.reshape(e, [1, heads, seq, hd])

    for _ in range(layers):
        h = rms_norm(x)
        q = rope(g.heads(g.linear(h, hidden, hidden, bias=False), seq, heads, hd))
        k = repeat_kv(rope(g.heads(g.linear(h, hidden, kv_heads * hd, bias=False), seq, kv_heads, hd)))
        v = repeat_kv(g.heads(g.linear(h, hidden, kv_heads * hd, bias=False), seq, kv_heads, hd))
        scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]), g.const(math.sqrt(hd))]), causal])
        attn = g.merge_heads(g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v]), seq, hidden)
        x = g.op("Add", [x, g.linear(attn, hidden, hidden, bias=False)])
        h = rms_norm(x)
        gate = g.linear(h, hidden, ffn, bias=False)
        up = g.linear(h, hidden, ffn, bias=False)
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
        x = g.op("Add", [x, g.linear(act, ffn, hidden, bias=False)])
    g.output(rms_norm(x), name="output")
    feeds = {"hidden_states": np.random.default_rng(seed).standard_normal((1, seq, hidden), dtype=np.float32)}
    return BenchModel("llama", g.model(), feeds, f"Llama-style decoder ({layers} blocks, GQA {heads}/{kv_heads}), seq {seq}")


#: name -> builder(layers=None, seed=0); ``layers`` shrinks the transformers (and caps ResNet
#: blocks per stage), the CNNs other than ResNet ignore it.
BUILDERS: dict[str, Callable[..., BenchModel]] = {
    "resnet50": resnet50,
    "mobilenet_v2": mobilenet_v2,
    "bert": bert,
    "gpt2": gpt2,
    "gpt2_decode": gpt2_decode,
    "vit": vit,
    "llama": llama,
    "resnet_small": resnet_small,
}


def build(name: str, layers: int | None = None, seed: int = 0) -> BenchModel:
    """Build the benchmark model ``name`` (a key of ``BUILDERS``)."""
    if name not in BUILDERS:
        raise KeyError(f"unknown benchmark model {name!r} (known: {', '.join(BUILDERS)})")
    return BUILDERS[name](layers=layers, seed=seed)


def pinned(model: onnx.ModelProto, sizes: Mapping[str, int]) -> onnx.ModelProto:
    """A copy of ``model`` with its inputs' ``dim_param`` dims named in ``sizes`` set to those
    values: the static twin of a dynamic-axes model (an export without ``dynamic_axes``: same
    graph, same weights, the in-graph shape computations as they are)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in sizes:
                d.dim_value = sizes[d.dim_param]
    return out


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for every graph input without an initializer (unknown dims become 1):
    floats uniform in [0, 1), integers in [0, 10), booleans random."""
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dtype.kind == "f":
            feeds[vi.name] = rng.random(shape, dtype=np.float32).astype(dtype)
        elif dtype.kind == "b":
            feeds[vi.name] = rng.random(shape) < 0.5
        else:
            feeds[vi.name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


# --- hub architectures with dynamic axes (issue 10, items 5-6) ----------------------------------
#
# The builders below write the graphs torch.onnx's classic exporter writes with ``dynamic_axes``:
# graph inputs carry ``dim_param`` names ("batch", "seq", "frames") and every shape the model
# needs at run time is computed in the graph (``Shape`` -> ``Gather`` -> ``Unsqueeze`` ->
# ``Concat`` -> ``Reshape``, ``Range`` over a ``Shape``), so one compiled model serves every
# batch and sequence length. Small widths by default: the op patterns matter for conformance.


def _dim(g: GraphBuilder, x: str, axis: int) -> str:
    """``x.size(axis)`` as the exporter writes it: a 1-D int64 [1] from Shape/Gather/Unsqueeze."""
    d = g.op("Gather", [g.op("Shape", [x]), g.const(np.array(axis, dtype=np.int64), "axis")], axis=0)
    return g.op("Unsqueeze", [d, g.const([0])])


def _dyn_reshape(g: GraphBuilder, x: str, parts: Sequence[str | int]) -> str:
    """``x.view(*parts)`` where a part is a run-time dim (a name from ``_dim``) or a constant."""
    pieces = [p if isinstance(p, str) else g.const([p], "dim") for p in parts]
    return g.op("Reshape", [x, g.op("Concat", pieces, axis=0)])


def _silu(g: GraphBuilder, x: str) -> str:
    """nn.SiLU: torch.onnx (opset < 22) writes ``x * Sigmoid(x)``."""
    return g.op("Mul", [x, g.op("Sigmoid", [x])])


def efficientnet(layers: int | None = None, seed: int = 0, size: int = 64, width: float = 0.25) -> BenchModel:
    """torchvision EfficientNet-B0 (BN folded), widths scaled by ``width``: stem Conv + SiLU, MBConv
    blocks (1x1 expand + SiLU, depthwise 3x3/5x5 + SiLU, squeeze-excite as GlobalAveragePool ->
    1x1 Conv -> SiLU -> 1x1 Conv -> Sigmoid -> Mul, 1x1 project, residual Add), head Conv + SiLU,
    GlobalAveragePool, Flatten, Gemm. Input [batch, 3, size, size] with a dynamic batch.
    ``layers`` caps the blocks per stage."""

    def ch(c: int) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    g = GraphBuilder("efficientnet", seed)
    x = g.input("input", np.float32, ["batch", 3, size, size])
    cin = ch(32)
    x = _silu(g, g.conv(x, 3, cin, 3, 2))
    # (expand ratio, kernel, stride, channels, repeats) of B0's seven stages
    for t, k, s, c, n in ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)):
        cout = ch(c)
        for i in range(n if layers is None else min(n, layers)):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = _silu(g, g.conv(x, cin, hidden, 1)) if t != 1 else x
            y = _silu(g, g.conv(y, hidden, hidden, k, stride, group=hidden))
            squeezed = max(1, cin // 4)
            se = g.op("GlobalAveragePool", [y])
            se = _silu(g, g.conv(se, hidden, squeezed, 1))
            se = g.op("Sigmoid", [g.conv(se, squeezed, hidden, 1)])
            y = g.op("Mul", [y, se])
            y = g.conv(y, hidden, cout, 1, gain=0.5)
            x = g.op("Add", [y, x]) if stride == 1 and cin == cout else y
            cin = cout
    head = ch(1280)
    x = _silu(g, g.conv(x, cin, head, 1))
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    g.output(g.gemm(x, head, 1000), name="logits")
    return BenchModel("efficientnet", g.model(), _feeds_image(size, seed), f"EfficientNet-B0 (width x{width}), [batch]x3x{size}x{size}")


def t5_encoder(layers: int | None = None, seed: int = 0, seq: int = 12, d_model: int = 64, heads: int = 4, d_ff: int = 128, vocab: int = 100, buckets: int = 32, max_distance: int = 128) -> BenchModel:
    """HF T5 v1.1 encoder (T5EncoderModel) with dynamic batch and sequence: token Gather, T5
    LayerNorm (RMS without mean: Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul, then the weight), bias-free
    attention without 1/sqrt(d) scaling, the bidirectional relative position bias computed in the
    graph (Range over Shape, Sub, the log-bucket formula with Greater/Abs/Less/Log/Cast/Min/Where,
    Gather from the bias table, Transpose/Unsqueeze) plus the padding mask ``(1 - mask) * finfo.min``
    added to the scores, gated-GELU FFN (gelu_new(wi_0 x) * wi_1 x, wo), final LayerNorm."""
    layers = 2 if layers is None else layers
    hd = d_model // heads
    g = GraphBuilder("t5_encoder", seed)
    ids = g.input("input_ids", np.int64, ["batch", "seq"])
    mask = g.input("attention_mask", np.int64, ["batch", "seq"])
    x = g.op("Gather", [g.weight((vocab, d_model), 1.0, "shared"), ids], axis=0)
    batch = _dim(g, ids, 0)

    def t5_norm(v: str) -> str:
        var = g.op("ReduceMean", [g.op("Pow", [v, g.const(2.0)])], axes=[-1], keepdims=1)
        v = g.op("Mul", [v, g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [var, g.const(1e-6)])])])])
        return g.op("Mul", [g.const(1.0 + 0.1 * g.rng.standard_normal(d_model, dtype=np.float32), "ln_w"), v])

    # relative_position[q, k] = k - q, bucketed (T5Attention._relative_position_bucket, bidirectional)
    n = g.op("Gather", [g.op("Shape", [ids]), g.const(np.array(1, dtype=np.int64), "axis")], axis=0)
    pos = g.op("Range", [g.const(np.array(0, dtype=np.int64), "start"), n, g.const(np.array(1, dtype=np.int64), "step")])
    rel = g.op("Sub", [g.op("Unsqueeze", [pos, g.const([0])]), g.op("Unsqueeze", [pos, g.const([1])])])
    half = buckets // 2
    max_exact = half // 2
    sign = g.op("Mul", [g.op("Cast", [g.op("Greater", [rel, g.const(np.array(0, dtype=np.int64), "zero")])], to=TensorProto.INT64), g.const(np.array(half, dtype=np.int64), "half")])
    dist = g.op("Abs", [rel])
    small = g.op("Less", [dist, g.const(np.array(max_exact, dtype=np.int64), "max_exact")])
    logd = g.op("Log", [g.op("Div", [g.op("Cast", [dist], to=TensorProto.FLOAT), g.const(float(max_exact))])])
    scaled = g.op("Mul", [g.op("Div", [logd, g.const(math.log(max_distance / max_exact))]), g.const(float(half - max_exact))])
    large = g.op("Add", [g.const(np.array(max_exact, dtype=np.int64), "max_exact"), g.op("Cast", [scaled], to=TensorProto.INT64)])
    large = g.op("Min", [large, g.const(np.array(half - 1, dtype=np.int64), "last")])
    bucket = g.op("Add", [sign, g.op("Where", [small, dist, large])])
    bias = g.op("Gather", [g.weight((buckets, heads), 1.0, "rel_bias"), bucket], axis=0)  # [q, k, heads]
    bias = g.op("Unsqueeze", [g.op("Transpose", [bias], perm=[2, 0, 1]), g.const([0])])  # [1, heads, q, k]
    m = g.op("Cast", [g.op("Unsqueeze", [mask, g.const([1, 2])])], to=TensorProto.FLOAT)
    add_mask = g.op("Mul", [g.op("Sub", [g.const(1.0), m]), g.const(np.float32(np.finfo(np.float32).min))])
    position_bias = g.op("Add", [bias, add_mask])  # [batch, heads, q, k]

    def split(v: str) -> str:
        return g.op("Transpose", [_dyn_reshape(g, v, [batch, -1, heads, hd])], perm=[0, 2, 1, 3])

    for _ in range(layers):
        h = t5_norm(x)
        q, k, v = (split(g.linear(h, d_model, d_model, bias=False, std=d_model**-0.5)) for _ in range(3))
        scores = g.op("Add", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]), position_bias])
        ctx = g.op("Transpose", [g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])], perm=[0, 2, 1, 3])
        ctx = _dyn_reshape(g, ctx, [batch, -1, d_model])
        x = g.op("Add", [x, g.linear(ctx, d_model, d_model, bias=False, std=d_model**-0.5)])
        h = t5_norm(x)
        gate = g.gelu_tanh(g.linear(h, d_model, d_ff, bias=False, std=d_model**-0.5))
        up = g.linear(h, d_model, d_ff, bias=False, std=d_model**-0.5)
        x = g.op("Add", [x, g.linear(g.op("Mul", [gate, up]), d_ff, d_model, bias=False, std=d_ff**-0.5)])
    g.output(t5_norm(x), name="last_hidden_state")
    rng = np.random.default_rng(seed)
    attn = np.ones((1, seq), np.int64)
    attn[:, seq - seq // 4 :] = 0  # right padding, as a tokenizer pads a shorter sentence
    feeds = {"input_ids": rng.integers(0, vocab, (1, seq), dtype=np.int64), "attention_mask": attn}
    return BenchModel("t5_encoder", g.model(), feeds, f"T5 v1.1 encoder ({layers} layers), [batch, seq] (seq {seq} here)")


def _sinusoids(length: int, channels: int) -> np.ndarray:
    """Whisper's sinusoidal position table [length, channels]: sin half, then cos half."""
    inc = math.log(10000) / (channels // 2 - 1)
    inv = np.exp(-inc * np.arange(channels // 2, dtype=np.float64))
    t = np.arange(length, dtype=np.float64)[:, None] * inv[None, :]
    return np.concatenate([np.sin(t), np.cos(t)], axis=1).astype(np.float32)


def whisper_encoder(layers: int | None = None, seed: int = 0, frames: int = 32, mels: int = 80, d_model: int = 64, heads: int = 4, ffn: int = 128, max_positions: int = 64) -> BenchModel:
    """HF WhisperEncoder with dynamic batch and frame count: log-mel input [batch, mels, frames],
    two Conv1d (k3, the second stride 2) each followed by GELU (Erf form), Transpose, the
    sinusoidal position table Sliced to the run-time length (Shape/Gather), pre-LN blocks
    (q scaled before the MatMul, k without bias, Reshape by run-time batch), final LayerNorm."""
    layers = 2 if layers is None else layers
    hd = d_model // heads
    g = GraphBuilder("whisper_encoder", seed)
    x = g.input("input_features", np.float32, ["batch", mels, "frames"])

    def conv1d(v: str, cin: int, stride: int) -> str:
        w = g.weight((d_model, cin, 3), math.sqrt(1.0 / (cin * 3)), "conv1d_w")
        return g.op("Conv", [v, w, g.weight((d_model,), 0.02, "conv1d_b")], kernel_shape=[3], strides=[stride], pads=[1, 1], dilations=[1], group=1)

    x = g.gelu_erf(conv1d(x, mels, 1))
    x = g.gelu_erf(conv1d(x, d_model, 2))
    x = g.op("Transpose", [x], perm=[0, 2, 1])  # [batch, seq, d_model]
    batch, n = _dim(g, x, 0), _dim(g, x, 1)
    pos = g.op("Slice", [g.const(_sinusoids(max_positions, d_model), "embed_positions"), g.const([0]), n, g.const([0])])
    x = g.op("Add", [x, pos])

    def split(v: str) -> str:
        return g.op("Transpose", [_dyn_reshape(g, v, [batch, -1, heads, hd])], perm=[0, 2, 1, 3])

    for _ in range(layers):
        h = g.layer_norm(x, d_model)
        q = split(g.op("Mul", [g.linear(h, d_model, d_model, std=d_model**-0.5), g.const(hd**-0.5)]))
        k = split(g.linear(h, d_model, d_model, bias=False, std=d_model**-0.5))
        v = split(g.linear(h, d_model, d_model, std=d_model**-0.5))
        probs = g.op("Softmax", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])], axis=-1)
        ctx = _dyn_reshape(g, g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3]), [batch, n, d_model])
        x = g.op("Add", [x, g.linear(ctx, d_model, d_model, std=d_model**-0.5)])
        h = g.gelu_erf(g.linear(g.layer_norm(x, d_model), d_model, ffn, std=d_model**-0.5))
        x = g.op("Add", [x, g.linear(h, ffn, d_model, std=ffn**-0.5)])
    g.output(g.layer_norm(x, d_model), name="last_hidden_state")
    feeds = {"input_features": np.random.default_rng(seed).standard_normal((1, mels, frames), dtype=np.float32)}
    return BenchModel("whisper_encoder", g.model(), feeds, f"Whisper encoder ({layers} layers), [batch, {mels}, frames] (frames {frames} here)")


def yolo(layers: int | None = None, seed: int = 0, size: int = 64, classes: int = 4, top_k: int = 32, max_det: int = 10) -> BenchModel:
    """A YOLOv5-style detector with dynamic batch: Conv + SiLU backbone (a residual bottleneck per
    stage), a 1x1 detection Conv with 3 anchors x (5 + classes) channels, the exported ``Detect``
    head (Reshape by run-time batch, Transpose, Sigmoid, xy = (2 s - 0.5 + grid) * stride,
    wh = (2 s)^2 * anchor, Concat, Reshape to [batch, anchors, 5 + classes]), then the
    post-processing: boxes xywh -> xyxy, TopK over objectness, GatherElements of the top boxes and
    class scores, NonMaxSuppression, and GatherND of the kept boxes."""
    layers = 1 if layers is None else layers
    na, no = 3, 5 + classes
    g = GraphBuilder("yolo", seed)
    x = g.input("images", np.float32, ["batch", 3, size, size])
    cin = 3
    for c in (16, 32, 64):
        x = _silu(g, g.conv(x, cin, c, 3, 2))
        for _ in range(layers):
            y = _silu(g, g.conv(_silu(g, g.conv(x, c, c // 2, 1)), c // 2, c, 3, gain=0.5))
            x = g.op("Add", [x, y])
        cin = c
    stride = 8
    ny = nx = size // stride
    batch = _dim(g, x, 0)
    p = g.op("Conv", [x, g.weight((na * no, cin, 1, 1), math.sqrt(1.0 / cin), "det_w"), g.weight((na * no,), 0.5, "det_b")], kernel_shape=[1, 1])
    p = g.op("Sigmoid", [g.op("Transpose", [_dyn_reshape(g, p, [batch, na, no, ny, nx])], perm=[0, 1, 3, 4, 2])])
    yv, xv = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    grid = np.stack([xv, yv], -1).reshape(1, 1, ny, nx, 2).astype(np.float32) - 0.5
    anchors = (np.array([[10, 13], [16, 30], [33, 23]], np.float32)).reshape(1, na, 1, 1, 2)

    def cut(v: str, lo: int, hi: int) -> str:
        return g.op("Slice", [v, g.const([lo]), g.const([hi]), g.const([4])])

    xy = g.op("Mul", [g.op("Add", [g.op("Mul", [cut(p, 0, 2), g.const(2.0)]), g.const(grid, "grid")]), g.const(float(stride))])
    wh = g.op("Mul", [g.op("Pow", [g.op("Mul", [cut(p, 2, 4), g.const(2.0)]), g.const(2.0)]), g.const(anchors, "anchor_grid")])
    pred = _dyn_reshape(g, g.op("Concat", [xy, wh, cut(p, 4, no)], axis=4), [batch, -1, no])  # [batch, N, 5 + classes]
    g.output(pred, name="predictions")

    def cols(lo: int, hi: int) -> str:
        return g.op("Slice", [pred, g.const([lo]), g.const([hi]), g.const([2])])

    half = g.op("Div", [cols(2, 4), g.const(2.0)])
    boxes = g.op("Concat", [g.op("Sub", [cols(0, 2), half]), g.op("Add", [cols(0, 2), half])], axis=2)  # [batch, N, 4] xyxy
    obj = g.op("Squeeze", [cols(4, 5), g.const([2])])  # [batch, N]
    cls = g.op("Mul", [cols(5, no), cols(4, 5)])  # class confidence = cls * obj
    _, top = g.ops("TopK", [obj, g.const([top_k])], 2, axis=1, largest=1, sorted=1)  # [batch, K]
    idx = g.op("Unsqueeze", [top, g.const([2])])
    top_boxes = g.op("GatherElements", [boxes, g.op("Expand", [idx, g.op("Concat", [batch, g.const([top_k, 4])], axis=0)])], axis=1)
    top_cls = g.op("GatherElements", [cls, g.op("Expand", [idx, g.op("Concat", [batch, g.const([top_k, classes])], axis=0)])], axis=1)
    nms_scores = g.op("Transpose", [top_cls], perm=[0, 2, 1])  # [batch, classes, K]
    sel = g.op("NonMaxSuppression", [top_boxes, nms_scores, g.const([max_det]), g.const(np.array([0.45], np.float32)), g.const(np.array([0.25], np.float32))])
    g.output(sel, np.int64, name="selected_indices")  # [num, 3]: batch, class, box
    where = g.op("Gather", [sel, g.const([0, 2])], axis=1)  # [num, 2]: batch, box
    g.output(g.op("GatherND", [top_boxes, where]), name="detections")  # [num, 4]
    feeds = {"images": np.random.default_rng(seed).standard_normal((1, 3, size, size), dtype=np.float32)}
    return BenchModel("yolo", g.model(), feeds, f"YOLOv5-style detector, [batch]x3x{size}x{size}, {classes} classes")
