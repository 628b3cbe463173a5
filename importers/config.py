"""Options of the ONNX importer, each with the reason it exists.

One frozen dataclass so that a configuration can be hashed, printed and passed through tools
unchanged; `ImportConfig()` is what `onnx-opt model.onnx` uses.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ImportConfig:
    """How `onnxc.importers.import_model` treats a model."""

    # An opset (or IR version) newer than the installed onnx schemas cannot be bound per the
    # versioning spec; by default that is an error, never a silent guess. With this flag the importer
    # warns and binds to the newest known schema instead (for users who know their model only uses
    # ops unchanged since).
    allow_newer_opset: bool = False
    # Run onnx.shape_inference.infer_shapes (with data propagation) to give value types more static
    # shape information. Never relied on: on failure the importer uses what the model declares.
    run_shape_inference: bool = True
    # onnx's shape inference serialises the model it is given (protobuf's 2 GB limit): the model
    # without its large initializers' data (`_without_weight_data`); above this many bytes it is
    # skipped.
    shape_inference_size_limit: int = 1 << 30
    # Tensors with more bytes than this become `dense_resource` blobs (no copy into the IR's uniqued
    # attribute storage, no printing of megabytes of hex); smaller ones are plain dense attributes
    # that later folding passes can read directly.
    resource_threshold: int = 1024
    # training_info (IR 7) carries training algorithms onnxc does not run; keep it as an opaque
    # module attribute so that export writes it back unchanged. Off drops it (smaller IR).
    keep_training_info: bool = True
    # Inline model-local functions during import instead of emitting private func.func + call.
    # Off by default so the structure of the model is visible; the `inline-functions` pass does the
    # same later.
    inline_functions: bool = False
    # Validate the model (names, single assignment, schema arity/attributes) before building IR and
    # report all problems together. Only turn off for models already known valid (speed).
    validate: bool = True
    # Run the ONNX dialect's verifiers (IRDL's in C++ and the Python schema verifier) on the
    # imported module, so IR that breaks the dialect's rules is reported at import, naming the
    # node, rather than later in some pass. Off only to save time on very large models.
    verify: bool = True
    # Raise on the Python verifier's findings (ONNX type constraints, attribute kinds). On by
    # default: the lowering builds IR from the types it is given, so `Add(int8, double)` that only
    # warned here became a raw MLIR error (or worse) later (issue 11). `ImportConfig.lenient()` (or
    # `strict_verify=False`) keeps the old behaviour, warning, for models that rely on onnxruntime's
    # leniency (uint8 Pow, Relu-6 on int32): they may still fail later, with a less clear message.
    strict_verify: bool = True
    # Raise on custom-domain ops (no schema) instead of importing them as `onnx.custom`. Off by
    # default: custom ops are kept and listed in one warning summary.
    strict_custom_ops: bool = False
    # Emit a warning listing custom ops (once per import); tests and tools that expect custom ops may
    # silence it.
    warn_custom_ops: bool = True

    @classmethod
    def lenient(cls, **changes: object) -> "ImportConfig":
        """A configuration that warns about (instead of refusing) type-constraint violations."""
        return cls(**{"strict_verify": False, **changes})  # type: ignore[arg-type]
