// RUN: onnx-opt %s --split-input-file -p onnx-eliminate-sequences | filecheck %s

// Constant positions, negative ones too: erase [x, y] at -2 leaves [y]; insert z at the end (no
// position); element 0, element -1 and the length come straight from the list.
// CHECK-LABEL: func.func @construct_erase_insert
// CHECK-NOT: onnx.sequence
// CHECK: %[[L:.*]] = "onnx.constant"() {value = dense<2> : tensor<i64>}
// CHECK-NOT: onnx.sequence
// CHECK: return %arg1, %[[L]], %arg2 : tensor<2xf32>, tensor<i64>, tensor<3xf32>
func.func @construct_erase_insert(%x: tensor<2xf32>, %y: tensor<2xf32>, %z: tensor<3xf32>) -> (tensor<2xf32>, tensor<i64>, tensor<3xf32>) {
  %s = "onnx.sequence_construct"(%x, %y) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>, tensor<2xf32>) -> !onnx.seq<tensor<2xf32>>
  %m3 = "onnx.constant"() {value = dense<-2> : tensor<i64>} : () -> tensor<i64>
  %e = "onnx.sequence_erase"(%s, %m3) : (!onnx.seq<tensor<2xf32>>, tensor<i64>) -> !onnx.seq<tensor<2xf32>>
  %n = "onnx.none"() : () -> none
  %i = "onnx.sequence_insert"(%e, %z, %n) : (!onnx.seq<tensor<2xf32>>, tensor<3xf32>, none) -> !onnx.seq<tensor<*xf32>>
  %zero = "onnx.constant"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
  %a = "onnx.sequence_at"(%i, %zero) : (!onnx.seq<tensor<*xf32>>, tensor<i32>) -> tensor<2xf32>
  %l = "onnx.sequence_length"(%i) : (!onnx.seq<tensor<*xf32>>) -> tensor<i64>
  %m1 = "onnx.constant"() {value = dense<-1> : tensor<i64>} : () -> tensor<i64>
  %b = "onnx.sequence_at"(%i, %m1) : (!onnx.seq<tensor<*xf32>>, tensor<i64>) -> tensor<3xf32>
  return %a, %l, %b : tensor<2xf32>, tensor<i64>, tensor<3xf32>
}

// -----

// SplitToSequence without `split` gives size-1 Slices, Squeezed for keepdims=0; ConcatFromSequence
// with new_axis=1 Unsqueezes each element at the (negative) axis, then Concats.
// CHECK-LABEL: func.func @split_concat
// CHECK: %[[AX:.*]] = "onnx.constant"() {value = dense<0> : tensor<1xi64>}
// CHECK: %[[S0:.*]] = "onnx.slice"(%arg0, %{{.*}}, %{{.*}}, %[[AX]], %{{.*}}) : {{.*}} -> tensor<1x2xf32>
// CHECK: %[[Q0:.*]] = "onnx.squeeze"(%[[S0]], %[[AX]]) : {{.*}} -> tensor<2xf32>
// CHECK: %[[S1:.*]] = "onnx.slice"(%arg0, {{.*}} -> tensor<1x2xf32>
// CHECK: %[[Q1:.*]] = "onnx.squeeze"(%[[S1]], %[[AX]])
// CHECK: %[[S2:.*]] = "onnx.slice"(%arg0, {{.*}} -> tensor<1x2xf32>
// CHECK: %[[Q2:.*]] = "onnx.squeeze"(%[[S2]], %[[AX]])
// CHECK: %[[NEG:.*]] = "onnx.constant"() {value = dense<-1> : tensor<1xi64>}
// CHECK: %[[U0:.*]] = "onnx.unsqueeze"(%[[Q0]], %[[NEG]]) : {{.*}} -> tensor<2x1xf32>
// CHECK: %[[U1:.*]] = "onnx.unsqueeze"(%[[Q1]], %[[NEG]])
// CHECK: %[[U2:.*]] = "onnx.unsqueeze"(%[[Q2]], %[[NEG]])
// CHECK: %[[C:.*]] = "onnx.concat"(%[[U0]], %[[U1]], %[[U2]]) {axis = -1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, {{.*}}>} : {{.*}} -> tensor<2x3xf32>
// CHECK-NOT: onnx.sequence
// CHECK: return %[[C]]
func.func @split_concat(%x: tensor<3x2xf32>) -> tensor<2x3xf32> {
  %n = "onnx.none"() : () -> none
  %s = "onnx.split_to_sequence"(%x, %n) {axis = 0 : i64, keepdims = 0 : i64} : (tensor<3x2xf32>, none) -> !onnx.seq<tensor<2xf32>>
  %c = "onnx.concat_from_sequence"(%s) {axis = -1 : i64, new_axis = 1 : i64} : (!onnx.seq<tensor<2xf32>>) -> tensor<2x3xf32>
  return %c : tensor<2x3xf32>
}

