"""`kdtree plan`'s memory arithmetic against counts nobody here wrote: transformers' own
DeepseekV3 and Qwen3 modules built on the meta device from the same configs, and the
published size of the Kimi DFlash drafter's checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from python_engine.errors import KdtreeError
from python_engine.model.config import config_from_dict, load_target_config, text_config_of
from python_engine.model.drafter_config import load_drafter_config
from python_engine.plan.memory import cache_bytes, largest_context, memory_plan
from python_engine.plan.weights import aligned, drafter_parameters, drafter_weights, target_weights

KIMI = "refs/configs/kimi-k2.6"
KIMI_DRAFTER = "refs/configs/kimi-k2.6-dflash"
GIB = 1 << 30
# z-lab/Kimi-K2.5-DFlash's bf16 checkpoint as listed publicly (refs/configs/README.md)
PUBLISHED_DRAFTER_GIB = 6.48


def scaled_kimi(**overrides) -> dict:
    """Kimi K2.6's text config at a small width: the same layer types, routing and YaRN."""
    raw = json.loads(open(f"{KIMI}/config.json").read())
    cfg = dict(text_config_of(raw))
    cfg.pop("quantization_config")
    cfg.update(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
               num_attention_heads=8, num_key_value_heads=8, q_lora_rank=32, kv_lora_rank=32,
               qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=16, vocab_size=256,
               bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg.update(overrides)
    return cfg


def hf_meta_counts(cfg: dict) -> dict[str, int]:
    """Parameters of transformers' DeepseekV3ForCausalLM for `cfg`, by our plan's parts."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    conf = DeepseekV3Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "auto_map")})
    with torch.device("meta"):
        model = DeepseekV3ForCausalLM(conf)
    parts = dict.fromkeys(("attention", "dense_mlp", "routed_experts", "shared_experts", "routers", "embedding",
                           "lm_head", "norms"), 0)
    for name, p in model.named_parameters():
        n = p.numel()
        if "norm" in name:
            parts["norms"] += n
        elif "embed_tokens" in name:
            parts["embedding"] += n
        elif name.startswith("lm_head"):
            parts["lm_head"] += n
        elif "self_attn" in name:
            parts["attention"] += n
        elif ".mlp.gate." in name or name.endswith("e_score_correction_bias"):
            parts["routers"] += n
        elif "shared_experts" in name:
            parts["shared_experts"] += n
        elif ".experts" in name:
            parts["routed_experts"] += n
        else:
            parts["dense_mlp"] += n
    return parts


@pytest.mark.parametrize("dtype,elt", [("bfloat16", 2), ("float32", 4)])
def test_target_weights_equal_transformers_parameter_count(dtype, elt):
    cfg = scaled_kimi()
    counts = hf_meta_counts(cfg)
    plan = target_weights(config_from_dict(cfg), world=1, dtype=dtype)
    for part, n in counts.items():
        want = n * (4 if part == "routers" else elt)
        got = plan.bytes[part]
        # each allocation rounds up to 256 bytes; a part has at most a few per layer
        slack = 256 * (4 * cfg["num_hidden_layers"] + 2)
        assert want <= got <= want + slack, (part, got, want)


def test_split_weights_add_up_to_the_whole_model():
    """N GPUs hold the replicated parts N times and the split parts once between them."""
    cfg = config_from_dict(scaled_kimi())
    whole = target_weights(cfg, 1)
    for world in (2, 4, 8):
        part = target_weights(cfg, world)
        for name in ("routed_experts", "lm_head"):
            assert abs(part.bytes[name] * world - whole.bytes[name]) <= 256 * world * 3 * cfg.num_hidden_layers
        for name in ("routers", "embedding", "norms"):
            assert part.bytes[name] == whole.bytes[name]
        assert part.experts_per_layer * world == cfg.n_routed_experts


def test_split_refuses_what_does_not_divide():
    cfg = config_from_dict(scaled_kimi())
    with pytest.raises(KdtreeError, match=r"num_attention_heads \(8\) divisible by 3"):
        target_weights(cfg, 3)


def test_kimi_drafter_parameters_equal_qwen3_layers_and_the_published_checkpoint():
    """The drafter's count from its config (intermediate_size included, which no stored copy
    of the config gives) equals transformers' Qwen3 layers plus DFlash's fc and norm, and the
    published checkpoint's 6.48 GiB in bf16."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    d = load_drafter_config(KIMI_DRAFTER)
    conf = Qwen3Config(hidden_size=d.hidden_size, num_attention_heads=d.num_attention_heads,
                       num_key_value_heads=d.num_key_value_heads, head_dim=d.head_dim,
                       intermediate_size=d.intermediate_size, num_hidden_layers=d.num_hidden_layers, vocab_size=8)
    with torch.device("meta"):
        layer = Qwen3DecoderLayer(conf, 0)
    per_layer = sum(p.numel() for p in layer.parameters())
    features = len(d.target_layer_ids) * d.hidden_size
    expected = d.num_hidden_layers * per_layer + d.hidden_size * features + 2 * d.hidden_size  # fc, hidden_norm, norm
    assert drafter_parameters(d) == expected
    assert abs(expected * 2 / GIB - PUBLISHED_DRAFTER_GIB) < 0.005
    assert drafter_weights(d) >= expected * 2


def test_kimi_target_size_matches_engine_docs_count():
    """Kimi K2.6 INT4 on one GPU: 570.7 GB of routed experts at 24.77 MB an expert with its
    scales (docs/engine.md), 384 x 60 experts."""
    cfg = load_target_config(KIMI)
    w = target_weights(cfg, 1)
    assert w.moe_layers == 60 and w.experts_per_layer == 384
    # compressed-tensors INT4: 4 bits a weight plus one bf16 scale per 32, the W4A16 tiles hold exactly that
    per_expert = 3 * 2048 * 7168 * (0.5 + 2 / 32)
    assert w.expert_bytes == per_expert
    assert w.bytes["routed_experts"] == 60 * 3 * aligned(int(per_expert / 3) * 384)


def test_caches_and_fit_boundary(seed):
    rng = torch.Generator().manual_seed(seed)
    cfg, d = load_target_config(KIMI), load_drafter_config(KIMI_DRAFTER)
    slots = int(torch.randint(1, 9, (1,), generator=rng))
    context = int(torch.randint(1000, 50000, (1,), generator=rng))
    t, dc = cache_bytes(cfg, d, slots, context, 64)
    cap = context + 65 + 1
    assert t == 61 * slots * cap * 576 * 2
    assert dc > 2 * 6 * slots * cap * 8 * 128 * 2
    limit = 96 * GIB
    best = largest_context(cfg, d, world=8, slots=slots, budget=64, limit=limit, reserve=GIB)
    assert 0 < best < cfg.max_position_embeddings
    at = memory_plan(cfg, d, world=8, slots=slots, context=best, budget=64, limit=limit, reserve=GIB)
    over = memory_plan(cfg, d, world=8, slots=slots, context=best + 1, budget=64, limit=limit, reserve=GIB)
    assert at.fits and not over.fits
    more = largest_context(cfg, d, world=8, slots=slots + 1, budget=64, limit=limit, reserve=GIB)
    assert more < best
