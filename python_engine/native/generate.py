"""Decoding many requests on the native engine: submit them all, step the engine until every
one finishes (continuous batching happens inside the engine), and report as the torch
engine does: one `round` metrics event per request per target forward, the sampled `tree`
of a round now and then, a `request_end` as each request finishes (also one that ends at its
prefill, with no round); the per-request results with their timings."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from python_engine.decode.result import finish_reason, tau_of
from python_engine.events import EventWriter
from python_engine.native.engine import FINISHED_STATES, NativeEngine, StepReport
from python_engine.native.gpu_stats import GpuSampler

STAGE_KEYS = ("draft", "tree_build", "verify", "commit")


@dataclass(frozen=True)
class NativeRunSettings:
    max_new_tokens: int = 128
    budget: int = 32
    block_size: int = 0  # 0: the drafter's
    temperature: float = 0.0
    seed: int = 0
    ar: bool = False
    stop_ids: tuple[int, ...] = ()
    tree_every: int = 0  # attach a round's tree to its event every N steps (0: never)


@dataclass
class NativeResult:
    request: int
    prompt: list[int]
    tokens: list[int]
    rounds: int
    accepted: int
    prefill_s: float
    decode_s: float
    state: str

    @property
    def tau(self) -> float:
        return tau_of(self.accepted, self.rounds)

    @property
    def decode_tokens(self) -> int:
        return max(0, len(self.tokens) - 1)


@dataclass
class NativeRunSummary:
    results: list[NativeResult]
    wall_s: float  # first submit to last finish
    rounds: int  # target forwards (batched: one per step)
    stage_us: dict[str, float] = field(default_factory=dict)  # summed over the run
    graph_steps: int = 0
    # a split model's collectives, summed (inside draft and verify); None for a rank share,
    # whose collectives are counted but not run (never reported as 0 us)
    collective_us: float | None = 0.0
    collectives: int = 0        # and their count

    @property
    def tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)

    @property
    def tokens_per_s(self) -> float:
        """Aggregate decode throughput: tokens after each request's first, over the wall time."""
        decode = sum(r.decode_tokens for r in self.results)
        return decode / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tau(self) -> float:
        return tau_of(sum(r.accepted for r in self.results), sum(r.rounds for r in self.results))

    @property
    def machinery_share(self) -> float:
        """Everything but the two forwards (draft, verify) as a share of the round time."""
        total = sum(self.stage_us.values())
        forwards = self.stage_us.get("draft", 0.0) + self.stage_us.get("verify", 0.0)
        return (total - forwards) / total if total > 0 else 0.0


def run_native(engine: NativeEngine, prompts: list[list[int]], settings: NativeRunSettings,
               events: EventWriter | None = None,
               on_step: Callable[[StepReport], None] | None = None,
               gpus: GpuSampler | None = None) -> NativeRunSummary:
    events = events or EventWriter(None)
    s = settings
    t0 = time.perf_counter()
    ids = [engine.submit(p, s.max_new_tokens, budget=s.budget, block_size=s.block_size, ar=s.ar,
                         temperature=s.temperature, seed=s.seed + i, stop_ids=s.stop_ids)
           for i, p in enumerate(prompts)]
    index = {rid: i for i, rid in enumerate(ids)}
    unfinished = set(ids)
    stage_us = {k: 0.0 for k in (*STAGE_KEYS, "host")}
    rounds = graph_steps = steps = 0
    collective_us, collectives = 0.0, 0
    while True:
        want_tree = bool(s.tree_every) and steps % s.tree_every == 0
        report = engine.step(want_tree=want_tree)
        steps += 1
        if report.rounds == 0 and report.waiting == 0 and report.running == 0:
            _request_ends(engine, events, report, unfinished, index, s.stop_ids, time.perf_counter() - t0)
            break
        rounds += report.rounds
        graph_steps += int(report.graph_replayed)
        for k, v in report.stage_us.items():
            stage_us[k] += v
        # a round's stage times are the whole batch's; each request's record carries them
        times = {k: round(report.stage_us[k], 1) for k in STAGE_KEYS}
        if report.collectives:
            collectives += report.collectives
            if report.collective_us is None:  # a rank share: counted, not run
                times["collective"] = None
                collective_us = None
            else:
                times["collective"] = round(report.collective_us, 1)
                if collective_us is not None:
                    collective_us += report.collective_us
        gpu_figures = gpus.sample() if gpus is not None else None
        for rec in report.records:
            extra = {}
            if report.tree is not None and rec.request == report.tree["request"]:
                extra["tree"] = {"parent": report.tree["parent"], "tokens": report.tree["token"],
                                 "accepted": report.tree["accepted"]}
            if gpu_figures:
                extra["gpus"], gpu_figures = gpu_figures, None  # once per step is plenty
            events.emit("round", request=index.get(rec.request, rec.request), round=rec.round,
                        accept_len=rec.accept_len, tree_size=rec.tree_size, tree_depth=rec.tree_depth,
                        times_us=times, tokens=rec.tokens, batch=report.batch, done=rec.done,
                        host_us=round(report.stage_us["host"], 1), **extra)
        _request_ends(engine, events, report, unfinished, index, s.stop_ids, time.perf_counter() - t0)
        if on_step:
            on_step(report)
    wall = time.perf_counter() - t0
    results = []
    for rid in ids:
        info = engine.request(rid)
        results.append(NativeResult(rid, prompts[index[rid]], info.tokens, info.rounds, info.accepted,
                                    info.prefill_s, info.decode_s, info.state))
        engine.release(rid)
    return NativeRunSummary(results, wall, rounds, stage_us, graph_steps, collective_us, collectives)


def _request_ends(engine: NativeEngine, events: EventWriter, report: StepReport, unfinished: set[int],
                  index: dict[int, int], stop_ids: tuple[int, ...], elapsed_s: float) -> None:
    """A `request_end`, after its rounds, for each request the step finished: those whose round
    said done, and, when the step finished more (a request whose prefill ended it), the rest
    found by asking."""
    if not report.finished:
        return
    ended = {rec.request: engine.request(rec.request) for rec in report.records
             if rec.done and rec.request in unfinished}
    if report.finished > len(ended):
        for rid in sorted(unfinished - ended.keys()):
            info = engine.request(rid)
            if info.state in FINISHED_STATES:
                ended[rid] = info
    for rid, info in ended.items():
        unfinished.discard(rid)
        reason = "abort" if info.state == "cancelled" else finish_reason(info.tokens, stop_ids)
        events.emit("request_end", request=index[rid], tokens=len(info.tokens), reason=reason, rounds=info.rounds,
                    e2e_s=round(elapsed_s, 6))
