"""`--budget auto`: each round, the tree size that maximises expected tokens per second.

The best tree of n nodes is the first n nodes of the best-first build (docs/ddtree.md), so
one build at the largest budget gives the best tree of every size. If the target chose
its tokens as the drafter predicts, node i would be accepted with probability exp(score_i),
its path's probability (the product of the per-depth probabilities the tree build ranks
by), so the expected acceptance length (root included) of the best tree of n nodes is

    E(n) = 1 + sum_{i <= n} exp(score_i).

A round of n nodes takes overhead + verify(n, context) microseconds: `VerifyCosts`, target
forwards of several tree sizes at two contexts timed when the run starts, fitted by least
squares and scaled online by how the measured verify times compare with the fit (the
machine's load changes); the overhead (draft, tree build, commit) is the running mean of
the measured rounds. The choice is the argmax of E(n) / time(n) over every n in
1..max_budget: no shape of the throughput curve is assumed (CaDDTree, arXiv 2606.01813,
stops at its first decrease, exact only when the verify cost is convex). The drafter's
probabilities are corrected online by one factor: accepted drafted nodes over the
predicted ones so far (a drafter that is over-confident then gets smaller trees).

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
# tree sizes (nodes besides the root) timed at start-up, capped at max_budget
PROBE_SIZES = (0, 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
PROBE_REPEATS = 3
# running means: weight of the newest round
OVERHEAD_WEIGHT = 0.2
VERIFY_SCALE_WEIGHT = 0.1
# the calibration factor starts at 1 as if this many drafted tokens had been predicted and
# accepted, and stays within these bounds
CALIBRATION_PRIOR_TOKENS = 8.0
CALIBRATION_RANGE = (0.05, 4.0)


@dataclass(frozen=True)
class VerifyCosts:
    """verify_us(n, context) = c0 + c1*(n + 1) + c2*context + c3*(n + 1)*context: the
    target forward over a tree of n nodes after `context` cached tokens, in microseconds
    (least squares over the timed sizes and contexts); never below the smallest time
    measured, and non-decreasing in n."""

    coef: tuple[float, float, float, float]
    floor_us: float
    samples: tuple[tuple[int, int, float], ...]  # (n, context, median us) as measured

    @classmethod
    def fit(cls, samples: list[tuple[int, int, float]]) -> "VerifyCosts":
        if not samples:
            raise KdtreeError("the verify cost model needs at least one timed forward")
        n = np.array([s[0] for s in samples], dtype=np.float64) + 1
        ctx = np.array([s[1] for s in samples], dtype=np.float64)
        t = np.array([s[2] for s in samples], dtype=np.float64)
        design = np.stack([np.ones_like(n), n, ctx, n * ctx], axis=1)
        coef = np.linalg.lstsq(design, t, rcond=None)[0]
        return cls(tuple(float(c) for c in coef), float(t.min()), tuple(samples))

    def verify_us(self, n: np.ndarray | int, context: int) -> np.ndarray:
        size = np.asarray(n, dtype=np.float64) + 1
        c0, c1, c2, c3 = self.coef
        t = c0 + c1 * size + c2 * context + c3 * size * context
        t = np.maximum(t, self.floor_us)
        return np.maximum.accumulate(t) if t.ndim else t

    def to_json(self) -> dict:
        return {"model": "c0 + c1*(n+1) + c2*context + c3*(n+1)*context (us)", "coef": list(self.coef),
                "floor_us": self.floor_us, "samples": [list(s) for s in self.samples]}


@torch.no_grad()
def measure_verify_costs(target, max_budget: int, contexts: tuple[int, ...], repeats: int = PROBE_REPEATS,
                         seed: int = 0) -> VerifyCosts:
    """Time target forwards over trees of PROBE_SIZES (up to max_budget) nodes after each
    context (random tokens; a forward's cost depends on its row count and the cache, not on
    the tokens or the mask's shape), the sizes interleaved and each repeated; medians."""
    g = torch.Generator().manual_seed(seed)
    sizes = sorted({s for s in PROBE_SIZES if s <= max_budget} | {max_budget})
    vocab = target.cfg.vocab_size
    samples = []
    for context in sorted(set(max(1, c) for c in contexts)):
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
        samples += [(s, context, float(np.median(times[s]))) for s in sizes]
    return VerifyCosts.fit(samples)


class AutoBudget:
    """The per-round budget choice of `--budget auto` (see the module docstring). One object
    serves a run: what it learns about the machine and the drafter carries over requests."""

    def __init__(self, costs: VerifyCosts, max_budget: int = AUTO_MAX_BUDGET, calibrate: bool = True):
        if max_budget < 1:
            raise KdtreeError(f"--max-budget {max_budget}: --budget auto needs a largest tree of >= 1 node")
        self.costs = costs
        self.max_budget = int(max_budget)
        self.calibrate = calibrate
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
