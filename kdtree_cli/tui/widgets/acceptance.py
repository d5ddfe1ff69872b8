"""Acceptance length: tau (overall and rolling, counting the bonus token) and the histogram
of per-round acceptance lengths. Horizontal bars when there is room for one row per length,
a vertical histogram otherwise."""

from __future__ import annotations

from rich.text import Text

from kdtree_cli.tui.drawing import fnum, fpct, hbar, vbars
from kdtree_cli.tui.stats import ACCEPT_CAP, RunStats
from kdtree_cli.tui.widgets.panel import StatsPanel


class AcceptancePanel(StatsPanel):
    TITLE = "acceptance length τ"

    def note(self, stats: RunStats) -> str:
        folded = stats.hist.get(ACCEPT_CAP, 0)  # absurd lengths share the last bar
        return f"{folded} rounds ≥{ACCEPT_CAP} in the last bar" if folded else ""

    def draw(self, stats: RunStats, width: int, height: int) -> Text:
        out = Text(no_wrap=True, overflow="crop")
        out.append("τ ", style="bold")
        out.append(fnum(stats.tau), style="bold green")
        n_recent = len(stats.accept_rolling.values)
        out.append(f"  last {n_recent}: ", style="dim")
        out.append(fnum(stats.tau_rolling), style="bold")
        if width >= 40:
            out.append(f"  {stats.rounds} rounds", style="dim")
        if not stats.hist or height < 2:
            return out
        top = max(stats.hist)  # <= ACCEPT_CAP: the stats fold longer ones into that bin
        lengths = list(range(1, top + 1))
        counts = [stats.hist.get(a, 0) for a in lengths]
        rows = height - 1
        if len(lengths) <= rows and width >= 24:
            self._horizontal(out, lengths, counts, stats.rounds, width)
        else:
            self._vertical(out, lengths, counts, rows, width)
        return out

    @staticmethod
    def _horizontal(out: Text, lengths, counts, total: int, width: int) -> None:
        peak = max(counts)
        bar_w = max(4, width - 2 - 1 - 1 - 6 - 1 - 6 - 1)  # 'aa ' bar ' count' ' share%' gap
        label_w = len(str(lengths[-1]))
        for a, c in zip(lengths, counts):
            out.append(f"\n{a:>{max(2, label_w)}} ")
            out.append(hbar(c / peak, bar_w), style="green")
            out.append(f" {c:>6}", style="dim")
            out.append(f" {fpct(c / total):>6}")

    @staticmethod
    def _vertical(out: Text, lengths, counts, rows: int, width: int) -> None:
        col = max(1, min(3, (width - 1) // max(1, len(lengths))))
        shown = lengths[: max(1, (width - 1) // col)]
        hidden = sum(counts[len(shown):])
        bars = vbars([counts[a - 1] for a in shown], max(1, rows - 1 - bool(hidden)))
        for line in bars:
            out.append("\n ")
            out.append("".join(ch * (col - 1) + " " if col > 1 else ch for ch in line), style="green")
        axis = "".join(f"{a:<{col}}" if col > 1 else str(a % 10) for a in shown)
        out.append("\n " + axis, style="dim")
        if hidden:
            out.append(f"\n {hidden} rounds longer than {shown[-1]}: no room", style="yellow")
