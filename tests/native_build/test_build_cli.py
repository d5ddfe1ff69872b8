"""`kdtree build` options as a user meets them, without compiling anything: --list,
--dry-run (per profile and target), --clean, bad --arch and bad targets."""

from __future__ import annotations

import subprocess
import sys

from build_scratch import needs_toolchain

from python_engine.project import PROJECT_ROOT


def kdtree(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdtree_cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=PROJECT_ROOT, env=env)


@needs_toolchain
def test_list_and_dry_run_show_targets_and_commands(tmp_path):
    proc = kdtree("build", "--build-dir", str(tmp_path), "--list")
    assert proc.returncode == 0, proc.stderr
    assert "test_kdtr" in proc.stdout and "bin/test_kdtr" in proc.stdout and "lib/libkd_common.a" in proc.stdout
    listing = proc.stdout
    proc = kdtree("build", "--build-dir", str(tmp_path), "--dry-run", "--arch", "hopper,rtx-pro-6000", "test_kdtr")
    assert proc.returncode == 0, proc.stderr
    assert "csrc/tests/test_kdtr.cpp" in proc.stdout and "-O3" in proc.stdout
    assert not (tmp_path / "release" / "bin" / "test_kdtr").exists()  # nothing was built
    # every target --list names is one build.ninja builds, the engine's libraries included
    rows = [line.split()[:2] for line in listing.splitlines() if not line.startswith(("#", "groups:"))]
    targets = [name for name, _ in rows]
    outputs = {out if out.startswith(("bin/", "lib/")) else name for name, out in rows}
    assert {"engine", "engine_emu", "lib/emu/libmoe_w4a16_emu.so", "bin/emu/test_moe_w4a16"} <= set(targets)
    assert {"lib/libkdtree_engine.so", "lib/libkdtree_engine_emu.so"} <= outputs
    build_ninja = (tmp_path / "release" / "build.ninja").read_text()
    assert all(f"\nbuild {out}: " in build_ninja for out in outputs)
    assert "emu_tests" in listing.splitlines()[-1]
    proc = kdtree("build", "--build-dir", str(tmp_path), "--dry-run", *targets)
    assert proc.returncode == 0, proc.stderr  # each is a target `kdtree build` accepts
    proc = kdtree("build", "--build-dir", str(tmp_path), "--dry-run", "--profile", "debug", "--arch", "90a,120")
    assert proc.returncode == 0, proc.stderr
    build_ninja = (tmp_path / "debug" / "build.ninja").read_text()
    assert "-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_120,code=sm_120" in build_ninja
    assert " -G " in build_ninja and "-DKDTREE_DEBUG_SYNC=1" in build_ninja
    proc = kdtree("build", "--build-dir", str(tmp_path), "--clean", "--profile", "debug")
    assert proc.returncode == 0 and not (tmp_path / "debug").exists()
    assert (tmp_path / "release" / "build.ninja").exists()  # the other profile is untouched


@needs_toolchain
def test_bad_arch_and_bad_target_are_one_line_errors(tmp_path):
    proc = kdtree("build", "--build-dir", str(tmp_path), "--arch", "pascal")
    assert proc.returncode == 1 and "unknown CUDA architecture 'pascal'" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = kdtree("build", "--build-dir", str(tmp_path), "--dry-run", "--arch", "120", "test_nope")
    assert proc.returncode == 1 and "unknown target(s) test_nope" in proc.stderr


def test_clean_refuses_a_directory_it_did_not_make(tmp_path):
    (tmp_path / "release").mkdir()
    (tmp_path / "release" / "precious.txt").write_text("keep me")
    proc = kdtree("build", "--build-dir", str(tmp_path), "--clean")
    assert proc.returncode == 1 and "not removing" in proc.stderr
    assert (tmp_path / "release" / "precious.txt").exists()
