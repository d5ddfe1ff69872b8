"""Batched helpers: B requests with their own budgets, and the padded layout the GPU uses."""

from __future__ import annotations

import numpy as np

from python_engine.ddtree.arrays import as_numpy
from python_engine.ddtree.tree import Tree, build_tree
from python_engine.ddtree.visibility import BITS_PER_WORD, visibility_packed

PAD = -1  # fill value for per-node arrays past a request's node count


def build_trees(logp, tok, budgets, roots=None) -> list[Tree]:
    """One tree per request: logp/tok [B, D, K], budgets [B], roots [B] (default -1).
    A request only uses ranks below its budget, so a shared K >= every min(N_b, V) works."""
    logp, tok = as_numpy(logp), as_numpy(tok)
    budgets = [int(b) for b in as_numpy(budgets)]
    roots = [-1] * len(budgets) if roots is None else [int(r) for r in as_numpy(roots)]
    if not (logp.shape[0] == tok.shape[0] == len(budgets) == len(roots)):
        raise ValueError("logp, tok, budgets and roots must agree on B")
    return [build_tree(logp[b], tok[b], budgets[b], roots[b]) for b in range(len(budgets))]


def pad_trees(trees: list[Tree], max_nodes: int | None = None) -> dict[str, np.ndarray]:
    """The batch as padded arrays: n [B]; tokens, depth, parent [B, N+1] padded with -1;
    vis uint32 [B, N+1, ceil((N+1)/32)] zero-padded, where N = max_nodes or the largest n."""
    big = max((t.n for t in trees), default=0) if max_nodes is None else max_nodes
    rows = big + 1
    words = (rows + BITS_PER_WORD - 1) // BITS_PER_WORD
    b = len(trees)
    out = {
        "n": np.array([t.n for t in trees], dtype=np.int32),
        "tokens": np.full((b, rows), PAD, dtype=np.int32),
        "depth": np.full((b, rows), PAD, dtype=np.int32),
        "parent": np.full((b, rows), PAD, dtype=np.int32),
        "vis": np.zeros((b, rows, words), dtype=np.uint32),
    }
    for i, t in enumerate(trees):
        if t.n > big:
            raise ValueError(f"tree {i} has {t.n} nodes, more than max_nodes={big}")
        size = t.n + 1
        out["tokens"][i, :size] = t.tokens
        out["depth"][i, :size] = t.depth
        out["parent"][i, :size] = t.parent
        out["vis"][i, :size] = visibility_packed(t, words)
    return out
