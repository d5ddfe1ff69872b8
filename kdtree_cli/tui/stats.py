"""The monitor's numbers, computed from metrics events. Pure Python: no textual, no torch,
so the same model serves the widgets, the JSON summary, the tests and the ingest benchmark.

Definitions (docs/events.md says the same for users):

- tau: mean acceptance length per round, counting the bonus token, as vLLM and SGLang
  define it ("accepted draft tokens + 1" = tokens emitted per target forward). A round's
  `accept_len` is the accepted path length including the root; the root is the previous
  round's bonus token, so `accept_len` = accepted drafted tokens + this round's bonus token,
  and tau = mean(accept_len) with no correction.
- acceptance rate at depth d: P(accept_len - 1 >= d | tree_depth >= d), the share of rounds
  whose tree reached depth d that accepted a drafted token there. The step rate is the
  same conditioned on depth d - 1 having been accepted too.
- tokens/s over time: decode tokens per bucket of event time (`t`), bucket_s wide (auto:
  the smallest of 0.5, 1, 2, 5, 10, 30, 60 s that holds ~4 rounds, judged on the first 8
  rounds, so a slow CPU run gets a readable plot as well as a fast GPU run). A
  round's tokens are the growth of its request's `tokens` counter (its `accept_len` on the
  request's first round, so that a prefill token is not counted as decode output). Only
  complete buckets are plotted; min and max skip buckets with no round (gaps between
  requests are prefill, not slow decoding).
- avg tokens/s: decode tokens / summed round times (the stages' microseconds).

Events come in through the one parser (python_engine.events), which has checked every
field by type and range; what stays here is bounded whatever the stream holds: depths and
acceptance lengths beyond DEPTH_CAP share one bin, at most REQUESTS_KEPT request counters
and GPUS_MAX GPUs are kept, rolling sums are re-added now and then so a huge value leaves
no trace once it leaves the window, and buckets follow the EventClock, so a corrupt `t`
cannot freeze tokens/s.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from python_engine.decode.result import tau_of
from python_engine.events import GPUS_MAX, STAGES, EventClock, ParsedLine, iter_events

# Fields of run_start shown as run facts, in display order.
FACT_FIELDS = (
    "engine", "model", "drafter", "device", "host", "dtype",
    "block_size", "budget", "temperature",
)
LOG_CAPACITY = 500  # entries kept; older ones scroll away (the counts stay exact)
HISTORY_CAPACITY = 7200  # tokens/s buckets kept for the sparkline (an hour at 0.5 s)
AUTO_BUCKETS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
AUTO_ROUNDS = 8  # rounds seen before the automatic bucket width is chosen
# A DDTree's depth is at most its block size - 1 (tens): deeper trees and longer accepted
# paths are counted (every rate up to this depth stays exact) but share one bin.
DEPTH_CAP = 256
ACCEPT_CAP = DEPTH_CAP + 1  # the histogram's last bin holds accept_len >= this
REQUESTS_KEPT = 4096  # per-request token counters kept (the least recently seen go first)


def auto_bucket_s(round_times: list[float]) -> float:
    """The bucket width for rounds at these event times: ~4 rounds per bucket or more."""
    if len(round_times) < 2:
        return AUTO_BUCKETS_S[0]
    interval = (round_times[-1] - round_times[0]) / (len(round_times) - 1)
    return next((b for b in AUTO_BUCKETS_S if b >= 4 * interval), AUTO_BUCKETS_S[-1])


@dataclass
class LogEntry:
    seq: int  # increases by one per entry, so a widget can append only what is new
    level: str  # "info" | "warning" | "error"
    text: str
    t: float | None = None  # event time when the entry comes from an event


@dataclass(frozen=True)
class DepthRate:
    depth: int
    reached: int  # rounds whose tree reached this depth
    accepted: int  # ... of which the accepted path reached it too
    prev_accepted: int  # ... of which depth - 1 was accepted (the step rate's denominator)

    @property
    def rate(self) -> float:
        return self.accepted / self.reached if self.reached else math.nan

    @property
    def step_rate(self) -> float:
        return self.accepted / self.prev_accepted if self.prev_accepted else math.nan


@dataclass
class TreeSnapshot:
    """One round's tree. Node 0 is the root; parent[i] < i for i >= 1; accepted is the
    accepted path as node indices starting at 0. parent/tokens are None when the event
    carried no `tree` field (only the sizes are known then)."""

    request: Any
    round: Any
    tree_size: int
    tree_depth: int
    accept_len: int
    parent: list[int] | None = None
    tokens: list[int] | None = None
    text: list[str] | None = None
    accepted: list[int] = field(default_factory=list)
    budget: int | None = None  # the round's node budget, when the event carries it (--budget auto)


@dataclass
class GpuFigure:
    id: Any
    util: float | None  # percent, 0..100
    mem_gb: float | None
    mem_total_gb: float | None = None
    power_w: float | None = None


def tree_snapshot(ev: dict) -> TreeSnapshot:
    """The round's tree (its `tree` field was checked by the parser), or its sizes only."""
    snap = TreeSnapshot(request=ev["request"], round=ev["round"], tree_size=ev["tree_size"],
                        tree_depth=ev["tree_depth"], accept_len=ev["accept_len"], budget=ev.get("budget"))
    tree = ev.get("tree")
    if tree is not None:
        snap.parent, snap.tokens, snap.accepted, snap.text = (
            tree["parent"], tree["tokens"], tree["accepted"], tree["text"])
    return snap


