"""Tests of the on-disk compile cache (`onnxc.targets.cpu.cache`) through `onnxc.compile`: a second
compile of the same model loads the stored library (no compile) and computes the same outputs as
`onnx.reference`; a changed option, model or compiler source misses; `cache_dir=False`,
`ONNXC_CACHE_DIR=off` and IR-keeping compiles never touch it; a broken entry is recompiled."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.targets.cpu import AotFunction, CompiledFunction, CpuPipelineOptions
from onnxc.targets.cpu import cache


def matmul_model(w: np.ndarray, rows: int, relu: bool) -> onnx.ModelProto:
    """y = x @ w (then Relu), x of shape [rows, w.shape[0]]."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m" if relu else "y"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["m"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, w.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, w.shape[1]])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def small_model(scale: float = 1.0) -> onnx.ModelProto:
    w = (scale * np.random.default_rng(0).standard_normal((8, 4))).astype(np.float32)
    return matmul_model(w, 2, relu=True)


X = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)


@pytest.fixture(autouse=True)
def store_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Store even sub-second compiles, and ignore the environment's setting."""
    monkeypatch.setattr(cache, "MIN_COMPILE_S", 0.0)
    monkeypatch.delenv(cache.ENV, raising=False)


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.so"))


def test_second_compile_loads_from_the_cache(tmp_path: Path) -> None:
    model = small_model()
    (want,) = ReferenceEvaluator(model).run(None, {"x": X})
    first = onnxc.compile(model, cache_dir=tmp_path)
    assert isinstance(first.function, CompiledFunction)
    assert len(entries(tmp_path)) == 1
    second = onnxc.compile(model, cache_dir=tmp_path)
    assert isinstance(second.function, AotFunction)
    assert second.function.path == entries(tmp_path)[0]
    np.testing.assert_allclose(first(X)[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second(X)[0], want, rtol=1e-5, atol=1e-6)
    assert second.input_names == ["x"] and second.output_names == ["y"]


def test_a_path_and_its_bytes_share_an_entry(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(small_model(), path)
    folder = tmp_path / "cache"
    onnxc.compile(str(path), cache_dir=folder)
    assert isinstance(onnxc.compile(path.read_bytes(), cache_dir=folder).function, AotFunction)


def test_changed_option_or_model_misses(tmp_path: Path) -> None:
    onnxc.compile(small_model(), cache_dir=tmp_path)
    level = 1 if CpuPipelineOptions().jit_opt_level != 1 else 2  # any level but the default
    other = onnxc.compile(small_model(), options=CpuPipelineOptions(jit_opt_level=level), cache_dir=tmp_path)
    assert isinstance(other.function, CompiledFunction)
    changed = onnxc.compile(small_model(scale=2.0), cache_dir=tmp_path)
    assert isinstance(changed.function, CompiledFunction)
    (want,) = ReferenceEvaluator(small_model(scale=2.0)).run(None, {"x": X})
    np.testing.assert_allclose(changed(X)[0], want, rtol=1e-5, atol=1e-6)
    assert len(entries(tmp_path)) == 3


def test_changed_compiler_sources_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    onnxc.compile(small_model(), cache_dir=tmp_path)
    monkeypatch.setattr(cache, "source_fingerprint", lambda: "another compiler")
    assert isinstance(onnxc.compile(small_model(), cache_dir=tmp_path).function, CompiledFunction)


def test_disabled_cache_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    onnxc.compile(small_model(), cache_dir=False)
    monkeypatch.setenv(cache.ENV, "off")
    onnxc.compile(small_model())
    onnxc.compile(small_model(), cache_dir=tmp_path, keep_ir=True)  # IR wanted: always compiled
    assert entries(tmp_path) == []


def test_environment_names_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    onnxc.compile(small_model())
    assert isinstance(onnxc.compile(small_model()).function, AotFunction)


def test_broken_entry_is_recompiled(tmp_path: Path) -> None:
    onnxc.compile(small_model(), cache_dir=tmp_path)
    (lib,) = entries(tmp_path)
    lib.unlink()  # a new file, as a crashed writer or another tool would leave it
    lib.write_bytes(b"not a shared library")
    again = onnxc.compile(small_model(), cache_dir=tmp_path)
    assert isinstance(again.function, CompiledFunction)
    (want,) = ReferenceEvaluator(small_model()).run(None, {"x": X})
    np.testing.assert_allclose(again(X)[0], want, rtol=1e-5, atol=1e-6)
    assert isinstance(onnxc.compile(small_model(), cache_dir=tmp_path).function, AotFunction)


def test_threaded_entry_loads_in_a_fresh_process(tmp_path: Path) -> None:
    """Code compiled for 2 threads calls the thread runtime (libiomp5): the stored library links it, so a
    process that has not loaded it (no JIT ran there) still gets a hit that runs correctly."""
    import subprocess
    import sys

    rng = np.random.default_rng(2)
    w = rng.standard_normal((256, 256)).astype(np.float32)
    model = matmul_model(w, 64, relu=False)
    path = tmp_path / "mm.onnx"
    onnx.save(model, path)
    folder = tmp_path / "cache"
    options = CpuPipelineOptions(threads=2) if "threads" in CpuPipelineOptions.__dataclass_fields__ else CpuPipelineOptions()
    onnxc.compile(str(path), options=options, cache_dir=folder)
    assert len(entries(folder)) == 1
    x = rng.standard_normal((64, 256)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, onnxc\n"
        "from onnxc.targets.cpu import AotFunction, CpuPipelineOptions\n"
        f"opts = {options!r}\n"
        f"m = onnxc.compile({str(path)!r}, options=opts, cache_dir={str(folder)!r})\n"
        "assert isinstance(m.function, AotFunction), type(m.function)\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, m(np.load({str(tmp_path / 'x.npy')!r}))[0])\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ w, rtol=1e-4, atol=1e-4)


def test_resolve_dir() -> None:
    assert cache.resolve_dir(False) is None
    assert cache.resolve_dir("off") is None
    assert cache.resolve_dir("/tmp/x") == Path("/tmp/x")
    assert cache.resolve_dir(True) == cache.DEFAULT_DIR
    assert cache.resolve_dir(None) == (cache.DEFAULT_DIR if cache.DEFAULT_ENABLED else None)


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    store = cache.ModelCache(tmp_path, max_bytes=10)
    for i, name in enumerate(("old", "new")):
        p = tmp_path / f"{name}.so"
        p.write_bytes(b"x" * 8)
        (tmp_path / f"{name}.so.json").write_text("{}")
        os.utime(p, (1000 + i, 1000 + i))
    store.prune()
    assert [p.name for p in entries(tmp_path)] == ["new.so"]
    assert not (tmp_path / "old.so.json").exists()
