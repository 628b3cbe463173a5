"""Roofline figures measured once per machine and cached: the CPU's, and the devices' built-in backends.

What: `cpu_figures()` returns `{"macs": {"f32": Figure, "f64": Figure}, "memory_bandwidth": Figure}`.
The first call on a machine runs a micro-benchmark of a few hundred milliseconds (numpy matmuls
for MACs/s, a large array copy for bandwidth; best of a few repetitions, because the machine may
be busy) and writes the numbers to `cpu_figures.json` in the onnxc cache folder
(`$ONNXC_CACHE_DIR`, else `~/.cache/onnxc`, the folder of the CPU target's model cache), keyed
by the machine (host name, CPU model, core count) so a shared home folder does not hand one
machine's figures to another. Later calls (and processes) read the file; provenance says
"measured <UTC date>".

`device_figures(backend, device)` does the same for a device backend (Vulkan) through its own
compiled graphs (`measure_graphs`: a MatMul and a Relu, timed end to end), cached per machine
and device; a plug-in may declare its figures instead.

Why measured, not a table: the partitioner compares the CPU with devices, and a wrong CPU figure
moves every decision; a table fitted to one machine would be wrong on the next (the issue's
"figures that are measured, not guessed"). numpy's BLAS uses every core, which is what the CPU
target's generated code does too; it is an upper bound of what onnxc reaches, stated as such.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnxc.targets.backends.base import Backend, Figure
from onnxc.targets.cpu.cache import DEFAULT_DIR, ENV

__all__ = ["CACHE_FILE", "cached", "cpu_figures", "device_figures", "figures_path", "machine_key", "measure_cpu", "measure_graphs"]

CACHE_FILE = "cpu_figures.json"
_OFF = {"", "0", "off", "none", "false", "no"}


def figures_path() -> Path | None:
    """Where the figures are cached: `$ONNXC_CACHE_DIR/cpu_figures.json`, else under
    ~/.cache/onnxc; None when `$ONNXC_CACHE_DIR` turns caching off (measured every process)."""
    env = os.environ.get(ENV)
    if env is not None:
        if env.strip().lower() in _OFF:
            return None
        return Path(env).expanduser() / CACHE_FILE
    return DEFAULT_DIR / CACHE_FILE


def machine_key() -> str:
    """What identifies the machine the figures belong to."""
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:  # not Linux: platform.processor() is what there is
        pass
    return f"{platform.node()}|{model}|{os.cpu_count()}"


#: Seconds each figure may take (best of as many runs as fit, at least `_MIN_RUNS`): a fixed
#: repetition count would take seconds on a slow or busy machine and learn little on a fast one.
_BUDGET_S = 0.12
_MIN_RUNS = 2


def _best(fn: Any) -> float:
    fn()  # warm-up: page faults, BLAS thread start
    best = float("inf")
    start = time.perf_counter()
    runs = 0
    while runs < _MIN_RUNS or (time.perf_counter() - start < _BUDGET_S and runs < 50):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best


def measure_cpu() -> dict[str, Any]:
    """Run the micro-benchmark (a few hundred ms) and return the raw numbers."""
    n = 384  # 57 M MACs: long enough to reach the BLAS kernel's peak, short on a slow machine
    rng = np.random.default_rng(0)
    macs: dict[str, float] = {}
    for dtype in ("f32", "f64"):
        a = rng.standard_normal((n, n)).astype(np.float32 if dtype == "f32" else np.float64)
        b = rng.standard_normal((n, n)).astype(a.dtype)
        c = np.empty_like(a)
        t = _best(lambda: np.matmul(a, b, out=c))
        macs[dtype] = n**3 / t
    src = np.ones(16 << 20, dtype=np.float32)  # 64 MiB: larger than any last-level cache
    dst = np.empty_like(src)
    t = _best(lambda: np.copyto(dst, src))
    bandwidth = 2 * src.nbytes / t  # read + write
    return {"macs": macs, "memory_bandwidth": bandwidth, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")}


def cached(key: str, measure: Callable[[], dict[str, Any]], refresh: bool = False) -> dict[str, Any]:
    """The raw figures stored under `key` in the cache file, or `measure()`'s (then stored)."""
    path = figures_path()
    raw: dict[str, Any] | None = None
    if path is not None and not refresh and path.exists():
        try:
            raw = json.loads(path.read_text()).get(key)
        except (OSError, ValueError):  # an unreadable or half-written file is measured again
            raw = None
    if raw is None:
        raw = measure()
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                stored = json.loads(path.read_text()) if path.exists() else {}
            except (OSError, ValueError):
                stored = {}
            stored[key] = raw
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            try:
                tmp.write_text(json.dumps(stored, indent=1))
                tmp.replace(path)  # atomic: two processes measuring at once both succeed
            except OSError:  # a read-only cache folder: the figures are still good for this process
                pass
    return raw


def cpu_figures(refresh: bool = False) -> dict[str, Any]:
    """The CPU's figures with provenance, from the cache file or measured now (and stored)."""
    raw = cached(machine_key(), measure_cpu, refresh)
    how = f"measured {raw['date']}"
    return {
        "macs": {k: Figure(float(v), how) for k, v in raw["macs"].items()},
        "memory_bandwidth": Figure(float(raw["memory_bandwidth"]), how),
    }


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, list[int]]], output: tuple[str, list[int]]) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, "measure", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def measure_graphs(backend: Backend) -> dict[str, Any]:
    """A device's figures measured through its own compiled graphs (`init_graph`/`run_graph`):
    a 256^3 f32 MatMul for MACs/s, a Relu over 16 MiB for the bandwidth. Both are timed end to
    end, inputs written and outputs read back included, so they are what a subgraph really costs
    (a lower bound of the device's own peak, and the link's bandwidth with the kernel's time in
    it); the Relu figure stands for memory and both link directions."""
    from onnx import helper

    n = 256
    rng = np.random.default_rng(0)
    mm = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [n, n]), ("b", [n, n])], ("y", [n, n]))
    count = 4 << 20
    relu = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", [count])], ("y", [count]))
    out: dict[str, Any] = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")}
    graph = backend.init_graph(mm)
    try:
        graph.set_graph_io({"a": rng.standard_normal((n, n)).astype(np.float32), "b": rng.standard_normal((n, n)).astype(np.float32)})
        out["macs"] = {"f32": n**3 / _best(lambda: graph.run_graph().result())}
    finally:
        graph.release_graph()
    graph = backend.init_graph(relu)
    try:
        graph.set_graph_io({"x": rng.standard_normal(count).astype(np.float32)})
        out["bandwidth"] = 2 * 4 * count / _best(lambda: graph.run_graph().result())
    finally:
        graph.release_graph()
    return out


def device_figures(backend: Backend, device: str, refresh: bool = False) -> dict[str, Any]:
    """`measure_graphs` figures of `backend` on `device`, cached per machine and device."""
    raw = cached(f"{machine_key()}|{backend.name}|{device}", lambda: measure_graphs(backend), refresh)
    how = f"measured {raw['date']} end to end (transfers included)"
    bw = Figure(float(raw["bandwidth"]), how)
    return {"macs": {k: Figure(float(v), how) for k, v in raw["macs"].items()}, "memory_bandwidth": bw, "host_to_device": bw, "device_to_host": bw}
