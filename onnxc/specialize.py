"""Value specialization of models whose shapes or ranks depend on the values of small inputs.

What: when a model's lowering fails because a shape or a rank is decided by the *value* of an
integer input (an ONNX function body that takes N, D, H, W from a run-time `size` input and then
squeezes without axes, an If on that value whose branches yield different ranks), the model is
compiled per call's values of those inputs instead: `value_specialized_model` returns a
`StructuredModel` that binds every small integer/bool input of a call as a constant
(`onnx_sequences.ValueLayout`), `settle` refolds the now-constant shape arithmetic to a fixed
point (so that an If whose condition became constant is inlined and the ranks after it are
known), and the result is compiled and cached per exact value tuple (a call with other values
compiles another specialization; `StructuredModel.MAX_VALUE_SPECIALIZATIONS` bounds them).

Why here and not in the lowering: a statically ranked lowering cannot represent a value whose
rank is decided at run time; with the deciding values bound the model is ordinary. The
mechanism is the one sequence models already use for trip counts and conditions
(`StructuredModel._specialize`), extended to all-tensor models; its cache key holds the bound
values' bytes, dtype and shape, so a specialization is never reused for other values.

Which failures qualify (`is_value_dependent`): a `DiagnosticsError` every problem of which says
that a dim, a length or a rank is not static (the wording the lowering's checks use for
"needs a compile-time shape"), in a model that has an input such a binding can take. An
unsupported op, a bad attribute or a type problem is not fixed by binding values, so those
models still fail at compile time, with the same diagnostics as before.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from mlir import ir

from onnxc.errors import DiagnosticsError

if TYPE_CHECKING:
    from onnxc.compiler import IOSpec, StructuredModel, _Settings

#: Inputs bound per value: integer/bool tensors of at most this many elements (a shape, a size,
#: an axis list, a condition), as `StructuredModel._bindable` decides at call time.
MAX_BOUND_ELEMENTS = 8

#: A lowering problem that a compile-time shape would remove: the checks of the lowering say
#: "dynamic dims", "static length", "dynamic ranks", "unranked" for exactly that.
_SHAPE_DEPENDENT = re.compile(r"\bdynamic\b|\bstatic\b|\bunranked\b|\branks?\b", re.IGNORECASE)

#: Rounds of shape inference, folding and canonicalization after binding (each round can make
#: the next If condition or Squeeze input constant); a fixed point is normally reached in 2-3.
SETTLE_ROUNDS = 8


def is_value_dependent(error: BaseException) -> bool:
    """Whether `error` is a lowering failure that binding input values may remove: a
    `DiagnosticsError` whose every problem is about a dim, length or rank not known statically."""
    if not isinstance(error, DiagnosticsError) or not error.problems:
        return False
    return all(_SHAPE_DEPENDENT.search(p) for p in error.problems)


def bindable_inputs(proto: onnx.ModelProto) -> list[str]:
    """The graph inputs a value specialization could bind: integer/bool tensors whose declared
    shape is static with at most `MAX_BOUND_ELEMENTS` elements (a rank-0 or short 1-D value)."""
    names = []
    for vi in proto.graph.input:
        if vi.type.WhichOneof("value") != "tensor_type":
            continue
        tt = vi.type.tensor_type
        if tt.elem_type == 0 or onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).kind not in "biu":
            continue
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            continue
        if int(np.prod([d.dim_value for d in tt.shape.dim])) <= MAX_BOUND_ELEMENTS:
            names.append(vi.name)
    return names


def value_specialized_model(
    error: BaseException,
    proto: onnx.ModelProto,
    inputs: list[IOSpec],
    outputs: list[IOSpec],
    settings: _Settings,
    source: Any,
) -> StructuredModel | None:
    """A model compiled per call's values of its small integer inputs, when `error` (the
    failure of compiling `proto` in general) is one that binding those values may remove;
    None otherwise (the caller re-raises `error`)."""
    if not is_value_dependent(error) or not bindable_inputs(proto):
        return None
    from onnxc.compiler import StructuredModel

    return StructuredModel(proto, inputs, outputs, settings, source, by_value=True)


def _fingerprint(module: ir.Operation) -> list[tuple[str, list[ir.Type]]]:
    """Every op's name and result types, in order: equal before and after a round exactly when
    the round changed nothing that a later round could act on (folds erase ops, inlining moves
    them, inference refines types)."""
    from onnxc.transforms import onnx_utils as U

    return [(op.name, [r.type for r in op.results]) for op in U.collect_ops(module)]


def settle(module: ir.Operation) -> None:
    """Refold a module whose inputs were just bound to constants, to a fixed point.

    The ONNX stage infers shapes, folds and canonicalizes once each, which suffices for a model
    whose constants are there from the start; after binding, a chain such as
    Shape -> Gather -> Equal -> If (with a branch that then fixes a Squeeze's rank) needs several
    rounds, each making the next link constant."""
    from onnxc.transforms.onnx_canonicalize import canonicalize
    from onnxc.transforms.onnx_constant_fold import OnnxConstantFoldPass
    from onnxc.transforms.onnx_shape_inference import infer_shapes
    from onnxc.transforms.pipeline import run_pipeline

    module = module.operation
    # The ONNX stage first (upgrades, schema functions expanded, sequences gone): the rounds act
    # on the ops the lowering will see. The stage runs again when compiling; it is idempotent.
    run_pipeline(module, "onnx-passes", reraise=True)
    with module.context, ir.Location.unknown():
        before = _fingerprint(module)
        for _ in range(SETTLE_ROUNDS):
            infer_shapes(module)
            OnnxConstantFoldPass().run(module)
            canonicalize(module)
            after = _fingerprint(module)
            if after == before:
                return
            before = after


__all__ = ["bindable_inputs", "is_value_dependent", "settle", "value_specialized_model"]
