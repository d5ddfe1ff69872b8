"""Where things live: test doubles and developer tools stay out of the packages that ship
(python_engine/testing/ is the one home of the doubles; tools/ of the dev tools), and the
engine's own code never imports the doubles (refgen, which writes refs/ from random
models, is the one exception)."""

from __future__ import annotations

import ast

from python_engine.project import PROJECT_ROOT

SHIPPED = ("kdtree_cli", "python_engine", "remote")
DOUBLES_HOME = "python_engine/testing"
# the benchmarks are a shipped command (`kdtree bench`), not a dev tool
BENCH_COMMAND = ("kdtree_cli/commands/bench.py", "kdtree_cli/bench/")
# refgen writes refs/ from fixed seeds; the agree pair is a shipped random target of the same kind
# the several-GPU bench writes a random drafter for the random Kimi slice it splits (as
# `bench load` writes the slice itself)
MAY_USE_DOUBLES = ("python_engine/refgen", "python_engine/train/agree_", DOUBLES_HOME, "kdtree_cli/bench/gpus.py")


def shipped_modules():
    for package in SHIPPED:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            yield path.relative_to(PROJECT_ROOT).as_posix(), path


def test_doubles_and_dev_tools_are_not_in_the_shipped_packages():
    misplaced = [rel for rel, _ in shipped_modules()
                 if not rel.startswith(DOUBLES_HOME + "/") and not rel.startswith(BENCH_COMMAND)
                 and any(word in rel.rsplit("/", 1)[-1] for word in ("random_", "oracle_", "bench"))]
    assert misplaced == []


def test_only_refgen_imports_the_doubles():
    offenders = []
    for rel, path in shipped_modules():
        if rel.startswith(MAY_USE_DOUBLES):
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{rel}: {n}" for n in names if n.startswith("python_engine.testing")]
    assert offenders == []
