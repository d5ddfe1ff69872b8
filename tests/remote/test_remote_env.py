"""What a remote must have: Python >= 3.11 and (to build) an nvcc new enough for the
host's arch, each missing piece reported with what to install; `kdtree hosts` checks;
the venv with requirements installed offline from uploaded wheels."""

from __future__ import annotations

import base64
import hashlib
import os
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

    auto = host_factory(gpus=8, arch=(), nvidia_smi=smi, dir=good.dir)  # kdtree build detects it
    check = check_host(auto)
    assert check.ok, check.problems
    assert check.arch == "sm_120 (auto)"

    wrong = host_factory(gpus=4, arch=("90a",), nvidia_smi=smi,
                         python=fake_program(tmp_path / "py", "Python 3.10.2"))
    check = check_host(wrong)
    assert not check.ok and check.python == "missing/old"
    text = "\n".join(check.problems)
    assert "sees 8 GPU(s), the inventory says gpus = 4" in text
    assert "add [120] to arch" in text and "Python >= 3.11" in text


def test_hosts_check_asks_nvidia_smi_with_the_hosts_env(sshd, host_factory, project, tmp_path):
    """A driver found only through the host's `env` (LD_LIBRARY_PATH in a container): the
    GPU check sees what the build and test steps will see."""
    smi = tmp_path / "nvidia-smi-needs-env"
    smi.write_text('#!/bin/sh\n[ "$FAKE_DRIVER_LIBS" = /opt/driver ] || { echo "libnvidia-ml.so.1: '
                   'not found" >&2; exit 9; }\necho "NVIDIA H200, 9.0"\n')
    smi.chmod(0o755)
    host = host_factory(gpus=1, arch=(), nvidia_smi=str(smi), env={"FAKE_DRIVER_LIBS": "/opt/driver"})
    check = check_host(host)
    assert check.ok, check.problems
    assert (check.gpus, check.arch) == ("1 x NVIDIA H200", "sm_90 (auto)")


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
    venv = remote_dir(sshd, host) / "releases" / first.release / ".venv"
    test_lines = [t for (_h, s, t, _e) in first.reporter.lines if s == "test"]
    assert test_lines == [f"{value} {venv}"]
    notes = [n for _h, n in first.reporter.notes]
    assert any("uploading 1 wheel(s)" in n for n in notes)
    assert any("from 1 uploaded wheel(s), no index" in n for n in notes)

    second = run_deploy(host, project, tmp_path / "results", build=False, wheels=wheels)
    assert second.ok, second.error
    notes = [n for _h, n in second.reporter.notes]
    assert any(n.startswith("environment: up to date") for n in notes)
    assert "wheels: all 1 already there" in notes


def probe_host(host_factory, version_check: str = "", requirement: str = "kdtree_probe_pkg", **overrides):
    """A venv host whose test step prints kdtree_probe_pkg's VALUE (and can be made to fail)."""
    return host_factory(
        venv=True, requirements=(requirement,), build=None,
        test=("{python}", "-c", f"import kdtree_probe_pkg as m; print(m.VALUE); {version_check}"),
        **overrides,
    )


def current_value(sshd, host) -> str:
    """What `kdtree` on current sees: run current's Python as exec.py does."""
    from remote.exec import stream_kdtree

    del sshd
    return "".join(stream_kdtree(host, ["probe"]))


