"""The keys: p pauses the display (and a replay), r resets the counters, s writes an SVG
and a JSON summary whose numbers match the file, ? opens help, q quits."""

from __future__ import annotations

import json
import math
import re

from tui_helpers import SNAPSHOT_FILE, panel_text, run, run_to_end, screen_text
from tui_oracle import STAGES, expected

from kdtree_cli.tui.app import make_app
from kdtree_cli.tui.screens.help import HelpScreen
from kdtree_cli.tui.sources.file_replay import ReplaySource

LINES = SNAPSHOT_FILE.read_text().splitlines()


def test_pause_freezes_the_panels_but_keeps_counting():
    async def scenario():
        app = make_app(None)
        async with app.run_test(size=(120, 40)) as pilot:
            app.ingest_lines(LINES[:100])
            app.redraw()
            await pilot.press("p")
            frozen = panel_text(app, "#acceptance")
            app.ingest_lines(LINES[100:300])
            await pilot.pause(0.3)  # several redraw ticks
            assert panel_text(app, "#acceptance") == frozen
            screen = screen_text(app)
            assert "PAUSED" in screen and "300 events" in screen  # the status bar still counts
            await pilot.press("p")
            await pilot.pause(0.2)
            assert panel_text(app, "#acceptance") != frozen
            assert "PAUSED" not in screen_text(app)

    run(scenario())


def test_reset_zeroes_the_counters_and_keeps_the_run_facts():
    async def scenario():
        app = make_app(None)
        async with app.run_test(size=(120, 40)) as pilot:
            app.ingest_lines(LINES[:200])
            await pilot.press("r")
            assert "τ —  last 0: —" in panel_text(app, "#acceptance")
            assert "deepseek-v3-tiny-demo" in panel_text(app, "#facts")
            assert any(e.text == "counters reset" for e in app.stats.log)
            # what comes after the reset is counted from zero
            after = LINES[200:]
            app.ingest_lines(after)
            rounds = [json.loads(x) for x in after if '"event":"round"' in x]
            tau = sum(r["accept_len"] for r in rounds) / len(rounds)
            app.redraw()
            assert f"τ {tau:.2f}" in panel_text(app, "#acceptance")

    run(scenario())


def test_snapshot_key_writes_svg_and_a_json_summary_of_the_file(tmp_path):
    exp = expected(SNAPSHOT_FILE)

    async def scenario():
        app = make_app(ReplaySource(SNAPSHOT_FILE, speed=0), save_dir=tmp_path, clock=lambda: 0.0)
        async with app.run_test(size=(150, 45)) as pilot:
            await run_to_end(app, pilot)
            await pilot.press("s")
            await pilot.press("s")  # a second snapshot in the same second gets its own name
        svgs = sorted(tmp_path.glob("*.svg"), key=lambda p: len(p.name))
        assert len(svgs) == 2 and re.fullmatch(r"kdtree-tui-\d{8}-\d{6}\.svg", svgs[0].name)
        assert svgs[1].name == svgs[0].stem + "-2.svg"
        svg = svgs[0].read_text()
        assert svg.startswith("<svg") and "acceptance" in svg
        summary = json.loads(svgs[0].with_suffix(".json").read_text())
        assert summary["rounds"] == len(exp.rounds)
        assert math.isclose(summary["tau"], exp.tau, rel_tol=1e-6)
        assert math.isclose(summary["tau_rolling"], exp.tau_rolling, rel_tol=1e-6)
        assert summary["accept_len_histogram"] == {str(k): v for k, v in sorted(exp.histogram.items())}
        for row in summary["depth_rates"]:
            rate, step, reached = exp.depth_rate(row["depth"])
            assert row["reached"] == reached and math.isclose(row["rate"], rate, abs_tol=1e-6)
        lo, hi = exp.tps_min_max
        tps = summary["tokens_per_s"]
        assert (tps["now"], tps["min"], tps["max"]) == (exp.tps_now, lo, hi)
        assert math.isclose(tps["avg"], exp.tps_avg, rel_tol=1e-6)
        for s in STAGES:
            assert math.isclose(summary["stage_us_mean"][s], exp.stage_means_us[s], rel_tol=1e-6)
        assert summary["run_end"] == exp.run_end
        assert summary["source_state"] == "ended"

    run(scenario())


def test_help_opens_and_closes_and_q_quits():
    async def scenario():
        app = make_app(None)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            assert "acceptance rate by depth" in screen_text(app)
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
            await pilot.press("q")
            await pilot.pause()
            assert not app.is_running

    run(scenario())