// -----

// A scalar `split` of 4 over a dim of 10 gives pieces of 4, 4 and 2 rows (the last one is asked
// for); the length is 3.
// CHECK-LABEL: func.func @split_scalar
// CHECK: "onnx.constant"() {value = dense<8> : tensor<1xi64>}
// CHECK: "onnx.constant"() {value = dense<10> : tensor<1xi64>}
// CHECK: %[[LAST:.*]] = "onnx.slice"(%arg0, {{.*}} -> tensor<2x4xf32>
// CHECK: %[[L:.*]] = "onnx.constant"() {value = dense<3> : tensor<i64>}
// CHECK-NOT: onnx.sequence
// CHECK: return %[[L]], %[[LAST]]
func.func @split_scalar(%x: tensor<10x4xf32>) -> (tensor<i64>, tensor<?x4xf32>) {
  %four = "onnx.constant"() {value = dense<4> : tensor<i64>} : () -> tensor<i64>
  %s = "onnx.split_to_sequence"(%x, %four) : (tensor<10x4xf32>, tensor<i64>) -> !onnx.seq<tensor<?x4xf32>>
  %l = "onnx.sequence_length"(%s) : (!onnx.seq<tensor<?x4xf32>>) -> tensor<i64>
  %two = "onnx.constant"() {value = dense<2> : tensor<i64>} : () -> tensor<i64>
  %a = "onnx.sequence_at"(%s, %two) : (!onnx.seq<tensor<?x4xf32>>, tensor<i64>) -> tensor<?x4xf32>
  return %l, %a : tensor<i64>, tensor<?x4xf32>
}

// -----

// A 1-D `split` of static length gives the length even with runtime values.
// CHECK-LABEL: func.func @runtime_split_count
// CHECK-NEXT: %[[L:.*]] = "onnx.constant"() {value = dense<3> : tensor<i64>}
// CHECK-NEXT: return %[[L]]
func.func @runtime_split_count(%x: tensor<?xf32>, %sp: tensor<3xi64>) -> tensor<i64> {
  %s = "onnx.split_to_sequence"(%x, %sp) : (tensor<?xf32>, tensor<3xi64>) -> !onnx.seq<tensor<?xf32>>
  %l = "onnx.sequence_length"(%s) : (!onnx.seq<tensor<?xf32>>) -> tensor<i64>
  return %l : tensor<i64>
}

// -----

// A 1-D `split` of static length with run-time values: the pieces are the results of one Split
// (run-time offsets; its lowering checks that the sizes add up to the dim).
// CHECK-LABEL: func.func @runtime_split_pieces
// CHECK: %[[P:.*]]:2 = "onnx.split"(%arg0, %arg1) {axis = 0 : i64{{.*}}} : (tensor<3x6xf32>, tensor<2xi64>) -> (tensor<?x6xf32>, tensor<?x6xf32>)
// CHECK-NOT: onnx.split_to_sequence
// CHECK: return %[[P]]#1
func.func @runtime_split_pieces(%x: tensor<3x6xf32>, %sp: tensor<2xi64>) -> tensor<?x6xf32> {
  %s = "onnx.split_to_sequence"(%x, %sp) {axis = 0 : i64} : (tensor<3x6xf32>, tensor<2xi64>) -> !onnx.seq<tensor<?x6xf32>>
  %one = "onnx.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %a = "onnx.sequence_at"(%s, %one) : (!onnx.seq<tensor<?x6xf32>>, tensor<i64>) -> tensor<?x6xf32>
  return %a : tensor<?x6xf32>
}

// -----

