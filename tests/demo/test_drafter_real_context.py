"""Training-side and inference-side drafting agree on a real context, with the committed pair.

test_drafter_equivalence.py checks the two forwards' math on a random tiny target, one fresh
drafter state per anchor. Here the engine's own decode loop runs on a real prompt (a seeded
window of standard-library source): its rounds start where its acceptances put them, the
drafter's context K/V grow round by round from the accepted rows of tree-verify forwards,
and the training side assembles the same context the way training does (transformers'
target with LayerTaps, DFlashTrainModel on the saved weights). Then:

- the training forward's logits at every round's anchor equal the engine's draft logits;
- drafter_validation's renewal walk over the training forward's drafts gives exactly the
  engine's accept length in every round, for the chain and for a DDTree budget, and
  validate() reports the engine's tau. (The old validation averaged the chain's accept
  length over uniformly drawn anchors: 3.04 on the demo's held-out eval against the
  engine's 1.87; that is why it could look twice as good as the eval with no bug anywhere.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from python_engine.demo.defaults import DEFAULT_DRAFTER, DEFAULT_TARGET

pytestmark = pytest.mark.skipif(not (DEFAULT_DRAFTER / "config.json").exists(), reason="demo pair not committed")

PROMPT_LEN, NEW_TOKENS, BUDGET = 48, 40, 16
SOURCES = ("json/decoder.py", "textwrap.py", "argparse.py", "dataclasses.py", "csv.py", "string.py")


def _real_prompts(seed: int, count: int) -> list[list[int]]:
    """`count` windows of PROMPT_LEN tokens (EOS first) from stdlib files chosen by the seed."""
    import sysconfig

    from tokenizers import Tokenizer

    from python_engine.train.tokenizer import EOS_ID

    tok = Tokenizer.from_file(str(DEFAULT_TARGET / "tokenizer.json"))
    rng = np.random.default_rng(seed)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    prompts = []
    for name in rng.choice(SOURCES, size=count, replace=False):
        ids = tok.encode((stdlib / name).read_text(encoding="utf-8")).ids
        start = int(rng.integers(0, len(ids) - PROMPT_LEN))
        prompts.append([EOS_ID] + ids[start : start + PROMPT_LEN - 1])
    return prompts


class _Recorder:
    """Passes the engine's drafter through, keeping (anchor, bonus, logits) of every round."""

    def __init__(self, inner):
        self.inner, self.name, self.block_size = inner, inner.name, inner.block_size
        self.target_layer_ids = inner.target_layer_ids
        self.rounds = []

    def new_state(self):
        return self.inner.new_state()

    def draft(self, state, ctx_tokens, ctx_features, bonus, start, block_size):
        logits = self.inner.draft(state, ctx_tokens, ctx_features, bonus, start, block_size)
        self.rounds.append((start, bonus, logits.clone()))
        return logits


@pytest.fixture(scope="module")
def pair():
    from safetensors.torch import load_file

    from python_engine.model.drafter import load_drafter
    from python_engine.model.target_loader import load_target
    from python_engine.train.drafter_data import LayerTaps
    from python_engine.train.drafter_model import DFlashTrainModel
    from python_engine.train.stages import quiet_transformers
    from python_engine.train.target_model import load_hf_target

    quiet_transformers()
    target = load_target(DEFAULT_TARGET, device="cpu", dtype=torch.float32)
    drafter = load_drafter(DEFAULT_DRAFTER, target)
    raw = json.loads((DEFAULT_DRAFTER / "config.json").read_text())
    model = DFlashTrainModel.from_config_dict(raw, seed=0)
    model.load_state_dict({k: v.float() for k, v in load_file(DEFAULT_DRAFTER / "model.safetensors").items()})
    model.eval()
    hf = load_hf_target(DEFAULT_TARGET, "cpu")
    hf.eval()
    return target, drafter, model, hf, LayerTaps(hf, drafter.target_layer_ids)


