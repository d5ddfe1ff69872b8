"""Shared pytest setup: every test that draws random inputs gets a fresh seed, logged so a
failure can be replayed with KDTREE_SEED=<seed>."""

from __future__ import annotations

import os
import secrets

import numpy as np
import pytest


@pytest.fixture
def seed(request) -> int:
    value = int(os.environ.get("KDTREE_SEED", secrets.randbits(32)))
    print(f"[seed] {request.node.nodeid}: KDTREE_SEED={value}")
    return value


@pytest.fixture
def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)
