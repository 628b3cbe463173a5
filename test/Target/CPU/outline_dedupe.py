# RUN: %PYTHON %s | filecheck %s
"""`outline_functions(dedupe=True)` on ten repeated layers (x * w_i + 1 with a different
4-element constant w_i each, then a negation): the groups are cut at the same place in every
layer, each layer's constant is passed to its part as an argument instead of being cloned into
it, and the ten equal parts merge into one function that the body calls ten times with the ten
constants. A different layer at the end keeps its own part."""

from mlir import ir

from onnxc.targets.cpu.outline import outline_functions

T = "tensor<4xf32>"
MAP = "affine_map<(i) -> (i)>"


def layer(n: int, src: str) -> str:
    return f"""
  %w{n} = arith.constant dense<[{n}.0, 1.0, 2.0, 3.0]> : {T}
  %e{n} = tensor.empty() : {T}
  %m{n} = linalg.generic {{indexing_maps = [{MAP}, {MAP}, {MAP}], iterator_types = ["parallel"]}}
      ins({src}, %w{n} : {T}, {T}) outs(%e{n} : {T}) {{
  ^bb0(%x: f32, %w: f32, %o: f32):
    %y = arith.mulf %x, %w : f32
    %z = arith.addf %y, %one : f32
    linalg.yield %z : f32
  }} -> {T}
  %f{n} = tensor.empty() : {T}
  %v{n} = linalg.generic {{indexing_maps = [{MAP}, {MAP}], iterator_types = ["parallel"]}}
      ins(%m{n} : {T}) outs(%f{n} : {T}) {{
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  }} -> {T}"""


LAST = f"""
  %g = tensor.empty() : {T}
  %out = linalg.generic {{indexing_maps = [{MAP}, {MAP}], iterator_types = ["parallel"]}}
      ins(%v9 : {T}) outs(%g : {T}) {{
  ^bb0(%x: f32, %o: f32):
    %y = math.exp %x : f32
    linalg.yield %y : f32
  }} -> {T}"""

SRC = (
    f"func.func @net(%a: {T}) -> {T} {{\n  %one = arith.constant 1.0 : f32"
    + "".join(layer(n, "%a" if n == 0 else f"%v{n - 1}") for n in range(10))
    + LAST
    + f"\n  return %out : {T}\n}}\n"
)

with ir.Context():
    module = ir.Module.parse(SRC)
    stats = outline_functions(module, max_ops=2, dedupe=True)
    assert module.operation.verify()
    print(f"parts {stats.parts} merged {stats.merged}")
    print(module)

# CHECK: parts 11 merged 9
# CHECK: func.func private @net__part0(%{{.*}}: tensor<4xf32>, %{{.*}}: tensor<4xf32>) -> tensor<4xf32> attributes {passthrough = ["noinline"]}
# CHECK-NOT: dense<
# CHECK: arith.mulf
# CHECK: arith.negf
# CHECK: return
# CHECK: func.func private @net__part10(
# CHECK: math.exp
# CHECK: func.func @net(%[[A:.*]]: tensor<4xf32>) -> tensor<4xf32> {
# CHECK-NEXT: %[[W0:.*]] = arith.constant dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00]>
# CHECK-NEXT: %[[P0:.*]] = call @net__part0(%[[A]], %[[W0]])
# CHECK-NEXT: %[[W1:.*]] = arith.constant dense<[1.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00]>
# CHECK-NEXT: call @net__part0(%[[P0]], %[[W1]])
# CHECK-COUNT-8: call @net__part0(
# CHECK-NEXT: call @net__part10(
# CHECK-NOT: func.func private @net__part1(
