"""Where things live: test doubles and developer tools stay out of the packages that ship
(tests/doubles/ is the one home of the doubles; tools/ of the dev tools), and the shipped code
never imports the tests' modules. Synthetic checkpoints are not doubles: refs, the agree pair
and the several-GPU bench write them, so they ship (python_engine/model/synthetic_checkpoint.py)."""

from __future__ import annotations

import ast

from python_engine.project import PROJECT_ROOT

SHIPPED = ("kdtree_cli", "python_engine", "remote")
DOUBLES_HOME = PROJECT_ROOT / "tests" / "doubles"
# the benchmarks are a shipped command (`kdtree bench`), not a dev tool
BENCH_COMMAND = ("kdtree_cli/commands/bench.py", "kdtree_cli/bench/")


def shipped_modules():
    for package in SHIPPED:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            yield path.relative_to(PROJECT_ROOT).as_posix(), path


def test_doubles_and_dev_tools_are_not_in_the_shipped_packages():
    misplaced = [rel for rel, _ in shipped_modules()
                 if not rel.startswith(BENCH_COMMAND)
                 and any(word in rel.rsplit("/", 1)[-1] for word in ("random_", "oracle_", "bench"))]
    assert misplaced == []


def test_shipped_code_never_imports_the_tests_modules():
    """Neither the doubles nor any other module of tests/ (the folder is on the tests' path
    only: an import of it from shipped code works under pytest and fails for a user)."""
    tests_modules = {p.stem for p in (PROJECT_ROOT / "tests").rglob("*.py")} | {"doubles", "tests"}
    assert {p.stem for p in DOUBLES_HOME.glob("*.py")} >= {"oracle_drafter", "router_ties"}
    offenders = []
    for rel, path in shipped_modules():
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{rel}:{node.lineno}: {n}" for n in names if n.split(".")[0] in tests_modules]
    assert offenders == []
