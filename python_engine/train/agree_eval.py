"""Evaluation of the agree pair with the reference engine (python_engine.decode), float32 on
the CPU: fresh random prompts, AR greedy, then DDTree greedy at each budget and the chain
(top-1 per depth, plain DFlash), each continuation compared with AR's token for token, and
tau (mean accepted tokens per target forward) with its per-depth acceptance."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from python_engine.train.agree_recipe import AgreeEval
from python_engine.train.agree_target import context_decided_fraction, residual_only_next
from python_engine.train.chain import ChainDrafter
from python_engine.train.evaluate import run_config
from python_engine.train.progress import Progress


def fresh_prompts(ev: AgreeEval, vocab_size: int) -> list[list[int]]:
    """ev.prompts random-token prompts, lengths uniform in ev.prompt_lens, from ev.seed."""
    g = torch.Generator().manual_seed(ev.seed)
    lo, hi = ev.prompt_lens
    lens = torch.randint(lo, hi + 1, (ev.prompts,), generator=g).tolist()
    return [torch.randint(0, vocab_size, (n,), generator=g).tolist() for n in lens]


def evaluate_pair(target_dir: Path, drafter_dir: Path, ev: AgreeEval, progress: Progress | None = None) -> dict:
    from python_engine.decode.ar import ar_generate
    from python_engine.model.drafter import load_drafter
    from python_engine.model.target_loader import load_target

    progress = progress or Progress("eval", 1)
    t0 = time.perf_counter()
    target = load_target(target_dir, device="cpu", dtype=torch.float32)
    drafter = load_drafter(drafter_dir, target)
    depth = drafter.block_size - 1
    prompts = fresh_prompts(ev, target.cfg.vocab_size)
    ar_tokens = [ar_generate(target, p, ev.new_tokens).tokens for p in prompts]
    distinct = [len(set(t)) for t in ar_tokens]
    context_decided = context_decided_fraction(ar_tokens, prompts, residual_only_next(target))
    progress.say(f"AR: {len(prompts)} prompts x {ev.new_tokens} tokens, {min(distinct)}..{max(distinct)} distinct "
                 f"tokens per continuation, {100 * context_decided:.1f}% of the steps decided by the context")
    runs = [run_config(target, drafter, prompts, ev.new_tokens, b, 0.0, ev.seed, f"budget {b}", ar_tokens, progress)
            for b in ev.budgets]
    chain = run_config(target, ChainDrafter(drafter), prompts, ev.new_tokens, depth, 0.0, ev.seed, "chain",
                       ar_tokens, progress)
    t0_runs = [r.summary(depth) for r in runs]
    return {
        "device": "cpu", "dtype": "float32",
        "prompts": len(prompts), "prompt_lens": [len(p) for p in prompts], "new_tokens": ev.new_tokens,
        "seed": ev.seed, "block_size": drafter.block_size,
        "ar_distinct_tokens": distinct,
        "target_context_decided": round(context_decided, 4),
        "t0": t0_runs,
        "chain": chain.summary(depth),
        "all_identical_to_ar": all(r["matches_ar"] == len(prompts) for r in [*t0_runs, chain.summary(depth)]),
        "seconds": round(time.perf_counter() - t0, 1),
    }
