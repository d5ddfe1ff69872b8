"""Replay a recorded event file, paced by the events' own `t` (speed x faster), or as fast
as the app absorbs it (speed 0). Pacing follows python_engine.events.EventClock, so a
corrupt `t` costs at most a minute of waiting, never a hang; lines are read with bounded
memory (kdtree_cli.tui.sources.lines)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.base import EventSource
from kdtree_cli.tui.sources.lines import read_lines
from python_engine.errors import KdtreeError
from python_engine.events import EventClock, event_time


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
        self._paused_at = 0.0  # when the last pause began (the app's thread sets it)

    def describe(self) -> str:
        pace = "max speed" if self.speed == 0 else f"x{self.speed:g}"
        return f"replay {self.path.name} ({pace})"

    def set_paused(self, paused: bool) -> None:
        if paused:
            self._paused_at = self._clock()
            self._resume.clear()
        else:
            self._resume.set()

    def produce(self) -> None:
        self.status(SourceState.STREAMING, self.describe())
        self._paused_s = 0.0  # time spent paused is not replay time
        self._event_clock = EventClock()
        self._t_first: float | None = None  # the first line's event time, and when it went out
        self._wall_first = 0.0
        with self.path.open("rb") as f:
            for lines in read_lines(f):
                if self.speed == 0:  # as fast as the app takes them: hand on whole chunks
                    if not self._hold_while_paused():
                        return
                    self.emit_many(lines)
                elif not self._paced(lines):
                    return
        if not self.stopping:
            self.status(SourceState.ENDED, f"end of {self.path.name}")

    def _paced(self, lines: list[str]) -> bool:
        """Emit each line when its event time is due; False when the source is stopping."""
        for line in lines:
            t = event_time(line)
            if t is not None:
                t = self._event_clock.advance(t)
                if self._t_first is None:
                    self._t_first, self._wall_first = t, self._clock()
            while True:  # until the line is due and we are not paused
                if not self._hold_while_paused():
                    return False
                if t is None:
                    break
                delay = self._wall_first + self._paused_s + (t - self._t_first) / self.speed - self._clock()
                if delay <= 0:
                    break
                if self.wait(min(delay, 0.05)):  # short naps: a pause takes effect at once
                    return False
            self.emit(line)
        return True

    def _hold_while_paused(self) -> bool:
        """Block while paused; False when the source is stopping."""
        if self._resume.is_set():
            return not self.stopping
        began = self._paused_at  # the pause itself, not when this thread noticed it
        while not self._resume.wait(0.05):
            if self.stopping:
                return False
        self._paused_s += self._clock() - began
        return not self.stopping
