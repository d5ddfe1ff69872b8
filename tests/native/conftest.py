"""Fixtures for the native-engine tests.

The tests run the native engine in one of two builds, chosen by KDTREE_NATIVE_VARIANT:
"emu" (default: lib/libkdtree_engine_emu.so, the engine's own sources on the CPU through the
SIMT emulator, built here by `kdtree build engine_emu`) or "gpu" (lib/libkdtree_engine.so on
a CUDA device, as on the H200; the torch reference then runs on CUDA too). The same
assertions hold for both; the GPU run uses the issue's full sizes (native_sizes.py).
"""

from __future__ import annotations

import os

import pytest
from torch_threads import single_thread  # noqa: F401 (autouse fixture for this folder)

from python_engine.native import library as L

VARIANT = os.environ.get("KDTREE_NATIVE_VARIANT", "emu")


@pytest.fixture(scope="session")
def native_variant() -> str:
    """Builds the emulated engine once per session (the GPU run builds with `kdtree build`)."""
    if VARIANT not in L.LIBRARY_NAMES:
        raise pytest.UsageError(f"KDTREE_NATIVE_VARIANT={VARIANT!r}: use emu or gpu")
    if VARIANT == "emu":
        try:
            from kdtree_cli.native_build.driver import BuildRequest, build
            from kdtree_cli.native_build.toolchain import find_cuda
            find_cuda()
        except Exception as exc:  # no CUDA headers or no compiler: nothing to build against
            pytest.skip(f"no CUDA toolkit to build the emulated engine: {exc}")
        from rich.console import Console

        build(BuildRequest(targets=("engine_emu",)), console=Console(stderr=True, quiet=True))
    path = L.library_path(VARIANT)
    assert path.is_file(), f"{path} missing: run `kdtree build`"
    return VARIANT


@pytest.fixture(scope="session")
def torch_device() -> str:
    """Where the torch reference runs: CUDA next to the GPU engine, else the CPU."""
    return "cuda" if VARIANT == "gpu" else "cpu"
