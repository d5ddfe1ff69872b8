"""Post-verify cache compaction: keep the accepted path's rows, contiguous after the prefix."""

from __future__ import annotations

import numpy as np


def compaction_indices(past: int, accepted) -> tuple[np.ndarray, np.ndarray]:
    """Rows to move after a verify of 1+n entries appended at `past`: row past+a_j goes to
    past+j. Returns (src, dst), int64 [m+1]; the cache is then truncated to past+m+1."""
    acc = np.asarray(accepted, dtype=np.int64)
    if acc.ndim != 1 or acc.size == 0 or acc[0] != 0 or np.any(np.diff(acc) <= 0):
        raise ValueError(f"accepted must start at 0 and increase strictly, got {acc.tolist()}")
    return past + acc, past + np.arange(acc.size, dtype=np.int64)


def compact_rows(cache: np.ndarray, past: int, accepted) -> np.ndarray:
    """The cache after compaction (rows are the first axis): [past + m + 1, ...]."""
    src, dst = compaction_indices(past, accepted)
    if src[-1] >= cache.shape[0]:
        raise ValueError(f"accepted index {src[-1] - past} past the cache's {cache.shape[0]} rows")
    out = cache[: past + src.size].copy()
    out[dst] = cache[src]
    return out
