"""The emulated libraries (lib/emu/lib*_emu.so, lib/libkdtree_engine_emu.so) carry a stand-in
CUDA runtime and cuBLAS (csrc/kernels/emu/runtime/): their calls must reach it even in a
process that has loaded the real libcudart, as one with a CUDA build of torch has, or a
deploy's tests on a GPU box. Were the stand-in's cuda* symbols exported, the dynamic linker
would bind the library's calls to the real runtime loaded first, and every emulated launch
would fail ("cudaErrorInsufficientDriver" without a driver; host memory handed to a device
with one).

Two checks: each library's dynamic symbol table holds its kd_* entry points only (the
version scripts csrc/engine/exports.map and csrc/kernels/emu/exports.map), and the emulated
suites' library loading and first launches pass in a process with the real libcudart
LD_PRELOADed (the strongest interposition there is)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from python_engine.project import PROJECT_ROOT

pytestmark = pytest.mark.slow  # the emulated build (shared with the other emulator tests), then two pytest runs

CUDART_GLOB = "libcudart.so.[0-9]*"
ENTRY_POINT_PREFIX = "kd_"  # what the version scripts export: `global: kd_*;`
# Cases of the emulated suites that load each library and launch through the stand-in runtime
# (cudaMalloc, cudaGetDevice, cudaFuncSetAttribute, cudaMemsetAsync, cuBLAS GEMMs): one
# pytest run under the real runtime, a few seconds of emulation.
PRELOADED_CASES = (
    "tests/kernels/test_moe_w4a16_emulated.py::test_ragged_routing_matches_dequantized_reference"
    "[small-swiglu-slices1]",
    "tests/kernels/test_moe_w4a16_emulated.py::test_bad_arguments_are_reported",
    "tests/native/test_native_loading.py::test_kimi_layout_gives_the_same_logits",
    "tests/native/test_native_loading.py::test_memory_report_adds_up_and_comes_back",
)


def real_cudart_candidates() -> list[Path]:
    """Every real libcudart.so.N this machine has: the CUDA toolkit's, the nvidia-*
    wheels' (what a CUDA torch loads), torch's own."""
    folders: list[Path] = []
    try:
        from kdtree_cli.native_build.toolchain import find_cuda

        folders += list(find_cuda().lib_dirs)
    except Exception:  # no toolkit: the wheels may still hold one
        pass
    nvidia = importlib.util.find_spec("nvidia")
    if nvidia is not None and nvidia.submodule_search_locations:
        for root in nvidia.submodule_search_locations:
            folders += sorted(Path(root).glob("*/lib"))
    torch_spec = importlib.util.find_spec("torch")
    if torch_spec is not None and torch_spec.origin:
        folders.append(Path(torch_spec.origin).parent / "lib")
    found = [p for d in folders for p in sorted(d.glob(CUDART_GLOB)) if p.is_file()]
    return list(dict.fromkeys(p.resolve() for p in found))


@pytest.fixture(scope="module")
def real_cudart() -> Path:
    found = real_cudart_candidates()
    if not found:
        pytest.skip("no real libcudart.so.N on this machine (no CUDA toolkit lib/ folder, no "
                    "nvidia-cuda-runtime wheel, no CUDA torch): nothing to preload")
    return found[0]


@pytest.fixture(scope="module")
def emulated_libraries() -> list[Path]:
    try:
        from kdtree_cli.native_build.toolchain import find_cuda, find_cxx

        find_cuda(), find_cxx()
    except Exception as exc:  # no CUDA headers or no g++: nothing to build against
        pytest.skip(f"no CUDA toolkit / host compiler to build the emulated libraries: {exc}")
    from rich.console import Console

    from kdtree_cli.native_build.driver import BuildRequest, build
    from kdtree_cli.native_build.layout import ENGINE_EMU_LIB

    outcome = build(BuildRequest(targets=("engine_emu", "emu_tests")), console=Console(stderr=True, quiet=True))
    d = outcome.configured.build_dir
    libraries = sorted((d / "lib" / "emu").glob("lib*_emu.so")) + [d / ENGINE_EMU_LIB]
    assert len(libraries) >= 2 and all(p.is_file() for p in libraries), libraries
    return libraries


def exported_symbols(library: Path) -> list[str]:
    """The defined symbols in the library's dynamic symbol table (`nm -D --defined-only`)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    return [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_emulated_libraries_export_only_their_entry_points(emulated_libraries):
    for library in emulated_libraries:
        symbols = exported_symbols(library)
        assert any(s.startswith(ENTRY_POINT_PREFIX) for s in symbols), f"{library.name} exports no kd_* entry"
        leaked = [s for s in symbols if not s.startswith(ENTRY_POINT_PREFIX)]
        assert not leaked, f"{library.name} exports {leaked[:8]}: a real CUDA runtime loaded first would take them over"


def test_emulated_suites_pass_with_the_real_runtime_preloaded(emulated_libraries, real_cudart, seed):
    env = dict(os.environ, LD_PRELOAD=str(real_cudart), KDTREE_SEED=str(seed))
    # the preload is live in such a process: the real runtime is mapped before anything runs
    maps = subprocess.run([sys.executable, "-c", "print(open('/proc/self/maps').read())"],
                          env=env, capture_output=True, text=True, check=True).stdout
    assert str(real_cudart) in maps, f"LD_PRELOAD={real_cudart} did not load it"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", *PRELOADED_CASES],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    tail = (run.stdout + run.stderr)[-4000:]
    assert run.returncode == 0, f"with LD_PRELOAD={real_cudart}:\n{tail}"
    assert f"{len(PRELOADED_CASES)} passed" in run.stdout, tail
