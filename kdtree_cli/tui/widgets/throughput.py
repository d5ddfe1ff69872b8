"""Tokens per second over time: the latest complete bucket, min and max over buckets that
held rounds, the decode average, and a sparkline (as many rows as the panel has)."""

from __future__ import annotations

import math

from rich.text import Text

from kdtree_cli.tui.drawing import fnum, vbars
from kdtree_cli.tui.stats import RunStats
from kdtree_cli.tui.widgets.panel import StatsPanel


class ThroughputPanel(StatsPanel):
    TITLE = "tokens/s"

    def draw(self, stats: RunStats, width: int, height: int) -> Text:
        out = Text(no_wrap=True, overflow="crop")
        out.append("now ", style="dim")
        out.append(fnum(stats.tps_now, ".1f"), style="bold green")
        out.append("  min ", style="dim")
        out.append(fnum(stats.tps_min, ".1f"))
        out.append("  max ", style="dim")
        out.append(fnum(stats.tps_max, ".1f"))
        if width >= 44:
            out.append("  avg ", style="dim")
            out.append(fnum(stats.tps_avg, ".1f"))
        if width >= 60:
            out.append(f"  ({stats.bucket_s:g} s buckets)", style="dim")
        rows = height - 1
        if rows <= 0:
            return out
        history = list(stats.history)[-width:]
        if not history:
            out.append("\n(the first bucket is still filling)", style="dim")
            return out
        top = stats.tps_max if math.isfinite(stats.tps_max) else max(history)
        cols = min(width, 4 * len(history))  # a short history: wider columns
        shown = [history[c * len(history) // cols] for c in range(cols)]
        for line in vbars(shown, rows, top=top):
            out.append("\n" + line, style="green")
        return out
