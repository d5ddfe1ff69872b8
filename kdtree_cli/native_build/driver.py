"""`kdtree build` as plain functions: configure (toolchain, targets, build.ninja), then run
ninja. The CLI layer (kdtree_cli/commands/build.py) only parses options and prints."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from python_engine.errors import KdtreeError
from python_engine.project import PROJECT_ROOT

from .arch import ArchChoice, check_archs_supported, resolve_archs
from .compdb import write_compile_commands
from .layout import SourceLayout, discover
from .ninja_file import BuildConfig, generate, write_if_changed
from .profiles import get_profile
from .runner import report_failures, run_ninja
from .toolchain import find_toolchain

DEFAULT_BUILD_ROOT = PROJECT_ROOT / "build"


@dataclass(frozen=True)
class BuildRequest:
    profile: str = "release"
    arch: str | None = None  # --arch spec; None: env, host profile, GPUs, default
    host_profile_arch: str | Sequence[str] | None = None  # from a deploy target's host profile
    cuda_home: str | None = None
    build_root: Path = DEFAULT_BUILD_ROOT
    repo_root: Path = PROJECT_ROOT
    jobs: int | None = None
    verbose: bool = False
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Configured:
    config: BuildConfig
    arch_choice: ArchChoice
    manifest_changed: bool

    @property
    def build_dir(self) -> Path:
        return self.config.build_dir

    @property
    def layout(self) -> SourceLayout:
        return self.config.layout


@dataclass(frozen=True)
class BuildOutcome:
    configured: Configured
    steps_run: int
    seconds: float


def build_dir_for(request: BuildRequest) -> Path:
    return (request.build_root / get_profile(request.profile).name).resolve()


def plan(request: BuildRequest) -> tuple[BuildConfig, ArchChoice]:
    """Find the tools, pick the targets, glob csrc/. Writes nothing, so it runs before the
    build lock: a bad option fails at once even while someone else is building."""
    profile = get_profile(request.profile)
    csrc = request.repo_root / "csrc"
    if not csrc.is_dir():
        raise KdtreeError(f"no csrc/ under {request.repo_root}: run kdtree from a kdtree checkout")
    toolchain = find_toolchain(request.cuda_home)
    choice = resolve_archs(request.arch, host_profile_arch=request.host_profile_arch)
    check_archs_supported(choice.archs, toolchain.cuda.supported_sm, str(toolchain.cuda.nvcc))
    layout = discover(csrc)
    resolve_targets(layout, request.targets)
    config = BuildConfig(request.repo_root.resolve(), build_dir_for(request), layout, toolchain, choice.archs, profile)
    return config, choice


def write_manifest(config: BuildConfig, choice: ArchChoice) -> Configured:
    """(Re)write build.ninja if its text changed, and then compile_commands.json. Hold the lock."""
    config = replace(config, layout=discover(config.layout.csrc))  # files may have come or gone
    changed = write_if_changed(config.build_dir / "build.ninja", generate(config))
    # The repository root's copy, where clangd looks first, follows builds inside the repository
    # only: a scratch --build-dir elsewhere must not repoint the editor.
    inside = config.build_dir.is_relative_to(config.repo_root)
    root_compdb = config.repo_root / "compile_commands.json" if inside else None
    wanted = [config.build_dir / "compile_commands.json"] + ([root_compdb] if root_compdb else [])
    if changed or not all(_compdb_is_for(p, config.build_dir) for p in wanted):
        write_compile_commands(config.toolchain.ninja, config.build_dir, config.toolchain.cuda.home,
                               choice.archs, also_at=root_compdb)
    return Configured(config, choice, changed)


def _compdb_is_for(path: Path, build_dir: Path) -> bool:
    """Whether compile_commands.json exists and names this build directory (a copied
    repository carries one that names the old place)."""
    try:
        return f'"directory": {json.dumps(str(build_dir))}' in path.read_text()
    except OSError:
        return False


def configure(request: BuildRequest, console: Console | None = None) -> Configured:
    """plan() and write_manifest() under the build lock."""
    config, choice = plan(request)
    with build_lock(config.build_dir, console or Console(stderr=True)):
        return write_manifest(config, choice)


@contextmanager
def build_lock(build_dir: Path, console: Console) -> Iterator[None]:
    """One build at a time per build directory: two ninjas in one directory corrupt its logs
    (several people and `kdtree test --native` share a checkout)."""
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
        lock = open(build_dir / ".kdtree.lock", "w")
    except OSError as exc:
        raise KdtreeError(f"build directory {build_dir} cannot be created or written "
                          f"({exc.strerror or exc}): pass --build-dir DIR where you can write") from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            console.print(f"[dim]waiting for another build in {build_dir}[/]", highlight=False)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file when it closes


def build(request: BuildRequest, console: Console | None = None) -> BuildOutcome:
    """Configure and run ninja; raise KdtreeError (after printing the compiler's output) on failure."""
    console = console or Console(stderr=True)
    config, choice = plan(request)
    with build_lock(config.build_dir, console):
        start = time.perf_counter()
        configured = write_manifest(config, choice)
        to_repo = (os.path.relpath(config.repo_root, config.build_dir)
                   if config.build_dir.is_relative_to(config.repo_root) else None)
        result = run_ninja(config.toolchain.ninja, config.build_dir, request.targets, jobs=request.jobs,
                           verbose=request.verbose, console=console, build_dir_to_repo=to_repo)
    if result.returncode != 0:
        report_failures(result, console, request.verbose, config.build_dir / "failures.log")
        what = (f"{len(result.failures)} step(s) failed" if result.failures
                else f"ninja exited with status {result.returncode}")
        raise KdtreeError(f"build failed: {what} (profile {request.profile}, {config.build_dir})")
    return BuildOutcome(configured, result.steps_run, time.perf_counter() - start)


def resolve_targets(layout: SourceLayout, names: Sequence[str]) -> list[str]:
    """Check target names against build.ninja's: programs, their bin/ paths, tests, bench, libs, all."""
    known = {"all", "tests", "bench", "libs"}
    if layout.has_engine:
        from .layout import ENGINE_EMU_LIB, ENGINE_LIB, emu_capi_output, emu_program_output

        known |= {"engine", "engine_emu", "emu_tests", ENGINE_LIB, ENGINE_EMU_LIB}
        known |= {emu_program_output(p) for p in layout.emu_programs + layout.emu_twins}
        known |= {emu_capi_output(p) for p in layout.emu_capi}
    for prog in layout.programs:
        known |= {prog.name, prog.output}
    for lib in list(layout.libraries) + list(layout.support.values()):
        known |= {lib.name, lib.output}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KdtreeError(f"unknown target(s) {', '.join(unknown)}: see `kdtree build --list`")
    return list(names)


def dry_run(request: BuildRequest) -> tuple[str, Configured]:
    """The commands a build would run now, one per line (ninja -n -v), nothing built; and
    the configuration they come from."""
    configured = configure(request)
    out = subprocess.run(
        [configured.config.toolchain.ninja, "-C", str(configured.build_dir), "-n", "-v", *request.targets],
        capture_output=True, text=True, env=dict(os.environ, NINJA_STATUS=""),
    )
    if out.returncode != 0:
        raise KdtreeError(f"ninja -n failed: {out.stdout.strip()} {out.stderr.strip()}")
    lines = [l for l in out.stdout.splitlines() if l and not l.startswith("ninja: ")]
    return "\n".join(lines), configured


def clean(request: BuildRequest) -> Path | None:
    """Remove the profile's build directory; returns it, or None when there was none."""
    build_dir = build_dir_for(request)
    if not build_dir.exists():
        return None
    if not (build_dir / "build.ninja").exists() and any(build_dir.iterdir()):
        raise KdtreeError(f"{build_dir} has no build.ninja: not removing a directory kdtree did not make")
    try:
        shutil.rmtree(build_dir)
    except OSError as exc:
        raise KdtreeError(f"cannot remove {build_dir}: {exc.strerror or exc}") from None
    return build_dir
