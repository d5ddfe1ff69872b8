"""Exponential backoff for reconnecting: initial, x factor per failure, capped; reset after
a connection that delivered something. Jitter (optional, seeded) keeps many monitors from
reconnecting in lockstep."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial_s: float = 0.5
    factor: float = 2.0
    cap_s: float = 30.0
    jitter: float = 0.0  # +- this fraction of the delay
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next_delay(self) -> float:
        delay = min(self.cap_s, self.initial_s * self.factor ** min(self.failures, 60))
        self.failures += 1
        if self.jitter:
            delay *= 1.0 + self.rng.uniform(-self.jitter, self.jitter)
        return delay

    def reset(self) -> None:
        self.failures = 0