@pytest.mark.slow
def test_a_failed_deploy_cannot_change_what_current_runs(sshd, host_factory, project, tmp_path, seed):
    """Each release has its own environment: a deploy whose requirements changed and whose
    tests then failed leaves current running the packages it was tested with."""
    (project / "kdtree_cli" / "__main__.py").write_text(
        "import kdtree_probe_pkg as m\nprint(m.VALUE, end='')\n")
    old, new = seed % 1000, seed % 1000 + 1
    wheels_v1, wheels_v2 = tmp_path / "w1", tmp_path / "w2"
    for folder, version, value in ((wheels_v1, "0.1", old), (wheels_v2, "0.2", new)):
        folder.mkdir()
        make_wheel(folder, "kdtree_probe_pkg", version, f"VALUE = {value}\n")
    host = probe_host(host_factory)
    good = run_deploy(host, project, tmp_path / "results", build=False, wheels=wheels_v1)
    assert good.ok, good.error
    assert current_value(sshd, host) == str(old)

    failing = probe_host(host_factory, "raise SystemExit(3)", "kdtree_probe_pkg==0.2", dir=host.dir)
    bad = run_deploy(failing, project, tmp_path / "results", build=False, wheels=wheels_v2)
    assert not bad.ok and "test failed (exit 3)" in bad.error
    assert [t for (_h, s, t, _e) in bad.reporter.lines if s == "test"] == [str(new)]  # it was installed
    assert current_value(sshd, host) == str(old)  # ... but not for current

    # the same requirements again: the environment is reused, not rebuilt
    again = run_deploy(host, project, tmp_path / "results", build=False, wheels=wheels_v1)
    assert again.ok, again.error
    assert any(n.startswith("environment: up to date") for _h, n in again.reporter.notes)
    envs = remote_dir(sshd, host) / "envs"
    assert len(list(envs.iterdir())) == 2  # v1's and the failed deploy's (kept with its release)


@pytest.mark.slow
def test_environments_no_release_uses_are_pruned(sshd, host_factory, project, tmp_path, seed):
    host = probe_host(host_factory, keep=1)
    for i in range(3):
        wheels = tmp_path / f"w{i}"
        wheels.mkdir()
        make_wheel(wheels, "kdtree_probe_pkg", f"0.{i}", f"VALUE = {seed % 1000 + i}\n")
        r = run_deploy(host, project, tmp_path / "results", build=False, wheels=wheels)
        assert r.ok, r.error
    rdir = remote_dir(sshd, host)
    (release,) = [p.name for p in (rdir / "releases").iterdir()]
    used = os.path.basename(os.readlink(rdir / "releases" / release / ".venv"))
    assert [p.name for p in (rdir / "envs").iterdir()] == [used]


@pytest.mark.slow
def test_a_host_python_inside_a_venv_lends_its_packages(sshd, host_factory, project, tmp_path):
    """The H200 image's python3 is itself a venv (/opt/torch/.venv): `venv --system-site-
    packages` from it would see the base interpreter's packages, not that venv's (torch).
    Here the host Python is this test run's venv, whose typer the base Python lacks."""
    import sys

    assert sys.prefix != sys.base_prefix, "the test suite runs from the project's .venv"
    wheels = tmp_path / "w"
    wheels.mkdir()
    make_wheel(wheels, "kdtree_probe_pkg", "0.1", "VALUE = 1\n")
    host = host_factory(venv=True, requirements=("typer", "kdtree_probe_pkg"), build=None,
                        test=("{python}", "-c", "import typer, sys; print(typer.__file__.startswith(sys.prefix))"))
    r = run_deploy(host, project, tmp_path / "results", build=False, wheels=wheels)
    assert r.ok, r.error + "\n" + "\n".join(t for *_x, t, _e in r.reporter.lines[-20:])
    assert [t for (_h, s, t, _e) in r.reporter.lines if s == "test"] == ["False"]  # the parent's typer


@pytest.mark.slow
def test_a_host_python_without_pip_gets_a_venv_with_its_own(sshd, host_factory, project, tmp_path):
    """Debian/Ubuntu: python3 often has no pip (python3-pip); the venv then brings its own
    (ensurepip). With pip on the host, the venv gets none and the host's pip installs."""
    import sys

    no_pip = tmp_path / "python-without-pip"
    no_pip.write_text(f'#!/bin/sh\n[ "$1 $2" = "-m pip" ] && exit 1\nexec {sys.executable} "$@"\n')
    no_pip.chmod(0o755)
    wheels = tmp_path / "w"
    wheels.mkdir()
    make_wheel(wheels, "kdtree_probe_pkg", "0.1", "VALUE = 7\n")
    for python, own_pip in ((str(no_pip), True), (sys.executable, False)):
        host = probe_host(host_factory, python=python)
        r = run_deploy(host, project, tmp_path / "results", build=False, wheels=wheels)
        assert r.ok, r.error
        assert [t for (_h, s, t, _e) in r.reporter.lines if s == "test"] == ["7"]
        (env,) = (remote_dir(sshd, host) / "envs").iterdir()
        assert (env / "bin" / "pip").exists() == own_pip
