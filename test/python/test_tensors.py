"""Tensor data: every element type from every storage (raw_data, typed fields, external files),
round trips TensorProto -> MLIR attribute -> TensorProto, and the external data safety checks.

Reference values come from `onnx.numpy_helper.to_array` (onnx's own reader) wherever it reads the
type; MLIR's view of the values is checked through its printed form for a few types, so a layout
mistake (packing, bit order) cannot cancel out between import and export.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from onnxc.dialect import onnx_context
from onnxc.importers import tensors as tz
from onnxc.importers.errors import ImportError_
from onnxc.importers.external_data import read_external, resolve_external_path

ALL_TYPES = [
    T.FLOAT, T.UINT8, T.INT8, T.UINT16, T.INT16, T.INT32, T.INT64, T.BOOL, T.FLOAT16, T.DOUBLE,
    T.UINT32, T.UINT64, T.COMPLEX64, T.COMPLEX128, T.BFLOAT16, T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ,
    T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ, T.UINT4, T.INT4, T.FLOAT4E2M1, T.FLOAT8E8M0, T.UINT2, T.INT2,
    T.FLOAT6E2M3, T.FLOAT6E3M2,
]  # fmt: skip
NAMES = {dt: T.DataType.Name(dt) for dt in ALL_TYPES}


@pytest.fixture(scope="module")
def ctx():
    c = onnx_context()
    with c, ir.Location.unknown():
        yield c


def random_array(dt: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Every bit pattern of the type is fair game (NaNs, negative zeros, subnormals included)."""
    rng = np.random.default_rng(seed + dt)
    npdt = np.dtype(helper.tensor_dtype_to_np_dtype(dt))
    if dt == T.BOOL:
        return rng.integers(0, 2, size=shape).astype(bool)
    bits = tz.PACKED_BITS.get(dt)
    if bits is not None:
        return rng.integers(0, 2**bits, size=shape, dtype=np.uint8).view(npdt)
    return rng.integers(0, 256, size=(*shape, npdt.itemsize), dtype=np.uint8).view(npdt).reshape(shape)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN payloads count), or element equality for strings."""
    if a.dtype == object or b.dtype == object:
        return a.shape == b.shape and list(a.reshape(-1)) == list(b.reshape(-1))
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dt", ALL_TYPES, ids=NAMES.get)
@pytest.mark.parametrize("shape", [(3, 5), (7,), (), (0, 4)], ids=str)
def test_raw_data_round_trip(ctx, dt: int, shape: tuple[int, ...]) -> None:
    arr = random_array(dt, shape)
    t = numpy_helper.from_array(arr, "w")
    ref = numpy_helper.to_array(t)
    got = tz.tensor_to_numpy(t, None)
    assert same(got, ref)
    for threshold in (1 << 20, 0):  # dense attribute, then resource blob
        attr = tz.tensor_to_attribute(t, None, resource_threshold=threshold)
        want_type = f"tensor<{''.join(f'{d}x' for d in shape)}"
        assert str(attr.type).startswith(want_type)
        back = tz.attribute_to_tensor(attr, "w")
        assert back.data_type == dt and list(back.dims) == list(shape)
        assert same(numpy_helper.to_array(back), ref)
        assert back.raw_data == t.raw_data  # byte-exact, packing included


@pytest.mark.parametrize("dt", ALL_TYPES, ids=NAMES.get)
def test_typed_fields(ctx, dt: int) -> None:
    """helper.make_tensor(raw=False) stores values in the type's own field (int32_data for float16
    bits, packed int4 pairs, ...); the result must equal onnx's reading of the same proto."""
    arr = random_array(dt, (2, 3), seed=7)
    if dt in (T.COMPLEX64, T.COMPLEX128):
        vals = arr.reshape(-1).tolist()
    elif dt in tz.PACKED_BITS or dt in (T.FLOAT16, T.BFLOAT16) or "FLOAT8" in NAMES[dt] or "FLOAT6" in NAMES[dt]:
        vals = arr.reshape(-1)  # make_tensor converts these from their ml_dtypes values
    else:
        vals = arr.reshape(-1).tolist()
    t = helper.make_tensor("w", dt, [2, 3], vals, raw=False)
    assert not t.HasField("raw_data")
    ref = numpy_helper.to_array(t)
    got = tz.tensor_to_numpy(t, None)
    assert same(got, ref), (got, ref)
    back = tz.attribute_to_tensor(tz.tensor_to_attribute(t, None, resource_threshold=1 << 20), "w")
    assert same(numpy_helper.to_array(back), ref)


