"""The shipped agree pair (refs/models/agree-target + agree-drafter, made by `kdtree
train-agree`): a random Kimi-style target and a DFlash drafter self-distilled on it. On fresh
random prompts DDTree greedy must equal AR greedy token for token with long accepted paths
(tau > 2): the check the native engine repeats on this pair. Also: the shipped
target is exactly what the recipe regenerates, in Kimi's MLA widths, inside the size limits."""

from __future__ import annotations

import torch
from greedy_checks import same_or_near_tie

from python_engine.decode.ar import ar_generate
from python_engine.decode.budget_auto import AutoBudget, measure_verify_costs
from python_engine.decode.ddtree_loop import ddtree_generate
from python_engine.model.checkpoint import Checkpoint
from python_engine.model.config import load_target_config
from python_engine.model.drafter import load_drafter
from python_engine.model.target_loader import load_target
from python_engine.refgen.sync import PROJECT_ROOT

MODELS = PROJECT_ROOT / "refs" / "models"
TARGET, DRAFTER = MODELS / "agree-target", MODELS / "agree-drafter"
PROMPTS, TOKENS, BUDGETS = 8, 64, (16, 32, 64, "auto")  # auto: chosen per round, up to 64
# A random target falls into a short greedy loop on the odd prompt (about 1 in 60 seen): AR, the
# oracle, decides, and such a prompt is replaced by the next draw, since its long accepted paths
# would be trivial. More draws than this would mean the target loops on most prompts.
MAX_DRAWS = 4 * PROMPTS


def is_short_loop(tokens: list[int]) -> bool:
    return len(set(tokens)) <= TOKENS // 4


def test_shipped_agree_pair_ddtree_equals_ar_with_tau_over_2(seed):
    target = load_target(TARGET)  # float32 on the CPU
    drafter = load_drafter(DRAFTER, target)
    g = torch.Generator().manual_seed(seed)
    auto = AutoBudget(measure_verify_costs(target, 64, (4, 32 + TOKENS), repeats=1), 64)
    accept, moved_rows, tested, draws = [], 0, 0, 0
    while tested < PROMPTS:
        draws += 1
        assert draws <= MAX_DRAWS, f"{draws - 1 - tested} of {draws - 1} greedy continuations are short loops"
        length = int(torch.randint(4, 33, (1,), generator=g))
        prompt = torch.randint(0, target.cfg.vocab_size, (length,), generator=g).tolist()
        expected = ar_generate(target, prompt, TOKENS).tokens
        if is_short_loop(expected):
            continue
        budget = BUDGETS[tested % len(BUDGETS)]
        tested += 1
        gen = ddtree_generate(target, drafter, prompt, TOKENS, budget=auto if budget == "auto" else budget,
                              trace=True)
        assert same_or_near_tie(target, prompt, gen.tokens, expected, rel_gap=1e-4), f"prompt {prompt}"
        accept += [r.accept_len for r in gen.rounds]
        moved_rows += sum(int((t["src"] != t["dst"]).sum()) for t in gen.trace)
    tau = sum(accept) / len(accept)
    print(f"agree pair: tau {tau:.2f} over {len(accept)} rounds ({draws - tested} looping prompts redrawn), "
          f"budgets {BUDGETS}")
    assert tau > 2, f"mean acceptance length {tau:.2f}"
    assert max(accept) >= 5
    assert moved_rows > 0, "compaction never moved a row: the non-contiguous accept path went untested"


def test_shipped_agree_target_is_the_recipes(tmp_path):
    """`kdtree train-agree` regenerates the committed target bit for bit (its weights come
    from a seed; only the drafter's training depends on the machine's time)."""
    from python_engine.train.agree_target import write_agree_target

    fresh = Checkpoint(write_agree_target(tmp_path / "agree-target"))
    shipped = Checkpoint(TARGET)
    assert sorted(fresh.names()) == sorted(shipped.names())
    for name in shipped.names():
        a, b = shipped.read(name), fresh.read(name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert (TARGET / "config.json").read_text() == (tmp_path / "agree-target" / "config.json").read_text()


def test_shipped_agree_pair_is_kimi_shaped_and_fits_the_limits():
    from python_engine.model.drafter_config import check_against_target, load_drafter_config
    from python_engine.train.export import check_pair_sizes

    cfg = load_target_config(TARGET)
    assert (cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim) == (512, 64, 128, 128)
    assert cfg.rope.rope_type == "yarn" and cfg.rope.factor > 1 and cfg.rope.mscale_all_dim == 1.0
    assert (cfg.n_group, cfg.topk_group, cfg.routed_scaling_factor) == (1, 1, 2.827)
    assert cfg.q_lora_rank and cfg.n_shared_experts == 1 and cfg.first_k_dense_replace == 1
    assert 4 <= cfg.num_experts_per_tok <= 8 and 16 <= cfg.n_routed_experts <= 32
    d = load_drafter_config(DRAFTER)
    check_against_target(d, cfg)
    assert len(d.target_layer_ids) >= 2 and 8 <= d.block_size <= 16
    assert check_pair_sizes(MODELS, "agree-target", "agree-drafter") <= 24 * 2**20


def test_an_untrained_drafter_of_the_same_shape_does_not_agree(tmp_path, seed):
    """The tau check above can fail: the shipped drafter's config with random weights
    accepts almost nothing on the same target, so the long paths come from the training."""
    import json

    from python_engine.model.synthetic_checkpoint import random_drafter_tensors, save_safetensors_dir

    raw = json.loads((DRAFTER / "config.json").read_text())
    save_safetensors_dir(tmp_path, random_drafter_tensors(raw, seed))
    (tmp_path / "config.json").write_text(json.dumps(raw))
    target = load_target(TARGET)
    drafter = load_drafter(tmp_path, target)
    g = torch.Generator().manual_seed(seed)
    accept = []
    for _ in range(2):
        prompt = torch.randint(0, target.cfg.vocab_size, (12,), generator=g).tolist()
        accept += [r.accept_len for r in ddtree_generate(target, drafter, prompt, 32, budget=32).rounds]
    assert sum(accept) / len(accept) < 1.5
