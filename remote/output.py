"""Where remote output goes: `[host] line` on the console as it arrives (several hosts
interleave line by line, never mid-line), and a per-step log file under
results/<host>/logs/ so nothing is lost when the terminal scrolls."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import IO, Protocol

HOST_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "bright_cyan", "bright_magenta")


class Reporter(Protocol):
    def line(self, host: str, step: str, text: str, is_stderr: bool) -> None: ...

    def note(self, host: str, text: str) -> None: ...


class ConsoleReporter:
    """Thread-safe `[host] text` lines. Remote stderr lines are printed like stdout lines
    (a build's warnings belong next to its progress), on our stdout stream."""

    def __init__(self, stream: IO[str] | None = None, color: bool | None = None):
        from rich.console import Console

        self._console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=True,
                                force_terminal=color, no_color=color is False)
        self._lock = threading.Lock()
        self._styles: dict[str, str] = {}

    def _prefix(self, host: str):
        from rich.text import Text

        style = self._styles.setdefault(host, HOST_STYLES[len(self._styles) % len(HOST_STYLES)])
        return Text(f"[{host}] ", style=style)

    def line(self, host: str, step: str, text: str, is_stderr: bool) -> None:
        from rich.text import Text

        with self._lock:
            self._console.print(self._prefix(host) + Text(text))

    def note(self, host: str, text: str) -> None:
        from rich.text import Text

        with self._lock:
            self._console.print(self._prefix(host) + Text("==> " + text, style="bold"))


class CollectingReporter:
    """Keeps everything in memory (tests, and callers that print later)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str, bool]] = []
        self.notes: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def line(self, host, step, text, is_stderr):
        with self._lock:
            self.lines.append((host, step, text, is_stderr))

    def note(self, host, text):
        with self._lock:
            self.notes.append((host, text))


class HostOutput:
    """One host's view of a reporter, teeing step output into logs/<step>.log."""

    def __init__(self, reporter: Reporter, host: str, log_dir: Path | None):
        self.reporter = reporter
        self.host = host
        self.log_dir = log_dir

    def note(self, text: str) -> None:
        self.reporter.note(self.host, text)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with open(self.log_dir / "deploy.log", "a", encoding="utf-8") as fh:
                fh.write(f"==> {text}\n")

    def step_sink(self, step: str):
        """A line callback for one step; close() it when the step ends."""
        return _StepSink(self, step)


class _StepSink:
    def __init__(self, out: HostOutput, step: str):
        self.out = out
        self.step = step
        self._fh = None
        if out.log_dir is not None:
            out.log_dir.mkdir(parents=True, exist_ok=True)
            self._fh = open(out.log_dir / f"{step}.log", "a", encoding="utf-8")

    def __call__(self, text: str, is_stderr: bool) -> None:
        self.out.reporter.line(self.out.host, self.step, text, is_stderr)
        if self._fh is not None:
            self._fh.write(text + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
