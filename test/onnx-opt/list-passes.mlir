// RUN: onnx-opt --list-passes | filecheck %s
// RUN: onnx-opt --version | filecheck %s --check-prefix=VERSION
// --list-passes names every onnxc pass with its summary, then says that upstream passes work too.

// CHECK: onnxc passes:
// CHECK: onnx-verify {{ *}}Check ONNX type constraints
// CHECK: Any upstream MLIR pass

// VERSION: onnx-opt (onnxc {{[0-9.]+}}) with MLIR Python bindings {{[0-9.]+}}
