"""The deploy's third step, `check`: on a GPU host, after the native tests, the native
engine's smoke check (`kdtree engine-check`: DDTree == AR on the demo pair) runs when the
deployed tree has it (kdtree_cli/commands/engine_check.py); a tree without it says the
step was skipped. A host may name its own check, or `check = []` to turn it off."""

from __future__ import annotations

import json

from conftest import current_name, remote_dir, run_deploy


def step_lines(result, step: str) -> list[str]:
    return [t for (_h, s, t, _e) in result.reporter.lines if s == step]


def gpu_host(host_factory, **overrides):
    # gpus > 0: the default test step is `kdtree test --native` (the stand-in kdtree echoes it)
    return host_factory(gpus=1, build=None, test=None, **overrides)


def test_a_tree_without_the_engine_check_skips_it_and_says_so(sshd, host_factory, project, tmp_path):
    r = run_deploy(gpu_host(host_factory), project, tmp_path / "results", build=False)
    assert r.ok, r.error
    assert [s.name for s in r.steps] == ["env", "test"]
    assert json.loads(step_lines(r, "test")[0])["argv"] == ["test", "--native", "--arch", "120"]
    assert "engine_check.py" in r.skipped["check"] and list(r.skipped) == ["build", "check"]
    assert any("skipped: " in n and "check (this tree has no kdtree_cli/commands/engine_check.py" in n
               for _h, n in r.reporter.notes)


def test_a_tree_with_the_engine_check_runs_it_after_the_tests(sshd, host_factory, project, tmp_path):
    (project / "kdtree_cli" / "commands").mkdir()
    (project / "kdtree_cli" / "commands" / "engine_check.py").write_text('"""kdtree engine-check"""\n')
    r = run_deploy(gpu_host(host_factory), project, tmp_path / "results", build=False)
    assert r.ok, r.error
    assert [s.name for s in r.steps] == ["env", "test", "check"]
    assert json.loads(step_lines(r, "check")[0])["argv"] == ["engine-check"]
    logs = tmp_path / "results" / "sshd-test" / "logs"
    assert json.loads((logs / "check.log").read_text())["argv"] == ["engine-check"]


def test_a_failing_check_keeps_the_previous_release_current(sshd, host_factory, project, tmp_path):
    host = gpu_host(host_factory)
    good = run_deploy(host, project, tmp_path / "results", build=False)
    assert good.ok, good.error
    failing = gpu_host(host_factory, dir=host.dir, check=("{python}", "-m", "kdtree_cli", "fail", "6"))
    (project / "app" / "version.txt").write_text("v2\n")
    bad = run_deploy(failing, project, tmp_path / "results", build=False)
    assert not bad.ok and "check failed (exit 6)" in bad.error
    assert current_name(remote_dir(sshd, failing)) == good.release


def test_check_can_be_switched_off(sshd, host_factory, project, tmp_path):
    (project / "kdtree_cli" / "commands").mkdir()
    (project / "kdtree_cli" / "commands" / "engine_check.py").write_text("")
    r = run_deploy(gpu_host(host_factory, check=()), project, tmp_path / "results", build=False)
    assert r.ok, r.error
    assert [s.name for s in r.steps] == ["env", "test"]
    assert r.skipped["check"] == "check = [] for this host"
