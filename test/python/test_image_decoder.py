"""ImageDecoder (transforms/lowering/image.py, decoded at run time by targets/cpu/runtime_hooks.py)
compiled by onnxc and compared exactly with `onnx.reference` (both decode with Pillow).

Covered: every format the suite uses (BMP, JPEG, JPEG 2000, PNG, PNM, TIFF, WebP) in RGB, BGR and
Grayscale, with the output size unknown when compiling and declared static; images of different
sizes through one compiled model; the decoded tensor consumed by later ops; encoded bytes that
start at an offset (a Slice before the decoder); undecodable bytes (the spec's empty output, a
warning naming the node); a size that contradicts the declared output (an OnnxcError, no wrong
answer); a grayscale source decoded to RGB (the spec's 3 channels); the AOT path's refusal and
the compile cache's (no entry stored, the JIT still runs it).
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import PIL.features
import PIL.Image
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnxc.compiler import compile as onnxc_compile
from onnxc.errors import OnnxcError

U8 = TensorProto.UINT8

#: Pillow format name -> the feature its build needs (None: built in).
FORMATS: dict[str, str | None] = {"BMP": None, "JPEG": "jpg", "JPEG2000": "jpg_2000", "PNG": "zlib", "PPM": None, "TIFF": None, "WEBP": "webp"}


def _encode(image: np.ndarray, fmt: str) -> np.ndarray:
    f = io.BytesIO()
    PIL.Image.fromarray(image).save(f, format=fmt)
    return np.frombuffer(f.getvalue(), dtype=np.uint8)


def _checkerboard(h: int, w: int, seed: int) -> np.ndarray:
    """Blocks of random colours (what onnx's own cases encode: lossy codecs keep them close)."""
    rng = np.random.default_rng(seed)
    colours = rng.integers(0, 256, size=(h // 4 + 1, w // 4 + 1, 3), dtype=np.uint8)
    return np.repeat(np.repeat(colours, 4, axis=0), 4, axis=1)[:h, :w]


def _model(pixel_format: str, out_shape: list[int | str | None] | None, n: int | str = "n", opset: int = 20) -> onnx.ModelProto:
    node = helper.make_node("ImageDecoder", ["x"], ["y"], pixel_format=pixel_format, name="decode")
    graph = helper.make_graph([node], "image", [helper.make_tensor_value_info("x", U8, [n])], [helper.make_tensor_value_info("y", U8, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_formats_match_reference(fmt: str, pixel_format: str) -> None:
    feature = FORMATS[fmt]
    if feature is not None and not PIL.features.check(feature):
        pytest.skip(f"this Pillow build has no {feature}")  # docs/ops.md: the formats depend on Pillow's build
    model = _model(pixel_format, [None, None, None])
    compiled = onnxc_compile(model)
    for h, w, seed in ((17, 23, 0), (8, 40, 1)):  # one compiled model, images of different sizes
        data = _encode(_checkerboard(h, w, seed), fmt)
        (want,) = _reference(model, {"x": data})
        (got,) = compiled(data)
        assert got.dtype == np.uint8 and got.shape == want.shape == (h, w, 3 if pixel_format != "Grayscale" else 1)
        np.testing.assert_array_equal(got, want)


def test_declared_static_shape_and_a_contradicting_image() -> None:
    data = _encode(_checkerboard(12, 10, 2), "PNG")
    model = _model("RGB", [12, 10, 3], n=int(data.size))
    compiled = onnxc_compile(model)
    (got,) = compiled(data)
    np.testing.assert_array_equal(got, _reference(model, {"x": data})[0])
    other = _encode(_checkerboard(12, 11, 3), "PNG")
    other = np.concatenate([other, np.zeros(data.size - other.size, np.uint8)]) if other.size < data.size else other[: data.size]
    with pytest.raises(OnnxcError, match=r"node 'decode'.*declares the output 12x10"):
        compiled(other)
    (again,) = compiled(data)  # the error does not stick to the next call
    np.testing.assert_array_equal(again, got)


def test_decoded_tensor_feeds_later_ops() -> None:
    """The [H, W, C] of run-time size flows on: Cast, Transpose to CHW, ReduceMean over H and W."""
    nodes = [
        helper.make_node("ImageDecoder", ["x"], ["img"], pixel_format="RGB"),
        helper.make_node("Cast", ["img"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["f"], ["chw"], perm=[2, 0, 1]),
        helper.make_node("ReduceMean", ["chw", "axes"], ["mean"], keepdims=0),
        helper.make_node("Shape", ["img"], ["shape"]),
    ]
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2])
    graph = helper.make_graph(
        nodes,
        "pipeline",
        [helper.make_tensor_value_info("x", U8, ["n"])],
        [helper.make_tensor_value_info("chw", TensorProto.FLOAT, [3, None, None]), helper.make_tensor_value_info("mean", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
        [axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    compiled = onnxc_compile(model)
    for h, w in ((9, 14), (21, 5)):
        data = _encode(_checkerboard(h, w, h), "BMP")
        want = _reference(model, {"x": data})
        got = compiled(data)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
        np.testing.assert_array_equal(got[2], want[2])


def test_bytes_at_an_offset() -> None:
    """The decoder reads its input through the descriptor's offset: a Slice drops a prefix."""
    starts = helper.make_tensor("starts", TensorProto.INT64, [1], [7])
    ends = helper.make_tensor("ends", TensorProto.INT64, [1], [2**62])
    nodes = [helper.make_node("Slice", ["x", "starts", "ends"], ["bytes"]), helper.make_node("ImageDecoder", ["bytes"], ["y"], pixel_format="BGR")]
    graph = helper.make_graph(nodes, "offset", [helper.make_tensor_value_info("x", U8, ["n"])], [helper.make_tensor_value_info("y", U8, None)], [starts, ends])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    data = np.concatenate([np.arange(7, dtype=np.uint8), _encode(_checkerboard(6, 9, 4), "PNG")])
    (got,) = onnxc_compile(model)(data)
    np.testing.assert_array_equal(got, _reference(model, {"x": data})[0])


@pytest.mark.parametrize("pixel_format,channels", [("RGB", 3), ("Grayscale", 1)])
def test_undecodable_bytes_give_the_specs_empty_output(pixel_format: str, channels: int) -> None:
    """The spec: "If it can't decode for any reason ... it will return an empty matrix". A header
    that is not an image, and a PNG cut short after its header, both give [0, 0, C] and a warning
    naming the node (onnx.reference raises instead: it has no empty-output path)."""
    compiled = onnxc_compile(_model(pixel_format, None))
    good = _encode(_checkerboard(10, 10, 5), "PNG")
    for data in (np.frombuffer(b"certainly not an image", np.uint8), good[: good.size // 2], np.zeros(0, np.uint8)):
        with pytest.warns(RuntimeWarning, match=r"node 'decode': cannot decode the image"):
            (got,) = compiled(data)
        assert got.shape == (0, 0, channels) and got.dtype == np.uint8
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a good image after a bad one: no warning, right values
        (got,) = compiled(good)
    assert got.shape == (10, 10, channels)


def test_undecodable_bytes_with_a_declared_size_are_an_error() -> None:
    compiled = onnxc_compile(_model("RGB", [4, 4, 3]))
    with pytest.raises(OnnxcError, match=r"node 'decode'.*cannot be decoded.*declares the output 4x4"):
        compiled(np.frombuffer(b"garbage", np.uint8))


def test_grayscale_source_decoded_as_rgb_has_three_channels() -> None:
    """The spec's RGB output has 3 channels whatever the file stores (onnx.reference returns the
    file's own mode, a 2-D array for an 8-bit grey PNG); compared with Pillow's conversion."""
    grey = _checkerboard(8, 12, 6)[:, :, 0]
    f = io.BytesIO()
    PIL.Image.fromarray(grey, mode="L").save(f, format="PNG")
    data = np.frombuffer(f.getvalue(), np.uint8)
    (got,) = onnxc_compile(_model("RGB", None))(data)
    np.testing.assert_array_equal(got, np.stack([grey] * 3, axis=-1))


def test_aot_library_is_refused(tmp_path: Path) -> None:
    from onnxc.compiler import lower
    from onnxc.targets.cpu.aot import compile_aot

    module = lower(_model("RGB", None), "linalg")
    with pytest.raises(OnnxcError, match="ImageDecoder calls back into Python at run time"):
        compile_aot(module, tmp_path / "decoder.so")
    assert not (tmp_path / "decoder.so").exists()


def test_compile_cache_stores_nothing_and_still_runs(tmp_path: Path) -> None:
    model = _model("RGB", None)
    data = _encode(_checkerboard(5, 7, 7), "PNG")
    for _ in range(2):
        (got,) = onnxc_compile(model, cache_dir=tmp_path)(data)
        np.testing.assert_array_equal(got, _reference(model, {"x": data})[0])
    assert not list(tmp_path.glob("*.so"))  # the library could not load without the JIT's hooks


def test_inside_if_branches() -> None:
    """A decoder in a subgraph (each branch its own node: one helper function and site each)."""
    then_g = helper.make_graph([helper.make_node("ImageDecoder", ["x"], ["a"], pixel_format="RGB")], "then", [], [helper.make_tensor_value_info("a", U8, None)])
    else_g = helper.make_graph([helper.make_node("ImageDecoder", ["x"], ["b"], pixel_format="BGR")], "else", [], [helper.make_tensor_value_info("b", U8, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    graph = helper.make_graph([node], "branches", [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", U8, ["n"])], [helper.make_tensor_value_info("y", U8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    data = _encode(_checkerboard(6, 7, 8), "PNG")
    compiled = onnxc_compile(model)
    for cond in (True, False):
        feeds = {"c": np.array(cond), "x": data}
        (got,) = compiled(feeds["c"], data)
        np.testing.assert_array_equal(got, _reference(model, feeds)[0])
