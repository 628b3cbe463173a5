"""String tensors in compiled code (transforms/lowering/strings.py, targets/cpu/strings.py and the
C runtime targets/cpu/runtime/onnxc_strings.c): each string op against onnx.reference, with
broadcasting, empty and 0-d tensors, UTF-8; the ABI's conversions and diagnostics; what is
refused (ops that would read handles as numbers, AOT libraries)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.errors import OnnxcError

S = T.STRING


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int, list | None]], outputs: list[tuple[str, int, list | None]], ml: bool = False) -> onnx.ModelProto:
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [h.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )
    opsets = [h.make_opsetid("", 20)] + ([h.make_opsetid("ai.onnx.ml", 4)] if ml else [])
    return h.make_model(g, opset_imports=opsets)


def _strs(*values: object, shape: tuple[int, ...] | None = None) -> np.ndarray:
    a = np.empty(len(values), dtype=object)
    a[:] = list(values)
    return a.reshape(shape if shape is not None else (len(values),))


def _same(got: np.ndarray, want: np.ndarray) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind in "OU":
        assert got.dtype == object
        assert [str(x) for x in got.reshape(-1)] == [str(x) for x in want.reshape(-1)]
    else:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **compile_kwargs: object) -> list[np.ndarray]:
    """Compile, run, compare every output with the reference evaluator; return onnxc's."""
    compiled = onnxc.compile(model, **compile_kwargs)
    got = compiled(**feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        _same(g, w)
    return got


def _arena_count() -> int:
    from onnxc.targets.cpu.strings import load_runtime

    return load_runtime().arena_count()


# --- Equal, StringConcat ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b",
    [
        (_strs("a", "bb", "", "é"), _strs("a", "b", "", "é")),
        (_strs("x", "y", "x", "z", "x", "q", shape=(2, 3)), _strs("x", "q", "z")),  # broadcast
        (_strs("日本", shape=()), _strs("日本", "日", "")),  # 0-d against 1-d
        (np.empty((0, 3), dtype=object), _strs("a", "b", "c")),  # empty
    ],
)
def test_equal(a: np.ndarray, b: np.ndarray) -> None:
    out_shape = list(np.broadcast_shapes(a.shape, b.shape))
    m = _model([h.make_node("Equal", ["a", "b"], ["y"])], [("a", S, list(a.shape)), ("b", S, list(b.shape))], [("y", T.BOOL, out_shape)])
    _check(m, {"a": a, "b": b})


@pytest.mark.parametrize(
    "a, b",
    [
        (_strs("a", "", "ü"), _strs("b", "c", "ß")),
        (_strs("x", "y", shape=(2, 1)), _strs("1", "2", "3")),  # broadcast both ways
        (_strs("only", shape=()), _strs("", shape=())),  # 0-d
        (np.empty((0,), dtype=object), _strs("a", shape=())),
    ],
)
def test_string_concat(a: np.ndarray, b: np.ndarray) -> None:
    out_shape = list(np.broadcast_shapes(a.shape, b.shape))
    m = _model([h.make_node("StringConcat", ["a", "b"], ["y"])], [("a", S, list(a.shape)), ("b", S, list(b.shape))], [("y", S, out_shape)])
    _check(m, {"a": a, "b": b})
    assert _arena_count() == 0  # the run's strings were freed after the copy


def test_dynamic_shapes_and_bytes_input() -> None:
    """Dynamic dims; bytes elements are taken as UTF-8 as they are."""
    m = _model([h.make_node("StringConcat", ["a", "b"], ["y"])], [("a", S, ["n"]), ("b", S, ["n"])], [("y", S, ["n"])])
    c = onnxc.compile(m)
    for n in (0, 1, 7):
        a = _strs(*[f"é{i}" for i in range(n)])
        b = _strs(*[f"-{i}".encode() for i in range(n)])
        (y,) = c(a, b)
        assert list(y) == [f"é{i}-{i}" for i in range(n)]


def test_numpy_str_arrays() -> None:
    """numpy's own str and bytes arrays are taken for string inputs (as onnxruntime takes them)."""
    c = onnxc.compile(_model([h.make_node("StringConcat", ["a", "b"], ["y"])], [("a", S, [2]), ("b", S, [2])], [("y", S, [2])]))
    (y,) = c(np.array(["x", "é"]), np.array([b"1", b"22"]))
    assert list(y) == ["x1", "é22"]