def test_float6_int32_data(ctx) -> None:
    codes = np.array([0, 1, 63, 17, 42], dtype=np.uint8)
    for dt, npdt in ((T.FLOAT6E2M3, ml_dtypes.float6_e2m3fn), (T.FLOAT6E3M2, ml_dtypes.float6_e3m2fn)):
        t = onnx.TensorProto(name="w", data_type=dt, dims=[5])
        t.int32_data.extend(int(c) for c in codes)
        assert same(tz.tensor_to_numpy(t, None), codes.view(npdt))
        assert same(numpy_helper.to_array(t), codes.view(npdt))


def test_mlir_sees_the_right_values(ctx) -> None:
    """The printed attribute shows the values MLIR holds: unpacking/bit order must be right."""
    t = numpy_helper.from_array(np.array([-8, 7, -1, 0, 3], dtype=ml_dtypes.int4), "q")
    assert str(tz.tensor_to_attribute(t, None, resource_threshold=1024)) == "dense<[-8, 7, -1, 0, 3]> : tensor<5xi4>"
    t = numpy_helper.from_array(np.array([3, 0, 1, 2, 3], dtype=ml_dtypes.uint2), "q")
    assert str(tz.tensor_to_attribute(t, None, resource_threshold=1024)) == "dense<[3, 0, 1, 2, 3]> : tensor<5xui2>"
    t = numpy_helper.from_array(np.array([1.5, -6.0, 0.5], dtype=ml_dtypes.float4_e2m1fn), "q")
    assert str(tz.tensor_to_attribute(t, None, resource_threshold=1024)) == (
        "dense<[1.500000e+00, -6.000000e+00, 5.000000e-01]> : tensor<3xf4E2M1FN>"
    )
    t = numpy_helper.from_array(np.array([True, False, True]), "b")
    assert str(tz.tensor_to_attribute(t, None, resource_threshold=1024)) == "dense<[true, false, true]> : tensor<3xi1>"
    t = numpy_helper.from_array(np.array([2**64 - 1, 0], dtype=np.uint64), "u")
    assert str(tz.tensor_to_attribute(t, None, resource_threshold=1024)) == "dense<[18446744073709551615, 0]> : tensor<2xui64>"
    t = helper.make_tensor("h", T.FLOAT16, [2], np.array([1.0, -2.0], np.float16), raw=False)
    assert str(tz.tensor_to_attribute(t, None, resource_threshold=1024)) == "dense<[1.000000e+00, -2.000000e+00]> : tensor<2xf16>"


def test_strings(ctx) -> None:
    vals = [b"a", b"", b'quote " and \\ backslash', "héllo".encode(), b"\xff\x00not utf8", b"x" * 300]
    t = helper.make_tensor("s", T.STRING, [2, 3], vals)
    got = tz.tensor_to_numpy(t, None)
    assert got.shape == (2, 3) and list(got.reshape(-1)) == vals
    attr = tz.tensor_to_attribute(t, None, resource_threshold=0)  # strings never become blobs
    assert str(attr.type) == "tensor<2x3x!onnx.string>"
    back = tz.attribute_to_tensor(attr, "s")
    assert back.data_type == T.STRING and list(back.string_data) == vals and list(back.dims) == [2, 3]
    empty = helper.make_tensor("e", T.STRING, [0, 2], [])
    assert list(tz.attribute_to_tensor(tz.tensor_to_attribute(empty, None, resource_threshold=1), "e").dims) == [0, 2]
    splat = ir.Attribute.parse('dense<"zz"> : tensor<3x!onnx.string>')
    assert list(tz.attribute_to_tensor(splat, "z").string_data) == [b"zz"] * 3


