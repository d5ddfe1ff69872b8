"""`kdtree tui --host` against the real sshd: the monitor's host source starts the run
detached, the connection is cut mid-run (through a proxy the test controls), and the source
reconnects and resumes from the last byte it showed. The oracle is the metrics file the
run wrote on the "remote" (this machine's disk): the lines shown must be exactly its lines,
once each, in order; and the run must have started exactly once."""

from __future__ import annotations

import threading
import time

import pytest

from remote import detached

from conftest import remote_dir, run_deploy
from kdtree_proxy import CuttableProxy

pytest.importorskip("textual")  # the source posts textual messages

from kdtree_cli.tui.messages import SourceBatch, SourceState, SourceStatus  # noqa: E402
from kdtree_cli.tui.sources.backoff import Backoff  # noqa: E402
from kdtree_cli.tui.sources.ssh_host import HostSource  # noqa: E402


class Runs:
    """remote.detached bound to one HostConfig (the source is given host names)."""

    def __init__(self, host):
        self.host = host

    def stream(self, _name, args, **kw):
        return detached.stream_run(self.host, args, **kw)

    def stop(self, _name, run_id):
        detached.stop_run(self.host, run_id)


class Collector:
    """Stands in for the app: takes the source's messages and acknowledges its batches."""

    def __init__(self):
        self.lines: list[str] = []
        self.states: list[tuple[SourceState, str]] = []
        self.done = threading.Event()
        self.source = None

    def post(self, message):
        if isinstance(message, SourceBatch):
            self.lines.extend(message.lines)
            self.source.ack()
        elif isinstance(message, SourceStatus):
            self.states.append((message.state, message.detail))
            if message.state in (SourceState.ENDED, SourceState.DROPPED, SourceState.FAILED):
                self.done.set()

    def watch(self, source):
        self.source = source
        source.start(self.post)
        return self


def wait(condition, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def proxied_host(sshd, host_factory, project, tmp_path):
    proxy = CuttableProxy(sshd.port)
    known = tmp_path / "known_hosts_both"
    known.write_text(sshd.known_hosts_entry() + sshd.known_hosts_entry(proxy.port))
    config = sshd.write_ssh_config(tmp_path / "ssh_config_proxy", port=proxy.port, known_hosts=known)
    direct = host_factory()
    deployed = run_deploy(direct, project, tmp_path / "results", build=False, test=False)
    assert deployed.ok, deployed.error
    yield host_factory(dir=direct.dir, ssh_config=str(config), connect_timeout=3), proxy
    proxy.close()


def test_cut_mid_run_resumes_from_the_last_byte(sshd, proxied_host):
    host, proxy = proxied_host
    source = HostSource("sshd-test", ["--rounds", "60", "--delay", "0.05"], runs=Runs(host),
                        backoff=Backoff(initial_s=0.2, cap_s=0.5))
    seen = Collector().watch(source)
    try:
        wait(lambda: len(seen.lines) >= 10, what="the first lines")
        proxy.cut()  # RST on every connection through the proxy, mid-run
        assert seen.done.wait(60), seen.states
    finally:
        source.stop()
    states = [s for s, _ in seen.states]
    assert states[-1] == SourceState.ENDED, seen.states
    assert SourceState.RECONNECTING in states and source.connections >= 2
    rdir = remote_dir(sshd, host)
    written = (rdir / "runs" / source.run_id / "metrics.jsonl").read_text().splitlines()
    assert len(written) == 62  # run_start, 60 rounds, run_end
    assert seen.lines == written  # each line once, in order: the oracle is the run's own file
    assert (rdir / "run-starts.log").read_text().count("\n") == 1  # started exactly once
    assert (rdir / "runs" / source.run_id / "exit_status").read_text() == "0\n"


def test_a_failing_run_ends_the_source_with_its_log(sshd, proxied_host):
    host, _proxy = proxied_host
    source = HostSource("sshd-test", ["--rounds", "3", "--delay", "0.01", "--fail"], runs=Runs(host))
    seen = Collector().watch(source)
    try:
        assert seen.done.wait(30)
    finally:
        source.stop()
    state, detail = seen.states[-1]
    assert state == SourceState.DROPPED and source.connections == 1  # not retried
    assert "exited with status 4" in detail and "stand-in engine: out of memory" in detail
    assert len(seen.lines) == 4  # run_start and 3 rounds, all shown before the failure


def test_quitting_the_monitor_stops_the_remote_run(sshd, proxied_host):
    host, _proxy = proxied_host
    source = HostSource("sshd-test", ["--rounds", "1000", "--delay", "0.05"], runs=Runs(host))
    seen = Collector().watch(source)
    wait(lambda: len(seen.lines) >= 3, what="the run to be going")
    source.stop()
    folder = remote_dir(sshd, host) / "runs" / source.run_id
    pid = int((folder / "pid").read_text())

    def gone():
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] == "Z"

    wait(gone, timeout=10, what="the run's watcher to end")
    size = (folder / "metrics.jsonl").stat().st_size
    time.sleep(0.3)
    assert (folder / "metrics.jsonl").stat().st_size == size  # nothing writes it any more
    assert not (folder / "exit_status").exists()  # stopped, not finished
