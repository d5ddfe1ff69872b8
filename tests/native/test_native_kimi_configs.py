"""The native engine and refs/configs/kimi-k2.6*: it accepts both configs at full size, whole
and split 8 ways (creation gets as far as asking for the first tensor), refuses what it does
not implement naming the value, and its own memory report equals `kdtree plan`'s
arithmetic for the weights and caches of scaled-down models (INT4 experts included)."""

from __future__ import annotations

import ctypes
import json
import re
from ctypes import byref, c_void_p

import pytest

from python_engine.model.config import config_from_dict, load_target_config
from python_engine.model.drafter_config import drafter_config_from_dict, load_drafter_config
from python_engine.model.int4_quantize import quantize_checkpoint
from python_engine.model.synthetic_checkpoint import tiny_config, write_random_drafter, write_random_target
from python_engine.native import library as L
from python_engine.native.engine import NativeEngine, NativeOptions, _table_c
from python_engine.native.model_desc import describe
from python_engine.plan.memory import cache_bytes, workspace_bytes
from python_engine.plan.weights import drafter_weights, target_weights

KIMI, KIMI_DRAFTER = "refs/configs/kimi-k2.6", "refs/configs/kimi-k2.6-dflash"


def create_without_tensors(variant: str, target, drafter, world: int) -> str:
    """kd_engine_create with no tensors: the error it stops at."""
    lib = L.load_library(L.library_path(variant))
    desc = describe(target, drafter)
    table, keep = _table_c([])
    group = L.SimGroup(world, variant) if world > 1 else None
    try:
        opts = NativeOptions(max_slots=1, max_tokens=4096, world_size=world, rank=world - 1,
                             comm="simulated" if group else "none", sim_group=group).to_c()
        err, handle = ctypes.create_string_buffer(4096), c_void_p()
        status = lib.kd_engine_create(byref(desc.target), byref(desc.drafter) if desc.drafter else None, table, 0,
                                      byref(opts), L.PROGRESS_FN(), None, byref(handle), err, 4096)
        assert status != 0 and not handle
        return err.value.decode()
    finally:
        del keep
        if group:
            group.close()


@pytest.mark.parametrize("world", [1, 8])
def test_full_size_kimi_passes_every_config_check(native_variant, world):
    """Past the config checks creation stops at the first tensor, or (one GPU: 560 GiB) at the
    engine's memory check, whose own count of the weights must then be the plan's."""
    t, d = load_target_config(KIMI), load_drafter_config(KIMI_DRAFTER)
    error = create_without_tensors(native_variant, t, d, world)
    if "GPU memory" in error:
        assert world == 1, error
        counted = re.search(r"target ([0-9.]+) GiB, drafter ([0-9.]+) GiB", error)
        assert counted, error
        assert float(counted[1]) == pytest.approx(target_weights(t, 1).total / 2**30, abs=0.01)
        assert float(counted[2]) == pytest.approx(drafter_weights(d) / 2**30, abs=0.01)
    else:
        assert "'model.embed_tokens.weight' is missing" in error


def test_what_the_engine_does_not_implement_is_named(native_variant):
    raw = json.loads(open(f"{KIMI}/config.json").read())
    raw["text_config"] = {**raw["text_config"], "kv_lora_rank": 1024}
    wide = config_from_dict(raw, "wide-latent")
    assert "kv_lora_rank 1024" in create_without_tensors(native_variant, wide, None, 1)
    draft = json.loads(open(f"{KIMI_DRAFTER}/config.json").read()) | {"head_dim": 1024}
    big_heads = drafter_config_from_dict(draft, "big-heads")
    assert "head_dim" in create_without_tensors(native_variant, load_target_config(KIMI), big_heads, 1)


@pytest.fixture(scope="module")
def int4_pair(tmp_path_factory):
    """An INT4-expert target whose every split dimension divides by 2 and 4, and a drafter."""
    root = tmp_path_factory.mktemp("plan-memory")
    cfg = tiny_config(num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
                      n_group=1, topk_group=1, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                      vocab_size=128)
    dense = write_random_target(root / "dense", cfg, seed=7)
    quantize_checkpoint(dense, root / "int4")
    tc = load_target_config(root / "int4")
    return root / "int4", write_random_drafter(root / "drafter", tc, seed=8, num_layers=1, block_size=6)


@pytest.mark.parametrize("world,dtype", [(1, "bfloat16"), (2, "bfloat16"), (2, "float32")])
def test_plan_memory_equals_the_engine_report(int4_pair, native_variant, world, dtype, rng):
    tdir, ddir = int4_pair
    tc, dc = load_target_config(tdir), load_drafter_config(ddir)
    slots, tokens, budget = int(rng.integers(1, 4)), int(rng.integers(32, 300)), int(rng.choice([8, 16, 32]))
    group = L.SimGroup(world, native_variant) if world > 1 else None
    opts = [NativeOptions(dtype=dtype, max_slots=slots, max_tokens=tokens, max_budget=budget, world_size=world, rank=r,
                          comm="simulated" if group else "none", sim_group=group) for r in range(world)]
    engines = [NativeEngine(tdir, ddir, o, variant=native_variant) for o in opts]
    try:
        reports = [e.memory() for e in engines]
    finally:
        for e in engines:
            e.close()
        if group:
            group.close()
    weights = target_weights(tc, world, dtype).total + drafter_weights(dc, dtype=dtype)
    tcache, dcache = cache_bytes(tc, dc, slots, tokens, budget, dtype)
    for m in reports:
        assert (m["weights"], m["target_cache"], m["drafter_cache"]) == (weights, tcache, dcache)
        # the workspace is the plan's estimate: its largest buffers, not the attention plan's exact bound
        estimate = workspace_bytes(tc, dc, world, slots, tokens, budget, dtype)
        assert 0.4 * m["workspace"] <= estimate <= 2.0 * m["workspace"], (estimate, m["workspace"])
