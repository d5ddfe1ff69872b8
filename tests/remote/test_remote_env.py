"""What a remote must have: Python >= 3.11 and (to build) an nvcc new enough for the
host's arch, each missing piece reported with what to install; `kdtree hosts` checks;
the venv with requirements installed offline from uploaded wheels."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from remote.probe import check_host, parse_nvidia_smi

from conftest import remote_dir, run_deploy


def fake_program(path: Path, output: str, status: int = 0) -> str:
    """A small script standing in for python / nvcc / nvidia-smi on the remote."""
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {status}\n")
    path.chmod(0o755)
    return str(path)


def test_too_old_python_says_what_to_install(sshd, host_factory, project, tmp_path):
    host = host_factory(python=fake_program(tmp_path / "python3.9", "Python 3.9.18"))
    r = run_deploy(host, project, tmp_path / "results")
    assert not r.ok
    assert "is Python 3.9.18; kdtree needs Python >= 3.11" in r.error
    assert "sudo apt install python3.11" in r.error and "set python =" in r.error
    assert not remote_dir(sshd, host).exists()  # refused before touching anything


def test_missing_python_says_what_to_install(sshd, host_factory, project, tmp_path):
    host = host_factory(python=str(tmp_path / "no such" / "python3"))
    r = run_deploy(host, project, tmp_path / "results")
    assert not r.ok and "Python not found there" in r.error and "install Python 3.11" in r.error


def test_missing_nvcc_says_what_to_install_and_no_build_skips_it(sshd, host_factory, project, tmp_path):
    host = host_factory(cuda_home=str(tmp_path / "no-cuda"), arch=("120",))
    r = run_deploy(host, project, tmp_path / "results")
    assert not r.ok
    assert f"nvcc not found at '{tmp_path / 'no-cuda' / 'bin' / 'nvcc'}'" in r.error
    assert "install the CUDA toolkit 12.8 or newer" in r.error and "--no-build" in r.error
    assert not remote_dir(sshd, host).exists()
    skipped = run_deploy(host, project, tmp_path / "results", build=False)
    assert skipped.ok, skipped.error


def test_nvcc_too_old_for_the_arch(sshd, host_factory, project, tmp_path):
    nvcc = fake_program(tmp_path / "nvcc", "nvcc: NVIDIA (R) Cuda compiler driver\n"
                                           "Cuda compilation tools, release 12.4, V12.4.131")
    host = host_factory(nvcc=nvcc, arch=("90a", "120"))
    r = run_deploy(host, project, tmp_path / "results")
    assert not r.ok and "nvcc 12.4 cannot build sm_120" in r.error and "12.8 or newer" in r.error


def test_parse_nvidia_smi():
    text = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0\nNVIDIA H200, 9.0\nbogus\n"
    assert parse_nvidia_smi(text) == [("NVIDIA RTX PRO 6000 Blackwell Server Edition", 120),
                                      ("NVIDIA H200", 90)]


def test_hosts_check_reports_gpus_arch_and_problems(sshd, host_factory, project, tmp_path):
    smi = fake_program(tmp_path / "nvidia-smi",
                       "\n".join(["NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0"] * 8))
    good = host_factory(gpus=8, arch=("120",), nvidia_smi=smi)
    assert run_deploy(good, project, tmp_path / "results", build=False, test=False).ok
    check = check_host(good)
    assert check.ok, check.problems
    assert check.reachable and check.python.startswith("3.") and check.nvcc.startswith("1")
    assert check.gpus == "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition" and check.arch == "sm_120"
    assert check.current != "none"

    wrong = host_factory(gpus=4, arch=("90a",), nvidia_smi=smi,
                         python=fake_program(tmp_path / "py", "Python 3.10.2"))
    check = check_host(wrong)
    assert not check.ok and check.python == "missing/old"
    text = "\n".join(check.problems)
    assert "sees 8 GPU(s), the inventory says gpus = 4" in text
    assert "add [120] to arch" in text and "Python >= 3.11" in text


def make_wheel(folder: Path, name: str, version: str, module_source: str) -> Path:
    """A minimal pure-Python wheel (PEP 427), built by hand so the test needs no network."""
    dist = f"{name}-{version}"
    files = {
        f"{name}/__init__.py": module_source.encode(),
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: kdtree-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


@pytest.mark.slow
def test_venv_from_uploaded_wheels_offline(sshd, host_factory, project, tmp_path, seed):
    """venv = true with --wheels: the venv is created, the wheel uploaded and installed with
    --no-index; the steps run with the venv's Python; a second deploy reinstalls nothing."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    value = seed % 100000
    make_wheel(wheels, "kdtree_probe_pkg", "0.1", f"VALUE = {value}\n")
    host = host_factory(
        venv=True, requirements=("kdtree_probe_pkg==0.1",),
        test=("{python}", "-c", "import sys, kdtree_probe_pkg as m; print(m.VALUE, sys.prefix)"),
    )
    first = run_deploy(host, project, tmp_path / "results", build=False, wheels=wheels)
    assert first.ok, first.error
    venv = remote_dir(sshd, host) / "venv"
    test_lines = [t for (_h, s, t, _e) in first.reporter.lines if s == "test"]
    assert test_lines == [f"{value} {venv}"]
    notes = [n for _h, n in first.reporter.notes]
    assert any("uploading 1 wheel(s)" in n for n in notes)
    assert any("from 1 uploaded wheel(s), no index" in n for n in notes)

    second = run_deploy(host, project, tmp_path / "results", build=False, wheels=wheels)
    assert second.ok, second.error
    notes = [n for _h, n in second.reporter.notes]
    assert "environment: up to date" in notes and "wheels: all 1 already there" in notes
