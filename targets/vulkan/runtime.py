"""A small Vulkan compute runtime in Python that runs a mapped GPU program (`gpu.host.HostProgram`).

What: `VulkanContext` (instance, the first physical device with a compute queue, a logical
device, a command pool; created once per process and shared) and `VulkanProgram`, built from a
`HostProgram` and the SPIR-V of its kernels. At construction it creates one storage buffer per
program buffer (device memory owned by the program for its lifetime), uploads every constant
(the weights) once, creates one compute pipeline per kernel and one descriptor set per launch
(binding i = the launch's i-th argument, as `convert-gpu-to-spirv` numbers them), and records one
command buffer: the launches and copies in program order, each followed by a memory barrier
(shader/transfer writes -> shader/transfer reads) because a later kernel reads what an earlier
one wrote. A call writes the inputs into their buffers, submits the recorded command buffer,
waits on a fence and reads the results back into fresh numpy arrays.

Why host-visible, host-coherent memory for every buffer: it is what every Vulkan device offers,
and on lavapipe (a CPU driver) it is the only memory there is. A discrete GPU would want
device-local buffers with staging copies for speed; the program structure does not change.

Errors: no Vulkan loader or no device raises `VulkanUnavailable` (an `OnnxcError`) saying so.
The `vulkan` package (cffi bindings of the loader) is imported lazily, so importing onnxc never
needs it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from onnxc.errors import OnnxcError
from onnxc.targets.gpu.device import process_wide
from onnxc.targets.gpu.host import Copy, HostProgram, Launch

__all__ = ["VulkanContext", "VulkanError", "VulkanProgram", "VulkanUnavailable", "spirv_capabilities", "vulkan_context"]


class VulkanError(OnnxcError):
    """A Vulkan call failed while loading or running a program."""


class VulkanUnavailable(VulkanError):
    """No Vulkan loader, driver or compute-capable device on this machine."""


def _vk() -> Any:
    try:
        import vulkan
    except ImportError as e:  # the `vulkan` package is in the `gpu` extra
        raise VulkanUnavailable(f"the Vulkan target needs the 'vulkan' Python package (pip install 'onnxc[gpu]'): {e}") from None
    except OSError as e:  # the package imports the loader library at import time
        raise VulkanUnavailable(f"no Vulkan loader (libvulkan.so.1) on this machine: {e}") from None
    return vulkan


class VulkanContext:
    """Instance, physical device, device, compute queue and command pool (one per process)."""

    def __init__(self) -> None:
        vk = _vk()
        self.vk = vk
        try:
            app = vk.VkApplicationInfo(pApplicationName="onnxc", apiVersion=vk.VK_MAKE_VERSION(1, 1, 0))
            self.instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
            devices = vk.vkEnumeratePhysicalDevices(self.instance)
        except Exception as e:  # vk.VkError subclasses, or the loader finding no ICD
            raise VulkanUnavailable(f"cannot create a Vulkan instance (is a Vulkan driver such as Mesa's lavapipe installed?): {e}") from None
        chosen = None
        for pd in devices:
            for qi, fam in enumerate(vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)):
                if fam.queueFlags & vk.VK_QUEUE_COMPUTE_BIT:
                    chosen = (pd, qi)
                    break
            if chosen:
                break
        if chosen is None:
            raise VulkanUnavailable("no Vulkan device with a compute queue")
        self.physical, self.queue_family = chosen
        # Timestamps (`VulkanProgram.step_times`): valid bits of the compute queue's counter and
        # nanoseconds per tick; 0 valid bits: the queue cannot time steps.
        self.timestamp_bits = int(vk.vkGetPhysicalDeviceQueueFamilyProperties(self.physical)[self.queue_family].timestampValidBits)
        props = vk.vkGetPhysicalDeviceProperties(self.physical)
        self.timestamp_period_ns = float(props.limits.timestampPeriod)
        self.device_name = str(props.deviceName)
        # A driver that runs on the CPU (lavapipe, SwiftShader) gets its own tile sizes
        # (`DEVICES["vulkan_cpu"]`, chosen by `VulkanOptions(device="auto")`).
        self.cpu_device = props.deviceType == vk.VK_PHYSICAL_DEVICE_TYPE_CPU
        self.limits = props.limits
        queue_info = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.queue_family, queueCount=1, pQueuePriorities=[1.0])
        # 64-bit integers (ONNX index tensors) and doubles in shaders need the optional
        # shaderInt64/shaderFloat64 features; f16 buffers and arithmetic need shaderFloat16
        # (VK_KHR_shader_float16_int8) and storageBuffer16BitAccess (VK_KHR_16bit_storage); 8/16-bit
        # integer buffers (and bool buffers as bytes) shaderInt8, shaderInt16 and
        # storageBuffer8BitAccess (VK_KHR_8bit_storage): each enabled where the device has it,
        # and checked against what a program declares.
        extensions = [e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(self.physical, None)]
        available = vk.vkGetPhysicalDeviceFeatures(self.physical)
        self.int64 = bool(available.shaderInt64)
        self.float64 = bool(available.shaderFloat64)
        self.int16 = bool(available.shaderInt16)
        small = self._small_type_features(extensions)
        self.float16 = small["shaderFloat16"]
        self.int8 = small["shaderInt8"]
        self.storage8 = small["storageBuffer8BitAccess"]
        self.storage16 = small["storageBuffer16BitAccess"]
        on = lambda flag: vk.VK_TRUE if flag else vk.VK_FALSE  # noqa: E731
        float16_int8 = vk.VkPhysicalDeviceShaderFloat16Int8Features(
            sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, shaderFloat16=on(self.float16), shaderInt8=on(self.int8)
        )
        storage16 = vk.VkPhysicalDevice16BitStorageFeatures(
            sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, pNext=float16_int8, storageBuffer16BitAccess=on(self.storage16)
        )
        storage8 = vk.VkPhysicalDevice8BitStorageFeatures(
            sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES, pNext=storage16, storageBuffer8BitAccess=on(self.storage8)
        )
        features = vk.VkPhysicalDeviceFeatures2(
            sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=storage8 if all(e in extensions for e in _SMALL_TYPE_EXTENSIONS) else None,
            features=vk.VkPhysicalDeviceFeatures(shaderInt64=on(self.int64), shaderFloat64=on(self.float64), shaderInt16=on(self.int16)),
        )
        # Kernels ask for IEEE infinities and NaNs (SignedZeroInfNanPreserve, lowering.py):
        # VK_KHR_shader_float_controls, enabled when the device has it, says per width whether
        # the device honours that.
        wanted = ("VK_KHR_shader_float_controls",) + _SMALL_TYPE_EXTENSIONS
        enabled = [e for e in wanted if e in extensions]
        self.preserve_inf_nan = self._preserve_inf_nan() if "VK_KHR_shader_float_controls" in enabled else {16: False, 32: False, 64: False}
        self.device = vk.vkCreateDevice(
            self.physical,
            vk.VkDeviceCreateInfo(
                pNext=features, queueCreateInfoCount=1, pQueueCreateInfos=[queue_info],
                enabledExtensionCount=len(enabled), ppEnabledExtensionNames=enabled,
            ),
            None,
        )
        self.queue = vk.vkGetDeviceQueue(self.device, self.queue_family, 0)
        self.pool = vk.vkCreateCommandPool(self.device, vk.VkCommandPoolCreateInfo(queueFamilyIndex=self.queue_family), None)
        self.memory = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        self.lock = threading.Lock()  # one submission at a time on the shared queue

    def _query_errors(self) -> tuple[type[BaseException], ...]:
        """What a Vulkan 1.1 query raises where the loader or the binding lacks it: the driver's
        error codes, a procedure the loader does not export (cffi's AttributeError on its
        library), a structure the `vulkan` package does not define."""
        vk = self.vk
        return (vk.VkError, vk.VkException, vk.ProcedureNotFoundError, AttributeError)

    def _small_type_features(self, extensions: list[str]) -> dict[str, bool]:
        """shaderFloat16, shaderInt8, storageBuffer16BitAccess and storageBuffer8BitAccess of the
        device, read through `vkGetPhysicalDeviceFeatures2` (Vulkan 1.1); all False without the
        three extensions that carry them."""
        vk = self.vk
        names = ("shaderFloat16", "shaderInt8", "storageBuffer16BitAccess", "storageBuffer8BitAccess")
        if not all(e in extensions for e in _SMALL_TYPE_EXTENSIONS):
            return dict.fromkeys(names, False)
        try:
            float16_int8 = vk.VkPhysicalDeviceShaderFloat16Int8Features(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES)
            storage16 = vk.VkPhysicalDevice16BitStorageFeatures(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, pNext=float16_int8)
            storage8 = vk.VkPhysicalDevice8BitStorageFeatures(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES, pNext=storage16)
            vk.vkGetPhysicalDeviceFeatures2(self.physical, vk.VkPhysicalDeviceFeatures2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=storage8))
        except self._query_errors():  # a loader or binding without Vulkan 1.1 queries: none of them
            return dict.fromkeys(names, False)
        return {
            "shaderFloat16": bool(float16_int8.shaderFloat16),
            "shaderInt8": bool(float16_int8.shaderInt8),
            "storageBuffer16BitAccess": bool(storage16.storageBuffer16BitAccess),
            "storageBuffer8BitAccess": bool(storage8.storageBuffer8BitAccess),
        }

    @property
    def narrow_integers(self) -> bool:
        """Whether programs compiled with `VulkanOptions.narrow_integers` run here."""
        return self.int8 and self.int16 and self.storage8 and self.storage16

    def _preserve_inf_nan(self) -> dict[int, bool]:
        """Float width -> whether the device preserves infinities, NaNs and signed zeros when a
        shader asks (`VkPhysicalDeviceFloatControlsProperties`)."""
        vk = self.vk
        try:
            fc = vk.VkPhysicalDeviceFloatControlsProperties(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES)
            vk.vkGetPhysicalDeviceProperties2(
                self.physical, vk.VkPhysicalDeviceProperties2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, pNext=fc)
            )
        except self._query_errors():  # a loader or binding without Vulkan 1.1 queries: not known to preserve
            return {16: False, 32: False, 64: False}
        return {
            16: bool(fc.shaderSignedZeroInfNanPreserveFloat16),
            32: bool(fc.shaderSignedZeroInfNanPreserveFloat32),
            64: bool(fc.shaderSignedZeroInfNanPreserveFloat64),
        }

    def memory_type(self, bits: int) -> int:
        """A host-visible, host-coherent memory type allowed by `bits`."""
        vk = self.vk
        want = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        for i in range(self.memory.memoryTypeCount):
            if bits & (1 << i) and (self.memory.memoryTypes[i].propertyFlags & want) == want:
                return i
        raise VulkanError("no host-visible coherent memory type for a storage buffer")


_shared_context = process_wide(VulkanContext)


def vulkan_context() -> VulkanContext:
    """The process's shared `VulkanContext`, created on first use."""
    return _shared_context()


