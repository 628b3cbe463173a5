"""A per-compile time limit (`onnxc.compile(..., time_limit_s=)`), checked between passes.

Why (issue 11, resource limits): a model that makes a pass or the code generator run for a long
time should give a clear error after a bound the caller chooses, not hold a service forever.

How: `time_limit(seconds)` sets a deadline for the code running inside it (a context variable, so
concurrent compiles in other threads keep their own); `check_time_limit(where)` raises
`CompileTimeLimitError` once it has passed. The pipeline driver checks before every onnxc pass
(`transforms/pipeline.py`) and `compile` between its stages (import, linalg, the target's code
generation). A native MLIR/LLVM pass cannot be interrupted from Python: the limit is noticed at
the next check, so a single long native pass may overrun it (documented in docs/robustness.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from collections.abc import Iterator

from onnxc.errors import OnnxcError


class CompileTimeLimitError(OnnxcError):
    """The compile ran past the time limit given to `compile(..., time_limit_s=)`."""


# (monotonic deadline, the limit in seconds) of the compile running in this context, or None.
_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar("onnxc_compile_deadline", default=None)


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Run the body under a deadline `seconds` from now (None: no limit)."""
    if seconds is None:
        yield
        return
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise OnnxcError(f"time_limit_s must be a positive number of seconds, got {seconds!r}")
    token = _DEADLINE.set((time.monotonic() + float(seconds), float(seconds)))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_time_limit(where: str) -> None:
    """Raise `CompileTimeLimitError` naming `where` (the step about to start) when the deadline of
    the enclosing `time_limit` has passed."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline[0]:
        raise CompileTimeLimitError(f"the compile ran past its time limit of {deadline[1]:g} s (stopped before {where})")
