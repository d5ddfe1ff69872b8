"""Our MLA-absorbed target against transformers' DeepseekV3ForCausalLM on the same saved
checkpoint: prefill logits, token-by-token decode through the latent cache, and greedy
continuations identical to generate()."""

from __future__ import annotations

import pytest
import torch
from hf_oracle import PARITY_CONFIGS, hf_model, prompt_away_from_ties, rel_err

from python_engine.decode.ar import ar_generate
from python_engine.model.ops import rms_norm
from python_engine.model.target_loader import load_target

TOL = 1e-5


def random_prompt(seed: int, vocab: int, length: int) -> list[int]:
    return torch.randint(0, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_prefill_and_cached_decode_match_transformers(name, parity_dirs, seed):
    model_dir = parity_dirs[name]
    ours, hf = load_target(model_dir), hf_model(model_dir)
    # a token behind an expert-routing near-tie may take either expert: draw away from ties
    ids = prompt_away_from_ties(hf, seed, 40)
    with torch.no_grad():
        hf_out = hf(torch.tensor([ids]), output_hidden_states=True)
    ref = hf_out.logits[0]

    cache = ours.new_cache(capacity=8)  # small on purpose: the cache must grow
    layers = range(ours.cfg.num_hidden_layers)
    out = ours.forward(ids, torch.arange(40), cache, hidden_layers=layers)
    assert rel_err(out.logits, ref) <= TOL
    for i in layers[:-1]:  # the drafter's features: transformers' hidden_states[i + 1] ...
        assert rel_err(out.hidden[i], hf_out.hidden_states[i + 1][0]) <= TOL
    # ... but for the last layer the residual stream, whose final norm gives transformers' entry
    last = layers[-1]
    normed = rms_norm(out.hidden[last], ours.w.norm, ours.cfg.rms_norm_eps)
    assert rel_err(normed, hf_out.hidden_states[last + 1][0]) <= TOL

    # a 25-token prefill, then one token per forward through the latent cache
    cache = ours.new_cache()
    rows = [ours.forward(ids[:25], torch.arange(25), cache).logits]
    for i in range(25, 40):
        rows.append(ours.forward([ids[i]], [i], cache).logits)
    assert cache.length == 40
    assert rel_err(torch.cat(rows), ref) <= TOL
    # the logits are not degenerate: the comparison above could catch a wrong token
    assert ref.softmax(-1).max(-1).values.mean() < 0.95
    assert ref.std(-1).min() > 0.5


@pytest.mark.parametrize("name", list(PARITY_CONFIGS))
def test_greedy_continuation_equals_generate(name, parity_dirs, seed):
    model_dir = parity_dirs[name]
    ours, hf = load_target(model_dir), hf_model(model_dir)
    for k in range(2):
        prompt = random_prompt(seed + k, ours.cfg.vocab_size, 6 + 5 * k)
        with torch.no_grad():
            ids = torch.tensor([prompt])
            # an explicit mask: else generate() treats pad_token_id (0) in the prompt as padding
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64,
                              do_sample=False, use_cache=True)
        expected = out[0, len(prompt):].tolist()
        assert len(expected) == 64
        assert ar_generate(ours, prompt, 64).tokens == expected


def test_hf_saved_checkpoint_loads_identically(parity_dirs, tmp_path, seed):
    """What transformers itself writes (save_pretrained) reads back to the same logits."""
    src = parity_dirs["groups"]
    hf = hf_model(src)
    hf.save_pretrained(tmp_path / "resaved")
    a, b = load_target(src), load_target(tmp_path / "resaved")
    ids = random_prompt(seed, a.cfg.vocab_size, 12)
    la = a.forward(ids, torch.arange(12), a.new_cache()).logits
    lb = b.forward(ids, torch.arange(12), b.new_cache()).logits
    assert torch.equal(la, lb)


def test_bfloat16_is_as_close_to_float32_as_transformers_bfloat16(parity_dirs, seed):
    """bf16 can flip a near-tied expert choice (ours and transformers' alike), so compare
    per-token errors against the float32 truth by their median, not their maximum."""
    model_dir = parity_dirs["yarn"]
    ours = load_target(model_dir, dtype=torch.bfloat16)
    hf16, hf32 = hf_model(model_dir, dtype=torch.bfloat16), hf_model(model_dir)
    ours_err, hf_err = [], []
    for k in range(4):
        ids = random_prompt(seed + k, ours.cfg.vocab_size, 24)
        with torch.no_grad():
            truth = hf32(torch.tensor([ids])).logits[0]
            theirs = hf16(torch.tensor([ids])).logits[0].float()
        cache = ours.new_cache()
        mine = torch.cat([ours.forward(ids[:16], torch.arange(16), cache).logits]
                         + [ours.forward([ids[i]], [i], cache).logits for i in range(16, 24)])
        assert cache.rows.dtype == torch.bfloat16 and mine.dtype == torch.float32
        scale = truth.abs().amax(-1)
        ours_err.append((mine - truth).abs().amax(-1) / scale)
        hf_err.append((theirs - truth).abs().amax(-1) / scale)
    ours_med, hf_med = torch.cat(ours_err).median(), torch.cat(hf_err).median()
    assert ours_med < 0.05
    assert ours_med <= 1.5 * hf_med + 5e-3, f"bf16 median error {ours_med:.4f} vs transformers' {hf_med:.4f}"


@pytest.mark.parametrize("mutation", ["no_correction_bias", "no_group_limit", "no_topk_norm",
                                      "other_rope_layout", "no_yarn_mscale", "no_routed_scaling"])
def test_the_parity_check_sees_each_feature(mutation, parity_dirs, seed):
    """Switching off any one feature moves the logits far beyond the 1e-5 tolerance: the
    random init leaves no feature invisible to the comparison above."""
    import dataclasses

    name = "yarn" if mutation == "no_yarn_mscale" else "groups"
    model_dir = parity_dirs[name]
    ours, hf = load_target(model_dir), hf_model(model_dir)
    cfg = ours.cfg
    if mutation == "no_correction_bias":
        for layer in ours.w.layers:
            if layer.moe is not None:
                layer.moe.correction_bias.zero_()
    elif mutation == "no_group_limit":
        ours.cfg = dataclasses.replace(cfg, topk_group=cfg.n_group)
    elif mutation == "no_topk_norm":
        ours.cfg = dataclasses.replace(cfg, norm_topk_prob=not cfg.norm_topk_prob)
    elif mutation == "other_rope_layout":
        ours.rotary.interleave = not ours.rotary.interleave
    elif mutation == "no_yarn_mscale":
        ours.cfg = dataclasses.replace(cfg, rope=dataclasses.replace(cfg.rope, mscale_all_dim=None))
    elif mutation == "no_routed_scaling":
        ours.cfg = dataclasses.replace(cfg, routed_scaling_factor=1.0)
    ids = random_prompt(seed, cfg.vocab_size, 32)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    mutated = ours.forward(ids, torch.arange(32), ours.new_cache()).logits
    assert rel_err(mutated, ref) > 100 * TOL
