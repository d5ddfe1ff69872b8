"""The DFlash drafter's split-KV attention (csrc/kernels/drafter_attn.cu) on the CPU through
the SIMT emulator: csrc/tests/test_drafter_attn.cu, the program the GPU runs, built on the
emulator by `kdtree build emu_tests` (EMU_TWINS) and run with the test's seed, under each
device profile (the plan's split count follows the SM count). Its own float64 host reference
checks random shapes (GQA 1, 2, 8; q_len 1..16; contexts per request, 0 included, over
several key splits; bf16 and float32) and the plan's rules.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from python_engine.project import PROJECT_ROOT

CASES = 4  # KD_TEST/KD_GPU_TEST cases in test_drafter_attn.cu
PROFILES = ("h200", "rtx-pro-6000")

pytestmark = pytest.mark.slow  # the build (shared with the other emulator tests), then a second of runs


@pytest.fixture(scope="module")
def program():
    try:
        from kdtree_cli.native_build.toolchain import find_cuda, find_cxx

        find_cuda(), find_cxx()
    except Exception as exc:  # no CUDA headers or no g++: nothing to build against
        pytest.skip(f"no CUDA toolkit / host compiler: {exc}")
    from rich.console import Console

    from kdtree_cli.native_build.driver import BuildRequest, build

    outcome = build(BuildRequest(targets=("emu_tests",)), console=Console(stderr=True, quiet=True))
    return outcome.configured.build_dir / "bin" / "emu" / "test_drafter_attn"


@pytest.mark.parametrize("profile", PROFILES)
def test_drafter_attn_program_on_emulator(program, seed, profile):
    proc = subprocess.run([str(program)], capture_output=True, text=True, timeout=900, cwd=PROJECT_ROOT,
                          env={**os.environ, "KDTREE_TEST_SEED": str(seed), "KDTREE_DEVICE_PROFILE": profile,
                               "KDTREE_REPO_ROOT": str(PROJECT_ROOT)})
    out = proc.stdout + proc.stderr
    last = [line for line in out.splitlines() if line.strip()][-1]
    assert proc.returncode == 0 and last.startswith(f"{CASES} passed, 0 failed"), out[-6000:]
