"""What the CPU that code is generated for can do: ISA extensions, vector width, registers, caches.

Why: every tile size and vector width of the CPU target is derived from these figures, never from
a constant fitted to one machine (onnxc's machines have been an AVX-512 Xeon, an AVX2-only Zen 3
and an AVX-512 Zen 4; CI may run on any of them). The host is read once from Linux's
``/proc/cpuinfo`` and ``/sys/devices/system/cpu/cpu0/cache``; a user compiling ahead of time for
another machine names it (``CpuFeatures.for_target("x86-64-v3")``, ``onnxc compile --target-cpu``),
and the same figures then come from the table of known CPUs below.

What is read:
- ``features``: the ISA extension flags that matter to code generation (``avx2``, ``fma``,
  ``avx512f``, ``avx512vnni``, ``avx512bf16``, ``amx_tile``...), as Linux spells them.
- ``vector_bits``: the widest vector register the generated code should use (512 with AVX-512F,
  256 with AVX, 128 otherwise), ``vector_registers``: how many of them (32 with AVX-512, 16
  below): register tiles must keep their accumulators within that count or they spill.
- ``l1d_bytes``/``l2_bytes``/``l3_bytes``: per-core data cache sizes, for cache-level tiles.
- ``llvm_cpu``/``llvm_features``: the names LLVM's code generator takes for this CPU.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
from pathlib import Path

from onnxc.errors import OnnxcError

__all__ = ["CpuFeatures", "TargetCpuError", "host_cpu", "KNOWN_CPUS"]

#: The extension flags (Linux /proc/cpuinfo spelling) onnxc's code generation looks at.
_RELEVANT = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
)

#: LLVM target-feature names of the flags above (where they differ from "+<flag>").
_LLVM_FEATURE = {
    "sse4_2": "+sse4.2",
    "avx512_vnni": "+avx512vnni",
    "avx512_bf16": "+avx512bf16",
    "avx512_fp16": "+avx512fp16",
    "amx_tile": "+amx-tile",
    "amx_bf16": "+amx-bf16",
    "amx_int8": "+amx-int8",
    "asimd": "+neon",
}


class TargetCpuError(OnnxcError, ValueError):
    """A requested target CPU is unknown (the message lists the known ones)."""


@dataclasses.dataclass(frozen=True)
class CpuFeatures:
    """The code-generation-relevant description of one CPU (host or requested target)."""

    name: str
    arch: str
    features: frozenset[str]
    l1d_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    l3_bytes: int = 8 * 1024 * 1024
    cores: int = 1
    llvm_cpu: str = "generic"

    @property
    def vector_bits(self) -> int:
        """Widest vector register width to generate code for, in bits."""
        if "avx512f" in self.features:
            return 512
        if "avx" in self.features:
            return 256
        return 128

    @property
    def vector_registers(self) -> int:
        """Number of architectural vector registers (AVX-512 and AArch64 have 32)."""
        if "avx512f" in self.features or self.arch == "aarch64":
            return 32
        return 16

    @property
    def has_fma(self) -> bool:
        return "fma" in self.features or self.arch == "aarch64"

    @property
    def masked_memory(self) -> bool:
        """Whether masked vector loads/stores are native (AVX-512's and SVE's predicate
        registers). AVX/AVX2 emulate them with ``vmaskmovps``, whose store form is microcoded
        and slow on AMD Zen; NEON has none."""
        return "avx512f" in self.features or "sve" in self.features

    def lanes(self, element_bits: int) -> int:
        """Elements of ``element_bits`` bits in one vector register."""
        return max(1, self.vector_bits // max(8, element_bits))

    @property
    def isa(self) -> str:
        """A short human-readable ISA name for benchmark output (e.g. ``AVX-512 (VNNI, BF16)``)."""
        if self.arch == "aarch64":
            return "AArch64 NEON" + (" + SVE" if "sve" in self.features else "")
        if "avx512f" in self.features:
            extras = [n for f, n in (("avx512_vnni", "VNNI"), ("avx512_bf16", "BF16"), ("amx_tile", "AMX")) if f in self.features]
            return "AVX-512" + (f" ({', '.join(extras)})" if extras else "")
        if "avx2" in self.features:
            return "AVX2" + ("+FMA" if "fma" in self.features else "")
        if "avx" in self.features:
            return "AVX"
        return "SSE" if self.arch == "x86_64" else self.arch

    @property
    def llvm_features(self) -> str:
        """The LLVM target-feature string (``+avx2,+fma,...``) of this CPU's extensions."""
        return ",".join(_LLVM_FEATURE.get(f, "+" + f) for f in sorted(self.features) if f != "asimd" or self.arch == "aarch64")

    def describe(self) -> str:
        """One line for logs and benchmark headers."""
        return (
            f"{self.name} ({self.arch}, {self.isa}, {self.vector_bits}-bit x {self.vector_registers} vector registers, "
            f"L1d {self.l1d_bytes // 1024} KiB, L2 {self.l2_bytes // 1024} KiB, {self.cores} core(s))"
        )

    @staticmethod
    def for_target(name: str) -> "CpuFeatures":
        """The CPU named ``name``: ``host`` or one of ``KNOWN_CPUS`` (LLVM -mcpu spellings)."""
        if name in ("", "host", "native"):
            return host_cpu()
        known = KNOWN_CPUS.get(name)
        if known is None:
            raise TargetCpuError(f"unknown target CPU '{name}' (known: host, {', '.join(sorted(KNOWN_CPUS))})")
        return known