def test_training_forward_reproduces_the_engine_rounds_on_real_text(pair, seed):
    from python_engine.decode.ddtree_loop import ddtree_generate
    from python_engine.train.acceptance_sim import draft_topk, sequence_rounds
    from python_engine.train.chain import ChainDrafter
    from python_engine.train.drafter_data import greedy_continuations, target_features
    from python_engine.train.drafter_validation import anchor_logits
    from python_engine.train.progress import Progress

    target, drafter, model, hf, taps = pair
    B = drafter.block_size
    prompt = _real_prompts(seed, 1)[0]
    # the target's greedy continuation far enough for every round's block (training's data path)
    seq = greedy_continuations(hf, torch.tensor([prompt]), NEW_TOKENS + B - 1, 1, Progress("t", 1), quiet=True)
    features = target_features(hf, taps, seq, "cpu")
    drafts = anchor_logits(model, features, seq, PROMPT_LEN, NEW_TOKENS, target.w.embed, target.w.lm_head)[0]
    seq_np = seq[0].numpy()
    top1 = drafts.argmax(-1).numpy()
    topk = draft_topk(drafts, BUDGET)

    for name, wrapped, budget in (("chain", lambda d: ChainDrafter(d), None), ("tree", lambda d: d, BUDGET)):
        rec = _Recorder(drafter)
        gen = ddtree_generate(target, wrapped(rec), prompt, NEW_TOKENS, B - 1 if budget is None else budget)
        assert prompt + gen.tokens == seq_np[: PROMPT_LEN + NEW_TOKENS].tolist(), "engine and transformers disagree"
        assert len(rec.rounds) == len(gen.rounds) >= 3
        for start, bonus, engine_logits in rec.rounds:
            assert bonus == int(seq_np[start]), f"{name}: the block's first token must be the token at its anchor"
            torch.testing.assert_close(drafts[start - PROMPT_LEN], engine_logits, rtol=1e-4, atol=1e-4,
                                       msg=lambda m: f"{name}: training forward != engine draft at anchor {start}: {m}")
        engine_accepts = [r.accept_len for r in gen.rounds]
        simulated = sequence_rounds(seq_np, PROMPT_LEN, NEW_TOKENS, top1, topk, budget)
        assert simulated == engine_accepts, name
        print(f"{name}: tau {np.mean(engine_accepts):.3f} over {len(engine_accepts)} rounds")


def test_validation_reports_the_engines_tau(pair, seed):
    from python_engine.decode.ddtree_loop import ddtree_generate
    from python_engine.train.chain import ChainDrafter
    from python_engine.train.drafter_model import position_weights
    from python_engine.train.drafter_validation import build_validation_set, validate
    from python_engine.train.progress import Progress

    target, drafter, model, hf, taps = pair
    prompts = _real_prompts(seed + 1, 2)
    vs = build_validation_set(hf, taps, torch.tensor(prompts), NEW_TOKENS, drafter.block_size, Progress("t", 1))
    v = validate(model, vs, target.w.embed, target.w.lm_head, position_weights(drafter.block_size, 7.0, "cpu"),
                 BUDGET, saved_dtype=torch.bfloat16)  # the committed weights are bf16: rounding is a no-op
    chain, tree = [], []
    for p in prompts:
        chain += [r.accept_len for r in ddtree_generate(target, ChainDrafter(drafter), p, NEW_TOKENS,
                                                        drafter.block_size - 1).rounds]
        tree += [r.accept_len for r in ddtree_generate(target, drafter, p, NEW_TOKENS, BUDGET).rounds]
    assert v["chain_tau"] == pytest.approx(np.mean(chain), abs=1e-9)
    assert v["tau_budget"] == pytest.approx(np.mean(tree), abs=1e-9)
    assert v["chain_acc1"] == pytest.approx(np.mean(np.asarray(chain) >= 2), abs=1e-9)
    assert v["chain_tau_uniform"] >= 1.0 and np.isfinite(v["loss"])
    assert len(v["depth_accuracy"]) == drafter.block_size - 1
    assert not model.training  # validate() puts the model back in the mode it found it in