// A runtime index over elements of one static type: the index is normalized (p < 0: p + 3) and
// a Where chain picks the element.
// CHECK-LABEL: func.func @runtime_index
// CHECK: %[[NEG:.*]] = "onnx.less"(%arg3, %{{.*}})
// CHECK: %[[THREE:.*]] = "onnx.constant"() {value = dense<3> : tensor<i64>}
// CHECK: %[[SH:.*]] = "onnx.add"(%arg3, %[[THREE]])
// CHECK: %[[P:.*]] = "onnx.where"(%[[NEG]], %[[SH]], %arg3)
// CHECK: %[[ONE:.*]] = "onnx.constant"() {value = dense<1> : tensor<i64>}
// CHECK: %[[E1:.*]] = "onnx.equal"(%[[P]], %[[ONE]])
// CHECK: %[[W1:.*]] = "onnx.where"(%[[E1]], %arg1, %arg2) : {{.*}} -> tensor<2xf32>
// CHECK: %[[ZERO:.*]] = "onnx.constant"() {value = dense<0> : tensor<i64>}
// CHECK: %[[E0:.*]] = "onnx.equal"(%[[P]], %[[ZERO]])
// CHECK: %[[W0:.*]] = "onnx.where"(%[[E0]], %arg0, %[[W1]])
// CHECK-NOT: onnx.sequence
// CHECK: return %[[W0]]
func.func @runtime_index(%x: tensor<2xf32>, %y: tensor<2xf32>, %z: tensor<2xf32>, %p: tensor<i64>) -> tensor<2xf32> {
  %s = "onnx.sequence_construct"(%x, %y, %z) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> !onnx.seq<tensor<2xf32>>
  %a = "onnx.sequence_at"(%s, %p) : (!onnx.seq<tensor<2xf32>>, tensor<i64>) -> tensor<2xf32>
  return %a : tensor<2xf32>
}

// -----

// SequenceMap is unrolled: the body once per element, its block arguments bound to the element
// and to the tensor input, its use of an outer value (the Relu) kept.
// CHECK-LABEL: func.func @sequence_map
// CHECK: %[[R:.*]] = "onnx.relu"(%arg2)
// CHECK: %[[A0:.*]] = "onnx.add"(%arg0, %arg2)
// CHECK: %[[M0:.*]] = "onnx.mul"(%[[A0]], %[[R]])
// CHECK: %[[A1:.*]] = "onnx.add"(%arg1, %arg2)
// CHECK: %[[M1:.*]] = "onnx.mul"(%[[A1]], %[[R]])
// CHECK: %[[U0:.*]] = "onnx.unsqueeze"(%[[M0]],
// CHECK: %[[U1:.*]] = "onnx.unsqueeze"(%[[M1]],
// CHECK: %[[C:.*]] = "onnx.concat"(%[[U0]], %[[U1]])
// CHECK-NOT: onnx.sequence
// CHECK: return %[[C]]
func.func @sequence_map(%x: tensor<2xf32>, %y: tensor<2xf32>, %w: tensor<2xf32>) -> tensor<2x2xf32> {
  %s = "onnx.sequence_construct"(%x, %y) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>, tensor<2xf32>) -> !onnx.seq<tensor<2xf32>>
  %r = "onnx.relu"(%w) : (tensor<2xf32>) -> tensor<2xf32>
  %m = "onnx.sequence_map"(%s, %w) ({
  ^bb0(%e: tensor<?xf32>, %t: tensor<?xf32>):
    %sum = "onnx.add"(%e, %t) : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
    %prod = "onnx.mul"(%sum, %r) : (tensor<?xf32>, tensor<2xf32>) -> tensor<?xf32>
    gpu.yield %prod : tensor<?xf32>
  }) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (!onnx.seq<tensor<2xf32>>, tensor<2xf32>) -> !onnx.seq<tensor<?xf32>>
  %c = "onnx.concat_from_sequence"(%m) {axis = 0 : i64, new_axis = 1 : i64} : (!onnx.seq<tensor<?xf32>>) -> tensor<2x2xf32>
  return %c : tensor<2x2xf32>
}

// -----

