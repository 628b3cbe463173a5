"""Patterns lowering ONNX-dialect ops to linalg/tensor/arith/math/scf, one module per op family.

`common.py` holds the registry (`@lowers("Add", ...)`), the `Node` adaptor, type conversion and
the linalg builders; `driver.py` the pre-check and the function-rebuilding walk;
`minifloat.py` the byte-coded float8/float4/int4/int2 types. Families: elementwise (math,
logic, comparisons, Cast, Where, Clip), matmul (MatMul, Gemm), reduction (Reduce*, ArgMax/Min,
Softmax family), shape_ops (Constant, Reshape, Slice, Gather, Pad, ...), conv (Conv,
ConvTranspose, Col2Im), pooling, normalization, control_flow (If, Loop, Scan), indexing (Einsum,
Scatter*, TopK, CumSum, Compress, ...), quantization, resize, rnn (RNN/GRU/LSTM), grid_sample
(GridSample, AffineGrid), spectral (DFT), training (Adagrad/Momentum/Adam), ml (Binarizer,
ArrayFeatureExtractor), random (RandomUniform/Normal(Like), Bernoulli, Multinomial, Dropout:
a Philox generator in the generated code), data_dependent (NonZero, Unique, NonMaxSuppression:
outputs sized at run time), image (ImageDecoder: decoded at run time by a call out to Pillow).

`load_patterns()` imports every family module so their `@lowers` registrations are in
`common.PATTERNS`; `lowered_op_types()` lists what they cover.
"""

from __future__ import annotations

import importlib

FAMILIES = (
    "elementwise",
    "matmul",
    "reduction",
    "shape_ops",
    "conv",
    "pooling",
    "normalization",
    "control_flow",
    "indexing",
    "quantization",
    "resize",
    "rnn",
    "grid_sample",
    "training",
    "ml",
    "spectral",
    "random",
    "data_dependent",
    "attention_recurrent",
    "tensor_scatter",
    "det",
    "max_unpool",
    "roi_align",
    "deform_conv",
    "audio",
    "tfidf",
    "tree_ensemble",
    "strings",  # string tensors (Equal/Constant on strings compose with the numeric patterns)
    "image",
)


def load_patterns() -> None:
    """Import every pattern module (idempotent)."""
    for fam in FAMILIES:
        try:
            importlib.import_module(f"{__name__}.{fam}")
        except ModuleNotFoundError as exc:
            # A family not written yet simply lowers nothing; any other import error is a bug.
            if exc.name != f"{__name__}.{fam}":
                raise


def lowered_op_types() -> set[tuple[str, str]]:
    """Every (ONNX domain, op type) that has a lowering pattern (other passes, e.g. the schema
    function expansion, can leave these ops alone: their direct lowering is preferred)."""
    load_patterns()
    from onnxc.transforms.lowering.common import PATTERNS

    return set(PATTERNS)
