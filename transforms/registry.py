"""The registry of onnxc passes and named pipelines, the one table every driver looks names up in.

Two kinds of entries:

- **passes**: pass name -> `"module:Class"`, imported only when a pipeline names the pass. Every
  onnxc pass is a `ModulePass` subclass (`onnxc.transforms.pass_base`).
- **named pipelines**: pipeline name -> `NamedPipeline` (pipeline text and a summary). A named
  pipeline is nothing but text that may name passes, upstream passes and other named pipelines;
  `onnxc.transforms.pipeline.expand` replaces the name by its text. `onnx-opt -p onnx-to-linalg`
  and `onnxc.compile` therefore run the very same passes through the same pass manager.

Adding a pass touches three files: the pass module in `transforms/`, one line here, and its lit
test. Upstream MLIR passes need no entry: any name not found here is handed to MLIR's own pass
manager.

Packages above `transforms` (the code-generation targets) add their own stage passes and
pipelines with `register_pass`/`register_pipeline` when they are imported (`onnxc.targets`
registers every target's). The registry never imports them itself: `transforms` must not depend
on `targets` (see DEVELOPERS.md, "Layers").
"""

from __future__ import annotations

import dataclasses
import importlib

from onnxc.errors import OnnxcError
from onnxc.transforms.pass_base import ModulePass


@dataclasses.dataclass(frozen=True)
class NamedPipeline:
    """A pipeline registered under a name: its text (passes, comma separated) and a summary."""

    text: str
    summary: str


#: The ONNX-level passes before conversion, in order. Ops without a direct lowering are replaced
#: by their schema function bodies (one general mechanism for every op the spec defines as a
#: function); the bodies are written at the model's opset, hence a second upgrade. Folding and
#: inlining If with a known condition unlock more inference, hence the second round. The
#: conversion to linalg lowers newest versions and static or `tensor.dim`-computed shapes, hence
#: upgrade and shape inference first.
ONNX_PASSES_PIPELINE: str = (
    "onnx-upgrade-ops,"
    "expand-schema-functions{unlowered-only=true},"
    "onnx-upgrade-ops,"
    "onnx-eliminate-sequences,"
    "onnx-canonicalize,"
    "onnx-shape-inference,"
    "onnx-expand-gradient,"
    "onnx-constant-fold,"
    "onnx-fold-conv-bn,"
    "onnx-canonicalize,"
    "onnx-shape-inference"
)

PASSES: dict[str, str] = {
    "onnx-verify": "onnxc.transforms.onnx_verify:OnnxVerifyPass",
    "onnx-bind-default-inputs": "onnxc.transforms.onnx_bind_defaults:OnnxBindDefaultInputsPass",
    "onnx-upgrade-ops": "onnxc.transforms.onnx_upgrade_ops:OnnxUpgradeOpsPass",
    "onnx-shape-inference": "onnxc.transforms.onnx_shape_inference:OnnxShapeInferencePass",
    "onnx-constant-fold": "onnxc.transforms.onnx_constant_fold:OnnxConstantFoldPass",
    "onnx-canonicalize": "onnxc.transforms.onnx_canonicalize:OnnxCanonicalizePass",
    "onnx-eliminate-sequences": "onnxc.transforms.onnx_sequences:OnnxEliminateSequencesPass",
    "convert-onnx-to-linalg": "onnxc.transforms.convert_onnx_to_linalg:ConvertOnnxToLinalgPass",
    "inline-functions": "onnxc.transforms.inline_functions:InlineFunctionsPass",
    "expand-schema-functions": "onnxc.transforms.expand_schema_functions:ExpandSchemaFunctionsPass",
    "onnx-validate-attributes": "onnxc.transforms.onnx_validate_attributes:OnnxValidateAttributesPass",
    "onnx-fold-conv-bn": "onnxc.transforms.onnx_fold_conv_bn:OnnxFoldConvBnPass",
    "onnx-expand-gradient": "onnxc.transforms.onnx_gradient:OnnxExpandGradientPass",
    "onnx-partition": "onnxc.transforms.onnx_partition:OnnxPartitionPass",
    "layout-propagation": "onnxc.transforms.layout_propagation:LayoutPropagationPass",
    "onnxc-approximate-math": "onnxc.transforms.math_approximation:ApproximateMathPass",
    "onnx-to-shard": "onnxc.transforms.onnx_to_shard:OnnxToShardPass",
}

PIPELINES: dict[str, NamedPipeline] = {
    "onnx-passes": NamedPipeline(
        ONNX_PASSES_PIPELINE,
        "Upgrade ops, expand schema functions, eliminate sequences, infer shapes, fold constants.",
    ),
    "onnx-to-linalg": NamedPipeline(
        "onnx-passes,onnx-validate-attributes,convert-onnx-to-linalg,layout-propagation,canonicalize,cse",
        "onnx-passes, then convert ONNX to linalg/tensor/arith/math/scf.",
    ),
}


def register_pass(name: str, target: str) -> None:
    """Register the pass class `target` ("module:Class") under `name` (a hook for targets)."""
    if name in PIPELINES or PASSES.get(name, target) != target:
        raise OnnxcError(f"pass name '{name}' is registered twice")
    PASSES[name] = target


def register_pipeline(name: str, text: str, summary: str) -> None:
    """Register a named pipeline (a hook for targets): `name` stands for the pipeline `text`."""
    if name in PASSES or PIPELINES.get(name, NamedPipeline(text, summary)).text != text:
        raise OnnxcError(f"pipeline name '{name}' is registered twice")
    PIPELINES[name] = NamedPipeline(text, summary)


def is_registered(name: str) -> bool:
    """Whether `name` is an onnxc pass or named pipeline (else it is left to MLIR)."""
    return name in PASSES or name in PIPELINES


def pass_names() -> list[str]:
    """Every registered onnxc pass and named pipeline name, sorted."""
    return sorted(set(PASSES) | set(PIPELINES))


def get_pass_class(name: str) -> type[ModulePass] | None:
    """The pass class registered under `name`, or None (also for a named pipeline)."""
    target = PASSES.get(name)
    if target is None:
        return None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def get_pipeline(name: str) -> NamedPipeline | None:
    """The named pipeline registered under `name`, or None."""
    return PIPELINES.get(name)
