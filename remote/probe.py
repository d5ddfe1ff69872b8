"""`kdtree hosts` checks: for each host, is it reachable (with a known host key), which
Python and nvcc it has, which GPUs (and so which SM arch) nvidia-smi sees, which
release is current, and what a deploy's environment step would install there (with its
download size: a host without torch gets a CUDA torch). Every problem comes with the
message of the check that found it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from remote import channel, pyenv, releases
from remote.connection import connect
from remote.errors import UnresolvedHostError
from remote.inventory import SPLIT_EXTRA, HostConfig, find_project_root
from remote.paths import resolve_paths
from remote.shell import env_exports, q
from python_engine.errors import KdtreeError


@dataclass
class HostCheck:
    name: str
    target: str
    dir: str
    reachable: bool = False
    python: str = "-"
    nvcc: str = "-"
    gpus: str = "-"
    arch: str = "-"
    current: str = "-"
    env: str = "-"  # what a deploy's environment step would install now (pyenv.EnvPlan.short)
    env_plan: str = ""  # the same, said in full
    unresolved: bool = False  # its name or ssh alias resolves to no address here
    example: bool = False  # unresolved, and only the project's file names it: one to configure
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reachable and not self.problems

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def parse_nvidia_smi(text: str) -> list[tuple[str, int]]:
    """`name, compute_cap` CSV lines -> [(name, sm)], e.g. ("NVIDIA H200", 90)."""
    gpus = []
    for line in text.strip().splitlines():
        name, _, cap = line.rpartition(",")
        try:
            major, minor = cap.strip().split(".")
            gpus.append((name.strip(), int(major) * 10 + int(minor)))
        except ValueError:
            continue
    return gpus


def check_host(host: HostConfig, *, accept_new_host_key: bool = False, project_root: Path | None = None) -> HostCheck:
    """project_root: the tree whose requirements a deploy would install (default: this one)."""
    check = HostCheck(host.name, host.describe_target(), host.dir)
    try:
        conn = connect(host, accept_new_host_key=accept_new_host_key)
    except KdtreeError as exc:
        check.problems.append(str(exc))
        check.unresolved = isinstance(exc, UnresolvedHostError)
        return check
    check.reachable = True
    try:
        paths = resolve_paths(conn, host)
        check.dir = paths.dir
        try:
            check.python = ".".join(map(str, pyenv.check_python(conn, host, paths.python)))
        except KdtreeError as exc:
            check.python = "missing/old"
            check.problems.append(str(exc))
        try:
            major, minor = pyenv.check_nvcc(conn, host, paths.nvcc)
            check.nvcc = f"{major}.{minor}"
        except KdtreeError as exc:
            check.nvcc = "missing/old"
            if host.arch or host.gpus:  # a CPU-only host needs no nvcc
                check.problems.append(str(exc))
        _check_gpus(conn, host, check)
        _check_nccl(conn, host, paths, check)
        if check.python != "missing/old":
            state = releases.read_state(conn, paths.python, paths.layout, with_manifest=False)
            check.current = state.current if state.current_ok else "none"
            env = pyenv.plan_env(conn, host, paths.layout, paths.python, project_root or find_project_root())
            check.env, check.env_plan = env.short(), env.describe()
    except KdtreeError as exc:
        check.problems.append(str(exc))
    finally:
        conn.close()
    return check


def _check_gpus(conn, host: HostConfig, check: HostCheck) -> None:
    # with the host's `env`, as the steps get it (a driver's libraries found through
    # LD_LIBRARY_PATH only: containers, some module systems)
    result = channel.run(conn, f"{env_exports(host.env)} && {q(host.nvidia_smi)} --query-gpu=name,compute_cap "
                               f"--format=csv,noheader 2>&1", what="asking nvidia-smi", timeout=60)
    gpus = parse_nvidia_smi(result.text) if result.exit_code == 0 else []
    if result.exit_code != 0:
        check.gpus = "none"
        if host.gpus > 0:
            check.problems.append(
                f"{host.name}: nvidia-smi failed (exit {result.exit_code}: "
                f"{result.text.strip()[:200]!r}) but {host.gpus} GPU(s) are configured: install "
                f"the NVIDIA driver there, or set gpus = 0"
            )
        return
    check.gpus = f"{len(gpus)}" + (f" x {gpus[0][0]}" if gpus else "")
    seen = sorted({sm for _, sm in gpus})
    check.arch = ",".join(f"sm_{sm}" for sm in seen) or "-"
    if not host.arch:  # unset: `kdtree build` there targets the GPUs it sees
        check.arch += " (auto)" if seen else ""
    if host.gpus and len(gpus) != host.gpus:
        check.problems.append(f"{host.name}: nvidia-smi sees {len(gpus)} GPU(s), the inventory "
                              f"says gpus = {host.gpus}")
    uncovered = [sm for sm in seen if sm not in host.arch_sms] if host.arch else []
    if uncovered:
        check.problems.append(
            f"{host.name}: the GPUs are {', '.join(f'sm_{s}' for s in seen)} but arch = "
            f"{list(host.arch)}: add {uncovered} to arch so the native build runs there"
        )


def _check_nccl(conn, host: HostConfig, paths, check: HostCheck) -> None:
    """A host with several GPUs splits the model through NCCL: its environment gets NCCL's
    wheel (the `gpus` extra), or the system must have libnccl.so.2. Without either the
    engine would build for one GPU only and the deploy would pass."""
    if host.gpus <= 1 or SPLIT_EXTRA in host.extras:
        return
    cuda = paths.cuda_home or "/usr/local/cuda"
    found = channel.run(conn, f"{env_exports(host.env)} && (ldconfig -p 2>/dev/null | grep -q 'libnccl[.]so[.]2' || "
                              f"test -e {q(cuda)}/lib64/libnccl.so.2 || test -e {q(cuda)}/lib/libnccl.so.2)",
                        what="looking for NCCL", timeout=60)
    if found.exit_code != 0:
        check.problems.append(
            f"{host.name}: gpus = {host.gpus} but NCCL is nowhere to be found there (no libnccl.so.2 in ldconfig "
            f"or {cuda}, and extras = {list(host.extras)} leaves out {SPLIT_EXTRA!r}): the engine would run on one "
            f"GPU only. Add {SPLIT_EXTRA!r} to extras (NCCL's wheel), install the system's libnccl2, or set gpus = 1")


def checks_to_json(checks: list[HostCheck]) -> str:
    return json.dumps([c.to_dict() for c in checks], indent=1)