def test_splat_and_parsed_attributes(ctx) -> None:
    a = ir.Attribute.parse("dense<7> : tensor<2x3xi4>")
    assert same(numpy_helper.to_array(tz.attribute_to_tensor(a, "s")), np.full((2, 3), 7, ml_dtypes.int4))
    a = ir.Attribute.parse("dense<-1.5> : tensor<4xbf16>")
    assert same(numpy_helper.to_array(tz.attribute_to_tensor(a, "s")), np.full(4, -1.5, ml_dtypes.bfloat16))
    a = ir.Attribute.parse("dense<true> : tensor<2x2xi1>")
    assert same(numpy_helper.to_array(tz.attribute_to_tensor(a, "s")), np.ones((2, 2), bool))
    # Attribute.parse cannot return complex dense attributes (the bindings' downcast raises).
    a = ir.DenseElementsAttr.get(np.array([1 + 2j, 3 - 4j], np.complex64), type=ir.RankedTensorType.get([2], ir.Type.parse("complex<f32>")))
    assert same(numpy_helper.to_array(tz.attribute_to_tensor(a, "c")), np.array([1 + 2j, 3 - 4j], np.complex64))


def test_resource_blob_from_parsed_ir(ctx) -> None:
    """A blob not made by this module (parsed from text) is read from the printed resources."""
    arr = random_array(T.FLOAT, (4, 4), seed=3)
    attr = tz.array_to_attribute(arr, T.FLOAT, name="w", resource_threshold=0)
    module = ir.Module.create()
    module.operation.attributes["onnxc.w"] = attr
    text = module.operation.get_asm()
    fresh = onnx_context()
    with fresh, ir.Location.unknown():
        parsed = ir.Module.parse(text)
        blob = parsed.operation.attributes["onnxc.w"]
        assert str(blob).startswith("dense_resource<")
        back = tz.attribute_to_tensor(blob, "w")
        assert same(numpy_helper.to_array(back), arr)


def test_resource_is_not_a_copy(ctx) -> None:
    """The blob's bytes are the array's bytes (the registry hands back the very buffer) when the
    array is on a cache line or borrows its memory (a model's protobuf bytes); a computed array
    off a cache line is copied onto one (the CPU code reads weights with 64-byte loads)."""
    arr = random_array(T.FLOAT, (64, 64), seed=5)
    aligned = tz.aligned_copy(arr, tz.BLOB_ALIGNMENT).view(np.float32).reshape(arr.shape)
    attr = tz.array_to_attribute(aligned, T.FLOAT, name="big", resource_threshold=1024)
    values, dt = tz.attribute_to_array(attr)
    assert dt == T.FLOAT and np.shares_memory(values, aligned)
    borrowed = np.frombuffer(b"\0" * 4 + arr.tobytes(), dtype=np.float32, offset=4).reshape(arr.shape)
    values, _ = tz.attribute_to_array(tz.array_to_attribute(borrowed, T.FLOAT, name="borrowed", resource_threshold=1024))
    assert np.shares_memory(values, borrowed)
    off = tz.aligned_copy(np.concatenate([np.zeros(1, np.float32), arr.ravel()]), tz.BLOB_ALIGNMENT).view(np.float32)[1:].reshape(arr.shape)
    assert off.ctypes.data % tz.BLOB_ALIGNMENT == 4
    values, _ = tz.attribute_to_array(tz.array_to_attribute(off, T.FLOAT, name="off", resource_threshold=1024))
    assert not np.shares_memory(values, off) and values.ctypes.data % tz.BLOB_ALIGNMENT == 0
    np.testing.assert_array_equal(values.reshape(arr.shape), arr)


