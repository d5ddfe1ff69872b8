"""`kdtree bench all` without a GPU: the steps replaced by stand-ins, checking what the lead
reads: the output folder's files (at most seven, no deeper folders), the summary's step
table and goals, the worst attention errors read from the test log, and the exit status."""

from __future__ import annotations

import json
import tarfile
from types import SimpleNamespace

from rich.console import Console

from kdtree_cli.bench import gpu_check, kernels, report
from kdtree_cli.native_build import driver, large_cases, native_tests, sanitize

VERIFY_LOG = """[ RUN      ] large_cases_from_env
    03_p32768_h64_n64 f32                        rel 1.015e-06  max|d| 5.722e-06  lse 9.537e-07
    03_p32768_h64_n64 bf16                       rel 1.893e-03  max|d| 7.957e-03  lse 4.768e-07
    v2 B1 H16 T9 P37 bf16 cfg0                   rel 1.201e-03  max|d| 1.000e-03  lse 4.768e-07
"""


def _stand_ins(monkeypatch, tmp_path, tests_ok=True):
    arch = SimpleNamespace(sm="sm_90a")
    cfg = SimpleNamespace(archs=(arch,))
    monkeypatch.setattr(gpu_check, "require_gpu", lambda what: None)
    monkeypatch.setattr(gpu_check, "device_facts", lambda root: {"device": "Fake", "commit": "abc"})
    monkeypatch.setattr(driver, "build", lambda request, console=None: SimpleNamespace(
        configured=SimpleNamespace(config=cfg)))
    monkeypatch.setattr(gpu_check, "_resources", lambda cfg, path: path.write_text("registers\n"))
    monkeypatch.setattr(large_cases, "write_large_cases", lambda folder, seed: {"KDTREE_TREE_FUZZ": "x"})

    def fake_tests(request, console, extra_env=None, log_dir=None):
        (log_dir / "test_verify_attn.log").write_text(VERIFY_LOG)
        return [native_tests.ProgramResult("test_verify_attn", passed=5, failed=0 if tests_ok else 1)]

    monkeypatch.setattr(native_tests, "run_native_tests", fake_tests)
    monkeypatch.setattr(sanitize, "run_sanitizers", lambda request, tools, console, log_dir=None: [
        sanitize.SanitizerRun(t, "test_verify_attn", 1.0, 0, "4 passed, 0 failed") for t in tools])

    def fake_bench(suites, quick, out_dir, arch, console, log_dir=None):
        res = report.BenchResult(facts={"device": "Fake"})
        res.rows["tree"] = [{"batch": 64, "budget": 256, "input": "flat", "kdtree_ms": 0.015}]
        (out_dir / "bench.json").write_text(res.to_json())
        return res, [out_dir / "bench.json"]

    monkeypatch.setattr(kernels, "run_kernel_bench", fake_bench)


def test_summary_files_and_status(monkeypatch, tmp_path):
    _stand_ins(monkeypatch, tmp_path)
    out = tmp_path / "out"
    status = gpu_check.run_gpu_check(out, 1234, 480.0, None, Console(file=open("/dev/null", "w")))
    assert status == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["bench.json", "logs.tar.gz", "summary.json", "summary.md"] and all(p.is_file() for p in out.iterdir())
    record = json.loads((out / "summary.json").read_text())
    assert set(record["run"]) == {"command", "commit", "device", "date"} and record["seed"] == 1234
    assert [s["name"] for s in record["steps"]][:3] == ["build", "generate cases", "native tests"]
    assert all(s["ok"] for s in record["steps"]) and record["goals"] is not None
    summary = (out / "summary.md").read_text()
    assert "worst bf16 attention error: 03_p32768_h64_n64 bf16 rel 1.893e-03" in summary
    assert "worst f32 attention error: 03_p32768_h64_n64 f32 rel 1.015e-06" in summary
    assert "| tree_build B=64 N=256 D=15 (flat): <= 20 us | 15.0 us | yes |" in summary
    for step in ("build", "generate cases", "native tests", "sanitize memcheck", "sanitize racecheck",
                 "sanitize initcheck", "bench kernels"):
        assert any(line.startswith(step) and " ok " in line for line in summary.splitlines()), step
    racecheck = next(line for line in summary.splitlines() if line.startswith("sanitize racecheck"))
    assert "built with -DKD_SEESAW_SYNC_ONLY" in racecheck, racecheck  # which build racecheck checked
    assert summary.rstrip().splitlines()[-1].startswith("seed 1234;")
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"logs/env.txt", "logs/resources.txt", "logs/test_verify_attn.log", "logs/summary.md"} <= names


def test_a_failed_test_fails_the_run_and_a_short_budget_skips(monkeypatch, tmp_path):
    _stand_ins(monkeypatch, tmp_path, tests_ok=False)
    out = tmp_path / "out"
    status = gpu_check.run_gpu_check(out, 1, 0.0, None, Console(file=open("/dev/null", "w")))
    assert status == 1
    summary = (out / "summary.md").read_text()
    assert "native tests             FAILED" in summary
    record = json.loads((out / "summary.json").read_text())  # written whether or not the bench ran
    assert record["goals"] is None and any(s["ok"] is False for s in record["steps"])
    assert "sanitize                 skipped" in summary and "bench kernels            skipped" in summary
