"""The metrics events (docs/events.md) of the serving engine, handed to every client of
`GET /v1/kdtree/events` as they happen. The engine thread publishes; each subscriber has a
bounded queue on the server's event loop, and a subscriber too slow to keep up loses
events (counted) rather than holding the engine back. A new subscriber first gets the
run_start event, so a monitor that joins late knows what it watches."""

from __future__ import annotations

import asyncio
import threading

SUBSCRIBER_QUEUE = 4096  # events a subscriber may fall behind by before it loses some


class EventHub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: set[asyncio.Queue] = set()
        self._aloop: asyncio.AbstractEventLoop | None = None
        self.run_start: dict | None = None
        self.dropped = 0

    def bind(self, aloop: asyncio.AbstractEventLoop) -> None:
        self._aloop = aloop

    def publish(self, event: dict) -> None:
        """An EventWriter listener; any thread."""
        if event.get("event") == "run_start":
            self.run_start = event
        with self._lock:
            subscribers = list(self._subscribers)
        if self._aloop is None or not subscribers:
            return
        try:
            self._aloop.call_soon_threadsafe(self._fan_out, subscribers, event)
        except RuntimeError:  # the event loop has closed
            pass

    def _fan_out(self, subscribers: list[asyncio.Queue], event: dict) -> None:
        for q in subscribers:
            try:
                q.put_nowait(event)
            except asyncio.QueueFull:
                self.dropped += 1

    def subscribe(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(maxsize=SUBSCRIBER_QUEUE)
        if self.run_start is not None:
            q.put_nowait(self.run_start)
        with self._lock:
            self._subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        with self._lock:
            self._subscribers.discard(q)
