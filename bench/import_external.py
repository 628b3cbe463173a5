"""Benchmark: importing a model with about 1 GB of external weights, against reading the file once.

Builds (in a temporary folder) a chain of MatMul + Add layers whose float32 weights live in one
external data file (`weights.bin`, offsets aligned to 4096 as onnx recommends), then measures in
fresh child processes (so one measurement cannot warm the other's Python heap):

* **read**: reading `weights.bin` once into a reused buffer (what `cat file > /dev/null` does);
  best of three, after a warm-up read so both sides see the page cache alike;
* **import**: `onnxc.importers.import_model(path)`: wall time and peak RSS (`ru_maxrss`) of the
  child, minus the RSS the child had after importing its libraries (the baseline).

Goals (issue 3): import time < 2x the read time and import peak memory < 1.3x the weights' size.
Both hold only if large tensors are never copied: the importer hands MLIR `dense_resource` blobs
that are numpy views into a memory map of the file, and the pages are not even read until a pass
touches them. After the measurement the child checks that the weights it sees through the IR equal
the file's (one layer, read back through `onnxc.importers.tensors.attribute_to_array`).

Usage: `python bench/import_external.py [--gb 1.0] [--layers 16] [--keep DIR]`; `--gb 0.05` makes a
smoke test of a few seconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper

ALIGN = 4096


def build_model(folder: Path, gb: float, layers: int) -> tuple[Path, int]:
    """Write model.onnx and weights.bin into `folder`; return the model path and weight bytes."""
    per_layer = gb * 2**30 / layers
    n = max(16, int((per_layer / 4) ** 0.5) // 16 * 16)  # square n x n float32 weights
    x = helper.make_tensor_value_info("x", T.FLOAT, [1, n])
    nodes, inits = [], []
    offset = 0
    rng = np.random.default_rng(0)
    with open(folder / "weights.bin", "wb") as f:
        for i in range(layers):
            for name, shape in ((f"w{i}", (n, n)), (f"b{i}", (n,))):
                # Random rows are written a slice at a time so the builder itself stays small.
                rows = shape[0] if len(shape) == 2 else 1
                step = max(1, (8 << 20) // (4 * n))
                for r in range(0, rows, step):
                    chunk = rng.random((min(step, rows - r), n if len(shape) == 2 else shape[0]), dtype=np.float32)
                    f.write((chunk - np.float32(0.5)).tobytes())
                length = 4 * int(np.prod(shape))
                t = onnx.TensorProto(name=name, data_type=T.FLOAT, dims=list(shape), data_location=T.EXTERNAL)
                for k, v in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(length))):
                    t.external_data.add(key=k, value=v)
                inits.append(t)
                offset += length
                pad = -offset % ALIGN
                f.write(b"\x00" * pad)
                offset += pad
            prev = "x" if i == 0 else f"h{i - 1}"
            nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"matmul{i}"))
            nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], [f"h{i}"], name=f"add{i}"))
    y = helper.make_tensor_value_info(f"h{layers - 1}", T.FLOAT, [1, n])
    graph = helper.make_graph(nodes, "chain", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    path = folder / "model.onnx"
    onnx.save(model, path)
    weights = sum(4 * int(np.prod(t.dims)) for t in inits)
    return path, weights


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child_read(path: str) -> dict:
    """Read the file once in 16 MB blocks into one reused buffer."""
    buf = bytearray(16 << 20)
    view = memoryview(buf)
    t0 = time.perf_counter()
    total = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(view)
            if not n:
                break
            total += n
    return {"seconds": time.perf_counter() - t0, "bytes": total}


def child_import(path: str) -> dict:
    """Import the model; report time, peak RSS growth and a check of one layer's weights."""
    import resource

    from onnxc.importers import import_model, tensors  # noqa: F401 - loaded before the baseline

    import mlir.ir  # noqa: F401

    baseline_kb = _rss_kb()
    t0 = time.perf_counter()
    module = import_model(path)
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Check through the IR: the first weight equals the file's bytes at its offset.
    text_ops = 0
    resources = 0
    check = None
    for op in module.body.operations:
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    text_ops += 1
                    if "value" in inner.attributes:
                        attr = inner.attributes["value"]
                        if str(attr).startswith("dense_resource<"):
                            resources += 1
                            if check is None:
                                values, _ = tensors.attribute_to_array(attr)
                                n = values.shape[0]
                                ref = np.fromfile(Path(path).parent / "weights.bin", dtype=np.float32, count=values.size).reshape(values.shape)
                                check = bool(np.array_equal(values, ref)) and n > 0
    # Then consume every weight once through the IR (what a constant-folding or codegen pass does):
    # the pages are read now, once, straight from the page cache into the blobs' views.
    t1 = time.perf_counter()
    total = 0.0
    for op in module.body.operations:
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    if "value" in inner.attributes and str(inner.attributes["value"]).startswith("dense_resource<"):
                        values, _ = tensors.attribute_to_array(inner.attributes["value"])
                        total += float(values.sum(dtype=np.float64))
    touch_seconds = time.perf_counter() - t1
    touch_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seconds": seconds, "baseline_kb": baseline_kb, "peak_kb": peak_kb, "ops": text_ops,
        "resources": resources, "first_weight_matches": check, "touch_seconds": touch_seconds,
        "touch_peak_kb": touch_peak_kb, "sum": total,
    }  # fmt: skip


