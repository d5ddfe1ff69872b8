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
    policy = AutoBudget(VerifyCosts.from_samples([(0, 1, 1.0)]), max_budget=n, calibrate=False)
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
        switches = ()
    else:  # a verify cost that drops at a switch of code path: the throughput is not unimodal
        switch = int(rng.integers(2, 64))
        samples = [(n, c, 500.0 + 20.0 * n - (4000.0 if n >= switch else 0.0) + 5000.0)
                   for n in sorted({0, 1, switch - 1, switch, 64}) for c in (1, 500)]
        switches = (switch,)
    costs = VerifyCosts.from_samples(samples, switches)
    policy = AutoBudget(costs, max_budget=largest, calibrate=False)
    policy.overhead_us = float(rng.uniform(0, 3000))
    tree = build_tree(logp, tok, largest)
    chosen = policy.choose(tree.score, context)
    best, best_rate = brute_force_budget(logp, tok, largest, lambda n: policy.round_us(np.arange(1, n + 1), context)[-1])
    rate = policy.expected_lengths(tree.score)[chosen] / policy.round_us(np.arange(1, chosen + 1), context)[-1]
    assert chosen == best or rate == pytest.approx(best_rate, rel=1e-9)


def test_cost_model_recovers_each_segment_and_the_context_term(rng):
    """Exact samples of a cost rising in the size within each segment and dropping or jumping
    at each code-path switch: the model gives it back at sizes and contexts it never saw."""
    largest = int(rng.integers(16, 200))
    switches = tuple(sorted(set(rng.choice(np.arange(2, largest), size=int(rng.integers(0, 3)), replace=False).tolist())))
    lines = [(float(rng.uniform(1000, 5000)), float(rng.uniform(0, 200))) for _ in range(len(switches) + 1)]
    c, d = float(rng.uniform(0, 5)), float(rng.uniform(0, 0.5))
    c0, c1 = int(rng.integers(1, 100)), int(rng.integers(200, 400))

    def truth(n, ctx):
        a, b = lines[int(np.searchsorted(switches, n, side="right"))]
        return a + b * n + (c + d * n) * (ctx - c0)

    sizes = sorted(set(rng.choice(largest + 1, size=largest // 2, replace=False).tolist())
                   | {s for n in switches for s in (n - 1, n)} | {0, largest})
    samples = [(n, c0, truth(n, c0)) for n in sizes] + [(n, c1, truth(n, c1)) for n in (0, largest // 2, largest)]
    costs = VerifyCosts.from_samples(samples, switches)
    ctx = int(rng.integers(0, 600))
    for n in range(largest + 1):
        assert float(costs.verify_us(n, ctx)) == pytest.approx(max(truth(n, ctx), costs.floor_us), rel=1e-6)


def test_rising_line(rng):
    from python_engine.decode.budget_auto import rising_line

    n = np.sort(rng.choice(100, size=int(rng.integers(2, 30)), replace=False)).astype(np.float64)
    t = rng.uniform(100, 200) + rng.uniform(0.5, 5) * n + rng.normal(0, 1, size=len(n))
    slope, intercept = np.polyfit(n, t, 1)
    np.testing.assert_allclose(rising_line(n, t), intercept + slope * n, rtol=1e-9)
    falling = rng.uniform(100, 200) - rng.uniform(0.5, 5) * n
    np.testing.assert_allclose(rising_line(n, falling), np.full(len(n), falling.mean()), rtol=1e-9)


def test_nonnegative_least_squares_against_a_grid(rng):
    from python_engine.decode.budget_auto import nonnegative_least_squares

    design = rng.normal(size=(int(rng.integers(3, 12)), 2))
    target = rng.normal(size=design.shape[0])
    x = nonnegative_least_squares(design, target)
    err = ((design @ x - target) ** 2).sum()
    grid = np.stack(np.meshgrid(np.linspace(0, 5, 201), np.linspace(0, 5, 201)), axis=-1).reshape(-1, 2)
    assert (x >= 0).all() and err <= (((grid @ design.T) - target) ** 2).sum(axis=1).min() + 1e-9


def test_path_switch_is_where_the_moe_stops_gathering(rng):
    """The switch a tiny config puts at a random row count: GATHER_LIMIT over the gathered
    weights' size per row."""
    from types import SimpleNamespace

    from python_engine.decode.budget_auto import path_switches
    from python_engine.model.moe import GATHER_LIMIT

    k, inter, hidden = int(rng.integers(1, 9)), int(rng.integers(8, 257)), int(rng.integers(8, 513))
    rows_max = GATHER_LIMIT // (k * 3 * inter * hidden)  # the most rows that gather
    largest = int(rng.integers(1, 400))
    target = SimpleNamespace(cfg=SimpleNamespace(n_routed_experts=8, num_experts_per_tok=k,
                                                 moe_intermediate_size=inter, hidden_size=hidden))
    # a tree of n nodes is n + 1 rows: n = rows_max is the first that does not gather
    assert path_switches(target, largest) == ((rows_max,) if 1 <= rows_max <= largest else ())
    assert path_switches(SimpleNamespace(cfg=SimpleNamespace(n_routed_experts=0)), largest) == ()


def test_first_decrease_rule_and_the_affine_cost(rng):
    """CaDDTree's rule (kept for kdtree bench budget): with a straight-line cost the
    throughput is unimodal and the first decrease is the argmax; with a cost that drops at a
    switch it stops before the drop, where the argmax does not."""
    line = (float(rng.uniform(100, 2000)), float(rng.uniform(1, 100)))
    samples = [(n, 5, line[0] + line[1] * n + float(rng.normal(0, 1e-6))) for n in range(0, 65, 4)]
    affine = VerifyCosts.affine(samples)
    np.testing.assert_allclose(affine.verify_us(np.arange(65), 5), line[0] + line[1] * np.arange(65), rtol=1e-6)
    scores = np.concatenate([[0.0], np.sort(np.log(rng.uniform(0.01, 1.0, size=64)))[::-1]]).astype(np.float32)
    greedy = AutoBudget(affine, 64, calibrate=False, stop_at_first_decrease=True)
    full = AutoBudget(affine, 64, calibrate=False)
    greedy.overhead_us = full.overhead_us = float(rng.uniform(0, 1000))
    assert greedy.choose(scores, 5) == full.choose(scores, 5)
    drop = VerifyCosts.from_samples([(0, 5, 100.0), (7, 5, 2000.0), (8, 5, 100.0), (64, 5, 110.0)], (8,))
    scores = np.log(np.array([1.0] + [0.9] * 64, dtype=np.float32))
    greedy, full = (AutoBudget(drop, 64, calibrate=False, stop_at_first_decrease=s) for s in (True, False))
    greedy.overhead_us = full.overhead_us = 10.0
    assert greedy.choose(scores, 5) < 8 <= full.choose(scores, 5)


def test_calibration_follows_what_the_target_accepts():
    policy = AutoBudget(VerifyCosts.from_samples([(0, 1, 1000.0), (8, 1, 1000.0)]), max_budget=8)
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


def test_measured_costs_cover_every_size(decode_models):
    target = load_target(decode_models["no_q_lora"][0])
    costs = measure_verify_costs(target, 32, (4, 40), repeats=1)
    timed = {c: sorted(n for n, cc, _ in costs.samples if cc == c) for c in (4, 40)}
    assert set(timed[4]) >= set(range(9)) | set(range(10, 33, 2)) and timed[40] == [0, 2, 4, 8, 12, 16, 24, 32]
    assert costs.context0 == 4 and all(t > 0 for _, _, t in costs.samples)
    assert (costs.verify_us(np.arange(0, 33), 40) > 0).all()


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
