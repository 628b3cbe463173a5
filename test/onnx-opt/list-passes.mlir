// RUN: onnx-opt --list-passes | filecheck %s
// RUN: onnx-opt --version | filecheck %s --check-prefix=VERSION
// --list-passes names every onnxc pass with its summary, then says that upstream passes work too.

// CHECK: onnxc passes:
// CHECK: onnx-verify {{ *}}Check ONNX type constraints
// CHECK: Any upstream MLIR pass

// VERSION: onnx-opt (onnxc {{[0-9.]+}}) with MLIR Python bindings {{[0-9.]+}}

// Named pipelines are listed with the text they stand for; the targets' stage passes are listed
// beside onnxc's own (registered by onnxc.targets), with the target options as their options.
// RUN: onnx-opt --list-passes | filecheck %s --check-prefix=PIPELINES
// PIPELINES: cpu-to-vector {{ *}}Tile and vectorize linalg ops for the CPU
// PIPELINES-NEXT: --vectorize=<bool>  default: True
// PIPELINES: onnx-to-linalg {{ *}}onnx-passes, then convert ONNX to linalg{{.*}}(pipeline)
// PIPELINES-NEXT: = onnx-passes,{{.*}}convert-onnx-to-linalg,{{.*}}canonicalize,cse
// PIPELINES: onnx-to-llvm {{ *}}{{.*}}(pipeline)
// PIPELINES-NEXT: = onnx-to-linalg,cpu-to-vector,cpu-bufferize,cpu-to-llvm
