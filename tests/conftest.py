"""Shared pytest setup: every test that draws random inputs gets a fresh seed, logged so a
failure can be replayed with KDTREE_SEED=<seed>; `--seed-sweep N`, which runs those tests
over N seeds (seed_sweep.py); `--min-collected N`, CI's check that no test stopped being
collected (collection_floor.py); and a quick exit (quick_exit.py)."""

from __future__ import annotations

import os
import secrets

import collection_floor
import numpy as np
import pytest
import seed_sweep
from quick_exit import pytest_unconfigure  # noqa: F401  (hook)
from seed_sweep import (  # noqa: F401  (hooks)
    pytest_collection_modifyitems,
    pytest_configure_node,
    pytest_generate_tests,
    pytest_report_header,
    pytest_terminal_summary,
)


def pytest_addoption(parser):
    collection_floor.pytest_addoption(parser)
    seed_sweep.add_options(parser)


def pytest_configure(config):
    seed_sweep.configure(config)
    collection_floor.pytest_configure(config)


@pytest.fixture
def seed(request) -> int:
    """The seed a test draws its inputs from: one of a --seed-sweep's seeds, else
    KDTREE_SEED, else fresh."""
    value = getattr(request, "param", None)
    if value is None:
        value = int(os.environ.get("KDTREE_SEED", secrets.randbits(32)))
    print(f"[seed] {request.node.nodeid}: KDTREE_SEED={value}")
    return value


@pytest.fixture
def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)
