// RUN: onnx-opt %s --split-input-file -p convert-onnx-to-linalg | filecheck %s
// The lowerings added for the backend suite's remaining ops (issue 10): recurrences and scatters
// are scf loops around linalg generics, gathers are generics reading with tensor.extract.

// LinearAttention: one scf.for over the tokens carrying the f32 state and the output; GQA reads
// the state of query head h at kv head h floordiv group (an affine map, no copy).
// CHECK-DAG: #[[GQA:.+]] = affine_map<(d0, d1, d2, d3) -> (d0, d1 floordiv 2, d3, d2)>
// CHECK-LABEL: func.func @linear_attention_gqa
// CHECK: %[[R:.+]]:2 = scf.for {{.*}} iter_args({{.*}}) -> (tensor<1x1x4x4xf32>, tensor<1x3x2x4xf32>)
// CHECK: linalg.generic {indexing_maps = [{{.*}}#[[GQA]]{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK: tensor.insert_slice
// CHECK: scf.yield
// CHECK: tensor.reshape %[[R]]#1
func.func @linear_attention_gqa(%q: tensor<1x3x8xf32>, %k: tensor<1x3x4xf32>, %v: tensor<1x3x4xf32>) -> (tensor<1x3x8xf32>, tensor<1x1x4x4xf32>) {
  %none = "onnx.none"() : () -> none
  %o, %s = "onnx.linear_attention"(%q, %k, %v, %none, %none, %none) {q_num_heads = 2 : i64, kv_num_heads = 1 : i64, update_rule = "linear"} : (tensor<1x3x8xf32>, tensor<1x3x4xf32>, tensor<1x3x4xf32>, none, none, none) -> (tensor<1x3x8xf32>, tensor<1x1x4x4xf32>)
  return %o, %s : tensor<1x3x8xf32>, tensor<1x1x4x4xf32>
}

// -----

// Det: pivoted LU in f64, one scf.for over the pivot column; the pivot search is a reduction
// with two results (largest |a| and its row).
// CHECK-LABEL: func.func @det
// CHECK: scf.for {{.*}} -> (tensor<?x3x3xf64>, tensor<?xf64>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}}outs({{.*}} : tensor<?xf64>, tensor<?xindex>)
// CHECK: return {{.*}} : tensor<?xf32>
func.func @det(%x: tensor<?x3x3xf32>) -> tensor<?xf32> {
  %0 = "onnx.det"(%x) : (tensor<?x3x3xf32>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

// TensorScatter: a gather over the cache (circular: positions taken modulo the cache length);
// an update whose length is known only at run time is guarded by scf.if (length 0: the cache).
// CHECK-LABEL: func.func @tensor_scatter
// CHECK: scf.if
// CHECK: linalg.generic
// CHECK: arith.remsi
// CHECK: scf.yield
// CHECK: scf.yield %arg0
func.func @tensor_scatter(%p: tensor<2x4x5xf32>, %u: tensor<2x?x5xf32>, %w: tensor<2xi64>) -> tensor<2x4x5xf32> {
  %0 = "onnx.tensor_scatter"(%p, %u, %w) {mode = "circular"} : (tensor<2x4x5xf32>, tensor<2x?x5xf32>, tensor<2xi64>) -> tensor<2x4x5xf32>
  return %0 : tensor<2x4x5xf32>
}

// -----

// MaxUnpool: a serial scatter (the last write wins, as in the reference) into a zero buffer of the
// inferred size; indices outside it are skipped.
// CHECK-LABEL: func.func @max_unpool
// CHECK: scf.for {{.*}} -> (tensor<16xf32>)
// CHECK: scf.if
// CHECK: tensor.insert
func.func @max_unpool(%x: tensor<1x1x2x2xf32>, %i: tensor<1x1x2x2xi64>) -> tensor<1x1x4x4xf32> {
  %none = "onnx.none"() : () -> none
  %0 = "onnx.max_unpool"(%x, %i, %none) {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>, none) -> tensor<1x1x4x4xf32>
  return %0 : tensor<1x1x4x4xf32>
}
