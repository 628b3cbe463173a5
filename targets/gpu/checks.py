"""The model's run-time checks for the GPU targets, run on the CPU before each call's kernels.

Why: the lowering guards what only a call's data can tell (an index out of range for Gather,
GatherElements, ScatterND..., a Reshape whose sizes do not add up) with run-time checks that
store a failure into a status channel (`transforms/lowering/runtime_checks.py`); the CPU target
reads it after each call and raises a `RuntimeCheckError` naming the node. The GPU host
program has no such channel, so `map_to_gpu` strips the checks, and a bad index was read
clamped: a wrong answer where the CPU target refuses (found by `fuzz_compile --target vulkan`:
GatherElements with an index of 2 on an axis of 2 gave numbers on Vulkan).

What: `check_program` keeps, of a copy of the linalg module, only what the checks need (the
entry returns nothing, so canonicalization drops every computation no check reads: usually
the min/max of an index input), compiles that with the CPU target and returns it; `Checked`
wraps a GPU entry so that each call runs it on the call's arrays first and raises its
`RuntimeCheckError` before any kernel runs. A module without checks gets no program. The
cost is the checks' slice on the CPU per call (for a transformer's token ids: one reduction
over the ids); a check on values computed deep in the model recomputes their slice there,
which is slower but never wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mlir import ir

from onnxc.transforms.lowering.runtime_checks import CHECK_MARKER

from .mapping import collect

__all__ = ["Checked", "check_program"]


def _has_checks(module: ir.Module) -> bool:
    """Whether any op of `module` still carries a run-time check."""
    return bool(collect(module.operation, lambda op: CHECK_MARKER in op.attributes))


def check_program(module: ir.Module, name: str) -> Callable[..., None] | None:
    """The checks of @name compiled for the CPU (see the module doc), or None without checks."""
    from onnxc.targets.cpu import CpuPipelineOptions
    from onnxc.targets.cpu.jit import compile_module

    from .specialize import entry_returning

    if not _has_checks(module):
        return None
    probe = entry_returning(module, name, lambda ops: [], "the run-time checks' slice")
    if not _has_checks(probe):
        return None
    compiled = compile_module(probe, name, CpuPipelineOptions(threads=1))

    def check(*arrays: np.ndarray) -> None:
        compiled(*arrays)  # raises RuntimeCheckError naming the node when a check fails

    return check


class Checked:
    """A GPU entry (`VulkanFunction`, `CudaFunction`, `SpecializingFunction`) whose model has
    run-time checks: each call runs them on the CPU first. Everything else is the entry's."""

    def __init__(self, inner: Any, check: Callable[..., None]) -> None:
        self.inner = inner
        self.check = check

    def __call__(self, *arrays: np.ndarray) -> Sequence[np.ndarray]:
        self.check(*arrays)
        return self.inner(*arrays)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"<Checked {self.inner!r}>"
