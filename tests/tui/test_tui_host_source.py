"""The run on a host (`kdtree tui --host`): the remote run is started once, detached, with
its metrics in a file; each (re)connection tails that file from the last byte shown, so a
drop loses nothing and counts nothing twice. Only network errors are retried, and only so
many times in a row. Here the remote side is a fake serving the bytes of a recorded run;
tests/remote/test_tui_host_run.py runs the same source against the real sshd."""

from __future__ import annotations

import json
import sys
import threading
import types

import pytest
from tui_helpers import SNAPSHOT_FILE, panel_text, run, run_to_end, screen_text, wait_for
from tui_oracle import expected

from kdtree_cli.tui.app import make_app
from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.backoff import Backoff
from kdtree_cli.tui.sources.ssh_host import MAX_ATTEMPTS, HostSource

DATA = SNAPSHOT_FILE.read_bytes()
FAST = Backoff(initial_s=0.01, factor=2.0, cap_s=0.05)


def headline(exp) -> str:
    return f"τ {exp.tau:.2f}  last {min(100, len(exp.rounds))}: {exp.tau_rolling:.2f}"


class FakeRuns:
    """The remote side: `stream` plays a script of (bytes to send, exception to raise) per
    call, serving the run's file from the offset asked for; records every call."""

    def __init__(self, script):
        self.script = list(script)
        self.calls: list[dict] = []
        self.stopped: list[str] = []

    def stream(self, host, args, *, run_id, offset, on_stderr):
        self.calls.append({"host": host, "args": list(args), "run_id": run_id, "offset": offset})
        step = self.script.pop(0) if self.script else (None, None)
        upto, exc = step
        if callable(upto):
            upto = upto(offset)
        end = len(DATA) if upto is None else upto
        for start in range(offset, end, 777):  # chunks that split lines anywhere
            yield DATA[start:min(end, start + 777)]
        if exc is not None:
            raise exc

    def stop(self, host, run_id):
        self.stopped.append(run_id)


def test_a_drop_resumes_from_the_last_byte_shown():
    """1st stream: a third of the run, cut in the middle of a line, then a reset. 2nd: the
    host refuses. 3rd: the rest. The remote run is the same one throughout (one run id), the
    3rd stream starts where the last complete line ended, and the totals are the oracle's."""
    cut = len(DATA) // 3
    assert DATA[cut - 1:cut] != b"\n"  # the cut falls inside a line
    complete = DATA.rindex(b"\n", 0, cut) + 1  # bytes of the complete lines before the cut
    release = threading.Event()

    def hold(offset):
        release.wait(10)
        return None

    runs = FakeRuns([(cut, ConnectionResetError("connection reset by peer")),
                     (lambda offset: offset, OSError("ssh: connect to host ct200 port 22: Connection refused")),
                     (hold, None)])
    source = HostSource("ct200", ["--budget", "32"], runs=runs, backoff=FAST)
    exp = expected(SNAPSHOT_FILE)

    async def scenario():
        app = make_app(source)
        async with app.run_test(size=(150, 45)) as pilot:
            await wait_for(pilot, lambda: len(runs.calls) >= 3, what="the third connection")
            app.redraw()
            await pilot.pause()
            screen = screen_text(app)
            assert "reconnecting" in screen or "streaming" in screen
            drops = [e.text for e in app.stats.log if e.level == "warning"]
            assert any("ConnectionResetError: connection reset by peer" in t for t in drops)
            assert any("Connection refused" in t for t in drops)
            release.set()
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.ENDED
            assert [c["offset"] for c in runs.calls] == [0, complete, complete]
            assert len({c["run_id"] for c in runs.calls}) == 1
            assert runs.calls[0]["args"] == ["--budget", "32"] and runs.calls[0]["host"] == "ct200"
            assert app.stats.events == exp.events_in_stream  # nothing twice, nothing lost
            assert app.stats.rounds == len(exp.rounds)
            assert headline(exp) in panel_text(app, "#acceptance")

    run(scenario())


def test_each_monitor_starts_its_own_run():
    a, b = HostSource("ct200", [], runs=FakeRuns([])), HostSource("ct200", [], runs=FakeRuns([]))
    assert a.run_id != b.run_id and a.run_id.replace("-", "").isalnum()


