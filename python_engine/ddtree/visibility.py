"""The ancestor-only attention mask of the verify pass: node i sees j iff j is i or one of
i's ancestors (the root included)."""

from __future__ import annotations

import numpy as np

from python_engine.ddtree.tree import Tree

BITS_PER_WORD = 32  # packed rows use uint32 words, bit j%32 of word j//32


def visibility_dense(tree: Tree) -> np.ndarray:
    """bool [n+1, n+1]; row 0 sees only the root."""
    size = tree.n + 1
    vis = np.zeros((size, size), dtype=bool)
    vis[0, 0] = True
    for i in range(1, size):  # parent[i] < i, so the parent's row is complete
        vis[i] = vis[tree.parent[i]]
        vis[i, i] = True
    return vis


def pack_rows(dense: np.ndarray, words: int | None = None) -> np.ndarray:
    """Pack a bool [R, C] matrix into uint32 [R, words], bit j%32 of word j//32."""
    rows, cols = dense.shape
    need = (cols + BITS_PER_WORD - 1) // BITS_PER_WORD
    words = need if words is None else words
    if words < need:
        raise ValueError(f"{cols} columns need {need} words, got {words}")
    padded = np.zeros((rows, words * BITS_PER_WORD), dtype=np.uint64)
    padded[:, :cols] = dense
    weights = np.uint64(1) << np.arange(BITS_PER_WORD, dtype=np.uint64)
    packed = (padded.reshape(rows, words, BITS_PER_WORD) * weights).sum(axis=-1)
    return packed.astype(np.uint32)


def visibility_packed(tree: Tree, words: int | None = None) -> np.ndarray:
    """uint32 [n+1, words]: the dense mask's rows bit-packed (words >= ceil((n+1)/32))."""
    return pack_rows(visibility_dense(tree), words)
