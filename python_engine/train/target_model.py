"""The demo target as a transformers DeepseekV3ForCausalLM: its config (DeepSeek-V3's
published layout: rope_theta + rope_scaling with YaRN), construction from a seed, and saving
in bf16 safetensors shards exactly as `save_pretrained` writes DeepSeek-V3 checkpoints
(per-expert tensor names), plus the tokenizer files."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import torch

from python_engine.train.recipe import TargetShape
from python_engine.train.tokenizer import EOS_ID

MAX_SHARD = "7MB"  # shipped shards must stay under 8 MB each


def target_config_dict(s: TargetShape) -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": s.vocab_size,
        "hidden_size": s.hidden_size,
        "intermediate_size": s.intermediate_size,
        "moe_intermediate_size": s.moe_intermediate_size,
        "num_hidden_layers": s.num_hidden_layers,
        "num_attention_heads": s.num_attention_heads,
        "num_key_value_heads": s.num_attention_heads,
        "n_shared_experts": s.n_shared_experts,
        "n_routed_experts": s.n_routed_experts,
        "routed_scaling_factor": s.routed_scaling_factor,
        "kv_lora_rank": s.kv_lora_rank,
        "q_lora_rank": s.q_lora_rank,
        "qk_rope_head_dim": s.qk_rope_head_dim,
        "v_head_dim": s.v_head_dim,
        "qk_nope_head_dim": s.qk_nope_head_dim,
        "n_group": s.n_group,
        "topk_group": s.topk_group,
        "num_experts_per_tok": s.num_experts_per_tok,
        "first_k_dense_replace": s.first_k_dense_replace,
        "norm_topk_prob": True,
        "hidden_act": "silu",
        "max_position_embeddings": int(s.original_max_position_embeddings * s.rope_factor),
        "rms_norm_eps": 1e-6,
        "rope_theta": s.rope_theta,
        "rope_scaling": {
            "type": "yarn",
            "factor": s.rope_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "rope_interleave": True,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "bos_token_id": EOS_ID,
        "eos_token_id": EOS_ID,
        "use_cache": True,
    }


def build_target(s: TargetShape, seed: int, experts_implementation: str = "eager"):
    """A freshly initialised DeepseekV3ForCausalLM (float32 master weights)."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    cfg = DeepseekV3Config(**target_config_dict(s))
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(cfg)
    set_experts_implementation(model, experts_implementation)
    return model


def set_experts_implementation(model, name: str) -> None:
    """eager = transformers' per-expert loop (autocast-safe); grouped_mm = one grouped GEMM.
    The model's modules share its config object, so setting it once reaches every layer."""
    setter = getattr(model, "set_experts_implementation", None)
    if setter is not None:
        setter(name)
    else:  # older transformers 5.x
        model.config._experts_implementation = name


def routers(model) -> list:
    """The MoE layers' routers (DeepseekV3TopkRouter), first MoE layer first."""
    return [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "gate")]


def save_target(model, out_dir: Path, tokenizer_dir: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """save_pretrained in `dtype` (the router's weight and correction bias stay float32 as
    transformers keeps them), sharded under MAX_SHARD, with the tokenizer files beside."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    shipped = copy.deepcopy(model).to("cpu").to(dtype)
    for router, original in zip(routers(shipped), routers(model)):
        router.weight.data = original.weight.detach().to("cpu", torch.float32).clone()
        router.e_score_correction_bias.data = original.e_score_correction_bias.detach().to("cpu", torch.float32).clone()
    shipped.generation_config.eos_token_id = EOS_ID
    shipped.save_pretrained(out_dir, max_shard_size=MAX_SHARD, safe_serialization=True)
    copy_tokenizer(tokenizer_dir, out_dir)
    return out_dir


def copy_tokenizer(tokenizer_dir: Path, out_dir: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(Path(tokenizer_dir) / name, Path(out_dir) / name)


def load_hf_target(model_dir: Path, device: str = "cpu", experts_implementation: str = "eager"):
    from transformers import DeepseekV3ForCausalLM

    model = DeepseekV3ForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).to(device)
    set_experts_implementation(model, experts_implementation)
    return model


def read_config(model_dir: Path) -> dict:
    return json.loads((Path(model_dir) / "config.json").read_text())
