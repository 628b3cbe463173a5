"""Per-device facts and tile sizes for the GPU mapping (`targets/gpu/mapping.py`).

What: `GpuDevice`, a frozen dataclass holding what the mapping needs to know about a device (its
subgroup/warp size, the most threads a workgroup may have, its workgroup/shared memory) and the
tile sizes derived for it, and `DEVICES`, a small table of the devices onnxc targets. Why a table
and not constants in the mapping: CUDA (warp 32, 1024 threads, 48 KiB static shared memory per
block on sm_80/sm_90) and lavapipe (subgroup 8 on AVX2 / 16 on AVX-512 hosts, a CPU driver that
runs one workgroup per core) want different workgroup shapes, and a new device is one table row.
`process_wide(factory)` holds the one runtime context (driver, device, queue) each GPU runtime
opens per process.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TypeVar

from onnxc.errors import OnnxcError

__all__ = ["DEVICES", "GpuDevice", "GpuDeviceError", "device_for", "process_wide"]

_T = TypeVar("_T")


class GpuDeviceError(OnnxcError):
    """An unknown device name or tile sizes a device cannot run."""


@dataclasses.dataclass(frozen=True)
class GpuDevice:
    """What the GPU mapping needs to know about one device.

    name: the table key (`sm_80`, `vulkan`...).
    subgroup_size: threads that execute in lockstep (CUDA warp); the innermost workgroup
        dimension is a multiple of it where the loop is long enough, so that neighbouring threads
        read neighbouring elements (coalesced loads).
    max_workgroup_size: the most threads one workgroup (CUDA block) may have.
    shared_memory_bytes: workgroup (shared) memory one workgroup may use; bounds promoted tiles.
    workgroup_size: threads per workgroup the mapping aims at for elementwise ops and
        reductions (one output element per thread).
    matmul_block_tile: (m, n) output tile of one workgroup for contractions.
    matmul_thread_tile: (m, n) output tile of one thread inside it (register tile: each A and B
        element loaded is reused tn and tm times).
    matmul_k_tile: the K-step of a contraction whose operand slices are promoted to workgroup
        memory: each step the workgroup copies A[bm, k_tile] and B[k_tile, bn] into shared memory
        together, then every thread reads its register tile's operands from there (each global
        element is loaded once per workgroup instead of once per thread that needs it). 0: no
        promotion. The two slices (4-byte elements) must fit in `shared_memory_bytes`.
    conv_thread_tile: (output positions along the width, output channels) of one thread of a
        convolution with a filter (`mapping.conv_plan`; its workgroup spans `matmul_block_tile`).
        (1, 1): one output per thread, the generic plan.
    """

    name: str
    subgroup_size: int
    max_workgroup_size: int
    shared_memory_bytes: int
    workgroup_size: int
    matmul_block_tile: tuple[int, int]
    matmul_thread_tile: tuple[int, int]
    matmul_k_tile: int = 0
    conv_thread_tile: tuple[int, int] = (1, 1)

    def promoted_bytes(self, element_bytes: int = 4) -> int:
        """Workgroup memory one contraction's promoted A and B slices take."""
        bm, bn = self.matmul_block_tile
        return (bm + bn) * self.matmul_k_tile * element_bytes

    def validate(self) -> None:
        """Reject tile sizes that would give an invalid launch (checked before MLIR sees them)."""
        if self.subgroup_size <= 0 or self.workgroup_size <= 0:
            raise GpuDeviceError(f"device {self.name}: subgroup and workgroup sizes must be positive")
        if self.workgroup_size > self.max_workgroup_size:
            raise GpuDeviceError(
                f"device {self.name}: workgroup_size {self.workgroup_size} exceeds the device limit {self.max_workgroup_size}"
            )
        bm, bn = self.matmul_block_tile
        tm, tn = self.matmul_thread_tile
        if min(bm, bn, tm, tn) <= 0 or bm % tm or bn % tn:
            raise GpuDeviceError(f"device {self.name}: matmul block tile {self.matmul_block_tile} must be a multiple of the thread tile {self.matmul_thread_tile}")
        if (bm // tm) * (bn // tn) > self.max_workgroup_size:
            raise GpuDeviceError(f"device {self.name}: matmul tiles give {(bm // tm) * (bn // tn)} threads, over {self.max_workgroup_size}")
        if min(self.conv_thread_tile) <= 0:
            raise GpuDeviceError(f"device {self.name}: conv_thread_tile {self.conv_thread_tile} must be positive")
        if self.matmul_k_tile < 0 or self.promoted_bytes() > self.shared_memory_bytes:
            raise GpuDeviceError(
                f"device {self.name}: matmul_k_tile {self.matmul_k_tile} must be >= 0 and its promoted slices "
                f"({self.promoted_bytes()} bytes) fit in {self.shared_memory_bytes} bytes of workgroup memory"
            )


# NVIDIA: warp 32, 1024 threads per block, 48 KiB static shared memory per block (more needs
# dynamic opt-in). 256 threads per block keeps 8 blocks per SM within the 2048-thread limit.
# Contractions: a 32x64 block tile of 4x4 register tiles (8x16 = 128 threads; 16 accumulators
# and 8 operands per thread, each k step's 8 shared loads feeding 16 FMAs). K-step 32:
# (32 + 64) x 32 f32 = 12 KiB of shared memory per block, so 13 blocks fit in an SM's 164 KiB
# (sm_80); 16 lanes of a warp read 16 consecutive floats of a B row. Chosen by a sweep on an
# H200 (docs/gpu_runs/h200_tile_sweep.txt, f32 GFLOP/s with the accumulators kept in registers
# across the K loop): 4x4 tiles beat the former 2x4 on every shape (4096^3 19.1 -> 23.4
# TFLOP/s, 128x768x768 4.0 -> 4.6, 128x768x3072 10.0 -> 12.8); a 64x64 block of 4x4 tiles was
# faster on the largest GEMMs (25.0) but slower below 1024 (7.0 vs 9.5 at 512^3: fewer blocks
# than SMs), larger register tiles (8x8) slower everywhere. Convolutions keep one output per
# thread: 1x4, 2x2, 2x4, 4x4 and 1x8 register tiles were all slower on ResNet-50's
# convolutions there (docs/gpu_runs/h200_conv_tile_sweep.txt: too few outputs to fill 132 SMs
# once each thread takes several).
_CUDA = dict(subgroup_size=32, max_workgroup_size=1024, shared_memory_bytes=48 * 1024, workgroup_size=256,
             matmul_block_tile=(32, 64), matmul_thread_tile=(4, 4), matmul_k_tile=32)

#: The devices onnxc maps to. Vulkan's row is what every Vulkan 1.1 device guarantees
#: (maxComputeWorkGroupInvocations >= 128, maxComputeSharedMemorySize >= 16 KiB) with a
#: subgroup of 8 (lavapipe on AVX2; larger subgroups only make these sizes more conservative).
#: K-step 16: (16 + 32) x 16 f32 = 3 KiB, well inside the guaranteed 16 KiB.
DEVICES: dict[str, GpuDevice] = {
    "sm_80": GpuDevice("sm_80", **_CUDA),
    "sm_86": GpuDevice("sm_86", **_CUDA),
    "sm_89": GpuDevice("sm_89", **_CUDA),
    "sm_90": GpuDevice("sm_90", **_CUDA),
    "vulkan": GpuDevice("vulkan", subgroup_size=8, max_workgroup_size=128, shared_memory_bytes=16 * 1024,
                        workgroup_size=128, matmul_block_tile=(16, 32), matmul_thread_tile=(2, 2), matmul_k_tile=16),
    # Vulkan drivers that run on the CPU (VK_PHYSICAL_DEVICE_TYPE_CPU: Mesa's lavapipe,
    # SwiftShader), which `VulkanOptions(device="auto")` picks on such a device. They run a
    # workgroup's invocations as coroutines on one core, SIMD across a subgroup: a barrier
    # switches between all of them, and workgroup memory is ordinary memory, so promotion only
    # adds two barriers per K-step; larger register tiles give each invocation more reuse. On
    # lavapipe (Zen 4, 2 cores) a [1,128,768] x [768,768] projection takes 150 ms with the row
    # above, 74 ms with 4x4 tiles and promotion, 32 ms with 4x4 tiles and no promotion. The
    # same holds for convolutions, whose few outputs do not need to fill a GPU here: ResNet-50's
    # 3x3 convolutions take 258-288 ms with one output per thread, 39-61 ms with 4x4 tiles
    # (bench/gpu_kernels.py --only conv).
    "vulkan_cpu": GpuDevice("vulkan_cpu", subgroup_size=8, max_workgroup_size=128, shared_memory_bytes=16 * 1024,
                            workgroup_size=128, matmul_block_tile=(32, 32), matmul_thread_tile=(4, 4), matmul_k_tile=0,
                            conv_thread_tile=(4, 4)),
}


def device_for(name: str) -> GpuDevice:
    """The table row for `name`, validated; a clear error naming the known devices otherwise."""
    if name not in DEVICES:
        raise GpuDeviceError(f"unknown GPU device '{name}' (known: {', '.join(sorted(DEVICES))})")
    dev = DEVICES[name]
    dev.validate()
    return dev


def process_wide(factory: Callable[[], _T]) -> Callable[[], _T]:
    """A getter of one `factory()` per process, made on the first call under a lock (a runtime
    context opens the device: two threads must not open it twice). A failed creation (no
    driver, no device) is not remembered: the next call tries again and says why again."""
    lock = threading.Lock()
    made: list[_T] = []

    def get() -> _T:
        with lock:
            if not made:
                made.append(factory())
            return made[0]

    return get
