"""refs/configs/kimi-k2.6*: both parse, and the torch reference built from the target's
config scaled down to a small width (the same layer types, first dense layer, sigmoid
top-8 routing with its scaling factor, YaRN with its factor, betas and mscale, norms' eps)
equals transformers' DeepseekV3 on the same checkpoint. Each parsed value drives the model:
changing it in config.json moves our logits, and transformers moves with us."""

from __future__ import annotations

import json

import pytest
import torch
from hf_oracle import hf_model, prompt_away_from_ties, rel_err

from python_engine.errors import KdtreeError
from python_engine.model.config import load_target_config, text_config_of
from python_engine.model.drafter_config import check_against_target, drafter_config_from_dict, load_drafter_config
from python_engine.model.target_loader import load_target
from python_engine.model.synthetic_checkpoint import write_random_target

KIMI, KIMI_DRAFTER = "refs/configs/kimi-k2.6", "refs/configs/kimi-k2.6-dflash"
TOL = 1e-5
PROMPT = 24


def scaled_kimi_text(**overrides) -> dict:
    cfg = dict(text_config_of(json.loads(open(f"{KIMI}/config.json").read())))
    cfg.pop("quantization_config")  # the scaled checkpoint is float32 (INT4 has its own tests)
    cfg.update(model_type="deepseek_v3", dtype="float32", torch_dtype="float32", hidden_size=64,
               intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
               v_head_dim=16, n_routed_experts=16, vocab_size=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    for key, value in overrides.items():
        if key.startswith("rope_"):
            cfg["rope_scaling"] = {**cfg["rope_scaling"], key[5:]: value}
        else:
            cfg[key] = value
    return cfg


def test_full_size_configs_parse_with_their_published_structure():
    t, d = load_target_config(KIMI), load_drafter_config(KIMI_DRAFTER)
    check_against_target(d, t)
    assert t.quantization is not None and t.quantization.group_size == 32
    assert [t.is_moe_layer(i) for i in (0, 1, 60)] == [False, True, True]
    assert t.rope.rope_type == "yarn" and t.softmax_scale > t.qk_head_dim ** -0.5  # YaRN's mscale^2 applies
    assert d.target_layer_ids == (1, 12, 24, 35, 47, 58) and d.num_target_layers == t.num_hidden_layers
    assert d.num_attention_heads // d.num_key_value_heads == 8 and d.block_size == 8
    shallow = json.loads(open(f"{KIMI_DRAFTER}/config.json").read()) | {"num_target_layers": 27}
    with pytest.raises(KdtreeError, match="num_target_layers 27"):
        check_against_target(drafter_config_from_dict(shallow, "kimi-dflash"), t)


@pytest.fixture(scope="module")
def scaled_dirs(tmp_path_factory):
    """The scaled Kimi target, and one copy per mutated value, all with the same weights."""
    root = tmp_path_factory.mktemp("kimi-scaled")
    variants = {"as published": {}, "rope factor 64 -> 16": {"rope_factor": 16.0},
                "rope beta_fast 32 -> 2": {"rope_beta_fast": 2.0},
                "rms_norm_eps 1e-5 -> 0.3": {"rms_norm_eps": 0.3},
                "routed_scaling_factor 2.827 -> 1": {"routed_scaling_factor": 1.0},
                "num_experts_per_tok 8 -> 3": {"num_experts_per_tok": 3},
                "first_k_dense_replace 1 -> 2": {"first_k_dense_replace": 2}}
    return {name: write_random_target(root / f"v{i}", scaled_kimi_text(**o), seed=4242)
            for i, (name, o) in enumerate(variants.items())}


def test_scaled_kimi_equals_transformers_and_each_value_drives_it(scaled_dirs, seed):
    base = scaled_dirs["as published"]
    hf = hf_model(base)
    ids = prompt_away_from_ties(hf, seed, PROMPT)
    ours = load_target(base)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    logits = ours.forward(ids, torch.arange(PROMPT), ours.new_cache()).logits
    assert rel_err(logits, ref) <= TOL
    assert ours.cfg.routed_scaling_factor == 2.827 and ours.cfg.rope.factor == 64.0
    for name, model_dir in scaled_dirs.items():
        if name == "as published":
            continue
        mutated, hf_mutated = load_target(model_dir), hf_model(model_dir)
        with torch.no_grad():
            ref_m = hf_mutated(torch.tensor([ids])).logits[0]
        got = mutated.forward(ids, torch.arange(PROMPT), mutated.new_cache()).logits
        assert rel_err(got, logits) > 100 * TOL, f"{name}: the value changed nothing"
        assert rel_err(got, ref_m) <= 1e-4 or _routing_tie(hf_mutated, ids), f"{name}: differs from transformers"


def _routing_tie(model, ids) -> bool:
    from hf_oracle import router_tie_rows

    return bool(router_tie_rows(model, ids))


def scaled_kimi_drafter(target_layers: int, vocab: int, **overrides) -> dict:
    """The Kimi DFlash config at a small width: 8 query heads to 1 key/value head (Kimi's
    64:8), block 8, YaRN as published, mask token and target layers mapped to the target."""
    cfg = json.loads(open(f"{KIMI_DRAFTER}/config.json").read())
    cfg.update(hidden_size=64, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=1, head_dim=8,
               intermediate_size=96, vocab_size=vocab, num_target_layers=target_layers, torch_dtype="float32",
               dflash_config={"target_layer_ids": [0, target_layers - 1], "mask_token_id": vocab - 2})
    cfg.update(overrides)
    return cfg


def test_scaled_kimi_drafter_equals_qwen3_layers_with_its_yarn(scaled_dirs, tmp_path, monkeypatch, seed):
    """The drafter from the scaled Kimi DFlash config against the Qwen3 formulation of
    test_drafter, its rotary embedding given the config's YaRN; the YaRN values move it."""
    import transformers
    from test_drafter import qwen3_reference_draft

    from python_engine.model.drafter import load_drafter
    from python_engine.model.synthetic_checkpoint import random_drafter_tensors, save_safetensors_dir

    target = load_target(scaled_dirs["as published"])
    drafts = {}
    for name, overrides in (("as published", {}), ("default rope", {"rope_scaling": None})):
        cfg = scaled_kimi_drafter(target.cfg.num_hidden_layers, target.cfg.vocab_size, **overrides)
        ddir = tmp_path / name.replace(" ", "-")
        save_safetensors_dir(ddir, random_drafter_tensors(cfg, seed=99))
        (ddir / "config.json").write_text(json.dumps(cfg))
        drafter = load_drafter(ddir, target)
        assert drafter.cfg.block_size == 8 and drafter.cfg.num_attention_heads // drafter.cfg.num_key_value_heads == 8
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(0, target.cfg.vocab_size, (13,), generator=g).tolist()
        out = target.forward(prompt, torch.arange(13), target.new_cache(), hidden_layers=drafter.target_layer_ids)
        features = out.features(drafter.target_layer_ids)
        state = drafter.new_state()
        drafts[name] = drafter.draft(state, None, features, int(out.logits[-1].argmax()), 13, 8)
        if name == "as published":
            rope = drafter.cfg.rope
            yarn = {"rope_type": "yarn", "rope_theta": rope.theta, "factor": rope.factor,
                    "original_max_position_embeddings": rope.original_max_position_embeddings,
                    "beta_fast": rope.beta_fast, "beta_slow": rope.beta_slow, "mscale": rope.mscale,
                    "mscale_all_dim": rope.mscale_all_dim}
            plain = transformers.Qwen3Config
            monkeypatch.setattr(transformers, "Qwen3Config", lambda **kw: plain(
                **{**kw, "rope_parameters": yarn, "max_position_embeddings": cfg["max_position_embeddings"]}))
            with torch.no_grad():
                ref = qwen3_reference_draft(drafter, target, features, int(out.logits[-1].argmax()), 13, 8)
            monkeypatch.undo()
            assert drafts[name].shape == (7, target.cfg.vocab_size)
            assert float((drafts[name] - ref).abs().max() / ref.abs().max()) < 1e-5
    assert float((drafts["as published"] - drafts["default rope"]).abs().max()) > 1e-3
