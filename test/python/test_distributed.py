"""Multi-device execution under MPI (issue 13): IR 11 sharding annotations, partition, MPI runs.

The MPI tests (tensor-parallel MLP and attention, a 2-stage pipeline) start `mpirun -n 2` as a subprocess (MPICH's hydra; CI installs it with
tools/install_system_deps.sh and mpi4py with the test extra) and compare the 2-rank outputs with
the same model run on one device in this process (relative 1e-5), which itself is checked against
`onnx.reference`. They skip, saying why, only where mpirun or mpi4py is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import onnxc
from onnxc.errors import OnnxcError
from onnxc.targets.distributed import DistributedError, lower_distributed, mpi_world
from onnxc.tools.shard import CONFIGURATION, ShardError, sharding_spec, tensor_parallel
from onnxc.transforms.onnx_to_shard import ShardingIgnoredWarning

BIN = Path(sys.executable).parent


def mlp(batch: int = 4, d_model: int = 8, hidden: int = 16, seed: int = 0) -> onnx.ModelProto:
    """x @ W1 + b1 -> Relu -> @ W2: the MLP of a transformer layer, random weights."""
    rng = np.random.default_rng(seed)
    inits = [
        nh.from_array(rng.standard_normal((d_model, hidden)).astype(np.float32), "W1"),
        nh.from_array(rng.standard_normal((hidden,)).astype(np.float32), "B1"),
        nh.from_array(rng.standard_normal((hidden, d_model)).astype(np.float32), "W2"),
    ]
    nodes = [
        oh.make_node("MatMul", ["X", "W1"], ["H0"], name="fc1"),
        oh.make_node("Add", ["H0", "B1"], ["H1"], name="bias1"),
        oh.make_node("Relu", ["H1"], ["R"], name="relu"),
        oh.make_node("MatMul", ["R", "W2"], ["Y"], name="fc2"),
    ]
    g = oh.make_graph(nodes, "mlp", [oh.make_tensor_value_info("X", TP.FLOAT, [batch, d_model])],
                      [oh.make_tensor_value_info("Y", TP.FLOAT, [batch, d_model])], inits)  # fmt: skip
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def attention(seq: int = 8, d_model: int = 16, heads: int = 4, d_head: int = 4, seed: int = 1) -> onnx.ModelProto:
    """Multi-head self-attention with head-batched weights (Q/K/V: (heads, d_model, d_head)),
    softmax(QK^T/sqrt(d)) V, the output projection per head summed over the heads."""
    rng = np.random.default_rng(seed)
    inits = [nh.from_array((rng.standard_normal((heads, d_model, d_head)) / np.sqrt(d_model)).astype(np.float32), n) for n in ("WQ", "WK", "WV")]
    inits += [
        nh.from_array((rng.standard_normal((heads, d_head, d_model)) / np.sqrt(d_head)).astype(np.float32), "WO"),
        nh.from_array(np.array(1 / np.sqrt(d_head), np.float32), "SCALE"),
        nh.from_array(np.array([0], np.int64), "AXES"),
    ]
    nodes = [
        oh.make_node("MatMul", ["X", "WQ"], ["Q"], name="q"),
        oh.make_node("MatMul", ["X", "WK"], ["K"], name="k"),
        oh.make_node("MatMul", ["X", "WV"], ["V"], name="v"),
        oh.make_node("Transpose", ["K"], ["KT"], perm=[0, 2, 1], name="kt"),
        oh.make_node("MatMul", ["Q", "KT"], ["S0"], name="scores"),
        oh.make_node("Mul", ["S0", "SCALE"], ["S1"], name="scale"),
        oh.make_node("Softmax", ["S1"], ["P"], axis=-1, name="softmax"),
        oh.make_node("MatMul", ["P", "V"], ["C"], name="context"),
        oh.make_node("MatMul", ["C", "WO"], ["O"], name="out_proj"),
        oh.make_node("ReduceSum", ["O", "AXES"], ["Y"], keepdims=0, name="heads_sum"),
    ]
    g = oh.make_graph(nodes, "attention", [oh.make_tensor_value_info("X", TP.FLOAT, [seq, d_model])],
                      [oh.make_tensor_value_info("Y", TP.FLOAT, [seq, d_model])], inits)  # fmt: skip
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def two_stage_pipeline(devices: int = 2) -> onnx.ModelProto:
    """Stage 0: tanh(x @ W1) on rank 0; stage 1: (. @ W2) + x on rank 1 (x read by both)."""
    rng = np.random.default_rng(2)
    inits = [nh.from_array(rng.standard_normal((8, 16)).astype(np.float32), "W1"),
             nh.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W2")]  # fmt: skip
    nodes = [
        oh.make_node("MatMul", ["X", "W1"], ["H"], name="mm0"),
        oh.make_node("Tanh", ["H"], ["T"], name="tanh0"),
        oh.make_node("MatMul", ["T", "W2"], ["Z"], name="mm1"),
        oh.make_node("Add", ["Z", "X"], ["Y"], name="residual1"),
    ]
    for node, stage in zip(nodes, (0, 0, 1, 1)):
        node.device_configurations.append(onnx.NodeDeviceConfigurationProto(configuration_id="pipeline", pipeline_stage=stage))
    g = oh.make_graph(nodes, "pipeline", [oh.make_tensor_value_info("X", TP.FLOAT, [4, 8])],
                      [oh.make_tensor_value_info("Y", TP.FLOAT, [4, 8])], inits)  # fmt: skip
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)], ir_version=11)
    model.configuration.append(onnx.DeviceConfigurationProto(name="pipeline", num_devices=devices))
    return model


def _needs_mpi() -> None:
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (tools/install_system_deps.sh installs MPICH as root)")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed (the 'test' and 'mpi' extras carry it)")
    # Loading the MPI library initializes nothing yet, but do it in a child: this process stays
    # free of MPI. On Debian the wheel needs the libmpi.so.12 link install_system_deps.sh makes.
    probe = subprocess.run([sys.executable, "-c", "from mpi4py import MPI"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"mpi4py cannot load the MPI library (run tools/install_system_deps.sh as root): {probe.stderr.strip()[-200:]}")


def _mpirun(n: int, *command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(["mpirun", "-n", str(n), *command], capture_output=True, text=True, cwd=cwd, env=env, timeout=240)


def _single_device(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The annotated model on one device (this process has no MPI launcher), checked against
    onnx.reference with the backend tests' float tolerance."""
    assert mpi_world() is None
    (y,) = onnxc.compile(model)(x)
    (want,) = ReferenceEvaluator(model).run(None, {"X": x})
    np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-5)
    return y


