"""`kdtree test --native` reading the programs' summary lines: totals, crashes, hangs,
programs whose exit status disagrees with what they printed, and the skipped cases' reasons."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kdtree_cli.native_build.native_tests import parse_summary, run_program, skip_summary


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("[ OK ] a\n3 passed, 0 failed\n", (3, 0, 0)),
        ("x\n2 passed, 1 failed, 4 skipped\n\n", (2, 1, 4)),
        ("3 passed, 0 failed\nsomething after\n", None),  # the summary must be the last line
        ("", None),
        ("3 passed\n", None),
    ],
)
def test_parse_summary(output, expected):
    assert parse_summary(output) == expected


def program(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "test_fake"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_counts_come_from_the_summary_line(tmp_path):
    res = run_program(program(tmp_path, 'echo "[ SKIPPED ] g"; echo "5 passed, 0 failed, 1 skipped"'), tmp_path)
    assert (res.passed, res.failed, res.skipped, res.ok) == (5, 0, 1, True)
    res = run_program(program(tmp_path, 'echo "1 passed, 2 failed"; exit 1'), tmp_path)
    assert (res.passed, res.failed, res.ok, res.problem) == (1, 2, False, "")


def test_the_program_sees_the_repo_root(tmp_path):
    res = run_program(program(tmp_path, 'test "$KDTREE_REPO_ROOT" = "$(pwd)" && echo "1 passed, 0 failed"'), tmp_path)
    assert res.ok, res.output


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('echo "[ RUN ] a"; kill -SEGV $$', "killed by signal 11"),
        ('echo "no summary here"', "no 'N passed, N failed' line"),
        ('echo "2 passed, 0 failed"; exit 3', "exit status 3 with no failed case"),
        ('echo "2 passed, 1 failed"', "exit status 0 despite failed cases"),
    ],
)
def test_crashes_and_inconsistent_programs_fail(tmp_path, body, problem):
    res = run_program(program(tmp_path, body), tmp_path)
    assert not res.ok and problem in res.problem


def test_a_hung_program_times_out(tmp_path):
    res = run_program(program(tmp_path, 'echo started; sleep 30'), tmp_path, timeout=0.5)
    assert not res.ok and "timed out" in res.problem and res.seconds < 10


def test_skip_reasons_are_read_and_grouped(tmp_path):
    a = run_program(program(tmp_path, 'for c in one two three four; do echo "[ SKIPPED  ] $c: no CUDA device"; done; '
                                    'echo "[ OK ] five"; echo "1 passed, 0 failed, 4 skipped"'), tmp_path)
    b = run_program(program(tmp_path, 'echo "[ SKIPPED  ] fuzz: set KDTREE_X to a bundle"; '
                                    'echo "[ SKIPPED  ] gpu_case: no CUDA device"; echo "0 passed, 0 failed, 2 skipped"'), tmp_path)
    assert a.skips == [(c, "no CUDA device") for c in ("one", "two", "three", "four")]
    assert b.skips == [("fuzz", "set KDTREE_X to a bundle"), ("gpu_case", "no CUDA device")]
    a.name, b.name = "test_a", "test_b"
    assert skip_summary([a, b]) == [
        "  skipped 5: no CUDA device (test_a 4, test_b 1)",
        "  skipped 1: set KDTREE_X to a bundle (test_b fuzz)",
    ]
