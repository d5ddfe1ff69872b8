"""Run ninja and show its progress: a rich progress bar on a terminal, plain `[n/N] ...`
lines elsewhere (CI logs). On failure, show each failed step's compiler output, not a wall
of ninja text: the command line itself only with --verbose.

ninja prints one status line per finished step; NINJA_STATUS gives those lines a prefix we
can recognise, so everything else is the output of the step that just finished.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

# %f finished steps, %t total steps; the marker cannot start a line of compiler output.
STATUS_PREFIX = "@@kdtree %f/%t@@ "
_STATUS_RE = re.compile(r"^@@kdtree (\d+)/(\d+)@@ (.*)$")
_FAILED_RE = re.compile(r"^FAILED: (?:\[code=\d+\] )?(.*)$")


@dataclass
class FailedStep:
    description: str  # "NVCC csrc/kernels/x.cu"
    targets: str
    command: str = ""
    output: list[str] = field(default_factory=list)


@dataclass
class NinjaResult:
    returncode: int
    steps_run: int = 0
    failures: list[FailedStep] = field(default_factory=list)
    ninja_errors: list[str] = field(default_factory=list)  # "ninja: error: ..." lines
    no_work: bool = False


def repo_relative(build_dir_to_repo: str | None):
    """A line rewriter: compilers name sources as the build commands do, relative to the build
    directory (`../../csrc/x.cu`); people read and click them from the repository root."""
    if not build_dir_to_repo:
        return lambda line: line
    pattern = re.compile(r"(?<![\w./])" + re.escape(build_dir_to_repo.rstrip("/") + "/") + r"(?=csrc/)")
    return lambda line: pattern.sub("", line)


class _OutputParser:
    """Splits ninja's stdout into status lines, failed steps and the output after each step."""

    def __init__(self, console: Console, on_status, rewrite) -> None:
        self.console, self.on_status, self.rewrite = console, on_status, rewrite
        self.result = NinjaResult(returncode=0)
        self.description = ""
        self.failed: FailedStep | None = None
        self.expect_command = False

    def feed(self, line: str) -> None:
        line = self.rewrite(line)
        status = _STATUS_RE.match(line)
        if status:
            self.failed, self.expect_command = None, False
            done, total, self.description = int(status.group(1)), int(status.group(2)), status.group(3)
            self.result.steps_run = done
            self.on_status(done, total, self.description)
            return
        failed = _FAILED_RE.match(line)
        if failed:
            self.failed = FailedStep(self.description, failed.group(1))
            self.result.failures.append(self.failed)
            self.expect_command = True  # ninja prints the failed command next
            return
        if self.expect_command:
            self.failed.command, self.expect_command = line, False
            return
        if line.startswith("ninja: error:") or line.startswith("ninja: fatal:"):
            self.result.ninja_errors.append(line)
            return
        if line.startswith("ninja: no work to do"):
            self.result.no_work = True
            return
        if line.startswith("ninja: build stopped") or line.startswith("ninja: Entering directory"):
            return
        if self.failed is not None:
            self.failed.output.append(line)
        elif line.strip():
            # output of a step that succeeded: warnings; show them as they come
            self.console.print(escape(line), highlight=False, soft_wrap=True)


def run_ninja(
    ninja: str,
    build_dir: Path,
    targets: Sequence[str] = (),
    *,
    jobs: int | None = None,
    verbose: bool = False,
    console: Console | None = None,
    build_dir_to_repo: str | None = None,
) -> NinjaResult:
    """Run ninja in `build_dir`; `build_dir_to_repo` ("../..") turns the build-relative source
    paths in compiler messages back into repository paths."""
    console = console or Console(stderr=True)
    cmd = [ninja, "-C", str(build_dir)]
    if jobs:
        cmd += ["-j", str(jobs)]
    if verbose:
        cmd.append("-v")
    cmd += list(targets)
    env = dict(os.environ, NINJA_STATUS=STATUS_PREFIX)
    live = console.is_terminal and not verbose
    progress = Progress(
        TextColumn("[bold]building"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.description}"), console=console, transient=True,
    )
    task = progress.add_task("", total=None)

    def on_status(done: int, total: int, description: str) -> None:
        if live:
            progress.update(task, completed=done, total=total, description=escape(description))
        else:
            console.print(f"[dim][{done}/{total}][/] {escape(description)}", highlight=False, soft_wrap=True)

    parser = _OutputParser(console, on_status, repo_relative(build_dir_to_repo))
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", env=env) as proc:
        if live:
            progress.start()
        try:
            for line in proc.stdout:
                parser.feed(line.rstrip("\n"))
        finally:
            if live:
                progress.stop()
        parser.result.returncode = proc.wait()
    return parser.result


# Compiler output shown per failed step without --verbose: the first errors are the ones to
# fix, and one bad header can make nvcc print hundreds of follow-on lines.
MAX_ERROR_LINES = 60


def report_failures(result: NinjaResult, console: Console, verbose: bool, log_path: Path | None = None) -> None:
    """Print what failed: the step, its compiler output (and its command with --verbose).
    The complete output of every failed step also goes to `log_path`."""
    for step in result.failures:
        console.print(f"[bold red]failed:[/] {escape(step.description or step.targets)}", highlight=False)
        if verbose and step.command:
            console.print(f"[dim]{escape(step.command)}[/]", highlight=False, soft_wrap=True)
        shown = step.output if verbose else step.output[:MAX_ERROR_LINES]
        for line in shown:
            console.print(escape(line), highlight=False, soft_wrap=True)
        if len(shown) < len(step.output):
            where = f" (all of it in {log_path})" if log_path else ""
            console.print(f"[dim]... {len(step.output) - len(shown)} more lines{where}; --verbose shows all[/]",
                          highlight=False)
    if log_path is not None and result.failures:
        log_path.write_text("".join(
            f"FAILED: {s.description or s.targets}\n{s.command}\n" + "".join(l + "\n" for l in s.output)
            for s in result.failures))
    for line in result.ninja_errors:
        console.print(f"[bold red]{escape(line)}[/]", highlight=False, soft_wrap=True)
