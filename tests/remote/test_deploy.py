"""Deploys of a small synthetic project to the real test sshd: what arrives, what is
reused, what the build and test steps see, what comes back into results/<host>/."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from remote.manifest import build_manifest

from conftest import WEIRD, current_name, remote_dir, run_deploy, verify_release, write_version

NVCC = shutil.which("nvcc")


def test_first_and_second_deploy(sshd, host_factory, project, tmp_path, rng):
    host = host_factory()
    results = tmp_path / "results"
    first = run_deploy(host, project, results)
    assert first.ok, first.error
    rdir = remote_dir(sshd, host)
    assert current_name(rdir) == first.release and first.switched
    manifest = verify_release(rdir, first.release)
    local = build_manifest(project)
    assert set(manifest["files"]) == set(local.files)  # exactly the synced tree ...
    assert manifest["tree"] == local.tree_hash() and first.release.endswith(local.tree_hash()[:12])
    for never in ("build/junk.txt", ".venv/junk.txt", "results/junk.txt", "build-debug/junk.txt"):
        assert never not in manifest["files"]  # ... never build/, .venv/, results/
    assert f"odd dir/{WEIRD}.txt" in manifest["files"] and "refs/ref.bin" in manifest["files"]
    assert first.uploaded == len(local.files) and first.reused == 0

    # the steps ran in the release, with the host's arch and the results dir filled in
    build_lines = [t for (_h, step, t, _e) in first.reporter.lines if step == "build"]
    release_path = str(rdir / "releases" / first.release)
    assert build_lines == [f"building for sm_120 in {release_path}"]
    junit = ET.parse(results / "sshd-test" / "junit.xml").getroot()
    suite = junit if junit.tag == "testsuite" else junit[0]
    assert (int(suite.get("tests")), int(suite.get("failures")), int(suite.get("errors"))) == (1, 0, 0)
    assert (results / "sshd-test" / "logs" / "build.log").read_text().splitlines() == build_lines
    summary = json.loads((results / "sshd-test" / "deploy.json").read_text())
    assert summary["ok"] and summary["release"] == first.release

    # a one-file change: one upload, everything else copied from the previous release
    (project / "app" / "version.txt").write_text("v2\n")
    second = run_deploy(host, project, results)
    assert second.ok, second.error
    assert second.previous == first.release and current_name(rdir) == second.release
    assert second.uploaded == 1 and second.reused == len(local.files) - 1
    verify_release(rdir, second.release)
    old, new = (rdir / "releases" / n / "refs" / "ref.bin" for n in (first.release, second.release))
    assert old.read_bytes() == new.read_bytes()  # unchanged: the same bytes ...
    assert os.stat(old).st_ino != os.stat(new).st_ino  # ... in a file of its own
    changed = [rdir / "releases" / n / "app" / "version.txt" for n in (first.release, second.release)]
    assert [p.read_text() for p in changed] == ["v1\n", "v2\n"]  # the old release is untouched


def test_keep_prunes_old_releases_but_never_current(sshd, host_factory, project, tmp_path, rng):
    host = host_factory(test=None, keep=5)
    names = []
    for i in range(4):
        write_version(project, f"v{i}", rng)
        r = run_deploy(host, project, tmp_path / "results", keep=2, test=False, build=False)
        assert r.ok, r.error
        names.append(r.release)
    rdir = remote_dir(sshd, host)
    left = sorted(p.name for p in (rdir / "releases").iterdir())
    assert left == names[-2:] and current_name(rdir) == names[-1]
    assert r.removed_releases == [names[1]]


def junit_counts(path: Path) -> tuple[int, int]:
    junit = ET.parse(path).getroot()
    suite = junit if junit.tag == "testsuite" else junit[0]
    return int(suite.get("tests")), int(suite.get("failures"))


def test_failed_test_step_keeps_previous_current_and_fetches_logs(sshd, host_factory, project, tmp_path, rng):
    host = host_factory()
    results = tmp_path / "results"
    good = run_deploy(host, project, results)
    assert good.ok, good.error
    before = {p.relative_to(results): p.read_bytes() for p in results.rglob("*") if p.is_file()}
    (project / "app" / "version.txt").write_text("broken")  # the tiny test wants "v...\n"
    bad = run_deploy(host, project, results)
    assert not bad.ok and "test failed (exit 1)" in bad.error and "current stays " + good.release in bad.error
    rdir = remote_dir(sshd, host)
    assert current_name(rdir) == good.release and not bad.switched
    verify_release(rdir, bad.release)  # kept for a look
    # results/<host>/ still holds the good deploy's files, untouched ...
    assert {p.relative_to(results): p.read_bytes() for p in results.rglob("*") if p.is_file()} == before
    # ... and the failed one's reports came back elsewhere, and the error says where
    kept = Path(bad.results_dir)
    assert not kept.is_relative_to(results) and str(kept) in bad.error
    assert junit_counts(kept / "junit.xml") == (1, 1)
    assert "1 failed" in (kept / "logs" / "test.log").read_text()
    assert json.loads((kept / "deploy.json").read_text())["ok"] is False


def test_results_folder_not_written_by_deploy_is_never_replaced(sshd, host_factory, project, tmp_path):
    """A host named like a committed results folder (results/h200/ holds measurements)."""
    results = tmp_path / "results"
    (results / "h200").mkdir(parents=True)
    (results / "h200" / "README.md").write_text("measured by hand\n")
    host = host_factory(name="h200")
    r = run_deploy(host, project, results)
    assert not r.ok and str(results / "h200") in r.error and "--results" in r.error
    assert [p.name for p in (results / "h200").iterdir()] == ["README.md"]
    assert not remote_dir(sshd, host).exists()  # refused before connecting


def test_dry_run_changes_nothing(sshd, host_factory, project, tmp_path):
    host = host_factory()
    r = run_deploy(host, project, tmp_path / "results", dry_run=True)
    assert r.ok, r.error
    assert not remote_dir(sshd, host).exists() and not (tmp_path / "results").exists()
    assert len(r.plan["upload"]) == len(build_manifest(project).files)
    assert "KDTREE_ARCH=120" in r.plan["commands"]["build"]


def test_remote_paths_with_shell_metacharacters(sshd, host_factory, project, tmp_path):
    """The remote dir and file names hold spaces, quotes, $(...), backticks and $HOME:
    they arrive as exactly those bytes and nothing in them is ever run."""
    host = host_factory(dir=f"~/{WEIRD} dir")
    r = run_deploy(host, project, tmp_path / "results")
    assert r.ok, r.error
    rdir = sshd.home / f"{WEIRD} dir"
    assert current_name(rdir) == r.release
    assert (rdir / "current" / "odd dir" / f"{WEIRD}.txt").read_text() == "weird name, plain content\n"
    pwned = [p for base in (sshd.home, tmp_path) for p in base.rglob("PWNED*")]
    pwned += [p for base in (Path.home(), Path.cwd()) for p in base.glob("PWNED*")]  # ssh's cwd
    assert pwned == []


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
def test_build_step_really_compiles_with_nvcc(sshd, host_factory, project, tmp_path):
    """The mechanism with a real compiler: the build step runs nvcc for the host's arch in
    the release, and the object is there afterwards."""
    host = host_factory(
        nvcc=NVCC, test=None,
        build=("sh", "-c", "mkdir -p build && printf '__global__ void k(float *x) {{ x[0] = 1; }}\\n' "
                           "> build/probe.cu && \"$KDTREE_NVCC\" -arch=sm_{arch} -c build/probe.cu -o build/probe.o "
                           "&& echo compiled"),
    )
    r = run_deploy(host, project, tmp_path / "results", test=False)
    assert r.ok, r.error
    obj = remote_dir(sshd, host) / "current" / "build" / "probe.o"
    assert obj.stat().st_size > 0
    assert any(t == "compiled" for (_h, s, t, _e) in r.reporter.lines if s == "build")
