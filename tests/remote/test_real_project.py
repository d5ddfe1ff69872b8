"""Deploy this repository itself to the test sshd: the remote side really runs
`kdtree build` (nvcc) for sm_120 and `kdtree test` on a small CPU subset, and the reports
come back into results/<host>/ (a tmp dir here)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import uuid
import xml.etree.ElementTree as ET

import pytest

from remote.inventory import HostConfig
from remote.manifest import list_files
from python_engine.project import PROJECT_ROOT

from conftest import current_name, remote_dir, run_deploy, verify_release
from kdtree_sshd import ALIAS

REPO = PROJECT_ROOT
BUILD_TARGET = "test_kdtr"  # one small real program: a C++ compile and a link through nvcc
CPU_TESTS = "tests/foundation/test_kdtr.py"  # a small CPU subset: the deploy is under test, not the suite


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
@pytest.mark.skipif(not (REPO / CPU_TESTS).is_file(), reason=f"{CPU_TESTS} is not in this tree")
def test_deploy_this_repository(sshd, tmp_path):
    host = HostConfig(
        name="sshd-test", ssh=ALIAS, ssh_config=str(sshd.ssh_config),
        dir=f"~/kd-repo-{uuid.uuid4().hex[:8]}", python=sys.executable, venv=False,
        arch=("120",), gpus=0, nvcc=shutil.which("nvcc"), connect_timeout=5, source="tests/remote",
        # --build-dir pins the output into the release even if the remote python (here: this
        # venv, with kdtree installed editable) resolved a module from the local checkout
        build=("{python}", "-m", "kdtree_cli", "build", BUILD_TARGET, "--arch", "{arch}",
               "--build-dir", "{release}/build"),
        test=("{python}", "-m", "kdtree_cli", "test", "--", CPU_TESTS, "-q", "-p", "no:cacheprovider",
              "--junitxml={results}/junit.xml"),
    )
    synced = list_files(REPO)
    missing = [p for p in ("kdtree_cli/native_build/driver.py", "kdtree_cli/commands/build.py") if p not in synced]
    assert not missing, (
        f"{missing} would not be deployed: git ignores them (check `git check-ignore -v {missing[0]}`; "
        f"a bare `build/` in .gitignore matches kdtree_cli/native_build/ too: anchor it as `/build/`)"
    )
    results = tmp_path / "results"
    r = run_deploy(host, REPO, results)
    assert r.ok, r.error + "\n" + "\n".join(t for *_x, t, _e in r.reporter.lines[-30:])

    rdir = remote_dir(sshd, host)
    assert current_name(rdir) == r.release
    manifest = verify_release(rdir, r.release)
    for path in ("pyproject.toml", "kdtree_cli/app.py", "remote/deploy.py", "kdtree.toml"):
        assert path in manifest["files"]
    assert not any(p.split("/")[0] in ("build", ".venv", "results", ".git") for p in manifest["files"])
    assert any(p.startswith("refs/") for p in manifest["files"])
    program = rdir / "current" / "build" / "release" / "bin" / BUILD_TARGET
    assert program.is_file() and program.stat().st_size > 0  # nvcc really built it there

    assert list(r.skipped) == ["check"]  # gpus = 0: no engine check, and the deploy said so

    # the release as a source (no .git; its build wrote compile_commands.json into it, as a
    # deploy's test step that runs this test deploys from its release): what it sends on is
    # exactly the tree it was made from, and that release verifies
    release = rdir / "releases" / r.release
    assert (release / "compile_commands.json").is_file() and "compile_commands.json" not in manifest["files"]
    again = dataclasses.replace(host, dir=f"~/kd-repo-{uuid.uuid4().hex[:8]}")
    onward = run_deploy(again, release, tmp_path / "results-onward", build=False, test=False)
    assert onward.ok, onward.error
    assert verify_release(remote_dir(sshd, again), onward.release)["files"] == manifest["files"]

    out = results / "sshd-test"
    suite = ET.parse(out / "junit.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    assert int(suite.get("tests")) > 0 and suite.get("failures") == "0" and suite.get("errors") == "0"
    assert f"LINK bin/{BUILD_TARGET}" in (out / "logs" / "build.log").read_text()
    assert " passed" in (out / "logs" / "test.log").read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
def test_deploy_rehearses_an_rtx_pro_6000_host_on_the_emulated_engine(sshd, tmp_path):
    """ct200's deploy, rehearsed on a host with no GPU: profile = "rtx-pro-6000" makes the build,
    test and check steps take that device's limits; the engine check runs the emulated engine
    (DDTree == AR on the demo pair under the sm_120 plans) and passes."""
    host = HostConfig(
        name="rehearsal", ssh=ALIAS, ssh_config=str(sshd.ssh_config), dir=f"~/kd-rehearsal-{uuid.uuid4().hex[:8]}",
        python=sys.executable, venv=False, arch=("120",), gpus=0, profile="rtx-pro-6000", nvcc=shutil.which("nvcc"),
        connect_timeout=5, source="tests/remote",
        build=("{python}", "-m", "kdtree_cli", "build", "engine_emu", "--build-dir", "{release}/build"),
        test=("{python}", "-m", "kdtree_cli", "test", "--", "tests/foundation/test_device_profiles.py", "-q",
              "-p", "no:cacheprovider", "--junitxml={results}/junit.xml"),
    )
    results = tmp_path / "results"
    r = run_deploy(host, REPO, results)
    assert r.ok, r.error + "\n" + "\n".join(t for *_x, t, _e in r.reporter.lines[-30:])
    assert [s.name for s in r.steps if s.ok][-3:] == ["build", "test", "check"] and r.skipped == {}
    check = json.loads((results / "rehearsal" / "engine-check.json").read_text())
    assert check["failed"] == 0 and check["passed"] > 0
    assert (check["variant"], check["profile"]) == ("emu", "rtx-pro-6000")
    assert "engine-check (the emulated engine under the rtx-pro-6000 profile)" in \
        (results / "rehearsal" / "logs" / "check.log").read_text()
