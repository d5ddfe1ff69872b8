"""What every data source shares: a producer thread that reads raw lines (a file, a
process, an SSH stream) and a pump thread that batches them (by count and by time) and
posts typed messages to the app. Sources only do I/O; the app parses the lines with the
event contract's parser on its own thread, so the CPU work is scheduled between frames
instead of fighting the display for the interpreter lock.

A subclass implements `describe()` and `produce()`; inside `produce()` it calls `emit(line)`
(or `emit_many(lines)`), `status(state, detail)`, `note(level, text)` and `restart(detail)`
(the stream starts over: a rewritten file), and returns when the stream is over or
`stopping` is set. Order is kept: a status posted after some lines
arrives after them.

Backpressure: at most `in_flight` batches are posted and not yet acknowledged by the app
(`ack()`), and the producer blocks when `queue_lines` lines wait to be parsed, so a replay
at full speed or a flood from a process cannot grow memory without bound.
"""

from __future__ import annotations

import queue
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, Callable

from kdtree_cli.tui.messages import SourceBatch, SourceNote, SourceRestart, SourceState, SourceStatus

_DONE = object()  # the producer returned


class EventSource(ABC):
    kind = "source"  # short label for the status bar: follow, replay, run, host

    def __init__(
        self,
        *,
        batch_lines: int = 500,
        batch_s: float = 0.05,
        in_flight: int = 2,
        queue_items: int = 1000,
    ) -> None:
        self.batch_lines = batch_lines
        self.batch_s = batch_s
        self._credits = threading.Semaphore(in_flight)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_items)
        self._stop = threading.Event()
        self._post: Callable[[Any], object] | None = None
        self._threads: list[threading.Thread] = []
        self._lineno = 0  # lines handed on so far (the next batch starts at _lineno + 1)
        self.state = SourceState.STARTING

    # --------------------------------------------------------------- for the subclasses
    @abstractmethod
    def describe(self) -> str:
        """One short line saying where the events come from."""

    @abstractmethod
    def produce(self) -> None:
        """Read the stream (runs in its own thread)."""

    def close(self) -> None:
        """Release what produce() holds (a process, a connection); called by stop()."""

    def set_paused(self, paused: bool) -> None:
        """Pause the stream itself where that makes sense (a replay); live sources keep
        reading while the display is paused, so nothing is lost."""

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep, waking early when stopped; True when the source is stopping."""
        return self._stop.wait(seconds)

    def emit(self, line: str) -> None:
        self._put(("lines", [line]))

    def emit_many(self, lines: list[str]) -> None:
        """Several lines at once (cheaper per line than emit)."""
        if lines:
            self._put(("lines", lines))

    def status(self, state: SourceState, detail: str = "") -> None:
        self._put(("status", state, detail))

    def note(self, level: str, text: str) -> None:
        self._put(("note", level, text))

    def restart(self, detail: str) -> None:
        """The stream starts over (line numbers too): the app starts fresh figures."""
        self._put(("restart", detail))

    # --------------------------------------------------------------- for the app
    def start(self, post: Callable[[Any], object]) -> None:
        """Start reading; `post` is `App.post_message` (any thread may call it)."""
        self._post = post
        for target, name in ((self._run_producer, "producer"), (self._pump, "pump")):
            th = threading.Thread(target=target, name=f"kdtree-tui-{self.kind}-{name}", daemon=True)
            self._threads.append(th)
            th.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self.close()
        finally:
            for th in self._threads:
                if th is not threading.current_thread():
                    th.join(timeout=2.0)

    def ack(self) -> None:
        """The app has absorbed one batch."""
        self._credits.release()

    # --------------------------------------------------------------- internals
    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _run_producer(self) -> None:
        try:
            self.produce()
        except Exception as exc:  # a source bug or an unexpected I/O error: show it, never crash
            self.status(SourceState.FAILED, f"{type(exc).__name__}: {exc}")
        finally:
            self._put(_DONE)

    def _pump(self) -> None:
        batch: list[str] = []
        first_at = 0.0
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=self.batch_s if batch else 0.2)
            except queue.Empty:
                batch = self._flush(batch)
                continue
            if item is _DONE:
                break
            if item[0] == "lines":
                if not batch:
                    first_at = time.monotonic()
                batch.extend(item[1])
                if len(batch) >= self.batch_lines or time.monotonic() - first_at >= self.batch_s:
                    batch = self._flush(batch)
            else:
                batch = self._flush(batch)
                if item[0] == "status":
                    self.state = item[1]
                    self._send(SourceStatus(self, item[1], item[2]))
                elif item[0] == "restart":
                    self._lineno = 0
                    self._send(SourceRestart(self, item[1]))
                else:
                    self._send(SourceNote(self, item[1], item[2]))
        self._flush(batch)

    def _flush(self, batch: list[str]) -> list[str]:
        """Post the batch (waiting for a credit); returns a fresh empty batch."""
        while batch:
            while not self._credits.acquire(timeout=0.1):
                if self._stop.is_set():
                    return []
            chunk, batch = batch[: self.batch_lines], batch[self.batch_lines:]
            self._send(SourceBatch(self, chunk, self._lineno + 1))
            self._lineno += len(chunk)
        return []

    def _send(self, message: Any) -> None:
        if self._post is not None and not self._stop.is_set():
            self._post(message)
