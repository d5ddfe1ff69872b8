"""The batched training forward of the DFlash drafter (python_engine/train/drafter_model.py)
must compute what the reference engine's drafter computes at inference, on the same saved
weights: otherwise training optimises a model the engine never runs. (Random tiny target, one
fresh drafter state per anchor; test_drafter_real_context.py runs the same comparison through
the engine's decode loop on the committed pair and real text.)"""

from __future__ import annotations

import torch

from python_engine.model.drafter import load_drafter
from python_engine.model.synthetic_checkpoint import tiny_config, write_random_target
from python_engine.model.target_loader import load_target
from python_engine.train.drafter_model import DFlashTrainModel, demo_drafter_config, save_drafter
from python_engine.train.recipe import DrafterShape


def _perturb(model: DFlashTrainModel, g: torch.Generator) -> None:
    """Norm weights away from 1 and projections with spread, so a swapped norm or a missing
    scale cannot hide."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.3 * (torch.rand(p.shape, generator=g) - 0.5))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def test_training_forward_equals_engine_draft(tmp_path, seed):
    g = torch.Generator().manual_seed(seed)
    cfg = tiny_config(vocab_size=80, num_hidden_layers=3)
    write_random_target(tmp_path / "target", cfg, seed=seed % 1000)
    target = load_target(tmp_path / "target")
    shape = DrafterShape(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         intermediate_size=40, block_size=6, target_layer_ids=(0, 2))
    raw = demo_drafter_config(shape, cfg, dtype="float32")
    model = DFlashTrainModel.from_config_dict(raw, seed=seed % 1000)
    _perturb(model, g)
    save_drafter(model, raw, tmp_path / "drafter", dtype=torch.float32)
    drafter = load_drafter(tmp_path / "drafter", target)

    S = 30
    seq = torch.randint(2, cfg["vocab_size"], (S,), generator=g)
    out = target.forward(seq, torch.arange(S), target.new_cache(), hidden_layers=shape.target_layer_ids)
    features = out.features(shape.target_layer_ids)  # [S, 2H]
    anchors = torch.tensor([1, 7, 8, 24])  # the last block ends at S-1
    B = shape.block_size
    blocks = torch.full((len(anchors), B), 1, dtype=torch.long)
    blocks[:, 0] = seq[anchors]
    with torch.no_grad():
        train_logits = model(features[None], anchors[None], blocks[None], target.w.embed, target.w.lm_head)[0]
    for i, a in enumerate(anchors.tolist()):
        engine = drafter.draft(drafter.new_state(), seq[:a], features[:a], int(seq[a]), a, B)
        torch.testing.assert_close(train_logits[i], engine, rtol=1e-5, atol=1e-5)
    # anchors are independent: a block must not see another block's tokens
    with torch.no_grad():
        alone = model(features[None], anchors[None, 1:2], blocks[None, 1:2], target.w.embed, target.w.lm_head)[0, 0]
    torch.testing.assert_close(alone, train_logits[1], rtol=1e-5, atol=1e-5)
