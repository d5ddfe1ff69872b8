"""Metrics events: the contract between the engines (torch, native) and their readers (TUI).

JSON Lines, one object per line, each with "event" and "t" (seconds, monotonic within a
run). docs/events.md says the same in words; this module is the contract's one
implementation: the writer (`EventWriter`, `open_metrics`) and the one parser every reader
uses (`parse`, `iter_events`).

The parser checks every field a reader uses, by type and by range, and hands on a clean
event holding only those fields: numbers finite and within their limits, texts cut to a
bounded length with control characters replaced, ids hashable. A line that fails is
malformed (EventError says why); an optional field that fails is dropped with a note and
the event still counts. So a reader never meets a value it has to check again, and no
value costs memory or time out of proportion to what a person can be shown.

This module imports nothing heavy: the TUI reads events through it without loading an
engine.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterable, Iterator

from python_engine.errors import KdtreeError

STAGES = ("draft", "tree_build", "verify", "commit")

# ---------------------------------------------------------------------------------- limits
# Values outside these are not measurements; docs/events.md lists them for writers.
LINE_MAX_CHARS = 8 << 20  # a longer line is malformed, and sources never hold more of it
COUNT_MAX = 2**53  # integers: beyond this a float (and JSON in most languages) loses them
T_MAX_S = 1e9  # `t`: about 31 years after the run began
STAGE_US_MAX = 3.6e9  # one stage of one round: an hour
FINITE_MAX = 1e300  # other numbers: finite, and far enough from overflow to be summed
NAME_MAX_CHARS = 200  # run facts, ids: longer ones are cut (a panel shows far less)
MESSAGE_MAX_CHARS = 2000  # error and warning messages
GPUS_MAX = 64  # entries in one `gpus` list
MAX_EVENT_GAP_S = 60.0  # EventClock: the most event time one step may add

CUT_MARK = "…"


class EventError(ValueError):
    """A line that is not a valid metrics event (the reader skips it and counts it)."""


class OverlongLine(str):
    """What a source hands on for a line longer than LINE_MAX_CHARS: its start only (for the
    log), and its length, so the parser reports it without anyone holding the whole line."""

    length: int

    def __new__(cls, head: str, length: int) -> "OverlongLine":
        obj = super().__new__(cls, head[:80])
        obj.length = length
        return obj


class _Bad(Exception):
    """A field's value is not acceptable: `reason` says what it must be, `path` where it is
    (keys and list indices, outermost first)."""

    def __init__(self, reason: str, path: tuple = ()):
        super().__init__(reason)
        self.reason, self.path = reason, path

    def __str__(self) -> str:
        where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in self.path).lstrip(".")
        return f'"{where}" {self.reason}' if where else self.reason


def _show(v: Any) -> str:
    """A value for an error message, short whatever its size."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of about {int(v.bit_length() * 0.30103) + 1} digits"
    if isinstance(v, (list, dict)):
        return f"a JSON {'array' if isinstance(v, list) else 'object'} of {len(v)} items"
    text = json.dumps(v) if isinstance(v, (str, float, int, bool, type(None))) else type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."


# Control characters (C0 but tab/newline/CR, DEL, C1) and lone surrogates: a terminal would
# act on them (an escape sequence can repaint the screen) or fail to encode them.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_LINE_BREAKS = re.compile("[\t\n\r]")


def clean_text(s: str, limit: int, *, one_line: bool = True) -> str:
    """s cut to `limit` characters (marked), unprintable characters replaced by U+FFFD and,
    for one_line, tabs and line breaks by spaces."""
    if len(s) > limit:
        s = s[: limit - 1] + CUT_MARK
    s = _UNPRINTABLE.sub("\ufffd", s)
    return _LINE_BREAKS.sub(" ", s) if one_line else s


# ---------------------------------------------------------------------------------- fields
# A check takes the JSON value and returns the clean one, or raises _Bad.
Check = Callable[[Any], Any]


def integer(lo: int, hi: int = COUNT_MAX) -> Check:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Bad(f"must be an integer, got {_show(v)}")
        if not lo <= v <= hi:
            raise _Bad(f"must be an integer in {lo}..{hi}, got {_show(v)}")
        return v

    return check


