"""KDTR: the reference-bundle container shared by the Python reference and the native tests.

The format is specified in docs/kdtr.md; this module is its Python writer and reader.
Tensors are numpy arrays (bfloat16 travels as torch tensors, or as uint16 bit patterns in
numpy, which has no bfloat16). The reader validates every field against the file's real
size before it trusts it, and raises KdtrError, naming the file, on any malformed input:
it reads at most the size the header claims (plus one byte, to notice more), so a device
or a pipe (/dev/zero) cannot make it read without bound, and running out of memory is a
KdtrError too.
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from python_engine.errors import KdtreeError

MAGIC = b"KDTR\r\n\x1a\n"
VERSION = 1
HEADER_SIZE = 64
ENTRY_SIZE = 256
NAME_FIELD = 160  # bytes for the NUL-padded UTF-8 name; at least one NUL, so names <= 159
MAX_NAME = NAME_FIELD - 1
MAX_NDIM = 8
MAX_ENTRIES = 65536  # far above any bundle; bounds the table before it is read
ALIGN = 64  # data alignment: a cache line, and enough for any dtype when memory-mapped
READ_CHUNK = 1 << 24  # what a read of a file that is not a regular one asks for at a time
U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1  # dims are int64 in the C++ reader

# header: magic, version, entry_count, file_size, table_offset, data_offset, checksum,
# entry_size, reserved
_HEADER = struct.Struct("<8sIIQQQII16s")
# entry: name, dtype, ndim, offset, nbytes, dims[8], reserved
_ENTRY = struct.Struct(f"<{NAME_FIELD}sIIQQ{MAX_NDIM}QQ")
assert _HEADER.size == HEADER_SIZE and _ENTRY.size == ENTRY_SIZE


@dataclass(frozen=True)
class DType:
    code: int
    name: str
    itemsize: int
    numpy: str  # the numpy dtype the data is read as (bfloat16 as its uint16 bit pattern)


DTYPES = [
    DType(1, "float32", 4, "<f4"),
    DType(2, "float64", 8, "<f8"),
    DType(3, "float16", 2, "<f2"),
    DType(4, "bfloat16", 2, "<u2"),
    DType(5, "int8", 1, "i1"),
    DType(6, "uint8", 1, "u1"),
    DType(7, "int16", 2, "<i2"),
    DType(8, "int32", 4, "<i4"),
    DType(9, "int64", 8, "<i8"),
    DType(10, "uint16", 2, "<u2"),
    DType(11, "uint32", 4, "<u4"),
    DType(12, "uint64", 8, "<u8"),
    DType(13, "bool", 1, "?"),
]
BY_CODE = {d.code: d for d in DTYPES}
BY_NAME = {d.name: d for d in DTYPES}


class KdtrError(KdtreeError):
    """A KDTR file is malformed or cannot be written; the message names the file."""


def _align(x: int) -> int:
    return (x + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Tensor:
    """A tensor as stored: dtype name, shape and the raw little-endian bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    def numpy(self) -> np.ndarray:
        """The data as a numpy array (bfloat16 as uint16 bit patterns). A tensor with no
        elements whose other dims are huge (legal in KDTR and torch) has no numpy form:
        KdtrError then (.torch() and .shape still work)."""
        arr = np.frombuffer(self.data, dtype=BY_NAME[self.dtype].numpy)
        try:
            return arr.reshape(self.shape).copy()
        except ValueError:
            raise KdtrError(f"shape {self.shape} has no elements but is too large for a numpy array; "
                            "read it with .torch() or use its .shape") from None

    def torch(self):
        """The data as a torch tensor, bfloat16 included."""
        import torch

        if 0 in self.shape:  # no data to convert, whatever the other dims
            return torch.empty(self.shape, dtype=getattr(torch, self.dtype))
        arr = self.numpy()
        if self.dtype == "bfloat16":
            return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(arr)


def _to_stored(name: str, value: Any) -> Tensor:
    """Convert a numpy array, torch tensor or Python scalar into a stored Tensor."""
    if type(value).__module__.startswith("torch"):
        import torch

        t = value.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().astype("<i2").tobytes()
            return Tensor("bfloat16", tuple(t.shape), raw)
        value = t.numpy()
    arr = np.asarray(value)
    kind = arr.dtype.name
    if kind not in BY_NAME or kind == "bfloat16":
        raise KdtrError(f"tensor {name!r}: dtype {arr.dtype} has no KDTR code")
    arr = np.asarray(arr, dtype=BY_NAME[kind].numpy, order="C")  # keeps 0-d shapes
    return Tensor(kind, tuple(int(s) for s in arr.shape), arr.tobytes())


