"""`kdtree ...` on a host: stream_kdtree / run_kdtree (the base of `kdtree test --host`,
`kdtree run --host` and the TUI's SSH source). The synthetic project's kdtree_cli echoes
its arguments and environment, so what arrived can be compared with what was sent."""

from __future__ import annotations

import dataclasses
import json
import secrets
import sys
import time
import uuid

import numpy as np
import pytest

from remote.errors import RemoteCommandError, RemoteEnvError
from remote.exec import run_kdtree, stream_kdtree
from remote.inventory import HostConfig
from remote.output import CollectingReporter
from remote.serve_forward import serve_on_host

from conftest import make_project, run_deploy
from kdtree_sshd import ALIAS

ODD_ARGS = ["a b", "$(touch PWNED)", "`touch PWNED2`", "'q'", '"dq"', "$HOME", "*", "ünï", "",
            "x;y|z&", "--", "-k", "new\nline"]


@pytest.fixture(scope="module")
def deployed(sshd, tmp_path_factory) -> HostConfig:
    seed = secrets.randbits(32)
    print(f"[seed] deployed fixture: KDTREE_SEED={seed}")
    base = tmp_path_factory.mktemp("exec")
    project = make_project(base / "project", np.random.default_rng(seed))
    host = HostConfig(name="sshd-test", ssh=ALIAS, ssh_config=str(sshd.ssh_config),
                      dir=f"~/kd-exec-{uuid.uuid4().hex[:8]}", python=sys.executable, venv=False,
                      carry=(), connect_timeout=5, source="tests/remote")
    result = run_deploy(host, project, base / "results", build=False, test=False)
    assert result.ok, result.error
    return host


def test_arguments_arrive_exactly(sshd, deployed):
    lines = list(stream_kdtree(deployed, ["echo-args", *ODD_ARGS]))
    assert len(lines) == 1 and json.loads(lines[0]) == ODD_ARGS
    assert list(sshd.home.rglob("PWNED*")) == []


def test_runs_in_current_with_the_step_environment(sshd, deployed):
    (line,) = list(stream_kdtree(deployed, ["whoami"]))
    info = json.loads(line)
    current = (sshd.home / deployed.dir[2:] / "current").resolve()
    assert info["argv"] == ["whoami"] and info["cwd"] == str(current)
    assert info["env"]["KDTREE_HOST"] == "sshd-test"
    assert info["env"]["PYTHONPATH"] == str(sshd.home / deployed.dir[2:] / "current")


def test_lines_stream_while_the_command_runs(deployed):
    arrivals = []
    for line in stream_kdtree(deployed, ["slow", "1.0"]):
        arrivals.append((line, time.monotonic()))
    assert [a[0] for a in arrivals] == ["first", "second"]
    assert arrivals[1][1] - arrivals[0][1] > 0.7  # "first" came a second before the end


def test_exit_status_and_stderr(deployed):
    errors = []
    got = []
    with pytest.raises(RemoteCommandError) as err:
        for line in stream_kdtree(deployed, ["fail", "3"], on_stderr=errors.append):
            got.append(line)
    assert got == ["out line"] and errors == ["err line"] and err.value.exit_code == 3

    reporter = CollectingReporter()
    assert run_kdtree(deployed, ["fail", "5"], reporter=reporter) == 5
    assert [(t, e) for (_h, _s, t, e) in reporter.lines] == [("out line", False), ("err line", True)]


def test_closing_the_stream_early_is_clean(deployed):
    stream = stream_kdtree(deployed, ["slow", "5"])
    started = time.monotonic()
    assert next(stream) == "first"
    stream.close()  # the connection closes; we do not wait for the remote's 5 s
    assert time.monotonic() - started < 3


def test_no_release_yet_says_deploy_first(deployed):
    fresh = dataclasses.replace(deployed, dir=f"~/kd-never-{uuid.uuid4().hex[:6]}")
    with pytest.raises(RemoteEnvError, match="run `kdtree deploy sshd-test` first"):
        list(stream_kdtree(fresh, ["whoami"]))


def test_serve_on_host_forwards_its_port(deployed):
    """`kdtree serve --host`: the host's server (a stand-in here) answers on a local port
    through the SSH connection, and its exit status comes back once it stops."""
    import socket
    import threading

    import httpx

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    remote_port, local_port = free_port(), free_port()  # the "host" is this machine: two ports
    args = ["--model", "m dir", "--port", str(remote_port)]
    reporter = CollectingReporter()
    status: list[int] = []
    runner = threading.Thread(target=lambda: status.append(
        serve_on_host(deployed, args, remote_port, local_port=local_port, reporter=reporter)))
    runner.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = httpx.get(f"http://127.0.0.1:{local_port}/health", timeout=2)
            break
        except httpx.TransportError:
            assert runner.is_alive() and time.monotonic() < deadline, reporter.lines
            time.sleep(0.1)
    assert answer.json() == {"argv": ["serve", *args]}
    httpx.get(f"http://127.0.0.1:{local_port}/stop", timeout=5)
    runner.join(timeout=30)
    assert status == [0]
    assert (f"kdtree serve: listening on http://127.0.0.1:{remote_port}", True) in [
        (t, e) for (_h, _s, t, e) in reporter.lines]