def number(lo: float, hi: float) -> Check:
    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _Bad(f"must be a number, got {_show(v)}")
        if not lo <= v <= hi:  # also false for NaN
            raise _Bad(f"must be a finite number in {lo:g}..{hi:g}, got {_show(v)}")
        return float(v)

    return check


def text(limit: int, one_line: bool = True) -> Check:
    def check(v: Any) -> str:
        if not isinstance(v, str):
            raise _Bad(f"must be a string, got {_show(v)}")
        return clean_text(v, limit, one_line=one_line)

    return check


_NOT_IN_IDS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def ident(v: Any) -> int | str:
    """A request or GPU id: an integer, or a short printable string, kept exactly (it keys
    a table: cutting or cleaning it could make two ids one)."""
    if isinstance(v, str):
        if len(v) > NAME_MAX_CHARS or _NOT_IN_IDS.search(v):
            raise _Bad(f"must be at most {NAME_MAX_CHARS} printable characters, got {_show(v)}")
        return v
    if isinstance(v, bool) or not isinstance(v, int) or not -COUNT_MAX <= v <= COUNT_MAX:
        raise _Bad(f"must be an integer or a string, got {_show(v)}")
    return v


def _field(obj: dict | list, key: str | int, check: Check) -> Any:
    try:
        return check(obj[key])
    except _Bad as exc:
        raise _Bad(exc.reason, (key, *exc.path)) from None


stage_time = number(0.0, STAGE_US_MAX)


def times_us(v: Any) -> dict[str, float]:
    if not isinstance(v, dict):
        raise _Bad(f"must be an object of the stages' microseconds, got {_show(v)}")
    missing = [s for s in STAGES if s not in v]
    if missing:
        raise _Bad(f"lacks {', '.join(missing)}")
    out = {s: _field(v, s, stage_time) for s in STAGES}
    if "collective" in v:  # a split model's collectives (inside draft and verify), optional;
        # null: one rank's share alone, whose collectives are counted but not run
        out["collective"] = None if v["collective"] is None else _field(v, "collective", stage_time)
    return out


node_token = integer(0)
node_text = text(NAME_MAX_CHARS, one_line=False)  # the tree view shows breaks as ↵ ⇥


def tree(v: Any) -> dict:
    """The optional `tree` field: parent[0] = -1 and 0 <= parent[i] < i, a token per node,
    `accepted` a path from the root; `text`, when given, a string per node."""
    if not isinstance(v, dict):
        raise _Bad(f"must be an object, got {_show(v)}")
    parent, tokens, accepted = v.get("parent"), v.get("tokens"), v.get("accepted")
    if not (isinstance(parent, list) and isinstance(tokens, list) and isinstance(accepted, list)):
        raise _Bad("needs the lists parent, tokens and accepted")
    n = len(parent)
    if n == 0 or len(tokens) != n:
        raise _Bad(f"parent and tokens must have the same length >= 1 (got {n} and {len(tokens)})")
    if parent[0] != -1 or type(parent[0]) is not int:
        raise _Bad("parent[0] must be -1 (the root)")
    for i in range(1, n):
        p = parent[i]
        if type(p) is not int or not 0 <= p < i:
            raise _Bad(f"parent[{i}] must be an integer in 0..{i - 1}, got {_show(p)}")
    for i, tok in enumerate(tokens):
        if type(tok) is not int or not 0 <= tok <= COUNT_MAX:
            raise _Bad(f"tokens[{i}] must be a token id, got {_show(tok)}")
    if not accepted or accepted[0] != 0 or type(accepted[0]) is not int or len(accepted) > n:
        raise _Bad("accepted must be a path of node indices from the root (0)")
    for a, b in zip(accepted, accepted[1:]):
        if type(b) is not int or not 0 < b < n or parent[b] != a:
            raise _Bad(f"accepted must be a path of node indices from the root; {_show(b)} does not "
                       f"follow {a}")
    out = {"parent": parent, "tokens": tokens, "accepted": accepted, "text": None}
    words = v.get("text")
    if isinstance(words, list) and len(words) == n and all(isinstance(w, str) for w in words):
        out["text"] = [node_text(w) for w in words]
    return out


