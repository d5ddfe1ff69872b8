"""Learning-rate schedule (linear warmup, cosine decay to a floor) and the time guard that
keeps a stage inside one GPU command: after a few timed steps it projects the stage's
duration and, if it would overrun its budget, shrinks the step count (loudly, and the
results record both numbers) before the schedule has left warmup."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable


def lr_at(step: int, total: int, peak: float, warmup: int, min_ratio: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def set_lr(optimizer, step: int, plan: StepPlan, peak: float, min_ratio: float) -> float:
    """Every parameter group of `optimizer` at the schedule's rate for `step`; that rate."""
    lr = lr_at(step, plan.total, peak, plan.warmup, min_ratio)
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def device_sync(device) -> Callable[[], None]:
    """What waits for the work queued on `device` (a torch.device): the CUDA stream's
    synchronize on a GPU, nothing on the CPU, where every step runs in line."""
    import torch

    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


@dataclass
class StepPlan:
    planned: int  # the recipe's steps
    total: int  # steps this run will do (== planned unless the time guard cut it)
    warmup: int
    cut_reason: str | None = None


class TimeGuard:
    """Call `check(step)` after every step; it may lower plan.total once, at `probe_step`."""

    def __init__(self, plan: StepPlan, budget_s: float, probe_step: int = 20, log=print):
        self.plan, self.budget_s, self.probe_step, self.log = plan, budget_s, probe_step, log
        self.t0 = time.perf_counter()
        self._probe_t: float | None = None

    def check(self, step: int, sync=lambda: None) -> None:
        # steps 0..4 include warm-up costs (allocator, kernels' first launches): time from 5
        if step == 5:
            sync()
            self._probe_t = time.perf_counter()
        if step != self.probe_step or self._probe_t is None:
            return
        sync()
        per_step = (time.perf_counter() - self._probe_t) / (self.probe_step - 5)
        elapsed = time.perf_counter() - self.t0
        projected = elapsed + per_step * (self.plan.total - step - 1)
        if projected <= self.budget_s:
            self.log(f"time guard: {per_step * 1000:.1f} ms/step, projected {projected:.0f} s "
                     f"of a {self.budget_s:.0f} s budget")
            return
        fit = max(step + 2, int((self.budget_s - elapsed) / per_step) + step + 1)
        self.plan.cut_reason = (f"{per_step * 1000:.1f} ms/step would take {projected:.0f} s > "
                                f"budget {self.budget_s:.0f} s; cut {self.plan.total} -> {fit} steps")
        self.log("WARNING time guard: " + self.plan.cut_reason)
        self.plan.total = fit
        self.plan.warmup = min(self.plan.warmup, max(1, fit // 10))

    def overran(self, step: int, slack: float = 1.15) -> bool:
        """True (once, logged) when the stage has run `slack` times its budget: a machine that
        slowed down after the probe must still leave time for the stages after this one."""
        if self.elapsed() <= self.budget_s * slack or step + 1 >= self.plan.total:
            return False
        self.plan.cut_reason = (self.plan.cut_reason or "") + (
            f"{'; ' if self.plan.cut_reason else ''}stopped at step {step + 1} of {self.plan.total}: "
            f"{self.elapsed():.0f} s > {slack:g} x budget {self.budget_s:.0f} s")
        self.log("WARNING time guard: " + self.plan.cut_reason)
        self.plan.total = step + 1
        return True

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0
