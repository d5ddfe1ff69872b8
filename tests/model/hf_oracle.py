"""Helpers for the model tests: the tiny parity configurations and transformers'
DeepseekV3ForCausalLM (the oracle), loaded from the same checkpoint files we read."""

from __future__ import annotations

import warnings

import torch

from python_engine.testing.random_target import tiny_config

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


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """max |ours - ref| / max |ref|: relative to the logits' scale, not per element."""
    return float((ours.double() - ref.double()).abs().max() / ref.double().abs().max())
