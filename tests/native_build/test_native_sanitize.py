"""`kdtree test --native --sanitize ... / --large` without a GPU here: the tool list is
checked, compute-sanitizer's output is read (errors, hazards, the program's own cases, a
hang), and a machine without a GPU gets a clear error before anything is built."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kdtree_cli.app import app
from kdtree_cli.native_build import arch as arch_module
from kdtree_cli.native_build.sanitize import parse_tools, sanitize_one
from python_engine.errors import KdtreeError


def test_tool_lists():
    assert parse_tools("all") == ("memcheck", "racecheck", "initcheck")
    assert parse_tools("racecheck, synccheck") == ("racecheck", "synccheck")
    with pytest.raises(KdtreeError, match="unknown tool.*leakcheck"):
        parse_tools("memcheck,leakcheck")


def _fake_sanitizer(tmp_path: Path, body: str) -> Path:
    """A stand-in for compute-sanitizer: argv is `--tool T --error-exitcode 99 [...] PROGRAM`."""
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(f"#!{sys.executable}\nimport sys, time\ntool = sys.argv[2]\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


CLEAN = """print("3 passed, 0 failed, 1 skipped")
print("========= ERROR SUMMARY: 0 errors" if tool != "racecheck" else
      "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)")"""
HAZARD = """print("3 passed, 0 failed")
print("========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)")
sys.exit(99)"""
FAILED_CASE = """print("2 passed, 1 failed")
print("========= ERROR SUMMARY: 0 errors")
sys.exit(1)"""
NO_SUMMARY = """print("segfault"); sys.exit(139)"""
HANG = """time.sleep(30)"""


@pytest.mark.parametrize("tool, body, ok, problem", [
    ("memcheck", CLEAN, True, ""),
    ("racecheck", CLEAN, True, ""),
    ("racecheck", HAZARD, False, ""),
    ("initcheck", FAILED_CASE, False, ""),
    ("memcheck", NO_SUMMARY, False, "no memcheck summary"),
    ("memcheck", HANG, False, "timed out"),
])
def test_reading_a_sanitizer_run(tmp_path, tool, body, ok, problem):
    exe = _fake_sanitizer(tmp_path, body)
    program = tmp_path / "test_x"
    run = sanitize_one(exe, tool, program, tmp_path, tmp_path, timeout_s=3)
    assert run.ok is ok
    assert problem in run.problem
    assert run.log.exists() and tool in run.log.read_text()
    if body == HAZARD:
        assert run.errors == 2
    if body == FAILED_CASE:
        assert run.failed_cases == 1 and run.cases == "2 passed, 1 failed"


@pytest.mark.parametrize("args, what", [
    (["test", "--native", "--sanitize", "all"], "--sanitize"),
    (["test", "--native", "--large"], "--large"),
])
def test_no_gpu_is_a_clear_error(monkeypatch, args, what):
    monkeypatch.setattr(arch_module, "detect_gpu_archs", lambda env=None: ())
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert isinstance(result.exception, KdtreeError)
    assert f"{what} needs a CUDA GPU" in str(result.exception)


def test_sanitize_needs_native():
    result = CliRunner().invoke(app, ["test", "--sanitize", "memcheck"])
    assert isinstance(result.exception, KdtreeError) and "go with --native" in str(result.exception)


def test_racecheck_runs_its_own_build_with_the_sync_only_seesaw(monkeypatch, tmp_path):
    """racecheck's programs come from a build root of their own compiled with
    RACECHECK_NVCC_FLAGS (the seesaw tile's arrives as syncs); the other tools use the usual build,
    and NVCC_APPEND_FLAGS is as it was afterwards."""
    from types import SimpleNamespace

    from kdtree_cli.native_build import driver, sanitize
    from kdtree_cli.native_build.driver import BuildRequest

    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-lineinfo")
    builds = []

    def fake_build(request, console=None):
        builds.append((request.build_root, request.targets, sanitize.os.environ.get("NVCC_APPEND_FLAGS")))
        prog = SimpleNamespace(kind="tests", source=Path("csrc/tests/test_verify_attn.cu"), output="bin/test_verify_attn",
                               name="test_verify_attn")
        cfg = SimpleNamespace(toolchain=SimpleNamespace(cuda=SimpleNamespace(home=None)))
        return SimpleNamespace(configured=SimpleNamespace(config=cfg, layout=SimpleNamespace(programs=[prog]),
                                                          build_dir=request.build_root / "release"))

    ran = []
    monkeypatch.setattr(driver, "build", fake_build)
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda home: Path("/bin/true"))
    monkeypatch.setattr(sanitize, "sanitize_one", lambda san, tool, program, root, logs: (
        ran.append((tool, program)), sanitize.SanitizerRun(tool, program.name, 1.0, 0, "1 passed, 0 failed"))[1])
    root = tmp_path / "build"
    runs = sanitize.run_sanitizers(BuildRequest(build_root=root), ("memcheck", "racecheck"), console=_quiet(),
                                   log_dir=tmp_path)
    assert [r.ok for r in runs] == [True, True]
    assert builds == [(root, ("tests",), "-lineinfo"),
                      (tmp_path / "build-racecheck", ("tests",), "-lineinfo " + " ".join(sanitize.RACECHECK_NVCC_FLAGS))]
    assert ran == [("memcheck", root / "release" / "bin/test_verify_attn"),
                   ("racecheck", tmp_path / "build-racecheck" / "release" / "bin/test_verify_attn")]
    assert sanitize.os.environ["NVCC_APPEND_FLAGS"] == "-lineinfo"


def _quiet():
    from rich.console import Console

    return Console(quiet=True)