gpu_percent = number(0.0, 100.0)
gpu_amount = number(0.0, 1e6)  # GB or W
GPU_FIGURES = {"util": gpu_percent, "mem_gb": gpu_amount, "mem_total_gb": gpu_amount, "power_w": gpu_amount}


def gpus(v: Any) -> list[dict]:
    """The optional `gpus` field: [{"id", "util", "mem_gb", "mem_total_gb", "power_w"}]."""
    if not isinstance(v, list) or len(v) > GPUS_MAX:
        raise _Bad(f"must be a list of at most {GPUS_MAX} objects, got {_show(v)}")
    return [_field(v, i, gpu) for i in range(len(v))]


def gpu(g: Any) -> dict:
    if not isinstance(g, dict) or "id" not in g:
        raise _Bad(f"must be an object with an id, got {_show(g)}")
    clean = {"id": _field(g, "id", ident)}
    for key, check in GPU_FIGURES.items():
        clean[key] = None if g.get(key) is None else _field(g, key, check)
    return clean


name = text(NAME_MAX_CHARS)
message = text(MESSAGE_MAX_CHARS, one_line=False)
count = integer(0)
seconds = number(0.0, T_MAX_S)
finite = number(0.0, FINITE_MAX)

# What each kind must carry (docs/events.md) and may carry, with the
# check of each field. Other kinds are valid with `event` and `t` alone (newer writers may
# add kinds); fields not listed are dropped.
REQUIRED: dict[str, dict[str, Check]] = {
    "run_start": {
        "engine": name,  # "native" | "torch"
        "model": name,
        "drafter": name,
        "device": name,
        "host": name,
        "dtype": name,
        "block_size": count,
        "budget": count,  # node budget N
        "temperature": finite,
    },
    "round": {
        "request": ident,  # request id
        "round": count,  # round index within the request
        "accept_len": integer(1),  # accepted path length including the root
        "tree_size": count,  # n, nodes besides the root
        "tree_depth": count,  # deepest node in the tree
        "times_us": times_us,  # {"draft", "tree_build", "verify", "commit"} in microseconds
        "tokens": count,  # tokens generated so far for this request
    },
    "run_end": {"tokens": count, "decode_s": seconds, "tokens_per_s": finite, "tau": finite,
                "rounds": count},
    "request_end": {
        "request": ident,  # request id, as in its rounds
        "tokens": count,  # tokens generated for it
        "reason": name,  # "stop" | "length" | "cancelled" | "error"
    },
    "error": {"message": message},
    "warning": {"message": message},
}
OPTIONAL: dict[str, dict[str, Check]] = {
    "run_start": {"requests": count, "mode": name, "world_size": integer(1), "budget_mode": name, "rank": count,
                  "collectives": name, "weights": name},
    "round": {"tree": tree, "budget": count},
    "run_end": {"ttft_s": seconds},
    "request_end": {"rounds": count, "ttft_s": seconds, "e2e_s": seconds},
}
ON_ANY_EVENT: dict[str, Check] = {"gpus": gpus}
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in REQUIRED.items()}


# ---------------------------------------------------------------------------------- parsing
def check_event(obj: Any) -> tuple[dict, list[str]]:
    """The clean event and notes on the optional fields that were dropped; EventError when
    a required part is missing or wrong."""
    if not isinstance(obj, dict):
        raise EventError(f"expected a JSON object, got {_show(obj)}")
    kind = obj.get("event")
    if not isinstance(kind, str):
        raise EventError('missing "event" string')
    kind = clean_text(kind, NAME_MAX_CHARS)
    if "t" not in obj:
        raise EventError(f'{kind}: missing "t"')
    try:
        event = {"event": kind, "t": _field(obj, "t", seconds)}
        required = REQUIRED.get(kind, {})
        missing = [f for f in required if f not in obj]
        if missing:
            raise EventError(f"{kind}: missing {', '.join(missing)}")
        for key, check in required.items():
            event[key] = _field(obj, key, check)
    except _Bad as exc:
        raise EventError(f"{kind}: {exc}") from None
    notes = []
    for key, check in (*OPTIONAL.get(kind, {}).items(), *ON_ANY_EVENT.items()):
        if key in obj and obj[key] is not None:
            try:
                event[key] = _field(obj, key, check)
            except _Bad as exc:
                notes.append(f"{kind}: optional field ignored: {exc}")
    return event, notes


