"""Wall-clock stage timing that is honest on CUDA (synchronises before reading the clock)."""

from __future__ import annotations

import time

import torch


class StageClock:
    def __init__(self, device: torch.device):
        self._sync = torch.device(device).type == "cuda"

    def now(self) -> float:
        if self._sync:
            torch.cuda.synchronize()
        return time.perf_counter()


def us(seconds: float) -> float:
    return round(seconds * 1e6, 1)
