"""Fixtures for the model tests: tiny random DeepSeek-V3 checkpoints on disk.

The models are tiny, so torch's intra-op threads only add overhead (10x and worse on the
loaded 2-core CI box): these tests run single-threaded and restore the setting after."""

from __future__ import annotations

import pytest
import torch
from hf_oracle import PARITY_CONFIGS

from python_engine.model.random_target import write_random_target


@pytest.fixture(autouse=True)
def single_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def parity_dirs(tmp_path_factory):
    """name -> checkpoint dir, one per PARITY_CONFIGS entry (weight seed in the name)."""
    root = tmp_path_factory.mktemp("parity")
    return {name: write_random_target(root / f"{name}-seed{11 + i}", cfg, seed=11 + i)
            for i, (name, cfg) in enumerate(PARITY_CONFIGS.items())}
