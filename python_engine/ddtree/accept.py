"""The accept walk: follow the target's choices down the tree until one has no child."""

from __future__ import annotations

import numpy as np

from python_engine.ddtree.arrays import as_numpy
from python_engine.ddtree.tree import Tree


def accept_walk(tree: Tree, choice) -> tuple[list[int], int]:
    """Walk from the root: at node i the target chose token choice[i]; move to the child
    carrying it, or stop there. Returns (accepted node indices starting with 0, bonus token).

    choice[i] is the argmax of the target's logits at node i (T = 0) or a sample from
    softmax(logits/T) (T > 0): with independent samples per node the output is distributed
    exactly as autoregressive sampling.
    """
    choice = as_numpy(choice)
    if choice.shape != (tree.n + 1,):
        raise ValueError(f"choice must be [{tree.n + 1}], got {choice.shape}")
    kids = tree.children()
    accepted = [0]
    node = 0
    while True:
        token = int(choice[node])
        child = kids[node].get(token)
        if child is None:
            return accepted, token
        accepted.append(child)
        node = child


def greedy_choice(logits) -> np.ndarray:
    """argmax over the last axis, lowest token id on ties (numpy's first maximum)."""
    return np.argmax(as_numpy(logits), axis=-1).astype(np.int64)


def accept_greedy(tree: Tree, logits) -> tuple[list[int], int]:
    """The T = 0 walk from target logits [n+1, V]."""
    return accept_walk(tree, greedy_choice(logits))
