"""The drafter's training data: the target's greedy continuations equal the reference
engine's AR output; blocks and labels sit where the engine's rounds put them; the chain
baseline's tree is the top-1 path."""

from __future__ import annotations

import numpy as np
import torch

from python_engine.ddtree import build_tree, topk_logprobs
from python_engine.decode.ar import ar_generate
from python_engine.model.target_loader import load_target
from python_engine.train.chain import ChainDrafter
from python_engine.train.drafter_data import LayerTaps, greedy_continuations, sample_blocks, target_features
from python_engine.train.progress import Progress
from python_engine.train.recipe import smoke_recipe
from python_engine.train.target_model import build_target, routers, save_target
from python_engine.train.tokenizer import MASK_ID


def _spread_target(seed):
    """A random smoke-shaped target with weights large enough that its greedy text varies."""
    model = build_target(smoke_recipe().target, seed % 10_000)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        for r in routers(model):
            r.e_score_correction_bias.copy_(torch.randn(r.num_experts, generator=g) * 0.1)
    return model


def test_greedy_continuations_and_features_match_the_engine(tmp_path, seed):
    from python_engine.train.corpus import CorpusFile
    from python_engine.train.tokenizer import save_tokenizer, train_tokenizer

    model = _spread_target(seed)
    save_tokenizer(train_tokenizer([CorpusFile("a.py", "train", "x = 1\n" * 50)], 300), tmp_path / "tok")
    save_target(model, tmp_path / "t", tmp_path / "tok", dtype=torch.float32)
    engine = load_target(tmp_path / "t")
    vocab = smoke_recipe().target.vocab_size
    prompts = torch.randint(2, vocab, (3, 9), generator=torch.Generator().manual_seed(seed))
    seqs = greedy_continuations(model, prompts, 14, batch=2, progress=Progress("test", 1, stream=open("/dev/null", "w")))
    assert seqs.shape == (3, 23) and torch.equal(seqs[:, :9], prompts)
    for i in range(3):
        assert ar_generate(engine, prompts[i].tolist(), 14).tokens == seqs[i, 9:].tolist()
    ids = (0, 2)
    taps = LayerTaps(model, ids)
    feats = target_features(model, taps, seqs, torch.device("cpu"))
    out = engine.forward(seqs[1], torch.arange(23), engine.new_cache(), hidden_layers=ids)
    # These spread weights grow the hidden states to ~100, and the two forwards sum in
    # different orders: float32 rounding then reaches ~2e-6 of the largest value (measured
    # 1.4-1.9e-6 over four seeds), so the tolerance scales with it. A wrong layer or a missed
    # residual is off by O(1) relative, far outside.
    scale = feats[1].abs().max().item()
    torch.testing.assert_close(feats[1], out.features(ids), rtol=1e-4, atol=1e-5 * scale)


def test_blocks_start_at_anchors_in_the_continuation(seed):
    g = torch.Generator().manual_seed(seed)
    seqs = torch.randint(2, 500, (5, 40), generator=g)
    P, B, A = 10, 6, 7
    anchors, blocks, labels = sample_blocks(seqs, P, A, B, g)
    assert anchors.shape == (5, A) and blocks.shape == (5, A, B) and labels.shape == (5, A, B - 1)
    assert (anchors >= P).all() and (anchors <= 40 - B).all()
    assert (anchors[:, 1:] > anchors[:, :-1]).all(), "distinct and sorted"
    for n in range(5):
        for a_i, a in enumerate(anchors[n].tolist()):
            assert blocks[n, a_i, 0] == seqs[n, a] and (blocks[n, a_i, 1:] == MASK_ID).all()
            assert torch.equal(labels[n, a_i], seqs[n, a + 1 : a + B])


def test_blocks_stay_out_of_each_sequences_own_prompt(seed):
    g = torch.Generator().manual_seed(seed)
    seqs = torch.randint(2, 500, (6, 50), generator=g)
    P = torch.tensor([8, 20, 8, 14, 30, 20])
    B, A = 5, 9
    anchors, blocks, labels = sample_blocks(seqs, P, A, B, g)
    assert anchors.shape == (6, A)
    assert (anchors >= P[:, None]).all() and (anchors <= 50 - B).all()
    assert (anchors[:, 1:] > anchors[:, :-1]).all()
    for n in range(6):
        for a_i, a in enumerate(anchors[n].tolist()):
            assert blocks[n, a_i, 0] == seqs[n, a] and torch.equal(labels[n, a_i], seqs[n, a + 1 : a + B])
    # the short prompts' rows do use positions the long prompts' rows may not
    assert int(anchors[P == 8].min()) < 20


def test_saved_precision_rounds_for_the_block_then_restores(seed):
    from python_engine.train.drafter_model import DFlashTrainModel, demo_drafter_config
    from python_engine.train.drafter_validation import saved_precision
    from python_engine.train.recipe import DrafterShape

    shape = DrafterShape(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                         intermediate_size=16, block_size=4, target_layer_ids=(0,))
    model = DFlashTrainModel.from_config_dict(demo_drafter_config(shape, {"hidden_size": 16, "num_hidden_layers": 1,
                                                                         "max_position_embeddings": 64,
                                                                         "vocab_size": 32}), seed % 1000)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with saved_precision(model, torch.bfloat16):
        for k, v in model.state_dict().items():
            assert torch.equal(v, before[k].to(torch.bfloat16).float()), k
        assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


class _FixedDrafter:
    name, block_size, target_layer_ids = "fixed", 6, ()

    def __init__(self, logits):
        self.logits = logits

    def new_state(self):
        return None

    def draft(self, state, ctx_tokens, ctx_features, bonus, start, block_size):
        return self.logits


def test_chain_drafter_makes_the_top1_path(rng):
    logits = torch.from_numpy(rng.normal(size=(5, 50)).astype(np.float32))
    chain = ChainDrafter(_FixedDrafter(logits)).draft(None, None, None, 0, 0, 6)
    logp, tok = topk_logprobs(chain.numpy(), 5)
    tree = build_tree(logp, tok, 5, root_token=7)
    assert tree.n == 5
    assert tree.depth[1:].tolist() == [1, 2, 3, 4, 5] and tree.parent[1:].tolist() == [0, 1, 2, 3, 4]
    assert tree.tokens[1:].tolist() == logits.argmax(dim=-1).tolist()


def test_demo_drafter_config_is_what_the_committed_pair_holds():
    """The one config.json writer (model/drafter_config.py) reproduces the demo drafter's
    committed config from the recipe and the committed target's config."""
    import json

    from python_engine.demo.defaults import MODELS_DIR
    from python_engine.train.drafter_model import demo_drafter_config
    from python_engine.train.recipe import get_recipe

    target_cfg = json.loads((MODELS_DIR / "demo-target" / "config.json").read_text())
    committed = json.loads((MODELS_DIR / "demo-drafter" / "config.json").read_text())
    assert demo_drafter_config(get_recipe("demo").drafter, target_cfg) == committed