class _Buffer:
    """A storage buffer and its memory, mapped on demand."""

    def __init__(self, ctx: VulkanContext, nbytes: int) -> None:
        vk = ctx.vk
        self.ctx = ctx
        # Rounded up to whole 32-bit words: a zero-sized buffer is invalid in Vulkan, and kernels
        # compiled without `narrow_integers` address bool (byte) buffers as arrays of i32 words
        # (SPIR-V's emulation of 8-bit storage), so a word's tail past the data must still be inside the binding's range
        # (else robust buffer access drops the whole word's write).
        self.nbytes = max(4, -(-nbytes // 4) * 4)
        usage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        self.buffer = vk.vkCreateBuffer(ctx.device, vk.VkBufferCreateInfo(size=self.nbytes, usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        req = vk.vkGetBufferMemoryRequirements(ctx.device, self.buffer)
        info = vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=ctx.memory_type(req.memoryTypeBits))
        self.memory = vk.vkAllocateMemory(ctx.device, info, None)
        vk.vkBindBufferMemory(ctx.device, self.buffer, self.memory, 0)

    def write(self, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array).tobytes()
        vk = self.ctx.vk
        mapped = vk.vkMapMemory(self.ctx.device, self.memory, 0, self.nbytes, 0)
        mapped[: len(data)] = data
        vk.vkUnmapMemory(self.ctx.device, self.memory)

    def read(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        vk = self.ctx.vk
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        mapped = vk.vkMapMemory(self.ctx.device, self.memory, 0, self.nbytes, 0)
        out = np.frombuffer(bytes(mapped[:n]), dtype=dtype).reshape(shape).copy()
        vk.vkUnmapMemory(self.ctx.device, self.memory)
        return out

    def destroy(self) -> None:
        vk = self.ctx.vk
        vk.vkDestroyBuffer(self.ctx.device, self.buffer, None)
        vk.vkFreeMemory(self.ctx.device, self.memory, None)


#: SPIR-V `OpCapability` opcode and the capabilities that need an optional device feature.
_OP_CAPABILITY = 17
_CAPABILITY_FLOAT16 = 9
_CAPABILITY_FLOAT64 = 10
_CAPABILITY_INT64 = 11
_CAPABILITY_INT16 = 22
_CAPABILITY_INT8 = 39
_CAPABILITY_STORAGE_BUFFER_16BIT = 4433  # StorageBuffer16BitAccess (SPV_KHR_16bit_storage)
_CAPABILITY_STORAGE_BUFFER_8BIT = 4448  # StorageBuffer8BitAccess (SPV_KHR_8bit_storage)
#: The device extensions behind shaderFloat16/shaderInt8 and 16/8-bit storage on a Vulkan 1.1 device.
_SMALL_TYPE_EXTENSIONS = ("VK_KHR_shader_float16_int8", "VK_KHR_16bit_storage", "VK_KHR_8bit_storage")
_CAPABILITY_PRESERVE_INF_NAN = 4466  # SignedZeroInfNanPreserve (SPV_KHR_float_controls)


def spirv_capabilities(words: bytes) -> set[int]:
    """The capabilities a SPIR-V binary declares (its `OpCapability` instructions, which precede
    every other instruction but OpExtension/OpExtInstImport/OpMemoryModel): what the device
    must have, read from the module itself rather than guessed from buffer types (a kernel may
    compute in f64 between f32 buffers)."""
    code = np.frombuffer(words, dtype=np.uint32)
    caps: set[int] = set()
    i = 5  # after the header: magic, version, generator, bound, schema
    while i < len(code):
        count, opcode = int(code[i]) >> 16, int(code[i]) & 0xFFFF
        if count == 0:
            break  # malformed: spirv-val's business, not a reason to loop forever
        if opcode == _OP_CAPABILITY:
            caps.add(int(code[i + 1]))
        elif opcode not in (10, 11, 14):  # OpExtension, OpExtInstImport, OpMemoryModel
            break
        i += count
    return caps


class VulkanProgram:
    """A `HostProgram` loaded on a Vulkan device; call it with the input arrays in order."""

    def __init__(self, program: HostProgram, spirv: Mapping[str, bytes], ctx: VulkanContext | None = None) -> None:
        from onnxc.targets.cpu.abi import numpy_dtype

        self.program = program
        self.ctx = ctx or vulkan_context()
        vk = self.ctx.vk
        declared = {c for words in spirv.values() for c in spirv_capabilities(words)}
        for cap, feature, have, what in (
            (_CAPABILITY_INT64, "shaderInt64", self.ctx.int64, "64-bit integers"),
            (_CAPABILITY_FLOAT64, "shaderFloat64", self.ctx.float64, "f64 (double) arithmetic"),
            (_CAPABILITY_FLOAT16, "shaderFloat16", self.ctx.float16, "f16 (half) arithmetic"),
            (_CAPABILITY_STORAGE_BUFFER_16BIT, "storageBuffer16BitAccess", self.ctx.storage16, "16-bit buffers"),
            (_CAPABILITY_INT8, "shaderInt8", self.ctx.int8, "8-bit integer arithmetic"),
            (_CAPABILITY_INT16, "shaderInt16", self.ctx.int16, "16-bit integer arithmetic"),
            (_CAPABILITY_STORAGE_BUFFER_8BIT, "storageBuffer8BitAccess", self.ctx.storage8, "8-bit buffers (int8, uint8, bool)"),
        ):
            if cap in declared and not have:
                raise VulkanUnavailable(f"@{program.name} uses {what}; the Vulkan device {self.ctx.device_name} lacks {feature}")
        widths = [32] + [64] * (_CAPABILITY_FLOAT64 in declared) + [16] * (_CAPABILITY_FLOAT16 in declared)
        if _CAPABILITY_PRESERVE_INF_NAN in declared and not all(self.ctx.preserve_inf_nan[w] for w in widths):
            raise VulkanUnavailable(
                f"@{program.name}: the Vulkan device {self.ctx.device_name} does not guarantee IEEE infinities and NaNs "
                "(shaderSignedZeroInfNanPreserve of VK_KHR_shader_float_controls), which the kernels ask for"
            )
        dev = self.ctx.device
        # index buffers (Det's pivot order between kernels) hold 32-bit integers: the kernels are
        # converted with 32-bit indices (`use-64bit-index=false`).
        self._dtypes = {b.id: np.dtype(np.int32) if b.element_type == "index" else numpy_dtype(b.element_type) for b in program.buffers}
        self._buffers: dict[int, _Buffer] = {}
        self._objects: list[tuple[str, Any]] = []  # (destroy function name, handle), destroyed in reverse
        try:
            for b in program.buffers:
                self._buffers[b.id] = _Buffer(self.ctx, b.nbytes)
                if b.kind == "constant":
                    assert b.value is not None
                    self._buffers[b.id].write(b.value.astype(self._dtypes[b.id], copy=False))  # weights, uploaded once
            launches = [s for s in program.steps if isinstance(s, Launch)]
            pool_size = vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=max(1, sum(len(s.args) for s in launches)))
            self._pool = vk.vkCreateDescriptorPool(dev, vk.VkDescriptorPoolCreateInfo(maxSets=max(1, len(launches)), poolSizeCount=1, pPoolSizes=[pool_size]), None)
            self._objects.append(("vkDestroyDescriptorPool", self._pool))
            pipelines: dict[str, tuple[Any, Any]] = {}
            sets: list[Any] = []
            for s in launches:
                if s.module not in pipelines:
                    pipelines[s.module] = self._pipeline(s, spirv)
                layout, _ = pipelines[s.module]
                dsl = self._set_layouts[s.module]
                ds = vk.vkAllocateDescriptorSets(dev, vk.VkDescriptorSetAllocateInfo(descriptorPool=self._pool, descriptorSetCount=1, pSetLayouts=[dsl]))[0]
                writes = [
                    vk.VkWriteDescriptorSet(dstSet=ds, dstBinding=i, descriptorCount=1, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                            pBufferInfo=[vk.VkDescriptorBufferInfo(buffer=self._buffers[a].buffer, offset=0, range=self._buffers[a].nbytes)])
                    for i, a in enumerate(s.args)
                ]
                vk.vkUpdateDescriptorSets(dev, len(writes), writes, 0, None)
                sets.append(ds)
            self._record(pipelines, sets)
            self._fence = vk.vkCreateFence(dev, vk.VkFenceCreateInfo(), None)
            self._objects.append(("vkDestroyFence", self._fence))
        except vk.VkError as e:
            self.close()
            raise VulkanError(f"Vulkan: cannot load @{program.name}: {type(e).__name__}") from None

    _set_layouts: dict[str, Any]

    def _pipeline(self, launch: Launch, spirv: Mapping[str, bytes]) -> tuple[Any, Any]:
        vk = self.ctx.vk
        dev = self.ctx.device
        if not hasattr(self, "_set_layouts"):
            self._set_layouts = {}
        code = spirv.get(launch.module)
        if code is None:
            raise VulkanError(f"no SPIR-V for kernel module @{launch.module}")
        shader = vk.vkCreateShaderModule(dev, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
        self._objects.append(("vkDestroyShaderModule", shader))
        bindings = [vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=1,
                                                    stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT) for i in range(len(launch.args))]
        dsl = vk.vkCreateDescriptorSetLayout(dev, vk.VkDescriptorSetLayoutCreateInfo(bindingCount=len(bindings), pBindings=bindings), None)
        self._objects.append(("vkDestroyDescriptorSetLayout", dsl))
        self._set_layouts[launch.module] = dsl
        layout = vk.vkCreatePipelineLayout(dev, vk.VkPipelineLayoutCreateInfo(setLayoutCount=1, pSetLayouts=[dsl]), None)
        self._objects.append(("vkDestroyPipelineLayout", layout))
        stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=shader, pName=launch.function)
        pipeline = vk.vkCreateComputePipelines(dev, None, 1, [vk.VkComputePipelineCreateInfo(stage=stage, layout=layout)], None)[0]
        self._objects.append(("vkDestroyPipeline", pipeline))
        return layout, pipeline

    def _record(self, pipelines: dict[str, tuple[Any, Any]], sets: list[Any]) -> None:
        self._pipelines, self._sets = pipelines, sets  # (kept for `step_times`' own recording)
        self._cmd = self._record_steps()

    def _record_steps(self, timestamps: Any = None) -> Any:
        """A command buffer running every step in order; with a timestamp query pool, query 0
        is written before the first step and query i + 1 after step i has finished."""
        vk = self.ctx.vk
        cmd = vk.vkAllocateCommandBuffers(self.ctx.device, vk.VkCommandBufferAllocateInfo(
            commandPool=self.ctx.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo())
        stages = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
        access = vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT | vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_TRANSFER_READ_BIT
        # Each step may read what any earlier one wrote: a full memory barrier between steps.
        barrier = vk.VkMemoryBarrier(srcAccessMask=access, dstAccessMask=access)
        if timestamps is not None:
            vk.vkCmdResetQueryPool(cmd, timestamps, 0, len(self.program.steps) + 1)
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamps, 0)
        launch_index = 0
        for i, step in enumerate(self.program.steps):
            if isinstance(step, Launch):
                layout, pipeline = self._pipelines[step.module]
                vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
                vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, [self._sets[launch_index]], 0, None)
                vk.vkCmdDispatch(cmd, *step.grid)
                launch_index += 1
            elif isinstance(step, Copy):
                src, dst = self._buffers[step.source], self._buffers[step.target]
                vk.vkCmdCopyBuffer(cmd, src.buffer, dst.buffer, 1, [vk.VkBufferCopy(srcOffset=0, dstOffset=0, size=min(src.nbytes, dst.nbytes))])
            vk.vkCmdPipelineBarrier(cmd, stages, stages, 0, 1, [barrier], 0, None, 0, None)
            if timestamps is not None:
                vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamps, i + 1)
        vk.vkEndCommandBuffer(cmd)
        return cmd

    def _submit(self, cmd: Any) -> None:
        """Run a recorded command buffer on the queue and wait for it (the caller holds the
        context's lock)."""
        vk = self.ctx.vk
        vk.vkResetFences(self.ctx.device, 1, [self._fence])
        vk.vkQueueSubmit(self.ctx.queue, 1, [vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[cmd])], self._fence)
        vk.vkWaitForFences(self.ctx.device, 1, [self._fence], vk.VK_TRUE, 0xFFFFFFFFFFFFFFFF)

    def step_times(self, *arrays: np.ndarray, repeat: int = 10) -> list[float]:
        """Median device time in milliseconds of each step (launch or copy) over `repeat` runs
        of the program on `arrays` (after one warm-up call), from timestamps the queue writes
        between steps: where `bench/gpu_models.py --kernels` finds a model's slowest kernels.
        `VulkanError` when the device's compute queue has no timestamps."""
        vk = self.ctx.vk
        if not self.ctx.timestamp_bits:
            raise VulkanError(f"the Vulkan device {self.ctx.device_name} cannot time steps (its compute queue has no timestamps)")
        self(*arrays)
        n = len(self.program.steps) + 1
        dev = self.ctx.device
        pool = vk.vkCreateQueryPool(dev, vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=n), None)
        cmd = None
        try:
            cmd = self._record_steps(pool)
            data = vk.ffi.new("uint64_t[]", n)
            samples: list[list[float]] = [[] for _ in self.program.steps]
            mask = (1 << self.ctx.timestamp_bits) - 1  # the counter wraps at its valid bits
            with self.ctx.lock:
                for _ in range(max(1, repeat)):
                    self._submit(cmd)
                    vk.vkGetQueryPoolResults(dev, pool, 0, n, 8 * n, data, 8, vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
                    for i in range(n - 1):
                        ticks = (int(data[i + 1]) - int(data[i])) & mask
                        samples[i].append(ticks * self.ctx.timestamp_period_ns / 1e6)
            return [float(np.median(s)) for s in samples]
        finally:
            if cmd is not None:
                vk.vkFreeCommandBuffers(dev, self.ctx.pool, 1, [cmd])
            vk.vkDestroyQueryPool(dev, pool, None)

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """Write `arrays` (already validated against the signature) into the input buffers, run
        the recorded commands and return the results as new arrays."""
        inputs = self.program.inputs
        if len(arrays) != len(inputs):
            raise VulkanError(f"@{self.program.name} takes {len(inputs)} argument(s), got {len(arrays)}")
        with self.ctx.lock:
            for b, a in zip(inputs, arrays):
                self._buffers[b.id].write(np.asarray(a, dtype=self._dtypes[b.id]))
            self._submit(self._cmd)
            return [self._buffers[r].read(self._dtypes[r], shape) for r, shape in zip(self.program.results, self.program.result_shapes)]

    def close(self) -> None:
        """Free the program's Vulkan objects and device memory (also done when it is collected)."""
        vk = self.ctx.vk
        dev = self.ctx.device
        if getattr(self, "_cmd", None) is not None:
            vk.vkFreeCommandBuffers(dev, self.ctx.pool, 1, [self._cmd])
            self._cmd = None
        for fn, handle in reversed(self._objects):
            getattr(vk, fn)(dev, handle, None)
        self._objects = []
        for b in self._buffers.values():
            b.destroy()
        self._buffers = {}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the loader may already be gone
            pass
