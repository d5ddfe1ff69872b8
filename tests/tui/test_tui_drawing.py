"""The drawing helpers: bars keep their width and proportion, stacked bars add up."""

from __future__ import annotations

import math
import random

from kdtree_cli.tui.drawing import EIGHTHS_V, fpct, hbar, show_token, vbars
from kdtree_cli.tui.widgets.stage_times import stacked


def eighths(bar: str) -> int:
    return sum(8 if ch == "█" else " ▏▎▍▌▋▊▉".index(ch) for ch in bar)


def test_hbar_has_its_width_and_fill(seed):
    rng = random.Random(seed)
    for _ in range(500):
        width, frac = rng.randrange(1, 60), rng.uniform(-0.5, 1.5)
        bar = hbar(frac, width)
        assert len(bar) == width
        assert eighths(bar) == round(min(1.0, max(0.0, frac)) * width * 8)
    assert hbar(float("nan"), 5) == "     "


def test_vbars_column_heights_are_proportional(seed):
    rng = random.Random(seed)
    values = [rng.uniform(0, 100) for _ in range(rng.randrange(1, 40))] + [0.0]
    height = rng.randrange(1, 9)
    rows = vbars(values, height)
    assert len(rows) == height and all(len(r) == len(values) for r in rows)
    top = max(values)
    for col, v in enumerate(values):
        filled = sum(8 if r[col] == "█" else EIGHTHS_V.index(r[col]) for r in rows)
        want = 0 if v == 0 else max(1, round(v / top * height * 8))
        assert filled == want


def test_stacked_cells_sum_to_the_width_and_keep_small_stages(seed):
    rng = random.Random(seed)
    for _ in range(300):
        raw = [rng.choice([0.0, rng.uniform(0, 1e-3), rng.uniform(0, 1)]) for _ in range(4)]
        if not any(raw):
            continue
        shares = [x / sum(raw) for x in raw]
        width = rng.randrange(4, 120)
        cells = stacked(shares, width)
        assert sum(cells) == width
        assert all(c >= 1 for c, s in zip(cells, shares) if s > 0)
        assert all(c == 0 for c, s in zip(cells, shares) if s == 0)
        assert all(abs(c - s * width) <= 4 for c, s in zip(cells, shares))


def test_formats():
    assert fpct(0.8512) == "85.1%" and fpct(math.nan) == "—"
    assert show_token(" the\n") == "␣the↵" and show_token("") == "∅"
