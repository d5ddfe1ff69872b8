"""At T = 1 DDTree is lossless: the first four generated tokens follow the target's exact
joint distribution (computed by transformers over every continuation of a 6-token vocab),
as plain AR sampling does; and the same chi-square test rejects two wrong acceptance rules
injected on purpose, so it has the power to catch one.

Seeds are fixed (the p-values are then fixed numbers): weights 51/52, sampler 2024.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch
from sampling_stats import chi_square_pvalue

from python_engine.decode.ar import ar_generate
from python_engine.decode.choice import sample, standard_choice
from python_engine.decode.ddtree_loop import ddtree_generate
from doubles.oracle_drafter import TargetOracleDrafter
from python_engine.model.synthetic_checkpoint import tiny_config, write_random_target
from python_engine.model.target_loader import load_target

V, PROMPT, TOKENS = 6, [2, 4, 1, 3, 5], 4
CFG = tiny_config(vocab_size=V, hidden_size=32, num_hidden_layers=2, intermediate_size=48,
                  moe_intermediate_size=16)
PASS_P, FAIL_P = 1e-3, 1e-6


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(our target, an agreeing drafter, exact joint probabilities [V]*4 from transformers)."""
    model_dir = write_random_target(tmp_path_factory.mktemp("t1") / "v6-seed51", CFG, seed=51)
    target = load_target(model_dir)
    import transformers
    from transformers import DeepseekV3ForCausalLM

    transformers.logging.set_verbosity_error()
    hf = DeepseekV3ForCausalLM.from_pretrained(str(model_dir), attn_implementation="eager", dtype=torch.float32)
    P = len(PROMPT)
    conts = torch.tensor(list(itertools.product(range(V), repeat=TOKENS - 1)))
    batch = torch.cat([torch.tensor(PROMPT).expand(len(conts), P), conts], dim=1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logp = hf(batch).logits[:, P - 1:].double().log_softmax(-1)  # [V^3, 4, V]
    joint = torch.zeros((V,) * TOKENS, dtype=torch.float64)
    for row, (a, b, c) in enumerate(conts.tolist()):
        joint[a, b, c] = (logp[row, 0, a] + logp[row, 1, b] + logp[row, 2, c] + logp[row, 3]).exp()
    assert abs(float(joint.sum()) - 1) < 1e-9
    # drafts are the target's own noisy greedy path: long accepted paths under sampling
    drafter = TargetOracleDrafter(target, block_size=3, noise=0.5, seed=52)
    return target, drafter, joint.numpy()


def first_tokens_histogram(draw, n: int) -> tuple[np.ndarray, float]:
    g = torch.Generator().manual_seed(2024)
    counts, taus = np.zeros((V,) * TOKENS), []
    for _ in range(n):
        gen = draw(g)
        assert len(gen.tokens) == TOKENS
        counts[tuple(gen.tokens)] += 1
        taus.append(gen.tau)
    return counts, float(np.mean(taus))


def ddtree(target, drafter, rule):
    return lambda g: ddtree_generate(target, drafter, PROMPT, TOKENS, budget=10, temperature=1.0,
                                     generator=g, choice_rule=rule)


def test_ar_sampling_follows_the_exact_distribution(setup):
    target, _, joint = setup
    counts, _ = first_tokens_histogram(lambda g: ar_generate(target, PROMPT, TOKENS, 1.0, g), 1000)
    stat, dof, p = chi_square_pvalue(counts, joint)
    print(f"AR: chi2 {stat:.1f} on {dof} dof, p {p:.3f}")
    assert p > PASS_P, f"AR: chi2 {stat:.1f} on {dof} dof, p {p:.2e}"


@pytest.mark.slow
def test_ddtree_sampling_follows_the_exact_distribution(setup):
    target, drafter, joint = setup
    counts, tau = first_tokens_histogram(ddtree(target, drafter, standard_choice), 2000)
    stat, dof, p = chi_square_pvalue(counts, joint)
    print(f"DDTree: chi2 {stat:.1f} on {dof} dof, p {p:.3f}, tau {tau:.2f}")
    assert tau > 2, f"mean acceptance {tau:.2f}: the multi-node accept path is not exercised"
    assert p > PASS_P, f"DDTree: chi2 {stat:.1f} on {dof} dof, p {p:.2e}"


def shared_uniform_rule(logits, temperature, generator, tree=None):
    """WRONG on purpose: one uniform draw per verify for every node (inverse-CDF sampling),
    so the tokens along a path are correlated, unlike independent AR samples."""
    probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
    u = torch.rand(1, generator=generator).expand(probs.shape[0], 1).contiguous()
    idx = torch.searchsorted(probs.cumsum(-1), u)[:, 0].clamp(max=probs.shape[1] - 1)
    return idx.numpy().astype(np.int64)


def draft_biased_rule(logits, temperature, generator, tree=None):
    """WRONG on purpose: accept a drafted child with probability p_target(child) before
    sampling (speculative acceptance without the residual correction)."""
    choice = sample(logits, temperature, generator)
    if tree is None:
        return choice
    probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
    for node, kids in enumerate(tree.children()):
        for token in kids:
            if float(torch.rand(1, generator=generator)) < float(probs[node, token]):
                choice[node] = token
                break
    return choice


@pytest.mark.parametrize("rule", [shared_uniform_rule, draft_biased_rule], ids=["shared_uniform", "draft_biased"])
def test_the_test_rejects_a_wrong_acceptance_rule(setup, rule):
    target, drafter, joint = setup
    counts, _ = first_tokens_histogram(ddtree(target, drafter, rule), 800)
    stat, dof, p = chi_square_pvalue(counts, joint)
    print(f"{rule.__name__}: chi2 {stat:.1f} on {dof} dof, p {p:.2e}")
    assert p < FAIL_P, f"a wrong rule passed: chi2 {stat:.1f} on {dof} dof, p {p:.2e}"
