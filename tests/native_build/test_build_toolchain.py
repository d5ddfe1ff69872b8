"""Toolchain discovery: the documented search order, and errors that say what is missing,
where we looked and how to fix it."""

from __future__ import annotations

import importlib.metadata
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kdtree_cli.native_build import toolchain
from kdtree_cli.native_build.toolchain import find_cublas, find_cuda
from python_engine.errors import KdtreeError

FAKE_NVCC = """#!/bin/sh
case "$1" in
  --version) echo "Cuda compilation tools, release {version}, V{version}.1" ;;
  --list-gpu-code) printf 'sm_90\\nsm_100\\nsm_120\\n' ;;
  --dryrun) echo "#\\$ TOP={home}/bin/.." >&2 ;;
esac
"""


def fake_toolkit(home: Path, version: str = "13.0", cublas: bool = False) -> Path:
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "lib64").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(version=version, home=home))
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    if cublas:
        (home / "include" / "cublas_v2.h").write_text("")
        (home / "lib64" / "libcublas.so").write_text("")
    return home


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No toolkit anywhere: empty PATH, and the well-known homes point at empty folders."""
    monkeypatch.setattr(toolchain, "WELL_KNOWN_CUDA_HOMES", (str(tmp_path / "usr-local-cuda"),
                                                             str(tmp_path / "opt-cuda")))
    return {"PATH": str(tmp_path / "empty-bin")}


def test_missing_nvcc_says_where_it_looked_and_how_to_fix(nowhere, tmp_path):
    env = dict(nowhere, CUDA_HOME=str(tmp_path / "not-cuda"))
    with pytest.raises(KdtreeError) as info:
        find_cuda(None, env)
    message = str(info.value)
    assert message.startswith("nvcc (the CUDA toolkit) not found")
    for place in ("$CUDA_HOME", "PATH: no nvcc", "usr-local-cuda", "opt-cuda"):
        assert place in message
    assert "--cuda-home" in message and "CUDA_HOME" in message.split("Fix:")[1]


def test_explicit_cuda_home_must_be_a_toolkit(tmp_path):
    with pytest.raises(KdtreeError, match=r"--cuda-home .* is not a CUDA toolkit: .*no bin/nvcc"):
        find_cuda(str(tmp_path), {})


def test_search_order_cuda_home_then_path_then_well_known(nowhere, tmp_path):
    first = fake_toolkit(tmp_path / "first", version="13.0")
    second = fake_toolkit(tmp_path / "second", version="12.9")
    env = dict(nowhere, CUDA_HOME=str(first), PATH=str(second / "bin"))
    found = find_cuda(None, env)
    assert (found.home, found.found_by, found.version) == (first.resolve(), "$CUDA_HOME", (13, 0))
    assert found.supported_sm == (90, 100, 120)
    found = find_cuda(None, dict(nowhere, PATH=str(second / "bin")))
    assert found.home == second.resolve() and found.found_by.startswith("nvcc on PATH")
    # a CUDA_HOME without nvcc is skipped, and the skip is recorded
    found = find_cuda(None, dict(nowhere, CUDA_HOME=str(tmp_path), PATH=str(second / "bin")))
    assert found.home == second.resolve() and any("no bin/nvcc" in s for s in found.skipped)
    assert find_cuda(str(first), dict(nowhere, CUDA_HOME=str(second))).home == first.resolve()


def test_wrapper_nvcc_on_path_finds_the_real_toolkit(nowhere, tmp_path):
    real = fake_toolkit(tmp_path / "cuda-13.0")
    wrapper_dir = tmp_path / "wrapper-bin"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "nvcc"  # like /usr/local/bin/nvcc: exec the real one
    wrapper.write_text(f'#!/bin/sh\nexec {real}/bin/nvcc "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    found = find_cuda(None, dict(nowhere, PATH=str(wrapper_dir)))
    assert found.home == real.resolve()


def test_cublas_from_toolkit_else_wheel_else_a_helpful_error(tmp_path, monkeypatch):
    with_cublas = find_cuda(str(fake_toolkit(tmp_path / "a", cublas=True)), {})
    assert find_cublas(with_cublas).found_by.startswith("CUDA toolkit")
    without = find_cuda(str(fake_toolkit(tmp_path / "b")), {})
    monkeypatch.setattr(toolchain, "CUBLAS_WHEELS", ("no-such-cublas-wheel",))
    with pytest.raises(KdtreeError) as info:
        find_cublas(without)
    message = str(info.value)
    assert message.startswith("cuBLAS not found") and str(tmp_path / "b") in message
    assert "pip install 'nvidia-cublas==13.0.*'" in message


def test_cublas_wheel_must_match_the_toolkit_major(tmp_path):
    try:
        importlib.metadata.distribution("nvidia-cublas")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("nvidia-cublas wheel not installed")
    old = find_cuda(str(fake_toolkit(tmp_path / "old", version="12.4")), {})
    with pytest.raises(KdtreeError, match="does not match nvcc 12.4"):
        find_cublas(old)


def test_cli_reports_a_bad_cuda_home_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kdtree_cli", "build", "--cuda-home", str(tmp_path),
                           "--build-dir", str(tmp_path / "build")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "is not a CUDA toolkit" in proc.stderr and "Traceback" not in proc.stderr
