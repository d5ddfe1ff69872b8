"""The remote's toolchain: checks that say what to install, and the Python environment.

Preflight (before anything on the remote is touched):
- the host's `python` answers `--version` with 3.11 or newer;
- when building: nvcc exists, and is new enough for every arch the host builds.

Environment (venv = true, the default): <dir>/venv, created with --system-site-packages
(so a GPU box keeps its own CUDA torch), holding the project's requirements (pyproject
dependencies plus the host's extras, or the host's `requirements`). The project itself is
not installed: commands run from the release folder with PYTHONPATH set to it. With
`--wheels DIR` the wheels are uploaded to <dir>/wheels (only new or changed files) and pip
runs with --no-index, for remotes without internet. A stamp holding the hash of
(python, requirements, wheels) skips pip when nothing changed.

venv = false: the host's `python` is used as it is (for a box where a Python with the
dependencies already exists); nothing is installed.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Callable

from fabric import Connection

from remote import channel, releases, transfer
from remote.errors import InventoryError, RemoteEnvError
from remote.inventory import HostConfig
from remote.shell import join, q, rpath

MIN_PYTHON = (3, 11)
# the oldest CUDA whose nvcc can target each SM (sm_100 / sm_120 arrived in CUDA 12.8)
NVCC_MIN_FOR_SM = {80: (11, 0), 86: (11, 1), 89: (11, 8), 90: (11, 8), 100: (12, 8), 120: (12, 8)}
STAMP = ".kdtree-env.sha256"
WHEEL_SUFFIXES = (".whl", ".tar.gz", ".zip")


def query_versions(conn: Connection, programs: list[str]) -> list[tuple[int, str]]:
    """`P --version` for each program in one round trip: [(exit status, output)]."""
    script = "; ".join(f'{q(p)} --version 2>&1; echo "@@kdtree rc=$?"' for p in programs)
    text = channel.run(conn, script, what="checking the remote tools", timeout=60).text
    parts = re.split(r"@@kdtree rc=(\d+)\n?", text)  # [out, rc, out, rc, ..., tail]
    return [(int(code), out) for out, code in zip(parts[0::2], parts[1::2], strict=False)]


def python_version(host: HostConfig, python: str, answer: tuple[int, str]) -> tuple[int, int, int]:
    code, text = answer
    where = host.source or "kdtree.toml"
    install = ("install Python 3.11 or newer there (Debian/Ubuntu: `sudo apt install python3.11 "
               "python3.11-venv`; or uv/pyenv/conda) and set python = \"/path/to/python3.11\" for "
               f"[hosts.{host.name}] in {where}")
    if code in (126, 127):
        raise RemoteEnvError(f"{host.name}: Python not found there ({python!r}): {install}")
    m = re.search(r"Python (\d+)\.(\d+)(?:\.(\d+))?", text)
    if code != 0 or not m:
        raise RemoteEnvError(
            f"{host.name}: {python!r} --version answered {text.strip()[:200]!r} (exit {code}), "
            f"not a Python version: {install}"
        )
    version = (int(m[1]), int(m[2]), int(m[3] or 0))
    if version[:2] < MIN_PYTHON:
        raise RemoteEnvError(
            f"{host.name}: {python!r} is Python {'.'.join(map(str, version))}; kdtree needs "
            f"Python >= {'.'.join(map(str, MIN_PYTHON))}: {install}"
        )
    return version


def nvcc_version(host: HostConfig, nvcc: str, answer: tuple[int, str]) -> tuple[int, int]:
    code, text = answer
    needed = max((NVCC_MIN_FOR_SM.get(a, (12, 8)) for a in host.arch_sms), default=(11, 8))
    need = f"{needed[0]}.{needed[1]}"
    fix = (f"install the CUDA toolkit {need} or newer there (NVIDIA's cuda-toolkit packages), "
           f"or set cuda_home / nvcc for [hosts.{host.name}] in {host.source or 'kdtree.toml'}; "
           f"`kdtree deploy --no-build` skips building")
    if code in (126, 127):
        raise RemoteEnvError(f"{host.name}: nvcc not found at {nvcc!r}: {fix}")
    m = re.search(r"release (\d+)\.(\d+)", text)
    if code != 0 or not m:
        raise RemoteEnvError(f"{host.name}: {nvcc!r} --version failed (exit {code}: "
                             f"{text.strip()[:200]!r}): {fix}")
    version = (int(m[1]), int(m[2]))
    too_new = [a for a in host.arch_sms if version < NVCC_MIN_FOR_SM.get(a, (12, 8))]
    if too_new:
        raise RemoteEnvError(
            f"{host.name}: nvcc {version[0]}.{version[1]} cannot build "
            f"{', '.join(f'sm_{a}' for a in too_new)}: {fix}"
        )
    return version


def check_python(conn: Connection, host: HostConfig, python: str) -> tuple[int, int, int]:
    return python_version(host, python, query_versions(conn, [python])[0])


def check_nvcc(conn: Connection, host: HostConfig, nvcc: str) -> tuple[int, int]:
    return nvcc_version(host, nvcc, query_versions(conn, [nvcc])[0])


def project_requirements(project_root: Path, extras: tuple[str, ...]) -> list[str]:
    try:
        with open(Path(project_root) / "pyproject.toml", "rb") as fh:
            project = tomllib.load(fh).get("project", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InventoryError(f"cannot read the requirements from {project_root}/pyproject.toml: {exc}") from None
    reqs = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise InventoryError(f"extras: pyproject.toml has no optional-dependencies group {extra!r}")
        reqs += [r for r in optional[extra] if r not in reqs]
    return reqs


def local_wheels(wheels_dir: Path) -> list[Path]:
    if not Path(wheels_dir).is_dir():
        raise InventoryError(f"--wheels {wheels_dir}: not a folder")
    found = sorted(p for p in Path(wheels_dir).iterdir()
                   if p.is_file() and p.name.endswith(WHEEL_SUFFIXES))
    if not found:
        raise InventoryError(f"--wheels {wheels_dir}: no .whl (or sdist) files in it")
    return found


def upload_wheels(conn: Connection, python: str, layout: releases.RemoteLayout,
                  wheels: list[Path], note: Callable[[str], None]) -> dict[str, str]:
    """Make <dir>/wheels hold these files; returns {name: sha256}."""
    from remote.manifest import hash_file

    releases.ensure_dir(conn, layout.wheels)
    there = releases.remote_files(conn, python, layout.wheels)
    hashes = {p.name: hash_file(p) for p in wheels}
    todo = [p for p in wheels if there.get(p.name, {}).get("sha256") != hashes[p.name]]
    if todo:
        note(f"uploading {len(todo)} wheel(s), {sum(p.stat().st_size for p in todo) / 1e6:.1f} MB")
        transfer.upload_tar(
            conn, releases.tool_command(python, "extract", {"dest": layout.wheels}),
            [transfer.Member(p.name, 0o644, path=p) for p in todo], what="uploading wheels",
        )
    else:
        note(f"wheels: all {len(wheels)} already there")
    return hashes


def setup_env(conn: Connection, host: HostConfig, layout: releases.RemoteLayout, python: str,
              project_root: Path, wheels_dir: Path | None, note: Callable[[str], None],
              on_line: Callable[[str, bool], None]) -> str:
    """Create or update the remote environment; returns the Python that runs kdtree."""
    if not host.venv:
        if wheels_dir is not None:
            raise InventoryError(f"{host.name}: --wheels needs venv = true (the host uses its "
                                 f"own Python {python!r}, kdtree installs nothing there)")
        note(f"environment: using {python} as it is (venv = false)")
        return python
    reqs = list(host.requirements) if host.requirements is not None else \
        project_requirements(project_root, host.extras)
    wheel_hashes = upload_wheels(conn, python, layout, local_wheels(wheels_dir), note) if wheels_dir else {}
    stamp = hashlib.sha256(json.dumps(
        {"python": python, "requirements": reqs, "wheels": wheel_hashes}, sort_keys=True
    ).encode()).hexdigest()
    venv_python = rpath(layout.venv, "bin", "python")
    stamp_path = rpath(layout.venv, STAMP)
    have = channel.run(conn, f"test -x {q(venv_python)} && cat {q(stamp_path)}",
                       what="reading the environment stamp").text.strip()
    if have == stamp:
        note("environment: up to date")
        return venv_python
    created = channel.run(conn, f"test -x {q(venv_python)}", what="looking for the venv").exit_code != 0
    if created:
        note(f"environment: creating {layout.venv}")
        code = channel.stream(conn, join([python, "-m", "venv", "--system-site-packages", layout.venv]),
                              on_line=on_line, what="creating the venv")
        if code != 0:
            raise RemoteEnvError(
                f"{host.name}: `{python} -m venv` failed (exit {code}); on Debian/Ubuntu install "
                f"the venv module (`sudo apt install python3.11-venv`, matching your Python), or "
                f"set venv = false and point python at an interpreter that has the requirements"
            )
    if reqs:
        source = f"{len(wheel_hashes)} uploaded wheel(s), no index" if wheel_hashes else "the package index"
        note(f"environment: installing {len(reqs)} requirement(s) from {source}")
        argv = [venv_python, "-m", "pip", "install", "--disable-pip-version-check",
                "--no-input", "--progress-bar", "off"]
        if wheel_hashes:
            argv += ["--no-index", "--find-links", layout.wheels]
        code = channel.stream(conn, join(argv + reqs), on_line=on_line, what="pip install")
        if code != 0:
            hint = ("the uploaded wheels lack something: add the missing wheels (pip download "
                    "-d DIR for the remote's platform and Python) to --wheels" if wheel_hashes else
                    "if the remote has no internet, rerun with --wheels DIR holding the wheels")
            raise RemoteEnvError(f"{host.name}: pip install failed (exit {code}); {hint}")
    channel.run_checked(conn, f"printf '%s\\n' {q(stamp)} > {q(stamp_path)}",
                        what="writing the environment stamp")
    return venv_python
