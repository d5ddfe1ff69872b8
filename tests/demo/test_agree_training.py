"""`kdtree train-agree` and its parts: the random target's residual gain, the share of
context-decided steps, and the smoke recipe end to end (target, distillation data, drafter
training, evaluation, results) on a CPU in seconds."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
from torch_threads import single_thread  # noqa: F401 (autouse: tiny models, one thread)

from python_engine.model.synthetic_checkpoint import random_target_tensors
from python_engine.train.agree_recipe import smoke_agree_recipe
from python_engine.train.agree_target import agree_target_tensors, context_decided_fraction


def test_residual_gain_scales_exactly_the_output_projections(seed):
    cfg = smoke_agree_recipe().target_config
    plain = random_target_tensors(cfg, seed)
    scaled = agree_target_tensors(cfg, seed, residual_gain=0.25)
    layers, experts = cfg["num_hidden_layers"], cfg["n_routed_experts"]
    moe_layers = layers - cfg["first_k_dense_replace"]
    # every layer's o_proj; the dense layers' down_proj; each MoE layer's experts' and shared expert's
    expected = layers + cfg["first_k_dense_replace"] + moe_layers * (experts + 1)
    changed = [k for k in plain if not torch.equal(plain[k], scaled[k])]
    assert len(changed) == expected
    for k in plain:
        factor = 0.25 if k in changed else 1.0
        assert torch.equal(scaled[k], plain[k] * factor), k
    assert all(k.endswith(("o_proj.weight", "down_proj.weight")) for k in changed)


def test_context_decided_fraction_counts_steps_off_the_bigram():
    next_of = torch.tensor([1, 2, 3, 0])  # 0 -> 1 -> 2 -> 3 -> 0
    # prompt ends at 2: steps 2->3 (bigram), 3->1 (off), 1->2 (bigram), 2->2 (off)
    assert context_decided_fraction([[3, 1, 2, 2]], [[0, 2]], next_of) == 0.5
    assert context_decided_fraction([[1, 2, 3]], [[0]], next_of) == 0.0


def test_smoke_recipe_end_to_end(tmp_path):
    from python_engine.model.drafter import load_drafter
    from python_engine.model.target_loader import load_target
    from python_engine.train.agree_pair import train_agree_pair

    recipe = smoke_agree_recipe()
    provenance = {"command": "test", "commit": "c0ffee", "date": "today", "machine": "ci"}
    result = train_agree_pair(recipe, tmp_path / "models", tmp_path / "results", provenance, say=lambda _: None)

    assert result["all_identical_to_ar"] is True  # DDTree == AR at every budget and for the chain
    assert [r["budget"] for r in result["t0"]] == list(recipe.evaluation.budgets)
    depth = recipe.drafter.block_size - 1
    for r in [*result["t0"], result["chain"]]:
        assert r["tau"] >= 1.0 and r["rounds"] > 0 and len(r["depth_acceptance"]) == depth
        assert r["matches_ar"] == recipe.evaluation.prompts
    assert 0.0 <= result["target_context_decided"] <= 1.0
    d = result["drafter_training"]
    assert d["steps_run"] == recipe.training.steps and d["continuations"] == recipe.training.gen_prompts
    assert result["commit"] == "c0ffee" and result["pair_bytes"] == sum(result["files"].values())

    saved = json.loads((tmp_path / "results" / "eval.json").read_text())
    assert saved["t0"] == result["t0"]
    summary = (tmp_path / "results" / "summary.md").read_text()
    assert "identical to AR" in summary and "Command: `test`" in summary
    target = load_target(tmp_path / "models" / "agree-target")
    drafter = load_drafter(tmp_path / "models" / "agree-drafter", target)
    assert drafter.block_size == recipe.drafter.block_size
    assert tuple(drafter.target_layer_ids) == recipe.drafter.target_layer_ids

    # the recipe's seeds fix every file: a second run writes the same bytes
    train_agree_pair(recipe, tmp_path / "again", tmp_path / "again-results", provenance, say=lambda _: None)
    for sub in ("agree-target", "agree-drafter"):
        for f in sorted((tmp_path / "models" / sub).iterdir()):
            assert f.read_bytes() == (tmp_path / "again" / sub / f.name).read_bytes(), f"{sub}/{f.name}"


def test_train_agree_refuses_to_overwrite_the_shipped_pair_with_another_recipe():
    proc = subprocess.run([sys.executable, "-m", "kdtree_cli", "train-agree", "--recipe", "smoke"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "--models-dir" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "kdtree_cli", "train-agree", "--recipe", "nope", "--models-dir",
                           "/nonexistent"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "unknown recipe 'nope'" in proc.stderr
