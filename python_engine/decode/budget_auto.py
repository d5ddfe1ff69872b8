"""`--budget auto`: each round, the tree size that maximises expected tokens per second.

The best tree of n nodes is the first n nodes of the best-first build (docs/ddtree.md), so
one build at the largest budget gives the best tree of every size. If the target chose
its tokens as the drafter predicts, node i would be accepted with probability exp(score_i),
its path's probability (the product of the per-depth probabilities the tree build ranks
by), so the expected acceptance length (root included) of the best tree of n nodes is

    E(n) = 1 + sum_{i <= n} exp(score_i).

A round of n nodes takes overhead + verify(n, context) microseconds. `VerifyCosts` comes
from target forwards timed when the run starts (every size up to 8 nodes, a widening grid
above, a few sizes at a second context): a rising line in the size per segment between the
sizes where the forward changes code path, plus a term in the context, scaled online by
how the measured verify times compare with it (the machine's load changes). Segments
because the real cost is not smooth: the torch reference's MoE switches from one batched
matmul over gathered expert weights to a pass per expert above a row count
(takes_gathered_path in model/moe.py), and on a CPU a verify just under that size can cost
several times one just above it. The overhead (draft, tree build, commit) is the running
mean of the measured rounds. The choice is the argmax of E(n) / time(n) over every n in
1..max_budget: no shape of the throughput curve is assumed (CaDDTree, arXiv 2606.01813,
fits a convex verify cost and stops at the first decrease, which would stop before such a
drop). The drafter's probabilities are corrected online by one factor: accepted drafted
nodes over the predicted ones so far (a drafter that is over-confident then gets smaller
trees).

Only the tree changes: at temperature 0 DDTree with any budget is greedy AR, so auto is too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from python_engine.errors import KdtreeError

# --budget auto searches 1..this unless --max-budget says otherwise
AUTO_MAX_BUDGET = 64
PROBE_REPEATS = 2  # each size timed this many times, the fastest kept (load only adds time)
# sizes timed at the second context, as fractions of max_budget (the slope in the context)
SLOPE_FRACTIONS = (0.0, 0.0625, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0)
# running means: weight of the newest round
OVERHEAD_WEIGHT = 0.2
VERIFY_SCALE_WEIGHT = 0.1
# the calibration factor starts at 1 as if this many drafted tokens had been predicted and
# accepted, and stays within these bounds
CALIBRATION_PRIOR_TOKENS = 8.0
CALIBRATION_RANGE = (0.05, 4.0)


def probe_sizes(max_budget: int) -> list[int]:
    """Tree sizes timed at start-up: every one up to 8, then steps of 2 to 32, 4 to 64, 8 to
    128 and 16 beyond; max_budget itself."""
    sizes, n = [], 0
    while n < max_budget:
        sizes.append(n)
        n += 1 if n < 8 else 2 if n < 32 else 4 if n < 64 else 8 if n < 128 else 16
    return sizes + [max_budget]


def path_switches(target, max_budget: int) -> tuple[int, ...]:
    """Tree sizes n (1..max_budget) whose verify takes another code path than size n - 1's:
    the torch reference's MoE switches from gathered expert weights to a pass per expert
    (model/moe.py takes_gathered_path) at one row count."""
    from python_engine.model.moe import takes_gathered_path

    cfg = target.cfg
    if not getattr(cfg, "n_routed_experts", 0):
        return ()
    path = [takes_gathered_path(n + 1, cfg.num_experts_per_tok, cfg.moe_intermediate_size, cfg.hidden_size)
            for n in range(max_budget + 1)]
    return tuple(n for n in range(1, max_budget + 1) if path[n] != path[n - 1])


def rising_line(n: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The least-squares line through (n, t) with a slope >= 0 (more rows never cost less on
    one code path; a falling fit is noise), evaluated at n."""
    if len(n) < 2 or np.ptp(n) == 0:
        return np.full(len(n), float(np.mean(t)))
    design = np.stack([np.ones_like(n), n], axis=1)
    a, b = np.linalg.lstsq(design, t, rcond=None)[0]
    return a + b * n if b >= 0 else np.full(len(n), float(np.mean(t)))


