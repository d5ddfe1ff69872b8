"""The emulated engine as on ct200's GPU: KDTREE_DEVICE_PROFILE=rtx-pro-6000 gives the
emulator sm_120's limits (188 SMs, 101,376 bytes of shared memory a block, no wgmma, 96 GiB),
so the engine's kernels plan as they will there: verify attention on config 12 (16-row tiles,
two key tiles in flight) and the 8-row float32 tile instead of the wgmma ones (before that tile, every float32 forward was
refused under these limits). The forward parity, DDTree == AR and split suites run in a
child process, since the profile is read once a process (the emulated device, the launch
limits' cache)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from python_engine.project import PROJECT_ROOT

PROFILE = "rtx-pro-6000"
PROFILE_MEMORY = 96 << 30  # what the emulated device reports under it (device_profiles.def)
# a few cases of each suite (float32 and bf16, the Kimi-like pair's MLA widths, a split): the
# wgmma tiles' absence and the 99 KB limit change the plans of every one. CI runs these to keep
# its time; the whole suites run the same way by hand (KDTREE_DEVICE_PROFILE=rtx-pro-6000 pytest
# tests/native/test_native_forward.py tests/native/test_native_decode.py tests/native/test_native_split.py).
SUITES = (
    "tests/native/test_native_forward.py::test_native_matches_torch_reference[kimi_like-float32]",
    "tests/native/test_native_forward.py::test_native_matches_torch_reference[kimi_like-bfloat16]",
    "tests/native/test_native_decode.py::test_ddtree_equals_native_ar_equals_torch_ar[demo-float32]",
    "tests/native/test_native_decode.py::test_ddtree_equals_native_ar_equals_torch_ar[demo-bfloat16]",
    "tests/native/test_native_split.py::test_split_forwards_equal_the_whole_model[kimi_like-2]",
)
CHILD_TIMEOUT_S = 1500


def _env() -> dict[str, str]:
    return {**os.environ, "KDTREE_DEVICE_PROFILE": PROFILE, "KDTREE_NATIVE_VARIANT": "emu"}


@pytest.mark.slow
def test_the_emulated_device_is_the_profiles(native_variant):
    if native_variant != "emu":
        pytest.skip("the GPU's memory is its own; a profile caps only the plans' limits there")
    probe = ("from python_engine.native.engine import device_memory; "
             "print(device_memory(0, 'emu')[1])")
    proc = subprocess.run([sys.executable, "-c", probe], env=_env(), cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) == PROFILE_MEMORY


@pytest.mark.slow
def test_engine_suites_pass_under_the_rtx_pro_6000_profile(native_variant):
    if native_variant != "emu":
        pytest.skip("on a GPU, run the suites with KDTREE_DEVICE_PROFILE set (the device must have what it asks)")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", *SUITES],
                          env=_env(), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    summary = [line for line in out.splitlines() if " passed" in line][-1]
    assert f"{len(SUITES)} passed" in summary and "failed" not in summary and "skipped" not in summary, summary
