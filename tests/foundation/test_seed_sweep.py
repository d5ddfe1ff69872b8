"""`pytest --seed-sweep N` (tests/seed_sweep.py), run on a small suite of its own: the tests
taking the seed fixture run once per seed and the others are deselected, the seeds follow
from the master seed (in pytest-xdist workers too), a failing case's id names the seed that
replays it, and --seed-sweep-by-seed runs seed by seed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from seed_sweep import sweep_seeds

TESTS = Path(__file__).resolve().parents[1]

# the suite's own tests/conftest.py (seed fixture, options, hooks), loaded under another name
CONFTEST = f"""
import importlib.util, sys
sys.path.insert(0, {str(TESTS)!r})
spec = importlib.util.spec_from_file_location("kdtree_tests_conftest", {str(TESTS / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
globals().update({{k: v for k, v in vars(suite).items() if k.startswith("pytest_") or k in ("seed", "rng")}})
"""

SUITE = """
def test_even(seed):
    assert seed % 2 == 0

def test_draws(rng):
    assert 0 <= rng.random() < 1

def test_without_a_seed():
    pass
"""


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rN", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def case_ids(output: str, outcome: str) -> list[tuple[str, int]]:
    """(test, seed) of each `-v` line with that outcome, in the order they ran (pytest-xdist
    writes the outcome before the test's id, plain pytest after it)."""
    case = r"test_suite\.py::(\w+)\[seed=(\d+)\]"
    return [(m.group(1) or m.group(3), int(m.group(2) or m.group(4)))
            for m in re.finditer(rf"{case} {outcome}|{outcome} {case}", output)]


def test_each_seed_test_runs_once_per_seed_and_failures_name_their_seed(tmp_path):
    seeds = sweep_seeds(7, 12)
    assert len(set(seeds)) == 12 and seeds == sweep_seeds(7, 12) != sweep_seeds(8, 12)
    proc = run(tmp_path, "-p", "no:xdist", "--seed-sweep", "12", "--seed-sweep-from", "7")
    odd = [s for s in seeds if s % 2]
    assert odd and len(odd) < 12  # this master gives both outcomes
    assert sorted(case_ids(proc.stdout, "FAILED")) == sorted(("test_even", s) for s in odd)
    assert sorted(case_ids(proc.stdout, "PASSED")) == sorted(
        [("test_even", s) for s in seeds if s % 2 == 0] + [("test_draws", s) for s in seeds])
    assert "1 deselected" in proc.stdout and "test_without_a_seed" not in proc.stdout.replace("deselected", "")
    assert proc.stdout.count("--seed-sweep 12 --seed-sweep-from 7 repeats them") == 2  # header and summary
    # a failing case's seed replays it alone; a passing one passes
    replay = run(tmp_path, "-p", "no:xdist", "test_suite.py::test_even", env={"KDTREE_SEED": str(odd[0])})
    assert replay.returncode == 1 and f"KDTREE_SEED={odd[0]}" in replay.stdout
    even = next(s for s in seeds if s % 2 == 0)
    assert run(tmp_path, "-p", "no:xdist", "test_suite.py::test_even", env={"KDTREE_SEED": str(even)}).returncode == 0


def test_by_seed_order_and_xdist_workers_share_the_seeds(tmp_path):
    seeds = sweep_seeds(3, 4)
    proc = run(tmp_path, "-p", "no:xdist", "--seed-sweep", "4", "--seed-sweep-from", "3", "--seed-sweep-by-seed")
    ran = case_ids(proc.stdout, "(?:PASSED|FAILED)")
    assert ran == [(name, s) for s in seeds for name in ("test_even", "test_draws")]
    # without a master seed each run draws one; the workers must still agree (else xdist stops)
    proc = run(tmp_path, "-n", "2", "--seed-sweep", "4")
    master = int(re.search(r"--seed-sweep-from (\d+)", proc.stdout).group(1))
    ran = case_ids(proc.stdout, "(?:PASSED|FAILED)")
    assert sorted(ran) == sorted((name, s) for s in sweep_seeds(master, 4) for name in ("test_even", "test_draws"))
