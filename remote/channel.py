"""Running one remote command on an exec channel of an open Connection.

We drive paramiko channels directly (not `Connection.run`): we need stdout split into
lines as they arrive (to prefix them with the host name, and for stream_kdtree), stdin fed
from a byte stream (tar uploads), and a lost connection told apart from a failed command.

A command whose connection drops raises ConnectionLostError; one that exits non-zero
returns its status (the caller decides whether that is an error).
"""

from __future__ import annotations

import codecs
import select
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import paramiko
from fabric import Connection

from remote.errors import ConnectionLostError, RemoteCommandError

CHUNK = 64 * 1024
POLL_S = 0.2
# what paramiko raises when the socket under a transport is dead
DEAD_LINK = (EOFError, OSError, paramiko.SSHException)


@dataclass
class CommandResult:
    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class LineSplitter:
    """Bytes in, complete text lines out (UTF-8, bad bytes replaced, '\\r\\n' -> '')."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = ""

    def feed(self, data: bytes) -> list[str]:
        text = self._partial + self._decoder.decode(data)
        *lines, self._partial = text.split("\n")
        return [line.rstrip("\r") for line in lines]

    def flush(self) -> list[str]:
        text = self._partial + self._decoder.decode(b"", final=True)
        self._partial = ""
        return [text.rstrip("\r")] if text else []


def open_exec(conn: Connection, command: str):
    """Start command on a new channel of conn's open transport. Never (re)connects: a
    deploy that lost its connection has lost its lock too, and must stop, not carry on
    over a fresh connection (fabric's conn.open() would silently reconnect)."""
    transport = conn.transport
    if transport is None or not transport.is_active():
        raise ConnectionLostError(f"{conn.host}: SSH connection lost (closed before starting a command)")
    try:
        chan = transport.open_session(timeout=30)
    except paramiko.ChannelException as exc:  # the server said no (MaxSessions, policy)
        raise RemoteCommandError(f"{conn.host}: the server refused a new SSH channel: {exc}") from None
    except DEAD_LINK as exc:  # the socket is dead
        raise ConnectionLostError(f"{conn.host}: SSH connection lost ({type(exc).__name__} {exc})".rstrip()) from None
    try:
        chan.exec_command(command)
    except DEAD_LINK as exc:
        close_quietly(chan)
        raise ConnectionLostError(f"{conn.host}: SSH connection lost ({type(exc).__name__} {exc})".rstrip()) from None
    return chan


def close_quietly(chan) -> None:
    """Close a channel; on a dead connection closing it raises, and there is nothing to do."""
    try:
        chan.close()
    except DEAD_LINK:
        pass


def wait_readable(chan) -> None:
    """Block until the channel has output, an exit status, or POLL_S has passed. After the
    remote's EOF the channel's poll pipe stays readable for good, so select() would spin
    until the exit status arrives: wait on the status event then instead."""
    if chan.eof_received:
        chan.status_event.wait(POLL_S)
    else:
        select.select([chan], [], [], POLL_S)


def _lost(conn: Connection, what: str) -> ConnectionLostError:
    return ConnectionLostError(f"{conn.host}: SSH connection lost during {what}")


def _drain(chan, on_out, on_err) -> bool:
    got_out = _drain_stream(chan.recv_ready, chan.recv, on_out)
    got_err = _drain_stream(chan.recv_stderr_ready, chan.recv_stderr, on_err)
    return got_out or got_err


def _drain_stream(ready, recv, sink) -> bool:
    """Pass what one of the channel's streams holds now to sink; whether there was any."""
    got = False
    while ready():
        data = recv(CHUNK)
        if not data:
            break
        sink(data)
        got = True
    return got


def _finish(conn: Connection, chan, what: str) -> int:
    status = chan.recv_exit_status() if chan.exit_status_ready() else -1
    transport_alive = conn.transport is not None and conn.transport.is_active()
    close_quietly(chan)
    if status == -1:
        if not transport_alive:
            raise _lost(conn, what)
        raise RemoteCommandError(f"{conn.host}: {what} was killed (no exit status)", None)
    return status


def pump(conn: Connection, command: str, *, on_out: Callable[[bytes], None],
         on_err: Callable[[bytes], None], stdin: Iterable[bytes] | None = None,
         what: str = "a remote command", timeout: float | None = None) -> int:
    """Run command, feeding stdin (then EOF) and handing output chunks to the callbacks as
    they arrive; returns the exit status."""
    chan = open_exec(conn, command)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        if stdin is not None:
            for block in stdin:
                _drain(chan, on_out, on_err)  # keep the remote from blocking on its output
                try:
                    chan.sendall(block)
                except DEAD_LINK as exc:
                    if conn.transport is None or not conn.transport.is_active():
                        raise _lost(conn, what) from exc
                    break  # the command stopped reading (it failed): its status says why
        try:
            chan.shutdown_write()
        except DEAD_LINK:
            pass  # the remote already closed; its status tells the story
        while True:
            wait_readable(chan)
            got = _drain(chan, on_out, on_err)
            if chan.exit_status_ready() and not got and not (chan.recv_ready() or chan.recv_stderr_ready()):
                break
            if chan.closed and not got:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise RemoteCommandError(f"{conn.host}: {what} timed out after {timeout:.0f}s")
        return _finish(conn, chan, what)
    finally:
        close_quietly(chan)


def run(conn: Connection, command: str, *, stdin: bytes | Iterable[bytes] | None = None,
        what: str = "a remote command", timeout: float | None = 120) -> CommandResult:
    """Run command and capture its output (for short commands with small output)."""
    out, err = bytearray(), bytearray()
    if isinstance(stdin, (bytes, bytearray)):
        stdin = [bytes(stdin)]
    code = pump(conn, command, on_out=out.extend, on_err=err.extend, stdin=stdin,
                what=what, timeout=timeout)
    return CommandResult(code, bytes(out), bytes(err))


def run_checked(conn: Connection, command: str, *, what: str, **kwargs) -> CommandResult:
    """run(), raising RemoteCommandError with the remote's stderr when it fails."""
    result = run(conn, command, what=what, **kwargs)
    if result.exit_code != 0:
        detail = (result.err_text.strip() or result.text.strip())[-2000:]
        raise RemoteCommandError(
            f"{conn.host}: {what} failed (exit {result.exit_code}): {detail}", result.exit_code
        )
    return result


def stream(conn: Connection, command: str, *, on_line: Callable[[str, bool], None],
           what: str = "a remote command") -> int:
    """Run command, calling on_line(text, is_stderr) per complete line as it arrives."""
    splitters = (LineSplitter(), LineSplitter())

    def feed(is_err: bool):
        def handle(data: bytes) -> None:
            for line in splitters[is_err].feed(data):
                on_line(line, is_err)
        return handle

    try:
        return pump(conn, command, on_out=feed(False), on_err=feed(True), what=what)
    finally:
        for is_err, splitter in enumerate(splitters):
            for line in splitter.flush():
                on_line(line, bool(is_err))


def iter_chunks(conn: Connection, command: str, *, on_stderr: Callable[[str], None],
                what: str = "a remote command") -> Iterator[bytes]:
    """Yield the command's stdout as raw byte chunks as they arrive; stderr lines go to
    on_stderr. Raises RemoteCommandError after the last chunk when the command exits
    non-zero. Closing the generator early closes the channel (the remote command sees EOF)."""
    chan = open_exec(conn, command)
    err = LineSplitter()
    pending: list[bytes] = []
    try:
        try:
            chan.shutdown_write()
        except DEAD_LINK:
            pass
        while True:
            wait_readable(chan)
            got = _drain(chan, pending.append,
                         lambda data: [on_stderr(line) for line in err.feed(data)])
            while pending:
                yield pending.pop(0)
            if chan.exit_status_ready() and not got and not (chan.recv_ready() or chan.recv_stderr_ready()):
                break
            if chan.closed and not got:
                break
        for line in err.flush():
            on_stderr(line)
        code = _finish(conn, chan, what)
        if code != 0:
            raise RemoteCommandError(f"{conn.host}: {what} exited with status {code}", code)
    finally:
        close_quietly(chan)


def iter_lines(conn: Connection, command: str, *, on_stderr: Callable[[str], None],
               what: str = "a remote command") -> Iterator[str]:
    """Yield the command's stdout lines as they arrive (see iter_chunks)."""
    out = LineSplitter()
    chunks = iter_chunks(conn, command, on_stderr=on_stderr, what=what)
    try:
        for chunk in chunks:
            yield from out.feed(chunk)
    except RemoteCommandError:
        yield from out.flush()  # the last line before a failure still counts
        raise
    finally:
        chunks.close()
    yield from out.flush()
