"""Progress lines for long stages: plain, flushed, one line per report, so that the output of
a remote command (which only keeps its tail) stays readable."""

from __future__ import annotations

import math
import sys
import time

import torch


class Progress:
    def __init__(self, stage: str, total: int, every: int = 50, stream=None):
        self.stage, self.total, self.every = stage, total, max(1, every)
        self.stream = stream or sys.stdout
        self.t0 = time.perf_counter()

    def say(self, text: str) -> None:
        print(f"[{self.stage}] {text}", file=self.stream, flush=True)

    def step(self, step: int, total: int | None = None, force: bool = False, **values) -> None:
        """Report step (0-based) every `every` steps, at the last step, or when forced."""
        self.total = total or self.total
        done = step + 1
        if not (force or done % self.every == 0 or done == self.total or step == 0):
            return
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / done * (self.total - done)
        fields = " ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items())
        self.say(f"step {done}/{self.total} {fields} | {elapsed:.0f} s, eta {eta:.0f} s")


class LossMeter:
    """The training loss between log points: summed on the device (one host sync per logged
    value), logged every `every` steps, at the first and the last, into train_history's
    "step" and "loss" lists. A non-finite mean stops the run: later steps cannot mend it."""

    def __init__(self, what: str, device, every: int, train_history: dict):
        self.what, self.every, self.history = what, max(1, every), train_history
        self._sum = torch.zeros((), device=device)
        self._count = 0

    def add(self, loss: torch.Tensor) -> None:
        self._sum += loss.detach()
        self._count += 1

    def log_if_due(self, step: int, last: bool) -> bool:
        """Record the mean since the last record when step (0-based) is a log point."""
        if not ((step + 1) % self.every == 0 or last or step == 0):
            return False
        value = float(self._sum) / self._count
        self._sum.zero_()
        self._count = 0
        if not math.isfinite(value):
            raise FloatingPointError(f"{self.what} training diverged at step {step + 1} (loss {value})")
        self.history["step"].append(step + 1)
        self.history["loss"].append(value)
        return True
