"""The one owner of the engine: a thread that steps it continuously. Requests wait in a
bounded queue, join the running batch as soon as a slot is free (between rounds), and
hear about their new tokens after every step through their ticket; a cancelled request
(its client went away, or a stop string matched) leaves the batch before the next step,
freeing its slot. Draining (SIGTERM) refuses new requests and, at its deadline, cancels
the ones still going."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from python_engine.events import EventWriter
from python_engine.serve.backend import Backend, Progress, SamplingParams

SHUTDOWN_MESSAGE = "the server is shutting down"


class QueueFull(Exception):
    """Every slot is busy and the waiting queue is full."""


class Draining(Exception):
    """The server is shutting down and takes no new requests."""


@dataclass
class Ticket:
    """A request's handle on the async side: its tokens arrive in `updates`."""
    rid: int
    prompt: list[int]
    params: SamplingParams
    aloop: asyncio.AbstractEventLoop
    updates: asyncio.Queue = field(default_factory=asyncio.Queue)
    submitted_at: float = field(default_factory=time.perf_counter)

    def deliver(self, progress: Progress) -> None:
        """From the engine thread."""
        try:
            self.aloop.call_soon_threadsafe(self.updates.put_nowait, progress)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass


class EngineLoop:
    def __init__(self, backend: Backend, events: EventWriter, max_queue: int):
        self.backend, self.events = backend, events
        self.max_queue = max_queue
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._waiting: deque[Ticket] = deque()
        self._running: dict[int, Ticket] = {}
        self._cancels: set[int] = set()
        self._stop = False
        self._drain_deadline: float | None = None
        self.failure: str | None = None  # the engine broke: every request since then fails
        self._thread = threading.Thread(target=self._run, name="kdtree-engine-loop", daemon=True)

    # ---- from the server's side --------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, prompt: list[int], params: SamplingParams, aloop: asyncio.AbstractEventLoop) -> Ticket:
        with self._cond:
            if self.failure:
                raise Draining(self.failure)
            if self._drain_deadline is not None or self._stop:
                raise Draining(SHUTDOWN_MESSAGE)
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"all {self.backend.max_slots} slots are busy and {len(self._waiting)} requests wait")
            ticket = Ticket(next(self._ids), list(prompt), params, aloop)
            self._waiting.append(ticket)
            self._cond.notify()
            return ticket

    def cancel(self, ticket: Ticket) -> None:
        with self._cond:
            self._cancels.add(ticket.rid)
            self._cond.notify()

    def begin_drain(self, drain_s: float) -> None:
        with self._cond:
            if self._drain_deadline is None:
                self._drain_deadline = time.monotonic() + drain_s
            self._cond.notify()

    @property
    def draining(self) -> bool:
        return self._drain_deadline is not None

    @property
    def closing(self) -> bool:
        """Draining or stopped: the long-lived streams (events) should end."""
        return self._drain_deadline is not None or self._stop

    def counts(self) -> dict[str, int]:
        with self._cond:
            return {"running": len(self._running), "waiting": len(self._waiting),
                    "slots": self.backend.max_slots, "max_queue": self.max_queue}

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()
        self.backend.close()

    # ---- the engine thread -------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # a bug here must not leave clients waiting on a dead thread
            self.failure = f"the engine loop failed: {type(exc).__name__}: {exc}"
            self.events.emit("error", message=self.failure[:2000])
            with self._cond:
                self._end_all(self.failure)
                self._stop = True

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not (self._stop or self._waiting or self._running or self._cancels):
                    self._cond.wait()
                if self._stop:
                    self._end_all(SHUTDOWN_MESSAGE)
                    return
                cancels, self._cancels = self._cancels, set()
                if self._waiting and cancels:
                    self._waiting = deque(t for t in self._waiting if t.rid not in cancels)
                if self._drain_expired():
                    self._end_all(SHUTDOWN_MESSAGE)
                    continue
                admit = []
                while self._waiting and len(self._running) + len(admit) < self.backend.max_slots:
                    admit.append(self._waiting.popleft())
                for t in admit:
                    self._running[t.rid] = t
            for rid in cancels & set(self._running):
                self._finish(rid, Progress(rid, done=True, error="cancelled"), cancel=True)
            for t in admit:
                self._start(t)
            if self._running:
                self._step()

    def _start(self, t: Ticket) -> None:
        if self.failure:
            self._finish(t.rid, Progress(t.rid, done=True, error=self.failure))
            return
        try:
            self.backend.start(t.rid, t.prompt, t.params)
        except Exception as exc:
            self._finish(t.rid, Progress(t.rid, done=True, error=f"{type(exc).__name__}: {exc}"))

    def _step(self) -> None:
        try:
            progress = self.backend.step()
        except Exception as exc:  # the engine itself failed: fail what runs, refuse what comes
            self.failure = f"the engine failed: {type(exc).__name__}: {exc}"
            self.events.emit("error", message=self.failure[:2000])
            for rid in list(self._running):
                self._finish(rid, Progress(rid, done=True, error=self.failure), cancel=True)
            return
        for p in progress:
            ticket = self._running.get(p.rid)
            if ticket is None:
                continue
            if p.done:
                self._finish(p.rid, p)
            else:
                ticket.deliver(p)

    def _finish(self, rid: int, progress: Progress, cancel: bool = False) -> None:
        with self._cond:
            ticket = self._running.pop(rid, None)
        if ticket is None:
            return
        if cancel:
            try:
                self.backend.cancel(rid)
            except Exception:  # a broken engine cannot cancel: the slot goes with it
                pass
        ticket.deliver(progress)

    def _end_all(self, reason: str) -> None:
        """(holding the lock) End every waiting and running request."""
        for t in self._waiting:
            t.deliver(Progress(t.rid, done=True, error=reason))
        self._waiting.clear()
        for rid, t in list(self._running.items()):
            try:
                self.backend.cancel(rid)
            except Exception:
                pass
            t.deliver(Progress(rid, done=True, error=reason))
        self._running.clear()

    def _drain_expired(self) -> bool:
        return self._drain_deadline is not None and time.monotonic() >= self._drain_deadline