def test_threads_share_the_arena() -> None:
    """Threaded code calls the runtime from several threads at once."""
    n = 5000
    a = _strs(*[str(i) for i in range(n)])
    m = _model([h.make_node("StringConcat", ["a", "a"], ["y"])], [("a", S, [n])], [("y", S, [n])])
    _check(m, {"a": a}, threads=2)
    assert _arena_count() == 0


def test_concurrent_runs_from_python_threads() -> None:
    """Runs of string models from several Python threads at once (the arena is shared: runs are
    serialized by the runtime's lock, none frees another's strings), with threaded code inside."""
    import threading

    keys = [f"k{i}" for i in range(50)]
    enc = onnxc.compile(_model([h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_int64s=list(range(50)), values_strings=keys)], [("x", T.INT64, [400])], [("y", S, [400])], ml=True), threads=2)
    split = onnxc.compile(_model([h.make_node("StringSplit", ["x"], ["y", "z"], delimiter=",")], [("x", S, [400])], [("y", S, None), ("z", T.INT64, [400])]), threads=2)
    ids = np.arange(400, dtype=np.int64) % 60
    words = _strs(*[",".join(["w"] * (i % 5 + 1)) for i in range(400)])
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for _ in range(10):
                if k % 2:
                    (y,) = enc(ids)
                    assert list(y) == [keys[i] if i < 50 else "_Unused" for i in ids]
                else:
                    y, z = split(words)
                    assert z.tolist() == [i % 5 + 1 for i in range(400)] and y.shape == (400, 5)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _arena_count() == 0


# --- RegexFullMatch -----------------------------------------------------------------------------

WORDS = _strs("abc", "ABC", "a1", "12345", "hello world", "www.google.com", "user@gmail.com", "", "héllo", "a.b", "x\ny", "a]b", "a-b", "a^b", "_", "tab\there")


@pytest.mark.parametrize(
    "pattern",
    [
        r"abc",
        r"(?i)abc",
        r"[a-z]+",
        r"\d+",
        r"\D*",
        r"\w+",
        r"\S+\s\S+",
        r"a|ABC|a1",
        r"(a|b)+c",
        r"(?:ab)c?",
        r"(?P<w>a).*",
        r"a.*?",
        r"[\w.-]+@(yahoo|gmail)\.com",
        r"www\.[\w.-]+\.\bcom\b",
        r"h.llo",  # '.' is one code point (é is two bytes)
        r"x.y",  # '.' does not match a newline
        r"\d{2,4}5",
        r"[^a-z]*",
        r"a[\]^-]b",
        r"tab\there",
        r"\x5f",
        r"",
        r"^abc$",
    ],
)
def test_regex_full_match(pattern: str) -> None:
    m = _model([h.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)], [("x", S, [len(WORDS)])], [("y", T.BOOL, [len(WORDS)])])
    _check(m, {"x": WORDS})


def test_regex_shapes() -> None:
    for x in (_strs("ab", shape=()), np.empty((2, 0), dtype=object), _strs("a", "bb", "b", "ab", shape=(2, 2))):
        m = _model([h.make_node("RegexFullMatch", ["x"], ["y"], pattern="a?b")], [("x", S, list(x.shape))], [("y", T.BOOL, list(x.shape))])
        _check(m, {"x": x})


@pytest.mark.parametrize(
    "pattern, message",
    [("a(b", "invalid regular expression"), (r"\p{L}+", r"escape \\p"), ("(?s).*", "group flag"), (r"[\D]", r"\\D inside a bracket")],
)
def test_regex_refused(pattern: str, message: str) -> None:
    m = _model([h.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)], [("x", S, [2])], [("y", T.BOOL, [2])])
    with pytest.raises(OnnxcError, match=message):
        onnxc.compile(m)


