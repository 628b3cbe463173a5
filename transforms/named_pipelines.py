"""The target-independent stages of onnxc, by name, run through the one pass-manager driver.

A stage is a named pipeline of the registry (`onnxc.transforms.registry.PIPELINES`): `onnx`
runs `onnx-passes` (the ONNX-level passes), `linalg` runs `onnx-to-linalg` (those, then the
conversion to linalg/tensor/arith/math/scf). `onnx-opt -p onnx-to-linalg` and `onnxc.compile`
run the same text through `onnxc.transforms.pipeline`, so the tool and the API cannot drift
apart. Stages after linalg belong to a code-generation target (`onnxc.targets.get_target`).
"""

from __future__ import annotations

from typing import Any

from mlir import ir

from onnxc.transforms import registry
from onnxc.transforms.pipeline import Instrumentation, parse_options, parse_pipeline, run_pipeline

#: Target-independent stage -> the named pipeline that reaches it from an imported module.
STAGE_PIPELINES: dict[str, str] = {"onnx": "onnx-passes", "linalg": "onnx-to-linalg"}

#: The stages in order (a target's own stages follow `linalg`).
STAGES: tuple[str, ...] = tuple(STAGE_PIPELINES)

#: The ONNX-level passes as (name, options) pairs, read from the `onnx-passes` pipeline text (the
#: one definition); for callers that inspect the order.
ONNX_LEVEL_PASSES: tuple[tuple[str, dict[str, str]], ...] = tuple(
    (e.name, parse_options(e.options)) for e in parse_pipeline(registry.ONNX_PASSES_PIPELINE)
)


def lower_onnx_module(
    module: ir.Module | ir.Operation | ir.OpView,
    stage: str = "linalg",
    *,
    instrumentation: Instrumentation | None = None,
) -> None:
    """Run the stage pipeline of `stage` ('onnx' or 'linalg') on an imported module, in place.

    A pass's own `OnnxcError` (a `DiagnosticsError` listing every op the conversion lacks, a
    `PassFailure`...) reaches the caller with its type; see `onnxc.transforms.pipeline.Pipeline.run`.
    """
    if stage not in STAGE_PIPELINES:
        raise ValueError(f"unknown stage '{stage}' (target-independent stages: {', '.join(STAGES)})")
    run_pipeline(module, STAGE_PIPELINES[stage], instrumentation=instrumentation, reraise=True)


def run_onnx_passes(module: Any) -> None:
    """Run the ONNX-level passes (`onnx-passes`) on `module`, in place."""
    lower_onnx_module(module, "onnx")
