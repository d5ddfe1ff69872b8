"""Kimi K2.6 as one of ct200's eight GPUs holds it, in the emulated engine: the published
configs (refs/configs/kimi-k2.6, -dflash) at full width and a scaled-down depth (the first,
dense layer and one MoE layer; a one-layer drafter reading both), rank R's share of an 8-way
split alone, with dummy weights (bf16, INT4 experts). Every width the configs give reaches
the weight plan, the memory report equals `kdtree plan`'s count, and a DDTree request runs
(its tokens mean nothing: the weights are random and the collectives do not run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from python_engine.model.config import load_target_config
from python_engine.model.drafter_config import load_drafter_config
from python_engine.native.engine import NativeEngine, NativeOptions
from python_engine.plan.weights import drafter_weights, target_weights

KIMI, KIMI_DRAFTER = Path("refs/configs/kimi-k2.6"), Path("refs/configs/kimi-k2.6-dflash")
WORLD = 8  # ct200's GPUs


@pytest.fixture(scope="module")
def kimi_two_layers(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("kimi-two-layers")
    target = json.loads((KIMI / "config.json").read_text())
    target["text_config"]["num_hidden_layers"] = 2
    drafter = json.loads((KIMI_DRAFTER / "config.json").read_text())
    drafter.update(num_hidden_layers=1, num_target_layers=2)
    drafter["dflash_config"]["target_layer_ids"] = [0, 1]
    for name, cfg in (("target", target), ("drafter", drafter)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(cfg))
    return root / "target", root / "drafter"


def test_kimi_rank_share_with_dummy_weights(kimi_two_layers, native_variant, rng):
    tdir, ddir = kimi_two_layers
    t, d = load_target_config(tdir), load_drafter_config(ddir)
    rank = int(rng.integers(WORLD))
    seed = int(rng.integers(1 << 62))
    print(f"rank {rank} of {WORLD}, dummy seed {seed}")
    opts = NativeOptions(dtype="bfloat16", load_format="dummy", dummy_seed=seed, world_size=WORLD, rank=rank, comm="none",
                         max_slots=1, max_tokens=64, max_budget=8, use_graphs=False)
    with NativeEngine(tdir, ddir, opts, variant=native_variant) as eng:
        memory = eng.memory()
        shapes = {w["name"]: w["shape"] for w in eng.weights()}
        rid = eng.submit([t.bos_token_id or 0, 1, 2], 3, budget=8)
        collective_us = []
        while True:
            rep = eng.step()
            if rep.rounds == 0 and rep.waiting == 0 and rep.running == 0:
                break
            collective_us.append(rep.collective_us)
        tokens = eng.request(rid).tokens
    assert memory["target_weights"] == target_weights(t, WORLD).total
    assert memory["drafter_weights"] == drafter_weights(d)
    H, heads = t.hidden_size, t.num_attention_heads // WORLD
    experts = t.n_routed_experts // WORLD
    assert shapes["model.embed_tokens.weight"] == (t.vocab_size, H)
    assert shapes["lm_head.weight"] == (t.vocab_size // WORLD, H)
    attn = "model.layers.1.self_attn."
    assert shapes[attn + "q_b_proj.weight"] == (heads * (t.qk_nope_head_dim + t.qk_rope_head_dim), t.q_lora_rank)
    assert shapes[attn + "kv_b_proj.weight"] == (heads * (t.qk_nope_head_dim + t.v_head_dim), t.kv_lora_rank)
    assert shapes[attn + "o_proj.weight"] == (H, heads * t.v_head_dim)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (H, t.intermediate_size // WORLD)
    first, last = rank * experts, (rank + 1) * experts - 1
    assert shapes[f"model.layers.1.mlp.experts.{first}.gate_proj.weight_packed"] == (t.moe_intermediate_size, H)
    assert f"model.layers.1.mlp.experts.{last}.down_proj.weight_packed" in shapes
    assert f"model.layers.1.mlp.experts.{last + 1}.down_proj.weight_packed" not in shapes
    assert shapes["drafter.fc.weight"] == (d.hidden_size, len(d.target_layer_ids) * H)
    assert len(tokens) == 3 and all(0 <= x < t.vocab_size for x in tokens)
    assert collective_us and all(c is None for c in collective_us)
