"""Typed messages from the data sources to the app. Sources run in threads and post these
with `App.post_message` (thread-safe); the app feeds the stats model and redraws on its own
timer, so a fast source never drives the redraw rate."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from kdtree_cli.tui.sources.base import EventSource


class SourceState(str, Enum):
    STARTING = "starting"  # opening the file, starting the process, connecting
    STREAMING = "streaming"  # lines are coming
    WAITING = "waiting"  # open but quiet (a followed file with nothing new), or paused
    RECONNECTING = "reconnecting"  # the stream dropped; trying again after a backoff
    ENDED = "ended"  # the source finished normally (end of replay, process exit 0)
    DROPPED = "dropped"  # the stream broke and will not come back by itself
    FAILED = "failed"  # could not start at all


class SourceBatch(Message):
    """Raw lines, in stream order; the first is line `first_lineno` of the stream (1-based,
    blank lines included). The app acknowledges each batch (`source.ack()`), so a source
    never runs more than a few batches ahead of what the app has absorbed."""

    def __init__(self, source: EventSource, lines: list[str], first_lineno: int) -> None:
        super().__init__()
        self.source = source
        self.lines = lines
        self.first_lineno = first_lineno


class SourceStatus(Message):
    """The source's connection state changed; detail says why, for a person."""

    def __init__(self, source: EventSource, state: SourceState, detail: str = "") -> None:
        super().__init__()
        self.source = source
        self.state = state
        self.detail = detail


class SourceNote(Message):
    """A line for the log that is not an event (a run's stderr, a reconnect attempt)."""

    def __init__(self, source: EventSource, level: str, text: str) -> None:
        super().__init__()
        self.source = source
        self.level = level
        self.text = text


class SourceRestart(Message):
    """The stream starts over from its beginning (a followed file was rewritten or
    replaced): what follows is a new stream, with fresh figures and line numbers."""

    def __init__(self, source: EventSource, detail: str) -> None:
        super().__init__()
        self.source = source
        self.detail = detail
