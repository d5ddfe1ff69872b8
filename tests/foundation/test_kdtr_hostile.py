"""Hostile input for the KDTR readers: each case feeds a path a user or a broken transfer
could hand over and names what must come out. Always a KdtrError naming the file; never a
read without bound, never another exception. (The C++ reader's cases are in
csrc/tests/test_kdtr.cpp, run by `kdtree test --native`.)"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from python_engine import kdtr
from python_engine.kdtr import HEADER_SIZE, KdtrError, Tensor, encode, read_kdtr, read_tensors
from python_engine.project import PROJECT_ROOT

ROOT = PROJECT_ROOT
HUGE = 2**62  # a dim no numpy array can have next to others, and legal when another is 0


def header_claiming(size: int) -> bytes:
    """A well-formed header for an empty bundle that claims `size` bytes."""
    return kdtr._HEADER.pack(kdtr.MAGIC, kdtr.VERSION, 0, size, HEADER_SIZE, HEADER_SIZE, 0, kdtr.ENTRY_SIZE,
                             b"\0" * 16)


def test_dev_zero_stops_at_the_header():
    began = time.perf_counter()
    with pytest.raises(KdtrError, match=r"^/dev/zero: bad magic b'\\x00"):
        read_tensors("/dev/zero")
    assert time.perf_counter() - began < 1.0


def test_a_directory_is_named_as_one(tmp_path):
    with pytest.raises(KdtrError, match=rf"^{tmp_path}: is a directory, not a KDTR file$"):
        read_tensors(tmp_path)


def test_a_pipe_streaming_more_than_its_header_claims_is_read_only_that_far(tmp_path):
    fifo = tmp_path / "stream.kdtr"
    os.mkfifo(fifo)
    claimed = 1 << 20
    sent = {"bytes": 0}

    def writer():  # a header claiming 1 MiB, then 64 MiB of data, or until the reader is gone
        try:
            with open(fifo, "wb") as f:
                f.write(header_claiming(claimed))
                block = b"\x07" * (1 << 16)
                for _ in range(1024):
                    f.write(block)
                    sent["bytes"] += len(block)
        except BrokenPipeError:
            pass

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    with pytest.raises(KdtrError, match=rf"^{fifo}: more data than the {claimed} bytes its header claims "
                                        r"\(not a regular file\); reading stopped there$"):
        read_tensors(fifo)
    th.join(timeout=10)
    assert sent["bytes"] < 64 << 20, "the reader should stop long before the writer does"


def test_a_regular_file_longer_than_its_header_claims_is_refused_from_its_size(tmp_path, rng):
    path = tmp_path / "padded.kdtr"
    path.write_bytes(encode({"x": rng.normal(size=(4, 4)).astype(np.float32)}) + b"\0" * 4096)
    with pytest.raises(KdtrError, match=r"header says \d+ bytes but the file has \d+ \(truncated or padded\)"):
        read_tensors(path)


def test_out_of_memory_while_reading_is_a_kdtr_error_naming_the_file(tmp_path):
    """A 300 MB file (sparse: zeros) with a valid header, read under a memory limit."""
    path = tmp_path / "big.kdtr"
    with path.open("wb") as f:
        f.write(header_claiming(300 << 20))
        f.truncate(300 << 20)
    code = (
        "import resource, sys\n"
        "from python_engine.kdtr import read_tensors, KdtrError\n"
        "vm = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1]) * 1024\n"
        "resource.setrlimit(resource.RLIMIT_AS, (vm + (150 << 20), vm + (150 << 20)))\n"
        "try:\n    read_tensors(sys.argv[1])\n"
        "except KdtrError as exc:\n    print('KdtrError:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == f"KdtrError: {path}: not enough memory to read it"


def test_a_zero_size_tensor_with_huge_dims_loads(tmp_path, rng):
    path = tmp_path / "empty.kdtr"
    normal = rng.normal(size=(3,)).astype(np.float32)
    path.write_bytes(encode({"empty": Tensor("float32", (0, HUGE), b""), "normal": normal}))
    tensors = read_tensors(path)  # as the C++ reader: it loads
    assert tensors["empty"].shape == (0, HUGE)
    t = tensors["empty"].torch()
    assert t.shape == (0, HUGE) and t.dtype == torch.float32
    np.testing.assert_array_equal(tensors["normal"].numpy(), normal)
    with pytest.raises(KdtrError, match=rf"^{path}: tensor 'empty': shape \(0, {HUGE}\) has no elements but is "
                                        r"too large for a numpy array"):
        read_kdtr(path)  # numpy has no such array: a KdtrError naming the file and the tensor
    small = tmp_path / "small.kdtr"
    small.write_bytes(encode({"empty": Tensor("int32", (0, 1 << 40), b"")}))
    assert read_kdtr(small)["empty"].shape == (0, 1 << 40)  # where numpy can, it loads
