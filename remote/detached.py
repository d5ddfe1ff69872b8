"""A `kdtree run` on a host that outlives the connection which started it: the base of
`kdtree tui --host`.

    for chunk in stream_run("ct200", ["--model", "m", ...], run_id=rid, offset=0, on_stderr=print):
        ...   # the run's metrics file, as raw bytes, from byte `offset` on

Each call connects, starts the run unless the run id is already there (release_tool
`start_run`: its own session, metrics to <dir>/runs/<run id>/metrics.jsonl, its output to
run.log, its exit status recorded by a watcher), then streams the metrics file from
`offset` until the run ends. A caller that lost its connection calls again with the same
run id and the offset it got to: the run is not started twice, and nothing is sent twice.
The run uses the release that was current when it started, even if a deploy switches
`current` meanwhile. A run that exits non-zero raises RemoteCommandError with the end of
its run.log; connection problems raise connect()'s errors or ConnectionLostError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from remote import channel
from remote.connection import connect
from remote.errors import RemoteCommandError
from remote.exec import host_config, prepare_current
from remote.inventory import HostConfig, Inventory
from remote.pyenv import release_python
from remote.releases import call_tool, tool_command
from remote.shell import q, rpath
from remote.steps import kdtree_command

RUNS_DIR = "runs"


def run_dir(layout_dir: str, run_id: str) -> str:
    return rpath(layout_dir, RUNS_DIR, run_id)


def stream_run(host: str | HostConfig, args: Sequence[str], *, run_id: str, offset: int,
               on_stderr: Callable[[str], None], inventory: Inventory | None = None,
               accept_new_host_key: bool = False) -> Iterator[bytes]:
    cfg = host_config(host, inventory)
    conn = connect(cfg, accept_new_host_key=accept_new_host_key)
    try:
        current, _python, paths = prepare_current(conn, cfg)
        folder = run_dir(paths.dir, run_id)
        release = channel.run_checked(conn, f"cd {q(current)} && pwd -P", what="resolving current").text.strip()
        python = release_python(release) if cfg.venv else paths.python
        metrics = rpath(folder, "metrics.jsonl")
        command = kdtree_command(cfg, paths, python, release, ["run", *args, "--metrics", metrics])
        started = call_tool(conn, paths.python, "start_run", {"dir": folder, "command": command},
                            what="starting the run")
        if started["started"]:
            on_stderr(f"started run {run_id} in {folder} (release {release.rsplit('/', 1)[-1]})")
        yield from channel.iter_chunks(
            conn, tool_command(paths.python, "follow", {"dir": folder, "offset": offset}),
            on_stderr=on_stderr, what=f"following run {run_id}")
        end = call_tool(conn, paths.python, "run_status", {"dir": folder}, what="reading the run's status")
        if end["status"] != 0:
            said = (f"exited with status {end['status']}" if end["status"] is not None
                    else "ended without an exit status (killed, or the host restarted)")
            tail = end["log_tail"].strip().splitlines()[-12:]
            raise RemoteCommandError(
                f"{cfg.name}: `kdtree run` {said}; the end of {rpath(folder, 'run.log')}:\n"
                + "\n".join(tail), end["status"])
    finally:
        conn.close()


def stop_run(host: str | HostConfig, run_id: str, *, inventory: Inventory | None = None) -> bool:
    """Stop the run (SIGTERM to its process group) unless it has ended; True if stopped."""
    cfg = host_config(host, inventory)
    conn = connect(cfg)
    try:
        _current, _python, paths = prepare_current(conn, cfg)
        return call_tool(conn, paths.python, "stop_run", {"dir": run_dir(paths.dir, run_id)},
                         what="stopping the run")["stopped"]
    finally:
        conn.close()
