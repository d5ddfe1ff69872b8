"""Run one function per host on a thread pool; every host's outcome comes back, in the
order the hosts were given, whether it succeeded or raised (failures are reported
together at the end, never by the first one alone)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
MAX_PARALLEL = 16


@dataclass
class Outcome(Generic[T, R]):
    item: T
    value: R | None = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def for_each(items: Sequence[T], fn: Callable[[T], R], max_workers: int = MAX_PARALLEL) -> list[Outcome[T, R]]:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(len(items), max_workers),
                            thread_name_prefix="kdtree-host") as pool:
        futures = [pool.submit(fn, item) for item in items]
        outcomes = []
        for item, future in zip(items, futures, strict=True):
            try:
                outcomes.append(Outcome(item, value=future.result()))
            except Exception as exc:  # collected, reported with the others
                outcomes.append(Outcome(item, error=exc))
    return outcomes
