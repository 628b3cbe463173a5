"""Partial tiles peeled off their loops, so the full tiles' vector transfers carry no mask.

What: ``peel_masked_tiles(module, cpu)``, for a CPU without native masked memory operations
(``CpuFeatures.masked_memory``: AVX2, NEON), finds each ``scf.for`` tile loop of a static
extent whose step does not divide its trip (34 channels in tiles of 8; or whose end is a
thread's share of an ``scf.forall``: an ``affine.min`` of constants and induction variables)
and whose tile size, ``affine.min(step, ub - iv)``, is a ``vector.create_mask`` operand: the vectorizer (with explicit vector sizes) masked every
tile's transfers because the last one is partial. ``transform.loop.peel`` splits such a loop
into a main loop of whole tiles, where the ``affine.min`` folds to the step and the masks to
all-true (canonicalization then drops them), and one last partial iteration that keeps its
(now constant) masks. Returns how many loops it peeled.

Why: AVX2 has no mask registers; a masked transfer becomes ``vmaskmovps``, whose store form is
slow on AMD Zen (microcoded, a throughput of one per several cycles where a plain store issues
every cycle). AVX-512's masked stores are native (mask registers), and its code is left as it
was: this was not measured there. `perf` of ShuffleNet compiled for the host
(AVX2 Zen 3, 1 thread) put 18% of its samples on masked stores and 5% on masked loads: packing
and unpacking of the grouped 1x1 convolutions' data-tiled products, whose 34 or 68 channels per
group are not a multiple of 8. One-process A/B on that machine, 1 thread: ShuffleNet 14.4 ->
11.2 ms, its grouped 1x1 convolution 136->136 at 28x28 with Relu 0.40 -> 0.30 ms; SqueezeNet,
MobileNetV2, Inception-v2, ResNet-50, BERT (2 layers): within noise (their tiles divide their
loops: nothing, or only a fill, is peeled). Loops whose end depends on a dynamic dim are left
alone (dynamic shapes are compile-time bound, outline.py), and so are loops of step 1 over
packed tiles whose last tile is partial (the A pack of a product with M not a multiple of m0).
"""

from __future__ import annotations

from mlir import ir

from onnxc.transforms.onnx_utils import collect_ops

from .isa import CpuFeatures

__all__ = ["peel_masked_tiles", "PEEL_MASKED_TILES"]

#: Peel the partial tile of masked tile loops (a module flag for one-process A/Bs).
PEEL_MASKED_TILES: bool = True

_TAG = "onnxc.peel_id"

_SCRIPT = """module attributes {transform.with_named_sequence} {
transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
  %loops = transform.structured.match attributes{%TAG} in %root : (!transform.any_op) -> !transform.any_op
  transform.foreach %loops : !transform.any_op {
  ^bb0(%l: !transform.any_op):
    transform.sequence %l : !transform.any_op failures(suppress) {
    ^bb1(%loop: !transform.any_op):
      %for = transform.cast %loop : !transform.any_op to !transform.op<"scf.for">
      %main, %rest = transform.loop.peel %for : (!transform.op<"scf.for">) -> (!transform.any_op, !transform.any_op)
      transform.yield
    }
  }
  transform.yield
}
}"""


def _constant_index(value: ir.Value) -> int | None:
    owner = value.owner
    if not isinstance(owner, ir.Operation):
        owner = getattr(owner, "operation", None)
    if owner is None or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    return int(ir.IntegerAttr(attr).value) if isinstance(attr, ir.IntegerAttr) else None


def _static_share(value: ir.Value, top: bool = True) -> bool:
    """Whether `value` is an ``affine.min`` (at the top; below it ``affine.apply``/``affine.min``
    too) of constants and loop induction variables only: a thread's or an outer tile's share of
    a static extent, not a dynamic dim."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        return not top and parent is not None and parent.name in ("scf.forall", "scf.for")
    if not top and _constant_index(value) is not None:
        return True
    if owner.name not in (("affine.min",) if top else ("affine.min", "affine.apply")):
        return False
    return all(_static_share(operand, False) for operand in owner.operands)


def _masks_partial_tile(loop: ir.Operation) -> bool:
    """Whether `loop` is a tile loop with a partial last tile whose size (an ``affine.min`` of
    its induction variable) sizes a ``vector.create_mask``: constant start and step, and a
    constant end the step does not divide, or an end computed by ``affine.min`` (the share of
    an ``scf.forall``'s thread, or of an outer tile, in a static shape)."""
    lb, ub, step = (_constant_index(loop.operands[i]) for i in range(3))
    if lb is None or step is None or step <= 0:
        return False
    if ub is None:
        if not _static_share(loop.operands[1]):
            return False
    elif ub - lb <= step or (ub - lb) % step == 0:
        return False
    iv = loop.regions[0].blocks[0].arguments[0]
    for use in iv.uses:
        user = use.owner.operation
        if user.name != "affine.min":
            continue
        for size_use in user.results[0].uses:
            if size_use.owner.operation.name == "vector.create_mask":
                return True
    return False


def peel_masked_tiles(module: ir.Module, cpu: CpuFeatures) -> int:
    """Peel the partial last tile of each masked tile loop (see the module docstring)."""
    if not PEEL_MASKED_TILES or cpu.masked_memory:
        return 0
    from .pipeline import _apply_transform_script

    loops = [op for op in collect_ops(module.operation, lambda o: o.name == "scf.for") if _masks_partial_tile(op)]
    if not loops:
        return 0
    unit = ir.UnitAttr.get(module.context)
    for loop in loops:
        loop.attributes[_TAG] = unit
    _apply_transform_script(module, _SCRIPT.replace("%TAG", _TAG), "tile peeling", _TAG)
    return len(loops)
