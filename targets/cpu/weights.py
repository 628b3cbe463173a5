"""Weights outside the generated code: large constant globals become external symbols that the
JIT resolves to numpy buffers instead of data that LLVM compiles.

What: ``externalize_weights(module)`` takes a module in the LLVM dialect (after ``LLVM_PIPELINE``)
and turns every ``llvm.mlir.global`` constant whose initial value holds at least
``MIN_BYTES`` bytes into an external declaration, returning ``ExternalWeights``: the values as
numpy arrays, in place when the buffer is aligned to 16 bytes or more (the global's alignment is
lowered to the buffer's), else copied to a buffer aligned like the global. ``ExternalWeights.register(engine)``
hands their addresses to the ``ExecutionEngine`` (``raw_register_runtime``: a symbol is an
address, data as well as code) before its first lookup, so the code reads the arrays in place.

Why: LLVM emits a constant global's initializer element by element through its machine-code
streamer; for BERT-base's 437 MB of weights that was 21 s of a 45 s compile, and the O3 passes
walk the same constants again. Declared externally the weights cost nothing to compile, and the
process holds them once (the arrays) instead of twice (the arrays and a JIT copy).

Who must keep them: the arrays live as long as the ``ExternalWeights``, which the compiled
function keeps. Code that leaves the process (``aot.py``, the on-disk cache) needs the bytes
in its library: ``cache.py`` writes them next to its entry stub (``.incbin``); ``aot.py`` does
not externalize.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from typing import Any

import numpy as np
from mlir import ir

from onnxc.importers.tensors import aligned_copy
from onnxc.transforms.onnx_utils import downcast_resource, elements_to_numpy

__all__ = ["MIN_BYTES", "ExternalWeights", "externalize_weights"]

#: Globals smaller than this stay in the generated code: compiling them is cheap, and a small
#: table (a shape, a lookup table) may let LLVM fold loads from it.
MIN_BYTES = 1 << 14


@dataclasses.dataclass
class ExternalWeights:
    """The arrays behind the external globals of one module, by symbol name."""

    arrays: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())

    def register(self, engine: Any) -> None:
        """Resolve each global to its array in ``engine`` (call before the first lookup)."""
        for name, array in self.arrays.items():
            engine.raw_register_runtime(name, ctypes.c_void_p(array.ctypes.data))


def _aligned(array: np.ndarray, alignment: int) -> np.ndarray:
    """``array``'s bytes in a C-contiguous buffer whose address is a multiple of ``alignment``
    (the global's: the generated code may use aligned vector loads on it)."""
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    if flat.ctypes.data % alignment == 0:
        return flat
    return aligned_copy(flat, alignment)


def _element_bytes(t: ir.Type) -> int | None:
    """Bytes per element of an initial value's element type when numpy and LLVM agree on the
    layout (ints of whole bytes, f16/bf16/f32/f64); None otherwise (the global stays)."""
    if isinstance(t, ir.IntegerType):
        w = ir.IntegerType(t).width
        return w // 8 if w in (8, 16, 32, 64) else None
    for cls, size in ((ir.F16Type, 2), (ir.BF16Type, 2), (ir.F32Type, 4), (ir.F64Type, 8)):
        if isinstance(t, cls):
            return size
    return None


def _is_zero(attr: ir.Attribute) -> bool:
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value == 0.0
    if isinstance(attr, ir.IntegerAttr):
        return ir.IntegerAttr(attr).value == 0
    return False


def externalize_weights(module: ir.Module, min_bytes: int = MIN_BYTES) -> ExternalWeights:
    """Make the large constant globals of ``module`` (LLVM dialect) external; see the module
    docstring. A global whose value cannot be read as bytes of the expected size is left as is."""
    weights = ExternalWeights()
    external = ir.Attribute.parse("#llvm.linkage<external>", module.context)
    for op in module.body.operations:
        op = op.operation
        if op.name != "llvm.mlir.global" or "value" not in op.attributes or "constant" not in op.attributes:
            continue
        value = op.attributes["value"]
        value = downcast_resource(value)
        vtype = value.type
        if not isinstance(vtype, ir.ShapedType) or not ir.ShapedType(vtype).has_static_shape:
            continue
        st = ir.ShapedType(vtype)
        size = _element_bytes(st.element_type)
        count = math.prod(st.shape)
        if size is None or count * size < min_bytes:
            continue
        if isinstance(value, ir.DenseElementsAttr) and ir.DenseElementsAttr(value).is_splat and _is_zero(ir.DenseElementsAttr(value).get_splat_value()):
            continue  # zeroinitializer: LLVM puts it in .bss without emitting any bytes
        array = elements_to_numpy(value)
        if array is None or array.size != count or array.dtype.itemsize != size:
            continue
        alignment = ir.IntegerAttr(op.attributes["alignment"]).value if "alignment" in op.attributes else 16
        name = ir.StringAttr(op.attributes["sym_name"]).value
        # The global promises the code `alignment`; a buffer aligned less (but at least to 16
        # bytes) lowers the promise instead of being copied (437 MB for BERT-base): x86 vector
        # loads run as fast unaligned, and LLVM then emits only unaligned ones.
        flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        have = flat.ctypes.data & -flat.ctypes.data if flat.ctypes.data else alignment
        if have < alignment and array.base is None:
            # A fresh array (the bindings copied a dense attribute out): realigning it costs no
            # memory, and 64-byte vector loads of a 16-byte-aligned buffer straddle cache lines.
            weights.arrays[name] = aligned_copy(flat, max(alignment, 64))
        elif have < alignment and have >= 16:
            op.attributes["alignment"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64, module.context), have)
            weights.arrays[name] = flat
        else:
            weights.arrays[name] = _aligned(array, max(alignment, 16))
        del op.attributes["value"]
        op.attributes["linkage"] = external
    return weights
