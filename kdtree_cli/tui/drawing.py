"""Text drawing helpers shared by the panels: bars, sparklines, number formats. Plain
functions of numbers and widths, so they are easy to test and cheap to call 10x a second."""

from __future__ import annotations

import math
from typing import Sequence

EIGHTHS_H = " ▏▎▍▌▋▊▉█"  # horizontal bar, 1/8 steps
EIGHTHS_V = " ▁▂▃▄▅▆▇█"  # vertical bar, 1/8 steps
DASH = "—"  # shown for a figure not known yet


def hbar(frac: float, width: int) -> str:
    """A left-aligned bar of `width` cells filled to `frac` (clamped to 0..1)."""
    if width <= 0:
        return ""
    if not math.isfinite(frac):
        frac = 0.0
    eighths = round(max(0.0, min(1.0, frac)) * width * 8)
    full, part = divmod(eighths, 8)
    bar = "█" * full + (EIGHTHS_H[part] if part else "")
    return bar.ljust(width)


def vbars(values: Sequence[float], height: int, top: float | None = None) -> list[str]:
    """Vertical bars, one column per value, `height` rows (top row first), scaled so that
    `top` (default: the largest value) fills the height. A value > 0 shows at least 1/8."""
    if height <= 0:
        return []
    top = max(values, default=0.0) if top is None else top
    cols = []
    for v in values:
        if not math.isfinite(v) or v <= 0 or top <= 0:
            cols.append(0)
        else:
            cols.append(max(1, round(min(1.0, v / top) * height * 8)))
    rows = []
    for r in range(height - 1, -1, -1):  # the top row first
        row = []
        for e in cols:
            fill = e - r * 8
            row.append("█" if fill >= 8 else EIGHTHS_V[max(0, fill)])
        rows.append("".join(row))
    return rows


def fnum(x: float | None, fmt: str = ".2f") -> str:
    """A number, or a dash while it is unknown (nan, inf, None)."""
    if x is None or not math.isfinite(x):
        return DASH
    return format(x, fmt)


def fpct(x: float | None, digits: int = 1) -> str:
    """A 0..1 fraction as a percentage: 0.851 -> '85.1%'."""
    if x is None or not math.isfinite(x):
        return DASH
    return f"{100 * x:.{digits}f}%"


def fms(us: float | None) -> str:
    """Microseconds as milliseconds: 15497.4 -> '15.50 ms'."""
    return f"{fnum(None if us is None else us / 1000.0)} ms"


def show_token(text: str) -> str:
    """A token's text made visible: leading space as '␣', newline as '↵', tabs as '⇥'."""
    out = text.replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")
    if out.startswith(" "):
        out = "␣" + out[1:]
    return out or "∅"
