"""Metrics events: the contract between the engines (torch, native) and their readers (TUI).

JSON Lines, one object per line, each with "event" and "t" (seconds, monotonic within a
run). The kinds and their required fields are below; writers may add fields, readers must
ignore fields they do not know and skip malformed lines with a warning, never crash.

This module imports nothing heavy: the TUI reads events through it without loading an
engine.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import IO, Any, Iterable, Iterator

# Required fields per event kind (docs/events.md).
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "run_start": (
        "engine",  # "native" | "torch"
        "model",
        "drafter",
        "device",
        "host",
        "dtype",
        "block_size",
        "budget",  # node budget N
        "temperature",
    ),
    "round": (
        "request",  # request id
        "round",  # round index within the request
        "accept_len",  # accepted path length including the root (>= 1)
        "tree_size",  # n, nodes besides the root
        "tree_depth",  # deepest node in the tree
        "times_us",  # {"draft", "tree_build", "verify", "commit"} in microseconds
        "tokens",  # tokens generated so far for this request
    ),
    "run_end": ("tokens", "decode_s", "tokens_per_s", "tau", "rounds"),
    "error": ("message",),
}
STAGES = ("draft", "tree_build", "verify", "commit")


class EventError(ValueError):
    """A line that is not a valid metrics event (the reader skips it and counts it)."""


def validate(obj: Any) -> dict:
    """Return obj if it is a well-formed event, else raise EventError saying why."""
    if not isinstance(obj, dict):
        raise EventError(f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("event")
    if not isinstance(kind, str):
        raise EventError('missing "event" string')
    t = obj.get("t")
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        raise EventError(f'{kind}: missing numeric "t"')
    missing = [f for f in REQUIRED_FIELDS.get(kind, ()) if f not in obj]
    if missing:
        raise EventError(f"{kind}: missing {', '.join(missing)}")
    if kind == "round":
        times = obj["times_us"]
        if not isinstance(times, dict) or any(
            not isinstance(times.get(s), (int, float)) for s in STAGES
        ):
            raise EventError(f"round: times_us must hold numbers for {', '.join(STAGES)}")
        if not isinstance(obj["accept_len"], int) or obj["accept_len"] < 1:
            raise EventError("round: accept_len must be an integer >= 1")
    return obj


def parse_line(line: str) -> dict:
    """Parse one JSON line into a validated event (EventError when malformed)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EventError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    return validate(obj)


@dataclass
class ParsedLine:
    """One line of an event stream: the event, or the reason it was skipped."""

    lineno: int
    event: dict | None
    warning: str | None


def iter_events(lines: Iterable[str]) -> Iterator[ParsedLine]:
    """Parse a stream of lines; blank lines are ignored, bad ones yield a warning."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield ParsedLine(lineno, parse_line(line), None)
        except EventError as exc:
            yield ParsedLine(lineno, None, f"line {lineno}: {exc}")


class EventWriter:
    """Writes events to a text stream, one flushed line each, with t from a monotonic clock
    started at construction (so t is seconds since the run began)."""

    def __init__(self, stream: IO[str] | None, clock=time.perf_counter, listeners=()):
        self._stream = stream
        self._clock = clock
        self._t0 = clock()
        self.listeners = list(listeners)  # callables given every event (e.g. the Prometheus exporter)

    def emit(self, kind: str, **fields: Any) -> dict:
        event = {"event": kind, "t": round(self._clock() - self._t0, 6), **fields}
        validate(event)  # a writer bug should fail loudly here, not in a reader
        if self._stream is not None:
            self._stream.write(json.dumps(event, separators=(",", ":")) + "\n")
            self._stream.flush()
        for listener in self.listeners:
            listener(event)
        return event