def nonnegative_least_squares(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """argmin |design x - target| over x >= 0, by trying every set of free columns (for the
    two or three columns this is used with)."""
    from itertools import combinations

    cols = design.shape[1]
    best, best_err = np.zeros(cols), float(((design @ np.zeros(cols) - target) ** 2).sum())
    for size in range(1, cols + 1):
        for free in combinations(range(cols), size):
            x = np.zeros(cols)
            x[list(free)] = np.linalg.lstsq(design[:, free], target, rcond=None)[0]
            err = float(((design @ x - target) ** 2).sum())
            if (x >= 0).all() and err < best_err:
                best, best_err = x, err
    return best


@dataclass(frozen=True)
class VerifyCosts:
    """verify_us(n, context): the target forward over a tree of n nodes after `context`
    cached tokens, in microseconds, from timed samples (n, context, us):

        line_s(n) + (c + d * n) * (context - context0)

    line_s: least squares over the times at the smallest context in each segment s of sizes
    between the switches of code path (`switches`: the first size of each new segment), its
    slope >= 0; a line rather than the times themselves, because one timing on a loaded
    machine can be off by half and a table would follow it. (c, d) >= 0 (a longer context
    never costs less): least squares over the other contexts' times. Never below the fastest
    time measured. Kept as the lines' values at the sizes timed (`table_us`), linear between
    them within a segment."""

    switches: tuple[int, ...]
    sizes: tuple[int, ...]
    table_us: tuple[float, ...]
    context_terms: tuple[float, float]  # (c, d)
    context0: int
    floor_us: float
    samples: tuple[tuple[int, int, float], ...]

    @classmethod
    def from_samples(cls, samples: list[tuple[int, int, float]], switches: tuple[int, ...] = ()) -> "VerifyCosts":
        if not samples:
            raise KdtreeError("the verify cost model needs at least one timed forward")
        switches = tuple(sorted(switches))
        c0 = min(c for _, c, _ in samples)
        base = sorted((n, t) for n, c, t in samples if c == c0)
        sizes = np.array([n for n, _ in base], dtype=np.float64)
        segment = np.searchsorted(np.array(switches), sizes, side="right")
        times = np.array([t for _, t in base])
        table = np.concatenate([rising_line(sizes[segment == s], times[segment == s])
                                for s in range(len(switches) + 1)])
        costs = cls(switches, tuple(int(n) for n in sizes), tuple(float(t) for t in table), (0.0, 0.0), c0,
                    float(min(t for _, _, t in samples)), tuple(samples))
        other = [(n, c, t) for n, c, t in samples if c != c0]
        if not other:
            return costs
        dc = np.array([c - c0 for _, c, _ in other], dtype=np.float64)
        n = np.array([n for n, _, _ in other], dtype=np.float64)
        residual = np.array([t for _, _, t in other]) - np.array([costs._table(x) for x, _, _ in other])
        c, d = nonnegative_least_squares(np.stack([dc, dc * n], axis=1), residual)
        return cls(switches, costs.sizes, costs.table_us, (float(c), float(d)), c0, costs.floor_us, tuple(samples))

    @classmethod
    def affine(cls, samples: list[tuple[int, int, float]]) -> "VerifyCosts":
        """A straight line in the size (least squares at the smallest context) with the same
        context term: a convex cost as CaDDTree fits one, for comparing with it."""
        c0 = min(c for _, c, _ in samples)
        base = [(n, t) for n, c, t in samples if c == c0]
        sizes = np.array([n for n, _ in base], dtype=np.float64)
        a, b = np.linalg.lstsq(np.stack([np.ones_like(sizes), sizes], axis=1), np.array([t for _, t in base]),
                               rcond=None)[0]
        ends = (0, int(sizes.max()))
        line = [(n, c0, float(a + b * n)) for n in ends]
        fitted = cls.from_samples(line + [x for x in samples if x[1] != c0])
        return cls((), fitted.sizes, fitted.table_us, fitted.context_terms, c0, 0.0, tuple(samples))

    def _table(self, n: np.ndarray | int) -> np.ndarray:
        """The table at sizes n, linear between the sizes timed within n's segment (constant
        past a segment's first or last size timed)."""
        n = np.asarray(n, dtype=np.float64)
        sizes, table = np.array(self.sizes, dtype=np.float64), np.array(self.table_us)
        bounds = np.array(self.switches)
        where = np.searchsorted(bounds, n, side="right")
        out = np.empty_like(n)
        for s in np.unique(where):
            mine = np.searchsorted(bounds, sizes, side="right") == s
            if not mine.any():  # a segment with no size timed: the whole table
                mine[:] = True
            out[where == s] = np.interp(n[where == s], sizes[mine], table[mine])
        return out

    def verify_us(self, n: np.ndarray | int, context: int) -> np.ndarray:
        n = np.asarray(n, dtype=np.float64)
        c, d = self.context_terms
        return np.maximum(self._table(n) + (c + d * n) * (context - self.context0), self.floor_us)

    def to_json(self) -> dict:
        return {"model": "line_s(n) + (c + d*n)*(context - context0) us, a rising line per segment between "
                "code-path switches (its values at the sizes timed: table_us)", "switches": list(self.switches),
                "table_us": dict(zip(map(str, self.sizes), self.table_us)), "context_terms": list(self.context_terms),
                "context0": self.context0, "samples": [list(s) for s in self.samples]}


@torch.no_grad()
def measure_verify_costs(target, max_budget: int, contexts: tuple[int, ...], repeats: int = PROBE_REPEATS,
                         seed: int = 0) -> VerifyCosts:
    """Time target forwards over trees of probe_sizes(max_budget) nodes (and the sizes on
    both sides of each code-path switch) after the smallest context and of a few sizes
    (SLOPE_FRACTIONS) after the others, with random tokens (a forward's cost depends on its
    row count and the cache, not on the tokens or the mask's shape); the sizes interleaved,
    each repeated, the fastest kept."""
    g = torch.Generator().manual_seed(seed)
    vocab = target.cfg.vocab_size
    contexts = sorted(set(max(1, c) for c in contexts))
    switches = path_switches(target, max_budget)
    samples = []
    for j, context in enumerate(contexts):
        if j == 0:
            sizes = sorted(set(probe_sizes(max_budget)) | {s for n in switches for s in (n - 1, n)})
        else:
            sizes = sorted({round(f * max_budget) for f in SLOPE_FRACTIONS})
        cache = target.new_cache(capacity=context + max_budget + 2)
        target.forward(torch.randint(0, vocab, (context,), generator=g), torch.arange(context), cache)
        times: dict[int, list[float]] = {s: [] for s in sizes}
        for _ in range(repeats):
            for s in sizes:
                tokens = torch.randint(0, vocab, (s + 1,), generator=g)
                visibility = torch.ones(s + 1, context + s + 1, dtype=torch.bool)
                t0 = time.perf_counter()
                target.forward(tokens, torch.arange(context, context + s + 1), cache, visibility)
                if target.device.type == "cuda":
                    torch.cuda.synchronize(target.device)
                times[s].append((time.perf_counter() - t0) * 1e6)
                cache.truncate(context)
        samples += [(s, context, float(min(times[s]))) for s in sizes]
    return VerifyCosts.from_samples(samples, switches)


class AutoBudget:
    """The per-round budget choice of `--budget auto` (see the module docstring). One object
    serves a run: what it learns about the machine and the drafter carries over requests."""

    def __init__(self, costs: VerifyCosts, max_budget: int = AUTO_MAX_BUDGET, calibrate: bool = True,
                 stop_at_first_decrease: bool = False):
        if max_budget < 1:
            raise KdtreeError(f"--max-budget {max_budget}: --budget auto needs a largest tree of >= 1 node")
        self.costs = costs
        self.max_budget = int(max_budget)
        self.calibrate = calibrate
        # CaDDTree's rule: the first size after which the throughput falls (exact only when it
        # is unimodal); kept for comparing with it (kdtree bench budget)
        self.stop_at_first_decrease = stop_at_first_decrease
        self.overhead_us: float | None = None  # draft + tree build + commit, running mean
        self.verify_scale = 1.0  # measured verify / the fit's, running mean
        self.predicted_tokens = 0.0  # drafted tokens the chosen trees were expected to yield
        self.accepted_tokens = 0.0  # and the drafted tokens they did yield
        self._last: tuple[int, int, float] | None = None  # (n, context, predicted drafted tokens)

    @property
    def calibration(self) -> float:
        if not self.calibrate:
            return 1.0
        lo, hi = CALIBRATION_RANGE
        ratio = (self.accepted_tokens + CALIBRATION_PRIOR_TOKENS) / (self.predicted_tokens + CALIBRATION_PRIOR_TOKENS)
        return min(hi, max(lo, ratio))

    def expected_lengths(self, scores: np.ndarray) -> np.ndarray:
        """E(n) for n = 0..len(scores) - 1 of a tree's float32 scores (scores[0] is the
        root's), with the calibration factor applied to the drafted part."""
        gains = np.exp(np.asarray(scores[1:], dtype=np.float64))
        return 1.0 + self.calibration * np.concatenate([[0.0], np.cumsum(gains)])

    def round_us(self, n: np.ndarray, context: int) -> np.ndarray:
        overhead = self.overhead_us if self.overhead_us is not None else float(self.costs.verify_us(0, context))
        return overhead + self.verify_scale * self.costs.verify_us(n, context)

    def choose(self, scores: np.ndarray, context: int) -> int:
        """The budget for this round, given the scores of the best tree of max_budget nodes
        (fewer when the drafter cannot fill it) and the cached context length."""
        largest = len(scores) - 1
        if largest <= 0:
            self._last = (0, context, 0.0)
            return 0
        sizes = np.arange(1, largest + 1)
        expected = self.expected_lengths(scores)
        rate = expected[1:] / self.round_us(sizes, context)
        if self.stop_at_first_decrease:
            falls = np.flatnonzero(np.diff(rate) < 0)
            n = int(sizes[falls[0]]) if len(falls) else int(sizes[-1])
        else:
            n = int(sizes[int(np.argmax(rate))])
        self._last = (n, context, float(np.exp(np.asarray(scores[1: n + 1], dtype=np.float64)).sum()))
        return n

    def observe(self, accept_len: int, times_us: dict[str, float]) -> None:
        """Learn from the round just run with the last choice: its stage times and its
        accepted length."""
        if self._last is None:
            return
        n, context, predicted = self._last
        self._last = None
        overhead = sum(v for k, v in times_us.items() if k != "verify")
        if self.overhead_us is None:
            self.overhead_us = overhead
        else:
            self.overhead_us += OVERHEAD_WEIGHT * (overhead - self.overhead_us)
        fitted = float(self.costs.verify_us(n, context))
        if fitted > 0 and times_us.get("verify", 0) > 0:
            self.verify_scale += VERIFY_SCALE_WEIGHT * (times_us["verify"] / fitted - self.verify_scale)
        self.predicted_tokens += predicted
        self.accepted_tokens += accept_len - 1


def parse_budget(text: str | int) -> int | str:
    """--budget: a node count >= 1, or "auto"."""
    if isinstance(text, int):
        return text
    value = str(text).strip().lower()
    if value == "auto":
        return "auto"
    try:
        return int(value)
    except ValueError:
        raise KdtreeError(f"--budget {text!r}: give a node count (e.g. 32) or auto") from None
