"""Drive the monitor on every recorded event file and check the numbers it shows (tau,
histogram, rates per depth, tokens/s, stage times, run summary, counts) against the figures
computed independently from the file (oracle.py)."""

from __future__ import annotations

import math
import re

from tui_helpers import each_event_file, panel_text, run, run_to_end, screen_text
from tui_oracle import STAGES, expected

from kdtree_cli.tui.app import make_app
from kdtree_cli.tui.sources.file_replay import ReplaySource

BAR = "█▉▊▋▌▍▎▏ "
NUM = r"(—|-?\d+(?:\.\d+)?)"


def near(shown: str, value: float, decimals: int, what: str) -> None:
    """`shown` is `value` at the shown precision (a dash when the value is unknown)."""
    if value is None or not math.isfinite(value):
        assert shown == "—", f"{what}: shows {shown}, expected a dash"
        return
    assert shown != "—", f"{what}: shows a dash, expected {value}"
    tol = 0.5 * 10**-decimals + 1e-9
    assert abs(float(shown) - value) <= tol, f"{what}: shows {shown}, file says {value:.6f}"


def check_acceptance(text: str, exp) -> None:
    head = re.search(rf"τ {NUM}\s+last (\d+): {NUM}", text)
    assert head, text
    near(head[1], exp.tau, 2, "tau")
    assert int(head[2]) == min(exp.window, len(exp.rounds))
    near(head[3], exp.tau_rolling, 2, "rolling tau")
    rows = re.findall(rf"^\s*(\d+) [{BAR}]+\s+(\d+)\s+{NUM}%$", text, re.M)
    hist = exp.histogram
    assert len(rows) == max(hist), "one histogram row per acceptance length"
    for a, count, pct in rows:
        assert int(count) == hist.get(int(a), 0), f"histogram row {a}"
        near(pct, 100 * hist.get(int(a), 0) / len(exp.rounds), 1, f"histogram share {a}")


def check_depths(text: str, exp) -> None:
    rows = re.findall(rf"^\s*(\d+) [{BAR}]+\s+{NUM}%?\s+{NUM}%?\s+(\d+)$", text, re.M)
    assert rows, text
    for d, rate, step, reached in rows:
        r, s, n = exp.depth_rate(int(d))
        near(rate, 100 * r, 1, f"rate at depth {d}")
        near(step, 100 * s, 1, f"step rate at depth {d}")
        assert int(reached) == n, f"rounds reaching depth {d}"
    shown = [int(d) for d, *_ in rows]
    assert shown == list(range(1, len(shown) + 1))
    tail = re.search(r"(\d+)-(\d+): never accepted \((\d+) reached\)", text)
    last = tail and int(tail[2])
    assert (last or shown[-1]) == exp.max_depth, "every depth the trees reached is accounted for"
    if tail:
        for d in range(int(tail[1]), int(tail[2]) + 1):
            assert exp.depth_rate(d)[0] == 0.0, f"depth {d} is folded as never accepted"
        assert int(tail[3]) == sum(exp.depth_rate(d)[2] for d in range(int(tail[1]), last + 1))


def check_throughput(text: str, exp) -> None:
    m = re.search(rf"now {NUM}\s+min {NUM}\s+max {NUM}\s+avg {NUM}", text)
    assert m, text
    lo, hi = exp.tps_min_max
    near(m[1], exp.tps_now, 1, "tokens/s now")
    near(m[2], lo, 1, "tokens/s min")
    near(m[3], hi, 1, "tokens/s max")
    near(m[4], exp.tps_avg, 1, "tokens/s avg")


def check_stages(text: str, exp) -> None:
    means = exp.stage_means_us
    total = sum(means.values())
    head = re.search(rf"^{NUM} ms per round \(last (\d+)\)", text, re.M)
    assert head, text
    near(head[1], total / 1000, 2, "round time")
    labels = {"draft": "draft", "tree_build": "tree build", "verify": "verify", "commit": "commit"}
    for s in STAGES:
        m = re.search(rf"{labels[s]}\s+{NUM} ms\s+{NUM}%", text)
        assert m, f"{s} row missing:\n{text}"
        near(m[1], means[s] / 1000, 2, f"{s} ms")
        near(m[2], 100 * means[s] / total, 1, f"{s} share")


def check_summary(text: str, exp) -> None:
    end = exp.run_end
    assert f"{end['tokens']} tokens" in text
    m = re.search(rf"→ {NUM} tok/s\s+τ {NUM} over (\d+) rounds", text)
    assert m, text
    near(m[1], end["tokens_per_s"], 1, "run_end tokens/s")
    near(m[2], end["tau"], 2, "run_end tau")
    assert int(m[3]) == end["rounds"]
    seen = re.search(rf"seen here: τ {NUM} over (\d+) rounds · (\d+) decode tokens", text)
    assert seen, text
    near(seen[1], exp.tau, 2, "seen tau")
    assert int(seen[2]) == len(exp.rounds) and int(seen[3]) == exp.decode_tokens


@each_event_file
def test_wide_layout_numbers_match_the_file(event_file):
    exp = expected(event_file)

    async def scenario():
        app = make_app(ReplaySource(event_file, speed=0))
        async with app.run_test(size=(160, 60)) as pilot:
            await run_to_end(app, pilot)
            check_acceptance(panel_text(app, "#acceptance"), exp)
            check_depths(panel_text(app, "#depths"), exp)
            check_throughput(panel_text(app, "#throughput"), exp)
            check_stages(panel_text(app, "#stages"), exp)
            screen = screen_text(app)
            # the headline figures are on the screen itself, not only in the widgets
            assert f"τ {exp.tau:.2f}" in screen
            assert re.search(rf"{exp.events_in_stream} events 0 malformed", screen), screen
            if exp.run_start:
                assert str(exp.run_start["model"]) in screen
            if exp.run_end:
                check_summary(panel_text(app, "#summary"), exp)
            if exp.gpus:
                gpu_text = panel_text(app, "#gpus")
                for gid, g in exp.gpus.items():
                    assert re.search(rf"gpu{gid}\s.*\s{g['util']:.0f}%", gpu_text), gpu_text
            last = exp.rounds[-1]
            tree_text = panel_text(app, "#tree")
            assert f"req {last['request']} round {last['round']}" in tree_text
            if "tree" in last:  # the accepted path reads down the left edge, in order
                path = [ln for ln in tree_text.splitlines() if ln.lstrip().startswith("●")]
                assert len(path) == last["accept_len"] == len(last["tree"]["accepted"])

    run(scenario())


@each_event_file
def test_compact_layout_keeps_the_headline_numbers(event_file):
    exp = expected(event_file)

    async def scenario():
        app = make_app(ReplaySource(event_file, speed=0))
        async with app.run_test(size=(80, 24)) as pilot:
            await run_to_end(app, pilot)
            screen = screen_text(app)
            assert f"τ {exp.tau:.2f}" in screen
            assert f"last {min(100, len(exp.rounds))}: {exp.tau_rolling:.2f}" in screen
            lo, hi = exp.tps_min_max
            assert f"now {exp.tps_now:.1f}  min {lo:.1f}  max {hi:.1f}" in screen
            total_ms = sum(exp.stage_means_us.values()) / 1000
            assert re.search(rf"{total_ms:.2f} ms per round", screen), screen
            assert f"{exp.depth_rate(1)[0] * 100:.1f}%" in screen
            assert not app.query_one("#tree").display or "last round's tree" not in screen
            assert app.screen.has_class("-narrow")
            # nothing drawn outside the 80 columns
            assert all(len(line) <= 80 for line in screen.splitlines())

    run(scenario())
