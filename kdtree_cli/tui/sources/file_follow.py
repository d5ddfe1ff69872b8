"""Follow a JSON Lines file as a writer appends to it (tail -F): read what is there, then
poll for more. Survives the file not existing yet, being truncated or being replaced (a
new run writing the same path), and never hands on half a line."""

from __future__ import annotations

import os
from pathlib import Path

from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.base import EventSource


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
            with f:
                self._tail(f)

    def _tail(self, f) -> None:
        """Read f until it is truncated or replaced (return to reopen) or we stop."""
        inode = os.fstat(f.fileno()).st_ino
        self.status(SourceState.STREAMING, f"reading {self.path}")
        pending = b""  # a line without its newline yet: the writer is mid-line
        idle = False
        while not self.stopping:
            chunk = f.read(1 << 16)
            if chunk:
                if idle:
                    self.status(SourceState.STREAMING, f"reading {self.path}")
                    idle = False
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                self.emit_many([raw.decode("utf-8", errors="replace") for raw in lines])
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
                self.note("info", f"{self.path} was replaced; reading the new file")
                self._drain_partial(pending)
                return
            if st.st_size < f.tell():
                self.note("info", f"{self.path} was truncated; reading from its start")
                f.seek(0)
                pending = b""

    def _drain_partial(self, pending: bytes) -> None:
        # the old file ended without a newline: its last line is complete now
        if pending.strip():
            self.emit(pending.decode("utf-8", errors="replace"))
