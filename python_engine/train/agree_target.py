"""The agree pair's target: a random DeepSeek-V3-architecture model in Kimi K2's
configuration style, small enough for a CPU.

Kimi's MLA widths (kv_lora_rank 512, qk_rope 64, qk_nope 128, v 128: the native engine's
cache row), YaRN written as Kimi writes it (rope_theta 50000, beta_fast = beta_slow = 1,
mscale = mscale_all_dim = 1), one expert group, a sigmoid router with correction bias,
routed_scaling_factor 2.827, 8 of 32 routed experts plus one shared, the first layer dense.
Everything else is small (hidden 192, 4 heads, 4 layers, vocab 1024).

The weights are python_engine.model.synthetic_checkpoint's draw for a seed, with one change: every
layer's output projections (o_proj, the MLPs' down_proj) are scaled by `residual_gain`.
At gain 1 a random model's greedy text is noise (no drafter can learn it); at 0.15 the
embedding dominates the residual stream, so the next token is mostly a fixed function of
the current one, and attention and experts still decide about a third of the steps
(results/agree-pair/summary.md has the measured share). The greedy text is then neither
constant nor noise: a drafter can learn it, and a wrong attention or MoE still changes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from python_engine.model.synthetic_checkpoint import random_target_tensors, tiny_config
from python_engine.train.sharded_save import save_sharded

SHARD_BYTES = 7 * 1024 * 1024  # tensor bytes per shipped file (each stays under 8 MiB)
RESIDUAL_GAIN = 0.15
SEED = 20260101

AGREE_TARGET_CONFIG: dict = tiny_config(
    vocab_size=1024,
    hidden_size=192,
    intermediate_size=512,
    moe_intermediate_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_shared_experts=1,
    n_routed_experts=32,
    num_experts_per_tok=8,
    n_group=1,
    topk_group=1,
    routed_scaling_factor=2.827,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    kv_lora_rank=512,
    q_lora_rank=128,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    first_k_dense_replace=1,
    max_position_embeddings=4096,
    rope_theta=50000.0,
    rope_scaling={"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 256, "beta_fast": 1.0,
                  "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    rms_norm_eps=1e-6,
    bos_token_id=0,  # as the demo pair: id 0 begins and ends text, id 1 is the drafter's mask
    eos_token_id=0,
    torch_dtype="bfloat16",
)

# Output projections scaled by residual_gain (the dense MLP's, every expert's, the shared one's).
_SCALED_SUFFIXES = ("self_attn.o_proj.weight", "down_proj.weight")
# Kept in float32 in the shipped file, as transformers and Kimi's checkpoints keep the router.
_FLOAT32_SUFFIXES = ("mlp.gate.weight", "mlp.gate.e_score_correction_bias")


def agree_target_tensors(cfg: dict, seed: int, residual_gain: float) -> dict[str, torch.Tensor]:
    """float32 weights: random_target_tensors(cfg, seed) with the output projections scaled."""
    tensors = random_target_tensors(cfg, seed)
    return {k: t * residual_gain if k.endswith(_SCALED_SUFFIXES) else t for k, t in tensors.items()}


def write_agree_target(out_dir: str | Path, cfg: dict | None = None, seed: int = SEED,
                       residual_gain: float = RESIDUAL_GAIN, dtype: torch.dtype = torch.bfloat16) -> Path:
    """config.json + safetensors (sharded under SHARD_BYTES) in `dtype`, the router float32."""
    out_dir = Path(out_dir)
    cfg = AGREE_TARGET_CONFIG if cfg is None else cfg
    tensors = {k: t if k.endswith(_FLOAT32_SUFFIXES) else t.to(dtype)
               for k, t in agree_target_tensors(cfg, seed, residual_gain).items()}
    save_sharded(tensors, out_dir, SHARD_BYTES)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out_dir


def residual_only_next(target) -> torch.Tensor:
    """int64 [V]: the greedy next token of each token when every layer's output is dropped
    (final norm of the embedding, then lm_head): the part of the target a drafter learns
    first. `target` is a python_engine.model.target.TargetModel."""
    from python_engine.model.ops import rms_norm

    w = target.w
    return target.logits(rms_norm(w.embed, w.norm, target.cfg.rms_norm_eps)).argmax(dim=-1)


def context_decided_fraction(continuations: list[list[int]], prompts: list[list[int]], next_of: torch.Tensor) -> float:
    """Share of greedy steps whose token differs from next_of[previous token]: the steps
    that attention and the experts decide."""
    steps = differ = 0
    for prompt, cont in zip(prompts, continuations):
        seq = [*prompt[-1:], *cont]
        for a, b in zip(seq, seq[1:]):
            steps += 1
            differ += int(next_of[a]) != b
    return differ / max(1, steps)