def encode(tensors: Mapping[str, Any]) -> bytes:
    """Serialize named tensors into KDTR bytes (names kept in the given order)."""
    stored = []
    for name, value in tensors.items():
        raw = name.encode("utf-8") if isinstance(name, str) else b""
        if not raw or len(raw) > MAX_NAME or b"\0" in raw:
            raise KdtrError(f"tensor name {name!r}: must be 1..{MAX_NAME} UTF-8 bytes, no NUL")
        t = value if isinstance(value, Tensor) else _to_stored(name, value)
        if len(t.shape) > MAX_NDIM:
            raise KdtrError(f"tensor {name!r}: {len(t.shape)} dims, at most {MAX_NDIM}")
        stored.append((raw, t))
    count = len(stored)
    if count > MAX_ENTRIES:
        raise KdtrError(f"{count} tensors, at most {MAX_ENTRIES}")
    data_offset = _align(HEADER_SIZE + ENTRY_SIZE * count)
    table = bytearray()
    body = bytearray()
    cursor = data_offset
    for raw, t in stored:
        dims = list(t.shape) + [0] * (MAX_NDIM - len(t.shape))
        table += _ENTRY.pack(raw, BY_NAME[t.dtype].code, len(t.shape), cursor, len(t.data), *dims, 0)
        body += t.data
        pad = _align(cursor + len(t.data)) - (cursor + len(t.data))
        body += b"\0" * pad
        cursor += len(t.data) + pad
    table += b"\0" * (data_offset - HEADER_SIZE - len(table))
    rest = bytes(table) + bytes(body)
    file_size = HEADER_SIZE + len(rest)
    header = _HEADER.pack(
        MAGIC, VERSION, count, file_size, HEADER_SIZE, data_offset,
        zlib.crc32(rest), ENTRY_SIZE, b"\0" * 16,
    )
    return header + rest


def write_kdtr(path: str | os.PathLike, tensors: Mapping[str, Any]) -> Path:
    """Write a bundle atomically (temp file + rename: a crash never leaves half a file)."""
    path = Path(path)
    blob = encode(tensors)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)
    return path


def decode(blob: bytes, source: str = "<bytes>") -> dict[str, Tensor]:
    """Parse and validate KDTR bytes; raise KdtrError naming `source` on any problem."""

    def fail(problem: str) -> KdtrError:
        return KdtrError(f"{source}: {problem}")

    size = len(blob)
    if size < HEADER_SIZE:
        raise fail(f"file is {size} bytes, shorter than the {HEADER_SIZE}-byte header")
    (magic, version, count, file_size, table_offset, data_offset, checksum, entry_size,
     reserved) = _HEADER.unpack_from(blob, 0)
    if magic != MAGIC:
        raise fail(f"bad magic {magic!r} (not a KDTR file, or damaged)")
    if version != VERSION:
        raise fail(f"unknown version {version} (this reader knows {VERSION})")
    if entry_size != ENTRY_SIZE:
        raise fail(f"entry size {entry_size}, expected {ENTRY_SIZE}")
    if table_offset != HEADER_SIZE:
        raise fail(f"table offset {table_offset}, expected {HEADER_SIZE}")
    if reserved != b"\0" * 16:
        raise fail("reserved header bytes are not zero")
    if count > MAX_ENTRIES:
        raise fail(f"entry count {count} over the limit {MAX_ENTRIES}")
    if file_size != size:
        raise fail(f"header says {file_size} bytes but the file has {size} (truncated or padded)")
    table_end = HEADER_SIZE + ENTRY_SIZE * count
    if table_end > size:
        raise fail(f"entry table ({count} entries) runs past the end of the file")
    if data_offset != _align(table_end):
        raise fail(f"data offset {data_offset}, expected {_align(table_end)}")
    if zlib.crc32(memoryview(blob)[HEADER_SIZE:]) != checksum:
        raise fail("checksum mismatch (the file is damaged)")

    out: dict[str, Tensor] = {}
    prev_end = data_offset
    for i in range(count):
        name_raw, code, ndim, offset, nbytes, *dims, entry_reserved = _ENTRY.unpack_from(
            blob, HEADER_SIZE + ENTRY_SIZE * i
        )
        where = f"entry {i}"
        nul = name_raw.find(b"\0")
        if nul <= 0 or name_raw[nul:].strip(b"\0"):
            raise fail(f"{where}: name is empty, over {MAX_NAME} bytes or not NUL-padded")
        try:
            name = name_raw[:nul].decode("utf-8")
        except UnicodeDecodeError:
            raise fail(f"{where}: name is not UTF-8") from None
        where = f"tensor {name!r}"
        if name in out:
            raise fail(f"{where}: duplicate name")
        if code not in BY_CODE:
            raise fail(f"{where}: unknown dtype code {code}")
        if ndim > MAX_NDIM:
            raise fail(f"{where}: ndim {ndim} over {MAX_NDIM}")
        if any(dims[ndim:]) or entry_reserved:
            raise fail(f"{where}: unused dims or reserved bytes are not zero")
        dtype = BY_CODE[code]
        if any(d > I64_MAX for d in dims[:ndim]):
            raise fail(f"{where}: a dimension exceeds the int64 range")
        numel = 1
        for d in dims[:ndim]:
            numel *= d  # Python ints do not overflow: compare against 64 bits explicitly
        if numel * dtype.itemsize > U64_MAX:
            raise fail(f"{where}: size of shape {tuple(dims[:ndim])} overflows 64 bits")
        if numel * dtype.itemsize != nbytes:
            raise fail(f"{where}: nbytes {nbytes} does not match shape "
                       f"{tuple(dims[:ndim])} of {dtype.name}")
        if offset % ALIGN:
            raise fail(f"{where}: offset {offset} not aligned to {ALIGN}")
        if offset < prev_end:
            raise fail(f"{where}: offset {offset} overlaps the previous entry or the table")
        if offset + nbytes > size:
            raise fail(f"{where}: data [{offset}, {offset + nbytes}) past the end of the file")
        data = bytes(blob[offset : offset + nbytes])
        if dtype.name == "bool" and data.strip(b"\0\1"):
            raise fail(f"{where}: bool bytes other than 0 and 1")
        out[name] = Tensor(dtype.name, tuple(dims[:ndim]), data)
        prev_end = offset + nbytes
    return out


