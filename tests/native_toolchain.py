"""`needs_toolchain`: skip a test where the CUDA toolchain (nvcc, cuBLAS, g++, ninja) is not
found. Shared by the build tests and the CLI's hostile-input tests. (Its own module, not a
conftest: tests/ is on sys.path through tests/conftest.py.)"""

from __future__ import annotations

import pytest

from python_engine.errors import KdtreeError


def have_toolchain() -> str | None:
    """None when nvcc, cuBLAS, g++ and ninja are all found, else why not."""
    from kdtree_cli.native_build.toolchain import find_toolchain

    try:
        find_toolchain()
    except KdtreeError as exc:
        return str(exc)
    return None


needs_toolchain = pytest.mark.skipif(have_toolchain() is not None, reason="no CUDA toolchain here")