def _x86(name: str, llvm: str, extra: tuple[str, ...], l2: int) -> CpuFeatures:
    base = ("sse4_2", "avx", "avx2", "fma", "f16c")
    return CpuFeatures(name=name, arch="x86_64", features=frozenset(base + extra), l2_bytes=l2, llvm_cpu=llvm)


_AVX512 = ("avx512f", "avx512bw", "avx512dq", "avx512vl")

#: CPUs a user may compile for ahead of time (their cache figures are typical per-core sizes).
KNOWN_CPUS: dict[str, CpuFeatures] = {
    "x86-64-v3": _x86("x86-64-v3", "x86-64-v3", (), 512 * 1024),
    "haswell": _x86("haswell", "haswell", (), 256 * 1024),
    "znver3": _x86("znver3", "znver3", (), 512 * 1024),
    "x86-64-v4": _x86("x86-64-v4", "x86-64-v4", _AVX512, 1024 * 1024),
    "skylake-avx512": _x86("skylake-avx512", "skylake-avx512", _AVX512, 1024 * 1024),
    "cascadelake": _x86("cascadelake", "cascadelake", _AVX512 + ("avx512_vnni",), 1024 * 1024),
    "znver4": _x86("znver4", "znver4", _AVX512 + ("avx512_vnni", "avx512_bf16"), 1024 * 1024),
    "sapphirerapids": _x86(
        "sapphirerapids", "sapphirerapids", _AVX512 + ("avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"), 2 * 1024 * 1024
    ),
}


def _cache_size(text: str) -> int | None:
    """'32K' / '1024K' / '32M' (sysfs spelling) -> bytes."""
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024, "G": 1024**3}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else None


def _read_caches(root: Path) -> dict[str, int]:
    """Per-core data/unified cache sizes by level from sysfs (``l1d``, ``l2``, ``l3``)."""
    out: dict[str, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = _cache_size((index / "size").read_text())
        except OSError:  # a cache index without these files: skip it, keep the defaults
            continue
        if size is None or kind == "Instruction":
            continue
        out["l1d" if level == "1" else f"l{level}"] = size
    return out


def _read_flags(cpuinfo: str) -> frozenset[str]:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags = set(value.split())
            return frozenset(f for f in _RELEVANT if f in flags)
    return frozenset()


@functools.lru_cache(maxsize=1)
def host_cpu() -> CpuFeatures:
    """The machine onnxc runs on (read once per process)."""
    arch = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: assume the architecture's baseline, which is always safe
        cpuinfo = ""
    flags = _read_flags(cpuinfo)
    caches = _read_caches(Path("/sys/devices/system/cpu/cpu0/cache"))
    model = next((l.partition(":")[2].strip() for l in cpuinfo.splitlines() if l.startswith("model name")), arch)
    return CpuFeatures(
        name=f"host: {model}",
        arch=arch,
        features=flags,
        l1d_bytes=caches.get("l1d", 32 * 1024),
        l2_bytes=caches.get("l2", 512 * 1024),
        l3_bytes=caches.get("l3", 8 * 1024 * 1024),
        cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        llvm_cpu="native",
    )
