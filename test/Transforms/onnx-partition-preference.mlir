// RUN: onnx-opt %s -p 'onnx-partition{force=acc,gpu}' | filecheck %s
// RUN: onnx-opt %s -p onnx-partition | filecheck %s --check-prefix=ROOFLINE

// Several forced backends: onnxc.compile(model, target=["acc", "gpu", "cpu"]) marks each node
// with the first preferred backend that supports it (plus the host) and forces every listed
// device. MatMul goes to acc, Tanh to gpu, whatever the roofline says about their slow links;
// Erf, which neither takes, stays on the host. Without force, the roofline keeps all on the CPU.
// CHECK-LABEL: func.func @preferred
// CHECK-SAME: onnxc.partition = [{backend = "acc"{{.*}}}, {backend = "gpu"{{.*}}}, {backend = "cpu"{{.*}}}]
// CHECK: "onnx.mat_mul"{{.*}}onnxc.backend = "acc", onnxc.subgraph = 0
// CHECK: "onnx.tanh"{{.*}}onnxc.backend = "gpu", onnxc.subgraph = 1
// CHECK: "onnx.erf"{{.*}}onnxc.backend = "cpu", onnxc.subgraph = 2
// ROOFLINE-LABEL: func.func @preferred
// ROOFLINE: onnxc.partition = [{backend = "cpu", {{.*}}nodes = 3 : i64{{.*}}}]
module attributes {onnxc.backend_profiles = {
    cpu = {host, macs = {f32 = 1.0e10 : f64}, mem_bw = 1.0e10 : f64},
    acc = {macs = {f32 = 1.0e14 : f64}, mem_bw = 1.0e12 : f64, h2d_bw = 1.0e3 : f64, d2h_bw = 1.0e3 : f64},
    gpu = {macs = {f32 = 1.0e14 : f64}, mem_bw = 1.0e12 : f64, h2d_bw = 1.0e3 : f64, d2h_bw = 1.0e3 : f64}}} {
  func.func @preferred(%a: tensor<16x16xf32>) -> tensor<16x16xf32> {
    %m = "onnx.mat_mul"(%a, %a) {onnxc.accepted_by = ["cpu", "acc"]} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
    %t = "onnx.tanh"(%m) {onnxc.accepted_by = ["cpu", "gpu"]} : (tensor<16x16xf32>) -> tensor<16x16xf32>
    %e = "onnx.erf"(%t) {onnxc.accepted_by = ["cpu"]} : (tensor<16x16xf32>) -> tensor<16x16xf32>
    return %e : tensor<16x16xf32>
  }
}
