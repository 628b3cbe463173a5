"""External tensor data: safe path resolution and memory-mapped reads.

ONNX lets a tensor keep its bytes in a separate file (`data_location = EXTERNAL`, `external_data`
keys `location`, `offset`, `length`, `checksum`), so models above protobuf's 2 GB limit can exist.
Two things matter here:

* **Safety.** `location` comes from the model, which may be hostile. Reading `../../etc/shadow` or
  `/etc/passwd`, or following a link planted next to the model that points out of its folder, is a
  known vulnerability class of ONNX tooling (CVE-2022-25882, GHSA-538c-55jv-c5g9). The location must
  be relative, have no `..` component, and resolve (links followed) to a regular file inside the
  model's folder; everything else is refused with an `ImportError_` naming the tensor and location.
  Special files (FIFOs, devices) are refused too: opening a FIFO would block the import forever.
* **No copies.** Weights are read through one read-only memory map per file; a tensor's bytes are a
  numpy view into it. The importer hands such views to MLIR as `dense_resource` blobs, so a model of
  N GB costs about N GB of page cache and nothing more; pages are only read when touched.

`offset` and `length` are checked against the file size before any view is made. `checksum` is the
SHA1 digest of the file named by `location` (per onnx.proto); it is verified when present (hashing
reads the whole file once, cached per file).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import stat
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from onnxc.importers.errors import ImportError_

# The keys onnx.proto defines for external_data; `basepath` is written by onnx's own helpers.
KNOWN_KEYS = frozenset({"location", "offset", "length", "checksum", "basepath"})


def _tensor_label(tensor: onnx.TensorProto) -> str:
    return f"tensor '{tensor.name}'" if tensor.name else "an unnamed tensor"


def uses_external_data(tensor: onnx.TensorProto) -> bool:
    """Whether the tensor's bytes live in an external file (the spec's `data_location`)."""
    return tensor.HasField("data_location") and tensor.data_location == onnx.TensorProto.EXTERNAL


@dataclass(frozen=True)
class ExternalInfo:
    """The parsed `external_data` entries of one tensor."""

    location: str
    offset: int
    length: int | None  # None: to the end of the file
    checksum: str | None


def _bad(tensor: onnx.TensorProto, location: str, why: str) -> ImportError_:
    return ImportError_(
        f"cannot read the external data of {_tensor_label(tensor)}",
        [f"The external data location '{location}' of {_tensor_label(tensor)} {why}."],
    )


def parse_external_info(tensor: onnx.TensorProto) -> ExternalInfo:
    """The tensor's external data keys, checked: a location, integer offset/length >= 0."""
    entries: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key in entries:
            raise _bad(tensor, entries.get("location", "?"), f"gives the key '{entry.key}' twice")
        entries[entry.key] = entry.value
    location = entries.get("location", "")
    if not location:
        raise ImportError_(
            f"cannot read the external data of {_tensor_label(tensor)}",
            [f"{_tensor_label(tensor).capitalize()} is marked EXTERNAL but its external_data has no 'location'."],
        )
    numbers: dict[str, int | None] = {}
    for key in ("offset", "length"):
        text = entries.get(key)
        if text is None or text == "":
            numbers[key] = None
            continue
        try:
            value = int(text, 10)
        except ValueError:
            raise _bad(tensor, location, f"has a non-integer {key} '{text[:40]}'") from None
        if value < 0:
            raise _bad(tensor, location, f"has a negative {key} {value}")
        numbers[key] = value
    checksum = entries.get("checksum") or None
    return ExternalInfo(location, numbers["offset"] or 0, numbers["length"], checksum)