def parse(line: str) -> tuple[dict, list[str]]:
    """Parse one line into a clean event and notes on dropped optional fields; EventError
    when the line is malformed."""
    if isinstance(line, OverlongLine) or len(line) > LINE_MAX_CHARS:
        length = line.length if isinstance(line, OverlongLine) else len(line)
        raise EventError(f"line of {length:,} bytes, over the {LINE_MAX_CHARS:,}-byte limit")
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EventError(f"not JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:
        raise EventError("not readable: JSON nested deeper than the parser allows") from None
    except ValueError as exc:  # e.g. an integer literal of more than 4300 digits
        raise EventError(f"not readable: {str(exc)[:80]}") from None
    return check_event(obj)


def parse_line(line: str) -> dict:
    """parse() without the notes."""
    return parse(line)[0]


def validate(obj: Any) -> dict:
    """The clean event for obj (a dict in the contract's shape), else EventError."""
    return check_event(obj)[0]


def event_time(line: str) -> float | None:
    """The line's `t`, or None when the line is malformed."""
    try:
        return parse(line)[0]["t"]
    except EventError:
        return None


@dataclass(slots=True)
class ParsedLine:
    """One line of an event stream: the event, or the reason it was skipped."""

    lineno: int
    event: dict | None
    warning: str | None  # why the line was skipped (event is None)
    notes: tuple[str, ...] = ()  # optional fields that were dropped (the event counts)


def is_blank(line: str) -> bool:
    return not line or line.isspace()


def iter_events(lines: Iterable[str], first_lineno: int = 1) -> Iterator[ParsedLine]:
    """Parse a stream of lines; blank lines are skipped, bad ones yield a warning. Line
    numbers count every line, blank ones too, from first_lineno."""
    for lineno, line in enumerate(lines, first_lineno):
        if is_blank(line):
            continue
        try:
            event, notes = parse(line)
        except EventError as exc:
            yield ParsedLine(lineno, None, f"line {lineno}: {exc}")
        else:
            yield ParsedLine(lineno, event, None, tuple(f"line {lineno}: {n}" for n in notes))


class EventClock:
    """Event time made safe to bucket and pace by: it starts at the first `t` and each
    event moves it on by its `t` minus the previous event's, counted as 0 when negative and
    at most MAX_EVENT_GAP_S. So one corrupt `t` (far ahead, or behind) costs at most a
    minute of plot or replay wait, and the next good events carry on from there."""

    __slots__ = ("now", "_last")

    def __init__(self) -> None:
        self.now: float | None = None
        self._last = 0.0

    def advance(self, t: float) -> float:
        if self.now is None:
            self.now = t
        else:
            self.now += min(max(t - self._last, 0.0), MAX_EVENT_GAP_S)
        self._last = t
        return self.now


# ---------------------------------------------------------------------------------- writing
@contextlib.contextmanager
def open_metrics(target: str | None, stdout: IO[str]) -> Iterator[IO[str] | None]:
    """The stream `--metrics TARGET` names: None for no metrics, stdout for "-", else the
    file, opened for writing (KdtreeError naming it when it cannot be)."""
    if target is None:
        yield None
    elif target == "-":
        yield stdout
    else:
        try:
            f = open(target, "w", encoding="utf-8")
        except OSError as exc:
            raise KdtreeError(f"--metrics {target}: cannot open for writing: {exc.strerror or exc}") from None
        with f:
            yield f


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
        # a required field a writer gets wrong fails loudly here, not in a reader; an optional
        # one (a tree, GPU figures) is written as it is, and readers drop it with a warning,
        # so a sampling side-channel never stops a run
        check_event(event)
        if self._stream is not None:
            self._stream.write(json.dumps(event, separators=(",", ":")) + "\n")
            self._stream.flush()
        for listener in self.listeners:
            listener(event)
        return event
