"""`--budget auto` (python_engine/decode/budget_auto.py): the best tree of every size from
one build, its expected acceptance length against a simulated target that draws from the
drafter's distributions, the choice against a brute-force search over separate builds, the
cost fit, `kdtree run --budget auto` end to end (events carry the chosen budget, the tokens
are greedy AR's) and the native engine's refusal."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from kdtree_cli.app import app
from python_engine.ddtree import accept_walk, build_tree, topk_logprobs
from python_engine.decode.ar import ar_generate
from python_engine.decode.budget_auto import AutoBudget, VerifyCosts, measure_verify_costs, parse_budget
from python_engine.decode.run_command import RunRequest
from python_engine.errors import KdtreeError
from python_engine.events import iter_events
from python_engine.model.target_loader import load_target
from python_engine.run import run_command


def random_logits(rng, depth: int, vocab: int, spread: float) -> np.ndarray:
    return (rng.normal(size=(depth, vocab)) * spread).astype(np.float32)


def test_prefix_is_the_tree_of_the_smaller_budget(rng):
    """Cutting the best tree of N nodes to n gives what the loop builds at budget n (its
    top-K at K = n): same nodes, order, parents, depths, tokens and scores."""
    depth, vocab = int(rng.integers(1, 6)), int(rng.integers(2, 40))
    logits = random_logits(rng, depth, vocab, float(rng.uniform(0.5, 4)))
    largest = int(rng.integers(1, 80))
    big = build_tree(*topk_logprobs(logits, min(largest, vocab)), largest, root_token=7)
    for n in range(0, largest + 1):
        small = build_tree(*topk_logprobs(logits, min(n, vocab)), n, root_token=7)
        cut = big.prefix(n)
        assert cut.n == small.n
        assert cut.ranks == small.ranks
        for a, b in ((cut.tokens, small.tokens), (cut.parent, small.parent), (cut.depth, small.depth),
                     (cut.score, small.score)):
            np.testing.assert_array_equal(a, b)


def test_expected_length_matches_a_target_drawing_from_the_drafter(rng):
    """E(n) = 1 + sum exp(score) is the mean accepted length when the target's token at each
    depth is drawn from the drafter's distribution there: simulated with the accept walk."""
    depth, vocab = 3, 5
    logits = random_logits(rng, depth, vocab, 1.5)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    n = int(rng.integers(1, 40))
    tree = build_tree(*topk_logprobs(logits, n), n, root_token=0)
    policy = AutoBudget(VerifyCosts.fit([(0, 1, 1.0)]), max_budget=n, calibrate=False)
    draws = 20000
    lengths = np.empty(draws)
    for s in range(draws):
        target_tokens = [rng.choice(vocab, p=probs[d]) for d in range(depth)]
        choice = [target_tokens[min(int(tree.depth[i]), depth - 1)] for i in range(tree.n + 1)]
        lengths[s] = len(accept_walk(tree, choice)[0])
    expected = policy.expected_lengths(tree.score)[tree.n]
    sigma = lengths.std() / np.sqrt(draws)
    assert abs(lengths.mean() - expected) <= 5 * sigma + 1e-3, (lengths.mean(), expected, sigma)


def brute_force_budget(logp, tok, largest: int, round_us) -> tuple[int, float]:
    """The best budget by building every size separately and multiplying each node's path
    probabilities in float64."""
    best, best_rate = 0, -1.0
    for n in range(1, largest + 1):
        tree = build_tree(logp[:, :n], tok[:, :n], n)
        if tree.n < n:
            break
        expected = 1.0 + sum(np.prod([np.exp(np.float64(logp[d, r])) for d, r in enumerate(path)])
                             for path in tree.ranks[1:])
        rate = expected / round_us(n)
        if rate > best_rate:
            best, best_rate = n, rate
    return best, best_rate


@pytest.mark.parametrize("shape", ["linear", "steps"])
def test_choice_is_the_brute_force_best(rng, shape):
    largest = int(rng.integers(1, 70))
    logp, tok = topk_logprobs(random_logits(rng, int(rng.integers(1, 8)), 64, float(rng.uniform(0.3, 5))), largest)
    context = int(rng.integers(1, 500))
    if shape == "linear":
        samples = [(n, c, float(rng.uniform(100, 1000) + n * rng.uniform(1, 50))) for n in (0, 16, 64) for c in (1, 500)]
    else:  # a verify cost with a jump: the fit is linear, the search must still take its argmax
        samples = [(n, c, 500.0 + (4000.0 if n >= 32 else 0.0)) for n in (0, 8, 16, 24, 32, 48, 64) for c in (1, 500)]
    costs = VerifyCosts.fit(samples)
    policy = AutoBudget(costs, max_budget=largest, calibrate=False)
    policy.overhead_us = float(rng.uniform(0, 3000))
    tree = build_tree(logp, tok, largest)
    chosen = policy.choose(tree.score, context)
    best, best_rate = brute_force_budget(logp, tok, largest, lambda n: policy.round_us(np.arange(1, n + 1), context)[-1])
    rate = policy.expected_lengths(tree.score)[chosen] / policy.round_us(np.arange(1, chosen + 1), context)[-1]
    assert chosen == best or rate == pytest.approx(best_rate, rel=1e-9)


