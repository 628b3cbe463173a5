"""The interface every code-generation target implements, so `onnxc.compile` needs no per-target code.

A target takes a module at the linalg-on-tensors stage (what `onnx-to-linalg` produces) to an
artifact it can run. It provides four things:

1. `name` (`"cpu"`, `"cuda"`, ...): what `onnxc.compile(model, target=...)` and `onnxc compile
   --target` take.
2. `options_type`, a frozen dataclass of the target's knobs, and `check_options`, which validates
   them *before* anything reaches MLIR's C++ (an assertion there kills the process) and raises
   `TargetError` naming the bad field.
3. `pipeline(options, stop_after=None)`: the pipeline **text** from linalg to the artifact's IR,
   made of registered passes (the target's stage passes, registered by `onnxc.targets`, and upstream
   passes). `onnx-opt -p <text>` runs exactly what the target runs: a failure is reproducible by
   hand. `stages` names the IR stages along the way (`--emit <stage>` of the driver).
4. `compile(module, options, entry=None, instrumentation=None)`: run the pipeline (through
   `onnxc.transforms.pipeline`, the one pass-manager driver) on a copy of the module and load the
   artifact; returns a `Runnable`. `load(path)` loads an artifact written ahead of time (targets
   without one raise `TargetError`).

A new target: subclass `Target` in `targets/<name>/`, add one line to `onnxc.targets.TARGETS` and
its stage passes to `onnxc.targets.TARGET_PASSES` (see DEVELOPERS.md, "Targets").
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
from mlir import ir

from onnxc.errors import OnnxcError
from onnxc.transforms.pipeline import Instrumentation


class TargetError(OnnxcError, ValueError):
    """An unknown target, or target options that are invalid (the message names the option)."""


class ArgumentSpec(Protocol):
    """What the compiler reads of a runnable's argument: its numpy dtype and rank."""

    dtype: np.dtype
    rank: int


class Signature(Protocol):
    """A runnable's entry signature: the function name and its argument specs in order."""

    name: str
    inputs: Sequence[ArgumentSpec]


class Runnable(Protocol):
    """A loaded artifact: called with numpy arrays in the entry's argument order, returns numpy
    arrays in result order. `signature` lets callers adapt arrays (dtype views, scalars)."""

    signature: Signature

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]: ...


class Target(abc.ABC):
    """A code-generation target (see the module docstring for the contract)."""

    #: The target's name.
    name: ClassVar[str] = ""
    #: The frozen dataclass of its options; `options_type()` must be valid defaults.
    options_type: ClassVar[type[Any]]
    #: IR stages after linalg, in pipeline order (the last is the artifact's IR).
    stages: ClassVar[tuple[str, ...]] = ()

    def options(self, options: Any = None) -> Any:
        """`options` checked (the defaults when None); raises `TargetError` when invalid."""
        if options is None:
            options = self.options_type()
        if not isinstance(options, self.options_type):
            raise TargetError(
                f"target '{self.name}' takes options of type {self.options_type.__name__}, got {type(options).__name__}"
            )
        self.check_options(options)
        return options

    def check_options(self, options: Any) -> None:
        """Raise `TargetError` naming the field of `options` that is out of range (default: none)."""

    @abc.abstractmethod
    def pipeline(self, options: Any, stop_after: str | None = None) -> str:
        """The pipeline text from linalg on tensors to the artifact's IR (up to `stop_after`,
        one of `stages`, when given)."""

    @abc.abstractmethod
    def compile(
        self,
        module: ir.Module,
        options: Any,
        *,
        entry: str | None = None,
        instrumentation: Instrumentation | None = None,
    ) -> Runnable:
        """Lower a copy of `module` (linalg on tensors) with `pipeline(options)` and load it.
        `module` is left unchanged."""

    def load(self, path: str) -> Runnable:
        """Load an artifact written ahead of time (a target without AOT raises `TargetError`)."""
        raise TargetError(f"target '{self.name}' writes no ahead-of-time artifacts")

    def check_stage(self, stage: str) -> None:
        """Raise `TargetError` unless `stage` is one of `stages`."""
        if stage not in self.stages:
            raise TargetError(f"target '{self.name}' has no stage '{stage}' (stages: {', '.join(self.stages)})")


def non_default_fields(options: Any) -> dict[str, Any]:
    """The fields of the dataclass `options` whose value differs from the field's default, in
    field order (what a pass element must spell out to reproduce `options`)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING  # type: ignore[misc]
        )
        value = getattr(options, f.name)
        if default is dataclasses.MISSING or value != default:
            out[f.name] = value
    return out
