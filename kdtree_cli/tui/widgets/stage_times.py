"""Where a round's time goes: draft / tree build / verify / commit, as the mean over the
rolling window, a stacked bar (each stage its own fill, readable without colour) and a
legend in one or two columns."""

from __future__ import annotations

import math

from rich.text import Text

from kdtree_cli.tui.drawing import fms, fnum, fpct
from kdtree_cli.tui.stats import RunStats
from kdtree_cli.tui.widgets.panel import StatsPanel
from python_engine.events import STAGES

STAGE_LOOK = {  # fill character, colour
    "draft": ("█", "magenta"),
    "tree_build": ("▓", "yellow"),
    "verify": ("▒", "cyan"),
    "commit": ("░", "green"),
}
STAGE_LABEL = {"draft": "draft", "tree_build": "tree build", "verify": "verify", "commit": "commit"}


def stacked(shares: list[float], width: int) -> list[int]:
    """Cells per stage summing to width (largest remainders), a share > 0 gets >= 1 cell."""
    raw = [s * width for s in shares]
    cells = [math.floor(x) for x in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - cells[i], reverse=True):
        if sum(cells) >= width:
            break
        cells[i] += 1
    for i, s in enumerate(shares):
        if s > 0 and cells[i] == 0:
            j = max(range(len(cells)), key=cells.__getitem__)
            cells[j] -= 1
            cells[i] += 1
    return cells


class StageTimesPanel(StatsPanel):
    TITLE = "time per round"

    def draw(self, stats: RunStats, width: int, height: int) -> Text:
        out = Text(no_wrap=True, overflow="crop")
        means = stats.stage_means_us
        if not stats.rounds:
            out.append("no rounds yet", style="dim")
            return out
        total = sum(means.values())
        n = len(stats.stage_rolling["draft"].values)
        out.append(fms(total), style="bold")
        out.append(f" per round (last {n})", style="dim")
        if height < 2:
            return out
        shares = [means[s] / total if total > 0 else 0.0 for s in STAGES]
        out.append("\n")
        for s, cells in zip(STAGES, stacked(shares, width)):
            ch, color = STAGE_LOOK[s]
            out.append(ch * cells, style=color)
        legend_rows = height - 2
        two_cols = legend_rows < len(STAGES)
        col_w = width // 2 if two_cols else width
        cells = [self._cell(s, means[s], share, col_w) for s, share in zip(STAGES, shares)]
        if two_cols:
            for i in range(0, len(cells), 2):
                if (i // 2) >= legend_rows:
                    break
                out.append("\n")
                out.append_text(cells[i])
                out.append(" " * max(1, col_w - cells[i].cell_len))
                out.append_text(cells[i + 1])
        else:
            for cell in cells:
                out.append("\n")
                out.append_text(cell)
        return out

    @staticmethod
    def _cell(stage: str, us: float, share: float, col_w: int) -> Text:
        ch, color = STAGE_LOOK[stage]
        cell = Text()
        if col_w >= 34:
            cell.append(ch * 2, style=color)
            cell.append(f" {STAGE_LABEL[stage]:<11}{fms(us):>10}", style="bold")
            cell.append(f" {fpct(share):>6}", style="dim")
        elif col_w >= 25:
            cell.append(ch * 2, style=color)
            cell.append(f" {stage.replace('tree_', ''):<6}{fms(us):>9}", style="bold")
            cell.append(f" {fpct(share):>6}", style="dim")
        else:  # "▓ build 15.5 81%": milliseconds, as the header line says
            cell.append(ch, style=color)
            ms = fnum(us / 1000, ".1f" if us < 99_950 else ".0f")  # 5 cells up to 99999 ms
            cell.append(f" {stage.replace('tree_', ''):<6} {ms:>5}", style="bold")
            cell.append(f" {fpct(share, 0):>3}", style="dim")
        return cell
