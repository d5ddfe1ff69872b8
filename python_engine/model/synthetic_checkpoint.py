"""Synthetic checkpoints: random weights in the published formats, for the tests, for
`kdtree refs` (refs/ bundles from fixed seeds), for the agree pair's target (`kdtree
train-agree`) and for `kdtree bench gpus` (a drafter for its random Kimi slice).

Targets are DeepSeek-V3-format directories: config.json (loadable by transformers'
DeepseekV3ForCausalLM as well as by us) and safetensors weights under the names DeepSeek-V3
publishes, optionally sharded with an index, or in Kimi's layout. The init is deliberately
non-trivial so a bug cannot hide behind a symmetric weight: RMSNorm weights drawn around 1,
a nonzero router correction bias, projections scaled so activations and logits spread.

Drafters are DFlash checkpoints in z-lab's format for a given target: config.json
(Qwen3-style, with block_size and dflash_config) and model.safetensors. Their drafts are
noise, but every code path of the drafter and of DDTree runs on them; the target's own
embeddings and lm_head give them the target's vocab.

    python -m python_engine.model.synthetic_checkpoint TARGET_DIR OUT_DIR [--layers 1] [--block-size 8]

writes a random drafter for the target in TARGET_DIR.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from python_engine.model.config import TargetConfig, load_target_config
from python_engine.model.drafter import drafter_weight_shapes
from python_engine.model.drafter_config import drafter_config_dict, drafter_config_from_dict

# A tiny config in the shape of DeepSeek-V3 (every feature on: q LoRA, MoE with groups,
# shared experts, interleaved RoPE). Overrides select the variants the tests need.
TINY_CONFIG: dict = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "vocab_size": 96,
    "hidden_size": 48,
    "intermediate_size": 80,
    "moe_intermediate_size": 24,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_shared_experts": 1,
    "n_routed_experts": 8,
    "routed_scaling_factor": 2.5,
    "kv_lora_rank": 16,
    "q_lora_rank": 24,
    "qk_rope_head_dim": 8,
    "v_head_dim": 12,
    "qk_nope_head_dim": 12,
    "n_group": 2,
    "topk_group": 1,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "norm_topk_prob": True,
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_interleave": True,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "torch_dtype": "float32",
}


def tiny_config(**overrides) -> dict:
    cfg = json.loads(json.dumps(TINY_CONFIG))
    cfg.update(overrides)
    return cfg


def random_target_tensors(cfg: dict, seed: int, logit_scale: float = 3.0) -> dict[str, torch.Tensor]:
    """float32 weights under DeepSeek-V3 names for config dict `cfg` (flat layout)."""
    g = torch.Generator().manual_seed(seed)

    def normal(*shape, std):
        return torch.randn(*shape, generator=g) * std

    def linear(out_f, in_f, gain=1.0):
        return normal(out_f, in_f, std=gain / in_f ** 0.5)

    def norm(n):
        return 1.0 + (torch.rand(n, generator=g) - 0.5) * 0.6  # in [0.7, 1.3]

    H, V = cfg["hidden_size"], cfg["vocab_size"]
    nh = cfg["num_attention_heads"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    r, ql = cfg["kv_lora_rank"], cfg.get("q_lora_rank")
    out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": normal(V, H, std=1.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = norm(H)
        out[p + "post_attention_layernorm.weight"] = norm(H)
        a = p + "self_attn."
        if ql is None:
            out[a + "q_proj.weight"] = linear(nh * (nope + rope), H)
        else:
            out[a + "q_a_proj.weight"] = linear(ql, H)
            out[a + "q_a_layernorm.weight"] = norm(ql)
            out[a + "q_b_proj.weight"] = linear(nh * (nope + rope), ql)
        out[a + "kv_a_proj_with_mqa.weight"] = linear(r + rope, H)
        out[a + "kv_a_layernorm.weight"] = norm(r)
        out[a + "kv_b_proj.weight"] = linear(nh * (nope + v), r, gain=1.5)
        out[a + "o_proj.weight"] = linear(H, nh * v, gain=0.7)
        m = p + "mlp."
        if i < cfg["first_k_dense_replace"]:
            I = cfg["intermediate_size"]
            out[m + "gate_proj.weight"] = linear(I, H)
            out[m + "up_proj.weight"] = linear(I, H)
            out[m + "down_proj.weight"] = linear(H, I, gain=0.7)
        else:
            E, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
            out[m + "gate.weight"] = linear(E, H, gain=2.0)
            out[m + "gate.e_score_correction_bias"] = normal(E, std=0.2)
            for e in range(E):
                x = f"{m}experts.{e}."
                out[x + "gate_proj.weight"] = linear(I, H)
                out[x + "up_proj.weight"] = linear(I, H)
                out[x + "down_proj.weight"] = linear(H, I, gain=0.7)
            if cfg.get("n_shared_experts", 0):
                Is = I * cfg["n_shared_experts"]
                s = m + "shared_experts."
                out[s + "gate_proj.weight"] = linear(Is, H)
                out[s + "up_proj.weight"] = linear(Is, H)
                out[s + "down_proj.weight"] = linear(H, Is, gain=0.7)
    out["model.norm.weight"] = norm(H)
    out["lm_head.weight"] = linear(V, H, gain=logit_scale)
    return out


def save_safetensors_dir(out_dir: Path, tensors: dict[str, torch.Tensor], shards: int = 1) -> list[Path]:
    """Write tensors as model.safetensors, or as `shards` files plus the index."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    if shards <= 1:
        path = out_dir / "model.safetensors"
        save_file({k: tensors[k].contiguous() for k in names}, str(path), metadata={"format": "pt"})
        return [path]
    per = -(-len(names) // shards)
    paths, weight_map = [], {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s * per : (s + 1) * per]
        save_file({k: tensors[k].contiguous() for k in part}, str(out_dir / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
        paths.append(out_dir / fname)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return paths


def write_random_target(
    out_dir: str | Path,
    cfg: dict | None = None,
    seed: int = 0,
    shards: int = 1,
    kimi_layout: bool = False,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Write a random target checkpoint; kimi_layout nests the config under text_config
    and prefixes tensor names with 'language_model.'."""
    out_dir = Path(out_dir)
    cfg = tiny_config() if cfg is None else cfg
    tensors = {k: t.to(dtype) for k, t in random_target_tensors(cfg, seed).items()}
    config_json = cfg
    if kimi_layout:
        tensors = {"language_model." + k: t for k, t in tensors.items()}
        config_json = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
                       "text_config": cfg}
    save_safetensors_dir(out_dir, tensors, shards)
    (out_dir / "config.json").write_text(json.dumps(config_json, indent=2) + "\n")
    return out_dir


def default_target_layer_ids(num_target_layers: int, count: int) -> list[int]:
    """`count` layers spread evenly from layer 1 to the second-to-last (all layers when
    the target is tiny), as DFlash drafters pick shallow-to-deep features."""
    if num_target_layers <= count:
        return list(range(num_target_layers))
    lo, hi = 1, num_target_layers - 2
    return sorted({round(lo + k * (hi - lo) / max(1, count - 1)) for k in range(count)})


def random_drafter_config(
    target: TargetConfig,
    num_layers: int = 1,
    block_size: int = 8,
    target_layer_ids: list[int] | None = None,
    mask_token_id: int | None = None,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int | None = None,
    intermediate_size: int | None = None,
) -> dict:
    """A small drafter's config.json for `target`, with sizes derived from it."""
    H = target.hidden_size
    ids = target_layer_ids or default_target_layer_ids(target.num_hidden_layers, min(5, max(1, num_layers + 1)))
    return drafter_config_dict(
        hidden_size=H, num_hidden_layers=num_layers, num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads, head_dim=head_dim or max(8, H // num_heads),
        intermediate_size=intermediate_size or 2 * H, rope_theta=1000000.0,
        max_position_embeddings=target.max_position_embeddings, vocab_size=target.vocab_size,
        num_target_layers=target.num_hidden_layers, block_size=block_size, target_layer_ids=ids,
        mask_token_id=target.vocab_size - 1 if mask_token_id is None else mask_token_id,
        torch_dtype="float32",
    )


def random_drafter_tensors(cfg: dict, seed: int) -> dict[str, torch.Tensor]:
    dcfg = drafter_config_from_dict(cfg)
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in drafter_weight_shapes(dcfg).items():
        if len(shape) == 1:  # norms, drawn around 1
            out[name] = 1.0 + (torch.rand(shape, generator=g) - 0.5) * 0.6
        else:
            out[name] = torch.randn(shape, generator=g) / shape[1] ** 0.5
    return out


def write_random_drafter(out_dir: str | Path, target: TargetConfig, seed: int = 0, **config_kw) -> Path:
    out_dir = Path(out_dir)
    cfg = random_drafter_config(target, **config_kw)
    save_safetensors_dir(out_dir, random_drafter_tensors(cfg, seed))
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Write a random DFlash drafter for a target checkpoint.")
    ap.add_argument("target_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    target = load_target_config(args.target_dir)
    path = write_random_drafter(args.out_dir, target, seed=args.seed, num_layers=args.layers,
                                block_size=args.block_size)
    print(path)


if __name__ == "__main__":
    main()
