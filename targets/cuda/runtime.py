"""A small CUDA runtime in Python that runs a mapped GPU program (`gpu.host.HostProgram`) on an
NVIDIA GPU through the CUDA driver API (`libcuda.so.1`, loaded with ctypes).

What: `CudaContext` (the first device's primary context, created once per process and shared)
and `CudaProgram`, built from a `HostProgram` and the PTX of its kernels. At construction it
allocates one device buffer per program buffer (owned by the program for its lifetime), uploads
every constant (the weights) once, loads each kernel module's PTX (the driver JIT-compiles it for
the device; its error log becomes the error message) and prepares each launch's parameters. A
call copies the inputs into their buffers, launches the kernels and runs the copies in program
order on one stream (stream order is the only barrier needed: a kernel starts after the previous
one has finished), and copies the results back into fresh numpy arrays.

Why the driver API from Python rather than `gpu-to-llvm` host code and `libmlir_cuda_runtime.so`:
it runs the same `HostProgram` the Vulkan runtime runs (one reading of the host side, the same
whitelist of host ops for both targets), the weights stay on the device between calls instead of
being copied per call by the generated host code, and no host JIT is needed. The kernels are what
upstream's `gpu-lower-to-nvvm-pipeline` emits, so their parameters follow MLIR's memref
descriptor convention: per memref argument, the allocated and aligned pointers, the offset, the
sizes and the strides (all 64-bit); `launch_parameters` builds them from each argument's view
(`gpu.host.ArgLayout`) and `ptx_parameter_count` checks their number against the PTX entry before
anything is launched.

Errors: no driver or no device raises `CudaUnavailable` (defined in `lowering.py`, re-exported by
the package); a failing driver call raises `CudaRuntimeError` naming the call and the driver's
error name (a kernel fault, e.g. an illegal address, is reported by the next synchronizing call).
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnxc.targets.gpu.device import process_wide
from onnxc.targets.gpu.host import ArgLayout, Copy, HostProgram, Launch

from .lowering import CudaLoweringError, CudaUnavailable

__all__ = [
    "CudaContext",
    "CudaProgram",
    "CudaRuntimeError",
    "cuda_context",
    "launch_parameters",
    "ptx_parameter_count",
]


class CudaRuntimeError(CudaLoweringError):
    """A CUDA driver call failed while loading or running a program."""


#: `CUdevice_attribute` values (cuda.h).
_CC_MAJOR, _CC_MINOR, _SM_COUNT = 75, 76, 16
#: `CUjit_option` values (cuda.h): the JIT's error log buffer and its size.
_JIT_ERROR_LOG_BUFFER, _JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 5, 6


def _load_driver() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise CudaUnavailable(f"target 'cuda': no NVIDIA driver on this machine (libcuda.so.1: {e})") from None
    u64p, vp = ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p
    # Argument types of the calls used, so that 64-bit handles and sizes are never truncated.
    for name, args in {
        "cuInit": [ctypes.c_uint],
        "cuDriverGetVersion": [ctypes.POINTER(ctypes.c_int)],
        "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
        "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
        "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
        "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(vp), ctypes.c_int],
        "cuCtxSetCurrent": [vp],
        "cuCtxSynchronize": [],
        "cuMemAlloc_v2": [u64p, ctypes.c_size_t],
        "cuMemFree_v2": [ctypes.c_uint64],
        "cuMemcpyHtoD_v2": [ctypes.c_uint64, vp, ctypes.c_size_t],
        "cuMemcpyDtoH_v2": [vp, ctypes.c_uint64, ctypes.c_size_t],
        "cuMemcpyDtoD_v2": [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t],
        "cuModuleLoadDataEx": [ctypes.POINTER(vp), ctypes.c_char_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(vp)],
        "cuModuleGetFunction": [ctypes.POINTER(vp), vp, ctypes.c_char_p],
        "cuModuleUnload": [vp],
        "cuLaunchKernel": [vp] + [ctypes.c_uint] * 7 + [vp, ctypes.POINTER(vp), ctypes.POINTER(vp)],
        "cuEventCreate": [ctypes.POINTER(vp), ctypes.c_uint],
        "cuEventRecord": [vp, vp],
        "cuEventSynchronize": [vp],
        "cuEventElapsedTime": [ctypes.POINTER(ctypes.c_float), vp, vp],
        "cuEventDestroy_v2": [vp],
        "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    }.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int
    return lib


class CudaContext:
    """The driver, the first device and its primary context (one per process)."""

    def __init__(self) -> None:
        self.lib = _load_driver()
        if self.lib.cuInit(0) != 0:
            raise CudaUnavailable("target 'cuda': the NVIDIA driver did not initialize (cuInit failed: no usable GPU)")
        count = ctypes.c_int(0)
        if self.lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
            raise CudaUnavailable("target 'cuda': the NVIDIA driver sees no GPU")
        device = ctypes.c_int(0)
        self.check(self.lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
        self.device = device.value
        name = ctypes.create_string_buffer(256)
        self.check(self.lib.cuDeviceGetName(name, 256, self.device), "cuDeviceGetName")
        self.device_name = name.value.decode(errors="replace")
        self.compute_capability = (self.attribute(_CC_MAJOR), self.attribute(_CC_MINOR))
        self.multiprocessors = self.attribute(_SM_COUNT)
        version = ctypes.c_int(0)
        self.check(self.lib.cuDriverGetVersion(ctypes.byref(version)), "cuDriverGetVersion")
        self.driver_version = version.value
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.device), "cuDevicePrimaryCtxRetain")
        self.context = ctx
        # One program call at a time on the shared context; reentrant because a program collected
        # while another holds it (its __del__ -> close) takes it again on the same thread.
        self.lock = threading.RLock()

    @property
    def chip(self) -> str:
        """The device's architecture as a PTX target name (`sm_90` for compute capability 9.0)."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def attribute(self, which: int) -> int:
        value = ctypes.c_int(0)
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(value), which, self.device), f"cuDeviceGetAttribute({which})")
        return value.value

    def make_current(self) -> None:
        """Bind the primary context to the calling thread (contexts are per thread)."""
        self.check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def error(self, result: int, what: str) -> CudaRuntimeError:
        """The error for a failed driver call: `what`, and the driver's name for `result`."""
        name = ctypes.c_char_p()
        self.lib.cuGetErrorName(result, ctypes.byref(name))
        text = name.value.decode() if name.value else f"error {result}"
        return CudaRuntimeError(f"CUDA: {what} failed: {text}")

    def check(self, result: int, what: str) -> None:
        """Raise `error(result, what)` for a non-zero result."""
        if result != 0:
            raise self.error(result, what)


