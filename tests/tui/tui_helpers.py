"""Helpers for the TUI tests: the recorded event files, what the app shows (the whole
screen as text, or one panel), and waiting for a source to finish.

Every *.jsonl under tests/tui/data/ is a recorded run; tests marked `each_event_file` run
on each, so a file recorded from an engine is picked up by dropping it there. (Not a
conftest.py: other test folders import helpers from their conftest by module name, and a
second module called `conftest` would shadow theirs.)
"""

from __future__ import annotations

import asyncio
import fcntl
import io
import math
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time
from pathlib import Path

import pytest

from kdtree_cli.tui.messages import SourceState
from tui_oracle import STAGES
from python_engine.project import PROJECT_ROOT

ROOT = PROJECT_ROOT
PEAK_MARK = "kdtree-test-peak-kb="
DATA_DIR = Path(__file__).resolve().parent / "data"
DATA_FILES = sorted(DATA_DIR.glob("*.jsonl"))
SNAPSHOT_FILE = DATA_DIR / "synthetic_tree_gpus.jsonl"  # fixed: snapshots need fixed input
FINAL_STATES = (SourceState.ENDED, SourceState.DROPPED, SourceState.FAILED)


# decorate a test taking `event_file` to run it on every recorded file
each_event_file = pytest.mark.parametrize("event_file", DATA_FILES, ids=[p.name for p in DATA_FILES])


def screen_text(app) -> str:
    """The screen as plain text, as a terminal would show it (incl. hidden = absent)."""
    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      force_terminal=True, color_system=None, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


def panel_text(app, selector: str) -> str:
    """One panel's content as plain text, drawn at its size on screen."""
    return app.query_one(selector).render().plain


async def wait_for(pilot, condition, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.02)


async def run_to_end(app, pilot, timeout: float = 20.0) -> None:
    """Wait until the app's source is done, then let the last redraw land."""
    await wait_for(pilot, lambda: app.source_state in FINAL_STATES, timeout, "the source to end")
    app.redraw()
    await pilot.pause()


def run(coro):
    return asyncio.run(coro)


def assert_matches(stats, exp) -> None:
    """The stats model's figures equal the oracle's (tui_oracle.Expected)."""
    assert stats.rounds == len(exp.rounds)
    assert stats.events == exp.events_in_stream
    assert stats.malformed == exp.malformed
    assert math.isclose(stats.tau, exp.tau, rel_tol=1e-12) or (math.isnan(stats.tau) and math.isnan(exp.tau))
    assert math.isclose(stats.tau_rolling, exp.tau_rolling, rel_tol=1e-12) or (
        math.isnan(stats.tau_rolling) and math.isnan(exp.tau_rolling))
    assert stats.hist == exp.histogram
    assert stats.too_deep == exp.deeper_than_shown
    for row in stats.depth_rates:
        rate, step, reached = exp.depth_rate(row.depth)
        assert row.reached == reached
        assert math.isclose(row.rate, rate, rel_tol=1e-12)
        assert (math.isnan(row.step_rate) and math.isnan(step)) or math.isclose(row.step_rate, step)
    assert [r.depth for r in stats.depth_rates] == list(range(1, exp.max_depth + 1))
    assert stats.tokens == exp.decode_tokens
    rates, _ = exp.buckets()
    assert list(stats.history) == rates
    lo, hi = exp.tps_min_max
    if rates:
        assert (stats.tps_min, stats.tps_max, stats.tps_now) == (lo, hi, exp.tps_now)
    assert math.isclose(stats.tps_avg, exp.tps_avg, rel_tol=1e-9) or (
        math.isnan(stats.tps_avg) and math.isnan(exp.tps_avg))
    if exp.rounds:
        for s in STAGES:
            assert math.isclose(stats.stage_means_us[s], exp.stage_means_us[s], rel_tol=1e-9)
    assert set(stats.gpus) == set(exp.gpus)


def kdtree_in_pty(args: list[str], *, prelude: str = "", keys: bytes = b"", keys_after_s: float = 3.0,
                  timeout_s: float = 60.0, size=(120, 40)) -> tuple[int, str, int]:
    """Run `kdtree ARGS` on a pseudo-terminal (optionally after some Python), type `keys`
    after a while; return the exit status, everything it printed and its peak memory (KB).

    The peak is the child's own (VmHWM, printed at exit): the child starts as a fork of
    this process, and its rusage would count this process's memory too."""
    code = (f"import atexit, sys\natexit.register(lambda: print('\\n{PEAK_MARK}' + next(\n"
            f"    l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]))\n"
            f"{prelude}\nsys.argv = ['kdtree', *{args!r}]\nfrom kdtree_cli.app import main\nmain()\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: its terminal is the pty
        os.chdir(ROOT)
        os.environ["TERM"] = "xterm-256color"
        os.execv(sys.executable, [sys.executable, "-c", code])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    out = bytearray()
    began = time.monotonic()
    typed = not keys
    try:
        while time.monotonic() - began < timeout_s:
            if not typed and time.monotonic() - began > keys_after_s:
                os.write(fd, keys)
                typed = True
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    text = out.decode("utf-8", errors="replace")
    peak = re.search(rf"{PEAK_MARK}(\d+)", text)
    return os.waitstatus_to_exitcode(status), text, int(peak[1]) if peak else -1