def resolve_external_path(base_dir: Path, location: str, tensor: onnx.TensorProto | None = None) -> Path:
    """The file a `location` names, refused unless it is a regular file inside `base_dir`.

    Refused: empty locations, NUL bytes, absolute paths (POSIX or Windows-style), any `..`
    component, and paths that leave `base_dir` once links are resolved. `tensor` only serves the
    error message.
    """
    t = tensor if tensor is not None else onnx.TensorProto()
    if not location or "\x00" in location:
        raise _bad(t, location.replace("\x00", "\\0"), "is empty or contains a NUL byte")
    # Windows drive letters and backslashes: a model written on Windows must not escape either.
    if location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":") or os.path.isabs(location):
        raise _bad(t, location, "is an absolute path; external data must lie in the model's folder")
    parts = PurePosixPath(location.replace("\\", "/")).parts
    if ".." in parts:
        raise _bad(t, location, "contains '..'; external data must lie in the model's folder")
    try:
        root = Path(base_dir).resolve(strict=True)
    except OSError as e:
        raise _bad(t, location, f"cannot be looked up: the model folder '{base_dir}' is not accessible ({e.strerror})") from None
    candidate = root.joinpath(*parts)
    try:
        target = candidate.resolve(strict=True)
    except (OSError, RuntimeError) as e:  # missing file, link loop
        why = getattr(e, "strerror", None) or str(e)
        raise _bad(t, location, f"does not name a readable file in '{root}' ({why})") from None
    if not target.is_relative_to(root):
        raise _bad(t, location, f"resolves to '{target}', outside the model's folder '{root}' (a link leaves the folder)")
    try:
        st = target.stat()
    except OSError as e:
        raise _bad(t, location, f"cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _bad(t, location, "is not a regular file")
    return target


class _MappedFile:
    """One read-only memory map of a whole file (empty files have no map)."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            self.mtime_ns = os.fstat(f.fileno()).st_mtime_ns
            if self.size:
                self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                # A view over the whole file; tensor views are slices of it and keep it alive.
                self.array = np.frombuffer(self.map, dtype=np.uint8)
            else:
                self.array = np.zeros(0, dtype=np.uint8)


_LOCK = threading.Lock()
# One map per file while any view of it lives: many tensors share one data file, and one map per
# tensor would exhaust the process's map count (vm.max_map_count) on big models.
_MAPS: "weakref.WeakValueDictionary[tuple[str, int, int], np.ndarray]" = weakref.WeakValueDictionary()
_SHA1: dict[tuple[str, int, int], str] = {}


def _file_view(path: Path) -> np.ndarray:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _LOCK:
        arr = _MAPS.get(key)
        if arr is None:
            arr = _MappedFile(path).array
            if arr.size:
                # Slices of this array keep it (and through it the map) alive as their base, so
                # the cache entry lives exactly as long as some tensor view of the file does.
                _MAPS[key] = arr
        return arr


def _sha1(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _SHA1:
        h = hashlib.sha1()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _SHA1[key] = h.hexdigest()
    return _SHA1[key]


def read_external(tensor: onnx.TensorProto, base_dir: Path | None) -> np.ndarray:
    """The bytes of an EXTERNAL tensor: a read-only uint8 view into a memory map of its file.

    Checks the location (see `resolve_external_path`), offset and length against the file size,
    and the SHA1 checksum when the tensor gives one.
    """
    path, offset, length = external_extent(tensor, base_dir)
    info = parse_external_info(tensor)
    whole = _file_view(path)
    if offset + length > whole.size:  # the file shrank between the checks and the map
        raise _bad(tensor, info.location, f"asks for bytes past the end of the file ({whole.size} bytes)")
    if info.checksum is not None:
        digest = _sha1(path)
        if digest.lower() != info.checksum.strip().lower():
            raise _bad(tensor, info.location, f"has SHA1 {digest}, not the checksum {info.checksum[:64]} the model gives")
    return whole[offset : offset + length]


def external_extent(tensor: onnx.TensorProto, base_dir: Path | None) -> tuple[Path, int, int]:
    """(file, offset, length) of an EXTERNAL tensor's bytes, every check of `read_external` done
    except the checksum, and nothing mapped or read (the validator uses it to report all problems)."""
    info = parse_external_info(tensor)
    if base_dir is None:
        raise _bad(tensor, info.location, "cannot be resolved: the model was not loaded from a file, so it has no folder")
    path = resolve_external_path(Path(base_dir), info.location, tensor)
    size = path.stat().st_size
    if info.offset > size:
        raise _bad(tensor, info.location, f"has offset {info.offset} past the end of the file ({size} bytes)")
    length = size - info.offset if info.length is None else info.length
    if info.offset + length > size:
        raise _bad(
            tensor, info.location,
            f"asks for {length} bytes at offset {info.offset}, past the end of the file ({size} bytes)",
        )  # fmt: skip
    return path, info.offset, length


def _parse_mapped(p: Path, size: int) -> onnx.ModelProto:
    """Parse a binary model file from a read-only memory map of it (what ``onnx.load`` does,
    without first reading the whole file into a bytes object: BERT-base's 440 MB took 0.7 s
    to read and parse that way, 0.4 s mapped). Protobuf copies every field out of the buffer
    while parsing, so the map is closed before this returns."""
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
        model = onnx.ModelProto()
        decoded = model.ParseFromString(view)
    if decoded is not None and decoded != size:  # onnx.load's own check
        raise DecodeError(f"Protobuf decoding consumed too few bytes: {decoded} out of {size}")
    return model


def load_model_proto(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Load a model file without its external data (which stays on disk to be memory-mapped).

    Protobuf itself cannot parse messages above 2 GB, so a model file that large is an error; with
    external data the file holds only the graph and stays small however big the weights are.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise ImportError_(f"cannot read the model file '{p}'", [f"The file '{p}' cannot be opened ({e.strerror})."]) from None
    if size >= 2**31:
        raise ImportError_(
            f"cannot read the model file '{p}'",
            [f"The file '{p}' is {size} bytes, above protobuf's 2 GB limit; save the weights as external data."],
        )
    try:
        if size and onnx.serialization.registry.get_format_from_file_extension(p.suffix) in (None, "protobuf"):
            return _parse_mapped(p, size)
        return onnx.load(str(p), load_external_data=False)  # a text format (.onnxtxt, .json), or empty
    except Exception as e:  # protobuf raises DecodeError, RuntimeWarning-ish and others for corrupt files
        raise ImportError_(
            f"cannot read the model file '{p}'",
            [f"The file '{p}' is not a valid ONNX protobuf ({type(e).__name__}: {str(e)[:200]})."],
        ) from None
