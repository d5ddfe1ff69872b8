"""Run facts from `run_start`: engine, models, device, host, dtype, block size, node
budget, temperature. Key-value pairs flowed into as many lines as the width needs."""

from __future__ import annotations

from rich.text import Text

from kdtree_cli.tui.stats import FACT_FIELDS, RunStats
from kdtree_cli.tui.widgets.panel import StatsPanel

LABELS = {"block_size": "block", "temperature": "temp"}


def fact_value(facts: dict, key: str):
    """A run fact as shown: a budget chosen per round (--budget auto) reads "auto<=N"."""
    if key == "budget" and facts.get("budget_mode") == "auto":
        return f"auto≤{facts.get('budget')}"
    return facts.get(key)


class RunFactsPanel(StatsPanel):
    TITLE = "run"
    WAITING = "waiting for run_start…"

    def __init__(self, *, source: str = "", **kw) -> None:
        super().__init__(**kw)
        self.source = source

    def draw(self, stats: RunStats, width: int, height: int) -> Text:
        out = Text(no_wrap=True, overflow="crop")
        if stats.facts is None:
            out.append(f"{self.WAITING}  {self.source}", style="dim")
            return out
        if width < 100:
            return self._compact(stats.facts)
        pairs = [(LABELS.get(k, k), fact_value(stats.facts, k)) for k in FACT_FIELDS]
        line_len = 0
        lines = 1
        for key, value in pairs:
            piece = len(key) + 1 + len(str(value))
            if line_len and line_len + 3 + piece > width:
                if lines >= height:
                    break
                out.append("\n")
                lines += 1
                line_len = 0
            elif line_len:
                out.append("   ")
                line_len += 3
            out.append(key + " ", style="dim")
            out.append(str(value), style="bold")
            line_len += piece
        return out

    @staticmethod
    def _compact(f: dict) -> Text:
        """Two lines: what runs, then where and how."""
        out = Text(no_wrap=True, overflow="crop")
        out.append(str(f.get("engine")), style="bold")
        out.append(" · ", style="dim")
        out.append(str(f.get("model")), style="bold")
        out.append(" ← ", style="dim")
        out.append(str(f.get("drafter")))
        out.append("\n")
        out.append(f"{f.get('device')}@{f.get('host')}", style="bold")
        for key, label in (("dtype", ""), ("block_size", "block "), ("budget", "budget "),
                           ("temperature", "temp ")):
            out.append(" · " + label, style="dim")
            out.append(str(fact_value(f, key)), style="bold")
        return out
