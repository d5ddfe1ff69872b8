"""The remote build and test steps: the same `kdtree` commands as on a laptop, run from the
release folder.

Defaults (each host may replace them with `build = [...]` / `test = [...]` / `check =
[...]` argv templates in its inventory entry; `test_args` are appended to the test command):

    build:  {python} -m kdtree_cli build --arch {arch}           (no --arch when arch is
                                                                 unset: kdtree build detects
                                                                 the GPUs there)
            {python} -m kdtree_cli build engine_emu emu_tests    (gpus = 0: the emulated engine
                                                                 and kernel tests, what the
                                                                 Python suite runs)
    test:   {python} -m kdtree_cli test                          (gpus = 0)
            {python} -m kdtree_cli test --native --arch {arch}   (gpus > 0)
    check:  {python} -m kdtree_cli engine-check                  (gpus > 0, when the tree has
                                                                 kdtree_cli/commands/engine_check.py)

`check` is the native engine's smoke check on the host's GPUs (DDTree == AR on the demo
pair), run after the tests; the command arrives with the engine: until the deployed tree
has kdtree_cli/commands/engine_check.py the step is skipped (and the deploy says so).
`check = []` turns it off.

Placeholders, each substituted inside one argv element (then the element is quoted):
    {python} {arch} {release} {results} {dir} {cuda_home} {nvcc} {gpus} {host}
Write `{{` / `}}` for literal braces. Inside a `sh -c SCRIPT` element a placeholder would
be parsed by that inner shell (a path with `$(...)` in it would run): there use the
environment instead, quoted: "$KDTREE_RELEASE", "$KDTREE_RESULTS_DIR", "$KDTREE_PYTHON",
"$KDTREE_NVCC", "$KDTREE_ARCH", "$KDTREE_DIR".

Every step runs as `cd RELEASE && export ... && exec ARGV` with PYTHONPATH=RELEASE (the
project is not pip-installed), PYTHONUNBUFFERED=1 (lines arrive as they are printed),
CUDA_HOME and PATH+=CUDA_HOME/bin when the host has a cuda_home (and the folders of an
absolute nvcc or nvidia_smi: `kdtree build` detects the GPUs with nvidia-smi), the KDTREE_* variables
above plus KDTREE_HOST, and KDTREE_RESULTS_DIR=RELEASE/results: whatever a step writes
there is fetched into results/<host>/ on this machine.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from remote.errors import InventoryError
from remote.inventory import HostConfig
from remote.paths import RemotePaths
from remote.shell import in_dir, join, rpath

RESULTS_SUBDIR = "results"


# What a host without GPUs builds: what its tests run (the engine and the kernels on the
# CPU emulator), not GPU code that nothing there could run.
EMULATED_TARGETS = ("engine_emu", "emu_tests")


def default_build(host: HostConfig) -> list[str]:
    argv = ["{python}", "-m", "kdtree_cli", "build"]
    if host.gpus == 0:
        return argv + list(EMULATED_TARGETS)
    return argv + (["--arch", "{arch}"] if host.arch else [])


ENGINE_CHECK_MODULE = "kdtree_cli/commands/engine_check.py"
ENGINE_CHECK = ["{python}", "-m", "kdtree_cli", "engine-check"]
# A host without a GPU that declares a device profile rehearses that device: the emulated
# engine's check under its plans (the deploy sets KDTREE_DEVICE_PROFILE for every step).
EMULATED_ENGINE_CHECK = [*ENGINE_CHECK, "--emulated"]


def check_template(host: HostConfig, project_root: Path) -> list[str] | None:
    """The check step's argv template, or None when there is none to run."""
    if host.check is not None:
        return list(host.check) or None
    if not (Path(project_root) / ENGINE_CHECK_MODULE).is_file():
        return None
    if host.gpus > 0:
        return list(ENGINE_CHECK)
    return list(EMULATED_ENGINE_CHECK) if host.profile else None


