"""Floating-point sums and products across a vector may be reassociated.

What: ``reassociate_reductions(module)`` runs after vectorization (the vector stage) and adds the
``reassoc`` fast-math flag to every ``vector.reduction`` of kind ``add`` or ``mul`` over floats
(the horizontal step of a vectorized reduction: ReduceSum/ReduceMean, Softmax's sum,
LayerNormalization's mean and variance, pooling's averages).

Why: without the flag, LLVM must add the lanes in their order, so ``llvm.vector.reduce.fadd``
becomes one dependent scalar ``vaddss`` per element: a row of 197 floats (ViT's attention
softmax) waited 197 times the add latency, and that chain was most of the softmax's time (0.74
ms against onnxruntime's 0.25 for 6 x 197 x 197). With it, LLVM adds the vectors lane-wise and
reduces across the lanes once (a shuffle tree), as onnxruntime's kernels do. The sum is the
same up to rounding: a pairwise order is at least as accurate as the sequential one, and no
ONNX operator defines its summation order. Max/min reductions need no flag (they are exact in
any order).
"""

from __future__ import annotations

from mlir import ir

from onnxc.transforms.onnx_utils import collect_ops

__all__ = ["reassociate_reductions"]

#: The combining kinds whose float reductions are reassociated.
_KINDS: tuple[str, ...] = ("add", "mul")


def reassociate_reductions(module: ir.Module) -> int:
    """Mark float add/mul ``vector.reduction`` ops ``reassoc``; returns how many were marked."""
    with module.context:
        kinds = {ir.Attribute.parse(f"#vector.kind<{k}>") for k in _KINDS}
        reassoc = ir.Attribute.parse("#arith.fastmath<reassoc>")
        marked = 0
        for op in collect_ops(module.operation, lambda o: o.name == "vector.reduction"):
            if op.attributes["kind"] not in kinds or not isinstance(op.results[0].type, ir.FloatType):
                continue
            if "fastmath" in op.attributes and str(op.attributes["fastmath"]) != "#arith.fastmath<none>":
                continue  # flags already chosen by whoever built it
            op.attributes["fastmath"] = reassoc
            marked += 1
    return marked