# --- StringSplit --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, attrs",
    [
        (_strs("a,b,c", "", "a,,b", ",x,"), {"delimiter": ","}),
        (_strs("one  two\tthree", "  lead and trail  ", "", "single"), {}),
        (_strs("a--b--c--d", "--", "x"), {"delimiter": "--", "maxsplit": 2}),
        (_strs("  a b  c  ", "d"), {"maxsplit": 1}),
        (_strs("é|ü|日本", "|", shape=(1, 2)), {"delimiter": "|"}),
        (np.empty((0,), dtype=object), {"delimiter": " "}),
        (_strs("abc", "de"), {"delimiter": "", "maxsplit": 0}),
    ],
)
def test_string_split(x: np.ndarray, attrs: dict[str, object]) -> None:
    m = _model(
        [h.make_node("StringSplit", ["x"], ["y", "z"], **attrs)],
        [("x", S, list(x.shape))],
        [("y", S, None), ("z", T.INT64, list(x.shape))],
    )
    _check(m, {"x": x})
    assert _arena_count() == 0


def test_string_split_scalar() -> None:
    """A 0-d input gives a 1-d Y (the reference evaluator fails on it: expected values by hand)."""
    m = _model([h.make_node("StringSplit", ["x"], ["y", "z"])], [("x", S, [])], [("y", S, None), ("z", T.INT64, [])])
    y, z = onnxc.compile(m)(_strs(" a  b ", shape=()))
    assert y.shape == (2,) and list(y) == ["a", "b"]
    assert z.shape == () and int(z) == 2


def test_split_feeds_later_ops() -> None:
    """The data-dependent output of StringSplit is consumed by another string op."""
    m = _model(
        [h.make_node("StringSplit", ["x"], ["y", "z"], delimiter="/"), h.make_node("StringConcat", ["y", "s"], ["w"])],
        [("x", S, [3]), ("s", S, [])],
        [("w", S, None), ("z", T.INT64, [3])],
    )
    _check(m, {"x": _strs("a/b", "c", "d/e/f"), "s": _strs("!", shape=())})


# --- StringNormalizer ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, attrs",
    [
        (_strs("monday", "tuesday", "wednesday", "thursday"), {"case_change_action": "LOWER", "is_case_sensitive": 1, "stopwords": ["monday"]}),
        (_strs("Monday", "TUESDAY", "wednesday"), {"case_change_action": "UPPER", "is_case_sensitive": 0, "stopwords": ["monday", "Tuesday"]}),
        (_strs("monday", "Monday", shape=(1, 2)), {"case_change_action": "NONE", "is_case_sensitive": 1, "stopwords": ["monday", "Monday"]}),  # all removed
        (_strs("monday", shape=(1, 1)), {"case_change_action": "UPPER", "is_case_sensitive": 0, "stopwords": ["MONDAY"]}),
        (_strs("a", "B", "c", shape=(1, 3)), {"case_change_action": "UPPER", "stopwords": ["b"]}),
        (_strs("x", "y"), {}),
    ],
)
def test_string_normalizer(x: np.ndarray, attrs: dict[str, object]) -> None:
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"], **attrs)], [("x", S, list(x.shape))], [("y", S, None)])
    _check(m, {"x": x})


@pytest.mark.parametrize(
    "x, action, want",
    [
        (_strs("Café", "Ökonomie", "straße", "ÉTÉ", "ΣΊΣΥΦΟΣ"), "LOWER", ["café", "ökonomie", "straße", "été", "σίσυφοσ"]),
        (_strs("café", "ökonomie", "été", "日本"), "UPPER", ["CAFÉ", "ÖKONOMIE", "ÉTÉ", "日本"]),
    ],
)
def test_string_normalizer_utf8(x: np.ndarray, action: str, want: list[str]) -> None:
    """Case change of non-ASCII letters, code point by code point (the reference evaluator
    strips accents first, which the spec does not ask for: expected values by hand)."""
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"], case_change_action=action, locale="en_US")], [("x", S, [len(x)])], [("y", S, None)])
    (y,) = onnxc.compile(m)(x)
    assert list(y) == want


def test_string_normalizer_keeps_what_the_reference_drops() -> None:
    """Stopwords are whole elements (spec, onnxruntime): an element holding a stopword among
    other words stays, and an empty input string stays (the reference drops both)."""
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"], stopwords=["a"], is_case_sensitive=1)], [("x", S, [4])], [("y", S, None)])
    (y,) = onnxc.compile(m)(_strs("a", "a b", "", "c"))
    assert list(y) == ["a b", "", "c"]


