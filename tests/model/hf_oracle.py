"""Helpers for the model tests: the tiny parity configurations and transformers'
DeepseekV3ForCausalLM (the oracle), loaded from the same checkpoint files we read."""

from __future__ import annotations

import warnings

import torch

from python_engine.model.synthetic_checkpoint import tiny_config

# The three configurations the issue asks for, each with every other feature on.
PARITY_CONFIGS = {
    # n_group > 1 with topk_group < n_group, q LoRA, interleaved RoPE
    "groups": tiny_config(n_group=4, topk_group=2, num_experts_per_tok=3, n_routed_experts=8),
    # q_lora_rank null (q_proj), rotate-half RoPE, two shared experts, no norm_topk_prob
    "no_q_lora": tiny_config(q_lora_rank=None, rope_interleave=False, n_group=1, topk_group=1,
                             n_shared_experts=2, norm_topk_prob=False, first_k_dense_replace=2),
    # YaRN as DeepSeek-V3 publishes it (legacy rope_scaling), mscale != mscale_all_dim
    "yarn": tiny_config(rope_scaling={"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32,
                                      "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.707},
                        max_position_embeddings=256),
}


def hf_model(model_dir, dtype=torch.float32):
    """transformers' model from a checkpoint dir; asserts every tensor matched a name."""
    import transformers
    from transformers import DeepseekV3ForCausalLM

    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, info = DeepseekV3ForCausalLM.from_pretrained(
            str(model_dir), attn_implementation="eager", dtype=dtype, output_loading_info=True
        )
    problems = {k: v for k, v in info.items() if v}
    assert not problems, f"transformers could not map the checkpoint: {problems}"
    model.generation_config.eos_token_id = None  # generate exactly max_new_tokens
    model.generation_config.pad_token_id = 0
    return model.eval()


def router_tie_rows(model, ids: list[int], eps: float = 1e-5) -> set[int]:
    """Positions of `ids` whose logits hang on an expert-routing tie in transformers' float32
    forward: a token whose topk_group-th and next group, or top_k-th and next eligible
    expert, score within eps. Either choice is right there, and two implementations (or two
    orders of the same sums) may break the tie differently. A tie in an MoE layer before the
    last reaches every later position too (through attention)."""
    import torch.nn.functional as F

    cfg, n = model.config, len(ids)
    layers = [i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")]
    inputs: dict[int, torch.Tensor] = {}
    hooks = [model.model.layers[i].mlp.gate.register_forward_hook(
        lambda _m, inp, _out, i=i: inputs.__setitem__(i, inp[0].detach())) for i in layers]
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    affected: set[int] = set()
    for i in layers:
        gate = model.model.layers[i].mlp.gate
        x = inputs[i].reshape(n, -1).float()
        scores = F.linear(x, gate.weight.float()).sigmoid() + gate.e_score_correction_bias.float()
        groups, per = cfg.n_group, scores.shape[-1] // cfg.n_group
        group = scores.view(n, groups, per).topk(2, dim=-1).values.sum(-1)
        gs = group.sort(-1, descending=True).values
        tie = torch.zeros(n, dtype=torch.bool)
        if cfg.topk_group < groups:
            tie |= (gs[:, cfg.topk_group - 1] - gs[:, cfg.topk_group]).abs() < eps
        chosen = torch.zeros_like(group).scatter_(1, group.topk(cfg.topk_group, dim=-1).indices, 1.0).bool()
        eligible = scores.masked_fill(~chosen.unsqueeze(-1).expand(n, groups, per).reshape(n, -1), float("-inf"))
        es, k = eligible.sort(-1, descending=True).values, cfg.num_experts_per_tok
        if k < es.shape[-1]:
            tie |= (es[:, k - 1] - es[:, k]).abs() < eps  # -inf - -inf is nan: no tie
        for p in tie.nonzero().flatten().tolist():
            affected |= {p} if i == layers[-1] else set(range(p, n))
    return affected


# Draws before prompt_away_from_ties gives up: about 1 random prompt in 100 has a near-tie.
MAX_PROMPT_DRAWS = 16


def prompt_away_from_ties(model, seed: int, length: int) -> list[int]:
    """A random prompt of `length` tokens drawn from `seed` on which transformers' float32
    routing has no near-tie (router_tie_rows): every token's experts are then clear, and a
    correct implementation must match its logits at every position. A prompt with a tie is
    replaced by the generator's next draw. Only the oracle decides, so a bug of ours cannot
    steer the draw."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(MAX_PROMPT_DRAWS):
        ids = torch.randint(0, model.config.vocab_size, (length,), generator=g).tolist()
        if not router_tie_rows(model, ids):
            return ids
    raise AssertionError(f"{MAX_PROMPT_DRAWS} prompts drawn from seed {seed} all hang on a routing tie: "
                         f"the random weights route too many tokens on a knife's edge")


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """max |ours - ref| / max |ref|: relative to the logits' scale, not per element."""
    return float((ours.double() - ref.double()).abs().max() / ref.double().abs().max())
