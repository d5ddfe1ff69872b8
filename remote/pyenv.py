"""The remote's toolchain: checks that say what to install, and the Python environment.

Preflight (before anything on the remote is touched):
- the host's `python` answers `--version` with 3.11 or newer;
- when building: nvcc exists, and is new enough for every arch the host builds.

Environment (venv = true, the default): one per release, so that a deploy that fails
after installing cannot change what `current` runs. <dir>/envs/<key>/ is a venv created
with --system-site-packages (so a GPU box keeps its own CUDA torch; when the host's Python
is itself a venv, its packages are made visible too), holding the project's requirements
(pyproject dependencies plus the host's extras, or the host's `requirements`); <key> is
the hash of (python, requirements, wheels), so releases with the same requirements share
one environment and pip runs only when they change. An environment is complete once its
stamp file is written and is never modified after; each release links to its own as
<release>/.venv, and pruning drops the environments no release links to. The project
itself is not installed: commands run from the release folder with PYTHONPATH set to it.
With `--wheels DIR` the wheels are uploaded to <dir>/wheels (only new or changed files)
and pip runs with --no-index, for remotes without internet.

Before anything is installed the deploy says what will be (plan_env(): pip's own
resolution, `pip install --dry-run --report`, each package with its download size), and
`kdtree hosts` / `kdtree deploy --dry-run` say the same: on a host without torch the
default requirements bring a CUDA torch and its nvidia-* packages, gigabytes. The host's
`env` applies to pip too (PIP_INDEX_URL, PIP_FIND_LINKS, a proxy).

venv = false: the host's `python` is used as it is (for a box where a Python with the
dependencies already exists); nothing is installed.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fabric import Connection

from remote import channel, releases, transfer
from remote.errors import InventoryError, RemoteEnvError
from remote.inventory import HostConfig
from remote.shell import env_exports, join, q, rpath

MIN_PYTHON = (3, 11)
# the oldest CUDA whose nvcc can target each SM (sm_100 / sm_120 arrived in CUDA 12.8)
NVCC_MIN_FOR_SM = {80: (11, 0), 86: (11, 1), 89: (11, 8), 90: (11, 8), 100: (12, 8), 120: (12, 8)}
STAMP = ".kdtree-env.sha256"
HOST_PIP = "@@kdtree host pip"  # printed when the venv is made without pip of its own
WHEEL_SUFFIXES = (".whl", ".tar.gz", ".zip")
PLAN_LISTED = 5  # the largest downloads named in a plan's one line; the rest are counted


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


def env_key(python: str, reqs: list[str], wheel_hashes: dict[str, str]) -> str:
    """The environment's name: a hash of the interpreter, the requirements and the wheels."""
    return hashlib.sha256(json.dumps(
        {"python": python, "requirements": reqs, "wheels": wheel_hashes}, sort_keys=True
    ).encode()).hexdigest()


def release_python(release: str) -> str:
    """The Python a release runs with when its host has venv = true."""
    return rpath(release, ".venv", "bin", "python")


@dataclass(frozen=True)
class Download:
    name: str
    version: str
    bytes: int | None  # None: neither a local file nor the index's Content-Length said


