# RUN: %PYTHON %s 2>&1 | filecheck %s
"""onnx-to-shard: the device configuration becomes a shard.grid and node sharding specs become
shard.shard annotations (inputs and outputs for the node's users); device groups make a 2-D grid;
an annotation onnxc cannot honor is a warning naming the node, and is left out."""

import warnings

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh

from onnxc.importers import import_model
from onnxc.tools.shard import sharding_spec
from onnxc.transforms.onnx_to_shard import annotate_io_names
from onnxc.transforms.pipeline import run_pipeline

warnings.simplefilter("always")
warnings.showwarning = lambda message, category, *rest: print(f"{category.__name__}: {message}")


def model(specs_fc1, specs_fc2, devices=2):
    w1 = nh.from_array(np.ones((8, 16), np.float32), "W1")
    w2 = nh.from_array(np.ones((16, 8), np.float32) * 2, "W2")
    fc1 = oh.make_node("MatMul", ["X", "W1"], ["H"], name="fc1")
    fc2 = oh.make_node("MatMul", ["H", "W2"], ["Y"], name="fc2")
    fc1.device_configurations.append(onnx.NodeDeviceConfigurationProto(configuration_id="tp", sharding_spec=specs_fc1))
    fc2.device_configurations.append(onnx.NodeDeviceConfigurationProto(configuration_id="tp", sharding_spec=specs_fc2, pipeline_stage=1))
    g = oh.make_graph([fc1, fc2], "mlp", [oh.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [4, 8])],
                      [oh.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [4, 8])], [w1, w2])  # fmt: skip
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)], ir_version=11)
    m.configuration.append(onnx.DeviceConfigurationProto(name="tp", num_devices=devices))
    return m


def show(m):
    module = import_model(annotate_io_names(m))
    run_pipeline(module, "onnx-to-shard")
    print(module)


# Column split of W1 (its output H stays split for fc2), row split of W2, Y replicated.
show(model([sharding_spec("W1", 2, 1, 16), sharding_spec("H", 2, 1, 16)], [sharding_spec("W2", 2, 0, 16), sharding_spec("Y", 2)]))
# CHECK-LABEL: module attributes
# CHECK: shard.grid @grid_tp(shape = 2)
# CHECK: %[[S1:.*]] = shard.sharding @grid_tp split_axes = {{\[}}[], [0]] : !shard.sharding
# CHECK: %[[W1:.*]] = shard.shard %{{.*}} to %[[S1]] annotate_for_users : tensor<8x16xf32>
# CHECK: %[[H:.*]] = "onnx.mat_mul"(%arg0, %[[W1]])
# CHECK: shard.sharding @grid_tp split_axes = {{\[}}[], [0]]
# CHECK: %[[HS:.*]] = shard.shard %[[H]] to %{{.*}} annotate_for_users : tensor<4x16xf32>
# CHECK: %[[S2:.*]] = shard.sharding @grid_tp split_axes = {{\[}}[0]] : !shard.sharding
# CHECK: %[[W2:.*]] = shard.shard %{{.*}} to %[[S2]] annotate_for_users : tensor<16x8xf32>
# CHECK: %[[Y:.*]] = "onnx.mat_mul"(%[[HS]], %[[W2]]) {onnx.node_extras = {{.*}}, onnxc.pipeline_stage = 1 : i64}
# CHECK: shard.sharding @grid_tp split_axes = {{\[}}[]] : !shard.sharding
# CHECK: %[[YS:.*]] = shard.shard %[[Y]] to %{{.*}} annotate_for_users
# CHECK: return %[[YS]]

# Device groups {0: [0, 1], 1: [2, 3]} of 4 devices: a 2x2 grid; split over the groups is grid
# axis 0 (replicated inside a group), split over all four devices is axes [0, 1].
grouped = sharding_spec("W1", 2, 1, 16)
grouped.index_to_device_group_map.extend([onnx.IntIntListEntryProto(key=0, value=[0, 1]), onnx.IntIntListEntryProto(key=1, value=[2, 3])])
show(model([grouped], [sharding_spec("W2", 4, 0, 16)], devices=4))
# CHECK-LABEL: module attributes
# CHECK: shard.grid @grid_tp(shape = 2x2)
# CHECK: shard.sharding @grid_tp split_axes = {{\[}}[], [0]]
# CHECK: shard.sharding @grid_tp split_axes = {{\[}}[0, 1]]

# Not honored: 3 shards on 2 devices, a tensor fc1 does not have, a permuted device order.
# Warned, left out.
three_shards = sharding_spec("W1", 2, 1, 16)
three_shards.sharded_dim[0].simple_sharding[0].num_shards = 3
permuted = sharding_spec("W2", 2, 0, 16)
permuted.device[:] = [1, 0]
show(model([three_shards, sharding_spec("nope", 2)], [permuted]))
# CHECK-DAG: ShardingIgnoredWarning: onnx-to-shard: node 'fc1' (MatMul): the sharding of 'W1' is ignored: axis 1 has num_shards=3, not the 2 devices/groups it lists
# CHECK-DAG: ShardingIgnoredWarning: onnx-to-shard: node 'fc1' (MatMul): it has no input or output 'nope' onnxc can find
# CHECK-DAG: ShardingIgnoredWarning: onnx-to-shard: node 'fc2' (MatMul): the sharding of 'W2' is ignored: it lists devices [1, 0], not the configuration's 2 devices in order
# CHECK-LABEL: module attributes
# CHECK: shard.grid @grid_tp(shape = 2)
# CHECK-NOT: shard.shard
# CHECK: return
