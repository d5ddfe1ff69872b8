"""Fixtures for the model tests: tiny random DeepSeek-V3 checkpoints on disk, and torch
pinned to one thread (tests/torch_threads.py says why)."""

from __future__ import annotations

import pytest
from hf_oracle import PARITY_CONFIGS
from torch_threads import single_thread  # noqa: F401 (autouse fixture for this folder)

from python_engine.model.synthetic_checkpoint import write_random_target


@pytest.fixture(scope="session")
def parity_dirs(tmp_path_factory):
    """name -> checkpoint dir, one per PARITY_CONFIGS entry (weight seed in the name)."""
    root = tmp_path_factory.mktemp("parity")
    return {name: write_random_target(root / f"{name}-seed{11 + i}", cfg, seed=11 + i)
            for i, (name, cfg) in enumerate(PARITY_CONFIGS.items())}