@dataclass(frozen=True)
class EnvPlan:
    """What a deploy's environment step will do on a host, known before it does it."""

    action: str  # "host" (venv = false), "reuse" (the environment exists), "create"
    where: str  # the interpreter (host) or the environment's folder
    downloads: tuple[Download, ...] = ()  # create: what pip will fetch and install
    unknown: str | None = None  # create: why pip could not say

    @property
    def download_bytes(self) -> int:
        return sum(d.bytes or 0 for d in self.downloads)

    def describe(self) -> str:
        if self.action == "host":
            return f"{self.where} as it is (venv = false): nothing installed"
        if self.action == "reuse":
            return f"{self.where} is up to date: nothing to install"
        if self.unknown:
            return f"new {self.where}: what pip will install is unknown ({self.unknown})"
        if not self.downloads:
            return f"new {self.where}: every requirement is already there, nothing to download"
        largest = sorted(self.downloads, key=lambda d: -(d.bytes or 0))
        named = ", ".join(f"{d.name} {d.version} ({human_bytes(d.bytes)})" for d in largest[:PLAN_LISTED])
        more = f" and {len(largest) - PLAN_LISTED} more" if len(largest) > PLAN_LISTED else ""
        unsized = sum(d.bytes is None for d in self.downloads)
        unknown = f" ({unsized} of unknown size)" if unsized else ""
        return (f"new {self.where}: pip installs {len(self.downloads)} package(s), "
                f"{human_bytes(self.download_bytes)} to download{unknown}: {named}{more}")

    def short(self) -> str:
        """A table cell: `up to date`, `5.61 GB, 24 pkgs`, ..."""
        if self.action == "host":
            return "host python"
        if self.action == "reuse":
            return "up to date"
        if self.unknown:
            return "unknown"
        if not self.downloads:
            return "nothing to fetch"
        return f"{human_bytes(self.download_bytes)}, {len(self.downloads)} pkg(s)"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "size unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def requirements_for(host: HostConfig, project_root: Path) -> list[str]:
    return list(host.requirements) if host.requirements is not None else \
        project_requirements(project_root, host.extras)


def install_plan(conn: Connection, host: HostConfig, python: str, pip: list[str], reqs: list[str],
                 options: list[str], where: str) -> EnvPlan:
    """pip's dry run on the host (pip argv `pip`, run by `python`'s release tool)."""
    if not reqs:
        return EnvPlan("create", where)
    raw = releases.call_tool(conn, python, "install_plan",
                             {"pip": pip, "requirements": reqs, "options": options, "env": host.env},
                             what="asking pip what it would install")
    if "error" in raw:
        return EnvPlan("create", where, unknown=f"pip --dry-run: {raw['error']}")
    return EnvPlan("create", where, tuple(Download(p["name"], p["version"], p["bytes"]) for p in raw["packages"]))


def plan_env(conn: Connection, host: HostConfig, layout: releases.RemoteLayout, python: str,
             project_root: Path, wheels_dir: Path | None = None) -> EnvPlan:
    """What the environment step would do now, changing nothing: for `kdtree hosts` and
    `kdtree deploy --dry-run`. A new environment's packages are what the host Python's pip
    resolves (the venv sees the host's packages: --system-site-packages); with --wheels,
    the wheels are not uploaded yet, so the plan names them instead."""
    if not host.venv:
        return EnvPlan("host", python)
    reqs = requirements_for(host, project_root)
    wheels = local_wheels(wheels_dir) if wheels_dir else []
    from remote.manifest import hash_file

    stamp = env_key(python, reqs, {p.name: hash_file(p) for p in wheels})
    env = layout.env(stamp[:16])
    have = channel.run(conn, f"cat {q(rpath(env, STAMP))}", what="reading the environment stamp").text.strip()
    if have == stamp:
        return EnvPlan("reuse", env)
    if wheels:
        return EnvPlan("create", env, tuple(Download(p.name, "(uploaded wheel)", p.stat().st_size) for p in wheels))
    has_pip = channel.run(conn, f"{join([python, '-m', 'pip', '--version'])} >/dev/null 2>&1",
                          what="looking for pip").exit_code == 0
    if not has_pip:
        return EnvPlan("create", env, unknown=f"{python} has no pip: the new venv's own pip decides")
    return install_plan(conn, host, python, [python, "-m", "pip"], reqs, [], env)


