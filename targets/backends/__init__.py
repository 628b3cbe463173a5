"""Backends: devices onnxc can offload ONNX graphs to, discovered at run time (issue 12, ONNXIFI).

- `base.py`: the interface (`Backend`, `BackendInfo`, `Figure`, `Compatibility`, `Graph`).
- `builtin.py`: `CpuBackend` (always present) and `TargetBackend` for the device targets of
  `onnxc.targets` (`vulkan`, `cuda`), each listed only when its device is present.
- `measure.py`: the CPU's peak MACs/s and bandwidth, measured once per machine and cached.
- `partition.py`: node compatibility -> the `onnx-partition` pass -> the decision table, and
  `run_partitioned` (each subgraph on its backend, the rest on the CPU).
- `cabi.py`, `cbuild.py`, `c/`: the C interface (`c/onnxc_onnxifi.h`, the proposal's entry
  points in `libonnxc_onnxifi.so`, which embeds Python and calls `cabi`; `cbuild` compiles it).

Discovery (`backends()`): the CPU, the built-in device backends that find their device, then
vendor plug-ins. A plug-in is a separately installed distribution declaring an entry point in
the group `onnxc.backends` (`[onnxc.backends]\\nmyaccel = "myaccel.backend:make"` in its
`entry_points.txt`); the callable returns a `Backend`, a list of them (one per device), or None
(no device). Plug-ins are found with `importlib.metadata` alone: onnxc imports no plug-in module
until `backends()` is called, and a plug-in needs nothing of onnxc but this package's public
names. A plug-in that fails to load is skipped with a warning naming it, never a failed discovery.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Iterable

from onnxc.targets.backends.base import (
    Backend,
    BackendError,
    BackendInfo,
    Compatibility,
    Figure,
    Graph,
    Support,
    TensorSpec,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendError",
    "BackendInfo",
    "Compatibility",
    "Figure",
    "Graph",
    "Support",
    "TensorSpec",
    "backends",
    "get_backend",
    "plugin_entry_points",
]

#: The entry-point group vendor plug-ins declare their backend factories in.
ENTRY_POINT_GROUP = "onnxc.backends"


def plugin_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The declared plug-ins (read from installed distributions' metadata; nothing imported)."""
    return sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


def _as_list(made: object, where: str) -> list[Backend]:
    if made is None:
        return []
    items: Iterable[object] = made if isinstance(made, (list, tuple)) else [made]
    out = []
    for b in items:
        if not isinstance(b, Backend):
            warnings.warn(f"onnxc backend plug-in {where} returned {type(b).__name__}, not a Backend; skipped", stacklevel=3)
            continue
        out.append(b)
    return out


def backends(plugins: bool = True) -> list[Backend]:
    """Every backend on this machine: the CPU first, then Vulkan/CUDA where a device is present,
    then the plug-ins' (in entry-point name order). Backend names are unique (a later duplicate
    is skipped with a warning)."""
    from onnxc.targets.backends.builtin import CpuBackend, cuda_backend, vulkan_backend

    found: list[Backend] = [CpuBackend()]
    for probe in (vulkan_backend, cuda_backend):
        b = probe()
        if b is not None:
            found.append(b)
    if plugins:
        for ep in plugin_entry_points():
            where = f"'{ep.name}' ({ep.value})"
            try:
                made = ep.load()()
            except Exception as e:  # noqa: BLE001 - a broken third-party plug-in must not break discovery
                warnings.warn(f"onnxc backend plug-in {where} failed to load: {type(e).__name__}: {e}", stacklevel=2)
                continue
            found.extend(_as_list(made, where))
    out: list[Backend] = []
    for b in found:
        if any(o.name == b.name for o in out):
            warnings.warn(f"two backends are named '{b.name}'; the second is skipped", stacklevel=2)
            continue
        out.append(b)
    return out


def get_backend(name: str, available: list[Backend] | None = None) -> Backend:
    """The backend called `name`; `BackendError` listing the present ones otherwise."""
    found = available if available is not None else backends()
    for b in found:
        if b.name == name:
            return b
    raise BackendError(f"no backend '{name}' on this machine (backends: {', '.join(b.name for b in found)})")
