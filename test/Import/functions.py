# RUN: %PYTHON %s | filecheck %s
"""Model-local functions: one private func.func per specialization (input types and attribute
binding), `ref_attr_name` replaced by the bound value or the attribute_proto default, the function's
own opset_import, and the `inline-functions` pass."""

import numpy as np
import onnx
import onnx.parser
from onnx.reference import ReferenceEvaluator

from onnxc.importers import export_model, import_model
from onnxc.transforms.inline_functions import InlineFunctionsPass

model = onnx.parser.parse_model("""
<ir_version: 10, opset_import: ["" : 18, "local": 1]>
g (float[2, 3] x) => (float[2, 3] a, float[2, 3] b, float[2, 3] c)
{
  a = local.Leaky<alpha = 0.5>(x)
  b = local.Leaky(x)
  c = local.Twice(a)
}
<domain: "local", opset_import: ["" : 18]>
Leaky <alpha: float = 0.25> (X) => (Y) {
  Y = LeakyRelu<alpha: float = @alpha>(X)
}
<domain: "local", opset_import: ["" : 13, "local": 1]>
Twice (X) => (Y) {
  S = Add(X, X)
  Y = local.Leaky<alpha = 0.125>(S)
}
""")
module = import_model(model)
print(module)
# CHECK-LABEL: func.func @g(
# CHECK: call @Leaky__s0(%arg0)
# CHECK: call @Leaky__s1(%arg0)
# CHECK: call @Twice(
# CHECK-LABEL: func.func private @Leaky__s0(%arg0: tensor<2x3xf32> {onnx.name = "X"}) -> (tensor<2x3xf32> {onnx.name = "Y"})
# CHECK-SAME: attributes {onnx.attributes = {alpha = 5.000000e-01 : f32}, onnx.domain = "local", onnx.function = "Leaky__s0", onnx.opset_import = {{\[\["", 18\]\]}}}
# CHECK: "onnx.leaky_relu"(%arg0) {alpha = 5.000000e-01 : f32}
# The call without the attribute binds the attribute_proto default:
# CHECK-LABEL: func.func private @Leaky__s1(
# CHECK-SAME: onnx.attributes = {alpha = 2.500000e-01 : f32}
# CHECK: "onnx.leaky_relu"(%arg0) {alpha = 2.500000e-01 : f32}
# Twice's own opset_import ("" : 13) binds its Add to Add-13 (`onnx.add_v13`), not Add-14:
# CHECK-LABEL: func.func private @Twice(
# CHECK: "onnx.add_v13"(%arg0, %arg0)
# CHECK: call @Leaky__s2(
# CHECK-LABEL: func.func private @Leaky__s2(
# CHECK: "onnx.leaky_relu"(%arg0) {alpha = 1.250000e-01 : f32}

x = np.array([[-8, -4, 0], [1, 2, 3]], np.float32)
want = [np.where(x < 0, 0.5 * x, x), np.where(x < 0, 0.25 * x, x)]
want.append(np.where(2 * want[0] < 0, 0.125 * 2 * want[0], 2 * want[0]))
exported = export_model(module)
print([f.name for f in exported.functions])
# CHECK: ['Leaky__s0', 'Leaky__s1', 'Leaky__s2', 'Twice']
print(all(np.array_equal(w, g) for w, g in zip(want, ReferenceEvaluator(exported).run(None, {"x": x}))))
# CHECK: True

InlineFunctionsPass().run(module.operation)
print(module)
# CHECK-LABEL: func.func @g(
# CHECK-NEXT: "onnx.leaky_relu"(%arg0) {alpha = 5.000000e-01 : f32}
# CHECK-NEXT: "onnx.leaky_relu"(%arg0) {alpha = 2.500000e-01 : f32}
# CHECK-NEXT: "onnx.add_v13"
# CHECK-NEXT: "onnx.leaky_relu"({{.*}}) {alpha = 1.250000e-01 : f32}
# CHECK-NEXT: return
# CHECK-NOT: func.func
inlined = export_model(module)
print(len(inlined.functions), all(np.array_equal(w, g) for w, g in zip(want, ReferenceEvaluator(inlined).run(None, {"x": x}))))
# CHECK: 0 True
