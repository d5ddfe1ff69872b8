"""The one engine choice (python_engine/engine_choice.py): what "auto" picks and why, what an
explicit --engine refuses, and how a --device value names a CUDA device. The native library is
pointed at files that cannot serve (missing, not a library), so the answers do not depend on
what this machine has built."""

from __future__ import annotations

import pytest

from python_engine.engine_choice import CHOICES, choose_engine, native_unavailable
from python_engine.errors import KdtreeError
from python_engine.native import cuda_driver
from python_engine.native import library as L
from python_engine.native.device_option import cuda_device_index


@pytest.fixture
def a_gpu(monkeypatch):
    """The driver counts a GPU, whatever this machine has: the library's answers are next."""
    monkeypatch.setattr(cuda_driver, "no_gpu_reason", lambda: None)


def test_a_device_value_names_its_cuda_device_or_is_refused(rng):
    index = int(rng.integers(0, 1 << 16))
    assert cuda_device_index(f"cuda:{index}") == index
    for leaves_it_to_the_engine in (None, "", "auto", "cuda"):
        assert cuda_device_index(leaves_it_to_the_engine) == 0
    for other in ("cpu", "mps", f"cuda{index}", f"cuda:-{index}", f"cuda:{index}x", "cuda:", f"xpu:{index}"):
        with pytest.raises(KdtreeError, match="runs on CUDA devices") as info:
            cuda_device_index(other)
        assert repr(other) in str(info.value)


def test_auto_takes_torch_on_a_cpu_device_and_says_why():
    name, reason = choose_engine("auto", "cpu")
    assert name == "torch" and "CUDA devices" in reason and "'cpu'" in reason
    assert native_unavailable("cpu") == reason


def test_auto_takes_torch_without_a_built_library(tmp_path, monkeypatch, a_gpu):
    missing = tmp_path / "nowhere" / "libkdtree_engine.so"
    monkeypatch.setenv(L.ENV_LIBRARY, str(missing))
    for device in (None, "cuda", "cuda:3"):
        name, reason = choose_engine("auto", device)
        assert name == "torch" and str(missing) in reason and "kdtree build" in reason


def test_auto_takes_torch_when_the_library_does_not_answer(tmp_path, monkeypatch, rng, a_gpu):
    broken = tmp_path / "libkdtree_engine.so"
    broken.write_bytes(rng.bytes(256))
    monkeypatch.setenv(L.ENV_LIBRARY, str(broken))
    name, reason = choose_engine("auto", "cuda:1")
    assert name == "torch" and "cuda:1" in reason and str(broken) in reason


def test_without_a_gpu_auto_says_so_before_anything_about_building(tmp_path, monkeypatch, rng):
    """A machine with no GPU is told that, not to spend minutes building a library it could
    not run (built or not)."""
    monkeypatch.setenv(L.ENV_LIBRARY, str(tmp_path / "nowhere" / "libkdtree_engine.so"))
    absent = f"this machine has no CUDA GPU (test {rng.integers(1 << 30)})"
    monkeypatch.setattr(cuda_driver, "no_gpu_reason", lambda: absent)
    for device in (None, "cuda", "cuda:1"):
        name, reason = choose_engine("auto", device)
        assert name == "torch" and reason.startswith(absent) and "kdtree build" not in reason
    assert native_unavailable("cpu") != native_unavailable(None)  # a cpu device is refused for what it is


def test_the_driver_sees_a_gpu_exactly_when_nvidia_smi_lists_one():
    from kdtree_cli.native_build.arch import detect_gpu_archs

    reason = cuda_driver.no_gpu_reason()
    assert (reason is None) == bool(detect_gpu_archs()), reason
    assert reason is None or "no CUDA GPU" in reason


def test_an_explicit_engine_is_taken_as_asked_or_refused_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(L.ENV_LIBRARY, str(tmp_path / "missing.so"))
    assert choose_engine("torch", "cpu").name == "torch"
    assert choose_engine("torch", "cuda").name == "torch"
    # native as asked: a missing library is the engine's to report when it loads
    assert choose_engine("native", "cuda:2").name == "native"
    with pytest.raises(KdtreeError, match=r"--engine native: .*runs on CUDA devices .*'cpu'"):
        choose_engine("native", "cpu")
    with pytest.raises(KdtreeError, match="choose torch, native or auto"):
        choose_engine("warp-drive", "cpu")
    assert set(CHOICES) == {"auto", "torch", "native"}


def test_several_gpus_need_the_native_engine(tmp_path, monkeypatch):
    monkeypatch.setenv(L.ENV_LIBRARY, str(tmp_path / "missing.so"))
    for requested in ("auto", "native"):
        name, reason = choose_engine(requested, None, gpus=4)
        assert name == "native" and "--gpus 4" in reason
    with pytest.raises(KdtreeError, match="--gpus 2 needs --engine native"):
        choose_engine("torch", None, gpus=2)


def test_a_torch_only_request_keeps_auto_on_torch_and_refuses_native(tmp_path, monkeypatch):
    monkeypatch.setenv(L.ENV_LIBRARY, str(tmp_path / "missing.so"))
    why = "--budget auto runs on the torch engine only"
    assert choose_engine("auto", "cuda", torch_only=why) == ("torch", why)
    assert choose_engine("torch", "cuda", torch_only=why).name == "torch"
    for requested, gpus in (("native", 1), ("auto", 2), ("native", 2)):
        with pytest.raises(KdtreeError, match=why):
            choose_engine(requested, "cuda", gpus=gpus, torch_only=why)
