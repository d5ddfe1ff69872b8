"""Several requests in one run of the torch engine, with metrics events (run_start, one
`round` per target forward after the first token, run_end). The caller reports failures
as `error` events (it also sees those that happen before the run starts)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Callable

import torch

from python_engine.decode.ar import ar_generate
from python_engine.decode.budget_auto import AUTO_MAX_BUDGET, AutoBudget, measure_verify_costs
from python_engine.decode.ddtree_loop import ddtree_generate
from python_engine.decode.memory import check_round_fits
from python_engine.decode.result import Generation, RoundInfo, finish_reason, tau
from python_engine.errors import KdtreeError
from python_engine.events import EventWriter
from python_engine.model.drafter_base import Drafter
from python_engine.model.target import TargetModel


@dataclass(frozen=True)
class RunSettings:
    max_new_tokens: int = 128
    budget: int | str = 32  # DDTree node budget N, or "auto": chosen per round (budget_auto.py)
    max_budget: int = AUTO_MAX_BUDGET  # with budget "auto": the largest tree considered
    block_size: int | None = None  # None: the drafter's
    temperature: float = 0.0
    seed: int = 0
    ar: bool = False  # plain autoregressive decoding (no drafter)
    stop_ids: tuple[int, ...] = ()

    def check(self) -> None:
        if self.max_new_tokens < 1:
            raise KdtreeError(f"max tokens must be >= 1, got {self.max_new_tokens}")
        if not self.ar and self.budget == "auto":
            if self.max_budget < 1:
                raise KdtreeError(f"--max-budget {self.max_budget}: --budget auto needs a largest tree of >= 1 node")
        elif not self.ar and (not isinstance(self.budget, int) or self.budget < 1):
            raise KdtreeError(f"--budget {self.budget}: DDTree needs a node budget >= 1 (a tree of no "
                              "nodes drafts nothing; for plain autoregressive decoding, use "
                              "`kdtree run --ar`)")
        if self.block_size is not None and self.block_size < 1:
            raise KdtreeError(f"block size must be >= 1, got {self.block_size}")
        if not self.temperature >= 0:
            raise KdtreeError(f"temperature must be >= 0, got {self.temperature}")


@dataclass
class RunSummary:
    tokens: int
    decode_s: float
    tokens_per_s: float
    tau: float
    rounds: int


def summarize(generations: list[Generation]) -> RunSummary:
    rounds = [r for g in generations for r in g.rounds]
    decode_s = sum(g.decode_s for g in generations)
    decode_tokens = sum(g.decode_tokens for g in generations)
    return RunSummary(
        tokens=sum(len(g.tokens) for g in generations),
        decode_s=decode_s,
        tokens_per_s=decode_tokens / decode_s if decode_s > 0 else 0.0,
        tau=tau(r.accept_len for r in rounds),
        rounds=len(rounds),
    )


def run_requests(
    target: TargetModel,
    drafter: Drafter | None,
    prompts: list[list[int]],
    settings: RunSettings,
    events: EventWriter,
    on_request_done: Callable[[int, Generation], None] | None = None,
    on_round: Callable[[int, RoundInfo], None] | None = None,
) -> tuple[list[Generation], RunSummary]:
    settings.check()
    if not settings.ar and drafter is None:
        raise KdtreeError("DDTree decoding needs a drafter (or run plain AR)")
    block_size = 1 if settings.ar else (settings.block_size or drafter.block_size)
    longest = max((len(p) for p in prompts), default=0) + settings.max_new_tokens
    auto = not settings.ar and settings.budget == "auto"
    budget = 0 if settings.ar else settings.max_budget if auto else settings.budget
    # a drafter's attention heads, for the draft's share (test drafters without a config:
    # as many as the target's)
    draft_heads = 0 if settings.ar else (getattr(drafter, "cfg", None) or target.cfg).num_attention_heads
    check_round_fits(target.cfg, draft_heads, budget=budget, block_size=block_size,
                     context=longest, capacity=longest + budget + 2, elt=target.dtype.itemsize,
                     device=target.device)
    events.emit(
        "run_start",
        engine="torch",
        model=target.name,
        drafter="none" if settings.ar else drafter.name,
        device=str(target.device),
        host=socket.gethostname(),
        dtype=str(target.dtype).removeprefix("torch."),
        block_size=block_size,
        budget=budget,
        temperature=settings.temperature,
        requests=len(prompts),
        mode="ar" if settings.ar else "ddtree",
        **({"budget_mode": "auto"} if auto else {}),
    )
    policy = None
    if auto:  # its verify cost model, timed now at the run's shortest and longest contexts
        policy = AutoBudget(measure_verify_costs(target, budget, (min((len(p) for p in prompts), default=1), longest),
                                                 seed=settings.seed), budget)
    generator = torch.Generator().manual_seed(settings.seed)
    generations = []
    for r, prompt in enumerate(prompts):
        def round_done(info: RoundInfo, r=r) -> None:
            events.emit("round", request=r, round=info.index, accept_len=info.accept_len,
                        tree_size=info.tree_size, tree_depth=info.tree_depth,
                        times_us=info.times_us, tokens=info.tokens, budget=info.budget)
            if on_round:
                on_round(r, info)

        common = dict(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                      generator=generator, stop_ids=settings.stop_ids, on_round=round_done)
        if settings.ar:
            gen = ar_generate(target, prompt, **common)
        else:
            gen = ddtree_generate(target, drafter, prompt, budget=policy or settings.budget,
                                  block_size=block_size, **common)
        generations.append(gen)
        events.emit("request_end", request=r, tokens=len(gen.tokens), reason=finish_reason(gen.tokens, settings.stop_ids),
                    rounds=len(gen.rounds), ttft_s=round(gen.prefill_s, 6), e2e_s=round(gen.prefill_s + gen.decode_s, 6))
        if on_request_done:
            on_request_done(r, gen)
    summary = summarize(generations)
    events.emit("run_end", tokens=summary.tokens, decode_s=round(summary.decode_s, 6),
                tokens_per_s=round(summary.tokens_per_s, 3), tau=round(summary.tau, 4),
                rounds=summary.rounds,
                ttft_s=round(sum(g.prefill_s for g in generations) / max(1, len(generations)), 6))
    return generations, summary