def test_sparse(ctx) -> None:
    values = numpy_helper.from_array(np.array([1.5, -2.0, 3.0], np.float32), "sp")
    for indices in (np.array([1, 6, 11], np.int64), np.array([[0, 1], [1, 2], [2, 3]], np.int64)):
        sp = helper.make_sparse_tensor(values, numpy_helper.from_array(indices, "sp_idx"), [3, 4])
        attr = tz.sparse_tensor_to_attribute(sp, None)
        assert str(attr).startswith("sparse<[[0, 1], [1, 2], [2, 3]]")
        back = tz.attribute_to_sparse_tensor(attr, "sp")
        assert list(back.dims) == [3, 4]
        assert same(numpy_helper.to_array(back.values), numpy_helper.to_array(values))
        assert numpy_helper.to_array(back.indices).tolist() == [[0, 1], [1, 2], [2, 3]]
    empty = helper.make_sparse_tensor(
        numpy_helper.from_array(np.zeros(0, np.float32), "e"), numpy_helper.from_array(np.zeros(0, np.int64), "i"), [2, 2]
    )
    attr = tz.sparse_tensor_to_attribute(empty, None)
    assert str(attr) == "sparse<> : tensor<2x2xf32>"
    assert len(tz.attribute_to_sparse_tensor(attr, "e").values.raw_data) == 0
    bad = helper.make_sparse_tensor(values, numpy_helper.from_array(np.array([1, 6, 12], np.int64), "i"), [3, 4])
    with pytest.raises(ImportError_, match="outside"):
        tz.sparse_tensor_to_attribute(bad, None)


def test_sparse_other_types(ctx) -> None:
    for dt in (T.INT4, T.BOOL, T.FLOAT8E5M2, T.COMPLEX64, T.UINT64):
        vals = random_array(dt, (3,), seed=11)
        sp = helper.make_sparse_tensor(numpy_helper.from_array(vals, "v"), numpy_helper.from_array(np.array([0, 2, 5], np.int64), "i"), [6])
        back = tz.attribute_to_sparse_tensor(tz.sparse_tensor_to_attribute(sp, None), "v")
        assert same(numpy_helper.to_array(back.values), vals), NAMES[dt]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.dims.append(-2), "negative dimension"),
        (lambda t: setattr(t, "raw_data", t.raw_data[:-1]), "bytes in raw_data"),
        (lambda t: setattr(t, "data_type", 99), "not a tensor element type"),
        (lambda t: setattr(t, "data_type", T.UNDEFINED), "not a tensor element type"),
        (lambda t: t.int64_data.append(3), "more than one place"),
        (lambda t: t.segment.SetInParent(), "segments"),
        (lambda t: t.dims.extend([2**63 - 1, 2**63 - 1]), "larger than onnxc can represent"),
    ],
)
def test_bad_tensors(ctx, mutate, message: str) -> None:
    t = numpy_helper.from_array(np.arange(6, dtype=np.float32), "bad")
    mutate(t)
    with pytest.raises(ImportError_, match=message) as info:
        tz.tensor_to_attribute(t, None, resource_threshold=1024)
    assert "'bad'" in str(info.value)


def test_bad_typed_fields(ctx) -> None:
    t = onnx.TensorProto(name="i8", data_type=T.INT8, dims=[2], int32_data=[1, 300])
    with pytest.raises(ImportError_, match="300"):
        tz.tensor_to_numpy(t, None)
    t = onnx.TensorProto(name="f", data_type=T.FLOAT, dims=[3], float_data=[1.0, 2.0])
    with pytest.raises(ImportError_, match="2 float_data entries"):
        tz.tensor_to_numpy(t, None)
    t = onnx.TensorProto(name="wrong", data_type=T.INT64, dims=[1])
    t.float_data.append(1.0)
    with pytest.raises(ImportError_, match="float_data"):
        tz.tensor_to_numpy(t, None)
    t = onnx.TensorProto(name="b", data_type=T.BOOL, dims=[2], raw_data=b"\x01\x02")
    with pytest.raises(ImportError_, match="bool byte"):
        tz.tensor_to_numpy(t, None)


# ---------------------------------------------------------------------------------------------
# external data


