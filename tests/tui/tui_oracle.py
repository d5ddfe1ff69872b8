"""The monitor's figures computed straight from an event file, independently of
kdtree_cli.tui.stats and python_engine.events (no shared code: plain json, lists and the
rules in docs/events.md, "Malformed lines" and "What the monitor computes from them"), so
the tests can check what the app shows against it.

Only the last run in the file counts (the app starts fresh figures at each run_start).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

STAGES = ("draft", "tree_build", "verify", "commit")

# docs/events.md, "Limits"
LINE_LIMIT = 8 * 1024 * 1024
BIG_INT = 2**53
T_LIMIT = 1e9
STAGE_LIMIT = 3.6e9
NUMBER_LIMIT = 1e300
CLOCK_STEP_LIMIT = 60.0
DEEPEST_ROW = 256  # docs/events.md, "What the monitor computes": rows stop there
LONGEST_BAR = DEEPEST_ROW + 1  # accept_len of this or more share one histogram bar


def _int_in(v, lo, hi=BIG_INT) -> bool:
    return type(v) is int and lo <= v <= hi


def _num_in(v, lo, hi) -> bool:
    return type(v) in (int, float) and lo <= v <= hi  # NaN compares false


def _id(v) -> bool:
    """docs: an integer, or a string of at most 200 characters, none of them a control
    character (U+0000 to U+001F, U+007F to U+009F) or a lone surrogate."""
    if isinstance(v, str):
        return len(v) <= 200 and not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF
                                         for c in v)
    return _int_in(v, -BIG_INT)


def _str(v) -> bool:
    return isinstance(v, str)


SHAPES = {  # kind -> field -> test, as docs/events.md's tables give them
    "run_start": {**dict.fromkeys(("engine", "model", "drafter", "device", "host", "dtype"), _str),
                  "block_size": lambda v: _int_in(v, 0), "budget": lambda v: _int_in(v, 0),
                  "temperature": lambda v: _num_in(v, 0, NUMBER_LIMIT)},
    "round": {"request": _id, "round": lambda v: _int_in(v, 0), "accept_len": lambda v: _int_in(v, 1),
              "tree_size": lambda v: _int_in(v, 0), "tree_depth": lambda v: _int_in(v, 0),
              "tokens": lambda v: _int_in(v, 0),
              "times_us": lambda v: isinstance(v, dict) and all(
                  _num_in(v.get(s), 0, STAGE_LIMIT) for s in STAGES)},
    "run_end": {"tokens": lambda v: _int_in(v, 0), "decode_s": lambda v: _num_in(v, 0, T_LIMIT),
                "tokens_per_s": lambda v: _num_in(v, 0, NUMBER_LIMIT),
                "tau": lambda v: _num_in(v, 0, NUMBER_LIMIT), "rounds": lambda v: _int_in(v, 0)},
    "error": {"message": _str},
    "warning": {"message": _str},
}


def is_event(e) -> bool:
    if not (isinstance(e, dict) and isinstance(e.get("event"), str) and _num_in(e.get("t"), 0, T_LIMIT)):
        return False
    shape = SHAPES.get(e["event"], {})
    return all(k in e and ok(e[k]) for k, ok in shape.items())


def good_gpus(g) -> bool:
    if not isinstance(g, list) or len(g) > 64:
        return False
    for x in g:
        if not (isinstance(x, dict) and "id" in x and _id(x["id"])):
            return False
        for k, hi in (("util", 100), ("mem_gb", 1e6), ("mem_total_gb", 1e6), ("power_w", 1e6)):
            if x.get(k) is not None and not _num_in(x[k], 0, hi):
                return False
    return True


def parse(line: str):
    """The event on a line, or None when the line is not a valid one."""
    if len(line.encode("utf-8", "surrogatepass")) > LINE_LIMIT:
        return None
    try:
        e = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return e if is_event(e) else None


@dataclass
class Expected:
    rounds: list[dict]
    run_start: dict | None
    run_end: dict | None
    events_in_stream: int  # valid events, all runs
    malformed: int  # non-blank lines that are not valid events, all runs
    window: int
    bucket_s: float
    times: list[float]  # the event clock at each round (docs: "tokens/s over time")
    origin: float | None  # the event clock at the run_start
    decided_on: int  # rounds seen when the bucket width was chosen (0: not chosen yet)
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
            a = min(r["accept_len"], LONGEST_BAR)
            h[a] = h.get(a, 0) + 1
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
        """The deepest row shown: the deepest tree, at most DEEPEST_ROW."""
        return min(DEEPEST_ROW, max((r["tree_depth"] for r in self.rounds), default=0))

    @property
    def deeper_than_shown(self) -> int:
        return sum(r["tree_depth"] > DEEPEST_ROW for r in self.rounds)

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
        if not self.rounds or not self.decided_on:
            return [], []
        t0 = self.origin if self.origin is not None else self.times[0]
        idx = [max(0, math.floor((t - t0) / self.bucket_s)) for t in self.times]
        first, last = idx[0], idx[-1]
        tokens = [0] * (last - first)
        held = [False] * (last - first)
        for i, n in zip(idx, self._round_tokens()):
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


def auto_bucket(times: list[float]) -> float:
    """docs/events.md: the smallest of 0.5, 1, 2, 5, 10, 30, 60 s that is at least four
    times the mean time between the first 8 rounds (0.5 s with fewer than 2 rounds)."""
    first = times[:8]
    if len(first) < 2:
        return 0.5
    mean_gap = (first[-1] - first[0]) / (len(first) - 1)
    fits = [b for b in (0.5, 1, 2, 5, 10, 30, 60) if b >= 4 * mean_gap]
    return float(fits[0]) if fits else 60.0


def rounds_seen_at_choice(run: list[dict]) -> int:
    """docs/events.md: the width is chosen at the 8th round, or at a run_end that comes
    after fewer (0: not chosen yet)."""
    n = 0
    for e in run:
        if e["event"] == "round":
            n += 1
            if n == 8:
                return n
        elif e["event"] == "run_end" and n:
            return n
    return 0


def expected_lines(lines: list[str], *, window: int = 100, bucket_s: float | None = None) -> Expected:
    """The figures for a stream of lines (without their newlines). bucket_s None: the
    monitor's automatic choice (auto_bucket)."""
    valid, clock, malformed = [], [], 0
    now = last = None
    for line in lines:
        if not line or line.isspace():
            continue
        e = parse(line)
        if e is None:
            malformed += 1
            continue
        # docs: the event clock moves by each event's step in t, counted 0..60 s
        now = e["t"] if now is None else now + min(max(e["t"] - last, 0.0), CLOCK_STEP_LIMIT)
        last = e["t"]
        valid.append(e)
        clock.append(now)
    starts = [i for i, e in enumerate(valid) if e["event"] == "run_start"]
    begin = starts[-1] if starts else 0
    run, run_clock = valid[begin:], clock[begin:]
    rounds = [e for e in run if e["event"] == "round"]
    times = [c for e, c in zip(run, run_clock) if e["event"] == "round"]
    gpus = {}
    for e in run:
        if good_gpus(e.get("gpus")):
            for g in e["gpus"]:
                gpus[g["id"]] = g
    return Expected(
        rounds=rounds,
        run_start=run[0] if starts else None,
        run_end=next((e for e in reversed(run) if e["event"] == "run_end"), None),
        events_in_stream=len(valid),
        malformed=malformed,
        window=window,
        bucket_s=auto_bucket(times[:rounds_seen_at_choice(run)]) if bucket_s is None else bucket_s,
        times=times,
        origin=run_clock[0] if starts else None,
        decided_on=rounds_seen_at_choice(run) if bucket_s is None else len(rounds),
        gpus=gpus,
    )


def read_lines(path: Path | str) -> list[str]:
    """A file's lines as the monitor reads them: split at each newline byte, each decoded
    as UTF-8 with bad bytes replaced."""
    raw = Path(path).read_bytes().split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    return [r.decode("utf-8", errors="replace") for r in raw]


def expected(path: Path | str, *, window: int = 100, bucket_s: float | None = None) -> Expected:
    return expected_lines(read_lines(path), window=window, bucket_s=bucket_s)
