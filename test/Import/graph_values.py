# RUN: %PYTHON %s | filecheck %s
"""Graph inputs/outputs, names, dim_params, unknown dims and rank, initializer defaults and
constants, optional inputs omitted in the middle, and node locations."""

import onnx
import onnx.parser

from onnxc.importers import ImportConfig, export_model, import_model

model = onnx.parser.parse_model("""
<ir_version: 9, opset_import: ["" : 19]>
g (float[N, 3] x, float[3] bias, float[] anything, float[M, ?] y) => (float[N, 3] out, float[] z)
<float[3] bias = {1.0, 2.0, 3.0}, float[2] lohi = {0.0, 6.0}, int64[1] one = {1}>
{
  added = Add(x, bias)
  clipped = Clip(added, , lohi_hi)
  lohi_hi = Gather(lohi, one)
  out = Relu(clipped)
  z = Identity(anything)
}
""")
module = import_model(model, ImportConfig(warn_custom_ops=False))
print(module)
for op in module.body.operations[0].regions[0].blocks[0].operations:
    print(op.name, op.location)
# The function is named after the graph; arguments keep ONNX names, dim_params, defaults.
# CHECK-LABEL: func.func @g(
# CHECK-SAME: %arg0: tensor<?x3xf32> {onnx.dim_params = ["N", ""], onnx.name = "x"}
# CHECK-SAME: %arg1: tensor<3xf32> {onnx.default = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32>, onnx.name = "bias"}
# CHECK-SAME: %arg2: tensor<*xf32> {onnx.name = "anything"}
# CHECK-SAME: %arg3: tensor<?x?xf32> {onnx.dim_params = ["M", ""], onnx.name = "y"}
# CHECK-SAME: -> (tensor<?x3xf32> {onnx.dim_params = ["N", ""], onnx.name = "out"}, tensor<*xf32> {onnx.name = "z"})
# Initializers that are not inputs are constants located at their names:
# CHECK: %[[LOHI:.*]] = "onnx.constant"() {value = dense<[0.000000e+00, 6.000000e+00]> : tensor<2xf32>} : () -> tensor<2xf32>
# CHECK: %[[ONE:.*]] = "onnx.constant"() {value = dense<1> : tensor<1xi64>} : () -> tensor<1xi64>
# CHECK: %[[ADD:.*]] = "onnx.add"(%arg0, %arg1)
# Nodes given out of order are sorted: Gather is built before Clip.
# CHECK: %[[HI:.*]] = "onnx.gather"(%[[LOHI]], %[[ONE]])
# The omitted optional input in the middle is an `onnx.none`:
# CHECK: %[[NONE:.*]] = "onnx.none"() : () -> none
# CHECK: "onnx.clip"(%[[ADD]], %[[NONE]], %[[HI]]) : (tensor<?x3xf32>, none, tensor<{{.*}}xf32>) -> tensor<?x3xf32>
# CHECK: onnx.constant loc("lohi"("initializer"))
# Nodes without names are located at their first output's name and their op type.
# CHECK: onnx.clip loc("clipped"("Clip"))

back = export_model(module)
print(sorted(t.name for t in back.graph.initializer), [n.op_type for n in back.graph.node])
# CHECK: ['bias', 'lohi', 'one'] ['Add', 'Gather', 'Clip', 'Relu', 'Identity']
print(list(back.graph.node[2].input), [d.dim_param for d in back.graph.input[0].type.tensor_type.shape.dim])
# CHECK: ['added', '', 'lohi_hi'] ['N', '']
