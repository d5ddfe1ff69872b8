"""CUDA-event timing of torch work, the same way bench_kernels times the kernels: warm-up
runs, then each run timed alone on the current stream; the median (and p10, p90)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Timing:
    ms: float
    ms_p10: float
    ms_p90: float
    reps: int


def time_cuda(fn: Callable[[int], object], reps: int, warm: int = 3) -> Timing:
    """fn(i) for i in range(warm + reps); each of the last `reps` runs timed with CUDA events."""
    import torch

    torch.cuda.synchronize()
    for i in range(warm):
        fn(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(reps):
        start.record()
        fn(warm + i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()

    def at(q: float) -> float:
        return times[int(q * (len(times) - 1) + 0.5)]

    return Timing(at(0.5), at(0.1), at(0.9), reps)


def copies_past_l2(bytes_per_copy: float, total: float = 200e6, most: int = 8) -> int:
    """How many copies of an input to rotate through so a run's bytes come from DRAM, not the
    ~50-60 MB L2 of an H100/H200 (the rule bench_kernels uses for its KV sets)."""
    if bytes_per_copy >= total:
        return 1
    return min(most, -(-int(total) // max(1, int(bytes_per_copy))))
