"""DDTree at T = 0 emits exactly the target's greedy AR tokens: 16 fresh random prompts x 64
tokens on two configs, with a random DFlash drafter (mostly root-only acceptance) and with
a drafter that agrees with the target often (long accepted paths, real compaction).
(Float32 rounding may flip a step whose two best logits tie to ~1e-6; greedy_checks
accepts exactly that and nothing else.)"""

from __future__ import annotations

import pytest
import torch
from greedy_checks import same_or_near_tie

from python_engine.decode.ar import ar_generate
from python_engine.decode.budget_auto import AutoBudget, measure_verify_costs
from python_engine.decode.ddtree_loop import ddtree_generate
from python_engine.model.drafter import load_drafter
from doubles.oracle_drafter import TargetOracleDrafter
from python_engine.model.target_loader import load_target

PROMPTS, TOKENS = 16, 64


def prompts_for(seed: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(torch.randint(1, 24, (1,), generator=g)),), generator=g).tolist()
            for _ in range(PROMPTS)]


@pytest.mark.parametrize("config", ["groups_yarn", "no_q_lora"])
@pytest.mark.parametrize("drafter_kind", ["random_dflash", "agreeing"])
@pytest.mark.parametrize("budget_mode", ["fixed", "auto"])
def test_ddtree_greedy_equals_ar_greedy(config, drafter_kind, budget_mode, decode_models, seed):
    """budget_mode auto: the tree's size is chosen each round (python_engine/decode/budget_auto.py),
    the node budget below its largest."""
    tdir, ddir = decode_models[config]
    target = load_target(tdir)
    if drafter_kind == "random_dflash":
        drafter, budget = load_drafter(ddir, target), 16
    else:
        drafter, budget = TargetOracleDrafter(target, block_size=6, noise=1.0, seed=seed), 24
    if budget_mode == "auto":
        budget = AutoBudget(measure_verify_costs(target, budget, (1, 24 + TOKENS), repeats=1), budget)
    accept_lens, moved_rows = [], 0
    for prompt in prompts_for(seed, target.cfg.vocab_size):
        expected = ar_generate(target, prompt, TOKENS).tokens
        gen = ddtree_generate(target, drafter, prompt, TOKENS, budget=budget,
                              trace=drafter_kind == "agreeing")
        # token for token; a flip is tolerated only at an exact-arithmetic tie (see greedy_checks)
        assert same_or_near_tie(target, prompt, gen.tokens, expected, rel_gap=1e-4), f"prompt {prompt}"
        accept_lens += [r.accept_len for r in gen.rounds]
        if gen.trace:
            moved_rows += sum(int((t["src"] != t["dst"]).sum()) for t in gen.trace)
    tau = sum(accept_lens) / len(accept_lens)
    if drafter_kind == "agreeing":
        assert tau > 2, f"mean acceptance length {tau:.2f}"
        assert max(accept_lens) >= 4
        assert moved_rows > 0, "compaction never moved a row: the non-contiguous path went untested"
    print(f"{config}/{drafter_kind}: tau {tau:.2f} over {len(accept_lens)} rounds")


def test_block_size_one_is_plain_ar(decode_models, seed):
    """D = 0: root-only trees; every round accepts just the root (one token per forward)."""
    tdir, ddir = decode_models["no_q_lora"]
    target = load_target(tdir)
    drafter = load_drafter(ddir, target)
    prompt = prompts_for(seed, target.cfg.vocab_size)[0]
    gen = ddtree_generate(target, drafter, prompt, 12, budget=8, block_size=1)
    assert gen.tokens == ar_generate(target, prompt, 12).tokens
    assert all(r.accept_len == 1 and r.tree_size == 0 for r in gen.rounds)


def test_stop_token_and_max_tokens_cut_like_ar(decode_models, seed):
    tdir, ddir = decode_models["groups_yarn"]
    target = load_target(tdir)
    drafter = TargetOracleDrafter(target, block_size=6, noise=0.0)
    prompt = prompts_for(seed, target.cfg.vocab_size)[1]
    full = ar_generate(target, prompt, 40).tokens
    stop = full[17]  # a token that occurs: both must stop at its first occurrence, inclusive
    ar = ar_generate(target, prompt, 40, stop_ids=(stop,)).tokens
    dd = ddtree_generate(target, drafter, prompt, 40, budget=16, stop_ids=(stop,)).tokens
    assert dd == ar == full[: full.index(stop) + 1]
    assert ddtree_generate(target, drafter, prompt, 7, budget=16).tokens == full[:7]
