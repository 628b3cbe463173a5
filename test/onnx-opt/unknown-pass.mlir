// RUN: not onnx-opt %s -p canonicalise 2>&1 | filecheck %s --check-prefix=TOP
// RUN: not onnx-opt %s --pass-pipeline='builtin.module(func.func(csee))' 2>&1 | filecheck %s --check-prefix=NESTED
// RUN: not onnx-opt %s -p onnx-verfy 2>&1 | filecheck %s --check-prefix=ONNXC
// RUN: not onnx-opt %s -p 'func.func(onnx-verify)' 2>&1 | filecheck %s --check-prefix=ANCHOR
// RUN: not onnx-opt %s -p 'canonicalize{bogus=1}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not onnx-opt %s -p 'onnx-verify{bogus=1}' 2>&1 | filecheck %s --check-prefix=PYOPTION
// RUN: not onnx-opt %s -p 'cse,,canonicalize' 2>&1 | filecheck %s --check-prefix=SYNTAX
// RUN: not onnx-opt %s -p cse --pass-pipeline='builtin.module(cse)' 2>&1 | filecheck %s --check-prefix=BOTH
// Pipeline mistakes are one-line errors that name the closest known passes (onnxc's and
// upstream ones), never tracebacks.

// TOP-NOT: Traceback
// TOP: onnx-opt: error: unknown pass 'canonicalise'; did you mean 'canonicalize'
// NESTED: onnx-opt: error: unknown pass 'csee'; did you mean 'cse'?
// ONNXC: onnx-opt: error: unknown pass 'onnx-verfy'; did you mean 'onnx-verify'
// ANCHOR: onnx-opt: error: onnxc pass 'onnx-verify' runs on the whole module and cannot be nested in 'func.func(...)'
// OPTION: onnx-opt: error: invalid pass pipeline 'canonicalize{bogus=1}': {{.*}}no such option bogus
// PYOPTION: onnx-opt: error: pass 'onnx-verify' has no option 'bogus'
// SYNTAX: onnx-opt: error: invalid pass pipeline at column 5: expected a pass name, found ','
// BOTH: onnx-opt: error: give the pipeline either as --pass-pipeline or as -p, not both
func.func @f() {
  return
}
