"""gpu kernels -> SPIR-V for Vulkan: the `gpu-to-spirv` stage of the Vulkan target.

What: `lower_to_spirv(module, options)` takes a module mapped by `onnxc.targets.gpu.map_to_gpu`
and, in place: lowers the kernel bodies to loops over scalar loads/stores (`convert-linalg-to-loops`,
`fold-memref-alias-ops` so subviews become index arithmetic, `lower-affine`), attaches the Vulkan
target environment (`spirv-attach-target{... client_api=Vulkan}`), gives each kernel its
`spirv.entry_point_abi` (the workgroup size its launch uses), converts to the SPIR-V dialect
(`convert-gpu-to-spirv{use-64bit-index=false}`: 32-bit indices, what Vulkan shaders address
with), lowers ABI attributes and sets the version/capabilities/extensions
(`spirv-lower-abi-attrs`, `spirv-update-vce`), and serializes with `gpu-module-to-binary`.
`spirv_binaries(module)` then returns each kernel module's SPIR-V words.

Why the `spirv.module` is moved into its `gpu.module`: for a Shader (Vulkan) target
`convert-gpu-to-spirv` puts the `spirv.module` beside the `gpu.module`, while the SPIR-V target's
serializer looks for it inside; moving it is what makes `gpu-module-to-binary` work (checked on
MLIR 22.1.8: without it, "An error happened while serializing the module").

Element types: Vulkan storage buffers of 32-bit scalars need no extra capability; i64 needs the
Int64 capability, f64 Float64, f16 Float16 and StorageBuffer16BitAccess, 8/16-bit integers (and
bool buffers, stored as bytes) Int8/Int16 and StorageBuffer8BitAccess, which the target
environment allows (`spirv-update-vce` then requires them only in modules that use them) and the
runtime checks against the device's features (lavapipe has them all): a device without one
refuses the program before anything runs. Other element types (bf16, float8) are refused by
`check_element_types` with the buffer named.
"""

from __future__ import annotations

import dataclasses
import re

from mlir import ir

from onnxc.errors import OnnxcError
from onnxc.targets.gpu.mapping import binary_objects, collect, kernel_ops, lower_kernels_to_loops, run_pipeline

from .f64_math import f64_math_to_arith

__all__ = ["NARROW_INTEGER_TYPES", "SUPPORTED_ELEMENT_TYPES", "VulkanOptions", "VulkanLoweringError", "lower_to_spirv", "serialize_spirv", "spirv_binaries"]


class VulkanLoweringError(OnnxcError):
    """The mapped module cannot be expressed as Vulkan SPIR-V."""


#: Element types of buffers the Vulkan target accepts: 32-bit scalars need no optional device
#: feature; i64 (ONNX indices: Gather, ArgMax, Hardmax) needs `shaderInt64` and f64 (DFT, Det,
#: f64 models) `shaderFloat64`, which the runtime enables where the device has them and checks
#: before loading a program whose SPIR-V declares the capability.
SUPPORTED_ELEMENT_TYPES = ("f32", "f16", "i32", "i64", "f64", "i1", "i8", "i16")  # and index buffers inside a program (32-bit)
#: The element types that need 8/16-bit integer storage (`VulkanOptions.narrow_integers`).
NARROW_INTEGER_TYPES = ("i8", "i16")

_VERSION = re.compile(r"^v1\.[0-6]$")


