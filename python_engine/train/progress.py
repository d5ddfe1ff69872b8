"""Progress lines for long stages: plain, flushed, one line per report, so that the output of
a remote command (which only keeps its tail) stays readable."""

from __future__ import annotations

import sys
import time


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
