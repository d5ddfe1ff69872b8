"""Shared pytest setup: every test that draws random inputs gets a fresh seed, logged so a
failure can be replayed with KDTREE_SEED=<seed>; and `--min-collected N`, CI's check that
no test stopped being collected (collection_floor.py)."""

from __future__ import annotations

import os
import secrets

import numpy as np
import pytest
from collection_floor import pytest_addoption, pytest_configure  # noqa: F401  (hooks)


@pytest.fixture
def seed(request) -> int:
    value = int(os.environ.get("KDTREE_SEED", secrets.randbits(32)))
    print(f"[seed] {request.node.nodeid}: KDTREE_SEED={value}")
    return value


@pytest.fixture
def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)