def _close(got: np.ndarray, want: np.ndarray) -> None:
    """Equal up to 1e-5 relative to the output's scale (the partial sums add in another order)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), np.abs(got - want).max()


def test_tensor_parallel_mlp_two_ranks_via_onnxc_run(tmp_path: Path) -> None:
    _needs_mpi()
    model, report = tensor_parallel(mlp(), 2)
    assert report == ["MLP fc1 -> fc2: hidden size 16 split over 2 devices"]
    onnx.save(model, tmp_path / "mlp.onnx")
    x = np.random.default_rng(7).standard_normal((4, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = _mpirun(2, str(BIN / "onnxc"), "run", "mlp.onnx", "--input", "X=x.npy", "--output-dir", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ShardingIgnoredWarning" not in r.stderr, r.stderr  # partitioned, not a whole-model fallback
    assert r.stdout.count("Y: shape [4, 8]") == 1  # rank 0 alone reports
    _close(np.load(tmp_path / "out" / "Y.npy"), _single_device(model, x))


def test_sharded_attention_two_ranks_via_compile_in_a_script(tmp_path: Path) -> None:
    _needs_mpi()
    model, report = tensor_parallel(attention(), 2)
    assert len(report) == 4 and all(line.startswith("attention") for line in report)
    onnx.save(model, tmp_path / "attention.onnx")
    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, onnxc
        model = onnxc.compile("attention.onnx")
        y, = model(np.load("x.npy"))
        if model.rank == 0:
            np.save("y.npy", y)
        open(f"rank{model.rank}of{model.size}", "w").close()
    """))
    r = _mpirun(2, sys.executable, str(script), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ShardingIgnoredWarning" not in r.stderr, r.stderr  # partitioned, not a whole-model fallback
    assert (tmp_path / "rank0of2").exists() and (tmp_path / "rank1of2").exists()
    _close(np.load(tmp_path / "y.npy"), _single_device(model, x))


def test_two_stage_pipeline_two_ranks(tmp_path: Path) -> None:
    _needs_mpi()
    model = two_stage_pipeline()
    onnx.save(model, tmp_path / "pipeline.onnx")
    x = np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = _mpirun(2, str(BIN / "onnxc"), "run", "pipeline.onnx", "--input", "X=x.npy", "--output-dir", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ShardingIgnoredWarning" not in r.stderr, r.stderr  # partitioned, not a whole-model fallback
    _close(np.load(tmp_path / "out" / "Y.npy"), _single_device(model, x))


def test_pipeline_stages_are_per_rank_functions_with_send_and_recv() -> None:
    model = two_stage_pipeline()
    first, second = (str(lower_distributed(model, r, 2, stage="partition")) for r in (0, 1))
    # Rank 0 computes tanh(x @ W1), sends it (tag 0), receives the output Y (tag 1) from rank 1.
    assert "math.tanh" in first and "arith.addf" not in first.split("func.func @pipeline")[1]
    assert first.index("call @onnxc_send_0") < first.index("call @onnxc_recv_1")
    # Rank 1 receives it first, computes, then sends Y to rank 0.
    assert "math.tanh" not in second and second.index("call @onnxc_recv_0") < second.index("linalg.matmul") < second.index("call @onnxc_send_1")
    llvm = str(lower_distributed(model, 1, 2, stage="llvm"))
    assert "llvm.call @MPI_Recv" in llvm and "llvm.call @MPI_Send" in llvm


def test_four_devices_on_two_ranks_is_a_clear_error(tmp_path: Path) -> None:
    _needs_mpi()
    model, _ = tensor_parallel(mlp(hidden=16), 4)
    onnx.save(model, tmp_path / "mlp4.onnx")
    r = _mpirun(2, str(BIN / "onnxc"), "run", "mlp4.onnx", cwd=tmp_path)
    assert r.returncode != 0
    assert "asks for 4 devices" in r.stderr and "has 2 ranks" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_rank_count_is_checked_before_compiling() -> None:
    model, _ = tensor_parallel(mlp(), 4)
    with pytest.raises(DistributedError, match=r"asks for 4 devices, but the MPI job has 2 ranks"):
        lower_distributed(model, 0, 2)


def test_sharded_attention_splits_the_heads_and_all_reduces_once() -> None:
    model, _ = tensor_parallel(attention(), 2)
    text = str(lower_distributed(model, 0, 2, stage="partition"))
    # Each rank holds 2 of the 4 heads of WQ/WK/WV (2x16x4) and WO (2x4x16); one all-reduce of the
    # (seq, d_model) partial sums, no gathering of heads.
    assert "tensor<2x16x4xf32>" in text and "tensor<2x4x16xf32>" in text and "tensor<4x16x4xf32>" not in text
    assert text.count("shard.all_reduce") == 1 and "tensor<8x16xf32> -> tensor<8x16xf32>" in text


def test_partitioned_ir_has_local_shards_and_one_all_reduce() -> None:
    model, _ = tensor_parallel(mlp(), 2)
    text = str(lower_distributed(model, 1, 2, stage="partition"))
    # fc1's weight column shard and fc2's row shard: 8x16 and 16x8 halved on the hidden axis.
    assert "tensor<8x8xf32>" in text and "tensor<8x16xf32>" not in text and "tensor<16x8xf32>" not in text
    assert text.count("shard.all_reduce") == 1 and "shard.all_gather" not in text
    llvm = str(lower_distributed(model, 1, 2, stage="llvm"))
    assert "llvm.call @MPI_Allreduce" in llvm and "MPI_Comm_split" not in llvm


def test_openmpi_lowering_is_patched_and_group_splits_refused() -> None:
    """22.1.8's Open MPI lowering names the reduction `ompi_mpi_sum`; libmpi exports
    `ompi_mpi_op_sum` (ran under Open MPI 5.0.11's mpirun: MLP, attention and pipeline equal
    onnx.reference). Its comm_split truncates Open MPI's pointer communicator: refused."""
    model, _ = tensor_parallel(mlp(), 2)
    llvm = str(lower_distributed(model, 0, 2, stage="llvm", mpi="OpenMPI"))
    assert "llvm.mlir.addressof @ompi_mpi_op_sum" in llvm and "@ompi_mpi_sum" not in llvm
    assert "llvm.mlir.addressof @ompi_mpi_comm_world" in llvm
    with pytest.raises(OnnxcError, match="Open MPI.*MPI_Comm_split"):
        lower_distributed(grouped_mlp(), 0, 4, stage="llvm", mpi="OpenMPI")


def test_outside_mpi_an_annotated_model_runs_on_one_device() -> None:
    model, _ = tensor_parallel(attention(), 2)
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    _single_device(model, x)  # compiles as today: compile() saw no MPI launcher


def test_default_threads_are_shared_among_the_ranks_of_a_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxc.targets.cpu.isa import host_cpu
    from onnxc.targets.cpu.pipeline import CpuPipelineOptions
    from onnxc.targets.distributed.runtime import share_cores

    cores = host_cpu().cores
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    assert share_cores(CpuPipelineOptions()).threads == max(1, cores // 2)
    assert share_cores(CpuPipelineOptions(threads=1)).threads == 1
    monkeypatch.delenv("MPI_LOCALNRANKS")
    assert share_cores(CpuPipelineOptions()).threads == cores


def test_mpi_world_reads_the_launchers_environment() -> None:
    assert mpi_world({}) is None
    assert mpi_world({"PMI_RANK": "1", "PMI_SIZE": "2"}) == (1, 2)
    assert mpi_world({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}) == (0, 4)


def test_unhonored_annotations_warn_name_the_node_and_do_not_fail() -> None:
    model = mlp()
    fc1 = model.graph.node[0]
    spec = sharding_spec("W1", 2, 1, 16)
    spec.sharded_dim[0].simple_sharding[0].num_shards = 3  # not the device count
    fc1.device_configurations.append(onnx.NodeDeviceConfigurationProto(configuration_id=CONFIGURATION, sharding_spec=[spec]))
    model.configuration.append(onnx.DeviceConfigurationProto(name=CONFIGURATION, num_devices=2))
    model.ir_version = 11
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = str(lower_distributed(model, 0, 2, stage="partition"))
    messages = [str(w.message) for w in caught if issubclass(w.category, ShardingIgnoredWarning)]
    assert len(messages) == 1 and "node 'fc1'" in messages[0] and "num_shards=3" in messages[0], messages
    assert "shard.all_reduce" not in text  # nothing split: every rank computes the whole model


def test_dynamic_shapes_run_replicated_with_a_warning() -> None:
    """Upstream propagation aborts on dynamic tensor.empty sizes: such a model is not partitioned
    (each rank computes it whole), with a warning, instead of a crash or an error."""
    model = mlp()
    for v in (model.graph.input[0], model.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    model, _ = tensor_parallel(model, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = str(lower_distributed(model, 1, 2, stage="partition"))
    assert any("dynamic shape" in str(w.message) and issubclass(w.category, ShardingIgnoredWarning) for w in caught)
    assert "shard." not in text and "tensor<8x16xf32>" in text  # whole weights, no collectives


def _split_then(op: onnx.NodeProto, output: onnx.ValueInfoProto) -> onnx.ModelProto:
    """X @ W with W split by columns (H split on axis 1), then `op` reading H, output replicated."""
    w = np.random.default_rng(5).standard_normal((8, 16)).astype(np.float32)
    proj = oh.make_node("MatMul", ["X", "W"], ["H"], name="proj")
    proj.device_configurations.append(onnx.NodeDeviceConfigurationProto(configuration_id="tp", sharding_spec=[sharding_spec("W", 2, 1, 16)]))
    op.device_configurations.append(onnx.NodeDeviceConfigurationProto(
        configuration_id="tp", sharding_spec=[sharding_spec("H", 2, 1, 16), sharding_spec(op.output[0], 2)]))  # fmt: skip
    g = oh.make_graph([proj, op], "split", [oh.make_tensor_value_info("X", TP.FLOAT, [4, 8])], [output],
                      [nh.from_array(w, "W"), nh.from_array(np.array([1], np.int64), "AXES")])  # fmt: skip
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)], ir_version=11)
    model.configuration.append(onnx.DeviceConfigurationProto(name="tp", num_devices=2))
    return model


def grouped_mlp() -> onnx.ModelProto:
    """The MLP on 4 devices in groups {0: [0, 1], 1: [2, 3]}: split over the 2 groups (grid axis 0
    of a 2x2 grid), replicated inside each."""
    model = mlp()
    groups = [onnx.IntIntListEntryProto(key=0, value=[0, 1]), onnx.IntIntListEntryProto(key=1, value=[2, 3])]
    specs = [sharding_spec("W1", 2, 1, 16), sharding_spec("W2", 2, 0, 16)]
    for spec in specs:
        spec.index_to_device_group_map.extend(groups)
    model.graph.node[0].device_configurations.append(onnx.NodeDeviceConfigurationProto(configuration_id="g", sharding_spec=specs[:1]))
    model.graph.node[3].device_configurations.append(onnx.NodeDeviceConfigurationProto(configuration_id="g", sharding_spec=[specs[1], sharding_spec("Y", 4)]))
    model.configuration.append(onnx.DeviceConfigurationProto(name="g", num_devices=4))
    model.ir_version = 11
    return model


def test_device_groups_partition_over_a_2x2_grid() -> None:
    """Rank 3 (group 1) holds W1[:, 8:16], B1[8:16] and W2[8:16, :] (also ran under mpirun -n 4)."""
    model = grouped_mlp()
    module = lower_distributed(model, 3, 4, stage="partition")
    text = str(module)
    assert "shard.grid @grid_g(shape = 2x2)" in text and "grid_axes = [0]" in text and text.count("shard.all_reduce") == 1
    from onnxc.importers.tensors import attribute_to_array
    from onnxc.transforms.onnx_utils import collect_ops

    consts = []
    for op in collect_ops(module.operation, lambda o: o.name == "arith.constant" and isinstance(o.results[0].type, ir.RankedTensorType)):
        shape = ir.RankedTensorType(op.results[0].type).shape
        array, _ = attribute_to_array(op.attributes["value"])
        consts.append(np.asarray(array).reshape(shape))
    w = {t.name: nh.to_array(t) for t in model.graph.initializer}
    for want in (w["W1"][:, 8:], w["B1"][8:], w["W2"][8:, :]):
        assert sum(c.shape == want.shape and np.array_equal(c, want) for c in consts) == 1, want.shape


def test_reduction_over_a_split_axis_is_a_partial_sum_and_one_all_reduce() -> None:
    model = _split_then(oh.make_node("ReduceSum", ["H", "AXES"], ["S"], keepdims=0, name="rsum"),
                        oh.make_tensor_value_info("S", TP.FLOAT, [4]))  # fmt: skip
    text = str(lower_distributed(model, 0, 2, stage="partition"))
    assert "tensor<8x8xf32>" in text and text.count("shard.all_reduce") == 1 and "-> tensor<4xf32>" in text


def test_an_aborting_partition_falls_back_to_every_rank_computing_the_model() -> None:
    """Softmax over the split axis makes 22.1.8's propagation abort (a C++ assertion: H's users ask
    for different shardings); partition runs in a child process, so this rank warns and computes
    the whole model instead of dying."""
    model = _split_then(oh.make_node("Softmax", ["H"], ["P"], axis=-1, name="softmax"), oh.make_tensor_value_info("P", TP.FLOAT, [4, 16]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = str(lower_distributed(model, 0, 2, stage="partition"))
    assert any("aborted" in str(w.message) and issubclass(w.category, ShardingIgnoredWarning) for w in caught)
    assert "shard." not in text and "tensor<8x16xf32>" in text


def test_an_op_partition_cannot_split_makes_the_rank_compute_the_model_whole() -> None:
    """A Reshape of a column-split value (tensor.reshape has no sharding model upstream): the
    partition fails, and the rank warns, naming the node, and computes the whole model."""
    model = _split_then(oh.make_node("Reshape", ["H", "SHAPE"], ["R"], name="split_heads"), oh.make_tensor_value_info("R", TP.FLOAT, [4, 2, 8]))
    model.graph.initializer.append(nh.from_array(np.array([4, 2, 8], np.int64), "SHAPE"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = str(lower_distributed(model, 0, 2, stage="partition"))
    messages = [str(w.message) for w in caught if issubclass(w.category, ShardingIgnoredWarning)]
    assert any("split_heads" in m and "ignored" in m for m in messages), messages
    assert "shard." not in text


def test_shard_tool_refuses_a_model_without_blocks_to_split() -> None:
    g = oh.make_graph([oh.make_node("Relu", ["X"], ["Y"])], "g", [oh.make_tensor_value_info("X", TP.FLOAT, [2])],
                      [oh.make_tensor_value_info("Y", TP.FLOAT, [2])])  # fmt: skip
    with pytest.raises(ShardError, match="no MLP"):
        tensor_parallel(oh.make_model(g), 2)
    with pytest.raises(ShardError, match="at least 2"):
        tensor_parallel(mlp(), 1)


def test_shard_command_writes_an_ir11_model(tmp_path: Path) -> None:
    onnx.save(mlp(), tmp_path / "mlp.onnx")
    r = subprocess.run([str(BIN / "onnxc"), "shard", "mlp.onnx", "--devices", "2", "--strategy", "tensor-parallel", "-o", "tp.onnx"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "ShardingIgnoredWarning" not in r.stderr, r.stderr  # partitioned, not a whole-model fallback
    out = onnx.load(tmp_path / "tp.onnx")
    onnx.checker.check_model(out)
    assert out.ir_version >= 11 and [(c.name, c.num_devices) for c in out.configuration] == [(CONFIGURATION, 2)]
    specs = {s.tensor_name: s for n in out.graph.node for dc in n.device_configurations for s in dc.sharding_spec}
    assert specs["W1"].sharded_dim[0].axis == 1 and specs["W2"].sharded_dim[0].axis == 0 and not specs["Y"].sharded_dim
    r = subprocess.run([str(BIN / "onnxc"), "shard", "tp.onnx", "--emit", "llvm", "--rank", "1"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "ShardingIgnoredWarning" not in r.stderr, r.stderr  # partitioned, not a whole-model fallback
    assert "llvm.call @MPI_Allreduce" in r.stdout
