"""Hostile conditions around the monitor, end to end: a writer that never ends its line,
a followed file rewritten within one poll, no terminal, and the app ending on an error.
Each test names what it feeds and what must come out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest
from tui_helpers import ROOT, SNAPSHOT_FILE, kdtree_in_pty, run, wait_for
from tui_oracle import expected_lines, read_lines

from kdtree_cli.tui.app import make_app
from kdtree_cli.tui.messages import SourceBatch, SourceRestart
from kdtree_cli.tui.sources.file_follow import FollowSource
from kdtree_cli.tui.sources.lines import LineSplitter
from python_engine.events import LINE_MAX_CHARS, OverlongLine

CLEAN = read_lines(SNAPSHOT_FILE)


class Collector:
    """Stands in for the app: takes a source's messages and acknowledges its batches."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.restarts: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, message) -> None:
        with self.lock:
            if isinstance(message, SourceBatch):
                self.lines.extend(message.lines)
                message.source.ack()
            elif isinstance(message, SourceRestart):
                self.restarts.append(message.detail)


def test_follow_a_160MB_line_without_newline_costs_linear_time_and_bounded_memory(tmp_path):
    path = tmp_path / "endless.jsonl"
    with path.open("wb") as f:
        f.write((CLEAN[0] + "\n").encode())
        block = b"x" * (1 << 20)
        for _ in range(160):  # 160 MB, no newline: a writer gone wrong
            f.write(block)
    source = FollowSource(path, poll_s=0.02)
    got = Collector()
    tracemalloc.start()
    began = time.perf_counter()
    source.start(got)
    try:
        deadline = time.monotonic() + 60
        while path.stat().st_size > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
            if source.state.value == "waiting":  # read to the end, holding the partial line
                break
        with path.open("ab") as f:  # the line ends at last, and a good line follows
            f.write(b"\n" + (CLEAN[1] + "\n").encode())
        while len(got.lines) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        took = time.perf_counter() - began
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        source.stop()
    assert got.lines[0] == CLEAN[0] and got.lines[2] == CLEAN[1], got.lines[:1]
    overlong = got.lines[1]
    assert isinstance(overlong, OverlongLine) and overlong.length == 160 << 20
    assert peak < 4 * LINE_MAX_CHARS, f"held {peak / 1e6:.0f} MB for one line"
    assert took < 30, f"{took:.1f} s for 160 MB: not linear"


def test_line_splitter_hands_on_lines_whole_and_cuts_only_overlong_ones(seed):
    import random

    rng = random.Random(seed)
    lines = [("é" * rng.randrange(0, 50)).encode() for _ in range(200)] + [b"y" * 100]
    data = b"\n".join(lines) + b"\n"
    splitter = LineSplitter(max_bytes=99)
    out = []
    i = 0
    while i < len(data):  # arbitrary chunk boundaries, mid-character included
        step = rng.randrange(1, 40)
        out += splitter.feed(data[i:i + step])
        i += step
    assert out[:200] == [raw.decode() if len(raw) <= 99 else out[lines.index(raw)] for raw in lines[:200]]
    for raw, line in zip(lines, out):
        if len(raw) > 99:
            assert isinstance(line, OverlongLine) and line.length == len(raw)
        else:
            assert line == raw.decode()
    assert splitter.finish() is None


def test_follow_notices_a_file_rewritten_past_its_old_size_within_one_poll(tmp_path):
    """Run A is read; within one poll the file is truncated and refilled with run B, longer
    than A: the monitor must say so and show B's figures alone, not A's merged with B's
    tail."""
    path = tmp_path / "live.jsonl"
    run_a = CLEAN[:120]
    start_b = json.loads(CLEAN[0])
    start_b.update(model="second-run", t=0.5)
    run_b = [json.dumps(start_b)] + CLEAN[1:300]
    path.write_text("\n".join(run_a) + "\n")
    exp = expected_lines(run_b)

    async def scenario():
        app = make_app(FollowSource(path, poll_s=0.6))
        async with app.run_test(size=(150, 45)) as pilot:
            await wait_for(pilot, lambda: app.stats.rounds == len(expected_lines(run_a).rounds), what="run A")
            await wait_for(pilot, lambda: app.source_state.value == "waiting", what="the poll")
            path.write_text("\n".join(run_b) + "\n")  # same inode, bigger than before
            await wait_for(pilot, lambda: app.stats.events == len(run_a) + len(run_b), timeout=10,
                           what="run B")
            await pilot.pause(0.7)
            assert app.stats.rounds == len(exp.rounds) and app.stats.tau == pytest.approx(exp.tau)
            assert app.stats.facts["model"] == "second-run"
            assert app.stats.malformed == 0, [e.text for e in app.stats.log]
            said = [e.text for e in app.stats.log]
            assert any("was rewritten (a new run?)" in t and "figures reset" in t for t in said), said

    run(scenario())


