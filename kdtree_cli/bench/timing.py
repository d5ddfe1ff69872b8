"""CUDA-event timing of torch work, the same way bench_kernels times the kernels: warm-up
runs, then each run timed alone on the current stream; the median (and p10, p90). Each run
is queued behind a spin kernel (csrc/bench/bench_blocker.cuh), so the events measure the GPU's
time for the run and not Python's cost of launching its kernels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# GPU cycles the blocker spins before each timed run: ~1 ms at ~2 GHz, longer than Python
# needs to launch a baseline's few kernels (the C++ benches need less: 0.2 ms)
BLOCKER_CYCLES = 2_000_000


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
        torch.cuda._sleep(BLOCKER_CYCLES)
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
