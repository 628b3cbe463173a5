"""Random number ops compiled by onnxc (transforms/lowering/random.py): RandomUniform(Like),
RandomNormal(Like), Bernoulli, Multinomial and training-mode Dropout.

What is checked, since random outputs have no single right answer:
- the generator itself: a Philox4x32-10 written here from the published algorithm is checked on
  Random123's known-answer vectors, then the compiled RandomUniform's bits must equal it exactly
  (counter = linear element index, key = the 64 bits of the float64 seed);
- shapes and element types of every op and dtype, static and (for the Like ops) dynamic shapes;
- reproducibility: a seeded op gives the same values in every compile and run, different seeds
  give different values, and two unseeded ops of one model do not share a stream;
- statistics over 1e5 samples: means and variances within 5 standard errors, Bernoulli rates,
  Multinomial class frequencies, Dropout's keep rate and scaling.
"""

from __future__ import annotations

import struct

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxc.compiler import compile as onnxc_compile

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF
N = 100_000
Z = 5.0  # tolerance in standard errors

# Random123's kat_vectors (counter[4], key[2] -> output[4]) for philox4x32 with 10 rounds.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK, MASK, MASK, MASK), (MASK, MASK), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0), (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def philox4x32_10(ctr: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Reference Philox4x32-10 over counters `ctr` ([n, 4] uint32): [n, 4] uint32 outputs."""
    c = [ctr[:, i].astype(np.uint64) for i in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        p0 = np.uint64(M0) * c[0]
        p1 = np.uint64(M1) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(MASK)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(MASK)
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0, k1 = (k0 + np.uint64(W0)) & np.uint64(MASK), (k1 + np.uint64(W1)) & np.uint64(MASK)
    return np.stack(c, axis=1).astype(np.uint32)


def seed_key(seed: float) -> tuple[int, int]:
    bits = struct.unpack("<Q", struct.pack("<d", seed))[0]
    return bits & MASK, bits >> 32


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], opset: int = 22) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "random", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _vi(name: str, dtype: int, shape: list[int | str | None]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _generator(op: str, shape: list[int], dtype: int = TensorProto.FLOAT, **attrs: object) -> onnx.ModelProto:
    return _model([helper.make_node(op, [], ["y"], shape=shape, dtype=dtype, **attrs)], [], [_vi("y", dtype, shape)])


# --- the generator ---------------------------------------------------------------------------------


def test_reference_philox_matches_random123_vectors() -> None:
    for ctr, key, want in KAT:
        got = philox4x32_10(np.array([ctr], dtype=np.uint32), key)[0]
        assert [int(v) for v in got] == list(want)


def test_compiled_uniform_bits_are_philox() -> None:
    """RandomUniform(seed) element i is (word0 >> 8) * 2^-24 of Philox((i, 0, 0, 0), seed key);
    with seed 0 element 0 is the first known-answer vector."""
    shape = [3, 5, 7]
    for seed in (0.0, 1.5, -7.0):
        (got,) = onnxc_compile(_generator("RandomUniform", shape, seed=seed))()
        n = int(np.prod(shape))
        ctr = np.zeros((n, 4), dtype=np.uint32)
        ctr[:, 0] = np.arange(n)
        words = philox4x32_10(ctr, seed_key(seed))
        want = ((words[:, 0] >> 8).astype(np.float64) * 2.0**-24).astype(np.float32).reshape(shape)
        np.testing.assert_array_equal(got, want)
    (first,) = onnxc_compile(_generator("RandomUniform", [1], seed=0.0))()
    assert first[0] == np.float32((0x6627E8D5 >> 8) * 2.0**-24)


def test_uniform_f64_uses_53_bits() -> None:
    (got,) = onnxc_compile(_generator("RandomUniform", [64], TensorProto.DOUBLE, seed=2.0))()
    ctr = np.zeros((64, 4), dtype=np.uint32)
    ctr[:, 0] = np.arange(64)
    w = philox4x32_10(ctr, seed_key(2.0)).astype(np.uint64)
    want = (((w[:, 0] >> np.uint64(5)) << np.uint64(26)) | (w[:, 1] >> np.uint64(6))).astype(np.float64) * 2.0**-53
    np.testing.assert_array_equal(got, want)


# --- shapes and types ------------------------------------------------------------------------------

FLOATS = [(TensorProto.FLOAT16, np.float16), (TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64)]


@pytest.mark.parametrize("onnx_dtype,np_dtype", FLOATS, ids=["f16", "f32", "f64"])
@pytest.mark.parametrize("op", ["RandomUniform", "RandomNormal"])
def test_generator_shapes_and_types(op: str, onnx_dtype: int, np_dtype: type) -> None:
    (y,) = onnxc_compile(_generator(op, [2, 3, 4], onnx_dtype, seed=1.0))()
    assert y.shape == (2, 3, 4) and y.dtype == np_dtype
    assert np.isfinite(y).all() and len(np.unique(y)) > 12
    if op == "RandomUniform":
        assert (y >= 0).all() and (y < 1).all()


@pytest.mark.parametrize("op", ["RandomUniformLike", "RandomNormalLike"])
def test_like_ops_take_a_dynamic_shape_and_the_dtype(op: str) -> None:
    node = helper.make_node(op, ["x"], ["y"], dtype=TensorProto.DOUBLE, seed=4.0)
    model = _model([node], [_vi("x", TensorProto.FLOAT, ["n", 3])], [_vi("y", TensorProto.DOUBLE, ["n", 3])])
    f = onnxc_compile(model)
    for n in (1, 5):
        (y,) = f(np.zeros((n, 3), np.float32))
        assert y.shape == (n, 3) and y.dtype == np.float64
    # Without dtype the input's type is kept.
    node = helper.make_node(op, ["x"], ["y"])
    (y,) = onnxc_compile(_model([node], [_vi("x", TensorProto.FLOAT16, [4])], [_vi("y", TensorProto.FLOAT16, [4])]))(np.zeros(4, np.float16))
    assert y.dtype == np.float16


@pytest.mark.parametrize(
    "onnx_dtype,np_dtype",
    [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64), (TensorProto.INT32, np.int32), (TensorProto.BOOL, np.bool_)],
    ids=["f32", "f64", "i32", "bool"],
)
def test_bernoulli_types(onnx_dtype: int, np_dtype: type) -> None:
    node = helper.make_node("Bernoulli", ["p"], ["y"], dtype=onnx_dtype, seed=0.0)
    (y,) = onnxc_compile(_model([node], [_vi("p", TensorProto.FLOAT, [2, 50])], [_vi("y", onnx_dtype, [2, 50])]))(np.full((2, 50), 0.5, np.float32))
    assert y.shape == (2, 50) and y.dtype == np_dtype
    assert set(np.unique(y.astype(np.int64))) == {0, 1}


