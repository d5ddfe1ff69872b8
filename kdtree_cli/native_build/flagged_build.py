"""A build with extra nvcc flags, in a build root of its own beside the usual one (ninja does not
see flags passed through the environment, so the two builds must never share objects): the
racecheck build of the test programs, and the measuring builds of csrc/dev/ (phase clocks, the
W4A16 timeline) that `kdtree bench` runs."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

NVCC_FLAGS_ENV = "NVCC_APPEND_FLAGS"  # nvcc appends these to every command line it runs


def flagged_build_root(build_root: Path, suffix: str) -> Path:
    """build -> build-<suffix>: where the flagged build goes."""
    return build_root.with_name(f"{build_root.name}-{suffix}")


def build_with_nvcc_flags(request, flags: tuple[str, ...], suffix: str, console) -> Path:
    """Build request's targets with `flags` appended to nvcc's (after any the caller's
    environment gives) in flagged_build_root(request.build_root, suffix); the environment is
    as it was afterwards. Returns the build directory."""
    from .driver import build

    root = flagged_build_root(request.build_root, suffix)
    before = os.environ.get(NVCC_FLAGS_ENV)
    os.environ[NVCC_FLAGS_ENV] = " ".join(filter(None, [before, *flags]))
    try:
        console.print(f"[dim]{suffix} build ({' '.join(flags)}): {root}[/]", highlight=False)
        return build(replace(request, build_root=root), console=console).configured.build_dir
    finally:
        if before is None:
            del os.environ[NVCC_FLAGS_ENV]
        else:
            os.environ[NVCC_FLAGS_ENV] = before
