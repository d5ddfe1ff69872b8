"""The tensor table the native engine loads from: for every tensor of a Hugging Face
checkpoint directory (one model.safetensors or shards with model.safetensors.index.json),
its file, byte range, dtype and shape, read from the safetensors headers. The engine reads
the bytes itself; nothing here loads a tensor.

Names are normalised to what csrc/engine/weights.cpp plans: the target's DeepSeek-V3 names
(Kimi's "language_model." prefix removed) and the drafter's names under "drafter." (its own
optional "model." prefix removed).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from python_engine.errors import KdtreeError
from python_engine.model.checkpoint_files import INDEX_NAME, SINGLE_NAME

KIMI_PREFIX = "language_model."
DRAFTER_PREFIX = "drafter."
HEADER_LEN_BYTES = 8  # safetensors: a little-endian u64 header length, then the JSON header
MAX_HEADER_BYTES = 100 << 20  # the safetensors library's own limit on header size
STORED_DTYPES = {"F32": 0, "BF16": 1, "I32": 2}  # kd_dtype (I32: INT4 words); others are refused where used
UNSUPPORTED_DTYPE = -1


@dataclass(frozen=True)
class TableEntry:
    name: str  # normalised
    file: Path
    offset: int  # absolute byte offset in the file
    nbytes: int
    dtype: str  # safetensors dtype name
    shape: tuple[int, ...]

    @property
    def dtype_code(self) -> int:
        return STORED_DTYPES.get(self.dtype, UNSUPPORTED_DTYPE)


def read_header(path: Path) -> dict:
    """The JSON header of a safetensors file (KdtreeError naming the file when unreadable)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER_LEN_BYTES)
            if len(raw) < HEADER_LEN_BYTES:
                raise KdtreeError(f"checkpoint file {path} is too short to be safetensors")
            (size,) = struct.unpack("<Q", raw)
            if size > MAX_HEADER_BYTES:
                raise KdtreeError(f"checkpoint file {path}: header of {size} bytes is not plausible (corrupt file?)")
            text = f.read(size)
    except OSError as exc:
        raise KdtreeError(f"cannot read checkpoint file {path}: {exc.strerror or exc}") from None
    if len(text) < size:
        raise KdtreeError(f"checkpoint file {path} ends inside its header (truncated?)")
    try:
        header = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise KdtreeError(f"checkpoint file {path}: the safetensors header is not valid JSON") from None
    if not isinstance(header, dict):
        raise KdtreeError(f"checkpoint file {path}: the safetensors header is not an object")
    header["__data_start__"] = HEADER_LEN_BYTES + size
    return header


def _file_entries(path: Path, rename) -> list[TableEntry]:
    header = read_header(path)
    start = header.pop("__data_start__")
    header.pop("__metadata__", None)
    out = []
    for name, info in header.items():
        where = f"checkpoint file {path}: tensor {name!r}"
        try:
            dtype, shape, (begin, end) = info["dtype"], tuple(int(d) for d in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise KdtreeError(f"{where} has a malformed header entry") from None
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end):
            raise KdtreeError(f"{where} has bad data_offsets {info['data_offsets']!r}")
        if len(shape) > 4:
            raise KdtreeError(f"{where} has {len(shape)} dimensions; the engine's tensors have at most 4")
        new = rename(name)
        if new is not None:
            out.append(TableEntry(new, path, start + begin, end - begin, dtype, shape))
    return out


def _shard_files(directory: Path) -> list[Path]:
    index = directory / INDEX_NAME
    if index.exists():
        try:
            weight_map = json.loads(index.read_text()).get("weight_map")
        except (OSError, json.JSONDecodeError) as exc:
            raise KdtreeError(f"checkpoint index {index} is unreadable: {exc}") from None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise KdtreeError(f"checkpoint index {index}: missing or malformed 'weight_map'")
        files = sorted(set(weight_map.values()))
        missing = [f for f in files if not (directory / f).exists()]
        if missing:
            raise KdtreeError(f"checkpoint file {directory / missing[0]} is missing (listed in {INDEX_NAME})")
        return [directory / f for f in files]
    if (directory / SINGLE_NAME).exists():
        return [directory / SINGLE_NAME]
    found = sorted(directory.glob("*.safetensors"))
    if len(found) != 1:
        raise KdtreeError(f"{directory}: no {SINGLE_NAME} or {INDEX_NAME}"
                          + (f" (found {len(found)} .safetensors files and no index)" if found else ""))
    return found


def target_table(directory: str | Path) -> list[TableEntry]:
    """The target's tensors, Kimi's prefix removed."""
    directory = Path(directory)
    entries = [e for f in _shard_files(directory) for e in _file_entries(f, lambda n: n)]
    names = {e.name for e in entries}
    if "model.embed_tokens.weight" not in names and KIMI_PREFIX + "model.embed_tokens.weight" in names:
        entries = [TableEntry(e.name[len(KIMI_PREFIX):], e.file, e.offset, e.nbytes, e.dtype, e.shape)
                   for e in entries if e.name.startswith(KIMI_PREFIX)]
    elif "model.embed_tokens.weight" not in names:
        raise KdtreeError(f"checkpoint {directory}: no 'model.embed_tokens.weight' (nor Kimi's "
                          f"'{KIMI_PREFIX}model.embed_tokens.weight'); is this a DeepSeek-V3 / Kimi checkpoint?")
    return entries


def drafter_table(directory: str | Path) -> list[TableEntry]:
    """The drafter's tensors under "drafter." (a "model." prefix of its own removed)."""
    directory = Path(directory)
    entries = [e for f in _shard_files(directory) for e in _file_entries(f, lambda n: n)]
    names = {e.name for e in entries}
    strip = "model." if "fc.weight" not in names and "model.fc.weight" in names else ""
    return [TableEntry(DRAFTER_PREFIX + e.name[len(strip):], e.file, e.offset, e.nbytes, e.dtype, e.shape)
            for e in entries if e.name.startswith(strip)]
