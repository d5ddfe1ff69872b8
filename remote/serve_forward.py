"""`kdtree serve --host H`: run the server on a deployed host's current release (as
`kdtree run --host` runs there: exec.py) and forward its port to this machine over the
same SSH connection (fabric's forward_local), so clients here use http://127.0.0.1:PORT.
The forward opens once the server says it listens (a connection forwarded before that
would be refused, and would end fabric's tunnel). The remote server binds its loopback
(serve's default), so nothing is exposed on the host's network; its output comes back
prefixed with the host name."""

from __future__ import annotations

import sys
import threading

from python_engine.serve import READY_PREFIX
from remote import channel
from remote.connection import connect
from remote.exec import host_config, prepare_current
from remote.inventory import HostConfig, Inventory
from remote.output import ConsoleReporter, Reporter
from remote.steps import kdtree_command

FORWARD_CLOSE_S = 10.0


def serve_on_host(host: str | HostConfig, args: list[str], port: int, *, local_port: int | None = None,
                  inventory: Inventory | None = None, reporter: Reporter | None = None) -> int:
    """Run `kdtree serve ARGS` on host with its port forwarded to local_port (default: the
    same number) until it exits; its exit status."""
    cfg = host_config(host, inventory)
    reporter = reporter or ConsoleReporter()
    local = local_port or port
    conn = connect(cfg)
    listening, finished = threading.Event(), threading.Event()

    def forward() -> None:
        listening.wait()
        if finished.is_set():
            return
        with conn.forward_local(local_port=local, remote_port=port, remote_host="127.0.0.1",
                                local_host="127.0.0.1"):
            print(f"{cfg.name}: the server answers here at http://127.0.0.1:{local}/v1 (its port {port}, "
                  "forwarded over SSH)", file=sys.stderr, flush=True)
            finished.wait()

    def on_line(text: str, is_err: bool) -> None:
        reporter.line(cfg.name, "serve", text, is_err)
        if text.startswith(READY_PREFIX):
            listening.set()

    forwarder = threading.Thread(target=forward, name="kdtree-serve-forward", daemon=True)
    try:
        current, python, paths = prepare_current(conn, cfg)
        command = kdtree_command(cfg, paths, python, current, ["serve", *args])
        forwarder.start()
        return channel.stream(conn, command, what="`kdtree serve`", on_line=on_line)
    finally:
        finished.set()
        listening.set()
        if forwarder.is_alive():
            forwarder.join(timeout=FORWARD_CLOSE_S)
        conn.close()
