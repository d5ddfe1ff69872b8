"""`kdtree test --native`: build, then run every native test program (csrc/tests/test_*),
add up the `N passed, N failed[, N skipped]` line each prints last, and say why cases were
skipped (each `[ SKIPPED  ] case: reason` line, grouped by reason)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .driver import BuildRequest, build

SUMMARY_RE = re.compile(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?\s*$")
# csrc/common/test_harness.h's line for a skipped case
SKIPPED_RE = re.compile(r"^\[ SKIPPED\s*\] (\S+): (.+?)\s*$", re.MULTILINE)
# a reason shared by at most this many cases lists them by name, else per program
NAMED_CASES_MAX = 3
# A test program that runs longer than this is hung (a deadlocked kernel, a lost GPU).
PROGRAM_TIMEOUT_S = 900.0


@dataclass
class ProgramResult:
    name: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    returncode: int | None = None  # None: timed out
    seconds: float = 0.0
    output: str = ""
    problem: str = ""  # why the program counts as failed beyond its own failed count
    skips: list[tuple[str, str]] = field(default_factory=list)  # (case, reason)

    @property
    def ok(self) -> bool:
        return not self.problem and self.failed == 0


def parse_summary(output: str) -> tuple[int, int, int] | None:
    """The counts from the last non-empty line, or None when it is not a summary line."""
    lines = [l for l in output.splitlines() if l.strip()]
    match = SUMMARY_RE.match(lines[-1]) if lines else None
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def run_program(path: Path, repo_root: Path, timeout: float = PROGRAM_TIMEOUT_S,
                extra_env: dict[str, str] | None = None) -> ProgramResult:
    result = ProgramResult(path.name)
    env = dict(os.environ, KDTREE_REPO_ROOT=str(repo_root), **(extra_env or {}))
    start = time.perf_counter()
    try:
        proc = subprocess.run([str(path)], cwd=repo_root, env=env, capture_output=True, text=True,
                              errors="replace", timeout=timeout)
        result.returncode, result.output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        result.output, result.problem = out, f"timed out after {timeout:.0f} s"
    result.seconds = time.perf_counter() - start
    if result.problem:
        return result
    counts = parse_summary(proc.stdout)
    if counts is None:
        code = result.returncode
        died = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        result.problem = f"no 'N passed, N failed' line at the end ({died})"
        return result
    result.passed, result.failed, result.skipped = counts
    result.skips = SKIPPED_RE.findall(proc.stdout)
    if result.returncode != 0 and result.failed == 0:
        result.problem = f"exit status {result.returncode} with no failed case"
    elif result.returncode == 0 and result.failed > 0:
        result.problem = "exit status 0 despite failed cases"
    return result


def run_native_tests(request: BuildRequest, console: Console, out: Console | None = None,
                     extra_env: dict[str, str] | None = None, log_dir: Path | None = None) -> list[ProgramResult]:
    """Build the test programs, run each (with extra_env, e.g. the large generated cases),
    print a table; the caller decides the exit status. Each program's output goes to
    log_dir (default <build>/test-logs)."""
    out = out or Console()
    request = replace(request, targets=("tests",))
    outcome = build(request, console=console)
    layout, build_dir = outcome.configured.layout, outcome.configured.build_dir
    programs = [p for p in layout.programs if p.kind == "tests"]
    results = []
    log_dir = log_dir or build_dir / "test-logs"  # every program's full output, kept for later reading
    log_dir.mkdir(parents=True, exist_ok=True)
    for prog in programs:
        console.print(f"[dim]running {prog.output}[/]", highlight=False)
        res = run_program(build_dir / prog.output, request.repo_root, extra_env=extra_env)
        (log_dir / f"{prog.name}.log").write_text(res.output)
        results.append(res)
        if not res.ok or request.verbose:
            console.print(escape(res.output.rstrip()), highlight=False, soft_wrap=True)
    out.print(results_table(results))
    # the plain totals line that CI and other tools read (the table is for people)
    totals = [sum(getattr(r, f) for r in results) for f in ("passed", "failed", "skipped")]
    out.print("native: {} passed, {} failed, {} skipped".format(*totals), highlight=False)
    for line in skip_summary(results):
        out.print(escape(line), highlight=False)
    if totals[2]:
        out.print(f"each program's output: {log_dir}", highlight=False)
    return results


def skip_summary(results: list[ProgramResult]) -> list[str]:
    """One line per skip reason, most frequent first: how many cases, and where."""
    by_reason: dict[str, list[tuple[str, str]]] = {}
    for r in results:
        for case, reason in r.skips:
            by_reason.setdefault(reason, []).append((r.name, case))
    lines = []
    for reason, cases in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        if len(cases) <= NAMED_CASES_MAX:
            where = ", ".join(f"{prog} {case}" for prog, case in cases)
        else:
            where = ", ".join(f"{prog} {n}" for prog, n in Counter(prog for prog, _ in cases).items())
        lines.append(f"  skipped {len(cases)}: {reason} ({where})")
    return lines


def results_table(results: list[ProgramResult]) -> Table:
    table = Table(title="native tests", title_justify="left")
    for col in ("program", "passed", "failed", "skipped", "seconds", "status"):
        table.add_column(col, justify="left" if col in ("program", "status") else "right")
    for r in results:
        status = "[green]ok[/]" if r.ok else f"[red]{escape(r.problem or 'failed')}[/]"
        table.add_row(r.name, str(r.passed), str(r.failed), str(r.skipped), f"{r.seconds:.2f}", status)
    total = [sum(getattr(r, f) for r in results) for f in ("passed", "failed", "skipped")]
    all_ok = all(r.ok for r in results) and results
    table.add_row("[bold]total", *[f"[bold]{n}" for n in total], f"{sum(r.seconds for r in results):.2f}",
                  "[green]ok[/]" if all_ok else "[red]FAILED[/]" if results else "[yellow]no test programs[/]")
    return table
