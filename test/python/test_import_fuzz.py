"""Fuzzing the importer: mutated models must import or raise onnxc's own error, never anything else.

Seeds are small valid models covering the importer's features (initializers of several element
types including int4, bfloat16 and strings, a sparse initializer, an If with captured values, a Loop,
a model-local function with an attribute reference, a custom-domain op, optional inputs left empty).
Two hypothesis searches mutate them:

* **bytes**: flips, inserts and truncations of the serialized protobuf, imported from `bytes`;
* **fields**: one to four structured edits of the ModelProto (wrong attribute types and values,
  removed or added inputs, renamed outputs and cycles, absurd or negative dims, random element
  type numbers, truncated tensor data, random op types, domains, opsets and IR versions, external
  data locations that escape, broken subgraphs and sparse indices), imported as a `ModelProto`.

Every case must either import or raise `onnxc.errors.OnnxcError` (of which `ImportError_` is one).
The searches run in a child process so that a native crash (a C++ assertion in MLIR or in onnx's
shape inference kills the process) fails the test instead of the test run: before each case the
child writes the case's bytes to a reproducer file, and the parent prints it (base64) when the
child dies.

* **external data**: models in a folder whose tensors point at the folder's data file, at a file
  outside it, at links leading in and out, at a FIFO, with random offsets, lengths, checksums,
  dims and element types, imported from the file path.

Cases: 400 byte-level plus 400 field-level plus 100 external-data examples by default
(derandomized, so CI is reproducible; about 20-40 s on the CI machine). `ONNXC_FUZZ_EXAMPLES=N` runs N of the first two and N/4 external-data cases instead, and
`ONNXC_FUZZ_RANDOM=1` draws fresh random cases (for long runs outside CI).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

DEFAULT_EXAMPLES = 400


# ----------------------------------------------------------------------------------------- seeds


def seeds() -> list[onnx.ModelProto]:
    """Small valid models that together touch most importer paths."""
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", T.FLOAT, [2, 3])
    op18 = [helper.make_opsetid("", 18)]
    out = []

    # 1. initializers of several types, a Constant, Clip with an omitted optional input
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    q = numpy_helper.from_array(np.array([[-8, 7, 1], [0, 3, -1]], dtype=__import__("ml_dtypes").int4), "q")
    b = numpy_helper.from_array(np.ones((2, 3), dtype=__import__("ml_dtypes").bfloat16), "b")
    s = helper.make_tensor("s", T.STRING, [2], [b"a", b"bc"])
    nodes = [
        helper.make_node("Add", ["x", "w"], ["t0"], name="add"),
        helper.make_node("Constant", [], ["hi"], name="k", value=helper.make_tensor("hv", T.FLOAT, [], [4.0])),
        helper.make_node("Clip", ["t0", "", "hi"], ["t1"], name="clip"),
        helper.make_node("Cast", ["q"], ["qf"], name="cq", to=T.FLOAT),
        helper.make_node("Cast", ["b"], ["bf"], name="cb", to=T.FLOAT),
        helper.make_node("Sum", ["t1", "qf", "bf"], ["t2"], name="sum"),
        helper.make_node("Transpose", ["t2"], ["t3"], name="tr", perm=[1, 0]),
        helper.make_node("Transpose", ["t3"], ["y"], name="tr2", perm=[1, 0]),
    ]
    g = helper.make_graph(nodes, "types", [x], [y, helper.make_tensor_value_info("s", T.STRING, [2])], initializer=[w, q, b, s])
    out.append(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))  # Cast allows int4 from opset 21

    # 2. If with captured outer values, sparse initializer, dim_params
    c = helper.make_tensor_value_info("c", T.BOOL, [])
    xs = helper.make_tensor_value_info("x", T.FLOAT, ["N", 3])
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["a"], name="neg")], "then", [],
                               [helper.make_tensor_value_info("a", T.FLOAT, ["N", 3])])  # fmt: skip
    else_g = helper.make_graph([helper.make_node("Mul", ["x", "dense"], ["e"], name="mul")], "else", [],
                               [helper.make_tensor_value_info("e", T.FLOAT, ["N", 3])])  # fmt: skip
    sp = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.5, 2.5], np.float32), "sp"),
                                   numpy_helper.from_array(np.array([0, 4], np.int64), "sp_i"), [2, 3])  # fmt: skip
    # No op but Constant takes a sparse tensor (Identity's and Mul's types are dense): the sparse
    # data reaches Mul through Constant's `sparse_value`, and the sparse initializer is an output.
    nodes = [
        helper.make_node("Constant", [], ["dense"], name="id", sparse_value=sp),
        helper.make_node("If", ["c"], ["r"], name="if", then_branch=then_g, else_branch=else_g),
    ]
    sp_out = helper.make_sparse_tensor_value_info("sp", T.FLOAT, [2, 3])
    g = helper.make_graph(nodes, "branchy", [c, xs], [helper.make_tensor_value_info("r", T.FLOAT, ["N", 3]), sp_out])
    g.sparse_initializer.append(sp)
    out.append(helper.make_model(g, opset_imports=op18))

    # 3. Loop with a body that captures and carries
    n = helper.make_tensor_value_info("n", T.INT64, [])
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id")],
        "body",
        [helper.make_tensor_value_info("i", T.INT64, []), helper.make_tensor_value_info("cond_in", T.BOOL, []),
         helper.make_tensor_value_info("acc_in", T.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("cond_out", T.BOOL, []), helper.make_tensor_value_info("acc_out", T.FLOAT, [2, 3])],
    )  # fmt: skip
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)]
    out.append(helper.make_model(helper.make_graph(nodes, "loopy", [n, x], [y]), opset_imports=op18))

    # 4. model-local function with an attribute reference, and a custom-domain op
    ref = helper.make_node("LeakyRelu", ["a"], ["r"], name="lr")
    ref.attribute.append(onnx.AttributeProto(name="alpha", type=onnx.AttributeProto.FLOAT, ref_attr_name="slope"))
    fn = helper.make_function("local", "Leaky", ["a"], ["r"], [ref], op18, attributes=["slope"])
    nodes = [
        helper.make_node("Leaky", ["x"], ["t"], name="call", domain="local", slope=0.2),
        helper.make_node("FancyOp", ["t"], ["y"], name="custom", domain="com.example", mode="fast", k=3),
    ]
    m = helper.make_model(helper.make_graph(nodes, "fn", [x], [y]),
                          opset_imports=op18 + [helper.make_opsetid("local", 1), helper.make_opsetid("com.example", 1)],
                          functions=[fn])  # fmt: skip
    out.append(m)

    # 5. Conv/Reshape/Gemm chain with shape tensors (shape inference with data propagation)
    img = helper.make_tensor_value_info("img", T.FLOAT, [1, 2, 5, 5])
    kern = numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "kern")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    fc = numpy_helper.from_array(np.ones((27, 4), np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["img", "kern"], ["c1"], name="conv", kernel_shape=[3, 3]),
        helper.make_node("Reshape", ["c1", "shape"], ["flat"], name="reshape"),
        helper.make_node("Gemm", ["flat", "fc"], ["z"], name="gemm", alpha=1.0, transB=0),
    ]
    g = helper.make_graph(nodes, "cnn", [img], [helper.make_tensor_value_info("z", T.FLOAT, [1, 4])], initializer=[kern, shape, fc])
    out.append(helper.make_model(g, opset_imports=op18))
    return out


# ------------------------------------------------------------------------------- field mutations

ELEM_TYPES = list(range(-2, 34))
DIMS = [-1, -(2**63), 2**63 - 1, 2**62, 2**40, 2**31, 0, 1, 7]
OP_TYPES = ["Relu", "Add", "If", "Loop", "Scan", "Concat", "Reshape", "Constant", "Gelu", "LSTM", "Foo", "", "Split",
            "Resize", "SequenceMap", "Optional", "TopK", "CastLike", "QLinearConv", "Pad"]  # fmt: skip
DOMAINS = ["", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft", "local", "com.example", "zz"]
LOCATIONS = ["../w.bin", "/etc/passwd", "w.bin", "", "a/../../b", "C:\\x", "\x01"]


def _all_graphs(m: onnx.ModelProto) -> list[onnx.GraphProto]:
    graphs = [m.graph]
    i = 0
    while i < len(graphs):
        for n in graphs[i].node:
            for a in n.attribute:
                if a.HasField("g"):
                    graphs.append(a.g)
                graphs.extend(a.graphs)
        i += 1
    return graphs


def _all_nodes(m: onnx.ModelProto) -> list[onnx.NodeProto]:
    nodes = [n for g in _all_graphs(m) for n in g.node]
    nodes += [n for f in m.functions for n in f.node]
    return nodes


def _tensors(m: onnx.ModelProto) -> list[onnx.TensorProto]:
    ts = [t for g in _all_graphs(m) for t in g.initializer]
    ts += [s.values for g in _all_graphs(m) for s in g.sparse_initializer]
    ts += [s.indices for g in _all_graphs(m) for s in g.sparse_initializer]
    ts += [a.t for n in _all_nodes(m) for a in n.attribute if a.HasField("t")]
    return ts


def _type_protos(m: onnx.ModelProto) -> list[onnx.TypeProto]:
    return [vi.type for g in _all_graphs(m) for vi in list(g.input) + list(g.output) + list(g.value_info)]


def mutate(m: onnx.ModelProto, draw, st) -> str:
    """Apply one structured mutation drawn with `draw`; returns what it did (for the report)."""
    kinds = ["attr_type", "attr_value", "drop_input", "add_input", "rename_input", "dup_output", "dims", "elem_type",
             "data_type", "raw_data", "op_type", "domain", "opset", "ir_version", "cycle", "drop_node", "external",
             "sparse", "subgraph", "drop_attr", "tensor_dims", "function"]  # fmt: skip
    kind = draw(st.sampled_from(kinds))
    nodes = _all_nodes(m)
    pick = lambda seq: seq[draw(st.integers(0, len(seq) - 1))] if seq else None  # noqa: E731
    node = pick(nodes)
    if kind == "attr_type":
        attrs = [a for n in nodes for a in n.attribute]
        a = pick(attrs)
        if a is not None:
            a.type = draw(st.integers(0, 14))  # the enum is closed: protobuf refuses other numbers
    elif kind == "attr_value":
        attrs = [a for n in nodes for a in n.attribute]
        a = pick(attrs)
        if a is not None:
            which = draw(st.sampled_from(["f", "i", "s", "ints", "floats", "strings", "clear", "t", "g"]))
            if which == "f":
                a.f = draw(st.floats(allow_nan=True, width=32))
            elif which == "i":
                a.i = draw(st.integers(-(2**63), 2**63 - 1))
            elif which == "s":
                a.s = draw(st.binary(max_size=8))
            elif which == "ints":
                a.ints[:] = draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5))
            elif which == "floats":
                a.floats[:] = draw(st.lists(st.floats(width=32), max_size=5))
            elif which == "strings":
                a.strings[:] = draw(st.lists(st.binary(max_size=4), max_size=3))
            elif which == "t":
                a.t.CopyFrom(helper.make_tensor("t", T.INT64, [2], [1, 2]))
            elif which == "g":
                a.g.CopyFrom(helper.make_graph([], "empty", [], []))
            else:
                a.Clear()
                a.name = "x"
    elif kind == "drop_input" and node is not None and len(node.input):
        del node.input[draw(st.integers(0, len(node.input) - 1))]
    elif kind == "add_input" and node is not None:
        node.input.append(draw(st.sampled_from(["", "x", "t0", "nope", "w", "y"])))
    elif kind == "rename_input" and node is not None and len(node.input):
        names = [o for n in nodes for o in n.output] + ["", "ghost"]
        node.input[draw(st.integers(0, len(node.input) - 1))] = pick(names)
    elif kind == "dup_output" and node is not None and len(node.output):
        names = [o for n in nodes for o in n.output] + [vi.name for vi in m.graph.input]
        node.output[draw(st.integers(0, len(node.output) - 1))] = pick(names)
    elif kind == "dims":
        tp = pick([t for t in _type_protos(m) if t.HasField("tensor_type")])
        if tp is not None:
            dims = tp.tensor_type.shape.dim
            d = dims.add() if not len(dims) or draw(st.booleans()) else dims[draw(st.integers(0, len(dims) - 1))]
            d.dim_value = draw(st.sampled_from(DIMS))
    elif kind == "elem_type":
        tp = pick([t for t in _type_protos(m) if t.HasField("tensor_type")])
        if tp is not None:
            tp.tensor_type.elem_type = draw(st.sampled_from(ELEM_TYPES))
    elif kind == "data_type":
        t = pick(_tensors(m))
        if t is not None:
            t.data_type = draw(st.sampled_from(ELEM_TYPES))
    elif kind == "raw_data":
        t = pick(_tensors(m))
        if t is not None:
            raw = t.raw_data
            t.raw_data = raw[: draw(st.integers(0, len(raw)))] + draw(st.binary(max_size=6))
    elif kind == "op_type" and node is not None:
        node.op_type = draw(st.sampled_from(OP_TYPES))
    elif kind == "domain" and node is not None:
        node.domain = draw(st.sampled_from(DOMAINS))
    elif kind == "opset":
        if draw(st.booleans()) and len(m.opset_import):
            m.opset_import[draw(st.integers(0, len(m.opset_import) - 1))].version = draw(st.integers(-1, 40))
        else:
            del m.opset_import[:]
    elif kind == "ir_version":
        m.ir_version = draw(st.integers(0, 20))
    elif kind == "cycle" and len(nodes) >= 2:
        a, b = sorted(draw(st.lists(st.integers(0, len(nodes) - 1), min_size=2, max_size=2, unique=True)))
        if len(nodes[b].output) and len(nodes[a].input):
            nodes[a].input[0] = nodes[b].output[0]
    elif kind == "drop_node" and len(m.graph.node):
        del m.graph.node[draw(st.integers(0, len(m.graph.node) - 1))]
    elif kind == "external":
        t = pick(_tensors(m))
        if t is not None:
            t.data_location = T.EXTERNAL
            del t.external_data[:]
            t.external_data.add(key="location", value=draw(st.sampled_from(LOCATIONS)))
            if draw(st.booleans()):
                t.external_data.add(key="offset", value=draw(st.sampled_from(["0", "-5", "x", "99999999999999999999"])))
    elif kind == "sparse":
        for g in _all_graphs(m):
            for s in g.sparse_initializer:
                s.indices.raw_data = np.array(draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)), np.int64).tobytes()
                s.indices.dims[:] = [len(s.indices.raw_data) // 8]
                if draw(st.booleans()):
                    s.dims[:] = draw(st.lists(st.sampled_from(DIMS), max_size=3))
    elif kind == "subgraph":
        attrs = [a for n in nodes for a in n.attribute if a.HasField("g")]
        a = pick(attrs)
        if a is not None:
            # Copy the main graph through a snapshot: copying a message into its own descendant
            # corrupts protobuf's (upb) memory, which would be a crash of the harness, not onnxc.
            snapshot = onnx.GraphProto()
            snapshot.CopyFrom(m.graph)
            a.g.CopyFrom(draw(st.sampled_from([helper.make_graph([], "empty", [], []), snapshot])))
    elif kind == "drop_attr" and node is not None and len(node.attribute):
        del node.attribute[draw(st.integers(0, len(node.attribute) - 1))]
    elif kind == "tensor_dims":
        t = pick(_tensors(m))
        if t is not None:
            t.dims[:] = draw(st.lists(st.sampled_from(DIMS), max_size=4))
    elif kind == "function" and len(m.functions):
        f = m.functions[0]
        which = draw(st.integers(0, 3))
        if which == 0:
            del f.output[:]
        elif which == 1:
            f.input.append("extra")
        elif which == 2:
            del f.opset_import[:]
        else:
            f.node.append(helper.make_node(f.name, list(f.input), ["rec"], domain=f.domain))  # recursion
    return kind


# --------------------------------------------------------------------------------- the child run


def _child(examples: int, repro: Path, random: bool) -> int:
    """Run both searches; return the number of cases run. Unexpected exceptions propagate."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    from onnxc.errors import OnnxcError
    from onnxc.importers import import_context, import_model

    models = seeds()
    blobs = [mm.SerializeToString() for mm in models]
    ctx = import_context()  # one context for all cases: creating one per case would dominate the time
    count = [0]
    common = dict(
        max_examples=examples, database=None, derandomize=not random, deadline=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink],
    )  # fmt: skip

    def attempt(model: onnx.ModelProto | bytes, data: bytes) -> None:
        repro.write_bytes(data)
        count[0] += 1
        try:
            import_model(model, context=ctx)
        except OnnxcError:
            pass

    @settings(**common)
    @given(st.data())
    def byte_level(data) -> None:
        blob = bytearray(data.draw(st.sampled_from(blobs)))
        for _ in range(data.draw(st.integers(1, 6))):
            op = data.draw(st.sampled_from(["flip", "insert", "truncate", "delete"]))
            pos = data.draw(st.integers(0, max(len(blob) - 1, 0)))
            if op == "flip" and blob:
                blob[pos] ^= data.draw(st.integers(1, 255))
            elif op == "insert":
                blob[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
            elif op == "truncate":
                del blob[pos:]
            elif blob:
                del blob[pos : pos + data.draw(st.integers(1, 8))]
        attempt(bytes(blob), bytes(blob))

    @settings(**common)
    @given(st.data())
    def field_level(data) -> None:
        m = onnx.ModelProto()
        m.CopyFrom(data.draw(st.sampled_from(models)))
        for _ in range(data.draw(st.integers(1, 4))):
            mutate(m, data.draw, st)
        blob = m.SerializeToString()
        # Import what was serialized (parsed back), so that the reproducer is exactly the case.
        parsed = onnx.ModelProto()
        parsed.ParseFromString(blob)
        attempt(parsed, blob)

    # External data, imported from a model file in a folder with a data file, a file outside the
    # folder, links in and out, and a FIFO (opening it would hang the import).
    import hashlib
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="onnxc_fuzz_"))
    folder = root / "model"
    folder.mkdir()
    payload = np.arange(16, dtype=np.float32).tobytes()
    (folder / "w.bin").write_bytes(payload)
    (root / "outside.bin").write_bytes(payload)
    os.symlink(root / "outside.bin", folder / "link_out.bin")
    os.symlink(folder / "w.bin", folder / "link_in.bin")
    os.mkfifo(folder / "fifo")
    good_sha1 = hashlib.sha1(payload).hexdigest()
    numbers = st.sampled_from(["0", "4", "8", "24", "64", "65", "-1", "abc", "", " 8", "99999999999999999999999"])

    @settings(**{**common, "max_examples": max(examples // 4, 20)})
    @given(st.data())
    def external(data) -> None:
        tensors = []
        for name in ("w", "q"):
            dt = data.draw(st.sampled_from([T.FLOAT, T.INT4, T.BOOL, T.STRING, T.DOUBLE, 0, 99]))
            dims = data.draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 2**40, -1]), max_size=3))
            t = onnx.TensorProto(name=name, data_type=dt, dims=dims, data_location=T.EXTERNAL)
            location = data.draw(st.sampled_from(["w.bin", "../outside.bin", "/etc/passwd", "link_out.bin", "link_in.bin",
                                                  "sub/../w.bin", "missing.bin", "fifo", ".", "", "model.onnx"]))  # fmt: skip
            t.external_data.add(key="location", value=location)
            for key in ("offset", "length"):
                if data.draw(st.booleans()):
                    t.external_data.add(key=key, value=data.draw(numbers))
            if data.draw(st.booleans()):
                t.external_data.add(key="checksum", value=data.draw(st.sampled_from([good_sha1, "0" * 40, "zz"])))
            tensors.append(t)
        graph = helper.make_graph(
            [helper.make_node("Add", ["w", "q"], ["y"], name="add")], "ext", [],
            [helper.make_tensor_value_info("y", T.FLOAT, None)], initializer=tensors,
        )  # fmt: skip
        blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
        (folder / "model.onnx").write_bytes(blob)
        repro.write_bytes(blob)
        count[0] += 1
        try:
            import_model(folder / "model.onnx", context=ctx)
        except OnnxcError:
            pass

    byte_level()
    field_level()
    external()
    return count[0]


