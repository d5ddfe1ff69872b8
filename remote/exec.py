"""Run a `kdtree` subcommand on a host's current release and get its output back as it is
printed: the base of `kdtree run --host` and `kdtree test --host` (the TUI's runs on a host
are detached: detached.py).

    for line in stream_kdtree("ct200", ["run", "--events", "-", ...]):
        ...   # stdout lines, without the newline; metrics events are JSON lines

The remote command runs as `python -m kdtree_cli ARGS` in <dir>/current, with the same
environment as a deploy's steps (steps.py), using the release's own environment
(current/.venv/bin/python) when the host has venv = true. Arguments are passed exactly
(each one quoted).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

from remote import channel
from remote.connection import connect
from remote.errors import RemoteEnvError
from remote.inventory import HostConfig, Inventory, load_inventory
from remote.manifest import MANIFEST_NAME
from remote.output import ConsoleReporter, Reporter
from remote.paths import resolve_paths
from remote.pyenv import release_python
from remote.shell import q, rpath
from remote.steps import kdtree_command


def host_config(host: str | HostConfig, inventory: Inventory | None) -> HostConfig:
    if isinstance(host, HostConfig):
        return host
    return (inventory or load_inventory()).get(host)


def prepare_current(conn, cfg: HostConfig):
    """The current release, the Python that runs kdtree there, and the resolved paths."""
    paths = resolve_paths(conn, cfg)
    current = paths.layout.current
    python = release_python(current) if cfg.venv else paths.python
    check = f"test -f {q(rpath(current, MANIFEST_NAME))}"
    if cfg.venv:
        check += f" && test -x {q(python)}"
    if channel.run(conn, check, what="looking for current").exit_code != 0:
        raise RemoteEnvError(f"{cfg.name}: no deployed release with its environment in {paths.dir} "
                             f"(no {current}, or a release made before environments were per "
                             f"release); run `kdtree deploy {cfg.name}` first")
    return current, python, paths


def stream_kdtree(host: str | HostConfig, args: list[str], *, inventory: Inventory | None = None,
                  accept_new_host_key: bool = False,
                  on_stderr: Callable[[str], None] | None = None) -> Iterator[str]:
    """Yield the stdout lines of `kdtree ARGS` run on host, as they arrive. stderr lines
    go to on_stderr (default: this process's stderr, prefixed with the host name).
    Raises RemoteCommandError after the last line if the command exits non-zero, and the
    connection errors of connect(). Closing the iterator early closes the connection."""
    cfg = host_config(host, inventory)
    if on_stderr is None:
        def on_stderr(line: str) -> None:
            print(f"[{cfg.name}] {line}", file=sys.stderr, flush=True)
    conn = connect(cfg, accept_new_host_key=accept_new_host_key)
    try:
        current, python, paths = prepare_current(conn, cfg)
        command = kdtree_command(cfg, paths, python, current, list(args))
        yield from channel.iter_lines(conn, command, on_stderr=on_stderr,
                                      what=f"`kdtree {' '.join(args)}`")
    finally:
        conn.close()


def run_kdtree(host: str | HostConfig, args: list[str], *, inventory: Inventory | None = None,
               accept_new_host_key: bool = False, reporter: Reporter | None = None) -> int:
    """Run `kdtree ARGS` on host, printing `[host] line` as lines arrive; returns the
    remote exit status (connection problems raise)."""
    cfg = host_config(host, inventory)
    reporter = reporter or ConsoleReporter()
    step = args[0] if args else "kdtree"
    conn = connect(cfg, accept_new_host_key=accept_new_host_key)
    try:
        current, python, paths = prepare_current(conn, cfg)
        command = kdtree_command(cfg, paths, python, current, list(args))
        return channel.stream(conn, command, what=f"`kdtree {' '.join(args)}`",
                              on_line=lambda text, is_err: reporter.line(cfg.name, step, text, is_err))
    finally:
        conn.close()
