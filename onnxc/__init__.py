"""onnxc: an ONNX compiler framework on upstream MLIR.

The package's pieces live in sub-packages: `onnxc.dialect` (the ONNX dialect), `onnxc.importers`
(ONNX models in and out), `onnxc.transforms` (passes and pipelines), `onnxc.targets` (code
generation), `onnxc.tools` (`onnx-opt`, the `onnxc` driver).
"""

__version__ = "0.1.0"