// Optional presence is a constant: a built Optional (true), one built from `type` alone (false),
// a plain tensor (true) and an omitted input (false); getting a present element is the value.
// CHECK-LABEL: func.func @optionals
// CHECK: %[[T1:.*]] = "onnx.constant"() {value = dense<true> : tensor<i1>}
// CHECK: %[[F2:.*]] = "onnx.constant"() {value = dense<false> : tensor<i1>}
// CHECK: %[[T3:.*]] = "onnx.constant"() {value = dense<true> : tensor<i1>}
// CHECK: %[[F4:.*]] = "onnx.constant"() {value = dense<false> : tensor<i1>}
// CHECK-NOT: onnx.optional
// CHECK: return %[[T1]], %[[F2]], %[[T3]], %[[F4]], %arg0
func.func @optionals(%x: tensor<4xf32>) -> (tensor<i1>, tensor<i1>, tensor<i1>, tensor<i1>, tensor<4xf32>) {
  %o = "onnx.optional"(%x) : (tensor<4xf32>) -> !onnx.opt<tensor<4xf32>>
  %n = "onnx.none"() : () -> none
  %empty = "onnx.optional"(%n) {type = tensor<4xf32>} : (none) -> !onnx.opt<tensor<4xf32>>
  %h1 = "onnx.optional_has_element"(%o) : (!onnx.opt<tensor<4xf32>>) -> tensor<i1>
  %h2 = "onnx.optional_has_element"(%empty) : (!onnx.opt<tensor<4xf32>>) -> tensor<i1>
  %h3 = "onnx.optional_has_element"(%x) : (tensor<4xf32>) -> tensor<i1>
  %h4 = "onnx.optional_has_element"(%n) : (none) -> tensor<i1>
  %g = "onnx.optional_get_element"(%o) : (!onnx.opt<tensor<4xf32>>) -> tensor<4xf32>
  return %h1, %h2, %h3, %h4, %g : tensor<i1>, tensor<i1>, tensor<i1>, tensor<i1>, tensor<4xf32>
}

// -----

// Unknown structure stays: a sequence argument, and a runtime index into elements of different
// ranks (neither a Where nor an If can choose between them).
// CHECK-LABEL: func.func @unknown
// CHECK: "onnx.sequence_length"(%arg0)
// CHECK: %[[S:.*]] = "onnx.sequence_construct"(%arg1, %arg2)
// CHECK: "onnx.sequence_at"(%[[S]], %arg3)
func.func @unknown(%s: !onnx.seq<tensor<2xf32>>, %x: tensor<2xf32>, %y: tensor<3x2xf32>, %p: tensor<i64>) -> (tensor<i64>, tensor<*xf32>) {
  %l = "onnx.sequence_length"(%s) : (!onnx.seq<tensor<2xf32>>) -> tensor<i64>
  %t = "onnx.sequence_construct"(%x, %y) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>, tensor<3x2xf32>) -> !onnx.seq<tensor<*xf32>>
  %a = "onnx.sequence_at"(%t, %p) : (!onnx.seq<tensor<*xf32>>, tensor<i64>) -> tensor<*xf32>
  return %l, %a : tensor<i64>, tensor<*xf32>
}

// -----

// A runtime index into elements of different shapes of one rank: an If chooses (a Where would
// broadcast), its result's dim dynamic; the index is normalized first.
// CHECK-LABEL: func.func @runtime_index_shapes
// CHECK: %[[P:.*]] = "onnx.where"
// CHECK: %[[C:.*]] = "onnx.equal"(%[[P]], %{{.*}})
// CHECK: %[[R:.*]] = "onnx.if"(%[[C]]) ({
// CHECK-NEXT: gpu.yield %arg1
// CHECK: }, {
// CHECK-NEXT: gpu.yield %arg0
// CHECK: }) {{.*}} : (tensor<i1>) -> tensor<?xf32>
// CHECK-NOT: onnx.sequence
// CHECK: return %[[R]]
func.func @runtime_index_shapes(%x: tensor<2xf32>, %y: tensor<3xf32>, %p: tensor<i64>) -> tensor<?xf32> {
  %t = "onnx.sequence_construct"(%x, %y) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>, tensor<3xf32>) -> !onnx.seq<tensor<?xf32>>
  %a = "onnx.sequence_at"(%t, %p) : (!onnx.seq<tensor<?xf32>>, tensor<i64>) -> tensor<?xf32>
  return %a : tensor<?xf32>
}

// -----

