"""A run on a remote host (`kdtree tui --host H -- ARGS`), watched over SSH.

The run is started once, detached on the host (remote/detached.py): `kdtree run ARGS
--metrics <dir>/runs/<run id>/metrics.jsonl`, in its own session, so a dropped connection
does not stop it. The source then tails that file from a byte offset: each connection asks
for the bytes from the end of the last complete line it handed on, so after a drop the
monitor resumes exactly where it was, with nothing lost and nothing counted twice. The run
id is made here, so a reconnection that repeats the start finds the run already going.

Only network failures are retried (remote errors marked transient: a lost or refused
connection, a timeout; raw socket errors), with exponential backoff and at most
MAX_ATTEMPTS failures in a row (a stream that delivered something resets the count).
Anything else ends the source with its message: an unknown host key, failed
authentication, a host missing from the inventory, no deployed release, the run exiting
non-zero, or a bug. Quitting the monitor stops the remote run (best effort: when the host
cannot be reached then, the run goes on and its metrics stay in the run's folder).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Iterable, Protocol, Sequence

from python_engine import events
from python_engine.errors import KdtreeError

from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.backoff import Backoff
from kdtree_cli.tui.sources.base import EventSource

MAX_ATTEMPTS = 8  # failures in a row; with the default backoff about 1.5 minutes of trying
STOP_WAIT_S = 3.0  # how long quitting waits for the remote run to be stopped


class RemoteRuns(Protocol):
    """What the source needs from the remote side (remote/detached.py; fakes in tests)."""

    def stream(self, host: str, args: Sequence[str], *, run_id: str, offset: int,
               on_stderr) -> Iterable[bytes]: ...

    def stop(self, host: str, run_id: str) -> None: ...


class _DetachedRuns:
    """remote.detached, imported only when a host is monitored (it pulls in fabric)."""

    def __init__(self) -> None:
        import importlib

        self._mod = importlib.import_module("remote.detached")

    def stream(self, host, args, *, run_id, offset, on_stderr):
        return self._mod.stream_run(host, args, run_id=run_id, offset=offset, on_stderr=on_stderr)

    def stop(self, host, run_id):
        self._mod.stop_run(host, run_id)


def is_transient(exc: BaseException) -> bool:
    """Worth reconnecting after: a network failure. kdtree's remote errors say so
    themselves; outside them, only socket-level errors count (a KeyError is a bug)."""
    if isinstance(exc, KdtreeError):
        return bool(getattr(exc, "transient", False))
    return isinstance(exc, (OSError, EOFError))


def _is_run_end(line: str) -> bool:
    """A valid run_end event, by the one parser the monitor uses (a malformed line is not one)."""
    try:
        return events.parse(line)[0]["event"] == "run_end"
    except events.EventError:
        return False


def new_run_id() -> str:
    """Sortable by start time, unique across monitors."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


class HostSource(EventSource):
    kind = "host"

    def __init__(self, host: str, args: Sequence[str], *, runs: RemoteRuns | None = None,
                 backoff: Backoff | None = None, max_attempts: int = MAX_ATTEMPTS,
                 run_id: str | None = None, **kw):
        super().__init__(**kw)
        self.host = host
        self.args = list(args)  # the `kdtree run` arguments
        self.run_id = run_id or new_run_id()
        self._runs = runs
        self.backoff = backoff or Backoff(jitter=0.1)
        self.max_attempts = max_attempts
        self.connections = 0  # streams opened, for the status line and the tests
        self.offset = 0  # bytes of the run's metrics file handed on (complete lines only)
        self._ended = False

    def describe(self) -> str:
        return f"host {self.host}: kdtree run {' '.join(self.args)} (run {self.run_id})"

    def _stderr(self, line: str) -> None:
        if line.strip():
            self.note("info", f"{self.host}: {line.rstrip()}")

    def _deliver(self, chunk: bytes, pending: bytes) -> tuple[bytes, bool]:
        """Hand on the complete lines of pending + chunk; returns (the partial rest, saw_end)."""
        lines = (pending + chunk).split(b"\n")
        rest = lines.pop()
        saw_end = False
        for raw in lines:
            self.offset += len(raw) + 1
            if not raw.strip():
                continue
            line = raw.decode("utf-8", errors="replace")
            self.emit(line)
            saw_end = saw_end or ('"run_end"' in line and _is_run_end(line))
        return rest, saw_end

    def produce(self) -> None:
        try:
            runs = self._runs or _DetachedRuns()
        except ImportError as exc:
            self.status(SourceState.FAILED, f"cannot watch a run on {self.host}: remote/ is not "
                        f"available ({exc}); install the remote extra (pip install -e '.[remote]')")
            return
        self._runs = runs
        failures = 0
        saw_end = False
        while not self.stopping:
            self.connections += 1
            first = self.connections == 1
            self.status(SourceState.STARTING if first else SourceState.RECONNECTING,
                        f"connecting to {self.host}" + ("" if first else f" (attempt {self.connections})"))
            pending = b""  # a line still being written: read again from self.offset next time
            got = False
            failure: BaseException | None = None
            try:
                for chunk in runs.stream(self.host, self.args, run_id=self.run_id, offset=self.offset,
                                         on_stderr=self._stderr):
                    if self.stopping:
                        return
                    if not chunk:
                        continue
                    if not got:
                        got = True
                        self.status(SourceState.STREAMING, f"connected to {self.host}, run {self.run_id}")
                    pending, ended = self._deliver(chunk, pending)
                    saw_end = saw_end or ended
            except Exception as exc:  # shown to the user either way; retried if transient
                failure = exc
            if self.stopping:
                return
            if failure is None:
                if pending.strip():  # the run's last line had no newline: it is complete now
                    _, ended = self._deliver(b"\n", pending)
                    saw_end = saw_end or ended
                self._ended = True
                self.status(SourceState.ENDED, f"the run on {self.host} " + (
                    "ended" if saw_end else "exited without run_end"))
                return
            reason = f"{type(failure).__name__}: {failure}"
            if not is_transient(failure):
                self._ended = True  # nothing to stop: the run failed, or never started
                self.status(SourceState.DROPPED, reason)
                return
            failures = 1 if got else failures + 1
            if got:
                self.backoff.reset()
            if failures >= self.max_attempts:
                self.status(SourceState.DROPPED, f"{reason}; gave up after {failures} attempts "
                            f"in a row (the run may still be going on {self.host}: run {self.run_id})")
                return
            delay = self.backoff.next_delay()
            self.status(SourceState.RECONNECTING, f"{reason}; retrying in {delay:.1f} s")
            if self.wait(delay):
                return

    def close(self) -> None:
        """The monitor is quitting: stop the remote run unless it is over."""
        if self._ended or self._runs is None or self.connections == 0:
            return
        runs, host, run_id = self._runs, self.host, self.run_id

        def stop() -> None:
            try:
                runs.stop(host, run_id)
            except Exception:  # unreachable now: the run goes on, its metrics stay there
                pass

        worker = threading.Thread(target=stop, name="kdtree-tui-host-stop", daemon=True)
        worker.start()
        worker.join(STOP_WAIT_S)
