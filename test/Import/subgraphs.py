# RUN: %PYTHON %s | filecheck %s
"""Graph attributes become regions: block arguments are the subgraph's inputs, `gpu.yield` ends
them, and values of enclosing graphs are used directly (the spec's lexical scoping)."""

import numpy as np
import onnx
import onnx.parser
from onnx.reference import ReferenceEvaluator

from onnxc.importers import export_model, import_model

model = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (bool c, float[3] x, int64 n) => (float[3] y, float[3] total)
{
  two = Constant<value = float[1] {2.0}>()
  y = If(c) <
    then_branch = then_g () => (float[3] t) { t = Mul(x, two) },
    else_branch = else_g () => (float[3] e) { e = Neg(x) }
  >
  cond = Constant<value = bool {1}>()
  total = Loop(n, cond, x) <
    body = body_g (int64 i, bool c_in, float[3] acc) => (bool c_out, float[3] acc_out) {
      c_out = Identity(c_in)
      acc_out = Add(acc, y)
    }
  >
}
""")
module = import_model(model)
print(module)
# CHECK-LABEL: func.func @g(%arg0: tensor<i1> {onnx.name = "c"}, %arg1: tensor<3xf32> {onnx.name = "x"}, %arg2: tensor<i64> {onnx.name = "n"})
# CHECK: %[[TWO:.*]] = "onnx.constant_v13"
# CHECK: %[[Y:.*]] = "onnx.if_v16"(%arg0) ({
# Regions follow the schema's graph attribute names sorted: else_branch, then then_branch.
# CHECK-NEXT: %[[NEG:.*]] = "onnx.neg"(%arg1)
# CHECK-NEXT: gpu.yield %[[NEG]] : tensor<3xf32>
# CHECK-NEXT: }, {
# The then branch captures `x` and `two` from the enclosing graph:
# CHECK-NEXT: %[[MUL:.*]] = "onnx.mul"(%arg1, %[[TWO]])
# CHECK-NEXT: gpu.yield %[[MUL]] : tensor<3xf32>
# CHECK: "onnx.loop_v16"(%arg2, %{{.*}}, %arg1) ({
# CHECK-NEXT: ^bb0(%[[I:.*]]: tensor<i64>, %[[CIN:.*]]: tensor<i1>, %[[ACC:.*]]: tensor<3xf32>):
# CHECK-NEXT: %[[COUT:.*]] = "onnx.identity_v16"(%[[CIN]])
# CHECK-NEXT: %[[SUM:.*]] = "onnx.add"(%[[ACC]], %[[Y]])
# CHECK-NEXT: gpu.yield %[[COUT]], %[[SUM]] : tensor<i1>, tensor<3xf32>

# The exported model computes the same as the original.
back = export_model(module)
feeds = {"c": np.array(True), "x": np.array([1, 2, 3], np.float32), "n": np.array(3, np.int64)}
want = ReferenceEvaluator(model).run(None, feeds)
got = ReferenceEvaluator(back).run(None, feeds)
print(all(np.array_equal(a, b) for a, b in zip(want, got)), got[1])
# CHECK: True [ 7. 14. 21.]
