"""ImageDecoder: encoded image bytes -> an [H, W, C] uint8 tensor, decoded at run time by a call out
of the generated code into onnxc's run-time decoder (Pillow, `onnxc.targets.cpu.runtime_hooks`).

Why a call out: decoding JPEG, PNG, WebP, JPEG 2000, TIFF, BMP and PNM is the job of a
maintained image library, not of generated loops; the compiled code only sizes the output and
hands over the buffers. The output shape comes from the bytes, so it uses the data-dependent
output mechanism of `data_dependent.py` ("upper bound, then a view"): the size is computed in the
generated code (here by the first call), the output allocated at that size and filled by the
second call, which also says how many rows and columns it wrote; the result is the
`tensor.extract_slice` of those. It is a dynamically shaped tensor like any other, at the
function boundary and for the ops that consume it.

What the lowering builds, per node, is one private function `@onnxc_image_decoder_<k>(tensor<?xi8>)
-> tensor<?x?xCxi8>` (kept whole, so that no outlining splits its buffers across functions) that
calls two external functions, declared with `llvm.emit_c_interface` so their memref arguments
arrive as pointers to descriptors:

    @onnxc_image_decoder_size(data: memref<?xi8, strided<[?], offset: ?>>, dims: memref<2xi64>, site: i64)
    @onnxc_image_decoder_decode(data, out: memref<?x?xCxi8>, dims: memref<2xi64>, site: i64)

`site` indexes `SITES`, the process-wide table of what the run time needs to know about the node
and cannot read from the buffers: its label (for messages), its pixel format and the dims the
model declares for its output (which the compiled code will assume: the run time never lets
the buffer disagree with them). Only the CPU JIT provides these symbols (it registers them with
the execution engine); an AOT library cannot, so `compile_aot` refuses modules that call them.

Undecodable bytes: the spec says the op returns an empty matrix, so the output is [0, 0, C]
(with a warning naming the node and the decoder's reason); where the model declares a non-zero
static output shape the run-time decoder reports an error instead (raised as an `OnnxcError`
when the compiled call returns), as it does for an image whose size contradicts the declared one.
"""

from __future__ import annotations

import dataclasses
import threading

from mlir import ir
from mlir.dialects import arith, bufferization, func, memref, tensor

from onnxc.transforms.lowering.common import (
    Node,
    const_index,
    const_scalar,
    extract_slice,
    is_unsigned,
    lowers,
    rank_of,
    static_shape,
    tensor_type,
)

#: External symbols the generated code calls (without the `_mlir_ciface_` prefix the C interface adds).
SIZE_SYMBOL = "onnxc_image_decoder_size"
DECODE_SYMBOL = "onnxc_image_decoder_decode"
RUNTIME_SYMBOLS: tuple[str, ...] = (SIZE_SYMBOL, DECODE_SYMBOL)

#: ImageDecoder's pixel formats and their channel counts.
CHANNELS: dict[str, int] = {"RGB": 3, "BGR": 3, "Grayscale": 1}


@dataclasses.dataclass(frozen=True)
class DecoderSite:
    """What the run-time decoder needs to know about one compiled ImageDecoder node."""

    label: str  # the node, as diagnostics name it
    pixel_format: str  # RGB, BGR or Grayscale
    declared: tuple[int | None, int | None]  # the model's static H and W of the output (None: dynamic)


#: Every ImageDecoder compiled in this process; the generated code passes its index. Appended
#: under a lock (compiles may run in threads); entries are a few dozen bytes and never removed.
SITES: list[DecoderSite] = []
_SITES_LOCK = threading.Lock()


def register_site(site: DecoderSite) -> int:
    """Add `site` to `SITES`; return its index."""
    with _SITES_LOCK:
        SITES.append(site)
        return len(SITES) - 1


def _i8() -> ir.Type:
    return ir.IntegerType.get_signless(8)


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def _data_memref() -> ir.MemRefType:
    """The encoded bytes as the decoder sees them: any offset and stride (read from the descriptor)."""
    layout = ir.StridedLayoutAttr.get(ir.ShapedType.get_dynamic_stride_or_offset(), [ir.ShapedType.get_dynamic_stride_or_offset()])
    return ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], _i8(), layout=layout)


def _dims_memref() -> ir.MemRefType:
    return ir.MemRefType.get([2], _i64())


def _out_memref(channels: int) -> ir.MemRefType:
    dyn = ir.ShapedType.get_dynamic_size()
    return ir.MemRefType.get([dyn, dyn, channels], _i8())


def _module_block(node: Node) -> ir.Block:
    lowering = node.lowering
    if lowering is None:
        raise node.fail("ImageDecoder is lowered only inside convert-onnx-to-linalg")
    return lowering.module.regions[0].blocks[0]


def _symbols(block: ir.Block) -> set[str]:
    names = set()
    for op in block.operations:
        op = op.operation
        if "sym_name" in op.attributes:
            names.add(ir.StringAttr(op.attributes["sym_name"]).value)
    return names


