"""What one GPU of a split model holds and does, without the others, and without a checkpoint.

- One rank's share alone (`comm none`, world_size N, rank R): the same weight plan (names,
  shapes, bytes), caches and workspace as part R of a simulated split of the same model, the
  same collectives counted each round, reported as not run (None, never 0 us).
- Dummy weights (`load_format dummy`): no tensor table; the same plan and memory as the
  checkpoint's, a seed that decides every value (same seed, same logits; another, others).
- A memory limit: what does not fit is refused before anything is allocated, naming what to
  lower; what fits is planned within it."""

from __future__ import annotations

import numpy as np
import pytest
from native_cases import DEMO_DRAFTER, DEMO_TARGET
from test_native_split import EIGHT_WAY, SplitModel, run_parts

from python_engine.model.synthetic_checkpoint import write_random_drafter, write_random_target
from python_engine.model.target_loader import load_target
from python_engine.native import library as L
from python_engine.native.engine import NativeEngine, NativeOptions, device_memory

DEMO_TARGET_INT4 = DEMO_TARGET.parent / "demo-target-int4"
OPTS = dict(max_slots=2, max_tokens=256, max_budget=16)
MEMORY_FIELDS = ("weights", "target_weights", "drafter_weights", "target_cache", "drafter_cache", "workspace", "total")


@pytest.fixture(scope="module")
def eight_way_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("rank-share")
    tdir = write_random_target(root / "target", EIGHT_WAY, seed=405)
    ddir = write_random_drafter(root / "drafter", load_target(tdir).cfg, seed=406, num_layers=1, block_size=6)
    return tdir, ddir


def count_collectives(eng: NativeEngine, prompt: list[int]) -> tuple[list[int], list]:
    """Each round's collectives and their times (rounds differ in number between a share and
    the split: the share's tokens mean nothing, so it accepts other paths)."""
    rid = eng.submit(prompt, 4, budget=8)
    counts, times = [], []
    while True:
        rep = eng.step()
        if rep.rounds == 0 and rep.waiting == 0 and rep.running == 0:
            break
        counts.append(rep.collectives)
        times.append(rep.collective_us)
    eng.release(rid)
    return counts, times


@pytest.mark.parametrize("pair,world", [("demo", 2), ("eight_way", 8)])
def test_a_rank_share_holds_and_counts_what_the_split_part_does(pair, world, eight_way_pair, native_variant, rng):
    tdir, ddir = (DEMO_TARGET, DEMO_DRAFTER) if pair == "demo" else eight_way_pair
    rank = int(rng.integers(world))
    vocab = load_target(tdir).cfg.vocab_size
    prompt = rng.integers(0, vocab, 5).tolist()
    print(f"{pair}: rank {rank} of {world}, prompt {prompt}")
    with SplitModel(tdir, ddir, world, native_variant, dtype="float32", **OPTS) as split:
        part = split.engines[rank]
        want_memory, want_weights = part.memory(), part.weights()
        split_counts = run_parts(split.engines, lambda e: count_collectives(e, prompt))
    with NativeEngine(tdir, ddir, NativeOptions(dtype="float32", world_size=world, rank=rank, comm="none", **OPTS),
                      variant=native_variant) as share:
        assert share.options.rank_share and share.options.world_size == world and share.options.rank == rank
        got_memory = share.memory()
        assert {k: got_memory[k] for k in MEMORY_FIELDS} == {k: want_memory[k] for k in MEMORY_FIELDS}
        assert share.weights() == want_weights
        counts, times = count_collectives(share, prompt)
    assert set(counts) == set(split_counts[rank][0]) and counts[0] > 0, "a share's round counts the split's collectives"
    assert all(t is None for t in times), "a share's collectives are not run: never reported as a time"
    assert all(t is not None and t >= 0 for t in split_counts[rank][1])


@pytest.mark.parametrize("target,dtype", [(DEMO_TARGET, "float32"), (DEMO_TARGET_INT4, "bfloat16"),
                                          (DEMO_TARGET_INT4, "float32")])
def test_dummy_weights_plan_like_the_checkpoint_and_follow_their_seed(target, dtype, native_variant, rng):
    seed = int(rng.integers(1 << 62))
    prompt = rng.integers(0, load_target(target).cfg.vocab_size, 6).tolist()
    print(f"{target.name} {dtype}: dummy seed {seed}, prompt {prompt}")
    base = NativeOptions(dtype=dtype, **OPTS)

    def logits_of(options: NativeOptions) -> tuple[np.ndarray, dict, list]:
        with NativeEngine(target, DEMO_DRAFTER, options, variant=native_variant) as eng:
            return eng.prefill(0, prompt)[0], eng.memory(), eng.weights()

    real_logits, real_memory, real_weights = logits_of(base)
    dummy = NativeOptions(**{**base.__dict__, "load_format": "dummy", "dummy_seed": seed})
    a, memory, weights = logits_of(dummy)
    b, _, _ = logits_of(dummy)
    c, _, _ = logits_of(NativeOptions(**{**dummy.__dict__, "dummy_seed": seed + 1}))
    assert weights == real_weights
    assert {k: memory[k] for k in MEMORY_FIELDS} == {k: real_memory[k] for k in MEMORY_FIELDS}
    assert np.isfinite(a).all() and a.std() > 0
    assert np.array_equal(a, b), "one seed, one set of weights"
    assert not np.array_equal(a, c), "another seed, other weights"
    assert not np.allclose(a, real_logits), "the dummy weights are not the checkpoint's"


def test_a_memory_limit_refuses_what_does_not_fit_and_plans_within_what_does(native_variant):
    def create(limit: int, **opts) -> NativeEngine:
        o = NativeOptions(dtype="float32", load_format="dummy", memory_limit=limit, **{**OPTS, **opts})
        return NativeEngine(DEMO_TARGET, DEMO_DRAFTER, o, variant=native_variant)

    with create(0) as eng:
        m = eng.memory()
    weights, need = m["weights"], m["total"]
    with pytest.raises(L.NativeError, match="the weights alone are over it") as exc:
        create(weights // 2)
    assert exc.value.status == 4  # KD_OUT_OF_MEMORY
    with pytest.raises(L.NativeError, match=r"lower --max-tokens \(tokens per slot: 256\) or --max-slots \(2\)"):
        create(weights + (need - weights) // 4)
    with create(need) as eng:
        assert eng.memory()["limit"] == need and eng.memory()["total"] <= need
    free, _ = device_memory(0, native_variant)
    with pytest.raises(L.NativeError, match="lower --gpu-memory-limit") as exc:
        create(free + (1 << 30))
    assert exc.value.status == 1  # KD_INVALID_ARGUMENT
