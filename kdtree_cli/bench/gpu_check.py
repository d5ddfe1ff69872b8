"""`kdtree bench all`: everything a GPU run of the kernels checks, in one command and one
summary:

  1. build the native tests and bench_kernels for the visible GPU; the kernels' resource use
     (registers, shared memory, spills: ptxas -v) into the logs
  2. fresh large cases from one logged seed (attention up to 131072 keys against float64
     references on the GPU; 400 tie-heavy tree and top-K cases)
  3. the native tests on them
  4. compute-sanitizer memcheck, racecheck, initcheck on the GPU test programs (small cases)
  5. `kdtree bench kernels` (quick when time is short)
  6. summary.md and summary.json: the steps, the worst attention errors, the kernels' goals, and
     (summary.json) the run's command, commit, device and date

Files in the output folder: summary.md, summary.json, bench.json, bench.md, attention.png, tree_topk.png and
logs.tar.gz (every program's output, resources.txt, env.txt). Steps that no longer fit the
time budget are skipped and said so; the exit status is 0 only when every step ran and passed.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
import tempfile
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

from python_engine.project import PROJECT_ROOT

from . import report
from .gpu import device_facts, require_gpu
from .provenance import run_record
from .suites import SUITES

# Seconds a step needs left of the budget to be started (below this it is skipped; a step that
# starts may run past the budget). On the H200 the three sanitizers take ~100 s (racecheck most
# of it) and the full kernel bench 10-15 s, most of it torch's baselines, so the quick one runs
# only when even that does not fit (the step lines of results/h200/bench/all-summary.md).
MIN_SECONDS = {"sanitize": 120.0, "bench": 10.0, "bench_full": 40.0}


@dataclass
class Step:
    name: str
    ok: bool | None  # None: skipped
    seconds: float
    detail: str


def _resources(build_config, log_path: Path) -> None:
    """ptxas -v of every kernel source for the build's first target: registers, spills."""
    tc, arch = build_config.toolchain, build_config.archs[0]
    sources = sorted((PROJECT_ROOT / "csrc" / "kernels").glob("*.cu"))

    def one(src: Path) -> str:
        cmd = [str(tc.cuda.nvcc), "-std=c++17", "-O3", f"-I{PROJECT_ROOT / 'csrc'}", arch.gencode, "-Xptxas", "-v",
               "-c", str(src), "-o", "/dev/null"]
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        keep = [l for l in proc.stderr.splitlines() if re.search(r"Compiling entry|registers|spill|error", l)]
        return f"== {src.name} ({arch.sm})\n" + "\n".join(keep) + "\n"

    with ThreadPoolExecutor(max_workers=4) as pool:
        log_path.write_text("".join(pool.map(one, sources)))


def _worst_attention_errors(log: Path) -> list[str]:
    """The worst relative error of each attention path in test_verify_attn's output."""
    worst: dict[str, tuple[float, str]] = {}
    if not log.exists():
        return []
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"\brel ([0-9.eE+-]+)", line)
        if not m:
            continue
        path = "f32" if " f32" in line else "bf16"
        value = float(m.group(1))
        if value >= worst.get(path, (-1.0, ""))[0]:
            worst[path] = (value, " ".join(line.split()))
    return [f"worst {p} attention error: {w[1]}" for p, w in sorted(worst.items())]


