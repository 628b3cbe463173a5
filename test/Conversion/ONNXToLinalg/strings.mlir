// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// String tensors become i64 handles (strings.py); the string kernels are calls of the C
// runtime's onnxc_str_* functions inside linalg.generic bodies; constant strings are
// memref.global byte arrays whose address is the handle; string arguments and results carry
// the onnxc.string marker the CPU ABI converts.

// CHECK-DAG: func.func private @onnxc_str_eq(i64, i64) -> i32
// CHECK-LABEL: func.func @equal(
// CHECK-SAME: %{{.+}}: tensor<2x3xi64> {onnxc.string}, %{{.+}}: tensor<3xi64> {onnxc.string}) -> tensor<2x3xi1>
// CHECK: linalg.generic
// CHECK: %[[R:.+]] = func.call @onnxc_str_eq(%{{.+}}, %{{.+}}) : (i64, i64) -> i32
// CHECK: arith.cmpi ne, %[[R]]
func.func @equal(%a: tensor<2x3x!onnx.string>, %b: tensor<3x!onnx.string>) -> tensor<2x3xi1> {
  %0 = "onnx.equal"(%a, %b) : (tensor<2x3x!onnx.string>, tensor<3x!onnx.string>) -> tensor<2x3xi1>
  return %0 : tensor<2x3xi1>
}

// -----

// CHECK-LABEL: func.func @concat(
// CHECK-SAME: -> (tensor<?xi64> {onnxc.string})
// CHECK: linalg.generic
// CHECK: func.call @onnxc_str_concat
func.func @concat(%a: tensor<?x!onnx.string>, %b: tensor<!onnx.string>) -> tensor<?x!onnx.string> {
  %0 = "onnx.string_concat"(%a, %b) : (tensor<?x!onnx.string>, tensor<!onnx.string>) -> tensor<?x!onnx.string>
  return %0 : tensor<?x!onnx.string>
}

// -----

// The RE2 pattern is translated to an anchored POSIX pattern, stored NUL-terminated.
// CHECK: memref.global "private" constant @onnxc_strconst_{{.+}} : memref<17xi8> = dense<[94, 40, 91, 91, 58, 100, 105, 103, 105, 116, 58, 93, 93, 43, 41, 36, 0]>
// CHECK-LABEL: func.func @regex
// CHECK: %[[G:.+]] = memref.get_global @onnxc_strconst_
// CHECK: %[[P:.+]] = memref.extract_aligned_pointer_as_index %[[G]]
// CHECK: %[[H:.+]] = arith.index_cast %[[P]] : index to i64
// CHECK: func.call @onnxc_str_regex_full_match(%{{.+}}, %[[H]], %{{.+}}) : (i64, i64, i32) -> i32
func.func @regex(%x: tensor<4x!onnx.string>) -> tensor<4xi1> {
  %0 = "onnx.regex_full_match"(%x) {pattern = "\\d+"} : (tensor<4x!onnx.string>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

// StringSplit: count the pieces per element, the maximum sizes the new dim, then fill it.
// CHECK-LABEL: func.func @split
// CHECK: func.call @onnxc_str_split_count
// CHECK: arith.maxsi
// CHECK: %[[W:.+]] = arith.index_cast %{{.+}} : i64 to index
// CHECK: tensor.empty(%[[W]]) : tensor<3x?xi64>
// CHECK: linalg.index 1
// CHECK: func.call @onnxc_str_split_part
func.func @split(%x: tensor<3x!onnx.string>) -> (tensor<3x?x!onnx.string>, tensor<3xi64>) {
  %0:2 = "onnx.string_split"(%x) {delimiter = ","} : (tensor<3x!onnx.string>) -> (tensor<3x?x!onnx.string>, tensor<3xi64>)
  return %0#0, %0#1 : tensor<3x?x!onnx.string>, tensor<3xi64>
}

// -----

// StringNormalizer: count what is not a stopword, write those in order (case changed), at
// least one element ("" when every one is removed).
// CHECK-LABEL: func.func @normalizer
// CHECK: func.call @onnxc_str_table_find
// CHECK: arith.maxui %{{.+}}, %c1
// CHECK: linalg.fill
// CHECK: scf.for
// CHECK: scf.if
// CHECK: func.call @onnxc_str_change_case
// CHECK: tensor.insert
// CHECK: tensor.expand_shape
func.func @normalizer(%x: tensor<1x4x!onnx.string>) -> tensor<1x?x!onnx.string> {
  %0 = "onnx.string_normalizer"(%x) {case_change_action = "UPPER", stopwords = ["a", "b"]} : (tensor<1x4x!onnx.string>) -> tensor<1x?x!onnx.string>
  return %0 : tensor<1x?x!onnx.string>
}

// -----

// LabelEncoder, string keys to integers: the table's index, then the value (the default last).
// CHECK-LABEL: func.func @label_encoder
// CHECK: arith.constant dense<[1, 2, 42]> : tensor<3xi64>
// CHECK: func.call @onnxc_str_table_find
// CHECK: arith.select
// CHECK: tensor.extract
func.func @label_encoder(%x: tensor<5x!onnx.string>) -> tensor<5xi64> {
  %0 = "onnx_ml.label_encoder"(%x) {keys_strings = ["a", "b"], values_int64s = array<i64: 1, 2>, default_int64 = 42 : i64} : (tensor<5x!onnx.string>) -> tensor<5xi64>
  return %0 : tensor<5xi64>
}
