"""The DFlash drafter: its math against a second formulation assembled from transformers'
Qwen3 modules (norms, rotary embedding, MLP), its per-request context K/V cache, and its
loading errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from python_engine.errors import KdtreeError
from python_engine.model.drafter import load_drafter
from python_engine.model.drafter_config import drafter_config_from_dict
from python_engine.model.synthetic_checkpoint import main as random_drafter_main
from python_engine.model.synthetic_checkpoint import (random_drafter_config, tiny_config, write_random_drafter,
                                                      write_random_target)
from python_engine.model.target_loader import load_target


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("drafter")
    tdir = write_random_target(root / "target-seed7", tiny_config(num_hidden_layers=4), seed=7)
    target = load_target(tdir)
    ddir = write_random_drafter(root / "drafter-seed8", target.cfg, seed=8, num_layers=2, block_size=5,
                                num_heads=4, num_kv_heads=2, head_dim=16)
    return tdir, ddir, target, load_drafter(ddir, target)


def qwen3_reference_draft(drafter, target, features, bonus, start, block_size):
    """DFlash's forward written with transformers' Qwen3 building blocks."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding, rotate_half

    d = drafter.cfg
    qc = Qwen3Config(hidden_size=d.hidden_size, num_attention_heads=d.num_attention_heads,
                     num_key_value_heads=d.num_key_value_heads, head_dim=d.head_dim,
                     intermediate_size=d.intermediate_size, rms_norm_eps=d.rms_norm_eps,
                     rope_parameters={"rope_type": "default", "rope_theta": d.rope.theta})

    def norm(weight, x):
        m = Qwen3RMSNorm(weight.shape[0], eps=d.rms_norm_eps)
        m.weight.data.copy_(weight)
        return m(x)

    c = features.shape[0]
    ctx = norm(drafter.w.hidden_norm, features @ drafter.w.fc.T)  # [c, H]
    block = torch.tensor([bonus] + [d.mask_token_id] * (block_size - 1))
    x = target.w.embed[block][None]  # [1, B, H]
    positions = torch.arange(start - c, start + block_size)[None]
    cos, sin = Qwen3RotaryEmbedding(qc)(x, positions)  # [1, c+B, hd]
    cos, sin = cos[:, None], sin[:, None]
    hd, nh, nkv = d.head_dim, d.num_attention_heads, d.num_key_value_heads
    for lw in drafter.w.layers:
        h = norm(lw.input_norm, x)
        q = norm(lw.q_norm, (h @ lw.q_proj.T).view(1, block_size, nh, hd)).transpose(1, 2)
        kv_in = torch.cat([ctx[None], h], dim=1)  # context rows are not layer-normed
        k = norm(lw.k_norm, (kv_in @ lw.k_proj.T).view(1, c + block_size, nkv, hd)).transpose(1, 2)
        v = (kv_in @ lw.v_proj.T).view(1, c + block_size, nkv, hd).transpose(1, 2)
        q = q * cos[..., -block_size:, :] + rotate_half(q) * sin[..., -block_size:, :]
        k = k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=hd ** -0.5)  # no mask
        x = x + attn.transpose(1, 2).reshape(1, block_size, nh * hd) @ lw.o_proj.T
        mlp = Qwen3MLP(qc)
        mlp.gate_proj.weight.data.copy_(lw.mlp[0])
        mlp.up_proj.weight.data.copy_(lw.mlp[1])
        mlp.down_proj.weight.data.copy_(lw.mlp[2])
        x = x + mlp(norm(lw.post_attention_norm, x))
    return norm(drafter.w.norm, x)[0, 1:] @ target.w.lm_head.T


def test_draft_matches_qwen3_formulation_and_context_cache(pair, seed):
    _, _, target, drafter = pair
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, target.cfg.vocab_size, (13,), generator=g).tolist()
    out = target.forward(prompt, torch.arange(13), target.new_cache(), hidden_layers=drafter.target_layer_ids)
    features = out.features(drafter.target_layer_ids)
    assert features.shape == (13, len(drafter.target_layer_ids) * target.cfg.hidden_size)
    bonus = int(out.logits[-1].argmax())

    state = drafter.new_state()  # context given in two chunks, as rounds do
    drafter.extend_context(state, features[:8], 8)
    ours = drafter.draft(state, None, features[8:], bonus, 13, 5)
    with torch.no_grad():
        ref = qwen3_reference_draft(drafter, target, features, bonus, 13, 5)
    assert ours.shape == (4, target.cfg.vocab_size)
    assert float((ours - ref).abs().max() / ref.abs().max()) < 1e-5
    # the block's own K/V are not kept: a second draft from the same state is identical
    assert state.length == 13
    assert torch.equal(drafter.draft(state, None, features[:0], bonus, 13, 5), ours)


def test_drafter_config_format_and_errors(pair, tmp_path):
    tdir, ddir, target, _ = pair
    raw = json.loads((ddir / "config.json").read_text())
    assert raw["block_size"] == 5 and "target_layer_ids" in raw["dflash_config"]
    assert "mask_token_id" in raw["dflash_config"]

    def broken(mutate, message):
        d = tmp_path / f"d{len(list(tmp_path.iterdir()))}"
        shutil.copytree(ddir, d)
        cfg = json.loads((d / "config.json").read_text())
        mutate(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(KdtreeError, match=message):
            load_drafter(d, target)

    broken(lambda c: c["dflash_config"].update(target_layer_ids=[0, 9]), r"target_layer_ids \[9\] are outside")
    broken(lambda c: c.update(hidden_size=64), "hidden_size 64 != the target's 48")
    broken(lambda c: c["dflash_config"].pop("target_layer_ids"), "target_layer_ids must be a non-empty list")
    broken(lambda c: c.update(layer_types=["sliding_attention"] * 2), "sliding-window")
    broken(lambda c: c["dflash_config"].update(mask_token_id=10_000), "mask_token_id 10000 is outside")
    broken(lambda c: c.update(intermediate_size=7), r"tensor 'layers\.0\.mlp\.gate_proj\.weight' has shape")


def test_random_drafter_command_line(pair, tmp_path, capsys):
    tdir, _, target, _ = pair
    random_drafter_main([str(tdir), str(tmp_path / "d"), "--layers", "1", "--block-size", "4", "--seed", "3"])
    assert capsys.readouterr().out.strip() == str(tmp_path / "d")
    drafter = load_drafter(tmp_path / "d", target)
    assert drafter.block_size == 4 and drafter.cfg.num_hidden_layers == 1
    cfg = drafter_config_from_dict(random_drafter_config(target.cfg, num_layers=3))
    assert all(0 <= i < target.cfg.num_hidden_layers for i in cfg.target_layer_ids)
