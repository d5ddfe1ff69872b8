"""`kdtree test --gpu-suites`: its plumbing on a machine without a GPU. It stops before running
anything where there is no CUDA device; each suite names test files that exist and a selection
that collects tests; the counts, logs and summary come from pytest's own JUnit XML (checked on a
generated test file whose passes, failures and skips are drawn from the seed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kdtree_cli.app import app
from kdtree_cli.bench.gpu import NoGpuError
from kdtree_cli.native_build import gpu_suites
from kdtree_cli.native_build.gpu_suites import (GPU_SUITES, GpuSuite, parse_gpu_suites, pytest_args, run_gpu_suite,
                                                run_gpu_suites)
from python_engine.errors import KdtreeError
from python_engine.project import PROJECT_ROOT


@pytest.mark.parametrize("args", [["test", "--gpu-suites", "all"], ["test", "--native", "--gpu-suites", "parity"]])
def test_no_cuda_device_stops_before_anything_runs(monkeypatch, tmp_path, args):
    import torch

    import kdtree_cli.commands.test as test_command
    from kdtree_cli.native_build import driver

    ran = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(driver, "build", lambda *a, **k: ran.append("build"))
    monkeypatch.setattr(test_command, "run_native", lambda *a, **k: ran.append("native"))
    monkeypatch.setattr(gpu_suites, "run_gpu_suite", lambda *a, **k: ran.append("suite"))
    result = CliRunner().invoke(app, [*args, "--log-dir", str(tmp_path)])
    assert result.exit_code != 0 and ran == [] and list(tmp_path.iterdir()) == []
    assert isinstance(result.exception, NoGpuError)
    assert "kdtree test --gpu-suites needs a CUDA GPU" in str(result.exception)


def test_help_names_every_suite_and_the_device_it_needs():
    result = CliRunner().invoke(app, ["test", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())  # the help box's borders out
    for suite in GPU_SUITES:
        assert f"{suite.name}: {suite.checks}" in text
        assert all(Path(p).name in text for p in suite.paths)
    assert "Needs a CUDA device" in text and "KDTREE_NATIVE_VARIANT=gpu" in text


def test_suite_names_parse_in_order_once_and_all_leaves_out_the_parts():
    assert [s.name for s in parse_gpu_suites("soak, parity,soak")] == ["soak", "parity"]
    every = parse_gpu_suites("all")
    assert [s.name for s in every] == [s.name for s in GPU_SUITES if not s.part_of]
    # a suite that is part of another is run by `all` through the suite holding it
    for part in (s for s in GPU_SUITES if s.part_of):
        holder = next(s for s in every if s.name == part.part_of)
        assert set(part.paths) <= set(holder.paths) and not holder.keyword
    assert [s.name for s in parse_gpu_suites("int4,all")][0] == "int4"
    for bad in ("", "parity,nope", ","):
        with pytest.raises(KdtreeError, match="parity, decode"):
            parse_gpu_suites(bad)


def test_gpu_suites_refuse_pytest_arguments_and_all():
    runner = CliRunner()
    result = runner.invoke(app, ["test", "--gpu-suites", "parity", "--", "-k", "x"])
    assert result.exit_code != 0 and "-k x" in result.output
    result = runner.invoke(app, ["test", "--all", "--gpu-suites", "parity"])
    assert isinstance(result.exception, KdtreeError) and "--gpu-suites" in str(result.exception)
    result = runner.invoke(app, ["test", "--log-dir", "/tmp/x"])
    assert isinstance(result.exception, KdtreeError) and "--gpu-suites" in str(result.exception)


@pytest.mark.parametrize("suite", GPU_SUITES, ids=lambda s: s.name)
def test_each_suite_collects_tests_from_its_files(suite, tmp_path):
    """The suite's own pytest arguments, collected only: every test id is in its files (and
    matches its keyword), and each file gives at least one."""
    for path in suite.paths:
        assert (PROJECT_ROOT / path).is_file(), path
    proc = subprocess.run([sys.executable, "-m", "pytest", *pytest_args(suite, tmp_path / "j.xml"), "--collect-only",
                           "-p", "no:xdist"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert {i.split("::")[0] for i in ids} == set(suite.paths)
    if suite.keyword:
        assert all(suite.keyword in i for i in ids)


def _generated_suite(directory: Path, rng, name: str) -> tuple[GpuSuite, dict[str, int]]:
    """A test file of drawn numbers of passing, failing and skipped tests (and setup errors)."""
    counts = {k: int(rng.integers(0, 4)) for k in ("passed", "failed", "errors", "skipped")}
    lines = ["import pytest", "", "@pytest.fixture", "def broken():", "    raise RuntimeError('setup')", ""]
    for kind, n in counts.items():
        for i in range(n):
            body = {"passed": "    assert True", "failed": "    assert False",
                    "errors": "    pass", "skipped": "    pytest.skip('drawn')"}[kind]
            lines += [f"def test_{kind}_{i}({'broken' if kind == 'errors' else ''}):", body, ""]
    path = directory / f"test_{name}.py"
    path.write_text("\n".join(lines))
    return GpuSuite(name, (path.name,), "generated"), counts


def test_counts_logs_and_summary_come_from_pytest(tmp_path, rng):
    tests, logs = tmp_path / "tests", tmp_path / "logs"
    tests.mkdir()
    logs.mkdir()
    drawn = [_generated_suite(tests, rng, f"drawn{i}") for i in range(3)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for suite, counts in drawn:
        result = run_gpu_suite(suite, logs, env, cwd=tests)
        assert {k: getattr(result, k) for k in counts} == counts
        total = sum(counts.values())  # 0 in 1 draw of 256: a suite that collects nothing is not ok
        assert result.ok == (counts["failed"] == 0 and counts["errors"] == 0 and total > 0)
        assert result.problem == ("no test collected" if total == 0 else "")
        log = Path(result.log).read_text()
        assert log.startswith(f"$ {result.command}\n") and suite.paths[0] in result.command
        assert (f"{counts['passed']} passed" in log) == (counts["passed"] > 0)

    from rich.console import Console

    results = run_gpu_suites(tuple(s for s, _ in drawn), logs, Console(quiet=True), cwd=tests, env=env)
    summary = json.loads((logs / "gpu-suites.json").read_text())
    assert set(summary["run"]) == {"command", "commit", "device", "date"}
    assert [{k: row[k] for k in ("name", "passed", "failed", "errors", "skipped", "ok")} for row in summary["suites"]] \
        == [{"name": s.name, **c, "ok": r.ok} for (s, c), r in zip(drawn, results)]
    md = (logs / "gpu-suites.md").read_text()
    for (suite, c), r in zip(drawn, results):
        assert f"| {suite.name} | {c['passed']} | {c['failed']} | {c['errors']} | {c['skipped']} |" in md


def test_stop_at_first_failure_and_keyword_reach_pytest(tmp_path, rng):
    fails = int(rng.integers(2, 6))
    path = tmp_path / "test_x.py"
    path.write_text("".join(f"def test_bad_{i}():\n    assert False\n\ndef test_other_{i}():\n    pass\n\n"
                            for i in range(fails)))
    stops = GpuSuite("stops", (path.name,), "x", stop_at_first_failure=True)
    result = run_gpu_suite(stops, tmp_path, dict(os.environ), cwd=tmp_path)
    assert (result.passed, result.failed) == (0, 1)
    picked = GpuSuite("picked", (path.name,), "x", keyword="other")
    result = run_gpu_suite(picked, tmp_path, dict(os.environ), cwd=tmp_path)
    assert (result.passed, result.failed, result.ok) == (fails, 0, True)
