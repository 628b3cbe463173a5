"""The `onnx` dialect namespace for the MLIR bindings: no op classes (see the package docstring)."""
