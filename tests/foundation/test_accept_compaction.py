"""The accept walk and cache compaction: hand-checked cases and random ones."""

from __future__ import annotations

import numpy as np
import pytest

from python_engine.ddtree import (
    accept_greedy,
    accept_walk,
    build_tree,
    compact_rows,
    compaction_indices,
)


def small_tree():
    # tokens: root 5; 1:a=10 (d1), 2:c=20 (d2, under 1), 3:d=21 (d2, under 1), 4:b=11 (d1)
    logp = np.array([[-0.1, -2.0], [-0.5, -1.0]], np.float32)
    return build_tree(logp, np.array([[10, 11], [20, 21]]), budget=4, root_token=5)


def test_hand_checked_walks():
    tree = small_tree()
    # root chooses 10 -> node 1; node 1 chooses 21 -> node 3; node 3 chooses 7 (leaf) -> bonus 7
    assert accept_walk(tree, [10, 21, 0, 7, 0]) == ([0, 1, 3], 7)
    assert accept_walk(tree, [11, 0, 0, 0, 30]) == ([0, 4], 30)  # b has no children
    assert accept_walk(tree, [99, 20, 0, 0, 0]) == ([0], 99)  # no match at the root
    logits = np.zeros((5, 32), np.float32) - 1.0
    logits[0, 10] = logits[0, 11] = 2.0  # a tie: the lower id (10) wins
    logits[1, 20] = 1.0
    logits[2, 3] = 1.0
    assert accept_greedy(tree, logits) == ([0, 1, 2], 3)


def test_random_walks_follow_reference(rng):
    for _ in range(50):
        depth, k, vocab = int(rng.integers(1, 6)), int(rng.integers(1, 5)), 30
        logp = -np.sort(np.abs(rng.normal(-2, 1, size=(depth, k))).astype(np.float32), axis=1)
        tok = np.stack([rng.permutation(vocab)[:k] for _ in range(depth)])
        tree = build_tree(logp, tok, int(rng.integers(0, 40)), root_token=1)
        choice = rng.integers(0, vocab, size=tree.n + 1)
        # bias the choices toward the tree so walks get long
        for i in range(1, tree.n + 1):
            if rng.random() < 0.7:
                choice[tree.parent[i]] = tree.tokens[i]
        accepted, bonus = accept_walk(tree, choice)
        # independent check: each accepted node is the child of the previous one carrying
        # the previous node's choice, and the last node has no child with the bonus token
        for prev, node in zip(accepted, accepted[1:]):
            assert tree.parent[node] == prev and tree.tokens[node] == choice[prev]
        last = accepted[-1]
        assert bonus == choice[last]
        assert not any(tree.parent[j] == last and tree.tokens[j] == bonus
                       for j in range(1, tree.n + 1))


def test_compaction(rng):
    past, n, width = 6, 7, 5
    cache = rng.normal(size=(past + 1 + n, width))
    accepted = [0, 2, 5, 7]
    src, dst = compaction_indices(past, accepted)
    assert src.tolist() == [6, 8, 11, 13] and dst.tolist() == [6, 7, 8, 9]
    out = compact_rows(cache, past, accepted)
    assert out.shape == (past + 4, width)
    np.testing.assert_array_equal(out[:past], cache[:past])
    np.testing.assert_array_equal(out[past:], cache[[6, 8, 11, 13]])
    with pytest.raises(ValueError, match="start at 0"):
        compaction_indices(past, [1, 2])
    with pytest.raises(ValueError, match="increase"):
        compaction_indices(past, [0, 3, 3])
    with pytest.raises(ValueError, match="past the cache"):
        compact_rows(cache, past, [0, 20])
