"""Patterns lowering ONNX-dialect ops to linalg/tensor/arith/math/scf, one module per op family."""
