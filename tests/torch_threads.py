"""The `single_thread` fixture, shared by the test folders that run tiny torch models.

The models are tiny, so torch's intra-op threads only add overhead (10x and worse on the
loaded 2-core CI box): a folder's conftest imports this autouse fixture so its tests run
single-threaded, and the setting is restored afterwards. (Its own module, not a conftest:
tests/ is on sys.path through tests/conftest.py, and the folders' conftests must keep
unique module names.)"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def single_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
