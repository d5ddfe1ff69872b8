"""CI's collection check (tests/collection_floor.py): a run fails before any test runs when
it collects fewer tests than the floor written in .ci/collected-floor, or when a test file
contributes no test, as tests/build/ once did (pytest skips folders named `build`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from python_engine.project import PROJECT_ROOT

TESTS = PROJECT_ROOT / "tests"


def pytest_run(*args: str, cwd: Path = PROJECT_ROOT, plugin: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    extra = ["-p", "collection_floor"] if plugin else []
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_below_the_floor_fails_before_running():
    proc = pytest_run("tests/foundation/test_kdtr.py", "--collect-only", "--min-collected", "100000")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "fewer than the floor of 100000" in proc.stdout + proc.stderr


def test_a_test_file_pytest_never_collects_fails_the_check(tmp_path):
    """A folder named `build` is skipped by pytest's default norecursedirs."""
    for folder in ("ok", "build"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"test_{folder}.py").write_text("def test_it():\n    assert 1 + 1 == 2\n")
    proc = pytest_run(".", "--min-collected", "1", cwd=tmp_path, plugin=True)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "contributed no test" in out and str(tmp_path / "build" / "test_build.py") in out
    assert "test_ok.py" not in out.split("contributed no test")[1]


def test_at_the_floor_runs_and_above_says_to_raise_it(tmp_path):
    (tmp_path / "test_two.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    at = pytest_run(".", "--min-collected", "2", cwd=tmp_path, plugin=True)
    assert at.returncode == 0 and "2 passed" in at.stdout and "raise" not in at.stdout
    above = pytest_run(".", "--min-collected", "1", cwd=tmp_path, plugin=True)
    assert above.returncode == 0 and "raise .ci/collected-floor to 2" in above.stdout


def test_the_floor_file_holds_a_number():
    assert int((PROJECT_ROOT / ".ci" / "collected-floor").read_text().split()[0]) > 0


def test_under_xdist_the_controller_checks_the_workers_collection(tmp_path):
    """CI runs `-n auto`: the workers collect, so the check reads their test ids."""
    for folder in ("ok", "build"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"test_{folder}.py").write_text("def test_it():\n    assert 1 + 1 == 2\n")
    missing = pytest_run(".", "-n", "2", "--min-collected", "1", cwd=tmp_path, plugin=True)
    assert missing.returncode == 4, missing.stdout + missing.stderr
    assert str(tmp_path / "build" / "test_build.py") in missing.stdout + missing.stderr
    (tmp_path / "build" / "test_build.py").unlink()
    low = pytest_run(".", "-n", "2", "--min-collected", "5", cwd=tmp_path, plugin=True)
    assert low.returncode == 4 and "collected 1 tests, fewer than the floor of 5" in low.stdout + low.stderr
    ok = pytest_run(".", "-n", "2", "--min-collected", "1", cwd=tmp_path, plugin=True)
    assert ok.returncode == 0 and "1 passed" in ok.stdout, ok.stdout + ok.stderr


def test_under_xdist_a_file_skipped_whole_counts_as_collected(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "test_skipped.py").write_text("import pytest\npytest.importorskip('no_such_module_kdtree')\n")
    proc = pytest_run(".", "-n", "2", "--min-collected", "1", cwd=tmp_path, plugin=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