@dataclasses.dataclass(frozen=True)
class VulkanOptions:
    """Options of the Vulkan target.

    device: the `onnxc.targets.gpu.device.DEVICES` row whose tile sizes the mapping uses, or
        "auto" (default): `vulkan_cpu` when `onnxc.compile` runs on a Vulkan driver that runs on
        the CPU (lavapipe, SwiftShader), else `vulkan`; the stages without a device
        (`--emit gpu|spirv`, onnx-opt) use `vulkan`.
    spirv_version: the SPIR-V version of the target environment (`v1.0`..`v1.6`); v1.0 runs on
        every Vulkan 1.0+ driver.
    dynamic_shapes: "specialize" (default: each call's shapes are made static and compiled once
        per distinct shape, `targets/gpu/specialize.py`) or "refuse" (a dynamic dim is refused
        naming the node, for a caller who wants one ahead-of-time program or none). The default
        since 2026-11-29, after the hub architectures with dynamic axes (EfficientNet, T5,
        Whisper) and the static ones matched the CPU target on Vulkan
        (test_gpu_differential.py); it was opt-in while the first differential run's mapping bug
        (a reduction gathering by its reduction index split into a tree) was open. Inputs whose
        values set shapes (Resize's scales) are specialized either way.
    narrow_integers: 8- and 16-bit integer buffers and arithmetic (Int8, Int16,
        StorageBuffer8BitAccess: ONNX int8/uint8/int16/uint16 tensors, and bool buffers as
        bytes). False: bool buffers are stored in 32-bit words through upstream's emulation and
        8/16-bit integer tensors are refused, for a device without `storageBuffer8BitAccess`,
        `shaderInt8` or `shaderInt16`; `VulkanTarget.compile` turns it off itself on such a device.
    """

    device: str = "auto"
    spirv_version: str = "v1.0"
    dynamic_shapes: str = "specialize"
    narrow_integers: bool = True

    def validate(self) -> None:
        """Raise `VulkanLoweringError` naming the bad field (checked before MLIR sees it)."""
        from onnxc.targets.gpu.device import device_for

        if not _VERSION.match(self.spirv_version):
            raise VulkanLoweringError(f"spirv_version must be v1.0 .. v1.6, got {self.spirv_version!r}")
        if self.dynamic_shapes not in ("refuse", "specialize"):
            raise VulkanLoweringError(f"dynamic_shapes must be 'refuse' or 'specialize', got {self.dynamic_shapes!r}")
        if not isinstance(self.narrow_integers, bool):
            raise VulkanLoweringError(f"narrow_integers must be True or False, got {self.narrow_integers!r}")
        if self.device != "auto":
            device_for(self.device)

    def device_row(self, cpu_device: bool = False) -> str:
        """The `DEVICES` row the mapping uses: `device`, "auto" resolved for a device that is
        (`cpu_device`) or is not a CPU driver."""
        if self.device != "auto":
            return self.device
        return "vulkan_cpu" if cpu_device else "vulkan"


def spirv_pipeline(options: VulkanOptions) -> str:
    """The native pipeline from prepared kernels to SPIR-V modules (before serialization). The
    target environment allows every optional capability the runtime can enable; `spirv-update-vce`
    then requires in each module only those it uses. Without `narrow_integers` the 8/16-bit
    integer ones are left out, and the conversion stores bool buffers in 32-bit words."""
    caps = ["Shader", "Int64", "Float64", "Float16", "StorageBuffer16BitAccess", "SignedZeroInfNanPreserve"]
    exts = ["SPV_KHR_storage_buffer_storage_class", "SPV_KHR_float_controls", "SPV_KHR_16bit_storage"]
    if options.narrow_integers:
        caps += ["Int8", "Int16", "StorageBuffer8BitAccess"]
        exts += ["SPV_KHR_8bit_storage"]
    return (
        "builtin.module("
        f"spirv-attach-target{{ver={options.spirv_version} caps={','.join(caps)} exts={','.join(exts)} client_api=Vulkan}},"
        "gpu.module(convert-math-to-spirv),"
        "convert-gpu-to-spirv{use-64bit-index=false},"
        "spirv.module(spirv-lower-abi-attrs))"
    )


#: After `_preserve_inf_nan`: the version/capabilities/extensions each module needs.
UPDATE_VCE_PIPELINE = "builtin.module(spirv.module(spirv-update-vce))"


