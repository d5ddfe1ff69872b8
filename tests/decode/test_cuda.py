"""The torch engine on a GPU: CUDA logits equal CPU logits, DDTree == AR in float32 and
bfloat16, and `kdtree run --device cuda`. Skipped without CUDA.

On the GPU box:  .venv/bin/python -m pytest -q -s -m gpu tests/decode/test_cuda.py
(KDTREE_TEST_DEVICE=cpu runs the same checks on the CPU, to test the test.)
"""

from __future__ import annotations

import os
import time

import pytest
import torch
from greedy_checks import same_or_near_tie

from python_engine.decode.ar import ar_generate
from python_engine.decode.ddtree_loop import ddtree_generate
from python_engine.model.drafter import load_drafter
from doubles.oracle_drafter import TargetOracleDrafter
from python_engine.model.synthetic_checkpoint import tiny_config, write_random_target
from python_engine.model.target_loader import load_target

DEVICE = os.environ.get("KDTREE_TEST_DEVICE", "cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_device_logits_equal_cpu_logits(decode_models, seed):
    tdir, _ = decode_models["groups_yarn"]
    cpu, dev = load_target(tdir), load_target(tdir, device=DEVICE)
    ids = torch.randint(0, cpu.cfg.vocab_size, (30,), generator=torch.Generator().manual_seed(seed))
    a = cpu.forward(ids, torch.arange(30), cpu.new_cache()).logits
    cache = dev.new_cache()
    b = torch.cat([dev.forward(ids[:20], torch.arange(20), cache).logits]
                  + [dev.forward(ids[i : i + 1], [i], cache).logits for i in range(20, 30)]).cpu()
    assert float((a - b).abs().max() / a.abs().max()) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ddtree_equals_ar_on_device(decode_models, dtype, seed):
    tdir, ddir = decode_models["groups_yarn"]
    target = load_target(tdir, device=DEVICE, dtype=dtype)
    drafters = [load_drafter(ddir, target), TargetOracleDrafter(target, block_size=6, noise=1.0)]
    g = torch.Generator().manual_seed(seed)
    for drafter in drafters:
        for _ in range(4):
            prompt = torch.randint(0, target.cfg.vocab_size, (12,), generator=g).tolist()
            dd = ddtree_generate(target, drafter, prompt, 48, budget=24).tokens
            ar = ar_generate(target, prompt, 48).tokens
            if dtype == torch.float32:
                assert same_or_near_tie(target, prompt, dd, ar, rel_gap=1e-4)
            else:  # bf16: batch shapes change the rounding
                assert same_or_near_tie(target, prompt, dd, ar, rel_gap=0.05)


def test_throughput_table(tmp_path):
    """A mid-size random model: AR vs DDTree (agreeing drafter) tokens/s, printed (-s)."""
    cfg = tiny_config(vocab_size=4096, hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
                      num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16, kv_lora_rank=256,
                      q_lora_rank=384, qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64,
                      n_routed_experts=32, n_group=4, topk_group=2, num_experts_per_tok=4)
    target = load_target(write_random_target(tmp_path / "mid", cfg, seed=3), device=DEVICE, dtype=torch.bfloat16)
    prompt = list(range(100, 164))
    rows = []
    for name, run in [
        ("AR", lambda: ar_generate(target, prompt, 128)),
        ("DDTree b8 N32", lambda: ddtree_generate(target, TargetOracleDrafter(target, 8, noise=2.0), prompt, 128, 32)),
    ]:
        run()  # warm-up
        t0 = time.perf_counter()
        gen = run()
        rows.append((name, len(gen.tokens) / (time.perf_counter() - t0), gen.tau))
    print(f"\n{'mode':<16}{'tokens/s':>10}{'tau':>7}   ({DEVICE}, bf16, 8 layers, hidden 1024)")
    for name, tps, tau in rows:
        print(f"{name:<16}{tps:>10.1f}{tau:>7.2f}")
    assert rows[1][2] > 1.5
