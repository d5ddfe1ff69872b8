"""The native side of a bench: build bench_kernels (csrc/bench/bench_kernels.cu), give it the
cases as a file, read back one JSON object per case.

Why a program and not a shared library loaded with ctypes: bench_kernels already links the
kernels, cuBLAS and the test-side device buffers through `kdtree build`, and the C++ heap
baseline runs in the same process as the kernel it is checked against; a separate process
also keeps a crashed kernel from taking the Python side (and its torch baselines) down.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from python_engine.errors import KdtreeError

from .suites import Case


def build_bench(arch: str | None, console) -> Path:
    """`kdtree build bench_kernels`; returns the program's path."""
    from kdtree_cli.native_build.driver import BuildRequest, build

    outcome = build(BuildRequest(arch=arch, targets=("bench_kernels",)), console=console)
    return outcome.configured.build_dir / "bin" / "bench_kernels"


def parse_records(text: str) -> list[dict]:
    """The JSON objects of bench_kernels' output, one per line; other lines are skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def run_native(program: Path, cases: list[Case], quick: bool, timeout_s: float, log: Path | None = None,
               env: dict | None = None) -> list[dict]:
    """Run the cases (env: the program's environment, default this process's); a case that
    failed comes back with ok=false and its error. Raises when the program itself cannot run
    or dies before printing anything."""
    if not program.exists():
        raise KdtreeError(f"{program} does not exist: build it with `kdtree build bench_kernels`")
    with tempfile.TemporaryDirectory(prefix="kdtree-bench-") as tmp:
        case_file = Path(tmp) / "cases.txt"
        case_file.write_text("".join(c.native_line() + "\n" for c in cases))
        cmd = [str(program), "--cases", str(case_file)] + (["--quick"] if quick else [])
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s, env=env)
            stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr, code = f"timed out after {timeout_s:.0f} s", -1
    if log is not None:
        log.write_text(f"$ {' '.join(cmd)}\n{stdout}\n--- stderr ---\n{stderr}\nexit status {code}\n")
    records = parse_records(stdout)
    if not records and code != 0:
        raise KdtreeError(f"bench_kernels failed (exit status {code}): {stderr.strip()[-2000:]}")
    return records


def record_key(rec: dict, case: Case) -> tuple:
    """The key of a native record, built with `case`'s field names (to match case.key())."""
    from dataclasses import fields

    return (rec.get("suite"), *(str(rec.get(f.name)) for f in fields(case)))