def external_tensor(location: str, dt: int = T.FLOAT, dims=(4,), **keys: str) -> onnx.TensorProto:
    t = onnx.TensorProto(name="ext", data_type=dt, dims=list(dims))
    t.data_location = T.EXTERNAL
    for k, v in {"location": location, **keys}.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def test_external_memory_map(ctx, tmp_path: Path) -> None:
    data = np.arange(1024, dtype=np.float32)
    pad = b"\x00" * 4096
    (tmp_path / "weights.bin").write_bytes(pad + data.tobytes() + b"tail")
    t = external_tensor("weights.bin", dims=(32, 32), offset="4096", length=str(data.nbytes))
    got = tz.tensor_to_numpy(t, tmp_path)
    assert same(got, data.reshape(32, 32))
    assert not got.flags.owndata and not got.flags.writeable  # a view over the map, not a copy
    base = got
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, (memoryview,)) or type(base).__name__ == "mmap"
    # The blob keeps the mapping alive after every Python reference is gone.
    attr = tz.tensor_to_attribute(t, tmp_path, resource_threshold=1024)
    del got, base
    values, _ = tz.attribute_to_array(attr)
    assert same(values, data.reshape(32, 32))
    # onnx's own loader agrees.
    assert same(numpy_helper.to_array(t, str(tmp_path)), data.reshape(32, 32))


def test_external_checksum(tmp_path: Path) -> None:
    payload = np.arange(4, dtype=np.float32).tobytes()
    (tmp_path / "w.bin").write_bytes(payload)
    good = hashlib.sha1(payload).hexdigest()
    assert read_external(external_tensor("w.bin", checksum=good), tmp_path).tobytes() == payload
    with pytest.raises(ImportError_, match="SHA1"):
        read_external(external_tensor("w.bin", checksum="0" * 40), tmp_path)


