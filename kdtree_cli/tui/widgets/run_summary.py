"""The final summary, shown when `run_end` arrives: the engine's own figures beside the
ones this monitor computed from the rounds it saw (they differ if lines were lost)."""

from __future__ import annotations

from rich.text import Text

from kdtree_cli.tui.drawing import fnum
from kdtree_cli.tui.stats import RunStats
from kdtree_cli.tui.widgets.panel import StatsPanel


class RunSummaryPanel(StatsPanel):
    TITLE = "run finished"

    def draw(self, stats: RunStats, width: int, height: int) -> Text:
        out = Text(no_wrap=True, overflow="crop")
        end = stats.run_end
        if end is None:
            out.append("the run has not ended", style="dim")
            return out
        out.append(f"{end['tokens']} tokens", style="bold")
        out.append(f" in {fnum(end['decode_s'])} s → ", style="dim")
        out.append(f"{fnum(end['tokens_per_s'], '.1f')} tok/s", style="bold green")
        out.append("  τ ", style="dim")
        out.append(fnum(end["tau"]), style="bold green")
        out.append(f" over {end['rounds']} rounds", style="dim")
        out.append("\nseen here: ", style="dim")
        out.append(f"τ {fnum(stats.tau)} over {stats.rounds} rounds · {stats.tokens} decode "
                   f"tokens · {fnum(stats.tps_avg, '.1f')} tok/s")
        if stats.rounds != end["rounds"]:
            out.append(f"  ({end['rounds'] - stats.rounds} rounds missing)", style="bold yellow")
        return out