def default_test(host: HostConfig) -> list[str]:
    """pytest on a CPU host; the native test programs (built for the host's arch) on a
    host with GPUs."""
    argv = ["{python}", "-m", "kdtree_cli", "test"]
    if host.gpus > 0:
        argv += ["--native"] + (["--arch", "{arch}"] if host.arch else [])
    return argv


def render(template: list[str] | tuple[str, ...], values: dict[str, str], host: HostConfig,
           what: str) -> list[str]:
    out = []
    for element in template:
        try:
            out.append(element.format_map(values))
        except (KeyError, IndexError, ValueError) as exc:
            raise InventoryError(
                f"{host.source} [hosts.{host.name}] {what}: cannot fill {element!r} ({exc}); "
                f"placeholders are {', '.join('{' + k + '}' for k in values)}, `{{{{` for a brace"
            ) from None
    return out


def placeholder_values(host: HostConfig, paths: RemotePaths, python: str, release: str) -> dict[str, str]:
    return {
        "python": python,
        "arch": host.arch_str,
        "release": release,
        "results": rpath(release, RESULTS_SUBDIR),
        "dir": paths.dir,
        "cuda_home": paths.cuda_home or "",
        "nvcc": paths.nvcc,
        "gpus": str(host.gpus),
        "host": host.name,
    }


def step_env(host: HostConfig, paths: RemotePaths, python: str, release: str) -> tuple[dict[str, str], list[str]]:
    env = {
        "PYTHONPATH": release,
        "PYTHONUNBUFFERED": "1",
        "KDTREE_HOST": host.name,
        "KDTREE_DIR": paths.dir,
        "KDTREE_RELEASE": release,
        "KDTREE_RESULTS_DIR": rpath(release, RESULTS_SUBDIR),
        "KDTREE_PYTHON": python,
        "KDTREE_NVCC": paths.nvcc,
        "KDTREE_ARCH": host.arch_str,
        "KDTREE_GPUS": str(host.gpus),  # the engine check refuses a split host without NCCL
        "KDTREE_P2P": host.p2p,  # the ranks' NCCL peer-to-peer setting (multi_gpu.p2p_environment)
    }
    path_prepend = []
    if paths.cuda_home:
        env["CUDA_HOME"] = paths.cuda_home
        path_prepend.append(rpath(paths.cuda_home, "bin"))
    if posixpath.isabs(paths.nvcc):
        path_prepend.append(posixpath.dirname(paths.nvcc))
    if posixpath.isabs(host.nvidia_smi):  # `kdtree build` finds the GPUs through nvidia-smi
        path_prepend.append(posixpath.dirname(host.nvidia_smi))
    if host.profile:  # the plans take that GPU's limits (csrc/common/device_profile.h)
        env["KDTREE_DEVICE_PROFILE"] = host.profile
    env.update(host.env)
    return env, list(dict.fromkeys(path_prepend))  # each folder once, in order


def step_command(host: HostConfig, paths: RemotePaths, python: str, release: str,
                 step: str, project_root: Path | None = None) -> str:
    """The remote shell line for `build`, `test` or `check` (which needs project_root) in
    release."""
    if step == "build":
        template = list(host.build) if host.build else default_build(host)
    elif step == "test":
        template = (list(host.test) if host.test else default_test(host)) + list(host.test_args)
    elif step == "check":
        template = check_template(host, project_root)
        if template is None:
            raise ValueError("no check step for this host and tree")
    else:
        raise ValueError(step)
    argv = render(template, placeholder_values(host, paths, python, release), host, step)
    env, path_prepend = step_env(host, paths, python, release)
    return in_dir(release, join(argv), env, path_prepend)


def kdtree_command(host: HostConfig, paths: RemotePaths, python: str, release: str,
                   args: list[str]) -> str:
    """`python -m kdtree_cli ARGS` in release, with the step environment."""
    env, path_prepend = step_env(host, paths, python, release)
    return in_dir(release, join([python, "-m", "kdtree_cli", *args]), env, path_prepend)