def test_string_normalizer_dynamic_first_dim() -> None:
    """[N, C] with N dynamic: N must be 1, checked at run time."""
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"], stopwords=["b"])], [("x", S, ["n", 3])], [("y", S, None)])
    c = onnxc.compile(m)
    _same(c(_strs("a", "b", "c", shape=(1, 3)))[0], _strs("a", "c", shape=(1, 2)))
    with pytest.raises(OnnxcError, match="StringNormalizer"):
        c(_strs("a", "b", "c", "d", "e", "f", shape=(2, 3)))


def test_string_normalizer_refuses_batches() -> None:
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"])], [("x", S, [2, 3])], [("y", S, None)])
    with pytest.raises(OnnxcError, match=r"\[C\] or \[1, C\]"):
        onnxc.compile(m)


# --- LabelEncoder -------------------------------------------------------------------------------


def _tensor(name: str, dtype: int, values: list) -> onnx.TensorProto:
    return h.make_tensor(name, dtype, (len(values),), values)


@pytest.mark.parametrize(
    "x, out_type, attrs",
    [
        (_strs("a", "b", "d", "é"), T.INT64, {"keys_strings": ["a", "b", "é"], "values_int64s": [1, 2, 3], "default_int64": 42}),
        (_strs("a", "zz", shape=(1, 2)), T.FLOAT, {"keys_strings": ["a"], "values_floats": [0.5]}),
        (_strs("a", "b", "q"), S, {"keys_strings": ["a", "b"], "values_strings": ["x", "ü"], "default_string": "none"}),
        (np.array([3, 1, 7], dtype=np.int64), S, {"keys_int64s": [1, 3], "values_strings": ["one", "three"]}),
        (np.array([4, 5], dtype=np.int64), T.INT64, {"keys_int64s": [5], "values_int64s": [50]}),
        (_strs("a", "b", "d"), T.INT16, {"keys_tensor": _tensor("k", S, ["a", "b"]), "values_tensor": _tensor("v", T.INT16, [7, 8]), "default_tensor": _tensor("d", T.INT16, [-3])}),
        (_strs("a", "b", "d"), S, {"keys_strings": ["a", "b"], "values_tensor": _tensor("v", S, ["A", "B"]), "default_tensor": _tensor("d", S, ["?"])}),
        (np.empty((0,), dtype=object), T.INT64, {"keys_strings": ["a"], "values_int64s": [1]}),
    ],
)
def test_label_encoder(x: np.ndarray, out_type: int, attrs: dict[str, object]) -> None:
    in_type = S if x.dtype == object else onnx.helper.np_dtype_to_tensor_dtype(x.dtype)
    m = _model([h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)], [("x", in_type, list(x.shape))], [("y", out_type, list(x.shape))], ml=True)
    _check(m, {"x": x})


@pytest.mark.parametrize(
    "x, attrs",
    [
        (_strs("a", "c", "zz", "b", shape=(2, 2)), {"cats_strings": ["a", "b", "c"]}),
        (_strs("é", "x"), {"cats_strings": ["x", "é"], "zeros": 0}),
        (np.array([3, 1, 7], dtype=np.int64), {"cats_int64s": [1, 3, 5]}),
        (np.array([[1, 2]], dtype=np.int32), {"cats_int64s": [2, 1, 2**40]}),
        (np.array([1.0, 2.5, 3.0], dtype=np.float32), {"cats_int64s": [3, 1]}),
    ],
)
def test_one_hot_encoder(x: np.ndarray, attrs: dict[str, object]) -> None:
    in_type = S if x.dtype == object else onnx.helper.np_dtype_to_tensor_dtype(x.dtype)
    n_cats = len(attrs.get("cats_strings", attrs.get("cats_int64s")))  # type: ignore[arg-type]
    m = _model([h.make_node("OneHotEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)], [("x", in_type, list(x.shape))], [("y", T.FLOAT, [*x.shape, n_cats])], ml=True)
    _check(m, {"x": x})


def test_one_hot_encoder_unknown_category_with_zeros_0() -> None:
    m = _model([h.make_node("OneHotEncoder", ["x"], ["y"], domain="ai.onnx.ml", cats_strings=["a"], zeros=0)], [("x", S, [3])], [("y", T.FLOAT, [3, 1])], ml=True)
    c = onnxc.compile(m)
    with pytest.raises(OnnxcError, match="2 element\\(s\\) have no category"):
        c(_strs("a", "b", "c"))
    np.testing.assert_array_equal(c(_strs("a", "a", "a"))[0], np.ones((3, 1), np.float32))


def test_label_encoder_many_keys() -> None:
    """Tables of more than a few keys are looked up through their hash index (string keys to
    ints, ints to string values, string to string)."""
    rng = np.random.default_rng(0)
    keys = [f"key{i}é" for i in range(300)]
    x = _strs(*[keys[i] if i < 300 else f"miss{i}" for i in rng.integers(0, 400, size=1000)])
    m = _model([h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=keys, values_int64s=list(range(300)))], [("x", S, [1000])], [("y", T.INT64, [1000])], ml=True)
    _check(m, {"x": x})
    ids = rng.integers(-5, 305, size=500).astype(np.int64)
    m = _model([h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_int64s=list(range(300)), values_strings=keys)], [("x", T.INT64, [500])], [("y", S, [500])], ml=True)
    _check(m, {"x": ids})
    m = _model([h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=keys, values_strings=keys[::-1])], [("x", S, [1000])], [("y", S, [1000])], ml=True)
    _check(m, {"x": x})
    assert _arena_count() == 0