def test_external_in_subfolder_and_inner_link(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_bytes(b"\x00" * 16)
    assert read_external(external_tensor("sub/w.bin"), tmp_path).size == 16
    os.symlink(tmp_path / "sub" / "w.bin", tmp_path / "link.bin")  # a link that stays inside is fine
    assert read_external(external_tensor("link.bin"), tmp_path).size == 16


@pytest.mark.parametrize(
    "location, keys, message",
    [
        ("../outside.bin", {}, "contains '..'"),
        ("sub/../../outside.bin", {}, "contains '..'"),
        ("/etc/passwd", {}, "absolute path"),
        ("C:\\weights.bin", {}, "absolute path"),
        ("escape.bin", {}, "outside the model's folder"),
        ("dirlink/outside.bin", {}, "outside the model's folder"),
        ("missing.bin", {}, "does not name a readable file"),
        ("fifo", {}, "not a regular file"),
        ("w.bin", {"offset": "4", "length": "16"}, "past the end of the file"),
        ("w.bin", {"offset": "100"}, "past the end of the file"),
        ("w.bin", {"offset": "-4"}, "negative offset"),
        ("w.bin", {"length": "ten"}, "non-integer length"),
        ("", {}, "no 'location'"),
    ],
)
def test_external_escapes_refused(tmp_path: Path, location: str, keys: dict, message: str) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\x00" * 16)
    (model_dir / "w.bin").write_bytes(b"\x00" * 16)
    os.symlink(tmp_path / "outside.bin", model_dir / "escape.bin")
    os.symlink(tmp_path, model_dir / "dirlink")
    os.mkfifo(model_dir / "fifo")
    t = external_tensor(location, **keys)
    with pytest.raises(ImportError_, match=message) as info:
        tz.tensor_to_numpy(t, model_dir)
    assert "'ext'" in str(info.value)


def test_external_without_folder() -> None:
    with pytest.raises(ImportError_, match="not loaded from a file"):
        tz.tensor_to_numpy(external_tensor("w.bin"), None)


def test_resolve_refuses_link_loop(tmp_path: Path) -> None:
    os.symlink(tmp_path / "a", tmp_path / "b")
    os.symlink(tmp_path / "b", tmp_path / "a")
    with pytest.raises(ImportError_):
        resolve_external_path(tmp_path, "a")


def test_external_size_mismatch(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(b"\x00" * 12)
    with pytest.raises(ImportError_, match="12 bytes in its external data"):
        tz.tensor_to_numpy(external_tensor("w.bin", dims=(4,)), tmp_path)


def test_model_saved_by_onnx(ctx, tmp_path: Path) -> None:
    """Weights written by onnx.save_model(save_as_external_data=True) read back exactly."""
    arrays = {f"w{i}": random_array(dt, (8, 9), seed=i) for i, dt in enumerate((T.FLOAT, T.INT4, T.BFLOAT16, T.INT8))}
    graph = helper.make_graph(
        [], "g", [], [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in arrays.items()],
        initializer=[numpy_helper.from_array(a, n) for n, a in arrays.items()],
    )  # fmt: skip
    model = helper.make_model(graph)
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    loaded = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    for init in loaded.graph.initializer:
        assert init.data_location == T.EXTERNAL
        assert same(tz.tensor_to_numpy(init, tmp_path), arrays[init.name])
        attr = tz.tensor_to_attribute(init, tmp_path, resource_threshold=16)
        assert same(numpy_helper.to_array(tz.attribute_to_tensor(attr, init.name)), arrays[init.name])


def test_load_model_proto(tmp_path: Path) -> None:
    from onnxc.importers.external_data import load_model_proto

    good = helper.make_model(helper.make_graph([], "g", [], []))
    onnx.save(good, tmp_path / "ok.onnx")
    assert load_model_proto(tmp_path / "ok.onnx").graph.name == "g"
    (tmp_path / "bad.onnx").write_bytes(b"\x0a\xff\xff\xff\xff\x0fgarbage")
    with pytest.raises(ImportError_, match="not a valid ONNX protobuf"):
        load_model_proto(tmp_path / "bad.onnx")
    with pytest.raises(ImportError_, match="cannot be opened"):
        load_model_proto(tmp_path / "missing.onnx")
    # Binary files are parsed from a memory map; a text format by its extension, as onnx.load does.
    onnx.save(good, tmp_path / "ok.onnxtxt", format="onnxtxt")
    assert load_model_proto(tmp_path / "ok.onnx") == good
    assert load_model_proto(tmp_path / "ok.onnxtxt") == onnx.load(tmp_path / "ok.onnxtxt")
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert load_model_proto(tmp_path / "empty.onnx") == onnx.ModelProto()  # what onnx.load gives
    huge = tmp_path / "huge.onnx"
    with open(huge, "wb") as f:  # a sparse file: nothing is written or read
        f.truncate(2**31)
    with pytest.raises(ImportError_, match="2 GB"):
        load_model_proto(huge)


def test_get_attribute_complex(ctx) -> None:
    """op.attributes[...] raises on dense complex tensors (the bindings' downcast); get_attribute
    works. The importer therefore stores complex tensors as blobs, which read back normally."""
    vals = np.array([1 + 2j, complex(0.0, -3.0)], np.complex128)  # the values of the IR below
    blob = tz.array_to_attribute(vals, T.COMPLEX128, name="c", resource_threshold=1024)
    module = ir.Module.create()
    module.operation.attributes["onnxc.blob"] = blob
    assert same(tz.attribute_to_array(module.operation.attributes["onnxc.blob"])[0], vals)
    # A dense complex attribute can only be made by parsing IR that holds it: the bindings abort
    # on most other routes to one.
    module = ir.Module.parse(
        "module attributes {onnxc.c = dense<[(1.0, 2.0), (0.0, -3.0)]> : tensor<2xcomplex<f64>>, "
        "onnxc.list = [dense<[(1.0, 2.0), (0.0, -3.0)]> : tensor<2xcomplex<f64>>, "
        "dense<[(1.0, 2.0), (0.0, -3.0)]> : tensor<2xcomplex<f64>>]} {}"
    )
    with pytest.raises(TypeError):
        module.operation.attributes["onnxc.c"]
    got = tz.get_attribute(module.operation, "onnxc.c")
    assert same(numpy_helper.to_array(tz.attribute_to_tensor(got, "c")), vals)
    assert tz.get_attribute(module.operation, "onnxc.missing") is None
    items = tz.array_elements(tz.get_attribute(module.operation, "onnxc.list"))
    assert len(items) == 2 and same(tz.attribute_to_array(items[1])[0], vals)
