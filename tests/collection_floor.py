"""CI's guard against tests that silently stop running (a folder pytest skips by default,
such as one named `build`; a renamed file; a collection error hidden in a long log).

`pytest --min-collected N` (CI passes N from .ci/collected-floor) fails the run before any
test runs when
- fewer than N tests were collected, or
- a tests/**/test_*.py file under the paths given to pytest contributed no test (a file
  skipped as a whole at collection, e.g. by importorskip, counts as collected).
When more than N were collected, a line says so, to raise the floor in the same change.
Under pytest-xdist (`kdtree test`, and so CI, runs `-n <cores>`) the workers collect, and
the check runs on the first worker's list of test ids. tests/conftest.py imports the two
hooks below; elsewhere `-p collection_floor` loads them.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def test_files_under(paths: list[Path]) -> set[Path]:
    found: set[Path] = set()
    for path in paths:
        if path.is_dir():
            found.update(p.resolve() for p in path.rglob("test_*.py") if "__pycache__" not in p.parts)
        elif path.name.startswith("test_") and path.suffix == ".py":
            found.add(path.resolve())
    return found


def collection_problems(count: int, floor: int, expected: set[Path], collected: set[Path],
                        skipped: set[Path]) -> list[str]:
    problems = []
    if count < floor:
        problems.append(f"collected {count} tests, fewer than the floor of {floor} "
                        f"(.ci/collected-floor): tests stopped being collected")
    missing = sorted(expected - collected - skipped)
    if missing:
        problems.append("test files that contributed no test: " + ", ".join(str(p) for p in missing))
    return problems


class CollectionFloor:
    def __init__(self, floor: int):
        self.floor = floor
        self.skipped: set[Path] = set()

    def pytest_collectreport(self, report) -> None:
        if report.skipped and str(report.fspath).endswith(".py"):
            self.skipped.add(Path(report.fspath).resolve())

    def pytest_collection_finish(self, session) -> None:
        self.check(session.config, len(session.items), {Path(item.path).resolve() for item in session.items})

    def check(self, config, count: int, collected: set[Path]) -> None:
        roots = [Path(a.split("::")[0]) for a in config.args] or [Path(p) for p in config.getini("testpaths")]
        roots = [p if p.is_absolute() else Path(config.invocation_params.dir) / p for p in roots]
        problems = collection_problems(count, self.floor, test_files_under(roots), collected, self.skipped)
        if problems:
            pytest.exit("collection check failed:\n  " + "\n  ".join(problems),
                        returncode=pytest.ExitCode.USAGE_ERROR)
        if count > self.floor:
            config.get_terminal_writer().line(
                f"collection check: {count} tests (floor {self.floor}); raise "
                f".ci/collected-floor to {count} with this change")


class XdistCollectionFloor(CollectionFloor):
    """The controller of an xdist run: it collects nothing itself; each worker reports its
    test ids (all the same list), and skipped files arrive as the workers' collect reports."""

    def __init__(self, floor: int, config):
        super().__init__(floor)
        self.config = config
        self.checked = False

    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        if self.checked:
            return
        self.checked = True
        root = Path(self.config.rootpath)
        self.check(self.config, len(ids), {(root / i.split("::")[0]).resolve() for i in ids})


def pytest_addoption(parser):
    parser.addoption("--min-collected", type=int, default=None, metavar="N",
                     help="fail before running unless at least N tests are collected and every "
                          "test_*.py under the given paths contributes one (CI: .ci/collected-floor)")


def pytest_configure(config):
    floor = config.getoption("--min-collected")
    if floor is None or hasattr(config, "workerinput"):
        return
    distributed = config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None)
    plugin = XdistCollectionFloor(floor, config) if distributed else CollectionFloor(floor)
    config.pluginmanager.register(plugin, "kdtree-collection-floor")
