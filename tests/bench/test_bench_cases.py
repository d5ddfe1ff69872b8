"""The bench's cases: the issue's sweeps, and lines that bench_kernels' own parser
(csrc/bench/bench_cases.h, compiled here with the host compiler) accepts key for key."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kdtree_cli.bench.suites import EXTRA_SUITES, SUITES, AttnCase, TreeCase, parse_suites, sweep
from python_engine.errors import KdtreeError
from python_engine.project import PROJECT_ROOT

ROOT = PROJECT_ROOT

CHECKER = r"""
#include <cstdio>
#include "bench/bench_cases.h"
int main(int argc, char** argv) {
  try {
    for (const auto& c : kdtree::bench::read_cases(argv[1])) {
      std::printf("%s", c.suite.c_str());
      for (const auto& [k, v] : c.args) std::printf(" %s=%s", k.c_str(), v.c_str());
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
"""


@pytest.fixture(scope="module")
def case_checker(tmp_path_factory) -> Path:
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("cases")
    (d / "check.cpp").write_text(CHECKER)
    exe = d / "check"
    subprocess.run([cxx, "-std=c++17", f"-I{ROOT / 'csrc'}", str(d / "check.cpp"), "-o", str(exe)], check=True)
    return exe


def test_the_full_sweep_covers_the_issue_grid():
    cases = sweep()
    attn = {(c.heads, c.n, c.prefix) for c in cases if isinstance(c, AttnCase)}
    assert attn == {(h, n, p) for h in (8, 64) for n in (1, 16, 64, 256) for p in (1024, 8192, 32768, 131072)}
    tree = {(c.batch, c.budget, c.input) for c in cases if isinstance(c, TreeCase)}
    assert tree == {(b, n, i) for b in (1, 8, 64, 256) for n in (16, 64, 256, 1024) for i in ("flat", "logits")}
    assert len(sweep(quick=True)) < len(cases) / 3


def test_every_native_line_parses_in_bench_kernels(case_checker, tmp_path):
    cases = sweep(SUITES + EXTRA_SUITES)
    path = tmp_path / "cases.txt"
    path.write_text("# the bench's sweep\n" + "".join(c.native_line() + "\n" for c in cases))
    out = subprocess.run([str(case_checker), str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    parsed = out.stdout.splitlines()
    assert len(parsed) == len(cases)
    # the C++ side sees exactly the fields the Python side wrote
    for case, line in zip(cases, parsed):
        suite, *pairs = line.split()
        assert suite == case.native_suite
        assert dict(p.split("=", 1) for p in pairs) == {k: str(v) for k, v in case.params().items()}


@pytest.mark.parametrize("line, message", [
    ("verify_attn heads=64 nn=3", "has no key `nn`"),
    ("attention heads=64", "unknown suite"),
    ("topk rows", "is not key=value"),
])
def test_bad_lines_are_errors_naming_the_line(case_checker, tmp_path, line, message):
    path = tmp_path / "bad.txt"
    path.write_text(line + "\n")
    out = subprocess.run([str(case_checker), str(path)], capture_output=True, text=True)
    assert out.returncode == 2
    assert message in out.stderr and line in out.stderr


def test_suite_names():
    assert parse_suites(None) == SUITES
    assert parse_suites("attn, tree") == ("attn", "tree")
    assert parse_suites("kimi-rank,ceilings") == ("kimi-rank", "ceilings") and "kimi-rank" not in parse_suites("all")
    with pytest.raises(KdtreeError, match="unknown bench suite.*attention"):
        parse_suites("attention")
