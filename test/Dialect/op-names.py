# RUN: %PYTHON %s | filecheck %s
"""The ONNX op type <-> dialect op name mapping: snake_case for IRDL, acronyms kept whole,
older signatures with a version suffix, other domains in their own dialect, and back."""

from onnxc.dialect.table import lookup, op_info

for op_type, domain, opset in [
    ("MatMul", "", None),
    ("LSTM", "", None),
    ("QLinearConv", "", None),
    ("Col2Im", "", None),
    ("IsNaN", "", None),
    ("ReduceSum", "", 12),
    ("Split", "", 11),
    ("LinearClassifier", "ai.onnx.ml", None),
    ("Adam", "ai.onnx.preview.training", None),
]:
    info = lookup(op_type, domain, opset)
    back = op_info(info.full_name)
    print(f"{domain or 'ai.onnx'} {op_type} @{opset} -> {info.full_name} -> {back.op_type} {list(back.since_versions)}")

# CHECK: ai.onnx MatMul @None -> onnx.mat_mul -> MatMul [13]
# CHECK: ai.onnx LSTM @None -> onnx.lstm -> LSTM [22]
# CHECK: ai.onnx QLinearConv @None -> onnx.qlinear_conv -> QLinearConv
# CHECK: ai.onnx Col2Im @None -> onnx.col2im -> Col2Im
# CHECK: ai.onnx IsNaN @None -> onnx.is_nan -> IsNaN
# ReduceSum 1 and 11 share a signature; 13 moved axes to an input.
# CHECK: ai.onnx ReduceSum @12 -> onnx.reduce_sum_v1 -> ReduceSum [1, 11]
# Split 2 and 11 differ only in semantics (negative axis), not in signature, so they share one op.
# CHECK: ai.onnx Split @11 -> onnx.split_v2 -> Split [2, 11]
# CHECK: ai.onnx.ml LinearClassifier @None -> onnx_ml.linear_classifier -> LinearClassifier
# CHECK: ai.onnx.preview.training Adam @None -> onnx_training.adam -> Adam
