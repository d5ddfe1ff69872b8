"""The monitor's figures computed straight from an event file, independently of
kdtree_cli.tui.stats (no shared code: plain json, lists and the definitions in
docs/events.md), so the tests can check what the app shows against it.

Only the last run in the file counts (the app starts fresh figures at each run_start).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

STAGES = ("draft", "tree_build", "verify", "commit")
ROUND_FIELDS = ("request", "round", "accept_len", "tree_size", "tree_depth", "times_us", "tokens")
REQUIRED = {  # docs/events.md
    "run_start": ("engine", "model", "drafter", "device", "host", "dtype", "block_size", "budget",
                  "temperature"),
    "round": ROUND_FIELDS,
    "run_end": ("tokens", "decode_s", "tokens_per_s", "tau", "rounds"),
    "error": ("message",),
}


def _is_round(e: dict) -> bool:
    if e.get("event") != "round" or not all(k in e for k in ROUND_FIELDS):
        return False
    a = e["accept_len"]
    times = e["times_us"]
    return (isinstance(a, int) and not isinstance(a, bool) and a >= 1
            and isinstance(times, dict)
            and all(isinstance(times.get(s), (int, float)) for s in STAGES))


def _is_event(e) -> bool:
    if not (isinstance(e, dict) and isinstance(e.get("event"), str)
            and isinstance(e.get("t"), (int, float)) and not isinstance(e.get("t"), bool)):
        return False
    if e["event"] == "round":
        return _is_round(e)
    return all(k in e for k in REQUIRED.get(e["event"], ()))


@dataclass
class Expected:
    rounds: list[dict]
    run_start: dict | None
    run_end: dict | None
    events_in_stream: int  # valid events, all runs
    window: int
    bucket_s: float
    gpus: dict = field(default_factory=dict)

    # ---- acceptance
    @property
    def tau(self) -> float:
        a = [r["accept_len"] for r in self.rounds]
        return sum(a) / len(a) if a else math.nan

    @property
    def tau_rolling(self) -> float:
        a = [r["accept_len"] for r in self.rounds][-self.window:]
        return sum(a) / len(a) if a else math.nan

    @property
    def histogram(self) -> dict[int, int]:
        h: dict[int, int] = {}
        for r in self.rounds:
            h[r["accept_len"]] = h.get(r["accept_len"], 0) + 1
        return h

    # ---- per depth: rate = P(a - 1 >= d | depth >= d); step adds a - 1 >= d - 1
    def depth_rate(self, d: int) -> tuple[float, float, int]:
        reached = [r for r in self.rounds if r["tree_depth"] >= d]
        acc = [r for r in reached if r["accept_len"] - 1 >= d]
        prev = [r for r in reached if r["accept_len"] - 1 >= d - 1]
        rate = len(acc) / len(reached) if reached else math.nan
        step = len(acc) / len(prev) if prev else math.nan
        return rate, step, len(reached)

    @property
    def max_depth(self) -> int:
        return max((r["tree_depth"] for r in self.rounds), default=0)

    # ---- tokens/s
    def _round_tokens(self) -> list[int]:
        last: dict = {}
        out = []
        for r in self.rounds:
            prev = last.get(r["request"])
            grown = r["accept_len"] if prev is None else r["tokens"] - prev
            out.append(r["accept_len"] if grown < 0 else grown)
            last[r["request"]] = r["tokens"]
        return out

    def buckets(self) -> tuple[list[float], list[bool]]:
        """tokens/s of every complete bucket, and whether it held a round."""
        if not self.rounds:
            return [], []
        t0 = self.run_start["t"] if self.run_start else self.rounds[0]["t"]
        idx = [max(0, math.floor((r["t"] - t0) / self.bucket_s)) for r in self.rounds]
        # a round earlier than the open bucket counts in the open bucket
        fixed, top = [], -1
        for i in idx:
            top = max(top, i)
            fixed.append(top)
        first, last = fixed[0], fixed[-1]
        tokens = [0] * (last - first)
        held = [False] * (last - first)
        for i, n in zip(fixed, self._round_tokens()):
            if i < last:
                tokens[i - first] += n
                held[i - first] = True
        return [n / self.bucket_s for n in tokens], held

    @property
    def tps_now(self) -> float:
        rates, _ = self.buckets()
        return rates[-1] if rates else math.nan

    @property
    def tps_min_max(self) -> tuple[float, float]:
        rates, held = self.buckets()
        active = [r for r, h in zip(rates, held) if h]
        return (min(active), max(active)) if active else (math.nan, math.nan)

    @property
    def tps_avg(self) -> float:
        us = sum(sum(r["times_us"][s] for s in STAGES) for r in self.rounds)
        return sum(self._round_tokens()) / (us * 1e-6) if us else math.nan

    @property
    def decode_tokens(self) -> int:
        return sum(self._round_tokens())

    # ---- stage times over the window
    @property
    def stage_means_us(self) -> dict[str, float]:
        recent = self.rounds[-self.window:]
        return {s: sum(r["times_us"][s] for r in recent) / len(recent) for s in STAGES}


def auto_bucket(rounds: list[dict]) -> float:
    """docs/events.md: the smallest of 0.5, 1, 2, 5, 10, 30, 60 s that is at least four
    times the mean time between the first 8 rounds (0.5 s with fewer than 2 rounds)."""
    first = [r["t"] for r in rounds[:8]]
    if len(first) < 2:
        return 0.5
    mean_gap = (first[-1] - first[0]) / (len(first) - 1)
    fits = [b for b in (0.5, 1, 2, 5, 10, 30, 60) if b >= 4 * mean_gap]
    return float(fits[0]) if fits else 60.0


def expected(path: Path | str, *, window: int = 100, bucket_s: float | None = None) -> Expected:
    """bucket_s None: the monitor's automatic choice (auto_bucket)."""
    events = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if _is_event(e):
            events.append(e)
    valid = events
    starts = [i for i, e in enumerate(valid) if e["event"] == "run_start"]
    run = valid[starts[-1]:] if starts else valid
    rounds = [e for e in run if e["event"] == "round"]
    gpus = {}
    for e in run:
        for g in e.get("gpus") or []:
            gpus[g["id"]] = g
    return Expected(
        rounds=rounds,
        run_start=run[0] if starts else None,
        run_end=next((e for e in reversed(run) if e["event"] == "run_end"), None),
        events_in_stream=len(valid),
        window=window,
        bucket_s=auto_bucket(rounds) if bucket_s is None else bucket_s,
        gpus=gpus,
    )
