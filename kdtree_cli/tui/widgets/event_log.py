"""Warnings and errors: skipped malformed lines, `error` events, source drops and
reconnects, a child run's stderr. Appends only entries it has not shown yet."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from kdtree_cli.tui.stats import LogEntry, RunStats

LOOK = {"error": ("✖", "bold red"), "warning": ("!", "yellow"), "info": ("·", "dim")}


def format_entry(entry: LogEntry) -> Text:
    mark, style = LOOK.get(entry.level, ("·", ""))
    line = Text()
    line.append(f"{entry.t:8.2f}s " if entry.t is not None else " " * 10, style="dim")
    line.append(f"{mark} ", style=style)
    line.append(entry.text, style=style if entry.level == "error" else "")
    return line


class EventLogPanel(RichLog):
    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, max_lines=500, wrap=True, markup=False,
                         highlight=False, auto_scroll=True)
        self.border_title = "log"
        self._shown_seq = 0

    def show(self, stats: RunStats) -> None:
        fresh = [e for e in stats.log if e.seq > self._shown_seq]
        for entry in fresh:
            self.write(format_entry(entry))
        if fresh:
            self._shown_seq = fresh[-1].seq
        counts = f"{stats.errors} errors · {stats.malformed} malformed"
        self.border_subtitle = counts if (stats.errors or stats.malformed) else ""