def until(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert cond()


def test_follow_source_reports_truncation_and_replacement_as_restarts(tmp_path):
    path = tmp_path / "live.jsonl"
    path.write_text("\n".join(CLEAN[:50]) + "\n")
    source = FollowSource(path, poll_s=0.02)
    got = Collector()
    source.start(got)
    try:
        until(lambda: len(got.lines) == 50)
        path.write_text("\n".join(CLEAN[:10]) + "\n")  # shorter: truncated
        until(lambda: len(got.restarts) == 1 and len(got.lines) == 60)
        other = tmp_path / "other.jsonl"
        other.write_text("\n".join(CLEAN[:5]) + "\n")
        other.replace(path)  # a new inode
        until(lambda: len(got.restarts) == 2 and len(got.lines) == 65)
    finally:
        source.stop()
    assert "was truncated" in got.restarts[0] and "was replaced" in got.restarts[1]


def test_a_truncation_between_the_poll_and_the_head_check_is_called_one(tmp_path, monkeypatch):
    """The writer truncates the file just after the follower's stat saw its old size: the first
    bytes then differ (none left), and that is still a truncation, not a rewrite."""
    from kdtree_cli.tui.sources import file_follow

    path = tmp_path / "live.jsonl"
    path.write_text("\n".join(CLEAN[:50]) + "\n")
    real_stat, armed = os.stat, threading.Event()

    def stat_then_truncate(p, *args, **kwargs):
        st = real_stat(p, *args, **kwargs)
        if armed.is_set() and str(p) == str(path):
            armed.clear()
            os.truncate(path, 0)  # what the writer's open(O_TRUNC) does, after the stat
        return st

    monkeypatch.setattr(file_follow.os, "stat", stat_then_truncate)
    source = FollowSource(path, poll_s=0.02)
    got = Collector()
    source.start(got)
    try:
        until(lambda: len(got.lines) == 50)
        armed.set()
        until(lambda: len(got.restarts) == 1)
    finally:
        source.stop()
    assert "was truncated" in got.restarts[0], got.restarts


# ------------------------------------------------------------------------------ the command
def test_the_monitor_ending_on_an_error_exits_non_zero_and_says_why():
    prelude = ("from kdtree_cli.tui import app\n"
               "def boom(self, message): raise RuntimeError('injected fault')\n"
               "app.MonitorApp.on_source_batch = boom\n")
    status, out, _ = kdtree_in_pty(["tui", "--replay", str(SNAPSHOT_FILE), "--speed", "0"], prelude=prelude)
    assert status == 1, out[-2000:]
    assert "injected fault" in out and "the monitor stopped on an internal error" in out, out[-2000:]
    assert "kdtree tui: " not in out, "no closing line after an error"


def test_the_monitor_in_a_terminal_quits_on_q_with_its_closing_line():
    status, out, _ = kdtree_in_pty(["tui", "--replay", str(SNAPSHOT_FILE), "--speed", "0"], keys=b"q")
    exp = expected_lines(CLEAN)
    assert status == 0, out[-2000:]
    assert f"kdtree tui: {len(exp.rounds)} rounds, tau {exp.tau:.2f}" in out, out[-2000:]


@pytest.mark.parametrize("redirect", ["stdout_to_a_file", "stdin_from_null"])
def test_the_monitor_without_a_terminal_says_it_needs_one(tmp_path, redirect):
    out_file = tmp_path / "out.txt"
    with out_file.open("w") as out, open(os.devnull) as null:
        proc = subprocess.run(
            [sys.executable, "-m", "kdtree_cli", "tui", "--replay", str(SNAPSHOT_FILE)], cwd=ROOT,
            stdout=out if redirect == "stdout_to_a_file" else subprocess.PIPE,
            stdin=null, stderr=subprocess.PIPE, text=True, timeout=60,
        )
    assert proc.returncode == 1
    assert "kdtree tui needs a terminal" in proc.stderr and "--replay FILE" in proc.stderr
    assert "\x1b[" not in out_file.read_text(), "no escape codes written to the file"
