"""The registry of onnxc passes: pass name -> "module:Class", imported only when used.

Adding a pass touches three files: the pass module in `transforms/`, one line here, and its lit
test. Upstream MLIR passes need no entry: any name not found here is handed to MLIR's own pass
manager.
"""

from __future__ import annotations

import importlib

from onnxc.transforms.pass_base import ModulePass

PASSES: dict[str, str] = {
    "onnx-verify": "onnxc.transforms.onnx_verify:OnnxVerifyPass",
    "onnx-upgrade-ops": "onnxc.transforms.onnx_upgrade_ops:OnnxUpgradeOpsPass",
    "onnx-shape-inference": "onnxc.transforms.onnx_shape_inference:OnnxShapeInferencePass",
    "onnx-constant-fold": "onnxc.transforms.onnx_constant_fold:OnnxConstantFoldPass",
    "onnx-canonicalize": "onnxc.transforms.onnx_canonicalize:OnnxCanonicalizePass",
    "onnx-eliminate-sequences": "onnxc.transforms.onnx_sequences:OnnxEliminateSequencesPass",
    "convert-onnx-to-linalg": "onnxc.transforms.convert_onnx_to_linalg:ConvertOnnxToLinalgPass",
    "onnx-to-linalg": "onnxc.transforms.named_pipelines:OnnxToLinalgPipeline",
    "onnx-to-vector": "onnxc.transforms.named_pipelines:OnnxToVectorPipeline",
    "onnx-to-llvm": "onnxc.transforms.named_pipelines:OnnxToLLVMPipeline",
    "cpu-to-vector": "onnxc.transforms.named_pipelines:CpuToVector",
    "cpu-bufferize": "onnxc.transforms.named_pipelines:CpuBufferize",
    "cpu-to-llvm": "onnxc.transforms.named_pipelines:CpuToLLVM",
    "inline-functions": "onnxc.transforms.inline_functions:InlineFunctionsPass",
    "expand-schema-functions": "onnxc.transforms.expand_schema_functions:ExpandSchemaFunctionsPass",
    "onnx-validate-attributes": "onnxc.transforms.onnx_validate_attributes:OnnxValidateAttributesPass",
    "onnxc-approximate-math": "onnxc.transforms.math_approximation:ApproximateMathPass",
}


def pass_names() -> list[str]:
    """Every registered onnxc pass name, sorted."""
    return sorted(PASSES)


def get_pass_class(name: str) -> type[ModulePass] | None:
    """The pass class registered under `name`, or None."""
    target = PASSES.get(name)
    if target is None:
        return None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)
