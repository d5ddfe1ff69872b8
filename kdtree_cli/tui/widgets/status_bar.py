"""One line at the bottom: where the events come from, the source's state, event time,
counts (malformed lines stand out), and PAUSED when the display is frozen."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.stats import RunStats

STATE_STYLE = {
    SourceState.STARTING: "yellow",
    SourceState.STREAMING: "green",
    SourceState.WAITING: "yellow",
    SourceState.RECONNECTING: "bold red",
    SourceState.ENDED: "blue",
    SourceState.DROPPED: "bold red",
    SourceState.FAILED: "bold red",
}


class StatusBar(Widget):
    def __init__(self, *, source: str = "", id: str | None = None) -> None:
        super().__init__(id=id)
        self.source = source
        self.state: SourceState | None = None
        self.detail = ""
        self.paused = False
        self.stats: RunStats | None = None

    def show(self, stats: RunStats, state: SourceState | None, detail: str, paused: bool) -> None:
        self.stats, self.state, self.detail, self.paused = stats, state, detail, paused
        self.refresh()

    def render(self) -> Text:
        width = self.content_size.width
        out = Text(no_wrap=True, overflow="ellipsis")
        if self.paused:
            out.append(" PAUSED ", style="bold reverse yellow")
            out.append(" ")
        if self.state is not None:
            out.append("● " + self.state.value, style=STATE_STYLE[self.state])
            out.append(" ")
        s = self.stats
        if s is not None:
            if s.last_t is not None:
                out.append(f"t {s.last_t:.1f}s ", style="dim")
            out.append(f"{s.events} events ")
            out.append(f"{s.malformed} malformed ", style="bold yellow" if s.malformed else "dim")
        out.append("· " + self.source, style="dim")
        if self.detail and self.state not in (SourceState.STREAMING, None) and width > 60:
            out.append(" · " + self.detail, style=STATE_STYLE.get(self.state, "dim"))
        return out
