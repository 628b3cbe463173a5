# RUN: %PYTHON %s | filecheck %s
"""Model fields become module attributes (and export writes them back)."""

import onnx
import onnx.helper as oh

from onnxc.importers import export_model, import_model

graph = oh.make_graph([oh.make_node("Relu", ["x"], ["y"], name="relu")], "fields",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])  # fmt: skip
model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("ai.onnx.ml", 4)], ir_version=11,
                      producer_name="tester", producer_version="0.1", domain="org.example", doc_string="a doc",
                      model_version=(1 << 48) | (2 << 32) | 345)  # fmt: skip
oh.set_model_props(model, {"author": "me", "license": "MIT"})
model.training_info.add().algorithm.node.add(op_type="Identity", input=["x"], output=["z"])
cfg = model.configuration.add()
cfg.name, cfg.num_devices = "two_gpus", 2
cfg.device.extend(["cuda:0", "cuda:1"])

module = import_model(model)
print(module)
# CHECK: module attributes {
# CHECK-SAME: onnx.configuration = [{device = ["cuda:0", "cuda:1"], name = "two_gpus", num_devices = 2 : i64}]
# CHECK-SAME: onnx.doc_string = "a doc"
# CHECK-SAME: onnx.domain = "org.example"
# CHECK-SAME: onnx.ir_version = 11 : i64
# CHECK-SAME: onnx.main = @fields
# CHECK-SAME: onnx.metadata_props = {author = "me", license = "MIT"}
# CHECK-SAME: onnx.model_semver = "1.2.345"
# CHECK-SAME: onnx.model_version = 281483566645593 : i64
# CHECK-SAME: onnx.opset_import = {{\[\["", 21\], \["ai.onnx.ml", 4\]\]}}
# CHECK-SAME: onnx.producer_name = "tester", onnx.producer_version = "0.1"
# CHECK-SAME: onnx.training_info = {note = "kept for export only: onnxc never runs training_info", protos = [
# CHECK: func.func @fields(%arg0: tensor<2xf32> {onnx.name = "x"}) -> (tensor<2xf32> {onnx.name = "y"})

back = export_model(module)
print(back.ir_version, back.producer_name, back.producer_version, back.domain, back.model_version, back.doc_string)
# CHECK: 11 tester 0.1 org.example 281483566645593 a doc
print([(o.domain, o.version) for o in back.opset_import], [(p.key, p.value) for p in back.metadata_props])
# CHECK: [('', 21), ('ai.onnx.ml', 4)] [('author', 'me'), ('license', 'MIT')]
print(back.training_info == model.training_info, back.configuration == model.configuration)
# CHECK: True True

# A plain (non-semver) model_version has zero high bytes: no semver attribute.
model.model_version = 7
print(import_model(model).operation.attributes["onnx.model_version"], "onnx.model_semver" in import_model(model).operation.attributes)
# CHECK: 7 : i64 False