# --- reproducibility ---------------------------------------------------------------------------------


def test_seeded_is_reproducible_and_seed_dependent() -> None:
    a = onnxc_compile(_generator("RandomNormal", [100], seed=3.0))
    b = onnxc_compile(_generator("RandomNormal", [100], seed=3.0))
    (y1,), (y2,), (y3,) = a(), a(), b()
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, y3)
    (other,) = onnxc_compile(_generator("RandomNormal", [100], seed=4.0))()
    assert not np.any(other == y1)


def test_unseeded_ops_use_distinct_streams() -> None:
    nodes = [helper.make_node("RandomUniform", [], [n], shape=[1000]) for n in ("a", "b")]
    model = _model(nodes, [], [_vi("a", TensorProto.FLOAT, [1000]), _vi("b", TensorProto.FLOAT, [1000])])
    f = onnxc_compile(model)
    a, b = f()
    assert np.mean(a == b) < 0.01
    a2, _ = f()
    np.testing.assert_array_equal(a, a2)  # no state across runs of one compiled model


# --- statistics ----------------------------------------------------------------------------------------


def _within(value: float, expected: float, se: float) -> None:
    assert abs(value - expected) <= Z * se, f"{value} vs {expected} (standard error {se})"


@pytest.mark.parametrize("onnx_dtype", [TensorProto.FLOAT, TensorProto.DOUBLE], ids=["f32", "f64"])
def test_uniform_statistics(onnx_dtype: int) -> None:
    lo, hi = -2.0, 3.0
    (y,) = onnxc_compile(_generator("RandomUniform", [N], onnx_dtype, low=lo, high=hi, seed=11.0))()
    y = y.astype(np.float64)
    assert y.min() >= lo and y.max() < hi
    w = hi - lo
    _within(y.mean(), (lo + hi) / 2, w * np.sqrt(1 / 12 / N))
    _within(y.var(), w * w / 12, w * w * np.sqrt((1 / 80 - 1 / 144) / N))
    counts = np.histogram(y, bins=10, range=(lo, hi))[0]
    p = 0.1
    assert np.all(np.abs(counts - N * p) <= Z * np.sqrt(N * p * (1 - p)))