def setup_env(conn: Connection, host: HostConfig, layout: releases.RemoteLayout, python: str,
              project_root: Path, wheels_dir: Path | None, release: str,
              note: Callable[[str], None], on_line: Callable[[str, bool], None]) -> str:
    """Give the (not yet current) release its environment; returns the Python that runs
    kdtree there. An environment is never changed once complete: other requirements make
    another one, so a deploy that fails later leaves what current runs untouched."""
    if not host.venv:
        if wheels_dir is not None:
            raise InventoryError(f"{host.name}: --wheels needs venv = true (the host uses its "
                                 f"own Python {python!r}, kdtree installs nothing there)")
        note(f"environment: using {python} as it is (venv = false)")
        return python
    reqs = requirements_for(host, project_root)
    wheel_hashes = upload_wheels(conn, python, layout, local_wheels(wheels_dir), note) if wheels_dir else {}
    stamp = env_key(python, reqs, wheel_hashes)
    env = layout.env(stamp[:16])
    stamp_path = rpath(env, STAMP)
    have = channel.run(conn, f"cat {q(stamp_path)}", what="reading the environment stamp").text.strip()
    if have == stamp:
        note(f"environment: up to date ({env})")
    else:
        _build_env(conn, host, layout, python, env, reqs, len(wheel_hashes), note, on_line)
        channel.run_checked(conn, f"printf '%s\\n' {q(stamp)} > {q(stamp_path)}",
                            what="writing the environment stamp")  # complete from here on
    link = rpath(release, ".venv")
    target = "../../envs/" + posixpath.basename(env)  # relative: the folder may move
    channel.run_checked(conn, f"ln -sfn {q(target)} {q(link)}", what="linking the release's environment")
    return release_python(release)


def _build_env(conn, host, layout, python, env, reqs, wheels: int, note, on_line) -> None:
    """A fresh venv at env (an incomplete one from a cut deploy is thrown away first).
    When the host's Python has pip, the venv gets none and that pip installs into it
    (`pip --python`): Debian/Ubuntu Pythons often lack ensurepip (python3.X-venv), which
    a venv with its own pip needs."""
    note(f"environment: creating {env}")
    venv = [python, "-m", "venv", "--system-site-packages"]
    script = (f"rm -rf {q(env)} && if {join([python, '-m', 'pip', '--version'])} >/dev/null 2>&1; then "
              f"{join(venv + ['--without-pip', env])} && echo {HOST_PIP}; else {join(venv + [env])}; fi")
    lines: list[str] = []

    def seen(text: str, is_err: bool) -> None:
        lines.append(text)
        if text != HOST_PIP:
            on_line(text, is_err)

    code = channel.stream(conn, script, on_line=seen, what="creating the venv")
    if code != 0:
        raise RemoteEnvError(
            f"{host.name}: `{python} -m venv` failed (exit {code}); on Debian/Ubuntu install "
            f"the venv module (`sudo apt install python3.11-venv`, matching your Python) or pip "
            f"(`python3-pip`), or set venv = false and point python at an interpreter that has "
            f"the requirements"
        )
    host_pip = HOST_PIP in lines
    added = releases.call_tool(conn, python, "parent_env", {"venv": env}, site=True,
                               what="lending the host Python's packages to the venv")["added"]
    if added:
        note(f"environment: {python} is itself a venv; its packages stay visible ({', '.join(added)})")
    if not reqs:
        return
    venv_python = rpath(env, "bin", "python")
    offline = wheels > 0
    source = f"{wheels} uploaded wheel(s), no index" if offline else "the package index"
    pip = [python, "-m", "pip", "--python", venv_python] if host_pip else [venv_python, "-m", "pip"]
    options = ["--no-index", "--find-links", layout.wheels] if offline else []
    note(f"environment: {install_plan(conn, host, python, pip, reqs, options, env).describe()}")
    note(f"environment: installing {len(reqs)} requirement(s) from {source}")
    argv = pip + ["install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"] + options
    # with the host's env, as the plan above: PIP_INDEX_URL, PIP_FIND_LINKS, a proxy
    code = channel.stream(conn, f"{env_exports(host.env)} && {join(argv + reqs)}", on_line=on_line,
                          what="pip install")
    if code != 0:
        hint = ("the uploaded wheels lack something: add the missing wheels (pip download "
                "-d DIR for the remote's platform and Python) to --wheels" if offline else
                "if the remote has no internet, rerun with --wheels DIR holding the wheels")
        raise RemoteEnvError(f"{host.name}: pip install failed (exit {code}); {hint}")
