"""Partial tiles peeled off their loops: convolutions' pixel tiles, so that both parts vectorize,
and masked tiles, so that the full tiles' vector transfers carry no mask.

Convolutions (``peel_conv_tiles(module)``, every ISA): `conv_plan.plan_conv` may tile the
output width by a size that does not divide it; the last tile is then dynamic and the
vectorizer (without vector sizes, the only way upstream vectorizes a convolution) leaves it,
and the whole loop nest, scalar. This pass peels such pixel loops and vectorizes both parts at
their static sizes (see `peel_conv_tiles`). ``peel_masked_tiles`` runs it first.

Masked tiles: ``peel_masked_tiles(module, cpu)``, for a CPU without native masked memory operations
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

__all__ = ["peel_masked_tiles", "peel_conv_tiles", "PEEL_MASKED_TILES", "CONV_1D_OPS"]

#: Peel the partial tile of masked tile loops (a module flag for one-process A/Bs).
PEEL_MASKED_TILES: bool = True

#: The 1-D forms `transform.structured.decompose` gives the channels-last convolutions and
#: poolings of ``conv_plan.CONV_OPS`` (the forms upstream vectorizes).
CONV_1D_OPS: tuple[str, ...] = (
    "linalg.conv_1d_nwc_wcf",
    "linalg.depthwise_conv_1d_nwc_wc",
    "linalg.pooling_nwc_max",
    "linalg.pooling_nwc_sum",
)

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


_CONV_TAG = "onnxc.conv_peel_id"
_CONV_OP_TAG = "onnxc.conv_peel_op"

# Each tagged pixel loop is peeled into its whole tiles and its last, partial tile; in both the
# tile sizes are constants now (`transform.loop.peel` folds the `affine.min`s), which
# canonicalization (of the loop's parent, as a one-iteration remainder may be inlined) turns
# into static slice types. Then every tagged linalg op (those the loops held: the 1-D
# convolution, its fused initializer and epilogue, and their clones in the last tile) is
# vectorized without vector sizes, each in its own `failures(suppress)` sequence (an op the
# vectorizer refuses stays scalar). The ops are tagged rather than matched in the loops: the
# clones and the ops canonicalization rebuilds keep their attributes.
_CONV_SCRIPT = """module attributes {transform.with_named_sequence} {
transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
  %loops = transform.structured.match attributes{%TAG} in %root : (!transform.any_op) -> !transform.any_op
  transform.foreach %loops : !transform.any_op {
  ^bb0(%l: !transform.any_op):
    transform.sequence %l : !transform.any_op failures(suppress) {
    ^bb1(%loop: !transform.any_op):
      %for = transform.cast %loop : !transform.any_op to !transform.op<"scf.for">
      %parent = transform.get_parent_op %for : (!transform.op<"scf.for">) -> !transform.any_op
      %main, %rest = transform.loop.peel %for : (!transform.op<"scf.for">) -> (!transform.any_op, !transform.any_op)
      transform.apply_patterns to %parent {
        transform.apply_patterns.canonicalization
      } : !transform.any_op
      transform.yield
    }
  }
  %ops = transform.structured.match attributes{%OPTAG} in %root : (!transform.any_op) -> !transform.any_op
  transform.foreach %ops : !transform.any_op {
  ^bb2(%op: !transform.any_op):
    transform.sequence %op : !transform.any_op failures(suppress) {
    ^bb3(%o: !transform.any_op):
      transform.structured.vectorize %o : !transform.any_op
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
    """Peel the partial last tile of each masked tile loop (see the module docstring), after the
    partial pixel tiles of convolutions (`peel_conv_tiles`, every ISA)."""
    peel_conv_tiles(module)
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


def _partial_pixel_loop(loop: ir.Operation) -> bool:
    """Whether `loop` is a tile loop of constant bounds whose step does not divide its trip and
    whose body holds a 1-D convolution or pooling (``CONV_1D_OPS``) the vectorizer left scalar
    (its tile, ``affine.min(step, ub - iv)`` pixels, is dynamic)."""
    lb, ub, step = (_constant_index(loop.operands[i]) for i in range(3))
    if lb is None or ub is None or step is None or step <= 0 or ub - lb <= step or (ub - lb) % step == 0:
        return False
    iv = loop.regions[0].blocks[0].arguments[0]
    if not any(use.owner.operation.name == "affine.min" for use in iv.uses):
        return False
    return bool(collect_ops(loop, lambda o: o.name in CONV_1D_OPS))


def peel_conv_tiles(module: ir.Module) -> int:
    """Peel the last, partial pixel tile off each convolution's tile loop and vectorize both
    parts; returns how many loops it peeled.

    What: `conv_plan.plan_conv` may tile the output width by a size that does not divide it (13
    pixels in tiles of 4: three whole tiles and one of 1 pixel). The plan's own sequence tiles,
    decomposes to 1-D, and fails to vectorize the 1-D convolution of dynamic width; its fused
    initializer and epilogue stay scalar with it. ``transform.loop.peel`` then splits the pixel
    loop (`_partial_pixel_loop`) into the loop of whole tiles and the last tile, both of static
    sizes, and the ops left inside are vectorized as the plan would have done.

    Why: with only divisors allowed, widths with few small divisors (SqueezeNet's 13, AlexNet's
    27 and 55) got a tile that spilled (13 pixels x 1 vector, with its broadcasts, on AVX2's 16
    registers) or one of too few accumulators to keep the FMA pipes busy. The measured numbers
    are in `conv_plan`'s docstring. Runs on every ISA (no masks are involved)."""
    from .pipeline import _apply_transform_script, _strip_tags

    loops = [op for op in collect_ops(module.operation, lambda o: o.name == "scf.for") if _partial_pixel_loop(op)]
    if not loops:
        return 0
    unit = ir.UnitAttr.get(module.context)
    for loop in loops:
        loop.attributes[_CONV_TAG] = unit
        for op in collect_ops(loop, lambda o: o.name.startswith("linalg.") and o.name not in ("linalg.yield", "linalg.index")):
            op.attributes[_CONV_OP_TAG] = unit
    script = _CONV_SCRIPT.replace("%TAG", _CONV_TAG).replace("%OPTAG", _CONV_OP_TAG)
    try:
        _apply_transform_script(module, script, "convolution tile peeling", _CONV_TAG)
    finally:
        _strip_tags(module, _CONV_OP_TAG)
    return len(loops)
