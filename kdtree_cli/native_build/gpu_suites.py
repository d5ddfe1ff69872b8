"""`kdtree test --gpu-suites`: the native engine's pytest suites (tests/native/) against the GPU
build: KDTREE_NATIVE_VARIANT=gpu loads lib/libkdtree_engine.so on the CUDA device, runs the
torch reference on CUDA too, at the full sizes of tests/native/native_sizes.py. One pytest run
per suite, its whole output in a log of its own; the counts come from pytest's JUnit XML; a
summary (JSON and Markdown) records the command, commit, device and date of the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

from python_engine.errors import KdtreeError
from python_engine.project import PROJECT_ROOT

# A suite running longer than this is hung (a deadlocked kernel, a lost GPU): the longest, decode
# at full size, took a few minutes on an H200.
SUITE_TIMEOUT_S = 1800.0
SUMMARY_NAME = "gpu-suites"  # <log dir>/gpu-suites.json and .md
RESULTS_LOG = "native-results.jsonl"  # what the suites record of each case (tests/native/native_cases.py)
# Pytest's exit status when it collected no test: the suite's files or keyword are wrong.
PYTEST_NO_TESTS = 5


@dataclass(frozen=True)
class GpuSuite:
    name: str
    paths: tuple[str, ...]  # test files, relative to the project root
    checks: str             # what a pass means (--help and the summary say it)
    keyword: str = ""       # a pytest -k expression: part of the files only
    part_of: str = ""       # the suite whose files already hold these tests (then `all` leaves it out)
    stop_at_first_failure: bool = False  # later cases repeat the first failure's cause


GPU_SUITES = (
    GpuSuite("parity", ("tests/native/test_native_forward.py",),
             "prefill, decode, tree verify and the drafter's logits against the torch reference, float32 and "
             "bf16, four model pairs", stop_at_first_failure=True),
    GpuSuite("decode", ("tests/native/test_native_decode.py",),
             "native DDTree == native AR == torch AR token for token (demo, agree, INT4 pairs), batched == "
             "alone, refill, cancel, T > 0 against the exact distribution"),
    GpuSuite("soak", ("tests/native/test_native_soak.py",),
             "random requests, budgets, stops and cancellations through continuous batching, each equal to "
             "its AR tokens"),
    GpuSuite("int4", ("tests/native/test_native_decode.py",), "decode's INT4 tests alone (INT4 DDTree == AR)",
             keyword="int4", part_of="decode"),
    GpuSuite("split", ("tests/native/test_native_split.py",),
             "the engine split over N parts, simulated on one GPU, equals the whole model"),
    GpuSuite("multigpu", ("tests/native/test_multi_gpu_run.py",),
             "kdtree run --gpus 2 prints the one-GPU tokens; a rank killed mid-run stops the run (skipped "
             "with fewer than 2 GPUs)"),
)
SUITES_BY_NAME = {s.name: s for s in GPU_SUITES}
ALL = "all"


def parse_gpu_suites(text: str) -> tuple[GpuSuite, ...]:
    """'parity,decode' -> those suites, in the order given, each once; 'all' -> every suite whose
    tests no other suite runs."""
    chosen: list[GpuSuite] = []
    for name in (n.strip() for n in text.split(",")):
        if not name:
            continue
        if name == ALL:
            picked = [s for s in GPU_SUITES if not s.part_of]
        elif name in SUITES_BY_NAME:
            picked = [SUITES_BY_NAME[name]]
        else:
            raise KdtreeError(f"--gpu-suites: no suite {name!r}; choose from "
                              f"{', '.join(SUITES_BY_NAME)} or {ALL} (comma-separated)")
        chosen += [s for s in picked if s not in chosen]
    if not chosen:
        raise KdtreeError(f"--gpu-suites: name one or more of {', '.join(SUITES_BY_NAME)}, or {ALL}")
    return tuple(chosen)


def suites_help() -> str:
    """One sentence per suite for --help."""
    return " ".join(f"{s.name}: {s.checks} ({', '.join(Path(p).name for p in s.paths)}"
                    f"{f' -k {s.keyword}' if s.keyword else ''})." for s in GPU_SUITES)


@dataclass
class SuiteResult:
    name: str
    command: str
    log: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    returncode: int | None = None  # None: timed out
    problem: str = ""  # why the suite failed beyond its failed tests

    @property
    def ok(self) -> bool:
        return not self.problem and self.failed == 0 and self.errors == 0


def pytest_args(suite: GpuSuite, junit: Path) -> list[str]:
    """The suite's pytest arguments: its files, quiet, the tests' prints kept (-s) for the log,
    counts in JUnit XML."""
    return [*suite.paths, "-q", "-s", "-p", "no:cacheprovider", f"--junitxml={junit}",
            *(["-k", suite.keyword] if suite.keyword else []), *(["-x"] if suite.stop_at_first_failure else [])]


def junit_counts(path: Path) -> tuple[int, int, int, int]:
    """(passed, failed, errors, skipped) over the <testsuite> elements pytest wrote."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
    tests = failures = errors = skipped = 0
    for s in suites:
        tests += int(s.get("tests", 0))
        failures += int(s.get("failures", 0))
        errors += int(s.get("errors", 0))
        skipped += int(s.get("skipped", 0))
    return tests - failures - errors - skipped, failures, errors, skipped


