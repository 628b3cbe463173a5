# RUN: %PYTHON %s | filecheck %s
"""A data-tiled product's unpack fused with its elementwise consumer, and the product itself
fused into the same tiles (targets/cpu/epilogue.py: ``align_unpack_epilogues``, the unpack plan
of ``plan_epilogues``, ``forward_masked_tiles``).

The input is what a grouped 1x1 convolution lowers to: a batch_matmul over the groups
([groups, pixels, channels] x [groups, channels, channels]), a transpose back to
[pixels, groups, channels] (data tiling unpacks straight into it), reshapes to NHWC and a Relu.
68 output channels per group in tiles of 16 or 32 leave a partial tile in the channels, which
the fused nest handles with masks.

After the vector stage the product's FMAs, the unpack and the Relu are one loop nest (one
thread) or one ``scf.forall`` (two threads; each thread a whole number of packed tiles): only
the packs of the operands come before it, no masked read of a temporary is left, and no
``linalg.unpack``."""

from mlir import ir

from onnxc.targets.cpu import CpuPipelineOptions, lower_to_vector

SRC = """
#id = affine_map<(n, h, w, c) -> (n, h, w, c)>
func.func @gconv(%x: tensor<4x784x68xf32>, %w: tensor<4x68x68xf32>) -> tensor<1x28x28x272xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x784x68xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x784x68xf32>) -> tensor<4x784x68xf32>
  %mm = linalg.batch_matmul ins(%x, %w : tensor<4x784x68xf32>, tensor<4x68x68xf32>)
      outs(%z : tensor<4x784x68xf32>) -> tensor<4x784x68xf32>
  %et = tensor.empty() : tensor<784x4x68xf32>
  %t = linalg.transpose ins(%mm : tensor<4x784x68xf32>) outs(%et : tensor<784x4x68xf32>) permutation = [1, 0, 2]
  %x5 = tensor.expand_shape %t [[0, 1, 2], [3], [4]] output_shape [1, 28, 28, 4, 68]
      : tensor<784x4x68xf32> into tensor<1x28x28x4x68xf32>
  %nhwc = tensor.collapse_shape %x5 [[0], [1], [2], [3, 4]] : tensor<1x28x28x4x68xf32> into tensor<1x28x28x272xf32>
  %er = tensor.empty() : tensor<1x28x28x272xf32>
  %relu = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%nhwc : tensor<1x28x28x272xf32>) outs(%er : tensor<1x28x28x272xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.maximumf %in, %zero : f32
    linalg.yield %r : f32
  } -> tensor<1x28x28x272xf32>
  return %relu : tensor<1x28x28x272xf32>
}
"""

KINDS = ("vector.contract", "arith.maximumf", "linalg.unpack")


def summary(module: ir.Module) -> None:
    """One line per top-level loop nest of @gconv and the kinds of work inside it, then how many
    masked reads of a tensor that a transfer_write produced are left."""
    fn = module.body.operations[0]
    contract_nests = 0
    for op in fn.regions[0].blocks[0].operations:
        op = op.operation
        if op.name not in ("scf.for", "scf.forall", "linalg.unpack"):
            continue
        inside: set[str] = set()

        def visit(inner: ir.Operation) -> ir.WalkResult:
            if inner.name in KINDS:
                inside.add(inner.name)
            return ir.WalkResult.ADVANCE

        op.walk(visit)
        print("nest:", op.name, " ".join(k for k in KINDS if k in inside))
        contract_nests += "vector.contract" in inside
    print("nests with a vector.contract:", contract_nests)
    reread: list[ir.Operation] = []

    def reads(inner: ir.Operation) -> ir.WalkResult:
        src = inner.operands[0] if inner.name == "vector.transfer_read" else None
        if src is not None and isinstance(src.owner, ir.OpView) and src.owner.operation.name == "vector.transfer_write":
            reread.append(inner)
        return ir.WalkResult.ADVANCE

    fn.walk(reads)
    print("reads of a written tile:", len(reread))


for threads in (1, 2):
    with ir.Context():
        m = ir.Module.parse(SRC)
        # An AVX-512 target CPU, so the plan does not depend on the machine.
        lower_to_vector(m, CpuPipelineOptions(target_cpu="x86-64-v4", threads=threads))
        print("threads", threads)
        summary(m)

# The packs of %x and %w, then the product, the unpack and the Relu in one nest.
# CHECK-LABEL: threads 1
# CHECK: nest: scf.for vector.contract arith.maximumf
# CHECK-NEXT: nests with a vector.contract: 1
# CHECK-NEXT: reads of a written tile: 0
# Two threads: the same nest in a forall (the shape is large enough).
# CHECK-LABEL: threads 2
# CHECK: nest: scf.forall vector.contract arith.maximumf
# CHECK-NEXT: nests with a vector.contract: 1
# CHECK-NEXT: reads of a written tile: 0
# CHECK-NOT: linalg.unpack
