"""The generator against real nvcc, g++ and ninja on a scratch csrc/: header edits rebuild
exactly their dependents, an unchanged tree is a no-op, new files are picked up, and a broken
.cu fails with the compiler's message."""

from __future__ import annotations

import io
import os
import subprocess
import time
from pathlib import Path

import pytest
from build_scratch import make_scratch_repo, needs_toolchain, scratch_request
from rich.console import Console

from kdtree_cli.native_build.driver import build, configure
from kdtree_cli.native_build.native_tests import run_native_tests
from kdtree_cli.native_build.toolchain import find_ninja
from python_engine.errors import KdtreeError

pytestmark = needs_toolchain

SOURCES = {
    "csrc/kernels/shared.cuh": "#pragma once\n__device__ inline float twice(float x) { return 2.f * x; }\n",
    "csrc/kernels/uses_shared.cu": (
        '#include "kernels/shared.cuh"\n#include "common/cuda_check.h"\n'
        "__global__ void k(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\n"
        "void launch_twice(float* x) { k<<<1, 32>>>(x); KD_CHECK_LAUNCH(); }\n"
    ),
    "csrc/kernels/independent.cu": "__global__ void other(int* y) { y[0] = 1; }\n",
    "csrc/common/only_c.h": "#pragma once\ninline int answer() { return 42; }\n",
    "csrc/common/c.cpp": '#include "common/only_c.h"\nint c_answer() { return answer(); }\n',
    "csrc/tests/test_scratch.cpp": (
        '#include "common/test_harness.h"\nint c_answer();\n'
        "KD_TEST(answer_is_42) { KD_EXPECT_EQ(c_answer(), 42); }\n"
        "KD_TEST(wrong_on_purpose) { if (std::getenv(\"SCRATCH_FAIL\")) KD_EXPECT_EQ(c_answer(), 41); }\n"
        "KD_GPU_TEST(needs_a_gpu) { KD_EXPECT(true); }\n"
        "KD_TEST_MAIN()\n"
    ),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = make_scratch_repo(tmp_path_factory.mktemp("repo"), SOURCES)
    request = scratch_request(root)
    outcome = build(request, console=Console(file=io.StringIO()))
    assert outcome.steps_run > 0
    return root, request, outcome.configured.build_dir


def ninja_plan(build_dir: Path) -> set[str]:
    """Outputs ninja would rebuild now (dry run), by description (`NVCC csrc/...`, `LINK ...`)."""
    out = subprocess.run([find_ninja(), "-C", str(build_dir), "-n"], capture_output=True, text=True,
                         check=True, env=dict(os.environ, NINJA_STATUS=""),
                         ).stdout
    return {line.strip() for line in out.splitlines() if line.strip() and not line.startswith("ninja:")}


def touch(path: Path) -> None:
    time.sleep(0.01)  # a clearly newer mtime than outputs written a moment ago
    os.utime(path)


def test_unchanged_tree_is_a_no_op(built):
    root, request, build_dir = built
    manifest = build_dir / "build.ninja"
    before = manifest.stat().st_mtime_ns
    assert ninja_plan(build_dir) == set()
    outcome = build(request, console=Console(file=io.StringIO()))
    assert outcome.steps_run == 0 and not outcome.configured.manifest_changed
    assert manifest.stat().st_mtime_ns == before  # rewritten only when the text changes


def test_touching_a_header_rebuilds_exactly_its_dependents(built):
    root, request, build_dir = built
    touch(root / "csrc/kernels/shared.cuh")
    assert ninja_plan(build_dir) == {
        "NVCC csrc/kernels/uses_shared.cu", "AR lib/libkd_kernels.a", "LINK bin/test_scratch",
    }
    touch(root / "csrc/common/only_c.h")
    assert "CXX csrc/common/c.cpp" in ninja_plan(build_dir)
    assert not {"NVCC csrc/kernels/independent.cu", "CXX csrc/tests/test_scratch.cpp"} & ninja_plan(build_dir)
    touch(root / "csrc/common/cuda_check.h")  # included by uses_shared.cu only
    plan = ninja_plan(build_dir)
    assert "NVCC csrc/kernels/uses_shared.cu" in plan and "NVCC csrc/kernels/independent.cu" not in plan
    build(request, console=Console(file=io.StringIO()))
    assert ninja_plan(build_dir) == set()


def test_new_and_removed_sources_are_picked_up(built):
    root, request, build_dir = built
    new = root / "csrc/common/added.cpp"
    new.write_text("int added() { return 7; }\n")
    try:
        assert configure(request).manifest_changed
        assert ninja_plan(build_dir) >= {"CXX csrc/common/added.cpp", "AR lib/libkd_common.a"}
        build(request, console=Console(file=io.StringIO()))
        assert (build_dir / "obj/common/added.cpp.o").exists()
    finally:
        new.unlink()
    assert configure(request).manifest_changed  # back to the old file set
    # the archive's command changed (one object fewer): ninja re-archives and relinks
    assert ninja_plan(build_dir) == {"AR lib/libkd_common.a", "LINK bin/test_scratch"}
    build(request, console=Console(file=io.StringIO()))
    assert ninja_plan(build_dir) == set()


def test_moving_the_repository_keeps_the_build(built, tmp_path):
    """A deploy copies build/ into each new release folder: nothing may need rebuilding."""
    import shutil

    root, request, build_dir = built
    moved = tmp_path / "elsewhere" / "release-2"
    shutil.copytree(root, moved, symlinks=True)  # copy2: keeps mtimes
    moved_request = scratch_request(moved)
    assert not configure(moved_request).manifest_changed
    assert ninja_plan(moved / "build" / "release") == set()
    assert str(moved / "build" / "release") in (moved / "compile_commands.json").read_text()
    quiet = dict(console=Console(file=io.StringIO()), out=Console(file=io.StringIO()))
    [result] = run_native_tests(moved_request, **quiet)
    assert result.ok and result.passed >= 2


def test_compile_commands_have_every_source_and_no_nvcc_only_flags(built):
    root, request, build_dir = built
    import json

    entries = json.loads((root / "compile_commands.json").read_text())
    files = {(Path(e["directory"]) / e["file"]).resolve().relative_to(root.resolve()).as_posix()
             for e in entries}
    assert files == {p for p in SOURCES if p.endswith((".cu", ".cpp"))}
    for entry in entries:
        args = entry["arguments"]
        assert not any(a.startswith(("-gencode", "--expt", "--generate-dependencies", "--dependency-output"))
                       for a in args)
        assert "-I../../csrc" in args and "-std=c++17" in args  # relative to "directory"
        assert Path(entry["directory"]) == build_dir
        if entry["file"].endswith(".cu"):
            assert args[:3] == ["clang++", "-x", "cuda"] and "--cuda-gpu-arch=sm_120" in args
            assert "-Wall" in args and "-Xcompiler" not in args


def test_native_tests_report_totals_and_failures(built, monkeypatch):
    root, request, build_dir = built
    quiet = dict(console=Console(file=io.StringIO()), out=Console(file=io.StringIO()))
    [result] = run_native_tests(request, **quiet)
    # this machine may or may not have a GPU: the GPU case is either run or skipped
    assert (result.passed + result.skipped, result.failed) == (3, 0) and result.ok
    monkeypatch.setenv("SCRATCH_FAIL", "1")
    [result] = run_native_tests(request, **quiet)
    assert result.failed == 1 and result.returncode == 1 and not result.ok
    assert "expected c_answer() == 41, got 42 vs 41" in result.output


def test_broken_cu_fails_with_the_compilers_error(tmp_path):
    root = make_scratch_repo(tmp_path, {
        "csrc/kernels/broken.cu": "__global__ void k(float* x) { x[0] = no_such_name; }\n",
        "csrc/kernels/fine.cu": "__global__ void ok(float* x) { x[0] = 1.f; }\n",
    })
    log = io.StringIO()
    with pytest.raises(KdtreeError, match=r"build failed: 1 step\(s\) failed"):
        build(scratch_request(root, jobs=1), console=Console(file=log, width=200))
    shown = log.getvalue()
    assert "failed: NVCC csrc/kernels/broken.cu" in shown
    # the path as the user sees it from the repository root, not relative to build/release
    assert 'csrc/kernels/broken.cu(1): error: identifier "no_such_name" is undefined' in shown
    assert "../../csrc" not in shown
    assert "--generate-dependencies-with-compile" not in shown  # no command line without --verbose
    assert "FAILED:" not in shown and "ninja: build stopped" not in shown


def test_a_second_build_waits_for_the_first(built):
    import fcntl
    import threading

    root, request, build_dir = built
    log = io.StringIO()
    with open(build_dir / ".kdtree.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running `kdtree build` holds it
        worker = threading.Thread(target=build, args=(request,), kwargs={"console": Console(file=log)})
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and "waiting for another build" in log.getvalue()
    worker.join(timeout=60)
    assert not worker.is_alive()
