"""`kdtree bench routing` (kdtree_cli/bench/routing.py): the target's routing observer sees
what the router chose without changing the forward, the first T rows of a verify are the
round of the smaller budget, and the counts and baselines against brute force and
simulation."""

from __future__ import annotations

import numpy as np
import torch

from kdtree_cli.bench.routing import distinct_by_prefix, effective_tokens, random_expectation
from python_engine.ddtree import build_tree, topk_logprobs, visibility_dense
from python_engine.model.target_loader import load_target


def test_distinct_by_prefix_counts_like_sets(rng):
    E = int(rng.integers(2, 40))
    k, T = int(rng.integers(1, E + 1)), int(rng.integers(1, 70))
    rows = np.stack([rng.choice(E, size=k, replace=False) for _ in range(T)])
    got = distinct_by_prefix(rows, E)
    assert got.tolist() == [len(set(rows[:t].reshape(-1).tolist())) for t in range(1, T + 1)]


def test_random_expectation_matches_simulated_random_routing(rng):
    E = int(rng.integers(4, 64))
    k = int(rng.integers(1, E // 2 + 1))
    T = np.arange(1, 40)
    draws = 3000
    sims = np.array([distinct_by_prefix(np.stack([rng.choice(E, size=k, replace=False) for _ in T]), E)
                     for _ in range(draws)])
    expected = random_expectation(E, k, T)
    # near E every draw may have touched all experts (a sample std of 0): the missing count's
    # variance is at most its mean, which bounds the standard error from below
    stderr = np.maximum(sims.std(axis=0), np.sqrt(E - expected)) / np.sqrt(draws)
    assert (np.abs(sims.mean(axis=0) - expected) <= 5 * stderr + 1e-9).all()
    # the effective token count inverts the expectation where it has not reached E
    back = effective_tokens(random_expectation(E, k, T), E, k)
    for t, b in zip(T, back):
        assert b is None or abs(b - t) < 1e-6 * t


def test_observer_sees_the_routers_choice_and_leaves_the_forward_as_it_was(decode_models, seed):
    target = load_target(decode_models["groups_yarn"][0])
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, target.cfg.vocab_size, (int(torch.randint(2, 20, (1,), generator=g)),), generator=g)
    taps = {}
    plain = target.forward(tokens, torch.arange(len(tokens)), target.new_cache(), taps=taps)
    seen = []
    target.routing_observer = lambda layer, experts: seen.append((layer, experts.clone()))
    watched = target.forward(tokens, torch.arange(len(tokens)), target.new_cache())
    target.routing_observer = None
    assert torch.equal(plain.logits, watched.logits)
    moe = [i for i, lw in enumerate(target.w.layers) if lw.moe is not None]
    assert [layer for layer, _ in seen] == moe
    for layer, experts in seen:
        assert torch.equal(experts, taps[f"{layer}.router_experts"])


def test_first_rows_of_a_verify_are_the_smaller_budgets_round(decode_models, rng):
    """Node i sees only its ancestors (numbered below it): the first n + 1 rows of the verify
    of the best tree of N nodes equal the verify of the best tree of n nodes, so the bench's
    one verify per round measures every smaller round."""
    target = load_target(decode_models["no_q_lora"][0])
    V = target.cfg.vocab_size
    prompt = rng.integers(0, V, size=int(rng.integers(1, 16))).tolist()
    logits = rng.normal(size=(5, V)).astype(np.float32) * 3
    N = 24
    big = build_tree(*topk_logprobs(logits, N), N, root_token=int(rng.integers(0, V)))
    cache = target.new_cache()
    target.forward(prompt, torch.arange(len(prompt)), cache)
    P = len(prompt)

    def verify(tree):
        c = cache.clone()
        vis = torch.ones(tree.n + 1, P + tree.n + 1, dtype=torch.bool)
        vis[:, P:] = torch.from_numpy(visibility_dense(tree))
        taps = {}
        out = target.forward(tree.tokens, tree.positions(P), c, vis, taps=taps)
        return out.logits, taps

    full_logits, full_taps = verify(big)
    for n in (0, 1, int(rng.integers(2, N)), N - 1):
        logits_n, taps_n = verify(big.prefix(n))
        torch.testing.assert_close(logits_n, full_logits[: n + 1], rtol=1e-4, atol=1e-4)
        for i, lw in enumerate(target.w.layers):
            if lw.moe is not None:
                torch.testing.assert_close(taps_n[f"{i}.ffn_in"], full_taps[f"{i}.ffn_in"][: n + 1],
                                           rtol=1e-4, atol=1e-5)