def _preserve_inf_nan(module: ir.Module) -> int:
    """Give every kernel the `SignedZeroInfNanPreserve` execution mode (SPV_KHR_float_controls)
    for each float width it uses: without it Vulkan lets the driver assume that no value is NaN
    or infinite, and lavapipe did (IsNan(inf) was true, an ordered compare with NaN true), so
    IsNaN/IsInf and NaN-propagating Max/Min could answer wrong. The runtime checks the device's
    `shaderSignedZeroInfNanPreserveFloat32/64` before loading a module that asks for it."""
    count = 0
    for smod in collect(module.operation, lambda op: op.name == "spirv.module"):
        widths = [32] + [w for w, t in ((64, ir.F64Type), (16, ir.F16Type)) if collect(smod, lambda op, t=t: any(isinstance(r.type, t) for r in op.results))]
        for mode in collect(smod, lambda op: op.name == "spirv.ExecutionMode"):
            if str(mode.attributes["execution_mode"]) != "#spirv.execution_mode<LocalSize>":
                continue
            for width in widths:
                with ir.InsertionPoint.after(mode), mode.location:
                    ir.Operation.create(
                        "spirv.ExecutionMode",
                        attributes={
                            "execution_mode": ir.Attribute.parse("#spirv.execution_mode<SignedZeroInfNanPreserve>"),
                            "fn": mode.attributes["fn"],
                            "values": ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(32), width)]),
                        },
                    )
                count += 1
    return count


def _gpu_modules(module: ir.Module) -> dict[str, ir.Operation]:
    return {
        ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
        for op in module.body.operations
        if op.operation.name == "gpu.module"
    }


def _set_entry_point_abis(module: ir.Module) -> None:
    """`spirv.entry_point_abi<workgroup_size = ...>` on each kernel, from its launch's sizes
    (`known_block_size`, set by the mapping)."""
    for gmod in _gpu_modules(module).values():
        for f in gmod.regions[0].blocks[0].operations:
            f = f.operation
            if f.name != "gpu.func" or "known_block_size" not in f.attributes:
                continue
            x, y, z = list(ir.DenseI32ArrayAttr(f.attributes["known_block_size"]))
            f.attributes["spirv.entry_point_abi"] = ir.Attribute.parse(f"#spirv.entry_point_abi<workgroup_size = [{x}, {y}, {z}]>")


def check_element_types(module: ir.Module, narrow_integers: bool = True) -> None:
    """Refuse kernel arguments whose element type the Vulkan target does not store (8/16-bit
    integers only with `narrow_integers`)."""
    for gmod in _gpu_modules(module).values():
        for f in gmod.regions[0].blocks[0].operations:
            f = f.operation
            if f.name != "gpu.func":
                continue
            ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
            # The supported element types as types, compared by value (not by printed text).
            supported = [ir.F32Type.get(), ir.F16Type.get(), ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64), ir.F64Type.get(), ir.IntegerType.get_signless(1), ir.IndexType.get()]
            if narrow_integers:
                supported += [ir.IntegerType.get_signless(8), ir.IntegerType.get_signless(16)]
            allowed = [t for t in SUPPORTED_ELEMENT_TYPES if narrow_integers or t not in NARROW_INTEGER_TYPES]
            for i, t in enumerate(ftype.inputs):
                elem = ir.MemRefType(t).element_type if isinstance(t, ir.MemRefType) else t
                if not any(elem == s for s in supported):
                    et = str(elem)  # for the message only
                    name = ir.StringAttr(f.attributes["sym_name"]).value
                    raise VulkanLoweringError(
                        f"{f.location}: kernel @{name} argument {i} has element type {et}; the Vulkan target supports {', '.join(allowed)} buffers"
                    )


def _workgroup_memory_to_storage_class(module: ir.Module) -> int:
    """Give kernel-local buffers their SPIR-V storage class directly: workgroup-memory allocs
    (tree reductions' partials) `Workgroup`, per-thread allocas `Function`.
    `convert-gpu-to-spirv` maps the default memory space to StorageBuffer and refuses
    `#gpu.address_space<workgroup>` on a `memref.alloc` ("failed to legalize memory space"), while
    an alloc in `#spirv.storage_class<Workgroup>` becomes a Workgroup variable and an alloca in
    `Function` a function variable. Runs after `lower_kernels_to_loops`, when only loads and stores
    use them."""
    workgroup = ir.Attribute.parse("#gpu.address_space<workgroup>")
    classes = {"memref.alloc": ir.Attribute.parse("#spirv.storage_class<Workgroup>"), "memref.alloca": ir.Attribute.parse("#spirv.storage_class<Function>")}

    def local(o: ir.Operation) -> bool:
        if o.name not in classes:
            return False
        space = ir.MemRefType(o.results[0].type).memory_space
        return (space is not None and space == workgroup) if o.name == "memref.alloc" else space is None

    found = kernel_ops(module, local)
    for op in found:
        t = ir.MemRefType(op.results[0].type)
        for use in op.results[0].uses:
            if use.owner.name not in ("memref.load", "memref.store"):
                raise VulkanLoweringError(f"{op.location}: kernel-local buffer used by {use.owner.name}")
        op.results[0].set_type(ir.MemRefType.get(t.shape, t.element_type, t.layout, classes[op.name]))
    return len(found)


