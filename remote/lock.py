"""The per-host deploy lock: two deploys to one host never interleave.

The lock is an flock(2) on <dir>/.deploy.lock held by a small remote process (release_tool
`lock`) that lives exactly as long as a dedicated exec channel: closing the channel, or
losing the SSH connection, ends it and frees the lock, so a lock cannot go stale. A second
deploy waits (printing who holds it, from .deploy.lock.owner) up to the host's
lock_timeout, then fails with LockBusyError.

A link that dies silently (no RST, so sshd notices nothing) is covered by a heartbeat:
we write one byte every HEARTBEAT_S seconds, and the holder lets go after STALE_S seconds
without one.
"""

from __future__ import annotations

import getpass
import os
import socket
import threading
import time
from typing import Callable

from fabric import Connection

from remote import channel
from remote.errors import ConnectionLostError, LockBusyError, RemoteCommandError
from remote.releases import tool_command

HEARTBEAT_S = 5.0
STALE_S = 90.0


def owner_text() -> str:
    return (f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()} "
            f"since {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")


class RemoteLock:
    def __init__(self, conn: Connection, python: str, path: str, *, wait_s: float,
                 on_wait: Callable[[str], None] = lambda owner: None):
        self.conn = conn
        self.python = python
        self.path = path
        self.wait_s = wait_s
        self.on_wait = on_wait
        self._chan = None

    def acquire(self) -> None:
        args = {"path": self.path, "owner": owner_text(), "wait": self.wait_s, "stale": STALE_S}
        chan = channel.open_exec(self.conn, tool_command(self.python, "lock", args))
        lines = channel.LineSplitter()
        err = bytearray()
        try:
            while True:
                channel.wait_readable(chan)
                while chan.recv_stderr_ready():
                    err.extend(chan.recv_stderr(channel.CHUNK))
                data = chan.recv(channel.CHUNK) if chan.recv_ready() else b""
                for line in lines.feed(data):
                    if line == "LOCKED":
                        self._chan, chan = chan, None
                        self._start_heartbeat()
                        return
                    if line.startswith("WAIT "):
                        self.on_wait(line[5:])
                    elif line.startswith("BUSY "):
                        raise LockBusyError(
                            f"{self.conn.host}: another deploy ({line[5:]}) held {self.path} for "
                            f"more than {self.wait_s:.0f}s (lock_timeout); try again later"
                        )
                if (chan.exit_status_ready() or chan.closed) and not data and not chan.recv_ready():
                    alive = self.conn.transport is not None and self.conn.transport.is_active()
                    if not alive:
                        raise ConnectionLostError(f"{self.conn.host}: SSH connection lost while taking the deploy lock")
                    raise RemoteCommandError(
                        f"{self.conn.host}: could not take the deploy lock {self.path}: "
                        f"{err.decode('utf-8', 'replace').strip()[-1000:] or 'no message'}"
                    )
        finally:
            if chan is not None:
                channel.close_quietly(chan)

    def _start_heartbeat(self) -> None:
        self._stop = threading.Event()
        chan, stop = self._chan, self._stop

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                try:
                    chan.sendall(b".")
                except channel.DEAD_LINK:
                    return  # the connection is gone; so is the lock

        threading.Thread(target=beat, name="kdtree-lock-heartbeat", daemon=True).start()

    def release(self) -> None:
        chan, self._chan = self._chan, None
        if chan is None:
            return
        self._stop.set()
        try:
            chan.shutdown_write()  # EOF on the holder's stdin: it exits, the flock goes
            deadline = time.monotonic() + 5
            while not chan.exit_status_ready() and time.monotonic() < deadline:
                time.sleep(0.02)
        except channel.DEAD_LINK:
            pass  # connection gone: the remote side has let go already
        finally:
            channel.close_quietly(chan)

    def __enter__(self) -> "RemoteLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
