"""onnxc's C interface (issue 12 item 5): libonnxc_onnxifi.so and a C program using it.

The library and `onnxifi_selftest.c` are built here with the system C compiler
(`onnxc.targets.backends.cbuild`), the program discovers the backends through
`onnxGetBackendIDs`/`onnxGetBackendInfo`, asks `onnxGetBackendCompatibility` node by node,
offloads a model (a weight given at `onnxInitGraph`, input and output buffers at
`onnxSetGraphIO`, an input event and an output event at `onnxRunGraph`), compares the output
with `onnx.reference`'s, and checks that wrong handles, descriptors and states give status codes
(see the program's header). Run for the CPU, for the example plug-in's simulated accelerator
(installed as in test_backend_plugin.py) and for Vulkan where a device exists.

The compatibility statuses the C program prints are compared with the answers of the same
backends asked in Python, mapped as the interface documents (supported: SUCCESS, partially:
FALLBACK, unsupported: UNSUPPORTED_OPERATOR).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from test_backend_plugin import install

from onnxc.targets.backends import cabi, cbuild

pytestmark = pytest.mark.skipif(
    not shutil.which(os.environ.get("CC") or "cc") and not shutil.which("gcc"), reason="no C compiler on this machine"
)

NODES = {
    "matmul_f32": ("MatMul", TensorProto.FLOAT, [[4, 8], [8, 8]], [4, 8]),
    "add_f32": ("Add", TensorProto.FLOAT, [[4, 8], [8]], [4, 8]),
    "relu_f32": ("Relu", TensorProto.FLOAT, [[4, 8]], [4, 8]),
    "softmax_f32": ("Softmax", TensorProto.FLOAT, [[4, 8]], [4, 8]),
    "add_i64": ("Add", TensorProto.INT64, [[4, 8], [4, 8]], [4, 8]),
}


def _model() -> onnx.ModelProto:
    b = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]), helper.make_node("Relu", ["hb"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]), helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _node(op: str, dtype: int, shapes: list[list[int]], out: list[int]) -> onnx.ModelProto:
    names = [f"i{k}" for k in range(len(shapes))]
    g = helper.make_graph([helper.make_node(op, names, ["o"])], op, [helper.make_tensor_value_info(n, dtype, s) for n, s in zip(names, shapes)],
                          [helper.make_tensor_value_info("o", dtype, out)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The library and the self-test program, built once for the module."""
    out = tmp_path_factory.mktemp("onnxifi")
    lib = cbuild.build_library(out)
    exe = out / "onnxifi_selftest"
    source = cbuild.header().parent / "onnxifi_selftest.c"
    cmd = [cbuild.compiler(), "-std=gnu11", "-O1", "-Wall", "-Werror", f"-I{cbuild.header().parent}", str(source), "-o", str(exe),
           f"-L{out}", "-lonnxc_onnxifi", f"-Wl,-rpath,{lib.parent}", "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, onnx.ModelProto]]:
    """The program's arguments after the backend name: model, x, w, expected y, node models."""
    d = tmp_path_factory.mktemp("onnxifi_data")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    model = _model()
    y = ReferenceEvaluator(model).run(None, {"x": x, "w": w})[0].astype(np.float32)
    onnx.save(model, str(d / "model.onnx"))
    for name, array in (("x", x), ("w", w), ("y", y)):
        (d / f"{name}.bin").write_bytes(np.ascontiguousarray(array).tobytes())
    nodes = {}
    for name, spec in NODES.items():
        nodes[name] = _node(*spec)
        onnx.save(nodes[name], str(d / f"{name}.onnx"))
    args = [str(d / "model.onnx"), str(d / "x.bin"), str(d / "w.bin"), str(d / "y.bin")] + [str(d / f"{n}.onnx") for n in NODES]
    return args, nodes


def _vulkan_present() -> bool:
    try:
        from onnxc.targets.vulkan import vulkan_context

        vulkan_context()
        return True
    except Exception:  # noqa: BLE001 - VulkanUnavailable, or the package missing
        return False


@pytest.mark.parametrize("backend", ["cpu", "simaccel", pytest.param("vulkan", marks=pytest.mark.skipif(not _vulkan_present(), reason="no Vulkan device"))])
def test_c_program_discovers_checks_offloads_and_compares(program: Path, inputs, backend: str, tmp_path: Path, tmp_path_factory) -> None:
    args, nodes = inputs
    src = install(tmp_path / "site")  # the example plug-in, seen by the embedded interpreter
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(src), os.environ.get("PYTHONPATH", "")]),
        "ONNXC_PYTHON": sys.executable,
        "ONNXC_CACHE_DIR": str(tmp_path_factory.getbasetemp() / "figures"),
    }
    env = {k: v for k, v in env.items() if not k.startswith("ONNXC_SIM_ACCEL_")}
    done = subprocess.run([str(program), backend, *args], env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert done.returncode == 0 and "FAIL" not in out, out + done.stderr
    assert "ok outputs equal the expected ones" in out
    names = re.findall(r"^backend \d+: name=(\S+)", out, re.MULTILINE)
    assert names[0] == "cpu" and "simaccel" in names and ("vulkan" in names) == _vulkan_present(), out
    # The compatibility answers, node by node, are the Python backends' answers.
    from onnxc.targets.backends import backends

    sys.path[:0] = [str(tmp_path / "site"), str(src)]
    try:
        python_side = {b.name: b for b in backends()}[backend]
        c = cabi.constants()
        code = {"supported": c["ONNXIFI_STATUS_SUCCESS"], "partially supported": c["ONNXIFI_STATUS_FALLBACK"], "unsupported": c["ONNXIFI_STATUS_UNSUPPORTED_OPERATOR"]}
        printed = {m.group(1)[:-5]: int(m.group(2), 16) for m in re.finditer(r"^compat (\S+) 0x([0-9A-F]+)", out, re.MULTILINE)}
        assert set(printed) == set(NODES), out
        for name, model in nodes.items():
            assert printed[name] == code[python_side.compatibility(model).support.value], (name, out)
    finally:
        del sys.path[:2]
        for m in [m for m in sys.modules if m.startswith("onnxc_sim_accelerator")]:
            sys.modules.pop(m)
    if backend == "simaccel":  # the plug-in's documented subset: no Softmax, no int64
        assert printed["softmax_f32"] == printed["add_i64"] == c["ONNXIFI_STATUS_UNSUPPORTED_OPERATOR"]
        assert printed["matmul_f32"] == printed["add_f32"] == c["ONNXIFI_STATUS_SUCCESS"]


def test_cached_library_is_built_once(tmp_path: Path) -> None:
    first = cbuild.library(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert cbuild.library(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert first.parent.parent == tmp_path and first.name == cbuild.LIBRARY


def test_header_constants_are_read_by_the_python_side() -> None:
    c = cabi.constants()
    assert c["ONNXIFI_STATUS_SUCCESS"] == 0 and c["ONNXIFI_STATUS_FALLBACK"] == 1
    assert c["ONNXIFI_STATUS_INVALID_BACKEND"] == 0x106 and c["ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1"] == 0x43DFBF69
    # The data types are ONNX's, so descriptors and models agree.
    assert c["ONNXIFI_DATATYPE_FLOAT32"] == TensorProto.FLOAT and c["ONNXIFI_DATATYPE_FLOAT16"] == TensorProto.FLOAT16
    assert c["ONNXIFI_DATATYPE_INT64"] == TensorProto.INT64 and c["ONNXIFI_DATATYPE_UINT64"] == TensorProto.UINT64


def test_python_side_never_raises_into_c() -> None:
    c = cabi.constants()
    assert cabi.compatibility(0, b"\xff\xff junk")[0] == c["ONNXIFI_STATUS_INVALID_PROTOBUF"]
    assert cabi.info(10**6, 1)[0] == c["ONNXIFI_STATUS_INVALID_ID"]
    assert cabi.set_io(-1, [], [])[0] == c["ONNXIFI_STATUS_INVALID_GRAPH"]
    assert cabi.run_wait(-1)[0] == c["ONNXIFI_STATUS_INVALID_EVENT"]
    status, message = cabi.init_graph(0, _model().SerializeToString(), [("w", 1, (8, 8), 0)])[:2]
    assert status == c["ONNXIFI_STATUS_INVALID_POINTER"] and "'w': NULL buffer" in message


def test_library_in_a_python_host_uses_its_interpreter(program: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded by a Python process (ctypes), the library uses the running interpreter instead of
    starting one, and answers the same discovery as `backends()`."""
    import ctypes

    from onnxc.targets.backends import backends

    monkeypatch.setattr(cabi, "_backends", None)  # discovery of this process, now (not an earlier test's)

    lib = ctypes.CDLL(str(program.parent / cbuild.LIBRARY))
    lib.onnxGetBackendIDs.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    lib.onnxcGetLastErrorMessage.restype = ctypes.c_char_p
    count = ctypes.c_size_t(0)
    c = cabi.constants()
    assert lib.onnxGetBackendIDs(None, ctypes.byref(count)) == c["ONNXIFI_STATUS_FALLBACK"], lib.onnxcGetLastErrorMessage()
    assert count.value == len(backends())
    assert lib.onnxReleaseBackend(ctypes.c_void_p(0xDEAD)) == c["ONNXIFI_STATUS_INVALID_BACKEND"]
    assert b"not a live backend" in lib.onnxcGetLastErrorMessage()