def run_gpu_check(out_dir: Path, seed: int | None, budget_s: float, arch: str | None, console: Console) -> int:
    from kdtree_cli.native_build.driver import BuildRequest, build
    from kdtree_cli.native_build.large_cases import fresh_seed, write_large_cases
    from kdtree_cli.native_build.native_tests import run_native_tests
    from kdtree_cli.native_build.sanitize import RACECHECK_NVCC_FLAGS, run_sanitizers

    from .kernels import run_kernel_bench

    require_gpu("kdtree bench all")
    start = time.perf_counter()
    left = lambda: budget_s - (time.perf_counter() - start)  # noqa: E731
    out_dir.mkdir(parents=True, exist_ok=True)
    seed = fresh_seed() if seed is None else seed
    facts = device_facts(PROJECT_ROOT)
    run = run_record()
    steps: list[Step] = []
    bench_res = None
    with tempfile.TemporaryDirectory(prefix="kdtree-gpu-check-") as tmp:
        logs, scratch = Path(tmp) / "logs", Path(tmp) / "cases"
        logs.mkdir()
        env_lines = [f"{k}: {v}" for k, v in facts.items()] + [f"seed: {seed} (kdtree bench all --seed {seed} repeats "
                                                                 "the generated cases)"]
        (logs / "env.txt").write_text("\n".join(env_lines) + "\n")
        console.print("\n".join(env_lines), highlight=False)
        request = BuildRequest(arch=arch)

        t0 = time.perf_counter()
        built = False
        pool = ThreadPoolExecutor(max_workers=1)  # the resource report compiles while the GPU tests run
        resources = None
        try:
            outcome = build(BuildRequest(arch=arch, targets=("tests", "bench")), console=console)
            cfg = outcome.configured.config
            resources = pool.submit(_resources, cfg, logs / "resources.txt")
            built = True
            steps.append(Step("build", True, time.perf_counter() - t0,
                              f"targets {', '.join(a.sm for a in cfg.archs)}; registers: logs/resources.txt"))
        except Exception as exc:
            steps.append(Step("build", False, time.perf_counter() - t0, str(exc)[:300]))

        extra_env = None
        t0 = time.perf_counter()
        try:
            extra_env = write_large_cases(scratch, seed)
            steps.append(Step("generate cases", True, time.perf_counter() - t0,
                              f"seed {seed}: {len(list((scratch / 'attention').glob('*.kdtr')))} attention files, "
                              "400 tree/top-K cases"))
        except Exception as exc:
            steps.append(Step("generate cases", False, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"[:300]))

        if built:
            t0 = time.perf_counter()
            results = run_native_tests(request, console=console, extra_env=extra_env, log_dir=logs)
            totals = [sum(getattr(r, f) for r in results) for f in ("passed", "failed", "skipped")]
            bad = [r.name for r in results if not r.ok]
            steps.append(Step("native tests", not bad and bool(results), time.perf_counter() - t0,
                              "{} passed, {} failed, {} skipped".format(*totals) + (f"; failing: {', '.join(bad)}" if bad else "")))
            if left() > MIN_SECONDS["sanitize"]:
                t0 = time.perf_counter()
                runs = run_sanitizers(request, ("memcheck", "racecheck", "initcheck"), console=console, log_dir=logs)
                for tool in ("memcheck", "racecheck", "initcheck"):
                    mine = [r for r in runs if r.tool == tool]
                    errs = sum(r.errors or 0 for r in mine)
                    problems = [f"{r.program}: {r.problem or 'errors'}" for r in mine if not r.ok]
                    which = f" (built with {' '.join(RACECHECK_NVCC_FLAGS)})" if tool == "racecheck" else ""
                    steps.append(Step(f"sanitize {tool}", not problems, sum(r.seconds for r in mine),
                                      f"{len(mine)} programs{which}, {errs} errors" + (f"; {'; '.join(problems)}" if problems else "")))
            else:
                steps.append(Step("sanitize", None, 0.0, f"skipped: {left():.0f} s left of the budget"))
            if left() > MIN_SECONDS["bench"]:
                quick = left() < MIN_SECONDS["bench_full"]
                t0 = time.perf_counter()
                try:
                    bench_res, written = run_kernel_bench(SUITES, quick, out_dir, arch, console, log_dir=logs)
                    steps.append(Step("bench kernels" + (" (quick)" if quick else ""), not bench_res.errors,
                                      time.perf_counter() - t0,
                                      f"{sum(len(v) for v in bench_res.rows.values())} rows, "
                                      f"{len(bench_res.errors)} failed cases; {', '.join(p.name for p in written)}"))
                except Exception as exc:
                    steps.append(Step("bench kernels", False, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"[:300]))
            else:
                steps.append(Step("bench kernels", None, 0.0, f"skipped: {left():.0f} s left of the budget"))

        if resources is not None:
            try:
                resources.result()
            except Exception as exc:  # a report, not a check: say why it is missing
                (logs / "resources.txt").write_text(f"ptxas -v report failed: {type(exc).__name__}: {exc}\n")
        pool.shutdown()
        summary = _summary(steps, bench_res, logs, seed, time.perf_counter() - start)
        (logs / "summary.md").write_text(summary)
        (out_dir / "summary.md").write_text(summary)
        record = {"run": run, "seed": seed, "seconds": time.perf_counter() - start,
                  "steps": [asdict(s) for s in steps], "goals": bench_res.goals() if bench_res is not None else None}
        (out_dir / "summary.json").write_text(json.dumps(record, indent=1) + "\n")
        with tarfile.open(out_dir / "logs.tar.gz", "w:gz") as tar:
            tar.add(logs, arcname="logs")
    console.print(summary, highlight=False, markup=False)
    return 0 if all(s.ok for s in steps) else 1


def _summary(steps: list[Step], bench_res, logs: Path, seed: int, seconds: float) -> str:
    lines = ["# kdtree bench all", ""]
    lines += _worst_attention_errors(logs / "test_verify_attn.log")
    if bench_res is not None:
        lines += ["", "| goal | measured | met |", "|---|---|---|"]
        for g in bench_res.goals():
            v = g["value"]
            shown = "-" if v is None else (report._x(v) if g["column"].startswith("vs_") else report._us(v))
            lines.append(f"| {g['goal']} | {shown} | {'-' if g['met'] is None else ('yes' if g['met'] else 'NO')} |")
    lines += ["", f"{'step':<24} {'result':<8} {'seconds':>7}  detail"]
    for s in steps:
        result = "skipped" if s.ok is None else ("ok" if s.ok else "FAILED")
        lines.append(f"{s.name:<24} {result:<8} {s.seconds:7.1f}  {s.detail}")
    lines.append(f"seed {seed}; {seconds:.0f} s in all")
    return "\n".join(lines) + "\n"
