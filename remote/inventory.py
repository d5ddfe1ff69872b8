"""The host inventory: which machines `kdtree deploy` / `kdtree hosts` know and how to use
them.

Two TOML files, merged field by field (the user's file wins, so a user can point the
project's `ct200` at their own ssh alias without copying the whole entry):

  <project>/kdtree.toml               shared with the team (committed)
  ~/.config/kdtree/hosts.toml         this user's machines and overrides ($XDG_CONFIG_HOME)

    [defaults]                 # optional: applies to every host
    keep = 5

    [hosts.ct200]
    ssh = "ct200"              # an alias from ~/.ssh/config (or host/user/port/key)
    dir = "~/kdtree"           # remote directory: releases/, current, venv/
    cuda_home = "/opt/cuda"
    arch = [120]
    gpus = 8
    p2p = "off"                # NCCL peer-to-peer between the GPUs: auto, on or off
    python = "python3"

Every value is validated once, here, with a message naming the file and the key; the
rest of the package receives a frozen HostConfig and never re-checks.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from remote.errors import InventoryError

PROJECT_FILE = "kdtree.toml"
DEFAULT_EXTRAS = ("test",)
SPLIT_EXTRA = "gpus"  # pyproject's extra holding NCCL's wheel, given to hosts with several GPUs
HOST_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # also a results/<host>/ folder


def user_inventory_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "kdtree" / "hosts.toml"


@dataclass(frozen=True)
class HostConfig:
    """One remote machine. Remote paths may start with `~/` (the remote $HOME)."""

    name: str
    # how to reach it: an ssh_config alias, or a host name with optional user/port/key
    ssh: str | None = None
    host: str | None = None
    user: str | None = None
    port: int | None = None
    key: str | None = None  # local private key file (never read by us, handed to paramiko)
    ssh_config: str | None = None  # local ssh_config file instead of ~/.ssh/config
    known_hosts: str | None = None  # local known_hosts (else ssh_config's, else ~/.ssh/...)
    connect_timeout: int = 10  # seconds, for TCP connect, SSH banner and authentication
    # the remote side
    dir: str = "~/kdtree"
    python: str = "python3"  # interpreter that creates the venv (or runs, if venv = false)
    venv: bool = True  # keep <dir>/venv with the project's requirements
    requirements: tuple[str, ...] | None = None  # None: pyproject dependencies + extras
    extras: tuple[str, ...] = DEFAULT_EXTRAS  # with gpus > 1 the default gains "gpus" (NCCL's wheel)
    cuda_home: str | None = None
    nvcc: str | None = None  # default <cuda_home>/bin/nvcc, else nvcc on PATH
    nvidia_smi: str = "nvidia-smi"
    arch: tuple[str, ...] = ()  # SM targets as `kdtree build --arch` takes them: "120", "90a"
    gpus: int = 0
    # NCCL's peer-to-peer path between this host's GPUs: "off" sets NCCL_P2P_DISABLE=1 for the
    # ranks (PCIe-only RTX boxes hang in it, python_engine/native/multi_gpu.py), "auto" turns
    # it off on RTX boards, "on" leaves it to NCCL
    p2p: str = "auto"
    # a device profile (python_engine/device_profiles.py: "rtx-pro-6000", "h200"): the deploy's
    # build, tests and engine check run with KDTREE_DEVICE_PROFILE set to it, so the plans take
    # that GPU's limits (on a GPU-less host, the emulated engine's)
    profile: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # extra environment for remote steps
    # what a deploy runs there (argv templates; see steps.py for the placeholders)
    build: tuple[str, ...] | None = None
    test: tuple[str, ...] | None = None
    test_args: tuple[str, ...] = ()
    check: tuple[str, ...] | None = None  # None: the engine check when the tree has it; () off
    carry: tuple[str, ...] = ("build",)  # dirs copied from the previous release (incremental)
    keep: int = 5
    lock_timeout: int = 1800  # seconds to wait for another deploy to the same host
    source: str = ""  # which file(s) defined it, for messages

    def __post_init__(self) -> None:
        # a model split over several GPUs needs NCCL: the default environment brings its wheel
        if self.gpus > 1 and self.extras == DEFAULT_EXTRAS:
            object.__setattr__(self, "extras", (*DEFAULT_EXTRAS, SPLIT_EXTRA))

    @property
    def target(self) -> str:
        """What ssh would be given: the alias, or the host name."""
        return self.ssh or self.host or self.name

    @property
    def nvcc_path(self) -> str:
        if self.nvcc:
            return self.nvcc
        return f"{self.cuda_home.rstrip('/')}/bin/nvcc" if self.cuda_home else "nvcc"

    @property
    def arch_str(self) -> str:
        """The arch list as `kdtree build --arch` takes it: "120" or "90,120"."""
        return ",".join(self.arch)

    @property
    def arch_sms(self) -> tuple[int, ...]:
        """The SM numbers of arch (90a -> 90)."""
        return tuple(int(re.match(r"\d+", a)[0]) for a in self.arch)

    def describe_target(self) -> str:
        if self.ssh:
            return f"ssh alias {self.ssh}"
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"


_FIELD_TYPES = {f.name: f.type for f in fields(HostConfig)}
_SETTABLE = sorted(set(_FIELD_TYPES) - {"name", "source"})
_LOCAL_PATH_KEYS = ("key", "ssh_config", "known_hosts")  # resolved against the file's folder


def _check_value(key: str, value: Any, where: str) -> Any:
    def bad(expected: str) -> InventoryError:
        return InventoryError(f"{where}: {key} must be {expected}, got {value!r}")

    if key in ("port", "gpus", "keep", "connect_timeout", "lock_timeout"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad("an integer")
        low = {"port": 1, "gpus": 0, "keep": 1, "connect_timeout": 1, "lock_timeout": 0}[key]
        if value < low or (key == "port" and value > 65535):
            raise bad(f"an integer >= {low}" + (" and <= 65535" if key == "port" else ""))
        return value
    if key == "p2p":
        if value not in ("auto", "on", "off"):
            raise bad('"auto", "on" or "off"')
        return value
    if key == "profile":
        from python_engine.device_profiles import PROFILES

        if value not in PROFILES:
            raise bad(f"a device profile ({', '.join(sorted(PROFILES))})")
        return value
    if key == "venv":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if key == "arch":
        items = value if isinstance(value, list) else [value]
        out = []
        for a in items:
            text = str(a) if isinstance(a, (int, str)) and not isinstance(a, bool) else ""
            if not re.fullmatch(r"[1-9][0-9]*[af]?", text):
                raise bad("an SM target or a list of them, e.g. 120, \"90a\" or [\"90a\", 120]")
            out.append(text)
        return tuple(out)
    if key in ("requirements", "extras", "build", "test", "test_args", "carry", "check"):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of strings")
        if key in ("build", "test") and not value:
            raise bad("a non-empty list (the command and its arguments)")
        if key == "carry" and any(v.startswith("/") or ".." in v.split("/") for v in value):
            raise bad("folders inside the release (relative, no '..')")
        return tuple(value)
    if key == "env":
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) and isinstance(v, str)
            for k, v in value.items()
        ):
            raise bad("a table of NAME = \"value\" strings")
        return dict(value)
    if not isinstance(value, str) or not value:
        raise bad("a non-empty string")
    return value


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read: {exc.strerror}") from None


def _entries(path: Path, data: dict) -> tuple[dict, dict[str, dict]]:
    """(defaults, {host: fields}) of one file, each value checked and local paths resolved."""
    unknown_top = set(data) - {"defaults", "hosts"}
    if unknown_top:
        raise InventoryError(
            f"{path}: unknown section(s) {', '.join(sorted(unknown_top))}; expected [defaults] "
            "and [hosts.NAME]"
        )

    def checked(table: Any, where: str) -> dict:
        if not isinstance(table, dict):
            raise InventoryError(f"{where} must be a table")
        out = {}
        for key, value in table.items():
            if key not in _FIELD_TYPES or key in ("name", "source"):
                raise InventoryError(
                    f"{where}: unknown key {key!r}; known keys: {', '.join(_SETTABLE)}"
                )
            value = _check_value(key, value, where)
            if key in _LOCAL_PATH_KEYS:
                value = str((path.parent / os.path.expanduser(value)).resolve())
            out[key] = value
        return out

    defaults = checked(data.get("defaults", {}), f"{path} [defaults]")
    hosts = data.get("hosts", {})
    if not isinstance(hosts, dict):
        raise InventoryError(f"{path}: hosts must be tables like [hosts.ct200]")
    per_host = {}
    for name, table in hosts.items():
        if not HOST_NAME_RE.match(name):
            raise InventoryError(
                f"{path}: host name {name!r} may hold only letters, digits, '.', '_' and '-'"
            )
        per_host[name] = checked(table, f"{path} [hosts.{name}]")
    return defaults, per_host


@dataclass(frozen=True)
class Inventory:
    hosts: dict[str, HostConfig]
    files: tuple[Path, ...]  # the files that were read, in merge order

    def get(self, name: str) -> HostConfig:
        try:
            return self.hosts[name]
        except KeyError:
            known = ", ".join(sorted(self.hosts)) or "none"
            read = ", ".join(str(f) for f in self.files) or "no inventory file found"
            raise InventoryError(
                f"unknown host {name!r} (known: {known}; read: {read}). Add a [hosts.{name}] "
                f"table to kdtree.toml or {user_inventory_path()}"
            ) from None


def load_inventory(
    project_file: Path | None = None, user_file: Path | None = None
) -> Inventory:
    """Read and merge the project and user inventories. Without project_file, the
    project's kdtree.toml is looked for from the working directory up (and may be
    absent); the user file may be absent."""
    if project_file is not None and not Path(project_file).is_file():
        raise InventoryError(f"inventory file {project_file} does not exist")
    project_file = project_file if project_file is not None else find_project_file()
    user_file = user_file if user_file is not None else user_inventory_path()
    layers = [p for p in (project_file, user_file) if p is not None and Path(p).is_file()]
    defaults: dict = {}
    merged: dict[str, dict] = {}
    sources: dict[str, list[str]] = {}
    for path in layers:
        path = Path(path)
        file_defaults, file_hosts = _entries(path, _read_toml(path))
        defaults.update(file_defaults)
        for name, values in file_hosts.items():
            merged.setdefault(name, {}).update(values)
            sources.setdefault(name, []).append(str(path))
    hosts = {}
    for name, values in merged.items():
        cfg = {**defaults, **values}
        where = " + ".join(sources[name])
        if cfg.get("ssh") and cfg.get("host"):
            raise InventoryError(f"{where} [hosts.{name}]: give either ssh (an alias) or host, not both")
        if not cfg.get("ssh") and not cfg.get("host"):
            cfg["ssh"] = name  # the host's name doubles as its ssh alias
        hosts[name] = HostConfig(name=name, source=where, **cfg)
    return Inventory(hosts=hosts, files=tuple(Path(p) for p in layers))


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder (from start, default cwd, upwards) holding kdtree.toml or the
    kdtree pyproject; else the folder this package was installed from."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder
        if (folder / "pyproject.toml").is_file() and (folder / "kdtree_cli").is_dir():
            return folder
    from python_engine.project import PROJECT_ROOT

    return PROJECT_ROOT


def find_project_file(start: Path | None = None) -> Path | None:
    path = find_project_root(start) / PROJECT_FILE
    return path if path.is_file() else None
