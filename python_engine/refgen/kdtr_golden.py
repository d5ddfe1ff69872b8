"""The KDTR format bundle: every dtype, edge-case values, scalar, empty, rank-8 and unusual
names, written by the Python writer and checked value by value by the C++ reader test
(csrc/tests/test_kdtr.cpp), which holds the same literals. Change both together.

    kdtree refs --only kdtr_format      # writes refs/kdtr_format.kdtr

Registered in python_engine/refgen as the "kdtr_format" generator.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from python_engine.kdtr import Tensor, write_kdtr

BUNDLE_NAME = "kdtr_format.kdtr"
LONG_NAME = "n" * 159  # the longest name the format allows
UNICODE_NAME = "ünïcødé.テンソル"


def golden_tensors() -> dict[str, object]:
    """Name -> value, in file order. The C++ test expects exactly this order and content."""
    return {
        "dtype.float32": np.array(
            [[1 / 3, -0.0, 1.401298464324817e-45], [-2.5, np.inf, np.nan]], dtype=np.float32
        ),
        "dtype.float64": np.array([1 / 3, -1e300, 5e-324], dtype=np.float64),
        "dtype.float16": np.array([[-2.0, 0.5], [65504.0, 2.0**-24]], dtype=np.float16),
        # numpy has no bfloat16: raw bit patterns of 1.0, -2.0, 3.140625
        "dtype.bfloat16": Tensor("bfloat16", (3,), np.array([0x3F80, 0xC000, 0x4049], "<u2").tobytes()),
        "dtype.int8": np.array([-128, -1, 0, 127], dtype=np.int8),
        "dtype.uint8": np.array([0, 128, 255], dtype=np.uint8),
        "dtype.int16": np.array([-32768, 12345, 32767], dtype=np.int16),
        "dtype.int32": np.array([[-(2**31), -1], [7, 2**31 - 1]], dtype=np.int32),
        "dtype.int64": np.array([-(2**63), 0x0123456789ABCDEF, 2**63 - 1], dtype=np.int64),
        "dtype.uint16": np.array([0, 65535], dtype=np.uint16),
        "dtype.uint32": np.array([0xDEADBEEF, 2**32 - 1], dtype=np.uint32),
        "dtype.uint64": np.array([2**64 - 1, 0x8000000000000001], dtype=np.uint64),
        "dtype.bool": np.array([True, False, False, True, True]),
        "scalar.int64": np.int64(42),
        "scalar.float64": np.float64(-0.125),
        "empty.float32": np.zeros((0, 3), dtype=np.float32),
        "rank8.int32": (np.arange(16, dtype=np.int32) * 3 - 7).reshape(1, 2, 1, 2, 1, 2, 1, 2),
        # 67 bytes: the next tensor starts after a gap of zero padding
        "odd.uint8": (np.arange(67) * 7 % 256).astype(np.uint8),
        LONG_NAME: np.array([159], dtype=np.int32),
        UNICODE_NAME: np.array([-7], dtype=np.int16),
        "big.float32": ((np.arange(1000) % 17) * 0.125 - 1.0).astype(np.float32),
    }


def write_kdtr_golden(out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_kdtr(out_dir / BUNDLE_NAME, golden_tensors())]

