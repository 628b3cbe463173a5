# RUN: %PYTHON %s | filecheck %s
"""Row fusion (targets/cpu/row_fusion.py): attention's scaled Softmax, lowered to a scale, a
max reduction, exp(x - max), a sum reduction, its reciprocal and the scaling, becomes one loop
over the rows with all six inside; each row's sums are reassociated (reassociate_reductions.py).

Before the pass each op was a loop nest of its own over the whole tensor."""

import numpy as np
from mlir import ir
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh

from onnxc.compiler import lower
from onnxc.targets.cpu.pipeline import CpuPipelineOptions

SHAPE = [1, 4, 16, 40]
model = helper.make_model(
    helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["s"]), helper.make_node("Softmax", ["s"], ["y"], axis=-1)],
        "attention_softmax",
        [helper.make_tensor_value_info("x", TP.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TP.FLOAT, SHAPE)],
        [nh.from_array(np.array(0.125, np.float32), "scale")],
    ),
    opset_imports=[helper.make_opsetid("", 18)],
)

KINDS = ("vector.reduction", "math.roundeven", "arith.divf", "arith.mulf")


def summary(module: ir.Module) -> None:
    """One line per top-level op of the function: its name and, for a loop nest, the kinds of
    work inside it (and the loops' trip counts, outermost first)."""
    fn = next(op.operation for op in module.body.operations if op.operation.name == "func.func")
    for op in fn.regions[0].blocks[0].operations:
        op = op.operation
        if op.name in ("arith.constant", "func.return", "ub.poison", "tensor.empty", "vector.constant_mask",
                       "vector.extract", "tensor.expand_shape"):
            continue
        inside: set[str] = set()
        flags: set[str] = set()

        def visit(inner: ir.Operation) -> ir.WalkResult:
            if inner.name in KINDS:
                inside.add(inner.name)
            if inner.name == "vector.reduction":
                flags.add(str(inner.attributes["kind"]) + " " + str(inner.attributes["fastmath"]))
            return ir.WalkResult.ADVANCE

        op.walk(visit)
        print("top:", op.name, " ".join(k for k in KINDS if k in inside))
        for f in sorted(flags):
            print("  reduction:", f)


with ir.Context():
    # An AVX-512 target CPU and one thread, so the plan does not depend on the machine.
    module = lower(model, "vector", options=CpuPipelineOptions(target_cpu="x86-64-v4", threads=1))
    summary(module)
    # One nest: the max and the sum (reassociated), exp's range reduction (roundeven), the
    # reciprocal of the sum and the scalings.
    # CHECK: top: scf.for vector.reduction math.roundeven arith.divf arith.mulf
    # CHECK-NEXT: reduction: #vector.kind<add> #arith.fastmath<reassoc>
    # CHECK-NEXT: reduction: #vector.kind<maximumf> #arith.fastmath<none>
    # CHECK-NOT: top: scf.for
