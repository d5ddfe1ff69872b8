"""Bytes to lines for the sources, with bounded memory: a line longer than the event
contract's LINE_MAX_CHARS is never held whole. Its start and its length go on as an
`OverlongLine`, which the parser counts as malformed, and the rest is skipped as it
arrives, so a writer that never ends its line costs O(chunk) memory and linear time."""

from __future__ import annotations

from typing import BinaryIO, Iterator

from python_engine.events import LINE_MAX_CHARS, OverlongLine

READ_CHUNK = 1 << 16


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class LineSplitter:
    """Feed bytes, get complete lines (without their newline) as they end."""

    def __init__(self, max_bytes: int = LINE_MAX_CHARS):
        self.max_bytes = max_bytes
        self._parts: list[bytes] = []  # the current line's bytes so far (at most max_bytes)
        self._held = 0
        self._length = 0  # the current line's full length so far

    @property
    def pending(self) -> bool:
        """A line has begun and not ended yet."""
        return self._length > 0

    def feed(self, chunk: bytes) -> list[str]:
        out = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._hold(chunk[start:])
                return out
            self._hold(chunk[start:end])
            out.append(self._take())
            start = end + 1

    def finish(self) -> str | None:
        """The last line when the stream ended without its newline (None if there is none)."""
        return self._take() if self.pending else None

    def reset(self) -> None:
        self._parts, self._held, self._length = [], 0, 0

    def _hold(self, piece: bytes) -> None:
        self._length += len(piece)
        room = self.max_bytes - self._held
        if room > 0 and piece:
            kept = piece[:room]
            self._parts.append(kept)
            self._held += len(kept)

    def _take(self) -> str:
        raw, length = b"".join(self._parts), self._length
        self.reset()
        if length > self.max_bytes:
            return OverlongLine(_decode(raw[:200]), length)
        return _decode(raw)


def read_lines(f: BinaryIO, chunk: int = READ_CHUNK) -> Iterator[list[str]]:
    """A whole binary file as batches of lines (the last one without a newline included)."""
    splitter = LineSplitter()
    while data := f.read(chunk):
        lines = splitter.feed(data)
        if lines:
            yield lines
    last = splitter.finish()
    if last is not None:
        yield [last]
