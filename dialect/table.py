"""Lookups over the generated op table: by dialect op name, and by ONNX (domain, op type, version).

Version binding follows the ONNX versioning rules: a node of domain D in a model importing D at
opset N binds to the schema with the greatest since_version <= N; the dialect op is the one whose
`since_versions` contains that version.
"""

from __future__ import annotations

import bisect
from functools import lru_cache

from mlir import ir

from onnxc.dialect.names import DOMAIN_TO_DIALECT
from onnxc.dialect.opinfo import CUSTOM_OP, OpInfo
from onnxc.dialect.optable import OPS


def _norm_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


@lru_cache(maxsize=None)
def _by_full_name() -> dict[str, OpInfo]:
    return {op.full_name: op for op in OPS}


@lru_cache(maxsize=None)
def _versions() -> dict[tuple[str, str], list[tuple[int, OpInfo]]]:
    out: dict[tuple[str, str], list[tuple[int, OpInfo]]] = {}
    for op in OPS:
        for v in op.since_versions:
            out.setdefault((op.domain, op.op_type), []).append((v, op))
    for entries in out.values():
        entries.sort(key=lambda e: e[0])
    return out


def all_ops() -> tuple[OpInfo, ...]:
    """Every op of the table, sorted by (dialect, name)."""
    return OPS


def op_info(full_name: str) -> OpInfo | None:
    """The table row of a dialect op name (`onnx.mat_mul`), or None."""
    return _by_full_name().get(full_name)


def known_domain(domain: str) -> bool:
    """Whether onnxc has schemas for this ONNX domain."""
    return _norm_domain(domain) in DOMAIN_TO_DIALECT


def schema_versions(op_type: str, domain: str = "") -> list[int]:
    """Every since_version the installed schemas define for an ONNX op, ascending."""
    return [v for v, _ in _versions().get((_norm_domain(domain), op_type), [])]


def lookup(op_type: str, domain: str = "", version: int | None = None) -> OpInfo | None:
    """The dialect op an ONNX node binds to at opset `version` (None: the newest), or None if
    the op is unknown or has no version <= `version`."""
    entries = _versions().get((_norm_domain(domain), op_type))
    if not entries:
        return None
    if version is None:
        return entries[-1][1]
    i = bisect.bisect_right([v for v, _ in entries], version)
    return entries[i - 1][1] if i > 0 else None


def bound_version(op_type: str, domain: str, opset: int) -> int | None:
    """The since_version a node binds to at `opset` (the versioning spec's rule), or None."""
    versions = schema_versions(op_type, domain)
    i = bisect.bisect_right(versions, opset)
    return versions[i - 1] if i > 0 else None


def schema_for(op: ir.Operation | ir.OpView) -> OpInfo | None:
    """The table row of an operation, or None for non-ONNX ops (and `onnx.custom`/`onnx.none`)."""
    return op_info(op.operation.name if isinstance(op, ir.OpView) else op.name)
