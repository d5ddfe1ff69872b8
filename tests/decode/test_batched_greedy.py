"""python_engine/train/batched_greedy.py, the batched greedy decoder that makes the agree
drafter's training data: each row of a batch must continue exactly as ar_generate continues
that prompt alone, and the features it keeps must be TargetModel.forward's hidden states
(the drafter trains on them and reads the engine's at inference)."""

from __future__ import annotations

import pytest
import torch
from greedy_checks import same_or_near_tie

from python_engine.decode.ar import ar_generate
from python_engine.model.target_loader import load_target
from python_engine.train.batched_greedy import greedy_with_features

ROWS, NEW = 5, 14


@pytest.mark.parametrize("config", ["groups_yarn", "no_q_lora"])
def test_batched_greedy_equals_ar_and_keeps_the_engines_features(config, decode_models, seed):
    target = load_target(decode_models[config][0])
    layer_ids = (0, target.cfg.num_hidden_layers - 1)
    g = torch.Generator().manual_seed(seed)
    P = int(torch.randint(1, 12, (1,), generator=g))
    prompts = torch.randint(0, target.cfg.vocab_size, (ROWS, P), generator=g)
    seqs, feats = greedy_with_features(target, prompts, NEW, layer_ids)
    assert seqs.shape == (ROWS, P + NEW) and torch.equal(seqs[:, :P], prompts)
    assert feats.shape == (ROWS, P + NEW - 1, len(layer_ids) * target.cfg.hidden_size)
    for row in range(ROWS):
        prompt, got = prompts[row].tolist(), seqs[row, P:].tolist()
        expected = ar_generate(target, prompt, NEW).tokens
        assert same_or_near_tie(target, prompt, got, expected, rel_gap=1e-4), f"row {row}, prompt {prompt}"
        seq = seqs[row, :-1].tolist()
        out = target.forward(seq, torch.arange(len(seq)), target.new_cache(), hidden_layers=layer_ids)
        torch.testing.assert_close(feats[row], out.features(layer_ids), rtol=1e-5, atol=1e-5)

