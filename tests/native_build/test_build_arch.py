"""CUDA target parsing and the order in which --arch, the environment, a host profile and the
visible GPUs decide the targets."""

from __future__ import annotations

import os
import stat

import pytest

from kdtree_cli.native_build.arch import (
    ARCH_ENV_VAR,
    CudaArch,
    arch_for_compute_cap,
    check_archs_supported,
    detect_gpu_archs,
    parse_arch_spec,
    resolve_archs,
)
from python_engine.errors import KdtreeError

H, B100, B120 = CudaArch(90, "a"), CudaArch(100), CudaArch(120)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("90a,120", (H, B120)),
        ("120, 90a", (H, B120)),  # sorted, spaces allowed
        ("sm_90a;compute_120", (H, B120)),
        ("hopper", (H,)),
        ("H200", (H,)),
        ("rtx-pro-6000", (B120,)),
        ("blackwell", (B100, B120)),  # both Blackwell families: sm_120 does not run sm_100 code
        ("hopper,blackwell,90a", (H, B100, B120)),  # de-duplicated
        ("all", (H, B100, B120)),
        ("9.0", (CudaArch(90),)),
        ("12.0", (B120,)),
        ("90", (CudaArch(90),)),  # plain sm_90 when asked for by number
        ("100f", (CudaArch(100, "f"),)),
        ("sm90a", (H,)),
    ],
)
def test_parse_names_and_lists(spec, expected):
    assert parse_arch_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "empty"),
        (" , ;", "empty"),
        ("volta2", "unknown CUDA architecture 'volta2'"),
        ("90b", "unknown"),
        ("sm_", "unknown"),
        ("9000", "unknown"),
        ("52", "older than sm_75"),
        ("80a", "'a' targets exist from sm_90"),
        ("90f", "'f' targets exist from sm_100"),
        ("90a,nope", "'nope'"),
    ],
)
def test_parse_rejects_invalid_input_with_a_hint(spec, problem):
    with pytest.raises(KdtreeError) as info:
        parse_arch_spec(spec)
    assert problem in str(info.value)


def test_gencode_is_explicit_per_target():
    assert H.gencode == "-gencode=arch=compute_90a,code=sm_90a"
    assert B120.gencode == "-gencode=arch=compute_120,code=sm_120"


def test_compute_cap_maps_hopper_to_its_arch_specific_target():
    assert arch_for_compute_cap("9.0") == H
    assert arch_for_compute_cap("12.0") == B120
    assert arch_for_compute_cap(" 10.0 ") == B100
    assert arch_for_compute_cap("8.6") == CudaArch(86)
    with pytest.raises(ValueError):
        arch_for_compute_cap("N/A")


def test_precedence_flag_env_profile_gpus_default():
    gpus = lambda: (B100,)  # noqa: E731
    env = {ARCH_ENV_VAR: "hopper"}
    assert resolve_archs("120", host_profile_arch="90a", env=env, detect=gpus).archs == (B120,)
    choice = resolve_archs(None, host_profile_arch="120", env=env, detect=gpus)
    assert (choice.archs, choice.source) == ((H,), ARCH_ENV_VAR)
    choice = resolve_archs(None, host_profile_arch=["rtx-pro-6000"], env={}, detect=gpus)
    assert (choice.archs, choice.source) == ((B120,), "host profile")
    choice = resolve_archs(None, env={}, detect=gpus)
    assert (choice.archs, choice.source) == ((B100,), "visible GPUs")
    choice = resolve_archs(None, env={}, detect=lambda: ())
    assert choice.archs == (H, B120) and "no GPU" in choice.source
    # --arch auto skips the environment and asks the GPUs
    assert resolve_archs("auto", env=env, detect=gpus).archs == (B100,)


def _fake_nvidia_smi(tmp_path, body: str) -> dict[str, str]:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{tmp_path}:{os.environ.get('PATH', '')}"}


def test_detects_gpus_through_nvidia_smi(tmp_path, monkeypatch):
    env = _fake_nvidia_smi(tmp_path, "printf '9.0\\n12.0\\n9.0\\n'")
    monkeypatch.setenv("PATH", env["PATH"])
    assert detect_gpu_archs({}) == (H, B120)
    assert detect_gpu_archs({"CUDA_VISIBLE_DEVICES": "1,0"}) == (H, B120)
    assert "--id=1,0" in (tmp_path / "args").read_text()
    assert detect_gpu_archs({"CUDA_VISIBLE_DEVICES": ""}) == ()  # every GPU hidden


def test_detection_failure_means_no_gpus(tmp_path, monkeypatch):
    env = _fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    monkeypatch.setenv("PATH", env["PATH"])
    assert detect_gpu_archs({}) == ()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert detect_gpu_archs({}) == ()


def test_unsupported_target_names_what_nvcc_offers():
    with pytest.raises(KdtreeError) as info:
        check_archs_supported((H, B120), (75, 80, 86, 89, 90), "/opt/cuda-12.4/bin/nvcc")
    message = str(info.value)
    assert "sm_120" in message and "sm_90a" not in message.split("supports")[0]
    assert "90" in message.split("supports")[1]
    check_archs_supported((H, B120), (90, 100, 120), "nvcc")  # no error
