"""The demo target trains as a real MoE (gradients reach the routed experts and the router,
the balancing bias moves toward under-used experts) and is saved as a DeepSeek-V3
checkpoint that the reference engine loads and agrees with transformers on."""

from __future__ import annotations

import json

import torch

from python_engine.model.target_loader import load_target
from python_engine.train.moe_balance import ExpertLoadBalancer
from python_engine.train.recipe import Recipe, smoke_recipe
from python_engine.train.target_model import build_target, load_hf_target, routers, save_target
from python_engine.train.target_train import lm_loss

CPU = torch.device("cpu")


def test_gradients_reach_experts_and_router_and_balancing_moves_bias(seed):
    shape = smoke_recipe().target
    model = build_target(shape, seed % 10_000)
    balancer = ExpertLoadBalancer(model, rate=0.01)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(2, shape.vocab_size, (4, 33), generator=g)
    loss = lm_loss(model, tokens[:, :-1], tokens[:, 1:], CPU)
    loss.backward()
    loads = [load.clone() for load in balancer.loads]
    for layer, load in zip([l for l in model.model.layers if hasattr(l.mlp, "gate")], loads):
        experts = layer.mlp.experts
        per_expert = experts.gate_up_proj.grad.abs().sum(dim=(1, 2))
        assert torch.equal(per_expert > 0, load > 0), "exactly the experts that got tokens get gradients"
        assert (experts.down_proj.grad.abs().sum(dim=(1, 2)) > 0).sum() == (load > 0).sum()
        assert layer.mlp.gate.weight.grad.abs().sum() > 0, "the router learns through the routing weights"
        assert layer.mlp.shared_experts.up_proj.weight.grad.abs().sum() > 0
    before = [r.e_score_correction_bias.clone() for r in routers(model)]
    balancer.step()
    for r, b, load in zip(routers(model), before, loads):
        moved = r.e_score_correction_bias - b
        assert torch.equal(torch.sign(moved), torch.sign(load.mean() - load))  # toward the under-used


def test_a_few_steps_lower_the_loss_on_a_batch(seed):
    shape = smoke_recipe().target
    model = build_target(shape, seed % 10_000)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(2, shape.vocab_size, (2, 33), generator=torch.Generator().manual_seed(seed))
    losses = []
    for _ in range(8):
        loss = lm_loss(model, tokens[:, :-1], tokens[:, 1:], CPU)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] - 0.2, losses


def test_saved_checkpoint_is_deepseek_v3_format_and_engine_matches_transformers(tmp_path, seed):
    from python_engine.train.tokenizer import save_tokenizer, train_tokenizer
    from python_engine.train.corpus import CorpusFile

    shape = Recipe().target  # the shipped shape: 3 shards
    model = build_target(shape, seed % 10_000)
    with torch.no_grad():
        for r in routers(model):  # a trained-looking, nonzero balancing bias
            r.e_score_correction_bias.normal_(0, 0.05, generator=torch.Generator().manual_seed(seed))
    tok = train_tokenizer([CorpusFile("a.py", "train", "def f(x):\n    return x\n" * 20)] * 10, 300)
    save_tokenizer(tok, tmp_path / "tok")
    out = save_target(model, tmp_path / "target", tmp_path / "tok")

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "deepseek_v3" and cfg["first_k_dense_replace"] == 1
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    assert rope.get("rope_type", rope.get("type")) == "yarn"
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    shards = sorted(set(index.values()))
    assert len(shards) >= 2 and all((out / s).stat().st_size < 8 * 2**20 for s in shards)
    assert "model.layers.1.mlp.experts.7.gate_proj.weight" in index
    assert "model.layers.1.mlp.gate.e_score_correction_bias" in index
    assert (out / "tokenizer.json").exists()

    from safetensors import safe_open

    with safe_open(str(out / index["model.layers.1.mlp.gate.weight"]), "pt") as f:
        assert f.get_tensor("model.layers.1.mlp.gate.weight").dtype == torch.float32
    with safe_open(str(out / index["model.embed_tokens.weight"]), "pt") as f:
        assert f.get_tensor("model.embed_tokens.weight").dtype == torch.bfloat16

    ids = torch.randint(2, shape.vocab_size, (1, 40), generator=torch.Generator().manual_seed(seed))
    hf = load_hf_target(out)
    with torch.no_grad():
        expected = hf(input_ids=ids).logits[0]
    engine = load_target(out)
    got = engine.forward(ids[0], torch.arange(40), engine.new_cache()).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