def test_label_encoder_nan_key() -> None:
    """A NaN key matches NaN inputs (LabelEncoder-4; the reference's dict lookup misses it)."""
    attrs = {"keys_floats": [0.5, float("nan")], "values_strings": ["half", "nan"], "default_string": "-"}
    m = _model([h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)], [("x", T.FLOAT, [4])], [("y", S, [4])], ml=True)
    (y,) = onnxc.compile(m)(np.array([0.5, np.nan, 2.0, -np.nan], dtype=np.float32))
    assert list(y) == ["half", "nan", "-", "nan"]


@pytest.mark.parametrize(
    "x, out_type",
    [(_strs("a", "c", "zz", "b", shape=(2, 2)), T.INT64), (np.array([[2, 9, 1]], dtype=np.int64), S)],
)
def test_category_mapper(x: np.ndarray, out_type: int) -> None:
    attrs = {"cats_strings": ["a", "b", "c"], "cats_int64s": [1, 2, 3], "default_int64": 99, "default_string": "?"}
    in_type = S if x.dtype == object else T.INT64
    m = _model([h.make_node("CategoryMapper", ["x"], ["y"], domain="ai.onnx.ml", **attrs)], [("x", in_type, list(x.shape))], [("y", out_type, list(x.shape))], ml=True)
    (got,) = onnxc.compile(m)(x)
    # onnx.reference has no CategoryMapper: onnxruntime is the reference (an IR it reads).
    ort = pytest.importorskip("onnxruntime")
    m.ir_version = 9
    m.opset_import[0].version = 19
    m.opset_import[1].version = 3
    (want,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    _same(got, want)


@pytest.mark.parametrize(
    "mode, x",
    [
        ("TF", _strs("a", "b", "c", "a", "b", "x", "c")),
        ("TFIDF", _strs("a", "b", "a", "a", "c", "b", "b", "x", shape=(2, 4))),
        ("IDF", _strs("c", "c", "a", "b", "d", "a", shape=(2, 3))),
    ],
)
def test_tfidf_string_tokens(mode: str, x: np.ndarray) -> None:
    """String tokens against pool_strings (uni- and bigrams, skips)."""
    attrs = {
        "mode": mode, "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 1,
        "pool_strings": ["a", "b", "c", "a", "b", "b", "c"], "ngram_counts": [0, 3], "ngram_indexes": [0, 1, 2, 3, 4],
        "weights": [1.0, 2.0, 0.5, 1.5, 3.0],
    }  # fmt: skip
    out = [5] if x.ndim == 1 else [x.shape[0], 5]
    m = _model([h.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)], [("x", S, list(x.shape))], [("y", T.FLOAT, out)])
    _check(m, {"x": x})


# --- strings through other ops, constants -------------------------------------------------------


