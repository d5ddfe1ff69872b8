"""`kdtree test --native --sanitize TOOLS`: the native GPU test programs under NVIDIA's
compute-sanitizer (memcheck with leak check, racecheck, initcheck, synccheck), small cases
only ($KDTREE_SANITIZE_QUICK=1: the tools make kernels 10-1000x slower, and the small cases
take the same code paths). A run passes when the tool reports no error and the program's
own cases pass."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from python_engine.errors import KdtreeError

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# One program under one tool: racecheck of the attention tests took 46 s on the H200.
RUN_TIMEOUT_S = 600.0
_ERRORS_RE = re.compile(r"ERROR SUMMARY: (\d+) error")
_HAZARDS_RE = re.compile(r"RACECHECK SUMMARY: (\d+) hazard")
_CASES_RE = re.compile(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?\s*$", re.M)


# racecheck runs a build of its own with these nvcc flags (build root: the usual one + this
# suffix). verify_attn's seesaw tile (config 10) hands data between its warpgroups with bar.arrive on one side
# and bar.sync on the other; bar.arrive releases the arriving thread's earlier accesses (PTX ISA,
# barrier), but racecheck reports hazards there, even across a later __syncthreads (H200, CUDA
# 13.0: 31-60 on test_verify_attn). With every such arrive a bar.sync (the same accesses in the
# same order, more waiting) it reports none, so that build is the one racecheck checks.
RACECHECK_NVCC_FLAGS = ("-DKD_SEESAW_SYNC_ONLY",)
RACECHECK_BUILD_SUFFIX = "racecheck"  # build -> build-racecheck

# Test programs whose cases fail CUDA API calls on purpose (they test the error checks); the
# sanitizer would count each as an error, while memory and race checking still apply.
PROVOKES_API_ERRORS = {"test_cuda_check"}


def parse_tools(spec: str) -> tuple[str, ...]:
    """'memcheck,racecheck' -> the tools, checked; 'all' -> memcheck, racecheck, initcheck."""
    if spec.strip() == "all":
        return ("memcheck", "racecheck", "initcheck")
    tools = tuple(t.strip() for t in spec.split(",") if t.strip())
    bad = [t for t in tools if t not in TOOLS]
    if bad or not tools:
        raise KdtreeError(f"--sanitize: unknown tool(s) {', '.join(bad) or '(none given)'}; "
                          f"choose from {', '.join(TOOLS)} or all")
    return tools


def find_sanitizer(cuda_home: Path | None) -> Path:
    """compute-sanitizer of the toolkit, else on PATH, else under /usr/local/cuda or /opt/cuda."""
    candidates = []
    if cuda_home:
        candidates.append(Path(cuda_home) / "bin" / "compute-sanitizer")
    on_path = shutil.which("compute-sanitizer")
    if on_path:
        candidates.append(Path(on_path))
    candidates += [Path("/usr/local/cuda/bin/compute-sanitizer"), Path("/opt/cuda/bin/compute-sanitizer")]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise KdtreeError("compute-sanitizer not found (looked in the CUDA toolkit's bin/, on PATH, /usr/local/cuda, "
                      "/opt/cuda): install the CUDA toolkit's sanitizer or pass --cuda-home")


@dataclass
class SanitizerRun:
    tool: str
    program: str
    seconds: float = 0.0
    errors: int | None = None   # the tool's count (errors or hazards); None: no summary printed
    cases: str = ""             # the program's own "N passed, N failed" line
    failed_cases: int = 0
    problem: str = ""           # why the run fails beyond its counts (timeout, no summary, exit status)
    log: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.problem and self.errors == 0 and self.failed_cases == 0


def sanitize_one(sanitizer: Path, tool: str, program: Path, repo_root: Path, log_dir: Path,
                 timeout_s: float = RUN_TIMEOUT_S) -> SanitizerRun:
    run = SanitizerRun(tool, program.name, log=log_dir / f"sanitize_{tool}_{program.name}.log")
    cmd = [str(sanitizer), "--tool", tool, "--error-exitcode", "99"]
    if program.name in PROVOKES_API_ERRORS:
        cmd += ["--report-api-errors", "no"]
    if tool == "memcheck":
        cmd += ["--leak-check", "full"]
    cmd.append(str(program))
    env = dict(os.environ, KDTREE_REPO_ROOT=str(repo_root), KDTREE_SANITIZE_QUICK="1")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=repo_root, env=env, capture_output=True, text=True, errors="replace",
                              timeout=timeout_s)
        out, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        code, run.problem = None, f"timed out after {timeout_s:.0f} s"
    run.seconds = time.perf_counter() - start
    run.log.write_text(f"$ {' '.join(cmd)}\n{out}\nexit status {code}\n")
    counts = _HAZARDS_RE.findall(out) if tool == "racecheck" else _ERRORS_RE.findall(out)
    run.errors = int(counts[-1]) if counts else None
    cases = _CASES_RE.findall(out)
    if cases:
        passed, failed, skipped = cases[-1]
        run.failed_cases = int(failed)
        run.cases = f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else "")
    if not run.problem:
        if run.errors is None:
            run.problem = f"no {tool} summary (exit status {code})"
        elif not cases:
            run.problem = f"the program printed no 'N passed, N failed' line (exit status {code})"
        elif code not in (0, 99) or (code == 99 and run.errors == 0):
            run.problem = f"exit status {code}"
    return run


def _racecheck_build(request, console) -> Path:
    """The test programs built with RACECHECK_NVCC_FLAGS in a build root of their own."""
    from dataclasses import replace

    from .flagged_build import build_with_nvcc_flags

    return build_with_nvcc_flags(replace(request, targets=("tests",)), RACECHECK_NVCC_FLAGS, RACECHECK_BUILD_SUFFIX,
                                 console)


def run_sanitizers(request, tools: tuple[str, ...], console, out=None, log_dir: Path | None = None) -> list[SanitizerRun]:
    """Build the test programs, run each GPU one (a .cu source) under each tool, print a
    table. The caller checks for a GPU first and decides the exit status."""
    from dataclasses import replace

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from .driver import build

    out = out or Console()
    outcome = build(replace(request, targets=("tests",)), console=console)
    cfg = outcome.configured
    sanitizer = find_sanitizer(cfg.config.toolchain.cuda.home)
    programs = [p for p in cfg.layout.programs if p.kind == "tests" and p.source.suffix == ".cu"]
    log_dir = log_dir or cfg.build_dir / "test-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    build_dirs = {tool: cfg.build_dir for tool in tools}
    if "racecheck" in tools:
        build_dirs["racecheck"] = _racecheck_build(request, console)
    runs = []
    for tool in tools:
        for prog in programs:
            console.print(f"[dim]{tool}: {build_dirs[tool] / prog.output}[/]", highlight=False)
            runs.append(sanitize_one(sanitizer, tool, build_dirs[tool] / prog.output, request.repo_root, log_dir))
            if not runs[-1].ok:
                console.print(f"[red]{tool} {prog.name}: {escape(runs[-1].problem or 'errors reported')}[/] "
                              f"(log: {runs[-1].log})", highlight=False)
    table = Table(title=f"compute-sanitizer ({sanitizer})", title_justify="left")
    for col in ("tool", "program", "errors", "cases", "seconds", "status"):
        table.add_column(col, justify="right" if col in ("errors", "seconds") else "left")
    for r in runs:
        status = "[green]ok[/]" if r.ok else f"[red]{escape(r.problem or 'FAILED')}[/]"
        table.add_row(r.tool, r.program, "-" if r.errors is None else str(r.errors), r.cases, f"{r.seconds:.1f}", status)
    out.print(table)
    bad = sum(not r.ok for r in runs)
    out.print(f"sanitize: {len(runs) - bad} clean, {bad} failed", highlight=False)
    return runs
