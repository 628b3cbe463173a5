# RUN: %PYTHON %s | filecheck %s
"""`expand-schema-functions`: ops whose schemas define function bodies become the body's ops, both
for fixed bodies (HardSwish: ref attributes bound) and context-dependent ones (LayerNormalization,
built by onnx for the node's attributes and input types)."""

import numpy as np
import onnx
import onnx.parser
from onnx.reference import ReferenceEvaluator

from onnxc.importers import export_model, import_model
from onnxc.transforms.expand_schema_functions import ExpandSchemaFunctionsPass

model = onnx.parser.parse_model("""
<ir_version: 10, opset_import: ["" : 22]>
g (float[2, 4] x, float[4] s, float[4] b) => (float[2, 4] h, float[2, 4] n, float[2, 4] r)
{
  h = HardSwish(x)
  n = LayerNormalization<axis = -1, epsilon = 0.001>(x, s, b)
  r = Relu(x)
}
""")
module = import_model(model)
ExpandSchemaFunctionsPass(ops=("HardSwish",)).run(module.operation)
print(module)
# CHECK-LABEL: func.func @g(
# CHECK-NEXT: %[[HS:.*]] = "onnx.hard_sigmoid"(%arg0) {alpha = 0.166666672 : f32, beta = 5.000000e-01 : f32}
# CHECK-NEXT: "onnx.mul"(%arg0, %[[HS]])
# CHECK-NEXT: "onnx.layer_normalization"
ExpandSchemaFunctionsPass().run(module.operation)
ops = [op.name for op in module.body.operations[0].regions[0].blocks[0].operations]
print("onnx.layer_normalization" in ops, "onnx.reduce_mean" in ops, "onnx.relu" in ops, ops[-2:])
# LayerNormalization's body (built for opset 18) is converted to the model's opset 22; Relu has a
# body too (Max(X, 0)) and is expanded as well:
# CHECK: False True False ['onnx.max', 'func.return']
for op in module.body.operations[0].regions[0].blocks[0].operations:
    if op.name == "onnx.sqrt":
        print(op.location)
# Expanded ops are located under the expanded node's name:
# CHECK: loc("n/StdDev"("Sqrt"))

rng = np.random.default_rng(0)
feeds = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in (("x", (2, 4)), ("s", (4,)), ("b", (4,)))}
want = ReferenceEvaluator(model).run(None, feeds)
got = ReferenceEvaluator(export_model(module)).run(None, feeds)
print(all(np.allclose(w, g, rtol=1e-5, atol=1e-6) for w, g in zip(want, got)))
# CHECK: True