def test_data_movement_and_constants() -> None:
    """Handles move through Reshape/Transpose/Gather/Concat/Where unchanged; a string Constant."""
    const = h.make_node("Constant", [], ["c"], value=h.make_tensor("c", S, (2,), [b"k0", "k1é".encode()]))
    nodes = [
        const,
        h.make_node("Concat", ["x", "c"], ["cat"], axis=0),
        h.make_node("Reshape", ["cat", "shape"], ["r"]),
        h.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
        h.make_node("Gather", ["cat", "idx"], ["g"], axis=0),
        h.make_node("Where", ["cond", "g", "c"], ["w"]),
    ]
    m = _model(
        nodes,
        [("x", S, [4]), ("shape", T.INT64, [2]), ("idx", T.INT64, [2]), ("cond", T.BOOL, [2])],
        [("t", S, None), ("w", S, [2])],
    )
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([3, 2], dtype=np.int64), "shape"))
    _check(m, {"x": _strs("a", "b", "c", "d"), "idx": np.array([5, 0], dtype=np.int64), "cond": np.array([True, False])})


X23 = _strs("a", "b", "c", "d", "é", "f", shape=(2, 3))


@pytest.mark.parametrize(
    "node, inputs, feeds",
    [
        (h.make_node("ScatterND", ["x", "i", "u"], ["y"]), [("i", T.INT64, [1, 1]), ("u", S, [1, 3])], {"i": np.array([[1]]), "u": _strs("p", "q", "r", shape=(1, 3))}),
        (h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1), [("i", T.INT64, [2, 1]), ("u", S, [2, 1])], {"i": np.array([[2], [0]]), "u": _strs("p", "q", shape=(2, 1))}),
        (h.make_node("Pad", ["x", "p", "v"], ["y"]), [("p", T.INT64, [4]), ("v", S, [])], {"p": np.array([0, 1, 1, 0]), "v": _strs("_", shape=())}),
        (h.make_node("Pad", ["x", "p"], ["y"], mode="reflect"), [("p", T.INT64, [4])], {"p": np.array([0, 2, 1, 0])}),
        (h.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=0, time_axis=1), [("l", T.INT64, [2])], {"l": np.array([2, 3])}),
    ],
)
def test_more_data_movement(node: onnx.NodeProto, inputs: list, feeds: dict[str, np.ndarray]) -> None:
    m = _model([node], [("x", S, [2, 3]), *inputs], [("y", S, None)])
    _check(m, {"x": X23, **feeds})


@pytest.mark.parametrize(
    "node, inputs, feeds, out_type",
    [
        (h.make_node("Flatten", ["x"], ["y"], axis=0), [], {}, S),
        (h.make_node("Squeeze", ["x", "a"], ["y"]), [("a", T.INT64, [1])], {"a": np.array([0])}, S),
        (h.make_node("Unsqueeze", ["x", "a"], ["y"]), [("a", T.INT64, [1])], {"a": np.array([1])}, S),
        (h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]), [("s", T.INT64, [1]), ("e", T.INT64, [1]), ("a", T.INT64, [1]), ("st", T.INT64, [1])],
         {"s": np.array([-1]), "e": np.array([-4]), "a": np.array([2]), "st": np.array([-2])}, S),
        (h.make_node("GatherElements", ["x", "i"], ["y"], axis=2), [("i", T.INT64, [1, 2, 2])], {"i": np.array([[[2, 0], [1, 1]]])}, S),
        (h.make_node("GatherND", ["x", "i"], ["y"]), [("i", T.INT64, [2, 3])], {"i": np.array([[0, 1, 2], [0, 0, 1]])}, S),
        (h.make_node("Split", ["x", "sp"], ["y", "y2"], axis=2), [("sp", T.INT64, [2])], {"sp": np.array([1, 2])}, S),
        (h.make_node("Expand", ["x", "sh"], ["y"]), [("sh", T.INT64, [4])], {"sh": np.array([2, 1, 2, 3])}, S),
        (h.make_node("Tile", ["x", "r"], ["y"]), [("r", T.INT64, [3])], {"r": np.array([2, 1, 2])}, S),
        (h.make_node("Shape", ["x"], ["y"]), [], {}, T.INT64),
        (h.make_node("Size", ["x"], ["y"]), [], {}, T.INT64),
        (h.make_node("Compress", ["x", "c"], ["y"], axis=2), [("c", T.BOOL, [3])], {"c": np.array([True, False, True])}, S),
    ],
)
def test_data_movement_ops(node: onnx.NodeProto, inputs: list, feeds: dict[str, np.ndarray], out_type: int) -> None:
    """Every data-movement op the pre-check lets strings through, against onnx.reference."""
    outs = [(o, out_type, None) for o in node.output]
    m = _model([node], [("x", S, [1, 2, 3]), *inputs], outs)
    _check(m, {"x": X23.reshape(1, 2, 3), **feeds})


