"""`pytest --seed-sweep N` (`kdtree test --seed-sweep N`): run every test that draws random
inputs (one that takes the `seed` fixture, directly or through `rng`) once for each of N
seeds, all in the same process, and deselect the other tests. A test must hold for every
seed; an ordinary run tries one fresh seed, a sweep tries many.

The N seeds are drawn from a master seed, `--seed-sweep-from S` (default fresh, printed in
the header), so a whole sweep replays, and every pytest-xdist worker parametrises alike. A
failing case's id names its seed: `KDTREE_SEED=<seed> pytest <test>` replays that case.
tests/conftest.py loads these hooks.
"""

from __future__ import annotations

import secrets

import numpy as np
import pytest

SEED_FIXTURE = "seed"
MASTER_KEY = "seed_sweep_from"  # in an xdist worker's workerinput


def sweep_seeds(master: int, count: int) -> list[int]:
    """`count` distinct 32-bit seeds drawn from `master`."""
    return [int(s) for s in np.random.default_rng(master).choice(2**32, size=count, replace=False)]


def add_options(parser) -> None:
    group = parser.getgroup("seed sweep")
    group.addoption("--seed-sweep", type=int, default=None, metavar="N",
                    help="run each test that takes the seed fixture once per seed for N seeds "
                         "(drawn from --seed-sweep-from) and deselect the other tests")
    group.addoption("--seed-sweep-from", type=int, default=None, metavar="S",
                    help="with --seed-sweep: the master seed the N seeds are drawn from "
                         "(default: fresh, printed in the header)")
    group.addoption("--seed-sweep-by-seed", action="store_true",
                    help="with --seed-sweep: run seed by seed (every test with the first seed, then "
                         "the second...), so that a sweep stopped early has tried each test as often; "
                         "module-scoped fixtures are then set up again for each seed")


def configure(config) -> None:
    """Draw the master seed once: in the controller of a pytest-xdist run, whose workers
    (which re-read the command line) must all collect the same seeds, get it from there."""
    if config.getoption("--seed-sweep") is None or config.getoption("--seed-sweep-from") is not None:
        return
    worker = getattr(config, "workerinput", None)
    config.option.seed_sweep_from = worker[MASTER_KEY] if worker else secrets.randbits(32)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist's hook: what each worker starts with."""
    node.workerinput[MASTER_KEY] = node.config.getoption("--seed-sweep-from")


def replay_line(config) -> str | None:
    count = config.getoption("--seed-sweep")
    if count is None:
        return None
    master = config.getoption("--seed-sweep-from")
    return f"seed sweep: {count} seeds per test, --seed-sweep {count} --seed-sweep-from {master} repeats them"


def pytest_report_header(config) -> str | None:
    return replay_line(config)


def pytest_terminal_summary(terminalreporter, config) -> None:
    """Again after the results: -q hides the header."""
    line = replay_line(config)
    if line:
        terminalreporter.write_line(line)


def pytest_generate_tests(metafunc) -> None:
    count = metafunc.config.getoption("--seed-sweep")
    if count is None or SEED_FIXTURE not in metafunc.fixturenames:
        return
    seeds = sweep_seeds(metafunc.config.getoption("--seed-sweep-from"), count)
    metafunc.parametrize(SEED_FIXTURE, seeds, indirect=True, ids=[f"seed={s}" for s in seeds])


def pytest_collection_modifyitems(config, items) -> None:
    if config.getoption("--seed-sweep") is None:
        return
    swept = [item for item in items if SEED_FIXTURE in getattr(item, "fixturenames", ())]
    others = [item for item in items if SEED_FIXTURE not in getattr(item, "fixturenames", ())]
    if others:
        config.hook.pytest_deselected(items=others)
    if config.getoption("--seed-sweep-by-seed"):
        order = {s: i for i, s in enumerate(sweep_seeds(config.getoption("--seed-sweep-from"),
                                                            config.getoption("--seed-sweep")))}
        swept.sort(key=lambda item: order[item.callspec.params[SEED_FIXTURE]])  # stable: file order within a seed
    items[:] = swept
