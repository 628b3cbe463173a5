// RUN: onnx-opt %s --split-input-file -p onnx-partition | filecheck %s
// RUN: onnx-opt %s --split-input-file -p 'onnx-partition{backends=cpu}' | filecheck %s --check-prefix=CPUONLY
// RUN: onnx-opt %s --split-input-file -p 'onnx-partition{force=acc}' | filecheck %s --check-prefix=FORCE
// RUN: onnx-opt %s --split-input-file -p 'onnx-partition{pin-host=mm}' | filecheck %s --check-prefix=PIN

// A fast accelerator with a fast link that takes MatMul and Add but not Tanh: the MatMul->Add
// chain is one subgraph offloaded to it, Tanh stays on the CPU; subgraphs are numbered in the
// order they run.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: onnxc.partition = [{backend = "acc", est = {acc = {{[^,]*}}, cpu = {{[^}]*}}}, id = 0 : i64, nodes = 2 : i64
// CHECK-SAME: {backend = "cpu", est = {cpu = {{[^}]*}}}, id = 1 : i64, nodes = 1 : i64
// CHECK: "onnx.mat_mul"{{.*}}onnxc.accepted_by = ["acc", "cpu"], onnxc.backend = "acc", onnxc.subgraph = 0
// CHECK: "onnx.add"{{.*}}onnxc.backend = "acc", onnxc.subgraph = 0
// CHECK: "onnx.tanh"{{.*}}onnxc.accepted_by = ["cpu"], onnxc.backend = "cpu", onnxc.subgraph = 1
// With only the CPU considered, the three ops are one CPU subgraph.
// CPUONLY-LABEL: func.func @chain
// CPUONLY-SAME: onnxc.partition = [{backend = "cpu", est = {cpu = {{[^}]*}}}, id = 0 : i64, nodes = 3 : i64
// CPUONLY: "onnx.mat_mul"{{.*}}onnxc.accepted_by = ["cpu"], onnxc.backend = "cpu", onnxc.subgraph = 0
// pin-host=mm (the user's deny list, by ONNX node name): the MatMul stays on the CPU, the Add
// alone still pays to offload, so the chain becomes three subgraphs.
// PIN-LABEL: func.func @chain
// PIN: "onnx.mat_mul"{{.*}}onnxc.accepted_by = ["cpu"], onnxc.backend = "cpu", onnxc.subgraph = 0
// PIN: "onnx.add"{{.*}}onnxc.backend = "acc", onnxc.subgraph = 1
// PIN: "onnx.tanh"{{.*}}onnxc.backend = "cpu", onnxc.subgraph = 2
module attributes {onnxc.backend_profiles = {
    cpu = {host, macs = {f32 = 1.0e10 : f64}, mem_bw = 1.0e10 : f64},
    acc = {macs = {f32 = 1.0e14 : f64}, mem_bw = 1.0e12 : f64, h2d_bw = 1.0e12 : f64, d2h_bw = 1.0e12 : f64, ops = ["MatMul", "Add"]}}} {
  func.func @chain(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %m = "onnx.mat_mul"(%a, %b) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32> loc("mm")
    %s = "onnx.add"(%m, %a) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    %t = "onnx.tanh"(%s) : (tensor<256x256xf32>) -> tensor<256x256xf32>
    return %t : tensor<256x256xf32>
  }
}

// -----

// The same device behind a slow link: moving 3 x 256 KiB costs more than the CPU's whole
// MatMul, so everything stays on the CPU, in one subgraph.
// CHECK-LABEL: func.func @slow_link
// CHECK-SAME: onnxc.partition = [{backend = "cpu", est = {acc = {{[^,]*}}, cpu = {{[^}]*}}}, id = 0 : i64, nodes = 2 : i64
// CHECK: "onnx.mat_mul"{{.*}}onnxc.accepted_by = ["acc", "cpu"], onnxc.backend = "cpu", onnxc.subgraph = 0
module attributes {onnxc.backend_profiles = {
    cpu = {host, macs = {f32 = 1.0e10 : f64}, mem_bw = 1.0e10 : f64},
    acc = {macs = {f32 = 1.0e14 : f64}, mem_bw = 1.0e12 : f64, h2d_bw = 1.0e6 : f64, d2h_bw = 1.0e6 : f64, ops = ["MatMul", "Add"]}}} {
  func.func @slow_link(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %m = "onnx.mat_mul"(%a, %b) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    %s = "onnx.add"(%m, %a) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    return %s : tensor<256x256xf32>
  }
}

// -----

