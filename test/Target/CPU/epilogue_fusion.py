# RUN: %PYTHON %s | filecheck %s
"""Epilogue fusion and in-place padding (targets/cpu/epilogue.py, pad_in_place.py): a 1x1
convolution with its bias as the accumulator's initializer, a Clip reading it (with the unit
batch dim read as index 0, the way the elementwise lowering writes it), the Clip's result
inserted into a zero-padded buffer, and a depthwise convolution with a Relu on that.

After the vector stage each convolution and its consumer are one loop nest (the convolution's
FMAs and the Clip/Relu in the same tile) and the bias broadcast is in it too; the padding
buffer's border is filled before the first nest (the interior is the Clip's to write), so after
bufferization the Clip writes into its interior and no copy is left."""

from mlir import ir

from onnxc.targets.cpu import CpuPipelineOptions, bufferize, lower_to_vector

SRC = """
#id = affine_map<(n, h, w, c) -> (n, h, w, c)>
#b0 = affine_map<(n, h, w, c) -> (0, h, w, c)>
func.func @block(%x: tensor<1x8x8x16xf32>, %w: tensor<1x1x16x32xf32>, %b: tensor<32xf32>,
                 %dw: tensor<3x3x32xf32>) -> tensor<1x8x8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %six = arith.constant 6.0 : f32
  %e = tensor.empty() : tensor<1x8x8x32xf32>
  %bias = linalg.broadcast ins(%b : tensor<32xf32>) outs(%e : tensor<1x8x8x32xf32>) dimensions = [0, 1, 2]
  %conv = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<1x8x8x16xf32>, tensor<1x1x16x32xf32>) outs(%bias : tensor<1x8x8x32xf32>) -> tensor<1x8x8x32xf32>
  %e2 = tensor.empty() : tensor<1x8x8x32xf32>
  %clip = linalg.generic {indexing_maps = [#b0, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%conv : tensor<1x8x8x32xf32>) outs(%e2 : tensor<1x8x8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %lo = arith.maximumf %in, %zero : f32
    %hi = arith.minimumf %lo, %six : f32
    linalg.yield %hi : f32
  } -> tensor<1x8x8x32xf32>
  %pe = tensor.empty() : tensor<1x10x10x32xf32>
  %pf = linalg.fill ins(%zero : f32) outs(%pe : tensor<1x10x10x32xf32>) -> tensor<1x10x10x32xf32>
  %padded = tensor.insert_slice %clip into %pf[0, 1, 1, 0] [1, 8, 8, 32] [1, 1, 1, 1]
      : tensor<1x8x8x32xf32> into tensor<1x10x10x32xf32>
  %e3 = tensor.empty() : tensor<1x8x8x32xf32>
  %z3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x8x8x32xf32>) -> tensor<1x8x8x32xf32>
  %d = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%padded, %dw : tensor<1x10x10x32xf32>, tensor<3x3x32xf32>) outs(%z3 : tensor<1x8x8x32xf32>) -> tensor<1x8x8x32xf32>
  %e4 = tensor.empty() : tensor<1x8x8x32xf32>
  %relu = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%d : tensor<1x8x8x32xf32>) outs(%e4 : tensor<1x8x8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.maximumf %in, %zero : f32
    linalg.yield %r : f32
  } -> tensor<1x8x8x32xf32>
  return %relu : tensor<1x8x8x32xf32>
}
"""

KINDS = ("vector.contract", "vector.fma", "arith.maximumf", "arith.minimumf", "vector.broadcast")


def summary(module: ir.Module) -> None:
    """One line per top-level op of @block: its name, and for a loop nest the kinds of work inside."""
    fn = module.body.operations[0]
    for op in fn.regions[0].blocks[0].operations:
        op = op.operation
        if op.name in ("arith.constant", "func.return"):
            continue
        inside: set[str] = set()

        def visit(inner: ir.Operation) -> ir.WalkResult:
            if inner.name in KINDS:
                inside.add(inner.name)
            return ir.WalkResult.ADVANCE

        op.walk(visit)
        print("top:", op.name, " ".join(k for k in KINDS if k in inside))


with ir.Context():
    m = ir.Module.parse(SRC)
    # An AVX-512 target CPU and one thread, so the plan does not depend on the machine.
    lower_to_vector(m, CpuPipelineOptions(target_cpu="x86-64-v4", threads=1))
    summary(m)
    # The padding buffer first (ahead of the data it pads) with its border filled, one slab
    # per padded side (its own empty, fill nest and insert), then the 1x1 convolution and
    # the Clip in one nest (the bias broadcast fused too: its read is loop-invariant and hoisted
    # out of the nest), the insert that the Clip will write in place, then the depthwise
    # convolution with its zero initializer and the Relu in one nest.
    # CHECK: top: tensor.empty
    # CHECK: top: scf.for{{ *$}}
    # CHECK-NEXT: top: tensor.insert_slice
    # CHECK-NEXT: top: tensor.empty
    # CHECK-NEXT: top: scf.for{{ *$}}
    # CHECK-NEXT: top: tensor.insert_slice
    # CHECK-NEXT: top: tensor.empty
    # CHECK-NEXT: top: scf.for{{ *$}}
    # CHECK-NEXT: top: tensor.insert_slice
    # CHECK-NEXT: top: tensor.empty
    # CHECK-NEXT: top: scf.for{{ *$}}
    # CHECK-NEXT: top: tensor.insert_slice
    # CHECK-NEXT: top: vector.transfer_read
    # CHECK-NEXT: top: scf.for vector.contract arith.maximumf arith.minimumf
    # CHECK-NEXT: top: tensor.insert_slice
    # CHECK-NEXT: top: scf.for vector.fma arith.maximumf
    # CHECK-NOT: top: scf.for
    # CHECK-NOT: linalg.
    bufferize(m)
    print(m)
    # The Clip's nest writes into the padded buffer: no copy of the data is left.
    # CHECK-LABEL: func.func @block
    # CHECK-NOT: memref.copy
    # CHECK: return
