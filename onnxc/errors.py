"""Errors onnxc raises for bad input: each names the model element it is about.

Tools catch `OnnxcError`, print its message and exit 1; anything else escaping is a bug in onnxc.
"""

from __future__ import annotations


class OnnxcError(Exception):
    """Bad input that the user must fix: a malformed model, IR or option. Never a crash."""


class DiagnosticsError(OnnxcError):
    """Several problems found together (all unsupported ops of a model, all verifier errors)."""

    def __init__(self, headline: str, problems: list[str]) -> None:
        self.headline = headline
        self.problems = list(problems)
        super().__init__(headline + "".join(f"\n  {p}" for p in self.problems))