// A Loop appending to a sequence, with a constant trip count and a condition that stays true, is
// unrolled (iteration numbers as constants); the list it builds is then stacked.
// CHECK-LABEL: func.func @unroll
// CHECK-NOT: onnx.loop
// CHECK: "onnx.constant"() {value = dense<0> : tensor<i64>}
// CHECK: %[[R0:.*]] = "onnx.relu"(%arg0)
// CHECK: "onnx.constant"() {value = dense<1> : tensor<i64>}
// CHECK: %[[R1:.*]] = "onnx.relu"(%arg0)
// CHECK: "onnx.constant"() {value = dense<2> : tensor<i64>}
// CHECK: %[[R2:.*]] = "onnx.relu"(%arg0)
// CHECK: %[[U0:.*]] = "onnx.unsqueeze"(%[[R0]],
// CHECK: %[[U1:.*]] = "onnx.unsqueeze"(%[[R1]],
// CHECK: %[[U2:.*]] = "onnx.unsqueeze"(%[[R2]],
// CHECK: %[[C:.*]] = "onnx.concat"(%[[U0]], %[[U1]], %[[U2]])
// CHECK-NOT: onnx.sequence
// CHECK-NOT: onnx.loop
// CHECK: return %[[C]]
func.func @unroll(%x: tensor<2xf32>) -> tensor<3x2xf32> {
  %m = "onnx.constant"() {value = dense<3> : tensor<i64>} : () -> tensor<i64>
  %t = "onnx.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
  %e = "onnx.sequence_empty"() {dtype = 1 : i64} : () -> !onnx.seq<tensor<*xf32>>
  %l = "onnx.loop"(%m, %t, %e) ({
  ^bb0(%i: tensor<i64>, %c: tensor<i1>, %acc: !onnx.seq<tensor<*xf32>>):
    %c2 = "onnx.identity"(%c) : (tensor<i1>) -> tensor<i1>
    %n = "onnx.none"() : () -> none
    %y = "onnx.relu"(%x) : (tensor<2xf32>) -> tensor<2xf32>
    %acc2 = "onnx.sequence_insert"(%acc, %y, %n) : (!onnx.seq<tensor<*xf32>>, tensor<2xf32>, none) -> !onnx.seq<tensor<*xf32>>
    gpu.yield %c2, %acc2 : tensor<i1>, !onnx.seq<tensor<*xf32>>
  }) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, tensor<i1>, !onnx.seq<tensor<*xf32>>) -> !onnx.seq<tensor<*xf32>>
  %r = "onnx.concat_from_sequence"(%l) {axis = 0 : i64, new_axis = 1 : i64} : (!onnx.seq<tensor<*xf32>>) -> tensor<3x2xf32>
  return %r : tensor<3x2xf32>
}

// -----

// A constant false input condition: the Loop runs no iteration, its carried sequence (of one
// element here) passes through.
// CHECK-LABEL: func.func @never_runs
// CHECK-NOT: onnx.loop
// CHECK-NOT: onnx.relu
// CHECK: %[[U:.*]] = "onnx.unsqueeze"(%arg0, %{{.*}})
// CHECK-NEXT: return %[[U]]
func.func @never_runs(%x: tensor<2xf32>) -> tensor<1x2xf32> {
  %m = "onnx.constant"() {value = dense<3> : tensor<i64>} : () -> tensor<i64>
  %f = "onnx.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
  %s = "onnx.sequence_construct"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>) -> !onnx.seq<tensor<*xf32>>
  %l = "onnx.loop"(%m, %f, %s) ({
  ^bb0(%i: tensor<i64>, %c: tensor<i1>, %acc: !onnx.seq<tensor<*xf32>>):
    %c2 = "onnx.identity"(%c) : (tensor<i1>) -> tensor<i1>
    %n = "onnx.none"() : () -> none
    %y = "onnx.relu"(%x) : (tensor<2xf32>) -> tensor<2xf32>
    %acc2 = "onnx.sequence_insert"(%acc, %y, %n) : (!onnx.seq<tensor<*xf32>>, tensor<2xf32>, none) -> !onnx.seq<tensor<*xf32>>
    gpu.yield %c2, %acc2 : tensor<i1>, !onnx.seq<tensor<*xf32>>
  }) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, tensor<i1>, !onnx.seq<tensor<*xf32>>) -> !onnx.seq<tensor<*xf32>>
  %r = "onnx.concat_from_sequence"(%l) {axis = 0 : i64, new_axis = 1 : i64} : (!onnx.seq<tensor<*xf32>>) -> tensor<1x2xf32>
  return %r : tensor<1x2xf32>
}

// -----

// A runtime trip count: the Loop and its sequence stay.
// CHECK-LABEL: func.func @runtime_trip_count
// CHECK: %[[E:.*]] = "onnx.sequence_empty"()
// CHECK: "onnx.loop"(%arg0, %{{.*}}, %[[E]])
// CHECK: "onnx.sequence_insert"
func.func @runtime_trip_count(%m: tensor<i64>, %x: tensor<2xf32>) -> !onnx.seq<tensor<*xf32>> {
  %t = "onnx.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
  %e = "onnx.sequence_empty"() {dtype = 1 : i64} : () -> !onnx.seq<tensor<*xf32>>
  %l = "onnx.loop"(%m, %t, %e) ({
  ^bb0(%i: tensor<i64>, %c: tensor<i1>, %acc: !onnx.seq<tensor<*xf32>>):
    %n = "onnx.none"() : () -> none
    %acc2 = "onnx.sequence_insert"(%acc, %x, %n) : (!onnx.seq<tensor<*xf32>>, tensor<2xf32>, none) -> !onnx.seq<tensor<*xf32>>
    gpu.yield %c, %acc2 : tensor<i1>, !onnx.seq<tensor<*xf32>>
  }) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i64>, tensor<i1>, !onnx.seq<tensor<*xf32>>) -> !onnx.seq<tensor<*xf32>>
  return %l : !onnx.seq<tensor<*xf32>>
}

