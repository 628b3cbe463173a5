# RUN: %PYTHON %s | filecheck %s
"""`outline_functions` splits a long function into private parts marked noinline (`passthrough`) called in order:
five chained elementwise generics with max_ops=2 give parts of 2, 2 and 1 ops; a value crossing
a part boundary becomes a result of one part and an argument of the next; the constant and the
`tensor.empty` destinations are cloned into each part that uses them, not passed. A short function
is left alone."""

from mlir import ir

from onnxc.targets.cpu.outline import outline_functions

T = "tensor<4x8xf32>"
MAP = "affine_map<(i, j) -> (i, j)>"


def step(n: int, src: str) -> str:
    return f"""
  %e{n} = tensor.empty() : {T}
  %v{n} = linalg.generic {{indexing_maps = [{MAP}, {MAP}], iterator_types = ["parallel", "parallel"]}}
      ins({src} : {T}) outs(%e{n} : {T}) {{
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %c : f32
    linalg.yield %y : f32
  }} -> {T}"""


SRC = (
    f"func.func @chain(%a: {T}) -> {T} {{\n  %c = arith.constant 1.0 : f32"
    + "".join(step(n, "%a" if n == 0 else f"%v{n - 1}") for n in range(5))
    + f"\n  return %v4 : {T}\n}}\n"
    + f"func.func @short(%a: {T}) -> {T} {{\n  %c = arith.constant 1.0 : f32"
    + step(0, "%a")
    + f"\n  return %v0 : {T}\n}}\n"
)

with ir.Context():
    module = ir.Module.parse(SRC)
    stats = outline_functions(module, max_ops=2)
    assert module.operation.verify()
    print(f"functions {stats.functions} parts {stats.parts}")
    print(module)

# CHECK: functions 1 parts 3
# CHECK: func.func private @chain__part0(%[[A0:.*]]: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {passthrough = ["noinline"]}
# CHECK-DAG: arith.constant 1.0
# CHECK-DAG: tensor.empty()
# CHECK: linalg.generic
# CHECK: linalg.generic
# CHECK-NOT: linalg.generic
# CHECK: return
# CHECK: func.func private @chain__part1(%{{.*}}: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {passthrough = ["noinline"]}
# CHECK-COUNT-2: linalg.generic
# CHECK: func.func private @chain__part2(
# CHECK: linalg.generic
# CHECK: func.func @chain(%[[ARG:.*]]: tensor<4x8xf32>) -> tensor<4x8xf32> {
# CHECK-NEXT: %[[P0:.*]] = call @chain__part0(%[[ARG]])
# CHECK-NEXT: %[[P1:.*]] = call @chain__part1(%[[P0]])
# CHECK-NEXT: %[[P2:.*]] = call @chain__part2(%[[P1]])
# CHECK-NEXT: return %[[P2]]
# CHECK: func.func @short(
# CHECK-NOT: call
# CHECK: linalg.generic
