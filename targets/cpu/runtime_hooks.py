"""Run-time functions the generated CPU code calls back into Python: ImageDecoder's decoder.

What: `register(engine, module)` registers with a JIT `ExecutionEngine` the implementations of
the external functions `module` declares (`_mlir_ciface_<name>`, the C interface of a
`func.func private` declaration with `llvm.emit_c_interface`); `run_with_hooks(fn, ...)` calls compiled
code and raises the error a run-time function recorded during the call; `module_calls_hooks`
says whether a module needs them (the AOT path refuses such modules: a shared library cannot
call into this process's Python).

ImageDecoder (`onnxc.transforms.lowering.image`): the generated code calls
`onnxc_image_decoder_size(data, dims, site)` and then, with a buffer of that size,
`onnxc_image_decoder_decode(data, out, dims, site)`. Decoding is Pillow's (`PIL.Image.open`,
then `convert("RGB")` or `convert("L")`, the channel order reversed for BGR): the formats are
those of the installed Pillow's build (the pinned wheel reads BMP, JPEG, JPEG 2000, PNG, PNM,
TIFF and WebP; `PIL.features` tells). Why Python callbacks rather than a C library: the decoder
is Pillow, a Python package; a ctypes callback reaches it from the JIT's code with no build step.

Safety: every buffer is read through its descriptor's sizes and strides, never beyond them; a
callback never lets an exception escape into native code (ctypes would print it and return
garbage): it reports through `dims` and the per-thread pending error instead. The output buffer
is sized by the first call, so the second writes exactly into it; where the model declares a
static output size the first call sizes the buffer to it whatever the image says (the compiled
code assumes it), and the mismatch is an error raised when the call returns.
"""

from __future__ import annotations

import ctypes
import io
import re
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxc.errors import OnnxcError
from onnxc.transforms.lowering import image as image_lowering

from .abi import CpuTargetError, _descriptor_type

__all__ = ["HOOK_SYMBOLS", "RuntimeHookError", "decode_image", "module_calls_hooks", "raise_pending", "refuse_hooks", "register", "run_with_hooks"]


class RuntimeHookError(OnnxcError, RuntimeError):
    """A run-time function of the generated code failed (e.g. an image of the wrong size)."""


# The C interface's memref descriptors, as the ABI module defines them (same package).
_Memref1D = _descriptor_type(1)
_Memref3D = _descriptor_type(3)


def _view(desc: Any, rank: int) -> np.ndarray:
    """A uint8 numpy view of a memref descriptor's elements (sizes and strides as given)."""
    shape = tuple(int(desc.sizes[d]) for d in range(rank))
    if any(s < 0 for s in shape):
        raise ValueError(f"negative size in a buffer descriptor: {shape}")
    if 0 in shape:
        return np.zeros(shape, np.uint8)
    strides = tuple(int(desc.strides[d]) for d in range(rank))
    base = int(desc.aligned or 0) + int(desc.offset)
    lo = sum((s - 1) * st for s, st in zip(shape, strides) if st < 0)
    hi = sum((s - 1) * st for s, st in zip(shape, strides) if st > 0)
    raw = (ctypes.c_uint8 * (hi - lo + 1)).from_address(base + lo)
    return np.ndarray(shape, dtype=np.uint8, buffer=raw, offset=-lo, strides=strides)


# --- errors recorded during a call -----------------------------------------------------------

_PENDING = threading.local()
_BYTESIO = re.compile(r"<_io\.BytesIO object at 0x[0-9a-f]+>")


def _record(message: str) -> None:
    errors = getattr(_PENDING, "errors", None)
    if errors is None:
        errors = _PENDING.errors = []
    errors.append(message)


def raise_pending() -> None:
    """Raise (and clear) the errors a run-time function recorded on this thread since the last
    call; nothing when there were none."""
    errors = getattr(_PENDING, "errors", None)
    if errors:
        _PENDING.errors = []
        raise RuntimeHookError("; ".join(errors))


