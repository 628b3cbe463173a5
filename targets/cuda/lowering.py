"""gpu kernels -> NVVM -> PTX, and NVIDIA's `ptxas` as the proof that the PTX is valid.

What:
- `CudaOptions` (chip `sm_80`/`sm_86`/`sm_89`/`sm_90`, PTX feature `+ptxNN`) with `validate()`:
  LLVM's NVPTX backend aborts the whole process (a fatal error, not an exception) when the PTX
  version is too old for the chip (the default PTX 6.0 for sm_80), so the pair is checked here
  against `MIN_PTX` before any MLIR pass sees it.
- `lower_to_ptx(module, options)`: the mapped module's kernels to loops
  (`KERNEL_LOOPS_PIPELINE`), then `gpu-lower-to-nvvm-pipeline{cubin-chip=.. cubin-features=..
  cubin-format=isa}`, which lowers kernels to NVVM and host code to LLVM with GPU runtime calls
  and serializes each `gpu.module` to PTX text inside a `#gpu.object` of a `gpu.binary`.
- `ptx_of(module)`: kernel module name -> PTX text, read from those objects.
- `find_ptxas()` and `assemble(ptx, chip)`: run `ptxas -arch=<chip> -v`; a non-zero exit is a
  `PtxasError` carrying ptxas's message; `-v` gives per-kernel registers, shared/constant memory
  and spills, parsed into `KernelResources`.

Why `isa` and ptxas run by us rather than `cubin-format=bin`: `bin` makes MLIR call ptxas from
PATH itself, hiding which ptxas ran and dropping its resource report; with `isa` the PTX is the
artifact (`--emit ptx`), and the cubin is assembled explicitly with a known ptxas.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from mlir import ir

from onnxc.errors import OnnxcError
from onnxc.targets.gpu.mapping import binary_objects, lower_kernels_to_loops, run_pipeline, workgroup_allocs_to_attributions

__all__ = [
    "CudaLoweringError",
    "CudaOptions",
    "CudaUnavailable",
    "KernelResources",
    "MIN_PTX",
    "PtxasError",
    "PtxasResult",
    "assemble",
    "check_sub_byte_buffers",
    "find_ptxas",
    "lower_to_ptx",
    "nvvm_pipeline",
    "nvvm_pipeline_element",
    "prepare_for_nvvm",
    "register_budget_hints",
    "ptx_of",
]


class CudaLoweringError(OnnxcError):
    """Bad CUDA options, or a mapped module that cannot be lowered to PTX."""


class PtxasError(CudaLoweringError):
    """ptxas is missing or rejected the PTX (its message is included)."""


class CudaUnavailable(CudaLoweringError):
    """No NVIDIA driver or GPU on this machine, or none that can run the compiled chip."""


#: Oldest PTX ISA version (x10) each chip accepts (PTX ISA release notes: sm_80 came with PTX
#: 7.0, sm_86 with 7.1, sm_89 and sm_90 with 7.8).
MIN_PTX: dict[str, int] = {"sm_80": 70, "sm_86": 71, "sm_89": 78, "sm_90": 78}
#: Newest PTX version (x10) we hand to LLVM 22's NVPTX backend and that CUDA 12.9+/13 ptxas reads.
MAX_PTX = 87

_FEATURES = re.compile(r"^\+ptx(\d)(\d)$")


@dataclasses.dataclass(frozen=True)
class CudaOptions:
    """Options of the CUDA target.

    chip: the GPU architecture (`sm_80`, `sm_86`, `sm_89`, `sm_90`); also the tile-size table
        row of `onnxc.targets.gpu.device`.
    features: the PTX ISA version as an LLVM feature, `+ptxNN` (8.0 = `+ptx80`).
    tensor_cores: "auto" (contractions whose element kinds `mma_types` allows and whose shape is
        whole tensor-core tiles run as mma.sync on tensor cores) or "off" (every contraction on
        the SIMT path).
    allow_tf32: also run f32 contractions on tensor cores as tf32 (m16n8k4): the products keep
        10 mantissa bits instead of 23, so this changes results and is off unless asked for.
        f16 contractions use them only when they accumulate in f16 (what upstream's mma.sync
        rewrite builds); ONNX MatMul on f16 accumulates in f32 and stays on the SIMT path.
    dynamic_shapes: "specialize" (default: compiled per call's shapes, `gpu.specialize`) or
        "refuse" (a dynamic dim is refused naming the node), as `VulkanOptions` has it.
    """

    chip: str = "sm_80"
    features: str = "+ptx80"
    tensor_cores: str = "auto"
    allow_tf32: bool = False
    dynamic_shapes: str = "specialize"

    def mma_types(self) -> tuple[str, ...]:
        """The tensor-core element kinds the GPU mapping may use (`mapping.MMA_TYPES` keys)."""
        if self.tensor_cores == "off":
            return ()
        return ("f16", "tf32") if self.allow_tf32 else ("f16",)

    def ptx_version(self) -> int:
        m = _FEATURES.match(self.features)
        if m is None:
            raise CudaLoweringError(f"features must look like '+ptx80' (a PTX ISA version), got {self.features!r}")
        return int(m.group(1)) * 10 + int(m.group(2))

    def validate(self) -> None:
        """Raise `CudaLoweringError` naming the bad field; see the module doc for why."""
        if self.chip not in MIN_PTX:
            raise CudaLoweringError(f"chip must be one of {', '.join(MIN_PTX)}, got {self.chip!r}")
        v = self.ptx_version()
        if v < MIN_PTX[self.chip]:
            lo = MIN_PTX[self.chip]
            raise CudaLoweringError(f"features {self.features}: {self.chip} needs PTX {lo // 10}.{lo % 10} or newer (+ptx{lo})")
        if v > MAX_PTX:
            raise CudaLoweringError(f"features {self.features}: PTX newer than {MAX_PTX // 10}.{MAX_PTX % 10} is not supported")
        if self.tensor_cores not in ("auto", "off"):
            raise CudaLoweringError(f"tensor_cores must be 'auto' or 'off', got {self.tensor_cores!r}")
        if not isinstance(self.allow_tf32, bool):
            raise CudaLoweringError(f"allow_tf32 must be a bool, got {self.allow_tf32!r}")
        if self.dynamic_shapes not in ("refuse", "specialize"):
            raise CudaLoweringError(f"dynamic_shapes must be 'refuse' or 'specialize', got {self.dynamic_shapes!r}")


def nvvm_pipeline_element(options: CudaOptions) -> str:
    """The upstream pipeline element from prepared kernels (loops) to PTX in `gpu.binary`
    objects, validated first (a bad chip/PTX pair would abort the process)."""
    options.validate()
    return f"gpu-lower-to-nvvm-pipeline{{cubin-chip={options.chip} cubin-features={options.features} cubin-format=isa}}"


def nvvm_pipeline(options: CudaOptions) -> str:
    """`nvvm_pipeline_element` as a whole pipeline on builtin.module."""
    return f"builtin.module({nvvm_pipeline_element(options)})"


#: Registers per thread each kernel is guaranteed (`register_budget_hints`): twice what a
#: contraction's 4x4 register tile with its operands and addresses needs, half the hardware's 255.
REGISTER_BUDGET = 128
#: Registers of one SM on sm_80..sm_90.
SM_REGISTERS = 65536


def register_budget_hints(module: ir.Module) -> int:
    """Give every kernel that uses shared memory (workgroup attributions: promoted contraction
    operands, tree reductions) `nvvm.minctasm` (PTX `.minnctapersm`) = max(1, SM_REGISTERS /
    (REGISTER_BUDGET x its threads)): the number of its blocks that must fit on one SM.

    Why: with only `.maxntid` (from the launch's known block size) ptxas -O3 picks a register
    count by its own occupancy heuristic and may spill to get there (the promoted contractions
    were capped at 48 registers with 16-20 bytes of spills on some shapes and chips, none at 64
    on others). An explicit minimum of resident blocks makes the register bound explicit: a
    kernel of 256 threads gets 128 registers (2 blocks per SM), one of 1024 threads 64. Kernels
    without shared memory keep ptxas's choice: given the budget, ptxas unrolls their window
    loops (a convolution went from 30 to 125 registers, a quarter of the occupancy)."""
    from onnxc.targets.gpu.mapping import collect

    def wanted(op: ir.Operation) -> bool:
        if op.name != "gpu.func" or "known_block_size" not in op.attributes or "workgroup_attributions" not in op.attributes:
            return False
        return ir.IntegerAttr(op.attributes["workgroup_attributions"]).value > 0

    count = 0
    for func in collect(module.operation, wanted):
        threads = 1
        for d in ir.DenseI32ArrayAttr(func.attributes["known_block_size"]):
            threads *= int(d)
        blocks = max(1, SM_REGISTERS // (REGISTER_BUDGET * threads))
        func.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), blocks)
        count += 1
    return count


def bool_buffers_as_bytes(module: ir.Module) -> int:
    """Hold every bool (i1) buffer as bytes (i8), in the kernels and on the host: each memref of
    i1 (function and kernel arguments, allocations, views) gets i8 elements, kernel loads are
    truncated back to i1 and stores widened (0/1). Runs after `lower_kernels_to_loops`, when
    kernels touch buffers only through memref.load/store. Why: the NVVM lowering of a load or
    store of i1 asserts (MemRefToLLVM: integral width >= 8), and LLVM stores an i1 memref as one
    byte per element anyway, so the host's data layout (numpy's bool) is unchanged. Bool globals
    (a constant mask) get i8 elements and their values as bytes."""
    from mlir.dialects import arith, memref

    from onnxc.targets.gpu.mapping import collect
    from onnxc.transforms.onnx_utils import downcast_resource, elements_to_numpy

    i1, i8 = ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(8)

    def bool_memref(t: ir.Type) -> bool:
        return isinstance(t, ir.MemRefType) and ir.MemRefType(t).element_type == i1

    def as_bytes(t: ir.Type) -> ir.Type:
        m = ir.MemRefType(t)
        return ir.MemRefType.get(m.shape, i8, m.layout, m.memory_space)

    count = 0
    for op in collect(module.operation, lambda op: op.name == "memref.global" and bool_memref(ir.TypeAttr(op.attributes["type"]).value)):
        # A bool constant (a causal mask): its bytes. An uninitialized global keeps its unit value.
        t = ir.MemRefType(ir.TypeAttr(op.attributes["type"]).value)
        op.attributes["type"] = ir.TypeAttr.get(as_bytes(t))
        init = op.attributes["initial_value"] if "initial_value" in op.attributes else None
        if init is not None and not isinstance(init, ir.UnitAttr):
            # Dense elements or, for a large mask (GPT-2's causal mask), a `dense_resource` blob,
            # which the bindings hand back as a plain Attribute.
            values = elements_to_numpy(downcast_resource(init))
            if values is None:
                raise CudaLoweringError(f"{op.location}: the values of the bool constant {ir.StringAttr(op.attributes['sym_name']).value} cannot be read")
            tensor_type = ir.RankedTensorType.get(t.shape, i8)
            op.attributes["initial_value"] = ir.DenseElementsAttr.get(np.ascontiguousarray(values.astype(bool).astype(np.int8)), type=tensor_type)
        count += 1
    for func in collect(module.operation, lambda op: op.name in ("func.func", "gpu.func") and bool(op.regions[0].blocks)):
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        changed = any(bool_memref(t) for t in ftype.results)
        for arg in func.regions[0].blocks[0].arguments:
            if bool_memref(arg.type):
                arg.set_type(as_bytes(arg.type))
                changed = True
        if changed:
            results = [as_bytes(t) if bool_memref(t) else t for t in ftype.results]
            args = [a.type for a in func.regions[0].blocks[0].arguments]
            func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(args, results))
            count += 1
    # Results of allocations and views (their types follow their source's element type).
    for op in collect(module.operation, lambda op: op.name != "memref.load" and any(bool_memref(r.type) for r in op.results)):
        for r in op.results:
            if bool_memref(r.type):
                r.set_type(as_bytes(r.type))
                count += 1
    for op in collect(module.operation, lambda op: op.name == "memref.load" and op.results[0].type == i1):
        with ir.InsertionPoint(op), op.location:
            byte = memref.LoadOp(op.operands[0], list(op.operands[1:])).result
            bit = arith.TruncIOp(i1, byte).result
        op.results[0].replace_all_uses_with(bit)
        op.erase()
        count += 1
    for op in collect(module.operation, lambda op: op.name == "memref.store" and op.operands[0].type == i1):
        with ir.InsertionPoint(op), op.location:
            byte = arith.ExtUIOp(i8, op.operands[0]).result
            memref.StoreOp(byte, op.operands[1], list(op.operands[2:]))
        op.erase()
        count += 1
    return count


def check_sub_byte_buffers(module: ir.Module) -> None:
    """Refuse kernels that read or write buffers of elements narrower than a byte (bool as i1):
    the NVVM lowering of `memref.load`/`store` asserts on them (`MemRefToLLVM`: integral element
    width >= 8), which would kill the process."""
    from onnxc.targets.gpu.mapping import collect

    def narrow(t: ir.Type) -> bool:
        if not isinstance(t, ir.MemRefType):
            return False
        e = ir.MemRefType(t).element_type
        return isinstance(e, ir.IntegerType) and ir.IntegerType(e).width < 8

    for gmod in collect(module.operation, lambda op: op.name == "gpu.module"):
        for func in collect(gmod, lambda op: op.name == "gpu.func"):
            name = ir.StringAttr(func.attributes["sym_name"]).value
            for i, arg in enumerate(func.regions[0].blocks[0].arguments):
                if narrow(arg.type):
                    raise CudaLoweringError(
                        f"{func.location}: kernel @{name} argument {i} is a buffer of {ir.MemRefType(arg.type).element_type}; "
                        "the CUDA target does not support buffers of elements narrower than a byte (bool) yet"
                    )
    # The host function too: a bool read on the host (an optional's presence flag, a host-side
    # condition) reaches the same assertion through the host's LLVM lowering.
    from onnxc.targets.gpu.mapping import _node_words

    for op in collect(module.operation, lambda op: op.name in ("memref.load", "memref.store")):
        memref = op.operands[0] if op.name == "memref.load" else op.operands[1]
        if narrow(memref.type):
            raise CudaLoweringError(
                f"{_node_words(op)}: {op.name} of a buffer of {ir.MemRefType(memref.type).element_type}; "
                "the CUDA target does not support buffers of elements narrower than a byte (bool) yet"
            )


def fuse_multiply_adds(module: ir.Module) -> int:
    """In kernel bodies of reductions (`linalg.generic` with a reduction loop: contractions and
    convolutions), `acc + a * b` on floats becomes `math.fma(a, b, acc)`: the NVVM lowering keeps
    arith's separate `mul.rn`/`add.rn` (MLIR sets no contraction flag), which takes two
    instructions and rounds twice per multiply-add. fma rounds once (closer to the exact sum,
    as the CPU target's vector FMAs are); elementwise bodies are left as written."""
    from mlir.dialects import math as math_dialect

    from onnxc.targets.gpu.mapping import collect

    reduction = ir.Attribute.parse("#linalg.iterator_type<reduction>")
    count = 0
    for gmod in collect(module.operation, lambda op: op.name == "gpu.module"):
        for generic in collect(gmod, lambda op: op.name == "linalg.generic"):
            if reduction not in list(ir.ArrayAttr(generic.attributes["iterator_types"])):
                continue
            for add in collect(generic, lambda op: op.name == "arith.addf"):
                for i in (0, 1):
                    mul = add.operands[i].owner
                    if isinstance(mul, ir.Block) or mul.operation.name != "arith.mulf":
                        continue
                    mul = mul.operation
                    if len(list(mul.results[0].uses)) != 1 or mul.parent.operation != add.parent.operation:
                        continue
                    with ir.InsertionPoint(add), add.location:
                        fma = math_dialect.FmaOp(mul.operands[0], mul.operands[1], add.operands[1 - i]).result
                    add.results[0].replace_all_uses_with(fma)
                    add.erase()
                    mul.erase()
                    count += 1
                    break
    return count


def prepare_for_nvvm(module: ir.Module) -> ir.Module:
    """The kernel-side steps before `gpu-lower-to-nvvm-pipeline` (in place): workgroup buffers
    (tree reductions' partials, promoted contraction operands) become workgroup attributions,
    i.e. shared memory, each kernel gets its register budget (`register_budget_hints`),
    reduction bodies use fused multiply-adds (`fuse_multiply_adds`), and kernel bodies become
    loops over loads and stores."""
    with module.context, ir.Location.unknown():
        workgroup_allocs_to_attributions(module)
        register_budget_hints(module)
        fuse_multiply_adds(module)
        lower_kernels_to_loops(module, CudaLoweringError)
        bool_buffers_as_bytes(module)
        check_sub_byte_buffers(module)
    return module


def lower_to_ptx(module: ir.Module, options: CudaOptions | None = None) -> ir.Module:
    """Lower a mapped module (see `onnxc.targets.gpu.map_to_gpu`) in place to host LLVM + PTX.

    Not for use inside a running pass manager: `gpu-lower-to-nvvm-pipeline` registers dialects
    when its pass manager starts, which MLIR forbids while another one runs (an assertion), so
    the CUDA target's pipeline text runs it as a native element (`target.py`)."""
    opts = options or CudaOptions()
    pipeline = nvvm_pipeline(opts)  # validates before MLIR sees the options
    prepare_for_nvvm(module)
    with module.context, ir.Location.unknown():
        run_pipeline(module, pipeline, "lowering to NVVM/PTX", CudaLoweringError)
    return module


def ptx_of(module: ir.Module) -> dict[str, str]:
    """Kernel module name -> PTX text, from the `gpu.binary` ops of a lowered module."""
    return {name: data.decode() for name, data in binary_objects(module).items()}


def find_ptxas() -> str | None:
    """ptxas from the `nvidia-cuda-nvcc` package (the `gpu` extra: a known version in CI), else
    from PATH (a machine's CUDA install); None when neither exists."""
    try:
        import nvidia  # namespace package of NVIDIA's wheels

        for base in nvidia.__path__:
            for sub in ("cu13", "cuda_nvcc"):
                cand = Path(base) / sub / "bin" / "ptxas"
                if cand.is_file() and os.access(cand, os.X_OK):
                    return str(cand)
    except ImportError:
        pass
    return shutil.which("ptxas")


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """What `ptxas -v` reports for one kernel."""

    name: str
    registers: int
    shared_bytes: int
    constant_bytes: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int


@dataclasses.dataclass(frozen=True)
class PtxasResult:
    """The assembled cubin and the per-kernel resource report."""

    cubin: bytes
    kernels: tuple[KernelResources, ...]
    log: str


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def _parse_verbose(log: str) -> tuple[KernelResources, ...]:
    kernels: list[KernelResources] = []
    name = None
    stack = (0, 0, 0)
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            name, stack = m.group(1), (0, 0, 0)
        elif (m := _STACK.search(line)) and name:
            stack = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED.search(line)) and name:
            smem = _SMEM.search(line)
            cmem = _CMEM.search(line)
            kernels.append(KernelResources(name, int(m.group(1)), int(smem.group(1)) if smem else 0,
                                           int(cmem.group(1)) if cmem else 0, stack[1], stack[2], stack[0]))
            name = None
    return tuple(kernels)


def assemble(ptx: str, chip: str, ptxas: str | None = None, timeout: float = 120.0) -> PtxasResult:
    """Assemble `ptx` for `chip` with `ptxas -arch=<chip> -v`; `PtxasError` on any failure."""
    if chip not in MIN_PTX:
        raise CudaLoweringError(f"chip must be one of {', '.join(MIN_PTX)}, got {chip!r}")
    tool = ptxas or find_ptxas()
    if tool is None:
        raise PtxasError("ptxas not found: install the 'gpu' extra (nvidia-cuda-nvcc) or put a CUDA toolkit on PATH")
    with tempfile.TemporaryDirectory(prefix="onnxc-ptx-") as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        proc = subprocess.run([tool, f"-arch={chip}", "-v", str(src), "-o", str(out)], capture_output=True, text=True, timeout=timeout)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise PtxasError(f"ptxas -arch={chip} rejected the PTX (exit {proc.returncode}):\n{log.strip()}")
        return PtxasResult(out.read_bytes(), _parse_verbose(log), log)
