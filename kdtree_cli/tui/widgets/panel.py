"""The base of the monitor's panels: a bordered widget that draws itself from the stats
model at its current size. The app calls `show(stats)` on its redraw timer; panels never
read sources or talk to each other.

Drawing a panel's text is cheap; having textual lay it out and paint it is not (most of a
frame's cost), so `show` draws the text first and asks for a repaint only when it changed.
"""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from kdtree_cli.tui.stats import RunStats


class StatsPanel(Widget):
    TITLE = ""
    WAITING = "waiting for events…"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.stats: RunStats | None = None
        self.border_title = self.TITLE
        self._drawn: Text | None = None
        self._drawn_size = Size(0, 0)

    def show(self, stats: RunStats, force: bool = False) -> None:
        """Draw from `stats`; `force` skips any rate limit a panel has (none here)."""
        self.stats = stats
        self.border_subtitle = self.note(stats)
        text = self._draw_at(self.content_size)
        if text != self._drawn:
            self._drawn, self._drawn_size = text, self.content_size
            self.refresh()

    def render(self) -> Text:
        size = self.content_size
        if self._drawn is None or size != self._drawn_size:  # first paint, or a resize
            self._drawn, self._drawn_size = self._draw_at(size), size
        return self._drawn

    def _draw_at(self, size: Size) -> Text:
        if self.stats is None or size.width <= 0 or size.height <= 0:
            return Text(self.WAITING, style="dim")
        try:
            return self.draw(self.stats, size.width, size.height)
        except Exception as exc:  # a drawing bug must not end the monitor: show it here
            return Text(f"cannot draw this panel ({type(exc).__name__}: {str(exc)[:200]}); "
                        "please report this", style="bold red")

    def note(self, stats: RunStats) -> str:
        """A line for the border when the panel shows less than it has (capped data)."""
        return ""

    def draw(self, stats: RunStats, width: int, height: int) -> Text:
        raise NotImplementedError