def run_with_hooks(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` (a call of compiled code), then raise what a run-time function recorded
    during it. Starts from a clean slate, so what an earlier call left (one that raised for
    another reason first) never sticks to this one."""
    _PENDING.errors = []
    _PENDING.failed = set()
    out = fn(*args)
    raise_pending()
    return out


# --- ImageDecoder ----------------------------------------------------------------------------


def decode_image(data: bytes, pixel_format: str) -> tuple[np.ndarray | None, str]:
    """Decode `data` with Pillow into [H, W, C] uint8 (C = 3 for RGB/BGR, 1 for Grayscale);
    (None, reason) when it cannot be decoded."""
    try:
        import PIL.Image
    except ImportError:  # pragma: no cover - Pillow is a pinned dependency
        return None, "Pillow is not installed (pip install Pillow)"
    try:
        with PIL.Image.open(io.BytesIO(data)) as img:
            if pixel_format == "Grayscale":
                arr = np.asarray(img.convert("L"), dtype=np.uint8)[:, :, None]
            else:
                arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
                if pixel_format == "BGR":
                    arr = arr[:, :, ::-1]
    except Exception as exc:  # noqa: BLE001 - any decoder failure means "cannot decode"
        return None, f"{type(exc).__name__}: {_BYTESIO.sub('the bytes', str(exc))}"
    return arr, ""


def _image_size(data: bytes) -> tuple[int, int] | None:
    """(H, W) from the image header (Pillow reads only the header here), or None."""
    try:
        import PIL.Image

        with PIL.Image.open(io.BytesIO(data)) as img:
            w, h = img.size
        return int(h), int(w)
    except Exception:  # noqa: BLE001 - unreadable header: decoded as an empty image
        return None


def _site(index: int) -> image_lowering.DecoderSite | None:
    sites = image_lowering.SITES
    return sites[index] if 0 <= index < len(sites) else None


def _int64s(desc_p: int, n: int) -> np.ndarray:
    """The `n` int64 elements of a contiguous memref<n x i64> given by its descriptor."""
    desc = _Memref1D.from_address(desc_p)
    if int(desc.sizes[0]) != n or (n > 1 and int(desc.strides[0]) != 1):
        raise ValueError(f"expected a contiguous buffer of {n} int64, got size {desc.sizes[0]} stride {desc.strides[0]}")
    raw = (ctypes.c_int64 * n).from_address(int(desc.aligned) + 8 * int(desc.offset))
    return np.ndarray((n,), dtype=np.int64, buffer=raw)


def _failed_sites() -> set[int]:
    failed = getattr(_PENDING, "failed", None)
    if failed is None:
        failed = _PENDING.failed = set()
    return failed


def _size_hook(data_p: int, dims_p: int, site_index: int) -> None:
    failed = _failed_sites()
    failed.discard(site_index)
    try:
        dims = _int64s(dims_p, 2)
        dims[:] = 0
        site = _site(site_index)
        if site is None:
            failed.add(site_index)
            _record(f"ImageDecoder: unknown call site {site_index} (code compiled in another process?)")
            return
        hw = _image_size(_view(_Memref1D.from_address(data_p), 1).tobytes())
        got = hw if hw is not None else (0, 0)
        want = tuple(d if d is not None else g for d, g in zip(site.declared, got))
        if want != got:
            failed.add(site_index)
            what = f"is {got[0]}x{got[1]}" if hw is not None else "cannot be decoded"
            _record(f"{site.label}: the image {what}, the model declares the output {_dims_text(site.declared)}xC")
        dims[0], dims[1] = want
    except Exception as exc:  # noqa: BLE001 - never into native code
        failed.add(site_index)
        _record(f"ImageDecoder: {type(exc).__name__}: {exc}")


def _dims_text(declared: tuple[int | None, int | None]) -> str:
    return "x".join("?" if d is None else str(d) for d in declared)


def _decode_hook(data_p: int, out_p: int, dims_p: int, site_index: int) -> None:
    try:
        dims = _int64s(dims_p, 2)
        out = _view(_Memref3D.from_address(out_p), 3)
        h, w, c = out.shape
        dims[0], dims[1] = h, w  # the whole buffer unless the decode fails below
        out[...] = 0
        site = _site(site_index)
        if site is None or site_index in _failed_sites():
            _failed_sites().discard(site_index)
            return  # the size call recorded why; the zeroed buffer is never returned
        arr, reason = decode_image(_view(_Memref1D.from_address(data_p), 1).tobytes(), site.pixel_format)
        if arr is None:
            if any(d not in (None, 0) for d in site.declared):  # the compiled code assumes that size
                _record(f"{site.label}: cannot decode the image ({reason}), and the model declares the output {_dims_text(site.declared)}xC")
                return
            dims[0], dims[1] = 0, 0  # the spec's empty matrix
            warnings.warn(f"{site.label}: cannot decode the image ({reason}); the output is empty, as the spec says", RuntimeWarning, stacklevel=1)
            return
        if arr.shape != (h, w, c):
            _record(f"{site.label}: the decoded image is {arr.shape[0]}x{arr.shape[1]}x{arr.shape[2]}, its header said {h}x{w}x{c}")
            return
        out[...] = arr
    except Exception as exc:  # noqa: BLE001 - never into native code
        _record(f"ImageDecoder: {type(exc).__name__}: {exc}")


_CIFACE = "_mlir_ciface_"
_SIZE_PROTO = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_DECODE_PROTO = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

#: symbol -> ctypes callback; module-level so the callbacks outlive every engine that calls them.
HOOK_SYMBOLS: dict[str, Any] = {
    image_lowering.SIZE_SYMBOL: _SIZE_PROTO(_size_hook),
    image_lowering.DECODE_SYMBOL: _DECODE_PROTO(_decode_hook),
}


def _declared_symbols(module: Any) -> set[str]:
    """Names of the external functions `module` (an `ir.Module`) declares: body-less `func.func`s
    (before the LLVM lowering) or `llvm.func`s (after it; their C-interface prefix stripped)."""
    from mlir import ir

    names: set[str] = set()
    for op in module.body.operations:
        op = op.operation
        if op.name not in ("func.func", "llvm.func") or "sym_name" not in op.attributes:
            continue
        if len(op.regions[0].blocks):
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        names.add(name.removeprefix(_CIFACE))
    return names


def module_calls_hooks(module: Any) -> list[str]:
    """The run-time functions of this module `module` declares (empty: it needs none)."""
    return sorted(_declared_symbols(module) & set(HOOK_SYMBOLS))


def refuse_hooks(module: Any, what: str) -> None:
    """Raise a `CpuTargetError` when `module` calls run-time functions, which only the JIT
    provides (`what`: the artifact refused, for the message)."""
    hooks = module_calls_hooks(module)
    if hooks:
        ops = "ImageDecoder" if set(hooks) <= set(image_lowering.RUNTIME_SYMBOLS) else ", ".join(hooks)
        raise CpuTargetError(
            f"{what} cannot be built: the model's {ops} calls back into Python at run time (decoding through Pillow), "
            "which only the JIT (onnxc.compile) provides"
        )


def register(engine: Any, module: Any) -> None:
    """Register with `engine` (an `ExecutionEngine` not yet looked up) the run-time functions
    `module` declares."""
    for name in module_calls_hooks(module):
        engine.register_runtime(name, HOOK_SYMBOLS[name])