_shared_context = process_wide(CudaContext)


def cuda_context() -> CudaContext:
    """The process's shared `CudaContext`, created on first use."""
    return _shared_context()


def launch_parameters(pointers: Sequence[int], layouts: Sequence[ArgLayout]) -> list[int]:
    """The 64-bit kernel parameters of one launch, in order: for each memref argument (its
    buffer's device address and its view), MLIR's descriptor fields: allocated pointer, aligned
    pointer, offset, sizes, strides (`MemRefDescriptor::unpack`, what `gpu-to-nvvm` gives a
    kernel's memref argument by default)."""
    if len(pointers) != len(layouts):
        raise CudaRuntimeError(f"a launch has {len(pointers)} buffer(s) but {len(layouts)} view(s)")
    params: list[int] = []
    for ptr, layout in zip(pointers, layouts):
        params += [ptr, ptr, layout.offset, *layout.shape, *layout.strides]
    return params


def ptx_parameter_count(ptx: str, function: str) -> int:
    """How many parameters the PTX entry `function` declares (its `.param` list)."""
    m = re.search(r"\.entry\s+" + re.escape(function) + r"\s*\((.*?)\)", ptx, re.S)
    if m is None:
        raise CudaRuntimeError(f"the PTX has no entry '{function}'")
    return len(re.findall(r"\.param\b", m.group(1)))