// Acyclicity: Relu and Add are accepted by the device, Neg (between them) is not. {Relu, Add} as
// one subgraph would need Neg's result and feed Neg: a cycle once contracted. So they are two
// device subgraphs with the CPU's Neg between them, numbered in run order; a node's own mark
// (`onnxc.accepted_by`, written from compatibility answers) wins over the profile's op list.
// CHECK-LABEL: func.func @no_cycle
// CHECK: "onnx.relu"{{.*}}onnxc.backend = "acc", onnxc.subgraph = 0
// CHECK: "onnx.neg"{{.*}}onnxc.accepted_by = ["cpu"], onnxc.backend = "cpu", onnxc.subgraph = 1
// CHECK: "onnx.add"{{.*}}onnxc.backend = "acc", onnxc.subgraph = 2
module attributes {onnxc.backend_profiles = {
    cpu = {host, macs = {f32 = 1.0e10 : f64}, mem_bw = 1.0e10 : f64},
    acc = {macs = {f32 = 1.0e14 : f64}, mem_bw = 1.0e12 : f64, h2d_bw = 1.0e12 : f64, d2h_bw = 1.0e12 : f64}}} {
  func.func @no_cycle(%x: tensor<1048576xf32>) -> tensor<1048576xf32> {
    %a = "onnx.relu"(%x) : (tensor<1048576xf32>) -> tensor<1048576xf32>
    %b = "onnx.neg"(%a) {onnxc.accepted_by = ["cpu"]} : (tensor<1048576xf32>) -> tensor<1048576xf32>
    %c = "onnx.add"(%a, %b) : (tensor<1048576xf32>, tensor<1048576xf32>) -> tensor<1048576xf32>
    return %c : tensor<1048576xf32>
  }
}

// -----

// force=acc (the user's override): the slow link would keep both ops on the CPU, but every node
// the device accepts goes to it; Tanh, which it does not accept, stays on the CPU.
// FORCE-LABEL: func.func @forced
// FORCE: "onnx.mat_mul"{{.*}}onnxc.backend = "acc", onnxc.subgraph = 0
// FORCE: "onnx.tanh"{{.*}}onnxc.backend = "cpu", onnxc.subgraph = 1
module attributes {onnxc.backend_profiles = {
    cpu = {host, macs = {f32 = 1.0e10 : f64}, mem_bw = 1.0e10 : f64},
    acc = {macs = {f32 = 1.0e14 : f64}, mem_bw = 1.0e12 : f64, h2d_bw = 1.0e6 : f64, d2h_bw = 1.0e6 : f64, ops = ["MatMul"]}}} {
  func.func @forced(%a: tensor<16x16xf32>) -> tensor<16x16xf32> {
    %m = "onnx.mat_mul"(%a, %a) : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
    %t = "onnx.tanh"(%m) : (tensor<16x16xf32>) -> tensor<16x16xf32>
    return %t : tensor<16x16xf32>
  }
}

// -----

// The figures from a JSON file (profiles=...) instead of a module attribute: what
// `onnx-opt model.onnx -p 'onnx-partition{profiles=figures.json}'` reads after
// onnxc.targets.backends.partition.profiles_json wrote it.
// RUN: echo '{"cpu": {"host": true, "macs": {"f32": 1e10}, "mem_bw": 1e10}, "acc": {"macs": {"f32": 1e14}, "mem_bw": 1e12, "h2d_bw": 1e12, "d2h_bw": 1e12, "ops": ["MatMul"]}}' > %t.json
// RUN: onnx-opt %s --split-input-file -p 'onnx-partition{profiles=%t.json}' | filecheck %s --check-prefix=JSON
// JSON-LABEL: func.func @from_json
// JSON: "onnx.mat_mul"{{.*}}onnxc.accepted_by = ["cpu", "acc"], onnxc.backend = "acc", onnxc.subgraph = 0
// JSON: "onnx.tanh"{{.*}}onnxc.accepted_by = ["cpu"], onnxc.backend = "cpu", onnxc.subgraph = 1
// The file wins over the module's attribute (whose device takes Tanh, not MatMul):
// CHECK-LABEL: func.func @from_json
// CHECK: "onnx.mat_mul"{{.*}}onnxc.accepted_by = ["cpu"], onnxc.backend = "cpu"
module attributes {onnxc.backend_profiles = {
    cpu = {host, macs = {f32 = 1.0e10 : f64}, mem_bw = 1.0e10 : f64},
    acc = {macs = {f32 = 1.0e14 : f64}, mem_bw = 1.0e12 : f64, ops = ["Tanh"]}}} {
  func.func @from_json(%a: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %m = "onnx.mat_mul"(%a, %a) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    %t = "onnx.tanh"(%m) : (tensor<256x256xf32>) -> tensor<256x256xf32>
    return %t : tensor<256x256xf32>
  }
}
