"""How rank 0 of a several-GPU run reaches the user: its metrics events and its stderr (the
load progress, the memory line) go to the launching process as messages, and the launcher
writes them where a one-GPU run writes them (the metrics stream and its listeners, such as
the Prometheus exporter; stderr)."""

from __future__ import annotations

import io
from typing import IO, Any

from python_engine.events import EventWriter
from python_engine.native.multi_gpu import Rank


class PostedStream(io.TextIOBase):
    """A text stream whose writes reach the launcher's stream `name`; `tty` says whether that
    stream is a terminal, so a progress bar draws as it would there."""

    def __init__(self, rank: Rank, name: str, tty: bool):
        super().__init__()
        self._rank, self._name, self._tty = rank, name, tty

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text:
            self._rank.post((self._name, text))
        return len(text)

    def isatty(self) -> bool:
        return self._tty


def posted_events(rank: Rank) -> EventWriter:
    """An EventWriter whose events (checked here, as every writer's are) go to the launcher."""
    return EventWriter(None, listeners=[lambda event: rank.post(("event", event))])


class Relay:
    """The launcher's side: on_message for launch_ranks."""

    def __init__(self, events: EventWriter, streams: dict[str, IO[str]]):
        self.events, self.streams = events, streams

    def __call__(self, _rank: int, message: Any) -> None:
        kind, payload = message
        if kind == "event":
            # stamped with the launcher's clock, as a one-GPU run's events are (since the run began)
            fields = {k: v for k, v in payload.items() if k not in ("event", "t")}
            self.events.emit(payload["event"], **fields)
        else:
            stream = self.streams[kind]
            stream.write(payload)
            stream.flush()
