"""Random mutations of a recorded run, for the monitor's fuzz test: bytes flipped, fields
replaced by values of other types, huge and non-finite numbers, fields dropped, lines cut.
Deterministic for a seed."""

from __future__ import annotations

import json
import random

NAN, INF = float("nan"), float("inf")


def hostile_values(rng: random.Random) -> list:
    """Values of every JSON type, and numbers a field should never hold."""
    return [
        None, True, False, "", "40", "x" * rng.randrange(1, 20_000), "\x1b[2J\ud800", [], [1], [[[]]],
        {}, {"a": 1}, {"id": {"x": 1}}, 0, -1, 1.5, -0.0, 10**9, 2**53 + 1, 10**300, -(10**300),
        1e308, -1e308, 1e-320, NAN, INF, -INF, rng.randrange(-(10**6), 10**6),
        json.loads("[" * 60 + "]" * 60),
    ]


def _paths(obj, prefix=()) -> list[tuple]:
    """Every key path into the object (nested objects and lists included)."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        if isinstance(v, (dict, list)) and len(v) < 64:
            out += _paths(v, prefix + (k,))
    return out


def _set(obj, path, value) -> None:
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def _drop(obj, path) -> None:
    for k in path[:-1]:
        obj = obj[k]
    del obj[path[-1]]


def _dumps(obj) -> str:
    try:
        return json.dumps(obj)
    except ValueError:  # an integer beyond str()'s digit limit cannot occur here; be safe
        return "{}"


def mutate(line: str, rng: random.Random) -> str:
    """One mutation of one line."""
    how = rng.choice(("flip", "flip", "replace", "replace", "number", "drop", "cut", "splice"))
    if how in ("flip", "cut", "splice"):
        raw = bytearray(line.encode("utf-8"))
        if how == "flip":
            for _ in range(rng.randrange(1, 4)):
                raw[rng.randrange(len(raw))] ^= rng.randrange(1, 256)
        elif how == "cut":
            raw = raw[: rng.randrange(len(raw))]
        else:  # a stretch of the line repeated or moved inside it
            a, b = sorted(rng.sample(range(len(raw) + 1), 2))
            at = rng.randrange(len(raw) + 1)
            raw[at:at] = raw[a:b]
        return raw.decode("utf-8", errors="replace")
    try:
        obj = json.loads(line)
    except ValueError:
        return line + "}"
    paths = _paths(obj)
    if not paths:
        return _dumps(rng.choice(hostile_values(rng)))
    path = rng.choice(paths)
    if how == "drop":
        _drop(obj, path)
    elif how == "number":
        _set(obj, path, rng.choice([NAN, INF, -INF, 1e308, 10**300, 10**9, 2**53 + 1, -1, 1e-320]))
    else:
        _set(obj, path, rng.choice(hostile_values(rng)))
    return _dumps(obj)


def mutated_stream(lines: list[str], count: int, rng: random.Random) -> tuple[list[str], set[int]]:
    """The run with `count` of its lines mutated (a mutated line may split into several at a
    flipped-in newline); returns the stream's lines and the indices of untouched ones."""
    chosen = set(rng.sample(range(len(lines)), count))
    out, untouched = [], set()
    for i, line in enumerate(lines):
        if i in chosen:
            out += mutate(line, rng).split("\n")
        else:
            untouched.add(len(out))
            out.append(line)
    return out, untouched
