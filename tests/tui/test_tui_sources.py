"""The data sources: a local run that dies, a followed file written in pieces, truncated
and replaced, a paced and pausable replay, and the backoff. (The run on a host:
test_tui_host_source.py.)"""

from __future__ import annotations

import sys
import textwrap
import time

import pytest
from tui_helpers import (
    SNAPSHOT_FILE,
    panel_text,
    run,
    run_to_end,
    screen_text,
    wait_for,
)
from tui_oracle import expected

from kdtree_cli.tui.app import make_app
from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.backoff import Backoff
from kdtree_cli.tui.sources.file_follow import FollowSource
from kdtree_cli.tui.sources.file_replay import ReplaySource
from kdtree_cli.tui.sources.local_run import LocalRunSource, kdtree_run_command

LINES = SNAPSHOT_FILE.read_text().splitlines(keepends=True)


def headline(exp) -> str:
    return f"τ {exp.tau:.2f}  last {min(100, len(exp.rounds))}: {exp.tau_rolling:.2f}"


def test_backoff_doubles_up_to_the_cap_and_resets():
    b = Backoff(initial_s=0.5, factor=2.0, cap_s=30.0)
    assert [b.next_delay() for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    b.reset()
    assert b.next_delay() == 0.5
    jittered = Backoff(initial_s=1.0, jitter=0.1)
    assert all(0.9 <= jittered.next_delay() / 2**i <= 1.1 for i in range(5))
    assert Backoff(failures=10_000).next_delay() == 30.0  # no overflow after a long outage


# ------------------------------------------------------------------------------ local run
def _child(script: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(script)]


def test_local_run_that_dies_is_shown_with_its_stderr(tmp_path):
    half = len(LINES) // 2
    part = tmp_path / "part.jsonl"
    part.write_text("".join(LINES[:half]))
    cmd = _child(f"""
        import sys
        sys.stdout.write(open({str(part)!r}).read()); sys.stdout.flush()
        print("torch.OutOfMemoryError: CUDA out of memory (tried 2.0 GiB)", file=sys.stderr)
        sys.exit(3)
    """)
    exp = expected(part)

    async def scenario():
        app = make_app(LocalRunSource([], command=cmd))
        async with app.run_test(size=(150, 45)) as pilot:
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.DROPPED
            assert "exited with status 3" in app.source_detail
            assert "CUDA out of memory" in app.source_detail
            assert any("stderr: torch.OutOfMemoryError" in e.text for e in app.stats.log)
            assert headline(exp) in panel_text(app, "#acceptance")
            assert "dropped" in screen_text(app)

    run(scenario())


def test_local_run_that_finishes_ends_with_its_summary():
    cmd = _child(f"import sys; sys.stdout.write(open({str(SNAPSHOT_FILE)!r}).read())")
    exp = expected(SNAPSHOT_FILE)

    async def scenario():
        app = make_app(LocalRunSource([], command=cmd))
        async with app.run_test(size=(150, 45)) as pilot:
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.ENDED
            assert app.query_one("#summary").display
            assert f"{exp.run_end['tokens']} tokens" in panel_text(app, "#summary")

    run(scenario())


def test_local_run_command_asks_kdtree_run_for_events_on_stdout():
    cmd = kdtree_run_command(["--budget", "32"])
    assert cmd[0] == sys.executable
    assert cmd[1:] == ["-m", "kdtree_cli", "run", "--budget", "32", "--metrics", "-"]


def test_quitting_stops_the_child_run():
    cmd = _child("import time; print('{}', flush=True); time.sleep(60)")
    source = LocalRunSource([], command=cmd)

    async def scenario():
        app = make_app(source)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: source._proc is not None and app.stats.malformed == 1)
        # leaving run_test unmounts the app, which stops the source
        assert source._proc.poll() is not None

    run(scenario())


# ------------------------------------------------------------------------------ follow
def test_follow_reads_partial_writes_truncation_and_replacement(tmp_path):
    path = tmp_path / "live.jsonl"  # does not exist yet
    exp = expected(SNAPSHOT_FILE)
    first, rest = LINES[:200], LINES[200:]

    async def scenario():
        app = make_app(FollowSource(path, poll_s=0.02))
        async with app.run_test(size=(150, 45)) as pilot:
            await wait_for(pilot, lambda: app.source_state == SourceState.WAITING, what="waiting")
            with path.open("w") as f:
                for line in first:  # a writer that flushes mid-line
                    f.write(line[:7])
                    f.flush()
                    f.write(line[7:])
                f.flush()
                await wait_for(pilot, lambda: app.stats.events == 200, what="200 events")
                f.write(LINES[200][:30])  # half a line: must not be taken as malformed
                f.flush()
                await pilot.pause(0.15)
                assert app.stats.malformed == 0
                f.write(LINES[200][30:] + "".join(rest[1:]))
            await wait_for(pilot, lambda: app.stats.run_end is not None, what="run_end")
            app.redraw()
            assert app.stats.malformed == 0
            assert headline(exp) in panel_text(app, "#acceptance")
            # truncate and rewrite: a new run from the start of the same file
            path.write_text("".join(LINES[:100]))
            await wait_for(pilot, lambda: app.stats.rounds == 99, what="the rewritten file")
            # replace the file (new inode): read from its start
            other = tmp_path / "other.jsonl"
            other.write_text("".join(LINES))
            other.replace(path)
            await wait_for(pilot, lambda: app.stats.run_end is not None, what="the new file")
            app.redraw()
            assert headline(exp) in panel_text(app, "#acceptance")
            assert app.stats.malformed == 0

    run(scenario())


# ------------------------------------------------------------------------------ replay
def test_replay_is_paced_by_event_time_and_pauses(tmp_path):
    path = tmp_path / "paced.jsonl"
    path.write_text("".join(LINES[:1]) + "".join(
        line.replace('"t":', '"t_orig":', 1).replace("{", '{"t":%.3f,' % (0.05 * i), 1)
        for i, line in enumerate(LINES[1:61], 1)
    ))
    # 60 rounds over 3.0 s of event time at x1: room to pause mid-way on a loaded machine
    source = ReplaySource(path, speed=1.0)

    async def scenario():
        app = make_app(source)
        began = time.monotonic()  # before the source starts (it starts when the app mounts)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.stats.rounds >= 4, what="some rounds")
            app.action_toggle_pause()
            await pilot.pause(0.2)  # lines read before the pause may still land
            held = app.stats.rounds
            await pilot.pause(0.3)
            assert app.stats.rounds == held < 60, "the replay should be held while paused"
            assert "PAUSED" in screen_text(app)
            app.action_toggle_pause()
            await run_to_end(app, pilot)
            elapsed = time.monotonic() - began
            assert app.stats.rounds == 60
            assert 3.0 + 0.5 <= elapsed < 10.0  # 3 s of events at x1, plus the pause

    run(scenario())


def test_replay_refuses_a_missing_file(tmp_path):
    from python_engine.errors import KdtreeError

    with pytest.raises(KdtreeError, match="no event file"):
        ReplaySource(tmp_path / "nope.jsonl")