def test_scatter_reduction_refused() -> None:
    m = _model([h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="add")], [("x", S, [2, 3]), ("i", T.INT64, [2, 1]), ("u", S, [2, 1])], [("y", S, [2, 3])])
    with pytest.raises(OnnxcError, match="reduction 'add' is not defined for strings"):
        onnxc.compile(m)


def test_sequences_of_strings() -> None:
    """Sequences of string tensors, built in the graph or given as a list (onnx-eliminate-sequences
    turns them into tensors, whose handles move as usual)."""
    m = _model([h.make_node("SequenceConstruct", ["a", "b"], ["s"]), h.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], [("a", S, [2]), ("b", S, [2])], [("y", S, None)])
    _check(m, {"a": _strs("x", "é"), "b": _strs("p", "q")})
    g = h.make_graph(
        [h.make_node("SequenceAt", ["s", "i"], ["y"])],
        "g",
        [h.make_value_info("s", h.make_sequence_type_proto(h.make_tensor_type_proto(S, [2]))), h.make_tensor_value_info("i", T.INT64, [])],
        [h.make_tensor_value_info("y", S, [2])],
    )
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    feeds = {"s": [_strs("x", "y"), _strs("p", "q")], "i": np.array(1, dtype=np.int64)}
    (got,) = onnxc.compile(m)(**feeds)
    _same(got, ReferenceEvaluator(m).run(None, feeds)[0])


@pytest.mark.parametrize("cond", [True, False])
def test_if_branches_yield_strings(cond: bool) -> None:
    then_g = h.make_graph([h.make_node("StringConcat", ["a", "b"], ["t"])], "then", [], [h.make_tensor_value_info("t", S, [2])])
    else_g = h.make_graph([h.make_node("Identity", ["a"], ["e"])], "else", [], [h.make_tensor_value_info("e", S, [2])])
    m = _model([h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], [("c", T.BOOL, []), ("a", S, [2]), ("b", S, [2])], [("y", S, [2])])
    _check(m, {"c": np.array(cond), "a": _strs("x", "é"), "b": _strs("1", "2")})


def test_loop_carries_strings() -> None:
    """A string value carried through Loop iterations, and a string scan output."""
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]), h.make_node("StringConcat", ["s_in", "bang"], ["s_out"]), h.make_node("Identity", ["s_out"], ["scan"])],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []), h.make_tensor_value_info("s_in", S, [2])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("s_out", S, [2]), h.make_tensor_value_info("scan", S, [2])],
    )
    m = _model(
        [h.make_node("Loop", ["n", "c", "s"], ["final", "all"], body=body)],
        [("n", T.INT64, []), ("c", T.BOOL, []), ("s", S, [2]), ("bang", S, [])],
        [("final", S, [2]), ("all", S, None)],
    )
    _check(m, {"n": np.array(3, dtype=np.int64), "c": np.array(True), "s": _strs("a", "b"), "bang": _strs("!", shape=())})


@pytest.mark.parametrize(
    "to, values",
    [
        (T.FLOAT, ["3.14", "1e-5", "-INF", "+inf", "NaN", " 42", "1E8", "-0"]),
        (T.DOUBLE, ["0.1", "2.5e300", "-1.25"]),
        (T.FLOAT16, ["65504", "0.1", "1e-8"]),
        (T.INT64, ["100", "-7", "9223372036854775807"]),
        (T.INT8, ["12", "-128"]),
        (T.UINT64, ["18446744073709551615", "5"]),
        (T.INT32, []),
    ],
)
def test_cast_from_strings(to: int, values: list[str]) -> None:
    m = _model([h.make_node("Cast", ["x"], ["y"], to=to)], [("x", S, [len(values)])], [("y", to, [len(values)])])
    x = _strs(*values) if values else np.empty((0,), dtype=object)
    (got,) = onnxc.compile(m)(x)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # NaN matches NaN, -0.0 == 0.0 (sign checked below)
    assert list(np.signbit(got)) == list(np.signbit(want))


