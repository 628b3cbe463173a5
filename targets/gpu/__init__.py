"""The GPU mapping shared by the CUDA and Vulkan targets: linalg on tensors -> gpu kernels.

- `device.py`: `GpuDevice` (warp/subgroup size, workgroup limits, shared memory, tile sizes)
  and the `DEVICES` table (`sm_80`, `sm_86`, `sm_89`, `sm_90`, `vulkan`).
- `mapping.py`: `map_to_gpu(module, device)`: fusion, tiling to workgroups and threads,
  bufferization, `gpu.launch`, kernel outlining.
- `host.py`: `host_program(module)`: the host function read as buffers + launches + copies, for
  runtimes that execute it themselves (Vulkan) or report on it (CUDA without a GPU).
"""

from .device import DEVICES, GpuDevice, GpuDeviceError, device_for
from .host import Buffer, Copy, HostProgram, Launch, host_program
from .mapping import GpuMappingError, KernelPlan, map_to_gpu, plan_kernel

__all__ = [
    "Buffer",
    "Copy",
    "DEVICES",
    "GpuDevice",
    "GpuDeviceError",
    "GpuMappingError",
    "HostProgram",
    "KernelPlan",
    "Launch",
    "device_for",
    "host_program",
    "map_to_gpu",
    "plan_kernel",
]
