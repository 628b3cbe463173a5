// RUN: onnx-opt %s --verify-diagnostics -p transform-interpreter
// A remark emitted by a native pass (the transform interpreter) is matched by expected-remark.

module attributes {transform.with_named_sequence} {
  func.func @remark(%a: i32) -> i32 {
    // expected-remark @+1 {{matched this op}}
    %r = arith.addi %a, %a : i32
    return %r : i32
  }
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %add = transform.structured.match ops{["arith.addi"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.debug.emit_remark_at %add, "matched this op" : !transform.any_op
    transform.yield
  }
}