@pytest.mark.parametrize("onnx_dtype", [TensorProto.FLOAT, TensorProto.DOUBLE], ids=["f32", "f64"])
def test_normal_statistics(onnx_dtype: int) -> None:
    mean, scale = 1.5, 2.0
    (y,) = onnxc_compile(_generator("RandomNormal", [N], onnx_dtype, mean=mean, scale=scale, seed=12.0))()
    y = y.astype(np.float64)
    _within(y.mean(), mean, scale / np.sqrt(N))
    _within(y.var(), scale**2, scale**2 * np.sqrt(2 / N))
    # Tails: P(|z| > 2) = 4.55%.
    frac = np.mean(np.abs(y - mean) > 2 * scale)
    _within(frac, 0.0455, np.sqrt(0.0455 * 0.9545 / N))


def test_bernoulli_rates() -> None:
    probs = np.array([0.0, 0.1, 0.5, 0.9, 1.0], dtype=np.float32)
    p = np.repeat(probs[:, None], N // 5, axis=1)
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=5.0)
    (y,) = onnxc_compile(_model([node], [_vi("p", TensorProto.FLOAT, list(p.shape))], [_vi("y", TensorProto.FLOAT, list(p.shape))]))(p)
    n = p.shape[1]
    for row, q in zip(y, probs):
        _within(row.mean(), float(q), np.sqrt(q * (1 - q) / n) + 1e-12)


def test_multinomial_frequencies() -> None:
    probs = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.0, 0.25, 0.05]])
    logits = np.log(np.maximum(probs, 1e-30)).astype(np.float32) + np.float32(3.0)  # unnormalized
    node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=N // 2, seed=9.0, dtype=TensorProto.INT64)
    model = _model([node], [_vi("x", TensorProto.FLOAT, [2, 4])], [_vi("y", TensorProto.INT64, [2, N // 2])])
    (y,) = onnxc_compile(model)(logits)
    assert y.dtype == np.int64 and y.shape == (2, N // 2)
    n = N // 2
    for row, pr in zip(y, probs):
        freq = np.bincount(row, minlength=4) / n
        assert freq.shape == (4,)
        for f, q in zip(freq, pr):
            _within(f, q, np.sqrt(q * (1 - q) / n) + 1e-12)


def _dropout_model(shape: list[int]) -> onnx.ModelProto:
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=7)
    return _model(
        [node],
        [_vi("x", TensorProto.FLOAT, shape), _vi("r", TensorProto.FLOAT, []), _vi("t", TensorProto.BOOL, [])],
        [_vi("y", TensorProto.FLOAT, shape), _vi("mask", TensorProto.BOOL, shape)],
    )


def test_training_dropout_rate_and_scaling() -> None:
    f = onnxc_compile(_dropout_model([10, N // 10]))
    x = np.random.default_rng(0).uniform(0.5, 1.5, (10, N // 10)).astype(np.float32)
    for ratio in (0.0, 0.25, 0.75):
        y, mask = f(x, np.array(ratio, np.float32), np.array(True))
        assert mask.dtype == np.bool_
        _within(1 - mask.mean(), ratio, np.sqrt(ratio * (1 - ratio) / N) + 1e-12)
        np.testing.assert_allclose(y, np.where(mask, x * np.float32(1 / (1 - ratio)), 0), rtol=1e-6)
    # training_mode false at run time: the identity and an all-true mask.
    y, mask = f(x, np.array(0.75, np.float32), np.array(False))
    np.testing.assert_array_equal(y, x)
    assert mask.all()


def test_dropout_constant_training_mode() -> None:
    """training_mode given as a constant true (the exporters' training graphs)."""
    t = helper.make_tensor("t", TensorProto.BOOL, [], [True])
    r = helper.make_tensor("r", TensorProto.FLOAT, [], [0.5])
    graph = helper.make_graph(
        [helper.make_node("Dropout", ["x", "r", "t"], ["y"], seed=1)], "d",
        [_vi("x", TensorProto.FLOAT, [N])], [_vi("y", TensorProto.FLOAT, [N])], [t, r],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    x = np.ones(N, np.float32)
    (y,) = onnxc_compile(model)(x)
    assert set(np.unique(y)) == {0.0, 2.0}
    _within(np.mean(y == 0), 0.5, np.sqrt(0.25 / N))