def test_cost_fit_recovers_a_known_model_and_stays_monotone(rng):
    coef = rng.uniform(1, 100, size=4)
    samples = [(n, c, float(coef[0] + coef[1] * (n + 1) + coef[2] * c + coef[3] * (n + 1) * c))
               for n in (0, 4, 16, 64) for c in (8, 300)]
    costs = VerifyCosts.fit(samples)
    np.testing.assert_allclose(costs.coef, coef, rtol=1e-6)
    falling = VerifyCosts.fit([(0, 10, 900.0), (64, 10, 300.0)])  # a noisy fit that falls with n
    t = falling.verify_us(np.arange(0, 65), 10)
    assert (np.diff(t) >= 0).all() and t.min() >= 300.0


def test_calibration_follows_what_the_target_accepts():
    policy = AutoBudget(VerifyCosts.fit([(0, 1, 1000.0), (8, 1, 1000.0)]), max_budget=8)
    scores = np.log(np.array([1.0] + [0.9] * 8, dtype=np.float32))
    for _ in range(50):  # the drafter promises ~0.9 a node; the target accepts nothing
        policy.choose(scores, context=1)
        policy.observe(1, {"draft": 1.0, "tree_build": 1.0, "verify": 1000.0, "commit": 1.0})
    assert policy.calibration < 0.05 + 1e-9
    assert policy.verify_scale == pytest.approx(1.0)


def test_parse_budget():
    assert parse_budget("auto") == "auto" and parse_budget(" AUTO ") == "auto"
    assert parse_budget("12") == 12
    with pytest.raises(KdtreeError, match="node count"):
        parse_budget("lots")


def test_measured_costs_grow_with_the_tree(decode_models):
    target = load_target(decode_models["no_q_lora"][0])
    costs = measure_verify_costs(target, 32, (4, 40), repeats=1)
    assert {s[0] for s in costs.samples} >= {0, 1, 32} and {s[1] for s in costs.samples} == {4, 40}
    t = costs.verify_us(np.arange(0, 33), 40)
    assert (t > 0).all() and (np.diff(t) >= 0).all()


def test_run_budget_auto_is_greedy_ar_and_its_events_carry_the_budget(decode_models, tmp_path, seed):
    tdir, ddir = decode_models["groups_yarn"]
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 96, (n,), generator=g).tolist() for n in (2, 11)]
    metrics = tmp_path / "m.jsonl"
    result = CliRunner().invoke(app, ["run", "--model", str(tdir), "--drafter", str(ddir), "--budget", "auto",
                                      "--max-budget", "20", "--max-tokens", "12", "--ignore-eos", "--metrics",
                                      str(metrics), *[x for p in prompts for x in ("--prompt-ids", ",".join(map(str, p)))]],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    target = load_target(tdir)
    for p in prompts:
        assert " ".join(map(str, ar_generate(target, p, 12).tokens)) in result.output
    events = [e.event for e in iter_events(metrics.read_text().splitlines())]
    start = events[0]
    assert start["budget"] == 20 and start["budget_mode"] == "auto"
    rounds = [e for e in events if e["event"] == "round"]
    assert rounds and all(1 <= e["budget"] <= 20 and e["tree_size"] == e["budget"] for e in rounds)
    assert "DDTree budget auto (<= 20, mean" in result.output


def test_native_engine_refuses_budget_auto(decode_models, tmp_path):
    tdir, ddir = decode_models["no_q_lora"]
    req = RunRequest(model=tdir, drafter=ddir, prompt_ids=["1,2,3"], budget="auto", engine="native",
                     metrics=str(tmp_path / "m.jsonl"))
    with pytest.raises(KdtreeError, match="--budget auto runs on the torch engine only"):
        run_command(req, stdout=None, stderr=None)


def test_monitor_shows_the_chosen_budget(rng):
    """The run facts say the budget is chosen per round (and its cap); the tree view's header
    gives the last round's budget beside its size."""
    import json

    from kdtree_cli.tui.stats import RunStats
    from kdtree_cli.tui.widgets.run_facts import RunFactsPanel
    from kdtree_cli.tui.widgets.tree_view import TreePanel

    cap = int(rng.integers(2, 200))
    chosen = int(rng.integers(1, cap + 1))
    lines = [
        {"event": "run_start", "t": 0.0, "engine": "torch", "model": "m", "drafter": "d", "device": "cpu",
         "host": "h", "dtype": "float32", "block_size": 8, "budget": cap, "temperature": 0.0,
         "budget_mode": "auto"},
        {"event": "round", "t": 0.1, "request": 0, "round": 0, "accept_len": 1, "tree_size": chosen,
         "tree_depth": 1, "times_us": {"draft": 1.0, "tree_build": 1.0, "verify": 1.0, "commit": 1.0},
         "tokens": 2, "budget": chosen},
    ]
    stats = RunStats()
    stats.ingest_lines(json.dumps(e) for e in lines)
    assert f"auto≤{cap}" in RunFactsPanel().draw(stats, 160, 3).plain
    assert f"auto≤{cap}" in RunFactsPanel().draw(stats, 80, 3).plain
    assert f"n {chosen} of budget {chosen}" in TreePanel().draw(stats, 100, 5).plain
