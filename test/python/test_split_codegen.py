"""Tests of `onnxc.targets.cpu.split_codegen`: outlined parts compiled by a child process (opt, llc,
cc) compute what onnx.reference computes, report their run-time checks through the parent's
status words, survive the compile cache (a fresh process loads the linked library), and a child
that fails leaves the whole module to the ExecutionEngine. Which functions may go is checked on a
small LLVM-dialect module."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.dialect import onnx_context
from onnxc.errors import OnnxcError
from onnxc.targets.cpu import CpuPipelineOptions, split_codegen
from onnxc.targets.cpu import cache

WIDTH = 64  # 64 x 64 f32 weights: 16 KiB, external (weights.py) like a real model's


def layered_model(layers: int = 40) -> onnx.ModelProto:
    """`layers` x (MatMul by a constant, Relu), then ReduceSum and an Expand to a run-time shape
    `s` (node 'e1'): long enough to be outlined into parts, the Expand's allocation in one."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) / 8).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        x = f"r{i}"
    nodes += [
        helper.make_node("ReduceSum", [x], ["t"], keepdims=0),
        helper.make_node("Reshape", ["t", "one"], ["t1"]),
        helper.make_node("Expand", ["t1", "s"], ["y"], name="e1"),
    ]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "one"))
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, WIDTH]), helper.make_tensor_value_info("s", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


X = np.random.default_rng(1).standard_normal((4, WIDTH)).astype(np.float32)
SHAPE = np.array([2, 1, 3], np.int64)
HUGE = np.array([1000000, 100000, 1000], np.int64)  # 4e14 bytes: malloc fails


def expected(model: onnx.ModelProto) -> np.ndarray:
    return ReferenceEvaluator(model).run(None, {"x": X, "s": SHAPE})[0]


@pytest.fixture
def split_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split even a small module, and give the child every part it may take."""
    monkeypatch.setattr(split_codegen, "MIN_SPLIT_COST", 0)
    monkeypatch.setattr(split_codegen, "CHILD_SHARE", 1.0)


def _defined(module: ir.Module) -> set[str]:
    return {
        ir.StringAttr(op.operation.attributes["sym_name"]).value
        for op in module.body.operations
        if op.operation.name == "llvm.func" and len(op.operation.regions[0].blocks)
    }


@pytest.mark.parametrize("threads", [1, 2])
def test_parts_from_the_child_compute_and_report_failures(split_everything: None, threads: int) -> None:
    """Every part runs from the child's library (the parent keeps only the entry, its C interface
    and the status functions); the output matches onnx.reference; the Expand's failed allocation,
    in a part of the child, reaches the caller through the parent's status words as a clear
    error, and the next valid call works."""
    model = layered_model()
    compiled = onnxc.compile(model, cache_dir=False, options=CpuPipelineOptions(threads=threads))
    split = compiled.function.split
    assert split is not None and split.library is not None
    assert any("__part" in f for f in split.functions), split.functions
    assert split.moved_globals == ["__onnxc_status"]
    assert _defined(split.parent) == {"g", "_mlir_ciface_g", "onnxc_status_words", split_codegen.EXPORT_FUNCTION}
    (y,) = compiled(X, SHAPE)
    np.testing.assert_allclose(y, expected(model), rtol=1e-4, atol=1e-6)
    with pytest.raises(OnnxcError, match="Expand node 'e1': could not allocate 400000000000000 bytes"):
        compiled(X, HUGE)
    (y,) = compiled(X, SHAPE)
    np.testing.assert_allclose(y, expected(model), rtol=1e-4, atol=1e-6)


def test_split_and_unsplit_code_agree(split_everything: None) -> None:
    """The same LLVM, pipeline and CPU on both sides of the split: the results are bit for bit
    those of the module compiled whole in the ExecutionEngine."""
    model = layered_model()
    whole = onnxc.compile(model, cache_dir=False, options=CpuPipelineOptions(split_codegen=False))
    split = onnxc.compile(model, cache_dir=False)
    assert whole.function.split is None and split.function.split is not None
    np.testing.assert_array_equal(split(X, SHAPE)[0], whole(X, SHAPE)[0])


def test_small_module_compiles_in_one_process() -> None:
    """Below MIN_SPLIT_COST the child would cost more than it saves."""
    compiled = onnxc.compile(layered_model(layers=2), cache_dir=False)
    assert compiled.function.split is None


def test_failed_child_leaves_the_module_to_the_engine(split_everything: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that fails (here: `opt` is /bin/false) costs time, never code: the module is
    compiled whole and computes the reference's result."""
    tools = split_codegen._tools()
    assert tools is not None
    monkeypatch.setattr(split_codegen, "_tools", lambda: ("/bin/false", *tools[1:]))
    model = layered_model()
    compiled = onnxc.compile(model, cache_dir=False)
    assert compiled.function.split is None
    np.testing.assert_allclose(compiled(X, SHAPE)[0], expected(model), rtol=1e-4, atol=1e-6)