class Rolling:
    """Mean of the last `window` values, kept in O(1) per push (amortised): the running
    total is re-added exactly once per `window` pushes, so the rounding left by a huge value
    that has left the window is gone within one window."""

    def __init__(self, window: int):
        self.values: deque[float] = deque(maxlen=window)
        self.total = 0.0
        self._since_sum = 0

    def push(self, x: float) -> None:
        if len(self.values) == self.values.maxlen:
            self.total -= self.values[0]
        self.values.append(x)
        self._since_sum += 1
        if self._since_sum >= len(self.values):
            self.total = math.fsum(self.values)
            self._since_sum = 0
        else:
            self.total += x

    @property
    def mean(self) -> float:
        return self.total / len(self.values) if self.values else math.nan


class RunStats:
    """Everything the monitor shows, updated one event at a time (O(1) per round).

    `window` is the rolling window in rounds (tau, stage times); `bucket_s` the width of a
    tokens/s bucket in seconds of event time, None to choose it from the first rounds."""

    def __init__(self, window: int = 100, bucket_s: float | None = None):
        if window < 1 or (bucket_s is not None and bucket_s <= 0):
            raise ValueError("window must be >= 1 and bucket_s > 0")
        self.window = window
        self.auto_bucket = bucket_s is None
        self.bucket_s = AUTO_BUCKETS_S[0] if bucket_s is None else bucket_s
        self.facts: dict | None = None  # the run_start event
        self.log: deque[LogEntry] = deque(maxlen=LOG_CAPACITY)
        self._log_seq = 0
        self.clock = EventClock()  # the stream's event time (not reset with the figures)
        self.reset()

    # ----------------------------------------------------------------------------- state
    def reset(self) -> None:
        """Zero every counter; run facts and the log survive (they describe the run)."""
        self.events = 0
        self.rounds = 0
        self.malformed = 0
        self.unknown_kinds = 0
        self.errors = 0
        self.last_t: float | None = None
        self.run_end: dict | None = None
        # acceptance length
        self.accept_sum = 0
        self.accept_rolling = Rolling(self.window)
        self.hist: dict[int, int] = {}  # accept_len -> rounds; ACCEPT_CAP holds the longer ones
        self.too_deep = 0  # rounds whose tree was deeper than DEPTH_CAP (no row of their own)
        # per depth, O(1) per round; rates are suffix sums taken when drawn (depth_rates)
        self._by_depth: list[int] = []  # rounds by tree depth reached
        self._by_accepted: list[int] = []  # rounds by accepted depth (a - 1, <= tree depth)
        self._by_full: list[int] = []  # rounds that accepted their whole deepest branch
        # throughput
        self._t0: float | None = None  # time origin of the buckets: run_start, else 1st round
        self._bucket: int | None = None
        self._bucket_tokens = 0
        self._bucket_rounds = 0
        self._undecided: list[tuple[float, int]] | None = [] if self.auto_bucket else None
        self.history: deque[float] = deque(maxlen=HISTORY_CAPACITY)  # tokens/s per bucket
        self.tps_min = math.inf
        self.tps_max = -math.inf
        self._req_tokens: dict[Any, int] = {}  # request -> its tokens counter, oldest first
        self.tokens = 0  # decode tokens counted from rounds
        self.round_us = 0.0  # summed stage times
        # stage times
        self.stage_rolling = {s: Rolling(self.window) for s in STAGES}
        # last round, last tree, GPUs
        self.last_round: dict | None = None
        self._tree_ev: dict | None = None  # newest round that carried a `tree` field
        self._tree_cache: tuple[dict, TreeSnapshot] | None = None
        self.gpus: dict[Any, GpuFigure] = {}
        self.gpus_dropped = 0  # figures of GPUs beyond the first GPUS_MAX ids, not kept

    def add_log(self, level: str, text: str, t: float | None = None) -> LogEntry:
        self._log_seq += 1
        entry = LogEntry(self._log_seq, level, text, t)
        self.log.append(entry)
        return entry

    # ----------------------------------------------------------------------------- ingest
    def ingest(self, line: ParsedLine) -> None:
        if line.event is None:
            self.add_malformed(line.warning or f"line {line.lineno}")
            return
        for note in line.notes:
            self.add_log("warning", note, line.event["t"])
        try:
            self.ingest_event(line.event)
        except Exception as exc:  # a monitor bug must not end the monitor: show it, go on
            self.malformed += 1
            self.add_log("error", f"line {line.lineno}: not counted, the monitor failed on it "
                         f"({type(exc).__name__}: {str(exc)[:200]}); please report this")

    def ingest_lines(self, lines: Iterable[str], first_lineno: int = 1) -> None:
        """Parse and absorb raw lines (line numbers for the warnings start at first_lineno);
        blank lines are skipped, malformed ones counted (the contract's reader rules)."""
        for parsed in iter_events(lines, first_lineno):
            self.ingest(parsed)

    def add_malformed(self, warning: str) -> None:
        self.malformed += 1
        self.add_log("warning", f"skipped {warning}")

    def new_stream(self, why: str) -> None:
        """The source started over (a followed file rewritten or replaced): fresh figures,
        as for a new run; the stream's counts carry on."""
        self._fresh_figures()
        self.add_log("info", f"{why}: figures reset")

    def _fresh_figures(self) -> None:
        stream_counts = (self.events, self.malformed, self.unknown_kinds, self.errors, self.last_t)
        self.reset()
        self.events, self.malformed, self.unknown_kinds, self.errors, self.last_t = stream_counts

    def ingest_event(self, ev: dict) -> None:
        """Absorb one event as the parser hands it on (python_engine.events.parse)."""
        self.events += 1
        kind = ev["event"]
        t = ev["t"]
        self.last_t = t
        now = self.clock.advance(t)
        if kind == "round":
            self._round(ev, now)
        elif kind == "run_start":
            if self.rounds or self.run_end is not None:
                # a new run in the same stream: fresh figures; the stream's counts carry on
                self._fresh_figures()
                self.add_log("info", "new run started: figures reset", t)
            self.facts = ev
            self._t0 = now
        elif kind == "run_end":
            if self._undecided:  # a run shorter than AUTO_ROUNDS: decide on what there is
                self._decide_bucket()
            self.run_end = ev
            self.add_log("info", f"run ended: {ev['tokens']} tokens, {ev['rounds']} rounds", t)
        elif kind == "error":
            self.errors += 1
            self.add_log("error", ev["message"], t)
        elif kind == "warning":  # optional kind (docs/events.md)
            self.add_log("warning", ev["message"], t)
        else:
            self.unknown_kinds += 1  # newer writers may add kinds: ignore, but count
        gpus = ev.get("gpus")
        if gpus is not None:
            self._gpus(gpus, t)

    def _round(self, ev: dict, t: float) -> None:
        a = ev["accept_len"]
        depth = min(ev["tree_depth"], DEPTH_CAP)
        self.rounds += 1
        self.accept_sum += a
        self.accept_rolling.push(a)
        a_bin = min(a, ACCEPT_CAP)
        self.hist[a_bin] = self.hist.get(a_bin, 0) + 1
        if ev["tree_depth"] > DEPTH_CAP:
            self.too_deep += 1
        # per depth; an accepted path cannot be deeper than the tree (clamp bad data)
        acc = min(a - 1, depth)
        while len(self._by_depth) <= depth:
            self._by_depth.append(0)
            self._by_accepted.append(0)
            self._by_full.append(0)
        self._by_depth[depth] += 1
        self._by_accepted[acc] += 1
        if acc == depth:
            self._by_full[depth] += 1
        # tokens of this round: growth of the request's counter
        req = ev["request"]
        tokens_now = ev["tokens"]
        before = self._req_tokens.pop(req, None)
        grown = tokens_now - before if before is not None else a
        if grown < 0:  # the request restarted its counter: trust accept_len
            grown = a
        self._req_tokens[req] = tokens_now  # now the most recent
        if len(self._req_tokens) > REQUESTS_KEPT:
            del self._req_tokens[next(iter(self._req_tokens))]
        self.tokens += grown
        # stages
        times = ev["times_us"]
        for s in STAGES:
            us = times[s]
            self.stage_rolling[s].push(us)
            self.round_us += us
        self._bucket_add(t, grown)
        self.last_round = ev
        if "tree" in ev:
            self._tree_ev = ev  # the snapshot is made when drawn

    def _bucket_add(self, t: float, tokens: int) -> None:
        if self._t0 is None:
            self._t0 = t
        if self._undecided is not None:  # auto width: wait for a few rounds, then replay them
            self._undecided.append((t, tokens))
            if len(self._undecided) >= AUTO_ROUNDS:
                self._decide_bucket()
            return
        self._bucket_into(t, tokens)

    def _decide_bucket(self) -> None:
        pending, self._undecided = self._undecided or [], None
        self.bucket_s = auto_bucket_s([t for t, _ in pending])
        for t, tokens in pending:
            self._bucket_into(t, tokens)

    def _bucket_into(self, t: float, tokens: int) -> None:
        # t is the EventClock's, which never goes back, so idx never falls below the open
        # bucket (the clock absorbs a `t` that jumps back, or far ahead)
        idx = max(0, math.floor((t - self._t0) / self.bucket_s))
        if self._bucket is None:
            self._bucket = idx
        elif idx > self._bucket:
            self._close_bucket()
            # buckets with no round at all: 0 tokens/s in the plot, not in min/max
            for _ in range(min(idx - self._bucket - 1, HISTORY_CAPACITY)):
                self.history.append(0.0)
            self._bucket = idx
        self._bucket_tokens += tokens
        self._bucket_rounds += 1

    def _close_bucket(self) -> None:
        rate = self._bucket_tokens / self.bucket_s
        self.history.append(rate)
        if self._bucket_rounds:
            self.tps_min = min(self.tps_min, rate)
            self.tps_max = max(self.tps_max, rate)
        self._bucket_tokens = 0
        self._bucket_rounds = 0

    def _gpus(self, gpus: list[dict], t: float) -> None:
        for g in gpus:
            if g["id"] not in self.gpus and len(self.gpus) >= GPUS_MAX:
                self.gpus_dropped += 1
                continue
            self.gpus[g["id"]] = GpuFigure(g["id"], g["util"], g["mem_gb"], g["mem_total_gb"],
                                           g["power_w"])

    # ----------------------------------------------------------------------------- views
    @property
    def tau(self) -> float:
        return tau_of(self.accept_sum, self.rounds, empty=math.nan)

    @property
    def tau_rolling(self) -> float:
        return self.accept_rolling.mean

    @property
    def last_tree(self) -> TreeSnapshot | None:
        """The newest round's tree; when that round carried no `tree` field, the newest one
        that did (its round number tells which), else the sizes of the newest round."""
        ev = self._tree_ev or self.last_round
        if ev is None:
            return None
        if self._tree_cache is None or self._tree_cache[0] is not ev:
            self._tree_cache = (ev, tree_snapshot(ev))
        return self._tree_cache[1]

    @property
    def depth_rates(self) -> list[DepthRate]:
        """Rows for d = 1 .. deepest tree: reached(d) = #(depth >= d), accepted(d) =
        #(acc >= d), prev_accepted(d) = #(acc >= d-1 and depth >= d), which is
        #(acc >= d-1) minus the rounds that accepted their whole tree of depth d-1."""
        n = len(self._by_depth)
        reached = [0] * (n + 1)
        at_least = [0] * (n + 1)
        for d in range(n - 1, -1, -1):
            reached[d] = reached[d + 1] + self._by_depth[d]
            at_least[d] = at_least[d + 1] + self._by_accepted[d]
        return [
            DepthRate(d, reached[d], at_least[d], at_least[d - 1] - self._by_full[d - 1])
            for d in range(1, n)
            if reached[d]
        ]

    @property
    def tps_now(self) -> float:
        """tokens/s of the last complete bucket (nan before the first one closes)."""
        return self.history[-1] if self.history else math.nan

    @property
    def tps_avg(self) -> float:
        return self.tokens / (self.round_us * 1e-6) if self.round_us > 0 else math.nan

    @property
    def stage_means_us(self) -> dict[str, float]:
        return {s: self.stage_rolling[s].mean for s in STAGES}

    @property
    def ended(self) -> bool:
        return self.run_end is not None

    def summary(self) -> dict:
        """A JSON-able digest of what the monitor shows (the `s` key writes it)."""

        def num(x: float) -> float | None:
            return None if x is None or not math.isfinite(x) else round(x, 6)

        means = self.stage_means_us
        total = sum(v for v in means.values() if math.isfinite(v))
        return {
            "facts": {k: self.facts.get(k) for k in FACT_FIELDS} if self.facts else None,
            "events": self.events,
            "malformed_lines": self.malformed,
            "errors": self.errors,
            "rounds": self.rounds,
            "tau": num(self.tau),
            "tau_rolling": num(self.tau_rolling),
            "window_rounds": self.window,
            "accept_len_histogram": {(f"{k}+" if k == ACCEPT_CAP else str(k)): v
                                     for k, v in sorted(self.hist.items())},
            "rounds_deeper_than_shown": self.too_deep,
            "depth_rates": [
                {"depth": r.depth, "reached": r.reached, "accepted": r.accepted,
                 "rate": num(r.rate), "step_rate": num(r.step_rate)}
                for r in self.depth_rates
            ],
            "tokens": self.tokens,
            "tokens_per_s": {
                "now": num(self.tps_now),
                "min": num(self.tps_min),
                "max": num(self.tps_max),
                "avg": num(self.tps_avg),
                "bucket_s": self.bucket_s,
            },
            "stage_us_mean": {s: num(v) for s, v in means.items()},
            "stage_share": {s: num(v / total) if total else None for s, v in means.items()},
            "gpus": [vars(g) for g in self.gpus.values()],
            "gpus_not_shown": self.gpus_dropped,
            "run_end": self.run_end,
        }