def run_child(kind: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(path)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gb", type=float, default=1.0, help="size of the external weights in GiB (default 1.0)")
    p.add_argument("--layers", type=int, default=16, help="MatMul+Add layers (default 16)")
    p.add_argument("--keep", type=Path, help="build the model in this folder and keep it")
    p.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        kind, path = args.child
        print(json.dumps(child_read(path) if kind == "read" else child_import(path)))
        return 0

    tmp = None
    if args.keep:
        folder = args.keep
        folder.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="onnxc_bench_")
        folder = Path(tmp.name)
    t0 = time.perf_counter()
    model_path, weights = build_model(folder, args.gb, args.layers)
    print(f"built {model_path} ({model_path.stat().st_size} bytes) + weights.bin ({weights / 2**30:.3f} GiB) in {time.perf_counter() - t0:.1f} s")
    data = folder / "weights.bin"
    run_child("read", data)  # warm the page cache so that read and import see the same state
    reads = [run_child("read", data)["seconds"] for _ in range(3)]
    imp = run_child("import", model_path)
    read_s = min(reads)
    grow_kb = imp["peak_kb"] - imp["baseline_kb"]
    weights_kb = weights / 1024
    print(f"read weights.bin once: {read_s:.3f} s ({weights / read_s / 2**30:.2f} GiB/s, best of 3)")
    print(f"import_model:          {imp['seconds']:.3f} s, {imp['ops']} ops, {imp['resources']} dense_resource blobs, "
          f"first weight matches the file: {imp['first_weight_matches']}")  # fmt: skip
    print(f"import peak RSS:       {imp['peak_kb'] / 1024:.1f} MiB (baseline after imports {imp['baseline_kb'] / 1024:.1f} MiB, "
          f"growth {grow_kb / 1024:.1f} MiB)")  # fmt: skip
    print(f"then every weight read once through the IR: {imp['touch_seconds']:.3f} s, peak RSS {imp['touch_peak_kb'] / 1024:.1f} MiB "
          f"(file pages mapped, not copied)")  # fmt: skip
    print(f"ratio import/read time:         {imp['seconds'] / read_s:.3f}  (goal < 2)")
    print(f"ratio (import + use)/read time: {(imp['seconds'] + imp['touch_seconds']) / read_s:.3f}")
    print(f"ratio peak RSS/weights:         {imp['peak_kb'] / weights_kb:.3f}  (goal < 1.3; includes the interpreter)")
    print(f"ratio RSS growth/weights:       {grow_kb / weights_kb:.3f}")
    print(f"ratio peak RSS after use/weights: {imp['touch_peak_kb'] / weights_kb:.3f}")
    if tmp is not None:
        tmp.cleanup()
    ok = imp["seconds"] < 2 * read_s and imp["peak_kb"] < 1.3 * weights_kb and imp["first_weight_matches"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
