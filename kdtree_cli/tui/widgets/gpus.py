"""Per-GPU figures (utilisation, memory, power) from the optional `gpus` field of the
newest event that carried it. The app shows this panel only once such figures arrive."""

from __future__ import annotations

from rich.text import Text

from kdtree_cli.tui.drawing import fnum, hbar
from kdtree_cli.tui.stats import RunStats
from kdtree_cli.tui.widgets.panel import StatsPanel


class GpuPanel(StatsPanel):
    TITLE = "GPUs"

    def note(self, stats: RunStats) -> str:
        return f"{stats.gpus_dropped} figures of further GPUs not kept" if stats.gpus_dropped else ""

    def draw(self, stats: RunStats, width: int, height: int) -> Text:
        out = Text(no_wrap=True, overflow="crop")
        if not stats.gpus:
            out.append("no GPU figures in the events", style="dim")
            return out
        bar_w = max(4, width - 40)
        for i, g in enumerate(list(stats.gpus.values())[:height]):
            if i:
                out.append("\n")
            out.append(f"gpu{g.id:<2} " if isinstance(g.id, int) else f"{str(g.id)[:5]:<6}", style="bold")
            util = g.util if g.util is not None else float("nan")
            out.append(hbar(util / 100.0, bar_w), style="magenta")
            out.append(f" {fnum(g.util, '.0f'):>3}%")
            mem = fnum(g.mem_gb, ".1f")
            if g.mem_total_gb is not None:
                mem += f"/{g.mem_total_gb:.0f}"
            out.append(f"  {mem:>11} GB", style="dim")
            if g.power_w is not None:
                out.append(f"  {g.power_w:>4.0f} W", style="dim")
        return out