def test_seeds_import() -> None:
    """The seeds themselves are valid, so mutations start from models that import."""
    from onnxc.importers import import_model

    for m in seeds():
        assert import_model(m) is not None


def test_fuzz_import() -> None:
    examples = int(os.environ.get("ONNXC_FUZZ_EXAMPLES", DEFAULT_EXAMPLES))
    tmp = Path(os.environ.get("PYTEST_TMPDIR", "/tmp"))
    repro = tmp / f"onnxc_fuzz_repro_{os.getpid()}.bin"
    proc = subprocess.run(
        [sys.executable, __file__, str(examples), str(repro)], capture_output=True, text=True, timeout=1200,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    if proc.returncode != 0:
        last = base64.b64encode(repro.read_bytes()).decode() if repro.exists() else "(none)"
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        pytest.fail(
            f"fuzz child failed ({how}). Last case (base64 of the serialized model; import it with "
            f"onnxc.importers.import_model(base64.b64decode(...))):\n{last}\n--- stdout ---\n{proc.stdout[-4000:]}"
            f"\n--- stderr ---\n{proc.stderr[-8000:]}"
        )
    repro.unlink(missing_ok=True)
    ran = int(proc.stdout.strip().split()[-1])
    print(f"fuzz: {ran} cases imported or refused cleanly")
    assert ran >= examples  # both searches ran (hypothesis may run a few more than asked)


if __name__ == "__main__":
    n = _child(int(sys.argv[1]), Path(sys.argv[2]), random=os.environ.get("ONNXC_FUZZ_RANDOM") == "1")
    print(f"cases {n}")
