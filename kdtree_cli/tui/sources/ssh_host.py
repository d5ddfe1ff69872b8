"""A run on a remote host: `kdtree run ARGS --metrics -` started there by
`remote.exec.stream_kdtree(host, args, on_stderr=...)`, which yields the remote stdout lines
as they arrive (the remote stderr goes to the log, not over the screen).

When the connection drops before `run_end` (remote.errors.ConnectionLostError or
UnreachableError, or any non-kdtree exception from the transport), the source reconnects
with exponential backoff. Errors a retry cannot fix (unknown host key, a host missing from
the inventory, no deployed release, the run itself exiting non-zero) end the source with
their message instead. A stream that ends cleanly ends the source: the remote run is over.

Reconnecting calls stream_kdtree again with the same arguments. If the new stream replays
the run from its first line (as a remote `tail -F` of the run's metrics file would), the
lines this monitor already has are skipped, so nothing is counted twice; a stream that
starts with a different first line is a new run (a fresh run_start) and is read whole.
"""

from __future__ import annotations

import json
from typing import Callable, Iterable, Sequence

from python_engine.errors import KdtreeError

from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.backoff import Backoff
from kdtree_cli.tui.sources.base import EventSource

StreamFn = Callable[..., Iterable[str]]  # (host, args, *, on_stderr) -> stdout lines


def remote_run_args(run_args: Sequence[str]) -> list[str]:
    """The kdtree subcommand the host runs for `kdtree tui --host H -- ARGS`."""
    return ["run", *run_args, "--metrics", "-"]


def _import_stream_fn() -> StreamFn:
    # remote/ pulls in fabric when it connects: import it only when a host is monitored
    from remote.exec import stream_kdtree

    return stream_kdtree


def is_transient(exc: BaseException) -> bool:
    """Worth reconnecting after: a dropped or unreachable connection, or a transport error
    that is not one of kdtree's own (those carry a message a person must act on)."""
    try:
        from remote.errors import ConnectionLostError, UnreachableError
    except ImportError:
        pass
    else:
        if isinstance(exc, (ConnectionLostError, UnreachableError)):
            return True
    return not isinstance(exc, KdtreeError)


def _is_run_end(line: str) -> bool:
    try:
        return json.loads(line).get("event") == "run_end"
    except (ValueError, AttributeError):
        return False


class HostSource(EventSource):
    kind = "host"

    def __init__(self, host: str, args: Sequence[str], *, stream_fn: StreamFn | None = None,
                 backoff: Backoff | None = None, max_attempts: int | None = None, **kw):
        super().__init__(**kw)
        self.host = host
        self.args = list(args)  # the `kdtree run` arguments
        self.remote_args = remote_run_args(self.args)
        self._stream_fn = stream_fn
        self.backoff = backoff or Backoff(jitter=0.1)
        self.max_attempts = max_attempts  # None: keep trying until the user quits
        self.connections = 0  # streams opened, for the status line and the tests

    def describe(self) -> str:
        return f"host {self.host}: kdtree " + " ".join(self.remote_args)

    def _stderr(self, line: str) -> None:
        if line.strip():
            self.note("info", f"{self.host} stderr: {line.rstrip()}")

    def produce(self) -> None:
        try:
            stream_fn = self._stream_fn or _import_stream_fn()
        except ImportError as exc:
            self.status(SourceState.FAILED, f"cannot stream from {self.host}: remote/ is not "
                        f"available ({exc}); install the remote extra (pip install -e '.[remote]')")
            return
        first_line: str | None = None  # of the run we are reading, to recognise a replay
        delivered = 0  # lines of that run handed on so far
        attempts = 0
        while not self.stopping:
            attempts += 1
            self.connections += 1
            self.status(SourceState.STARTING if attempts == 1 else SourceState.RECONNECTING,
                        f"connecting to {self.host}" + (f" (attempt {attempts})" if attempts > 1 else ""))
            got = 0
            skip = 0
            saw_end = False
            failure: BaseException | None = None
            try:
                for line in stream_fn(self.host, self.remote_args, on_stderr=self._stderr):
                    if self.stopping:
                        return
                    if not line.strip():
                        continue
                    if got == 0:
                        self.status(SourceState.STREAMING, f"connected to {self.host}")
                        if first_line is not None and line == first_line:
                            skip = delivered  # the same run from its start: skip what we have
                            if skip:
                                self.note("info", f"reconnected to {self.host}; skipping "
                                          f"{skip} lines already shown")
                        else:
                            first_line, delivered = line, 0
                    got += 1
                    if skip:
                        skip -= 1
                        continue
                    self.emit(line)
                    delivered += 1
                    if '"run_end"' in line and _is_run_end(line):
                        saw_end = True
            except Exception as exc:  # shown to the user either way; retried if transient
                failure = exc
            if self.stopping:
                return
            if saw_end or failure is None:
                self.status(SourceState.ENDED, f"the run on {self.host} " + (
                    "ended" if saw_end else "exited without run_end"))
                return
            reason = f"{type(failure).__name__}: {failure}"
            if not is_transient(failure):
                self.status(SourceState.DROPPED, reason)
                return
            if got:
                self.backoff.reset()
            if self.max_attempts is not None and attempts >= self.max_attempts:
                self.status(SourceState.DROPPED, f"{reason}; gave up after {attempts} attempts")
                return
            delay = self.backoff.next_delay()
            self.status(SourceState.RECONNECTING, f"{reason}; retrying in {delay:.1f} s")
            if self.wait(delay):
                return