def _declare_runtime(block: ir.Block, existing: set[str]) -> None:
    """Declare the two run-time functions once per module (the decode one takes a [?, ?, ?]
    buffer, so one declaration serves every channel count)."""
    unit = ir.UnitAttr.get()
    types = {
        SIZE_SYMBOL: [_data_memref(), _dims_memref(), _i64()],
        DECODE_SYMBOL: [_data_memref(), _decode_out_memref(), _dims_memref(), _i64()],
    }
    for name, args in types.items():
        if name in existing:
            continue
        with ir.InsertionPoint.at_block_begin(block):
            decl = func.FuncOp(name, ir.FunctionType.get(args, []), visibility="private")
        decl.operation.attributes["llvm.emit_c_interface"] = unit
        existing.add(name)


def _decode_out_memref() -> ir.MemRefType:
    dyn = ir.ShapedType.get_dynamic_size()
    return ir.MemRefType.get([dyn, dyn, dyn], _i8())


def _unique_name(existing: set[str], base: str) -> str:
    k = 0
    while f"{base}_{k}" in existing:
        k += 1
    name = f"{base}_{k}"
    existing.add(name)
    return name


def _check(node: Node) -> str | None:
    t = node.onnx_types[0]
    if t is None or not isinstance(t, ir.RankedTensorType) or rank_of(t) != 1:
        return "the encoded stream must be a 1-D tensor"
    e = node.in_elem(0)
    if not (isinstance(e, ir.IntegerType) and ir.IntegerType(e).width == 8 and is_unsigned(e)):
        return f"the encoded stream must be uint8, got {e}"
    fmt = node.attr("pixel_format", "RGB")
    if fmt not in CHANNELS:
        return f"pixel_format {fmt!r} is not one of {', '.join(CHANNELS)}"
    out = node.onnx_result_types[0]
    if isinstance(out, ir.RankedTensorType):
        if rank_of(out) != 3:
            return f"the output is declared with rank {rank_of(out)}; ImageDecoder's output is [H, W, C]"
        c = static_shape(out)[2]
        if c is not None and c != CHANNELS[fmt]:
            return f"the output is declared with {c} channels; pixel_format {fmt} gives {CHANNELS[fmt]}"
    return None


@lowers("ImageDecoder", check=_check)
def lower_image_decoder(node: Node) -> list[ir.Value]:
    """ImageDecoder: size the output from the bytes (first call), allocate it, decode into it
    (second call), return the part written (all of it, or [0, 0, C] for undecodable bytes)."""
    fmt = str(node.attr("pixel_format", "RGB"))
    channels = CHANNELS[fmt]
    out_t = node.onnx_result_types[0]
    declared: tuple[int | None, int | None] = (None, None)
    if isinstance(out_t, ir.RankedTensorType):
        shape = static_shape(out_t)
        declared = (shape[0], shape[1])
    site = register_site(DecoderSite(node.describe(), fmt, declared))

    block = _module_block(node)
    existing = _symbols(block)
    _declare_runtime(block, existing)
    name = _unique_name(existing, "onnxc_image_decoder")
    dyn = ir.ShapedType.get_dynamic_size()
    in_t = tensor_type([dyn], _i8())
    res_t = tensor_type([dyn, dyn, channels], _i8())
    with ir.InsertionPoint.at_block_begin(block):
        helper = func.FuncOp(name, ir.FunctionType.get([in_t], [res_t]), visibility="private")
    lowering = node.lowering
    created = getattr(lowering, "_created", None)
    if isinstance(created, list):  # erased with the other new functions if the lowering fails
        created.append(helper.operation)
    entry = helper.add_entry_block()
    with ir.InsertionPoint(entry):
        data = bufferization.to_buffer(_data_memref(), entry.arguments[0], read_only=True)
        site_v = const_scalar(site, _i64())
        dims = memref.alloca(_dims_memref(), [], [])
        func.call([], SIZE_SYMBOL, [data, dims, site_v])
        h = memref.load(dims, [const_index(0)])
        w = memref.load(dims, [const_index(1)])
        idx = ir.IndexType.get()
        h_i, w_i = arith.index_cast(idx, h), arith.index_cast(idx, w)
        buf = memref.alloc(_out_memref(channels), [h_i, w_i], [])
        generic_buf = memref.cast(_decode_out_memref(), buf)
        func.call([], DECODE_SYMBOL, [data, generic_buf, dims, site_v])
        rows = arith.index_cast(idx, memref.load(dims, [const_index(0)]))
        cols = arith.index_cast(idx, memref.load(dims, [const_index(1)]))
        full = bufferization.to_tensor(tensor_type([dyn, dyn, channels], _i8()), buf, restrict=True, writable=True)
        written = extract_slice(full, [0, 0, 0], [rows, cols, channels])
        func.ReturnOp([written])
    arg = node.input(0)
    if arg.type != in_t:
        arg = tensor.cast(in_t, arg)
    return [func.call([res_t], name, [arg])]
