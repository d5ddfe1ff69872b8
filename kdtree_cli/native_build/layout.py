"""What to build, found by glob under csrc/ so that a new file just works.

Source layout convention:
  csrc/common/**/*.{cpp,cu}     -> lib/libkd_common.a   (check macros, KDTR reader, ...)
  csrc/kernels/**/*.cu          -> lib/libkd_kernels.a  (.cuh headers beside them; .cpp files
                                   there are not part of it: kernels/emu/ builds kernels on the
                                   CPU for its own tests)
  csrc/engine/**/*.{cpp,cu}     -> lib/libkd_engine.a
  csrc/tests/test_*.{cpp,cu}    -> bin/test_*   one binary per file, linked with every lib
  csrc/tests/<other>.{cpp,cu}   -> lib/libkd_tests_support.a, linked into the test binaries
  csrc/bench/bench_*.{cpp,cu}   -> bin/bench_*  likewise, with lib/libkd_bench_support.a
The native engine, when csrc/engine/ exists, is also linked as two shared libraries:
  lib/libkdtree_engine.so       engine + kernels + common, for the GPU (python_engine/native)
  lib/libkdtree_engine_emu.so   the same sources built by the host compiler against the SIMT
                                emulator, with csrc/kernels/emu/runtime/*.cpp standing in for
                                the CUDA runtime and cuBLAS: the engine on a CPU, for tests
  csrc/kernels/emu/emu_*.cpp    -> bin/emu/emu_*: kernel tests and tools on the emulator (the
                                kernels from their headers, common/ and the stand-in runtime)
  csrc/kernels/emu/*_capi.cpp   -> lib/emu/lib*_emu.so: C entry points into emulated kernels,
                                for Python tests through ctypes
  EMU_TWINS (tests/, bench/)    -> bin/emu/<name>: native programs also built on the emulator,
                                so the program run on the GPU is itself checked in CI
  (both link lib/emu/libkd_emu.a: the engine's emulated objects, taken as needed)
  csrc/dev/                     no rule: measuring builds' instrumentation and baselines
                                (headers a kernel includes only under its -D flag,
                                csrc/dev/README.md), never part of the libraries
Headers (.h, .cuh) are not listed: nvcc/g++ depfiles tell ninja who includes what.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from python_engine.errors import KdtreeError

SOURCE_SUFFIXES = (".cpp", ".cu")
# Library directories in link order (a static library must come before the ones it uses),
# with the source suffixes each compiles.
LIB_DIRS = {"engine": SOURCE_SUFFIXES, "kernels": (".cu",), "common": SOURCE_SUFFIXES}
# Directories whose test_*/bench_* files each become a program.
PROGRAM_DIRS = {"tests": "test_", "bench": "bench_"}
# The development area: built on request only (csrc/dev/README.md), so no library sweeps it
DEV_DIR = "dev"
# The shared libraries of the engine (built when csrc/engine/ has sources).
ENGINE_LIB = "lib/libkdtree_engine.so"
ENGINE_EMU_LIB = "lib/libkdtree_engine_emu.so"
EMU_RUNTIME_DIR = Path("kernels") / "emu" / "runtime"
EMU_PROGRAM_DIR = Path("kernels") / "emu"  # emu_*.cpp: kernel tests and tools on the emulator -> bin/emu/
EMU_PROGRAM_PREFIX = "emu_"
EMU_CAPI_SUFFIX = "_capi"  # csrc/kernels/emu/<name>_capi.cpp -> lib/emu/lib<name>_emu.so
# Native programs whose emulated build CI runs: their kernels have no emu_* twin of their own
# (the tree and verify_attn kernels do), and they use only what the stand-in runtime provides.
EMU_TWINS = (Path("tests") / "test_moe_w4a16.cu", Path("tests") / "test_drafter_attn.cu", Path("bench") / "bench_moe.cu")
EMU_ARCHIVE = "lib/emu/libkd_emu.a"
ENGINE_EXPORTS = Path("engine") / "exports.map"
# What the emulated kernel libraries (lib/emu/lib*_emu.so) export: their kd_* entry points
# only, so that their stand-in CUDA runtime can never be interposed by a real one.
EMU_EXPORTS = EMU_PROGRAM_DIR / "exports.map"


def emu_capi_output(rel: Path) -> str:
    """csrc/kernels/emu/<name>_capi.cpp -> lib/emu/lib<name>_emu.so"""
    return f"lib/emu/lib{rel.stem.removesuffix(EMU_CAPI_SUFFIX)}_emu.so"


def emu_program_output(rel: Path) -> str:
    """An emulator program (emu_*.cpp, or an EMU_TWINS source) -> bin/emu/<stem>"""
    return f"bin/emu/{rel.stem}"


@dataclass(frozen=True)
class Library:
    name: str  # "kd_common"
    sources: tuple[Path, ...]  # relative to the csrc root

    @property
    def output(self) -> str:
        return f"lib/lib{self.name}.a"


@dataclass(frozen=True)
class Program:
    name: str  # "test_kdtr"
    kind: str  # "tests" | "bench"
    source: Path  # relative to the csrc root

    @property
    def output(self) -> str:
        return f"bin/{self.name}"


@dataclass(frozen=True)
class SourceLayout:
    csrc: Path  # absolute
    libraries: tuple[Library, ...]  # link order
    support: dict[str, Library]  # kind -> helper library for that kind's programs
    programs: tuple[Program, ...]
    unknown_dirs: tuple[str, ...]  # csrc/<dir> holding sources that no rule covers
    emu_runtime: tuple[Path, ...] = ()  # relative to the csrc root
    emu_programs: tuple[Path, ...] = ()  # csrc/kernels/emu/emu_*.cpp, relative to the csrc root
    emu_capi: tuple[Path, ...] = ()  # csrc/kernels/emu/*_capi.cpp
    emu_twins: tuple[Path, ...] = ()  # the EMU_TWINS present

    @property
    def has_engine(self) -> bool:
        return any(lib.name == "kd_engine" for lib in self.libraries)

    def all_sources(self) -> list[Path]:
        out = [s for lib in self.libraries for s in lib.sources]
        out += [s for lib in self.support.values() for s in lib.sources]
        out += [p.source for p in self.programs]
        out += list(self.emu_runtime) + list(self.emu_programs) + list(self.emu_capi)
        return out


def _sources_in(directory: Path, recursive: bool, suffixes: tuple[str, ...] = SOURCE_SUFFIXES) -> list[Path]:
    pattern = "**/*" if recursive else "*"
    return sorted(p for p in directory.glob(pattern) if p.suffix in suffixes and p.is_file())


def discover(csrc: Path) -> SourceLayout:
    csrc = csrc.resolve()
    libraries = []
    for name, suffixes in LIB_DIRS.items():
        sources = _sources_in(csrc / name, recursive=True, suffixes=suffixes)
        if sources:
            libraries.append(Library(f"kd_{name}", tuple(s.relative_to(csrc) for s in sources)))
    programs, support = [], {}
    for kind, prefix in PROGRAM_DIRS.items():
        helpers = []
        for path in _sources_in(csrc / kind, recursive=False):
            rel = path.relative_to(csrc)
            if path.stem.startswith(prefix):
                programs.append(Program(path.stem, kind, rel))
            else:
                helpers.append(rel)
        if helpers:
            support[kind] = Library(f"kd_{kind}_support", tuple(helpers))
    known = set(LIB_DIRS) | set(PROGRAM_DIRS) | {DEV_DIR}
    unknown = sorted(
        d.name for d in csrc.iterdir() if d.is_dir() and d.name not in known and _sources_in(d, True)
    ) if csrc.is_dir() else []
    _check_unique_program_names(programs)
    emu_runtime = tuple(p.relative_to(csrc) for p in _sources_in(csrc / EMU_RUNTIME_DIR, recursive=False, suffixes=(".cpp",)))
    emu_programs = tuple(p.relative_to(csrc) for p in _sources_in(csrc / EMU_PROGRAM_DIR, recursive=False, suffixes=(".cpp",))
                         if p.stem.startswith(EMU_PROGRAM_PREFIX))
    emu_capi = tuple(p.relative_to(csrc) for p in _sources_in(csrc / EMU_PROGRAM_DIR, recursive=False, suffixes=(".cpp",))
                     if p.stem.endswith(EMU_CAPI_SUFFIX))
    emu_twins = tuple(t for t in EMU_TWINS if (csrc / t).is_file())
    return SourceLayout(csrc, tuple(libraries), support, tuple(programs), tuple(unknown), emu_runtime, emu_programs,
                        emu_capi, emu_twins)


def _check_unique_program_names(programs: list[Program]) -> None:
    seen: dict[str, Path] = {}
    for prog in programs:
        if prog.name in seen:
            raise KdtreeError(
                f"csrc/{seen[prog.name]} and csrc/{prog.source} would both build bin/{prog.name}; rename one"
            )
        seen[prog.name] = prog.source
