"""Follow a JSON Lines file as a writer appends to it (tail -F): read what is there, then
poll for more. Survives the file not existing yet, being truncated, rewritten or replaced
(a new run writing the same path), and never hands on half a line.

A new run in the same file is noticed three ways: a new inode (the file was replaced), a
size below what was read (truncated), or first bytes that differ from the ones read (the
file was truncated and refilled past its old size between two polls). Each restarts the
stream from the file's start with fresh figures, and the log says which it was.
"""

from __future__ import annotations

import os
from pathlib import Path

from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.base import EventSource
from kdtree_cli.tui.sources.lines import READ_CHUNK, LineSplitter

HEAD_BYTES = 4096  # first bytes kept and compared: they hold the run_start and its time


class FollowSource(EventSource):
    kind = "follow"

    def __init__(self, path: str | Path, *, poll_s: float = 0.1, **kw):
        super().__init__(**kw)
        self.path = Path(path)
        self.poll_s = poll_s

    def describe(self) -> str:
        return f"follow {self.path}"

    def produce(self) -> None:
        announced_wait = False
        opened_before = False
        while not self.stopping:
            try:
                f = self.path.open("rb")
            except FileNotFoundError:
                if not announced_wait:
                    self.status(SourceState.WAITING, f"waiting for {self.path} to appear")
                    announced_wait = True
                self.wait(self.poll_s)
                continue
            announced_wait = False
            if opened_before:
                self.restart(f"{self.path} was replaced (a new run?); reading the new file")
            opened_before = True
            with f:
                self._tail(f)

    def _tail(self, f) -> None:
        """Read f until it is replaced or removed (return to reopen) or we stop."""
        fd = f.fileno()
        inode = os.fstat(fd).st_ino
        self.status(SourceState.STREAMING, f"reading {self.path}")
        lines = LineSplitter()  # holds a line without its newline yet: the writer is mid-line
        head = b""  # the file's first bytes, as read
        idle = False
        while not self.stopping:
            chunk = f.read(READ_CHUNK)
            if chunk:
                # the bytes just read must belong to the file whose start we read: check
                # the start again after reading (a rewrite before the read shows there)
                seen = head + chunk[: HEAD_BYTES - len(head)] if len(head) < HEAD_BYTES else head
                if os.pread(fd, len(seen), 0) != seen:
                    head = self._start_over(f, lines, "was rewritten")
                    continue
                head = seen
                if idle:
                    self.status(SourceState.STREAMING, f"reading {self.path}")
                    idle = False
                self.emit_many(lines.feed(chunk))
                continue
            if not idle:
                self.status(SourceState.WAITING, f"following {self.path} (no new lines)")
                idle = True
            if self.wait(self.poll_s):
                return
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                self.note("warning", f"{self.path} was removed; waiting for it to come back")
                return
            if st.st_ino != inode:
                last = lines.finish()  # the old file ended without a newline: its last line is complete
                if last is not None and not last.isspace():
                    self.emit(last)
                return
            if st.st_size < f.tell():
                head = self._start_over(f, lines, "was truncated")
            elif head and os.pread(fd, len(head), 0) != head:
                # the file changed after the stat above: shorter now than what was read is a
                # truncation (still refilling, or not yet), else a rewrite past the old size
                shorter = os.fstat(fd).st_size < f.tell()
                head = self._start_over(f, lines, "was truncated" if shorter else "was rewritten")

    def _start_over(self, f, lines: LineSplitter, what: str) -> bytes:
        self.restart(f"{self.path} {what} (a new run?); reading it from the start")
        f.seek(0)
        lines.reset()
        return b""