@pytest.mark.parametrize("make_error", [
    lambda e: e.HostKeyError("ct200: host key unknown; run with --accept-new-host-key"),
    lambda e: e.RemoteCommandError("ct200: `kdtree run` exited with status 2", 2),
    lambda e: e.RemoteEnvError("ct200: no deployed release; run `kdtree deploy ct200`"),
    lambda e: e.UnreachableError("ct200: authentication failed; check authorized_keys"),
    lambda e: KeyError("proxycommand"),  # a bug, not a network problem
], ids=["host key", "run failed", "not deployed", "authentication", "programming error"])
def test_errors_a_retry_cannot_fix_end_the_source_at_once(make_error):
    errors = pytest.importorskip("remote.errors")
    exc = make_error(errors)
    runs = FakeRuns([(len(DATA) // 10, exc)])

    async def scenario():
        app = make_app(HostSource("ct200", [], runs=runs, backoff=FAST))
        async with app.run_test(size=(120, 40)) as pilot:
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.DROPPED and len(runs.calls) == 1
            assert str(exc) in app.source_detail

    run(scenario())


def test_network_errors_are_retried():
    errors = pytest.importorskip("remote.errors")
    runs = FakeRuns([(0, errors.ConnectionLostError("ct200: SSH connection lost (EOFError)")),
                     (0, errors.UnreachableError("ct200: unreachable: no answer within 10s", transient=True)),
                     (0, TimeoutError("timed out"))])

    async def scenario():
        app = make_app(HostSource("ct200", [], runs=runs, backoff=FAST))
        async with app.run_test(size=(120, 40)) as pilot:
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.ENDED and len(runs.calls) == 4

    run(scenario())


def test_gives_up_after_the_limit_of_failures_in_a_row():
    runs = FakeRuns([(0, TimeoutError("timed out"))] * (MAX_ATTEMPTS + 5))
    source = HostSource("ct200", [], runs=runs, backoff=FAST)

    async def scenario():
        app = make_app(source)
        async with app.run_test(size=(120, 40)) as pilot:
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.DROPPED
            assert len(runs.calls) == MAX_ATTEMPTS
            assert f"gave up after {MAX_ATTEMPTS} attempts" in app.source_detail

    run(scenario())


def test_the_limit_counts_failures_in_a_row_only():
    """Each stream that delivers something resets the count: a long run on a flaky link
    survives more drops in total than the limit."""
    step = len(DATA) // (MAX_ATTEMPTS + 3)
    script = [(lambda off, k=k: max(off, step * (k + 1)), ConnectionResetError("reset")) for k in range(MAX_ATTEMPTS + 2)]
    runs = FakeRuns(script + [(None, None)])

    async def scenario():
        app = make_app(HostSource("ct200", [], runs=runs, backoff=FAST))
        async with app.run_test(size=(120, 40)) as pilot:
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.ENDED and len(runs.calls) == MAX_ATTEMPTS + 3
            assert app.stats.events == expected(SNAPSHOT_FILE).events_in_stream

    run(scenario())


def test_a_run_that_ends_without_run_end_is_not_rerun():
    runs = FakeRuns([(DATA.rindex(b"\n", 0, len(DATA) - 1) + 1, None)])  # all but the last line

    async def scenario():
        app = make_app(HostSource("ct200", [], runs=runs, backoff=FAST))
        async with app.run_test(size=(120, 40)) as pilot:
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.ENDED and len(runs.calls) == 1
            assert "without run_end" in app.source_detail

    run(scenario())


def test_quitting_stops_the_remote_run():
    release = threading.Event()
    runs = FakeRuns([(lambda off: release.wait(10) and None or len(DATA) // 4, None)])
    source = HostSource("ct200", [], runs=runs, backoff=FAST)

    async def scenario():
        app = make_app(source)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: len(runs.calls) == 1, what="the connection")
        release.set()

    run(scenario())
    assert runs.stopped == [source.run_id]


def test_imports_remote_lazily(monkeypatch):
    fake = types.ModuleType("remote.detached")
    calls = []

    def stream_run(host, args, *, run_id, offset, on_stderr):
        calls.append(offset)
        yield DATA[offset:]

    fake.stream_run = stream_run
    fake.stop_run = lambda host, run_id: None
    monkeypatch.setitem(sys.modules, "remote.detached", fake)

    async def scenario():
        app = make_app(HostSource("ct200", ["--x"]))
        async with app.run_test(size=(120, 40)) as pilot:
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.ENDED and calls == [0]
            assert app.stats.rounds == len(expected(SNAPSHOT_FILE).rounds)

    run(scenario())


def test_without_remote_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "remote.detached", None)  # import fails

    async def scenario():
        app = make_app(HostSource("ct200", []))
        async with app.run_test(size=(120, 40)) as pilot:
            await run_to_end(app, pilot)
            assert app.source_state == SourceState.FAILED
            assert "pip install" in app.source_detail and "ct200" in app.source_detail

    run(scenario())


def test_the_end_of_a_host_run_is_read_by_the_one_event_parser():
    """A run on a host ends at a valid run_end; a line that only looks like one (missing
    fields, a string where a number goes, not JSON) does not end it."""
    from kdtree_cli.tui.sources.ssh_host import _is_run_end

    end = {"event": "run_end", "t": 1.0, "tokens": 5, "decode_s": 1.0, "tokens_per_s": 5.0, "tau": 2.0, "rounds": 3}
    assert _is_run_end(json.dumps(end))
    assert not _is_run_end(json.dumps({"event": "run_end"}))
    assert not _is_run_end(json.dumps({**end, "rounds": "3"}))
    assert not _is_run_end('{"event": "run_end", ')
    assert not _is_run_end(json.dumps({**end, "event": "round"}))
