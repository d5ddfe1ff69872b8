"""Replay a recorded event file, paced by the events' own `t` (speed x faster), or as fast
as the app absorbs it (speed 0)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.base import EventSource
from python_engine.errors import KdtreeError


def _event_time(line: str) -> float | None:
    """The line's `t`, or None when it has none (malformed lines are not delayed)."""
    try:
        t = json.loads(line).get("t")
    except (ValueError, AttributeError):
        return None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


class ReplaySource(EventSource):
    kind = "replay"

    def __init__(self, path: str | Path, speed: float = 1.0, *, clock=time.monotonic, **kw):
        super().__init__(**kw)
        self.path = Path(path)
        if not self.path.is_file():
            raise KdtreeError(f"no event file at {self.path} (give a JSON Lines file of metrics events)")
        if speed < 0:
            raise KdtreeError("--speed must be >= 0 (0 replays as fast as possible)")
        self.speed = speed
        self._clock = clock
        self._resume = threading.Event()
        self._resume.set()

    def describe(self) -> str:
        pace = "max speed" if self.speed == 0 else f"x{self.speed:g}"
        return f"replay {self.path.name} ({pace})"

    def set_paused(self, paused: bool) -> None:
        if paused:
            self._resume.clear()
        else:
            self._resume.set()

    def produce(self) -> None:
        self.status(SourceState.STREAMING, self.describe())
        t_first: float | None = None
        wall_first = 0.0
        self._paused_s = 0.0  # time spent paused is not replay time
        if self.speed == 0:  # as fast as the app takes them: hand on whole chunks
            with self.path.open(encoding="utf-8", errors="replace") as f:
                while not self.stopping:
                    if not self._hold_while_paused():
                        return
                    chunk = f.readlines(1 << 16)
                    if not chunk:
                        break
                    self.emit_many(chunk)
            if not self.stopping:
                self.status(SourceState.ENDED, f"end of {self.path.name}")
            return
        with self.path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                t = _event_time(line)
                if t is not None and t_first is None:
                    t_first, wall_first = t, self._clock()
                while True:  # until the line is due and we are not paused
                    if not self._hold_while_paused():
                        return
                    if t is None:
                        break
                    delay = wall_first + self._paused_s + (t - t_first) / self.speed - self._clock()
                    if delay <= 0:
                        break
                    if self.wait(min(delay, 0.05)):  # short naps: a pause takes effect at once
                        return
                self.emit(line)
        self.status(SourceState.ENDED, f"end of {self.path.name}")

    def _hold_while_paused(self) -> bool:
        """Block while paused; False when the source is stopping."""
        if self._resume.is_set():
            return not self.stopping
        began = self._clock()
        while not self._resume.wait(0.05):
            if self.stopping:
                return False
        self._paused_s += self._clock() - began
        return not self.stopping