def test_cast_like_and_bfloat16_from_strings() -> None:
    """CastLike takes its target from the second input; bf16 (the reference evaluator cannot cast
    strings to it: values exact in bf16, checked by hand)."""
    m = _model([h.make_node("CastLike", ["x", "t"], ["y"])], [("x", S, [2]), ("t", T.DOUBLE, [1])], [("y", T.DOUBLE, [2])])
    _check(m, {"x": _strs("1.5", "-2e3"), "t": np.zeros(1)})
    m = _model([h.make_node("Cast", ["x"], ["y"], to=T.BFLOAT16)], [("x", S, [2])], [("y", T.BFLOAT16, [2])])
    (got,) = onnxc.compile(m)(_strs("1.5", "3.140625"))
    assert got.astype(np.float32).tolist() == [1.5, 3.140625]


def test_cast_to_strings_refused() -> None:
    m = _model([h.make_node("Cast", ["x"], ["y"], to=S)], [("x", T.FLOAT, [2])], [("y", S, [2])])
    with pytest.raises(OnnxcError, match="casting numbers to strings is not lowered"):
        onnxc.compile(m)


@pytest.mark.parametrize(
    "node, out_type",
    [(h.make_node("Unique", ["x"], ["y"]), S), (h.make_node("NonZero", ["x"], ["y"]), T.INT64)],
)
def test_ops_reading_handles_are_refused(node: onnx.NodeProto, out_type: int) -> None:
    m = _model([node], [("x", S, [3])], [("y", out_type, None)])
    with pytest.raises(OnnxcError, match="string tensors are only lowered for"):
        onnxc.compile(m)


# --- the boundary ---------------------------------------------------------------------------------


def _concat_model() -> onnx.ModelProto:
    return _model([h.make_node("StringConcat", ["a", "b"], ["y"])], [("a", S, [2]), ("b", S, [2])], [("y", S, [2])])


def test_invalid_inputs() -> None:
    c = onnxc.compile(_concat_model())
    with pytest.raises(OnnxcError, match="element 1 is a int"):
        c(_strs("a", 3), _strs("b", "c"))
    with pytest.raises(OnnxcError, match="NUL character"):
        c(_strs("a\0b", "x"), _strs("b", "c"))
    with pytest.raises(OnnxcError, match="dtype object"):
        c(np.array([1, 2]), _strs("b", "c"))
    (y,) = c(_strs("a", "b"), _strs("c", "d"))  # still usable after refused calls
    assert list(y) == ["ac", "bd"]
    assert _arena_count() == 0


def test_aot_library_runs_strings(tmp_path: Path) -> None:
    """An AOT library compiles the string runtime in and converts strings like the JIT."""
    from onnxc.compiler import lower
    from onnxc.targets.cpu.aot import compile_aot, load_library

    model = _model(
        [h.make_node("StringSplit", ["a"], ["p", "n"], delimiter=","), h.make_node("StringConcat", ["p", "b"], ["y"])],
        [("a", S, [2]), ("b", S, [])],
        [("y", S, None), ("n", T.INT64, [2])],
    )
    path = compile_aot(lower(model, stage="linalg"), str(tmp_path / "m.so"))
    f = load_library(path)
    feeds = {"a": _strs("x,yé", "z"), "b": _strs("!", shape=())}
    for got, want in zip(f(feeds["a"], feeds["b"]), ReferenceEvaluator(model).run(None, feeds)):
        _same(got, want)
    with pytest.raises(OnnxcError, match="NUL character"):
        f(_strs("a\0", "b"), feeds["b"])


def test_compile_cache_does_not_store_string_models(tmp_path: Path) -> None:
    """The cache's libraries carry no string runtime: a string model is not stored (a numeric
    model compiled the same way is, so the refusal is the string runtime's)."""
    from onnxc.targets.cpu.cache import ModelCache

    cache = ModelCache(tmp_path)
    strings = onnxc.compile(_concat_model())
    assert strings.function.uses_string_runtime
    assert cache.store("strings", strings.function) is None
    numeric = onnxc.compile(_model([h.make_node("Neg", ["a"], ["y"])], [("a", T.FLOAT, [2])], [("y", T.FLOAT, [2])]))
    assert not numeric.function.uses_string_runtime
    assert cache.store("numeric", numeric.function) is not None