def _private_index_buffers_to_i32(module: ir.Module) -> int:
    """Per-thread (`memref.alloca`) buffers of `index` in kernels become buffers of i32 with
    `arith.index_cast` at their loads and stores: the SPIR-V conversion turns index into i32
    (`use-64bit-index=false`) everywhere but in a Function-storage variable, which it refuses
    ("failed to legalize memref.alloca": Det's pivot order)."""
    from mlir.dialects import arith, memref

    index, i32 = ir.IndexType.get(), ir.IntegerType.get_signless(32)
    found = kernel_ops(module, lambda op: op.name == "memref.alloca" and ir.MemRefType(op.results[0].type).element_type == index)
    for op in found:
        t = ir.MemRefType(op.results[0].type)
        users = [u.owner for u in op.results[0].uses]
        if any(u.name not in ("memref.load", "memref.store") for u in users):
            continue  # left for the conversion to refuse, naming the node
        op.results[0].set_type(ir.MemRefType.get(t.shape, i32, t.layout, t.memory_space))
        for u in users:
            with ir.InsertionPoint(u), u.location:
                if u.name == "memref.load":
                    narrow = memref.LoadOp(u.operands[0], list(u.operands[1:])).result
                    u.results[0].replace_all_uses_with(arith.IndexCastOp(index, narrow).result)
                else:
                    memref.StoreOp(arith.IndexCastOp(i32, u.operands[0]).result, u.operands[1], list(u.operands[2:]))
            u.erase()
    return len(found)


def _nest_spirv_modules(module: ir.Module) -> None:
    """Move each `spirv.module @__spv__<name>` into `gpu.module @<name>` (see the module doc)."""
    gmods = _gpu_modules(module)
    for op in list(module.body.operations):
        op = op.operation
        if op.name != "spirv.module":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value.removeprefix("__spv__")
        target = gmods.get(name)
        if target is None:
            raise VulkanLoweringError(f"no gpu.module @{name} for {op.name} @__spv__{name}")
        body = target.regions[0].blocks[0]
        op.move_before(body.operations[0])


def lower_to_spirv(module: ir.Module, options: VulkanOptions | None = None, *, serialize: bool = True) -> ir.Module:
    """Lower a mapped module's kernels to SPIR-V in place (see the module doc); `serialize=False`
    stops at the SPIR-V dialect (the `spirv` stage of `--emit`)."""
    opts = options or VulkanOptions()
    opts.validate()
    with module.context, ir.Location.unknown():
        check_element_types(module, opts.narrow_integers)
        lower_kernels_to_loops(module, VulkanLoweringError)
        f64_math_to_arith(module)
        _private_index_buffers_to_i32(module)
        _workgroup_memory_to_storage_class(module)
        _set_entry_point_abis(module)
        run_pipeline(module, spirv_pipeline(opts), "conversion to SPIR-V", VulkanLoweringError)
        _preserve_inf_nan(module)
        run_pipeline(module, UPDATE_VCE_PIPELINE, "SPIR-V version/capabilities", VulkanLoweringError)
        _nest_spirv_modules(module)
    if serialize:
        serialize_spirv(module)
    return module


def serialize_spirv(module: ir.Module) -> ir.Module:
    """Serialize the SPIR-V modules of a module lowered by `lower_to_spirv(serialize=False)`
    into `gpu.binary` ops (in place)."""
    with module.context, ir.Location.unknown():
        _nest_spirv_modules(module)  # none left at the top level after lower_to_spirv: a no-op
        run_pipeline(module, "builtin.module(gpu-module-to-binary)", "SPIR-V serialization", VulkanLoweringError)
    return module


def spirv_binaries(module: ir.Module) -> dict[str, bytes]:
    """Kernel module name -> SPIR-V binary, from the `gpu.binary` ops of a serialized module."""
    return binary_objects(module)
