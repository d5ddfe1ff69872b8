"""Start `kdtree run ... --metrics -` as a child process and read its events from stdout.
Its stderr goes to the log (the last lines also explain a failed exit). Quitting the
monitor stops the run. Both pipes are read in chunks and split with bounded memory, so a
child that writes endless lines cannot grow the monitor."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
from collections import deque
from typing import Sequence

from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.base import EventSource
from kdtree_cli.tui.sources.lines import READ_CHUNK, LineSplitter
from python_engine.events import MESSAGE_MAX_CHARS, OverlongLine


def kdtree_run_command(run_args: Sequence[str]) -> list[str]:
    """The child command for `kdtree tui --run -- ARGS`."""
    return [sys.executable, "-m", "kdtree_cli", "run", *run_args, "--metrics", "-"]


class LocalRunSource(EventSource):
    kind = "run"

    def __init__(self, run_args: Sequence[str], *, command: Sequence[str] | None = None,
                 cwd: str | None = None, **kw):
        super().__init__(**kw)
        self.command = list(command) if command is not None else kdtree_run_command(run_args)
        self.cwd = cwd
        self._proc: subprocess.Popen | None = None
        self._stderr_tail: deque[str] = deque(maxlen=5)
        self._lock = threading.Lock()

    def describe(self) -> str:
        cmd = self.command
        if cmd[:3] == [sys.executable, "-m", "kdtree_cli"]:
            cmd = ["kdtree", *cmd[3:]]
        return "run: " + shlex.join(cmd)

    def produce(self) -> None:
        self.status(SourceState.STARTING, "starting " + self.describe().removeprefix("run: "))
        try:
            with self._lock:
                if self.stopping:
                    return
                self._proc = subprocess.Popen(
                    self.command, cwd=self.cwd, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                )
        except OSError as exc:
            self.status(SourceState.FAILED, f"could not start {self.command[0]}: {exc}")
            return
        proc = self._proc
        err_reader = threading.Thread(target=self._read_stderr, args=(proc,), daemon=True)
        err_reader.start()
        self.status(SourceState.STREAMING, f"pid {proc.pid}")
        lines = LineSplitter()
        while not self.stopping and (chunk := proc.stdout.read(READ_CHUNK)):  # type: ignore[union-attr]
            self.emit_many(lines.feed(chunk))
        last = lines.finish()
        if last is not None and not self.stopping:
            self.emit(last)
        rc = proc.wait()
        err_reader.join(timeout=1.0)
        if self.stopping:
            return
        if rc == 0:
            self.status(SourceState.ENDED, "run exited normally")
        else:
            why = self._stderr_tail[-1] if self._stderr_tail else "no message on stderr"
            self.status(SourceState.DROPPED, f"run exited with status {rc}: {why}")

    def _read_stderr(self, proc: subprocess.Popen) -> None:
        lines = LineSplitter(MESSAGE_MAX_CHARS)
        while chunk := proc.stderr.read(READ_CHUNK):  # type: ignore[union-attr]
            for line in lines.feed(chunk):
                self._stderr_line(line)
        last = lines.finish()
        if last is not None:
            self._stderr_line(last)

    def _stderr_line(self, line: str) -> None:
        if isinstance(line, OverlongLine):
            line = f"{line}… ({line.length:,} bytes, cut)"
        line = line.rstrip()
        if line:
            self._stderr_tail.append(line)
            # the run's own report (text, summary) goes to stderr too: info, not a
            # warning; a failed exit is reported as the source dropping
            self.note("info", f"stderr: {line}")

    def close(self) -> None:
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=3.0)
            except subprocess.TimeoutExpired:
                proc.kill()
