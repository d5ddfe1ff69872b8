"""The soak: many requests with random prompt lengths, budgets, lengths and stop
tokens, every 37th cancelled a few steps after it starts, all queued at once and decoded
with continuous batching until about SOAK_TOKENS tokens are generated (100,000 on a GPU).
Every finished request's tokens equal its native AR tokens (float32; a near-tie is accepted
as in test_native_decode), every cancelled request's tokens are a prefix of them."""

from __future__ import annotations

import numpy as np
from native_cases import DEMO_DRAFTER, DEMO_TARGET, record
from native_sizes import GPU, SOAK_TOKENS
from test_native_decode import same_or_near_tie

from python_engine.demo.code_prompts import code_prompts
from python_engine.model.target_loader import load_target
from python_engine.native.engine import NativeEngine, NativeOptions

SLOTS = 64 if GPU else 4
MAX_NEW = (16, 256) if GPU else (8, 40)
CANCEL_EVERY = 37 if GPU else 4
PLAN_SLACK = 1.15  # stop tokens end some requests early: plan this much more


def drain(eng, on_step=None) -> int:
    steps = 0
    while True:
        r = eng.step()
        steps += 1
        if on_step:
            on_step(steps)
        if r.rounds == 0 and r.waiting == 0 and r.running == 0:
            return steps


def test_soak_every_request_equals_ar(native_variant, torch_device, seed):
    rng = np.random.default_rng(seed)
    pool = code_prompts(200, seed)
    specs, planned = [], 0
    while planned < PLAN_SLACK * SOAK_TOKENS:
        spec = {"prompt": pool[int(rng.integers(len(pool)))][: int(rng.integers(4, 60))],
                "max_new": int(rng.integers(*MAX_NEW)), "budget": int(rng.integers(0, 65)),
                "stops": [int(t) for t in rng.integers(0, 4096, size=int(rng.integers(0, 3)))]}
        specs.append(spec)
        planned += spec["max_new"]
    opts = NativeOptions(dtype="float32", max_slots=SLOTS, max_tokens=512, max_budget=64)
    with NativeEngine(DEMO_TARGET, DEMO_DRAFTER, opts, variant=native_variant) as eng:
        ids = [eng.submit(s["prompt"], s["max_new"], budget=s["budget"], stop_ids=s["stops"]) for s in specs]
        to_cancel = {rid: int(rng.integers(1, 4)) for rid in ids[CANCEL_EVERY - 1::CANCEL_EVERY]}
        seen_running: dict[int, int] = {}

        def cancel_some(step: int) -> None:
            for rid, wait in list(to_cancel.items()):
                state = eng.request(rid).state
                if state == "running":
                    seen_running.setdefault(rid, step)
                    if step - seen_running[rid] >= wait:
                        eng.cancel(rid)
                        del to_cancel[rid]
                elif state != "waiting":
                    del to_cancel[rid]  # it finished before its turn came

        drain(eng, cancel_some)
        results = [eng.request(rid) for rid in ids]
        ar_ids = [eng.submit(s["prompt"], s["max_new"], ar=True, stop_ids=s["stops"]) for s in specs]
        drain(eng)
        truth = [eng.request(a).tokens for a in ar_ids]
    done = [i for i, r in enumerate(results) if r.state == "done"]
    cancelled = [i for i, r in enumerate(results) if r.state == "cancelled"]
    total = sum(len(results[i].tokens) for i in done)
    mismatches = [i for i in done if results[i].tokens != truth[i]]
    record(test="soak", requests=len(results), done=len(done), cancelled=len(cancelled), tokens=total,
           identical_to_ar=not mismatches, mismatches=len(mismatches))
    print(f"soak: {len(results)} requests ({len(cancelled)} cancelled), {total} tokens, {len(mismatches)} differ")
    assert total >= 0.8 * SOAK_TOKENS, f"only {total} tokens generated"
    assert cancelled, "no request was cancelled mid-run"
    target = load_target(DEMO_TARGET, torch_device) if mismatches else None
    for i in mismatches:
        assert same_or_near_tie(target, specs[i]["prompt"], results[i].tokens, truth[i]), f"request {i}"
    for i in cancelled:
        got = results[i].tokens
        assert got == truth[i][: len(got)], f"cancelled request {i} is not a prefix of its AR tokens"
