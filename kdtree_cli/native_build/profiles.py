"""Build profiles: release and debug, each in its own directory (build/release, build/debug)."""

from __future__ import annotations

from dataclasses import dataclass

from python_engine.errors import KdtreeError


@dataclass(frozen=True)
class BuildProfile:
    name: str
    nvcc_flags: tuple[str, ...]  # device + host code through nvcc (.cu)
    cxx_flags: tuple[str, ...]  # host compiler (.cpp)


PROFILES = {
    # -lineinfo costs nothing at run time and lets ncu / compute-sanitizer map SASS to source.
    "release": BuildProfile(
        "release",
        nvcc_flags=("-O3", "-lineinfo", "-DNDEBUG"),
        cxx_flags=("-O3", "-DNDEBUG"),
    ),
    # -G is device debug info with optimisation off; it already includes line info (nvcc
    # warns that -G overrides -lineinfo, so we do not pass both). KDTREE_DEBUG_SYNC makes
    # KD_CHECK_LAUNCH() synchronise, so an async kernel fault is reported at its launch site.
    "debug": BuildProfile(
        "debug",
        nvcc_flags=("-O0", "-g", "-G", "-DKDTREE_DEBUG_SYNC=1"),
        cxx_flags=("-O0", "-g", "-DKDTREE_DEBUG_SYNC=1"),
    ),
}


def get_profile(name: str) -> BuildProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise KdtreeError(f"unknown build profile {name!r}: use one of {', '.join(PROFILES)}") from None
