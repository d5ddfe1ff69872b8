"""Acceptance rate per tree depth: of the rounds whose tree reached depth d, the share that
accepted a drafted token at depth d (and, where there is room, the step rate: the same
given that depth d - 1 was accepted). Trailing depths that never accepted fold into one
row; rows flow into columns when the panel is short."""

from __future__ import annotations

import math

from rich.text import Text

from kdtree_cli.tui.drawing import fpct, hbar
from kdtree_cli.tui.stats import DEPTH_CAP, DepthRate, RunStats
from kdtree_cli.tui.widgets.panel import StatsPanel


def _fold_tail(rates: list[DepthRate]) -> tuple[list[DepthRate], list[DepthRate]]:
    """Split off the trailing depths that were reached but never accepted (shown as one row)."""
    k = len(rates)
    while k > 1 and rates[k - 1].accepted == 0:
        k -= 1
    if len(rates) - k < 2:
        return rates, []
    return rates[:k], rates[k:]


class DepthRatesPanel(StatsPanel):
    TITLE = "acceptance rate by depth"

    def note(self, stats: RunStats) -> str:
        return (f"{stats.too_deep} rounds deeper than {DEPTH_CAP}: rows stop at {DEPTH_CAP}"
                if stats.too_deep else "")

    def draw(self, stats: RunStats, width: int, height: int) -> Text:
        rates, tail = _fold_tail(stats.depth_rates)
        out = Text(no_wrap=True, overflow="crop")
        if not rates:
            out.append("no trees drafted (AR decoding?)" if stats.rounds else "no rounds yet",
                       style="dim")
            return out
        wide = width >= 44 and len(rates) + bool(tail) < height
        rows_avail = height - 1 if wide else height
        n_rows = len(rates) + bool(tail)
        cols = max(1, math.ceil(n_rows / max(1, rows_avail)))
        col_w = width // cols
        while cols > 1 and col_w < 14:  # too narrow: show the first depths only
            cols -= 1
            col_w = width // cols
        if wide:
            bar_w = self._bar_width(col_w)
            label = "accepted / reached" if bar_w >= 18 else ""
            out.append(f"{'d':>2} {label:<{bar_w}}{'rate':>7}{'step':>7}{'rounds':>7}",
                       style="dim")
        cells: list[Text] = [self._cell(r, col_w, wide) for r in rates]
        if tail:
            cells.append(self._tail_cell(tail, col_w))
        per_col = math.ceil(len(cells) / cols)
        for row in range(min(per_col, rows_avail)):
            if out.plain:
                out.append("\n")
            for c in range(cols):
                i = c * per_col + row
                if i < len(cells):
                    out.append_text(cells[i])
                    if c < cols - 1:
                        out.append(" " * max(0, col_w - cells[i].cell_len))
        return out

    @staticmethod
    def _bar_width(col_w: int) -> int:
        return max(4, col_w - 3 - 7 - 7 - 7)  # "dd " bar " rate%" " step%" " rounds"

    @staticmethod
    def _cell(r: DepthRate, col_w: int, wide: bool) -> Text:
        cell = Text(f"{r.depth:>2} ")
        if wide:
            bar_w = DepthRatesPanel._bar_width(col_w)
            cell.append(hbar(r.rate, bar_w), style="cyan")
            cell.append(f" {fpct(r.rate):>6}", style="bold")
            cell.append(f" {fpct(r.step_rate):>6}", style="dim")
            cell.append(f" {r.reached:>6}", style="dim")
        else:
            bar_w = max(2, col_w - 3 - 7 - 1)
            cell.append(hbar(r.rate, bar_w), style="cyan")
            cell.append(f" {fpct(r.rate):>6}", style="bold")
        return cell

    @staticmethod
    def _tail_cell(tail: list[DepthRate], col_w: int) -> Text:
        first, last = tail[0].depth, tail[-1].depth
        reached = sum(r.reached for r in tail)
        label = f"{first}-{last}: 0 accepted" if col_w < 30 else \
            f"{first}-{last}: never accepted ({reached} reached)"
        return Text(label[:col_w], style="dim")