// -----

// An If whose branches build sequences of one length yields the elements instead (joined types:
// tensor<2xf32> and tensor<3xf32> give tensor<?xf32>); the branch ops move into the new If.
// CHECK-LABEL: func.func @if_seq
// CHECK: %[[IF:.*]]:2 = "onnx.if"(%arg0) ({
// CHECK: %[[N:.*]] = "onnx.neg"(%arg1)
// CHECK: gpu.yield %[[N]], %arg2 : tensor<2xf32>, tensor<3xf32>
// CHECK: }, {
// CHECK: gpu.yield %arg2, %arg1 : tensor<3xf32>, tensor<2xf32>
// CHECK: }) {{.*}} : (tensor<i1>) -> (tensor<?xf32>, tensor<?xf32>)
// CHECK: %[[C:.*]] = "onnx.concat"(%[[IF]]#0, %[[IF]]#1)
// CHECK-NOT: onnx.sequence
// CHECK: return %[[C]]
func.func @if_seq(%c: tensor<i1>, %x: tensor<2xf32>, %y: tensor<3xf32>) -> tensor<?xf32> {
  %r = "onnx.if"(%c) ({
    %n = "onnx.neg"(%x) : (tensor<2xf32>) -> tensor<2xf32>
    %s = "onnx.sequence_construct"(%n, %y) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>, tensor<3xf32>) -> !onnx.seq<tensor<?xf32>>
    gpu.yield %s : !onnx.seq<tensor<?xf32>>
  }, {
    %s = "onnx.sequence_construct"(%y, %x) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<3xf32>, tensor<2xf32>) -> !onnx.seq<tensor<?xf32>>
    gpu.yield %s : !onnx.seq<tensor<?xf32>>
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<i1>) -> !onnx.seq<tensor<?xf32>>
  %cat = "onnx.concat_from_sequence"(%r) {axis = 0 : i64} : (!onnx.seq<tensor<?xf32>>) -> tensor<?xf32>
  return %cat : tensor<?xf32>
}

// -----

// Elements that are themselves results of replaced consumers (a SequenceAt inside a
// SequenceConstruct), and a sequence read back through an Optional and an OptionalGetElement of
// another spelling.
// CHECK-LABEL: func.func @nested
// CHECK: %[[C:.*]] = "onnx.concat"(%arg1, %arg1)
// CHECK-NOT: onnx.sequence
// CHECK-NOT: onnx.optional
// CHECK: return %[[C]], %arg1
func.func @nested(%x: tensor<2xf32>, %y: tensor<2xf32>) -> (tensor<4xf32>, tensor<2xf32>) {
  %s = "onnx.sequence_construct"(%x, %y) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>, tensor<2xf32>) -> !onnx.seq<tensor<2xf32>>
  %one = "onnx.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %a = "onnx.sequence_at"(%s, %one) : (!onnx.seq<tensor<2xf32>>, tensor<i64>) -> tensor<2xf32>
  %t = "onnx.sequence_construct"(%a, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>, tensor<2xf32>) -> !onnx.seq<tensor<2xf32>>
  %c = "onnx.concat_from_sequence"(%t) {axis = 0 : i64} : (!onnx.seq<tensor<2xf32>>) -> tensor<4xf32>
  %o = "onnx.optional"(%t) : (!onnx.seq<tensor<2xf32>>) -> !onnx.opt<!onnx.seq<tensor<2xf32>>>
  %g = "onnx.optional_get_element"(%o) : (!onnx.opt<!onnx.seq<tensor<2xf32>>>) -> !onnx.seq<tensor<*xf32>>
  %zero = "onnx.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %b = "onnx.sequence_at"(%g, %zero) : (!onnx.seq<tensor<*xf32>>, tensor<i64>) -> tensor<2xf32>
  return %c, %b : tensor<4xf32>, tensor<2xf32>
}
