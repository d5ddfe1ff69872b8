"""Every `kdtree bench` JSON records the command, commit, device and date of its run
(kdtree_cli/bench/provenance.py), so a result file says how to reproduce it."""

from __future__ import annotations

import json
import shlex
import subprocess

import numpy as np

from kdtree_cli.bench import report
from kdtree_cli.bench.provenance import command_line, run_record
from python_engine.project import PROJECT_ROOT


def _random_args(seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["all", "--out", "/tmp/a b", "--budget-s", str(int(rng.integers(1, 999))), "--seed", "x'y", "--quick"]
    return [words[i] for i in rng.permutation(len(words))[: int(rng.integers(1, len(words) + 1))]]


def test_the_command_reads_as_the_kdtree_cli_whatever_launched_it(seed):
    args = ["bench", *_random_args(seed)]
    want = shlex.join(["kdtree", *args])
    for program in ("/home/u/.venv/bin/kdtree", "kdtree", "/repo/kdtree_cli/__main__.py"):
        line = command_line([program, *args])
        assert line == want
        assert shlex.split(line)[1:] == args  # quoting survives a round trip through a shell
    # any other program is recorded as it was run
    assert command_line(["/usr/bin/python3", "-c", "x"]) == "/usr/bin/python3 -c x"


def test_the_record_names_the_commit_given_or_the_checkout_head(monkeypatch, seed):
    monkeypatch.setenv("KDTREE_COMMIT", f"c{seed:x}")
    r = run_record(argv=["kdtree", "bench", "moe"])
    assert r["command"] == "kdtree bench moe" and r["commit"] == f"c{seed:x}"
    assert set(r) == {"command", "commit", "device", "date"} and r["date"].endswith("Z")
    monkeypatch.delenv("KDTREE_COMMIT")
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=PROJECT_ROOT, capture_output=True,
                          text=True).stdout.strip()
    if head:  # a git checkout: HEAD's hash, maybe marked dirty
        assert run_record()["commit"].removesuffix("-dirty") == head


def test_the_kernel_bench_json_carries_the_record(seed):
    run = run_record(argv=["kdtree", "bench", "kernels", "--seed", str(seed)])
    data = json.loads(report.BenchResult(facts={"device": "x"}, run=run).to_json())
    assert data["run"] == run and data["run"]["command"] == f"kdtree bench kernels --seed {seed}"
