# RUN: %PYTHON %s | filecheck %s
"""A convolution whose register tile does not divide its output width (conv_plan.py,
peel_tiles.peel_conv_tiles): a 3x3 convolution 16 -> 16 channels to a 13-pixel-wide output with
its bias as the accumulator's initializer and a Relu fused into its tiles, planned for AVX2
(x86-64-v3: 8 lanes, 16 registers) on one thread.

The register tile is 5 pixels x 16 channels (two vectors): the pixel loop is peeled into a loop
of two whole tiles (0 to 10 step 5) and the last, partial tile of 3 pixels at its own static
size, and both are vectorized with the Relu in the same tiles (5, then 3 pixels); no linalg op
is left."""

from mlir import ir

from onnxc.targets.cpu import CpuPipelineOptions, lower_to_vector

SRC = """
#id = affine_map<(n, h, w, c) -> (n, h, w, c)>
func.func @conv(%x: tensor<1x15x15x16xf32>, %w: tensor<3x3x16x16xf32>, %b: tensor<16xf32>) -> tensor<1x13x13x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x13x13x16xf32>
  %bias = linalg.broadcast ins(%b : tensor<16xf32>) outs(%e : tensor<1x13x13x16xf32>) dimensions = [0, 1, 2]
  %conv = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<1x15x15x16xf32>, tensor<3x3x16x16xf32>) outs(%bias : tensor<1x13x13x16xf32>) -> tensor<1x13x13x16xf32>
  %e2 = tensor.empty() : tensor<1x13x13x16xf32>
  %relu = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%conv : tensor<1x13x13x16xf32>) outs(%e2 : tensor<1x13x13x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.maximumf %in, %zero : f32
    linalg.yield %r : f32
  } -> tensor<1x13x13x16xf32>
  return %relu : tensor<1x13x13x16xf32>
}
"""


def constant(value: ir.Value) -> str:
    owner = value.owner
    if isinstance(owner, ir.Operation) or hasattr(owner, "operation"):
        op = owner.operation if hasattr(owner, "operation") else owner
        if op.name == "arith.constant":
            return str(ir.IntegerAttr(op.attributes["value"]).value)
    return "?"


with ir.Context():
    m = ir.Module.parse(SRC)
    lower_to_vector(m, CpuPipelineOptions(target_cpu="x86-64-v3", threads=1))
    loops: list[str] = []
    contracts: set[str] = set()
    relus: set[str] = set()
    linalg_left: list[str] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "scf.for":
            loops.append(f"for {constant(op.operands[0])} to {constant(op.operands[1])} step {constant(op.operands[2])}")
        elif op.name == "vector.contract":
            contracts.add(str(op.results[0].type))
        elif op.name == "arith.maximumf":
            relus.add(str(op.results[0].type))
        elif op.name.startswith("linalg."):
            linalg_left.append(op.name)
        return ir.WalkResult.ADVANCE

    m.operation.walk(visit)
    for line in loops:
        print(line)
    print("contract:", " ".join(sorted(contracts)))
    print("relu:", " ".join(sorted(relus)))
    print("linalg left:", len(linalg_left))

# The loops, innermost first: the whole tiles' reduction loops (16 input channels, 3 kernel
# rows), their pixel loop, the last tile's reduction loops, then the output rows.
# CHECK: for 0 to 16 step 1
# CHECK-NEXT: for 0 to 3 step 1
# CHECK-NEXT: for 0 to 10 step 5
# CHECK-NEXT: for 0 to 16 step 1
# CHECK-NEXT: for 0 to 3 step 1
# CHECK-NEXT: for 0 to 13 step 1
# The FMAs (one contraction per kernel column) and the fused Relu on 5 and on 3 pixels.
# CHECK-NEXT: contract: vector<1x3x16xf32> vector<1x5x16xf32>
# CHECK-NEXT: relu: vector<1x1x3x16xf32> vector<1x1x5x16xf32>
# CHECK-NEXT: linalg left: 0