def run_gpu_suite(suite: GpuSuite, log_dir: Path, env: dict[str, str], cwd: Path = PROJECT_ROOT,
                  timeout_s: float = SUITE_TIMEOUT_S) -> SuiteResult:
    """One pytest run of the suite, its output in <log_dir>/gpu-suite-<name>.log."""
    import shlex

    junit, log = log_dir / f"gpu-suite-{suite.name}.xml", log_dir / f"gpu-suite-{suite.name}.log"
    junit.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", *pytest_args(suite, junit)]
    result = SuiteResult(suite.name, shlex.join(["python", "-m", "pytest", *cmd[3:]]), str(log))
    start = time.perf_counter()
    with log.open("w") as out:
        out.write(f"$ {result.command}\n")
        out.flush()
        try:
            result.returncode = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                               timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            result.problem = f"timed out after {timeout_s:.0f} s"
    result.seconds = time.perf_counter() - start
    if junit.is_file():
        result.passed, result.failed, result.errors, result.skipped = junit_counts(junit)
    elif not result.problem:
        result.problem = f"pytest wrote no JUnit XML (exit status {result.returncode})"
    if result.problem:
        return result
    if result.returncode == PYTEST_NO_TESTS:
        result.problem = "no test collected"
    elif result.returncode != 0 and not (result.failed or result.errors):
        result.problem = f"pytest exit status {result.returncode} with no failed test"
    return result


def suite_env(log_dir: Path) -> dict[str, str]:
    """This process's environment with the GPU engine chosen and the cases' record in log_dir."""
    return {**os.environ, "KDTREE_NATIVE_VARIANT": "gpu", "KDTREE_NATIVE_RESULTS": str(log_dir / RESULTS_LOG),
            "PYTHONUNBUFFERED": "1"}


def run_gpu_suites(suites: tuple[GpuSuite, ...], log_dir: Path, console, cwd: Path = PROJECT_ROOT,
                   env: dict[str, str] | None = None) -> list[SuiteResult]:
    """Run each suite, print a table, write the summary (gpu-suites.json and .md) into log_dir;
    the caller checks for a GPU first and decides the exit status."""
    from rich.markup import escape

    from kdtree_cli.bench.provenance import run_record

    log_dir.mkdir(parents=True, exist_ok=True)
    env = env or suite_env(log_dir)
    record = run_record()
    results = []
    for suite in suites:
        console.print(f"[dim]{suite.name}: {' '.join(suite.paths)}{f' -k {suite.keyword}' if suite.keyword else ''}[/]",
                      highlight=False)
        results.append(run_gpu_suite(suite, log_dir, env, cwd))
        if not results[-1].ok:
            tail = Path(results[-1].log).read_text(errors="replace").splitlines()[-25:]
            console.print(escape("\n".join(tail)), highlight=False, soft_wrap=True)
    console.print(results_table(results))
    json_path, md_path = write_summary(log_dir, record, results)
    console.print(f"wrote {json_path} and {md_path}; each suite's output: {log_dir}/gpu-suite-<name>.log",
                  highlight=False)
    return results


def write_summary(log_dir: Path, record: dict, results: list[SuiteResult]) -> tuple[Path, Path]:
    rows = [{**asdict(r), "ok": r.ok, "seconds": round(r.seconds, 1)} for r in results]
    json_path, md_path = log_dir / f"{SUMMARY_NAME}.json", log_dir / f"{SUMMARY_NAME}.md"
    json_path.write_text(json.dumps({"run": record, "suites": rows}, indent=2) + "\n")
    lines = ["# The engine's pytest suites on the GPU (KDTREE_NATIVE_VARIANT=gpu)", "",
             *(f"- {k}: `{v}`" if k == "command" else f"- {k}: {v}" for k, v in record.items()), "",
             "| suite | passed | failed | errors | skipped | seconds | status |", "|---|---|---|---|---|---|---|"]
    for r in results:
        status = "ok" if r.ok else (r.problem or "FAILED")
        lines.append(f"| {r.name} | {r.passed} | {r.failed} | {r.errors} | {r.skipped} | {r.seconds:.1f} | {status} |")
    md_path.write_text("\n".join(lines) + "\n")
    return json_path, md_path


def results_table(results: list[SuiteResult]):
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="GPU suites (KDTREE_NATIVE_VARIANT=gpu)", title_justify="left")
    for col in ("suite", "passed", "failed", "errors", "skipped", "seconds", "status"):
        table.add_column(col, justify="left" if col in ("suite", "status") else "right")
    for r in results:
        status = "[green]ok[/]" if r.ok else f"[red]{escape(r.problem or 'failed')}[/]"
        table.add_row(r.name, str(r.passed), str(r.failed), str(r.errors), str(r.skipped), f"{r.seconds:.1f}", status)
    return table


def require_gpu_suites_ready() -> None:
    """Fail before anything runs where the suites cannot: no CUDA device visible to torch."""
    from kdtree_cli.bench.gpu import require_gpu

    require_gpu("kdtree test --gpu-suites")
