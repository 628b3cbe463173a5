"""Names: ONNX op types and domains to MLIR dialect op names, and back.

IRDL in LLVM 22 accepts only lower-case letters, digits and single inner underscores in
operation and operand names, so ONNX's CamelCase op types become snake_case. The rule splits a
word where a lower-case letter or digit meets an upper-case one (`MatMul` -> `mat_mul`) and
before the last capital of a run of capitals followed by lower case (`QLinearConv` ->
`qlinear_conv`, `SVMClassifier` -> `svm_classifier`), so acronyms stay whole (`LSTM` -> `lstm`).
A handful of names read badly under any rule (`IsNaN`, `Col2Im`) and are listed as overrides.
The mapping must be one-to-one: a test checks it over every schema of the installed onnx.
"""

from __future__ import annotations

import re

# ONNX domain -> MLIR dialect namespace. The default domain has two spellings in ONNX.
DOMAIN_TO_DIALECT: dict[str, str] = {
    "": "onnx",
    "ai.onnx": "onnx",
    "ai.onnx.ml": "onnx_ml",
    "ai.onnx.preview.training": "onnx_training",
    "ai.onnx.preview": "onnx_preview",
}
DIALECT_TO_DOMAIN: dict[str, str] = {
    "onnx": "",
    "onnx_ml": "ai.onnx.ml",
    "onnx_training": "ai.onnx.preview.training",
    "onnx_preview": "ai.onnx.preview",
}
#: The MLIR dialects that hold ONNX ops (the one definition; `op.name.split(".")[0] in ONNX_DIALECTS`).
ONNX_DIALECTS: tuple[str, ...] = tuple(DIALECT_TO_DOMAIN)

# Names the generic rule renders poorly. Keys are ONNX op types.
_OVERRIDES: dict[str, str] = {
    "IsNaN": "is_nan",
    "IsInf": "is_inf",
    "Col2Im": "col2im",
    "PRelu": "prelu",
    "QLinearConv": "qlinear_conv",
    "QLinearMatMul": "qlinear_mat_mul",
    "SwiGLU": "swiglu",
}

_SPLIT = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_IRDL_NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


def op_type_to_snake(op_type: str) -> str:
    """`MatMul` -> `mat_mul`, `LSTM` -> `lstm`, `ReduceL2` -> `reduce_l2`, `Col2Im` -> `col2im`."""
    if op_type in _OVERRIDES:
        return _OVERRIDES[op_type]
    return "_".join(part.lower() for part in _SPLIT.split(op_type) if part)


def versioned_name(op_type: str, since_version: int | None) -> str:
    """The dialect-local op name: plain for the newest version, `_v<N>` for older ones."""
    base = op_type_to_snake(op_type)
    return base if since_version is None else f"{base}_v{since_version}"


def sanitize_operand_name(name: str) -> str:
    """An ONNX formal parameter name as IRDL accepts it (`Y_h` -> `y_h`, `outputs...` -> `outputs`)."""
    cleaned = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = "v" + cleaned
    return cleaned


def is_valid_irdl_name(name: str) -> bool:
    """Whether IRDL in LLVM 22 accepts `name` as an op or operand name."""
    return bool(_IRDL_NAME.match(name))


def dialect_for_domain(domain: str) -> str | None:
    """The dialect namespace of an ONNX domain, or None for domains onnxc has no schemas for."""
    return DOMAIN_TO_DIALECT.get(domain)