def _read_bounded(f, limit: int) -> bytes:
    """Up to `limit` bytes of f, in chunks: memory grows with what arrives, never with a
    size read from the file."""
    parts, have = [], 0
    while have < limit:
        chunk = f.read(min(READ_CHUNK, limit - have))
        if not chunk:
            break
        parts.append(chunk)
        have += len(chunk)
    return b"".join(parts)


def _read_blob(path: str | os.PathLike) -> bytes:
    """The file's bytes, read no further than its header's file_size + 1."""
    where = str(path)
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            head = _read_bounded(f, HEADER_SIZE)
            if len(head) < HEADER_SIZE or head[:8] != MAGIC:
                return head  # decode() says what is wrong with it
            claimed = _HEADER.unpack_from(head, 0)[3]
            regular = stat.S_ISREG(info.st_mode)
            if regular and info.st_size != claimed:  # decode()'s message, without reading it all
                raise KdtrError(f"{where}: header says {claimed} bytes but the file has {info.st_size} "
                                "(truncated or padded)")
            blob = head + _read_bounded(f, max(0, claimed - HEADER_SIZE) + 1)
    except IsADirectoryError:
        raise KdtrError(f"{where}: is a directory, not a KDTR file") from None
    except MemoryError:
        raise KdtrError(f"{where}: not enough memory to read it") from None
    except OSError as exc:
        raise KdtrError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if len(blob) > claimed:
        raise KdtrError(f"{where}: more data than the {claimed} bytes its header claims "
                        f"({'padded' if regular else 'not a regular file'}); reading stopped there")
    return blob


def read_tensors(path: str | os.PathLike) -> dict[str, Tensor]:
    """Read and validate a bundle; KdtrError on malformed content or an unreadable file."""
    blob = _read_blob(path)
    try:
        return decode(blob, str(path))
    except MemoryError:
        raise KdtrError(f"{path}: not enough memory to hold its {len(blob)} bytes of tensors") from None


def read_kdtr(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a bundle as numpy arrays (bfloat16 as uint16 bit patterns)."""
    out = {}
    for name, t in read_tensors(path).items():
        try:
            out[name] = t.numpy()
        except KdtrError as exc:
            raise KdtrError(f"{path}: tensor {name!r}: {exc}") from None
        except MemoryError:
            raise KdtrError(f"{path}: tensor {name!r}: not enough memory for a numpy copy") from None
    return out