def test_failed_engine_stops_the_child(split_everything: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile that fails in the parent (here: the engine cannot be created) stops its child
    instead of leaving it compiling, and the error reaches the caller."""
    from onnxc.targets.cpu import jit
    from onnxc.targets.cpu.abi import CpuTargetError

    started: list[split_codegen.SplitCodegen] = []
    start = split_codegen.start_split

    def recording_start(*args: object, **kwargs: object) -> split_codegen.SplitCodegen | None:
        split = start(*args, **kwargs)  # type: ignore[arg-type]
        if split is not None:
            started.append(split)
        return split

    def no_engine(*args: object) -> None:
        raise CpuTargetError("JIT: cannot create the execution engine (test)")

    monkeypatch.setattr(jit, "start_split", recording_start)
    monkeypatch.setattr(jit, "_engine", no_engine)
    with pytest.raises(OnnxcError, match="cannot create the execution engine"):
        onnxc.compile(layered_model(), cache_dir=False)
    assert len(started) == 1 and started[0].process.poll() is not None


def test_cache_links_the_childs_object(split_everything: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A split compile is stored with the child's object linked in (its slots and cells set up by
    the library's constructor); a fresh process loads it without compiling, computes the
    reference's result and reports the Expand's failure."""
    monkeypatch.setattr(cache, "MIN_COMPILE_S", 0.0)
    model = layered_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    folder = tmp_path / "cache"
    compiled = onnxc.compile(str(path), cache_dir=folder)
    assert compiled.function.split is not None
    assert len(list(folder.glob("*.so"))) == 1
    np.save(tmp_path / "x.npy", X)
    code = textwrap.dedent(
        f"""
        import numpy as np, onnxc
        from onnxc.errors import OnnxcError
        from onnxc.targets.cpu import AotFunction
        c = onnxc.compile({str(path)!r}, cache_dir={str(folder)!r})
        assert isinstance(c.function, AotFunction), type(c.function)
        x = np.load({str(tmp_path / "x.npy")!r})
        try:
            c(x, np.array([1000000, 100000, 1000]))
        except OnnxcError as exc:
            print("refused:", exc)
        (y,) = c(x, np.array([2, 1, 3]))
        np.save({str(tmp_path / "y.npy")!r}, y)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Expand node 'e1': could not allocate 400000000000000 bytes" in r.stdout, r.stdout
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected(model), rtol=1e-4, atol=1e-6)


PLAN_SRC = """
llvm.mlir.global private constant @table(dense<1.0> : tensor<4xf32>) {addr_space = 0 : i32} : !llvm.array<4 x f32>
llvm.mlir.global private @words(dense<0> : tensor<2xi64>) {addr_space = 0 : i32} : !llvm.array<2 x i64>
llvm.mlir.global external constant @weight() {addr_space = 0 : i32} : !llvm.array<4096 x f32>
llvm.func @malloc(i64) -> !llvm.ptr
llvm.func @only_in_the_engine(i64)
llvm.func @takes(%n: i64) -> !llvm.ptr {
  %t = llvm.mlir.addressof @table : !llvm.ptr
  %w = llvm.mlir.addressof @words : !llvm.ptr
  %p = llvm.call @malloc(%n) : (i64) -> !llvm.ptr
  llvm.return %p : !llvm.ptr
}
llvm.func @calls_a_hook(%n: i64) {
  llvm.call @only_in_the_engine(%n) : (i64) -> ()
  llvm.return
}
llvm.func @reads_a_weight() -> !llvm.ptr {
  %w = llvm.mlir.addressof @weight : !llvm.ptr
  llvm.return %w : !llvm.ptr
}
llvm.func @address_taken(%n: i64) {
  llvm.return
}
llvm.func @calls_a_sibling(%n: i64) {
  llvm.call @address_taken(%n) : (i64) -> ()
  llvm.return
}
llvm.func @main(%n: i64) -> !llvm.ptr {
  %f = llvm.mlir.addressof @address_taken : !llvm.ptr
  %p = llvm.call @takes(%n) : (i64) -> !llvm.ptr
  llvm.call @calls_a_hook(%n) : (i64) -> ()
  llvm.call @calls_a_sibling(%n) : (i64) -> ()
  %w = llvm.call @reads_a_weight() : () -> !llvm.ptr
  llvm.return %p : !llvm.ptr
}
"""


def test_only_self_contained_parts_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child gets a function that calls only what the process resolves (malloc) and uses
    globals with a value: the constant is copied, the mutable one moved (its address handed over
    at load time). A function that calls a symbol only the engine knows (a run-time hook), one
    that reads an external weight, one whose address is taken, one that calls a function of the
    module, and the kept entry all stay."""
    monkeypatch.setattr(split_codegen, "MIN_SPLIT_COST", 0)
    monkeypatch.setattr(split_codegen, "CHILD_SHARE", 1.0)
    with onnx_context():
        module = ir.Module.parse(PLAN_SRC)
    plan = split_codegen._plan(module, {"main"})
    assert plan is not None
    assert plan.functions == ["takes"]
    assert plan.copied == ["table"] and plan.moved == ["words"] and plan.declared == ["malloc"]
    child = split_codegen._child_module(module, plan)
    parent = split_codegen._parent_module(module, plan)
    assert child.operation.verify() and parent.operation.verify()
    assert _defined(child) == {"takes"}
    assert "takes" not in _defined(parent) and split_codegen.EXPORT_FUNCTION in _defined(parent)
    # The parent calls `takes` through its slot; the child reads `words` through its cell.
    assert "llvm.mlir.addressof @takes__onnxc_slot" in str(parent)
    assert "llvm.mlir.addressof @words__onnxc_ref" in str(child) and "@words(" not in str(child)
