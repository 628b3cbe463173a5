"""Patterns lowering ONNX-dialect ops to linalg/tensor/arith/math/scf, one module per op family.

`load_patterns()` imports every family module so their `@lowers` registrations are in
`common.PATTERNS`; the driver (`driver.py`) checks and lowers a module with them.
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
