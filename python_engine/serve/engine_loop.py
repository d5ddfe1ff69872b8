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

from python_engine.decode.result import finish_reason
from python_engine.events import EventWriter
from python_engine.serve.backend import Backend, Progress, SamplingParams

SHUTDOWN_MESSAGE = "the server is shutting down"
CANCELLED = "cancelled"  # the error a cancelled request ends with


def _ended_by(error: str) -> str:
    """A failed request's `request_end` reason: "abort" when it was cancelled or the server
    shut down, else "error"."""
    return "abort" if error == CANCELLED or error.startswith(SHUTDOWN_MESSAGE) else "error"


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
    produced: int = 0                     # tokens delivered so far
    last_token: int | None = None
    first_token_at: float | None = None

    def deliver(self, progress: Progress) -> None:
        """From the engine thread."""
        self.count(progress)
        self.hand_over(progress)

    def count(self, progress: Progress) -> None:
        if progress.new_tokens:
            if self.first_token_at is None:
                self.first_token_at = time.perf_counter()
            self.produced += len(progress.new_tokens)
            self.last_token = progress.new_tokens[-1]

    def hand_over(self, progress: Progress) -> None:
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
        self._cancels: dict[int, str] = {}  # rid -> its request_end reason
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

    def cancel(self, ticket: Ticket, reason: str = "abort") -> None:
        """End a request early: "abort" (its client went away) or "stop" (a stop string matched)."""
        with self._cond:
            self._cancels[ticket.rid] = reason
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
                cancels, self._cancels = self._cancels, {}
                if self._waiting and cancels:
                    for t in self._waiting:
                        if t.rid in cancels:
                            self._request_end(t, cancels[t.rid])
                    self._waiting = deque(t for t in self._waiting if t.rid not in cancels)
                if self._drain_expired():
                    self._end_all(SHUTDOWN_MESSAGE)
                    continue
                admit = []
                while self._waiting and len(self._running) + len(admit) < self.backend.max_slots:
                    admit.append(self._waiting.popleft())
                for t in admit:
                    self._running[t.rid] = t
            for rid in cancels.keys() & self._running.keys():
                self._finish(rid, Progress(rid, done=True, error=CANCELLED), cancel=True, reason=cancels[rid])
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

    def _finish(self, rid: int, progress: Progress, cancel: bool = False, reason: str | None = None) -> None:
        # (the engine thread is the only one that changes _running)
        ticket = self._running.get(rid)
        if ticket is None:
            return
        if cancel:
            try:
                self.backend.cancel(rid)
            except Exception:  # a broken engine cannot cancel: the slot goes with it
                pass
        # its request_end before it stops counting as running and before its last tokens: a
        # reader that sees the server idle, or a client that has its answer, finds it counted
        ticket.count(progress)
        if reason is None and progress.error is None:
            reason = finish_reason([] if ticket.last_token is None else [ticket.last_token], ticket.params.stop_ids)
        self._request_end(ticket, reason or _ended_by(progress.error))
        with self._cond:
            del self._running[rid]
        ticket.hand_over(progress)

    def _request_end(self, ticket: Ticket, reason: str) -> None:
        """The request's `request_end` event: every request gets one, however it ended."""
        now = time.perf_counter()
        ttft = {} if ticket.first_token_at is None else {"ttft_s": round(ticket.first_token_at - ticket.submitted_at, 6)}
        self.events.emit("request_end", request=ticket.rid, tokens=ticket.produced, reason=reason,
                         e2e_s=round(now - ticket.submitted_at, 6), **ttft)

    def _end_all(self, reason: str) -> None:
        """(holding the lock) End every waiting and running request."""
        ended = _ended_by(reason)
        for t in self._waiting:
            self._request_end(t, ended)
            t.deliver(Progress(t.rid, done=True, error=reason))
        self._waiting.clear()
        for rid, t in list(self._running.items()):
            try:
                self.backend.cancel(rid)
            except Exception:
                pass
            self._request_end(t, ended)
            t.deliver(Progress(rid, done=True, error=reason))
        self._running.clear()

    def _drain_expired(self) -> bool:
        return self._drain_deadline is not None and time.monotonic() >= self._drain_deadline
