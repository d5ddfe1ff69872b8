"""Whether a regenerated bundle says what the committed one says.

Byte equality is too strict for the bundles torch computes: its CPU kernels (ATen's vectorised
loops, MKL, oneDNN) pick their code path by the CPU's instruction set, and an AVX2 machine
rounds some float32 sums differently from an AVX-512 one (seen on the 2026-12-01 CI-like
machine: the model bundles differed by <= 3.4e-6 at values up to 11, every token, tree and
index identical). So floating-point tensors agree when each element is within FLOAT_RTOL of the
tensor's largest magnitude; everything else (names, dtypes, shapes, integers, booleans, and
non-finite values' positions) must be identical.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from python_engine.kdtr import KdtrError, Tensor, read_tensors

# Relative to a tensor's largest magnitude: 30x the largest difference seen between CPUs, and
# far below what a changed generator gives (a different seed, shape or formula moves values by
# O(1) of their scale)
FLOAT_RTOL = 1e-5
_FLOAT_DTYPES = {"float32", "float64", "float16", "bfloat16"}


def _as_float64(t: Tensor) -> np.ndarray:
    arr = t.numpy()
    if t.dtype == "bfloat16":  # uint16 bit patterns: the upper half of a float32
        return (arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return arr.astype(np.float64)


def tensor_difference(a: Tensor, b: Tensor) -> str | None:
    """None when the tensors agree (see the module docstring), else what differs."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return f"dtype/shape {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
    if a.data == b.data:
        return None
    if a.dtype not in _FLOAT_DTYPES:
        return "integer or boolean values differ"
    x, y = _as_float64(a), _as_float64(b)
    fx, fy = np.isfinite(x), np.isfinite(y)
    if not np.array_equal(fx, fy) or not np.array_equal(x[~fx], y[~fy], equal_nan=True):
        return "non-finite values differ"
    if not fx.any():
        return None
    scale = max(float(np.abs(x[fx]).max()), float(np.abs(y[fy]).max()))
    worst = float(np.abs(x[fx] - y[fy]).max())
    if worst > FLOAT_RTOL * scale:
        return f"max |difference| {worst:.3g} at scale {scale:.3g} (allowed {FLOAT_RTOL:g} of it)"
    return None


def bundle_differences(a: Path, b: Path) -> list[str]:
    """What differs between two bundles, one line per tensor (empty: they agree). A bundle
    that cannot be read (damaged, not KDTR) differs from anything."""
    try:
        ta, tb = read_tensors(a), read_tensors(b)
    except KdtrError as exc:
        return [f"unreadable: {exc}"]
    out = [f"{name}: only in {a.name if name in ta else b.name}" for name in sorted(ta.keys() ^ tb.keys())]
    for name in sorted(ta.keys() & tb.keys()):
        why = tensor_difference(ta[name], tb[name])
        if why:
            out.append(f"{name}: {why}")
    return out
