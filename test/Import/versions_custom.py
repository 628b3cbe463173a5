# RUN: %PYTHON %s 2>&1 | filecheck %s
"""Version binding per the versioning spec, custom-domain ops, and opsets newer than the schemas."""

import warnings

import onnx
import onnx.parser

from onnxc.importers import ImportConfig, ImportError_, export_model, import_model

TEXT = """
<ir_version: 8, opset_import: ["" : OPSET, "com.microsoft": 1, "acme": 2]>
g (float[2, 3] x, int64[1] axes) => (float[2, 1] y, float[2, 3] z, float[2, 3] w)
{
  y = ReduceSum<keepdims = 1>(x, axes)
  z = com.microsoft.FusedGelu(x)
  w = acme.Scale<factor: float = 2.5, tags: strings = ["a", "b"]>(x, z)
}
"""

# A node binds to the schema with the greatest since_version <= the model's opset: Softmax at opset
# 12 binds to Softmax-11 (whose signature equals Softmax-1's, so both are `onnx.softmax_v1`), at 13
# to Softmax-13 (a different meaning, the newest signature: `onnx.softmax`); ReduceMax to 12 and 13.
for opset in (12, 13):
    text = TEXT.replace("OPSET", str(opset)).replace("y = ReduceSum<keepdims = 1>(x, axes)", "y0 = Softmax(x)\n  y = ReduceMax<axes = [1]>(y0)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = import_model(onnx.parser.parse_model(text))
    ops = [op.name for op in module.body.operations[0].regions[0].blocks[0].operations]
    print(opset, ops)
    print([str(w.message) for w in caught])
# CHECK: 12 ['onnx.softmax_v1', 'onnx.reduce_max_v12', 'onnx.custom', 'onnx.custom', 'func.return']
# Custom ops are listed in one warning:
# CHECK: ['imported 2 node(s) of domains without schemas as onnx.custom: acme::Scale (1x), com.microsoft::FusedGelu (1x)']
# CHECK: 13 ['onnx.softmax', 'onnx.reduce_max_v13', 'onnx.custom', 'onnx.custom', 'func.return']

module = import_model(onnx.parser.parse_model(TEXT.replace("OPSET", "18")), ImportConfig(warn_custom_ops=False))
print(module)
# CHECK: "onnx.reduce_sum"(%arg0, %arg1) {keepdims = 1 : i64}
# CHECK: %[[G:.*]] = "onnx.custom"(%arg0) {domain = "com.microsoft", op_type = "FusedGelu", operandSegmentSizes = {{.*}}} : (tensor<2x3xf32>) -> tensor<2x3xf32>
# CHECK: "onnx.custom"(%arg0, %[[G]]) {domain = "acme", factor = 2.500000e+00 : f32, op_type = "Scale", operandSegmentSizes = {{.*}}, tags = ["a", "b"]}

# Custom ops export back unchanged.
node = export_model(module).graph.node[2]
print(node.domain, node.op_type, [(a.name, onnx.helper.get_attribute_value(a)) for a in node.attribute])
# CHECK: acme Scale [('factor', 2.5), ('tags', [b'a', b'b'])]

# An opset newer than the installed schemas is an error by default ...
newest = onnx.defs.onnx_opset_version()
try:
    import_model(onnx.parser.parse_model(TEXT.replace("OPSET", str(newest + 1))))
except ImportError_ as exc:
    print(exc)
# CHECK: opset {{[0-9]+}} of domain 'ai.onnx' is newer than the installed schemas (newest: {{[0-9]+}})
# CHECK-SAME: allow_newer_opset=True

# ... and a warning with the explicit flag, binding to the newest schemas.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    module = import_model(onnx.parser.parse_model(TEXT.replace("OPSET", str(newest + 1))), ImportConfig(allow_newer_opset=True, warn_custom_ops=False))
print([str(w.message) for w in caught])
print(module.body.operations[0].regions[0].blocks[0].operations[0].name)
# CHECK: is newer than the installed schemas
# CHECK-SAME: binding to the newest known schemas
# CHECK: onnx.reduce_sum