class _Event:
    def __init__(self, ctx: CudaContext) -> None:
        self.ctx = ctx
        self.handle = ctypes.c_void_p()
        ctx.check(ctx.lib.cuEventCreate(ctypes.byref(self.handle), 0), "cuEventCreate")

    def record(self) -> None:
        self.ctx.check(self.ctx.lib.cuEventRecord(self.handle, None), "cuEventRecord")

    def since(self, start: _Event) -> float:
        """Milliseconds between `start` and this event (waits for this one)."""
        self.ctx.check(self.ctx.lib.cuEventSynchronize(self.handle), "cuEventSynchronize")
        ms = ctypes.c_float(0)
        self.ctx.check(self.ctx.lib.cuEventElapsedTime(ctypes.byref(ms), start.handle, self.handle), "cuEventElapsedTime")
        return float(ms.value)

    def destroy(self) -> None:
        self.ctx.lib.cuEventDestroy_v2(self.handle)


class CudaProgram:
    """A `HostProgram` loaded on the CUDA device; call it with the input arrays in order."""

    def __init__(self, program: HostProgram, ptx: Mapping[str, str], chip: str, ctx: CudaContext | None = None) -> None:
        from onnxc.targets.cpu.abi import numpy_dtype

        self.program = program
        self.ctx = ctx or cuda_context()
        ctx = self.ctx
        if int(chip[3:]) > int("".join(map(str, ctx.compute_capability))):
            raise CudaUnavailable(
                f"@{program.name} was compiled for {chip}; the GPU {ctx.device_name} is {ctx.chip} "
                f"(compile with CudaOptions(chip='{ctx.chip}') or an older chip)"
            )
        lib = ctx.lib
        # index buffers (Det's pivot order between kernels) are 64-bit: NVVM's index width.
        self._dtypes = {b.id: np.dtype(np.int64) if b.element_type == "index" else numpy_dtype(b.element_type) for b in program.buffers}
        self._pointers: dict[int, int] = {}
        self._modules: list[ctypes.c_void_p] = []
        self._launches: list[tuple[ctypes.c_void_p, Launch, Any, Any]] = []
        with ctx.lock:
            ctx.make_current()
            try:
                for b in program.buffers:
                    ptr = ctypes.c_uint64(0)
                    # At least one byte: cuMemAlloc refuses a zero-sized allocation.
                    ctx.check(lib.cuMemAlloc_v2(ctypes.byref(ptr), max(1, b.nbytes)), f"cuMemAlloc of {b.nbytes} bytes")
                    self._pointers[b.id] = ptr.value
                    if b.kind == "constant" and b.nbytes:
                        assert b.value is not None
                        self._upload(b.id, b.value)  # weights, uploaded once
                functions = {}
                for s in program.steps:
                    if isinstance(s, Launch) and (s.module, s.function) not in functions:
                        text = ptx.get(s.module)
                        if text is None:
                            raise CudaRuntimeError(f"no PTX for kernel module @{s.module}")
                        functions[(s.module, s.function)] = (self._load(s.module, text, s.function), ptx_parameter_count(text, s.function))
                for s in program.steps:
                    if isinstance(s, Launch):
                        function, declared = functions[(s.module, s.function)]
                        values = launch_parameters([self._pointers[a] for a in s.args], s.layouts)
                        if len(values) != declared:
                            raise CudaRuntimeError(
                                f"kernel @{s.module}::@{s.function} declares {declared} parameters, the launch has {len(values)}"
                            )
                        cells = (ctypes.c_uint64 * max(1, len(values)))(*[v & 0xFFFFFFFFFFFFFFFF for v in values])
                        addresses = (ctypes.c_void_p * max(1, len(values)))(
                            *[ctypes.addressof(cells) + 8 * i for i in range(len(values))]
                        )
                        self._launches.append((function, s, cells, addresses))
            except BaseException:  # any way out (an interrupt too) frees what was allocated, then goes on
                self._release()
                raise

    def _upload(self, buffer: int, array: np.ndarray) -> None:
        data = np.ascontiguousarray(np.asarray(array).astype(self._dtypes[buffer], copy=False))
        if data.nbytes:
            self.ctx.check(self.ctx.lib.cuMemcpyHtoD_v2(self._pointers[buffer], data.ctypes.data, data.nbytes), "cuMemcpyHtoD")

    def _load(self, module: str, text: str, function: str) -> ctypes.c_void_p:
        """Load one kernel module's PTX (JIT-compiled by the driver) and return its function."""
        lib = self.ctx.lib
        log = ctypes.create_string_buffer(8192)
        options = (ctypes.c_int * 2)(_JIT_ERROR_LOG_BUFFER, _JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(len(log)))
        handle = ctypes.c_void_p()
        result = lib.cuModuleLoadDataEx(ctypes.byref(handle), text.encode() + b"\0", 2, options, values)
        if result != 0:
            detail = log.value.decode(errors="replace").strip()  # the JIT's own message
            error = self.ctx.error(result, f"loading the PTX of @{module}")
            raise CudaRuntimeError(f"{error}: {detail}" if detail else str(error))
        self._modules.append(handle)
        fn = ctypes.c_void_p()
        self.ctx.check(lib.cuModuleGetFunction(ctypes.byref(fn), handle, function.encode()), f"cuModuleGetFunction({function})")
        return fn

    def _run_steps(self, events: list[tuple[_Event, _Event]] | None = None) -> None:
        lib, check = self.ctx.lib, self.ctx.check
        launches = iter(self._launches)
        for i, step in enumerate(self.program.steps):
            if events is not None:
                events[i][0].record()
            if isinstance(step, Launch):
                function, s, _, addresses = next(launches)
                check(lib.cuLaunchKernel(function, *s.grid, *s.block, 0, None, addresses, None), f"launching @{s.module}::@{s.function}")
            elif isinstance(step, Copy):
                src, dst = self.program.buffers[step.source], self.program.buffers[step.target]
                n = min(src.nbytes, dst.nbytes)
                if n:
                    check(lib.cuMemcpyDtoD_v2(self._pointers[dst.id], self._pointers[src.id], n), "cuMemcpyDtoD")
            if events is not None:
                events[i][1].record()

    def _read(self, buffer: int, shape: tuple[int, ...]) -> np.ndarray:
        out = np.empty(shape, dtype=self._dtypes[buffer])
        if out.nbytes:
            self.ctx.check(self.ctx.lib.cuMemcpyDtoH_v2(out.ctypes.data, self._pointers[buffer], out.nbytes), "cuMemcpyDtoH")
        return out

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """Copy `arrays` (already validated against the signature) into the input buffers, run
        the steps and return the results as new arrays."""
        inputs = self.program.inputs
        if len(arrays) != len(inputs):
            raise CudaRuntimeError(f"@{self.program.name} takes {len(inputs)} argument(s), got {len(arrays)}")
        with self.ctx.lock:
            self.ctx.make_current()
            for b, a in zip(inputs, arrays):
                self._upload(b.id, a)
            self._run_steps()
            # The device-to-host copies wait for the launches (same stream); the final
            # synchronize reports a kernel fault that happened after the last copy started.
            results = [self._read(r, shape) for r, shape in zip(self.program.results, self.program.result_shapes)]
            self.ctx.check(self.ctx.lib.cuCtxSynchronize(), "running the kernels")
            return results

    def step_times(self, *arrays: np.ndarray, repeat: int = 10) -> list[float]:
        """Median device time in milliseconds of each step (launch or copy) over `repeat` runs
        of the program on `arrays`, measured with CUDA events around each step (after one
        warm-up run): what `bench/gpu_kernels.py` turns into FLOP/s."""
        self(*arrays)
        with self.ctx.lock:
            self.ctx.make_current()
            events = [(_Event(self.ctx), _Event(self.ctx)) for _ in self.program.steps]
            try:
                samples: list[list[float]] = [[] for _ in self.program.steps]
                for _ in range(max(1, repeat)):
                    self._run_steps(events)
                    for i, (start, end) in enumerate(events):
                        samples[i].append(end.since(start))
                return [float(np.median(s)) for s in samples]
            finally:
                for a, b in events:
                    a.destroy()
                    b.destroy()

    def _release(self) -> None:
        lib = self.ctx.lib
        for ptr in self._pointers.values():
            lib.cuMemFree_v2(ptr)
        self._pointers = {}
        for handle in self._modules:
            lib.cuModuleUnload(handle)
        self._modules = []
        self._launches = []

    def close(self) -> None:
        """Free the program's device memory and modules (also done when it is collected)."""
        with self.ctx.lock:
            self.ctx.make_current()
            self._release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the driver may already be gone
            pass
