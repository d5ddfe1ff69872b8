"""Per-depth top-K of the drafter's log-softmax, in the order the tree build needs."""

from __future__ import annotations

import numpy as np

from python_engine.ddtree.arrays import as_numpy


def log_softmax_f32(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax computed in float64 and rounded once to float32, so any
    float32 implementation (the GPU's included) lands within an ulp or two of it."""
    x = as_numpy(logits).astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    return (x - lse).astype(np.float32)


def topk_logprobs(logits, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of log_softmax(logits[d]) for every row d.

    Returns (logp float32 [D, k], tok int64 [D, k]) sorted by descending log-probability,
    ties broken by lower token id first (a stable, total order). k is capped at the vocab.
    """
    logp_all = log_softmax_f32(logits)
    if logp_all.ndim != 2:
        raise ValueError(f"logits must be [D, V], got shape {logp_all.shape}")
    if np.isnan(logp_all).any():
        raise ValueError("logits contain NaN")
    depth, vocab = logp_all.shape
    k = max(0, min(int(k), vocab))
    ids = np.broadcast_to(np.arange(vocab), logp_all.shape)
    order = np.lexsort((ids, -logp_all), axis=-1)[:, :k]  # last key sorts first
    tok = order.astype(np.int64)
    logp = np.take_along_axis(logp_all, order, axis=-1)
    return logp.reshape(depth, k), tok.reshape(depth, k)
