"""KDTR round trips for every dtype, and malformed files always raising KdtrError."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from python_engine import kdtr
from python_engine.kdtr import KdtrError, decode, encode, read_kdtr, read_tensors, write_kdtr

NUMPY_DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64",
                "uint16", "uint32", "uint64", "bool"]


def random_array(rng, dtype: str, shape) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith("float"):
        return rng.normal(size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def test_round_trip_every_dtype(tmp_path, rng):
    tensors = {f"t.{d}": random_array(rng, d, (3, 5)) for d in NUMPY_DTYPES}
    tensors["scalar"] = np.int64(rng.integers(1, 1000))
    tensors["empty"] = np.zeros((0, 7), np.float32)
    tensors["deep"] = random_array(rng, "int32", (2,) * 8)
    bf16 = torch.randn(4, 9, generator=torch.Generator().manual_seed(int(rng.integers(1 << 31))))
    tensors["bf16"] = bf16.to(torch.bfloat16)
    path = write_kdtr(tmp_path / "all.kdtr", tensors)
    back = read_kdtr(path)
    assert list(back) == list(tensors)
    for name, value in tensors.items():
        if name == "bf16":
            got = read_tensors(path)["bf16"].torch()
            assert got.dtype == torch.bfloat16 and torch.equal(got, value)
        else:
            np.testing.assert_array_equal(back[name], np.asarray(value))
            assert back[name].dtype == np.asarray(value).dtype
    assert back["scalar"].shape == ()


def test_layout_is_aligned_and_matches_spec(rng):
    blob = encode({"a": random_array(rng, "float32", (3,)), "b": random_array(rng, "int8", (5,))})
    magic, version, count, size, table, data, crc, esize, _ = struct.unpack_from("<8sIIQQQII16s", blob)
    assert (magic, version, count, size, table, esize) == (b"KDTR\r\n\x1a\n", 1, 2, len(blob), 64, 256)
    assert data == 64 + 2 * 256 and data % 64 == 0
    assert crc == zlib.crc32(blob[64:])
    for i in range(count):
        offset = struct.unpack_from("<Q", blob, 64 + 256 * i + 168)[0]
        assert offset % 64 == 0


def _valid_blob(rng) -> bytes:
    return encode({"x": random_array(rng, "float32", (4, 3)), "y": random_array(rng, "int64", (5,))})


def _reseal(blob: bytearray) -> bytes:
    """Recompute the checksum so a corruption reaches the check it targets."""
    struct.pack_into("<I", blob, 40, zlib.crc32(bytes(blob[64:])))
    return bytes(blob)


def _entry_field(offset: int, i: int = 0) -> int:
    return 64 + 256 * i + offset


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda b: b[:40], "shorter than"),
        (lambda b: b"XXXX" + b[4:], "bad magic"),
        (lambda b: b[:8] + struct.pack("<I", 2) + b[12:], "unknown version"),
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\0" * 64, "truncated or padded"),
        (lambda b: b[:-8] + bytes(8 * [0xFF]), "checksum"),
    ],
    ids=["short", "magic", "version", "truncated", "padded", "checksum"],
)
def test_header_corruption(rng, mutate, problem):
    with pytest.raises(KdtrError, match=problem):
        decode(mutate(_valid_blob(rng)), "case.kdtr")


@pytest.mark.parametrize(
    "field, fmt, value, problem",
    [
        (160, "<I", 99, "unknown dtype"),
        (164, "<I", 9, "ndim"),
        (168, "<Q", 65, "not aligned"),
        (168, "<Q", 0, "overlaps"),
        (168, "<Q", 1 << 40, "past the end"),
        (176, "<Q", 7, "nbytes"),
        (184, "<Q", 1 << 62, "overflows"),
        (0, "<B", 0, "name"),
    ],
    ids=["dtype", "ndim", "unaligned", "overlap", "out-of-range", "nbytes", "overflow", "empty-name"],
)
def test_entry_corruption(rng, field, fmt, value, problem):
    blob = bytearray(_valid_blob(rng))
    struct.pack_into(fmt, blob, _entry_field(field), value)
    with pytest.raises(KdtrError, match=problem) as info:
        decode(_reseal(blob), "case.kdtr")
    assert "case.kdtr" in str(info.value)


def test_second_entry_overlapping_first(rng):
    blob = bytearray(_valid_blob(rng))
    first = struct.unpack_from("<Q", blob, _entry_field(168, 0))[0]
    struct.pack_into("<Q", blob, _entry_field(168, 1), first)
    with pytest.raises(KdtrError, match="overlaps"):
        decode(_reseal(blob), "case.kdtr")


def test_duplicate_names_and_huge_count(rng):
    blob = bytearray(_valid_blob(rng))
    blob[_entry_field(0, 1)] = ord("x")  # "y" -> "x"
    with pytest.raises(KdtrError, match="duplicate"):
        decode(_reseal(blob), "d.kdtr")
    blob = bytearray(_valid_blob(rng))
    struct.pack_into("<I", blob, 12, 0xFFFFFFFF)
    with pytest.raises(KdtrError, match="entry count"):
        decode(bytes(blob), "d.kdtr")


def test_unreadable_file_and_bad_writes(tmp_path):
    with pytest.raises(KdtrError, match="cannot read"):
        read_kdtr(tmp_path / "missing.kdtr")
    with pytest.raises(KdtrError, match="name"):
        encode({"x" * 200: np.ones(2)})
    with pytest.raises(KdtrError, match="no KDTR code"):
        encode({"c": np.ones(2, np.complex64)})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_corruption_raises_only_kdtr_error(data):
    """Random byte edits, truncations and extensions: either the file still decodes (an edit
    in padding) or KdtrError is raised; never another exception."""
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    blob = bytearray(_valid_blob(np.random.default_rng(seed)))
    for _ in range(data.draw(st.integers(1, 6), label="edits")):
        pos = data.draw(st.integers(0, len(blob) - 1))
        blob[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)), label="cut")
    tail = data.draw(st.binary(max_size=64), label="tail")
    mutated = bytes(blob[:cut]) + tail
    if data.draw(st.booleans(), label="reseal") and len(mutated) >= 64:
        mutated = _reseal(bytearray(mutated))
    try:
        decode(mutated, "fuzz.kdtr")
    except KdtrError:
        pass


def test_dtype_table_matches_spec():
    names = {d.code: d.name for d in kdtr.DTYPES}
    assert names == {1: "float32", 2: "float64", 3: "float16", 4: "bfloat16", 5: "int8",
                     6: "uint8", 7: "int16", 8: "int32", 9: "int64", 10: "uint16",
                     11: "uint32", 12: "uint64", 13: "bool"}
