"""The best-first heap against brute force, and the tree's structural properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from python_engine.ddtree import (
    build_tree,
    build_trees,
    pad_trees,
    topk_logprobs,
    visibility_dense,
    visibility_packed,
)


def brute_force(logp: np.ndarray, tok: np.ndarray, budget: int):
    """Every rank path, scored in float32 depth by depth, sorted by (score desc, path asc)."""
    depth, k = logp.shape
    paths = []
    for m in range(1, depth + 1):
        for path in itertools.product(range(k), repeat=m):
            s = np.float32(0.0)
            for d, r in enumerate(path):
                s = np.float32(s + logp[d, r])
            paths.append((-float(s), path))
    paths.sort()
    return [p for _, p in paths[:budget]]


def sorted_logp(rng, depth, k, levels=None):
    if levels:
        vals = rng.choice(-np.arange(1, levels + 1, dtype=np.float32) * 0.75, size=(depth, k))
    else:
        vals = -np.abs(rng.normal(-3, 2, size=(depth, k))).astype(np.float32)
    return -np.sort(-vals.astype(np.float32), axis=1)


@pytest.mark.parametrize("depth,k", [(1, 1), (1, 5), (2, 3), (3, 3), (4, 2), (3, 4)])
@pytest.mark.parametrize("ties", [None, 2])
def test_heap_equals_brute_force(rng, depth, k, ties):
    logp = sorted_logp(rng, depth, k, ties)
    tok = np.stack([rng.permutation(50)[:k] for _ in range(depth)])
    total = sum(k**m for m in range(1, depth + 1))
    for budget in sorted({0, 1, 2, total // 2, total, total + 7}):
        tree = build_tree(logp, tok, budget)
        expected = brute_force(logp, tok, budget)
        assert tree.ranks[1:] == expected
        assert tree.n == min(budget, total)
        for i, path in enumerate(tree.ranks[1:], 1):
            assert tree.tokens[i] == tok[len(path) - 1, path[-1]]
            assert tree.depth[i] == len(path)
            assert tree.ranks[tree.parent[i]] == path[:-1]


def test_hand_checked_tree():
    # depth 0: a (-0.1), b (-2.0); depth 1: c (-0.5), d (-1.0)
    logp = np.array([[-0.1, -2.0], [-0.5, -1.0]], np.float32)
    tok = np.array([[10, 11], [20, 21]])
    tree = build_tree(logp, tok, budget=4, root_token=5)
    # order: a(-0.1), a.c(-0.6), a.d(-1.1), b(-2.0)
    assert tree.tokens.tolist() == [5, 10, 20, 21, 11]
    assert tree.parent.tolist() == [-1, 0, 1, 1, 0]
    assert tree.depth.tolist() == [0, 1, 2, 2, 1]
    assert tree.positions(100).tolist() == [100, 101, 102, 102, 101]
    np.testing.assert_array_equal(
        visibility_dense(tree).astype(int),
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 0, 0, 1]],
    )
    assert visibility_packed(tree)[:, 0].tolist() == [1, 3, 7, 11, 17]


def test_exact_ties_follow_rank_path_order():
    logp = np.full((3, 3), np.float32(-1.0))  # every path of a depth ties
    tok = np.arange(9).reshape(3, 3)
    tree = build_tree(logp, tok, budget=13)
    assert tree.ranks[1:] == [(0,), (1,), (2,)] + sorted(itertools.product(range(3), repeat=2)) + [(0, 0, 0)]


def test_topk_order_and_ties():
    logits = np.array([[1.0, 3.0, 3.0, 0.5, 3.0]], np.float32)
    logp, tok = topk_logprobs(logits, 4)
    assert tok.tolist() == [[1, 2, 4, 0]]
    ref = logits[0] - np.log(np.exp(logits[0].astype(np.float64)).sum())
    np.testing.assert_allclose(logp[0], ref[[1, 2, 4, 0]], rtol=1e-6)
    assert topk_logprobs(logits, 99)[1].shape == (1, 5)  # K capped at the vocab


def test_root_only_cases():
    logp = sorted_logp(np.random.default_rng(1), 3, 4)
    tok = np.arange(12).reshape(3, 4)
    for tree in (build_tree(logp, tok, 0, 9), build_tree(logp[:0], tok[:0], 5, 9)):
        assert tree.n == 0 and tree.tokens.tolist() == [9] and tree.parent.tolist() == [-1]
        assert visibility_dense(tree).tolist() == [[True]]


def test_bad_inputs():
    with pytest.raises(ValueError, match="budget"):
        build_tree(np.zeros((1, 1), np.float32) - 1, np.zeros((1, 1)), -1)
    with pytest.raises(ValueError, match="NaN"):
        build_tree(np.full((1, 2), np.nan, np.float32), np.zeros((1, 2)), 2)
    with pytest.raises(ValueError, match="log-probabilities"):
        build_tree(np.array([[0.5]], np.float32), np.zeros((1, 1)), 1)
    with pytest.raises(ValueError, match="descending"):
        build_tree(np.array([[-2.0, -1.0]], np.float32), np.zeros((1, 2)), 1)
    with pytest.raises(ValueError, match="D, K"):
        build_tree(np.zeros((2, 2), np.float32), np.zeros((2, 3)), 2)


@st.composite
def tree_inputs(draw):
    depth = draw(st.integers(1, 6))
    k = draw(st.integers(1, 6))
    vocab = draw(st.integers(k, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    levels = draw(st.sampled_from([None, 1, 2, 3]))
    rng = np.random.default_rng(seed)
    logp = sorted_logp(rng, depth, k, levels)
    tok = np.stack([rng.permutation(vocab)[:k] for _ in range(depth)])
    budget = draw(st.integers(0, 80))
    return logp, tok, budget


@settings(max_examples=200, deadline=None)
@given(tree_inputs())
def test_tree_properties(inputs):
    logp, tok, budget = inputs
    depth, k = logp.shape
    tree = build_tree(logp, tok, budget)
    possible = sum(k**m for m in range(1, depth + 1))
    assert tree.n == min(budget, possible)
    assert all(tree.parent[i] < i for i in range(1, tree.n + 1))
    ranks = set(tree.ranks)
    assert all(r[:-1] in ranks for r in tree.ranks[1:])  # prefix-closed
    sib_tokens: dict[int, list[int]] = {}  # siblings carry distinct tokens
    for i in range(1, tree.n + 1):
        sib_tokens.setdefault(int(tree.parent[i]), []).append(int(tree.tokens[i]))
    assert all(len(v) == len(set(v)) for v in sib_tokens.values())
    keys = [(-float(tree.score[i]), tree.ranks[i]) for i in range(1, tree.n + 1)]
    assert keys == sorted(keys)  # the total order
    vis = visibility_dense(tree)
    for i in range(tree.n + 1):
        anc = {i}
        j = i
        while j > 0:
            j = int(tree.parent[j])
            anc.add(j)
        assert set(np.flatnonzero(vis[i]).tolist()) == anc
    packed = visibility_packed(tree)
    unpacked = (packed[:, :, None] >> np.arange(32, dtype=np.uint32)) & 1
    assert (unpacked.reshape(tree.n + 1, -1)[:, : tree.n + 1] == vis).all()


def test_batched_build_and_padding(rng):
    b, depth, k = 6, 4, 5
    logp = np.stack([sorted_logp(rng, depth, k) for _ in range(b)])
    tok = rng.integers(0, 1000, size=(b, depth, k))
    budgets = np.array([0, 3, 7, 100, 1, 20])
    roots = rng.integers(0, 1000, size=b)
    trees = build_trees(logp, tok, budgets, roots)
    padded = pad_trees(trees)
    top = max(t.n for t in trees)
    assert padded["tokens"].shape == (b, top + 1)
    for i, t in enumerate(trees):
        single = build_tree(logp[i], tok[i], int(budgets[i]), int(roots[i]))
        assert t.ranks == single.ranks
        assert padded["n"][i] == t.n
        assert padded["parent"][i, : t.n + 1].tolist() == t.parent.tolist()
        assert (padded["parent"][i, t.n + 1 :] == -1).all()
        assert (padded["vis"][i, t.n + 1 :] == 0).all()
