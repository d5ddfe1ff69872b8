"""What a deploy says before it does it, and what it starts from: which steps run on a host
and which are skipped and why (a host without GPUs builds the emulated engine only and has
no engine check), what the environment step will install and its size (said by
`kdtree deploy --dry-run`, `kdtree hosts` and the step itself, which is timed), and that a
failed deploy's release is the next one's base."""

from __future__ import annotations

import json

from remote.pyenv import human_bytes
from remote.probe import check_host

from conftest import current_name, remote_dir, run_deploy, write_version
from test_remote_env import make_wheel

ENGINE_CHECK = ("kdtree_cli", "commands", "engine_check.py")


def step_argv(result, step: str) -> list[str]:
    """The stand-in kdtree prints its argv as JSON: what the step ran."""
    (line,) = [t for (_h, s, t, _e) in result.reporter.lines if s == step]
    return json.loads(line)["argv"]


def notes(result) -> list[str]:
    return [n for _h, n in result.reporter.notes]


def test_a_gpu_less_host_builds_what_it_can_run_and_says_what_it_skips(sshd, host_factory, project, tmp_path):
    project.joinpath(*ENGINE_CHECK[:-1]).mkdir()
    project.joinpath(*ENGINE_CHECK).write_text('"""kdtree engine-check"""\n')  # the tree has the check
    no_gpu = host_factory(gpus=0, build=None, test=None)
    r = run_deploy(no_gpu, project, tmp_path / "results")
    assert r.ok, r.error
    assert step_argv(r, "build") == ["build", "engine_emu", "emu_tests"]  # no sm_90a / sm_120 code
    assert step_argv(r, "test") == ["test"]  # the Python suite
    assert [s.name for s in r.steps] == ["env", "build", "test"] and all(s.ok for s in r.steps)
    assert list(r.skipped) == ["check"] and "no GPU, as gpus = 0" in r.skipped["check"]
    # said up front, before any step's output, and kept in the summary
    plan = next(n for n in notes(r) if n.startswith("steps: "))
    assert "build (engine_emu emu_tests only, as gpus = 0" in plan and "skipped: check (no GPU" in plan
    first_output = r.reporter.notes.index(next(x for x in r.reporter.notes if x[1].startswith("build: ")))
    assert r.reporter.notes.index(("sshd-test", plan)) < first_output
    summary = json.loads((tmp_path / "results" / "sshd-test" / "deploy.json").read_text())
    assert summary["skipped"] == r.skipped

    # the same tree on a host with a GPU: the arch's build, the native tests, the check
    gpu = host_factory(gpus=1, build=None, test=None)
    g = run_deploy(gpu, project, tmp_path / "results-gpu")
    assert g.ok, g.error
    assert step_argv(g, "build") == ["build", "--arch", "120"]
    assert step_argv(g, "test") == ["test", "--native", "--arch", "120"]
    assert step_argv(g, "check") == ["engine-check"] and g.skipped == {}

    # asked for: a host's own build command builds what it says, even without a GPU
    asked = host_factory(gpus=0, build=("{python}", "-m", "kdtree_cli", "build", "--arch", "{arch}"), test=None)
    a = run_deploy(asked, project, tmp_path / "results-asked", test=False)
    assert a.ok, a.error
    assert step_argv(a, "build") == ["build", "--arch", "120"]
    assert a.skipped == {"test": "--no-test", "check": "--no-test"}


def test_a_failed_deploy_is_the_next_ones_base(sshd, host_factory, project, tmp_path, rng):
    """Its files and its build/ are the closest to what comes next, though it never became
    current: the next deploy sends only what changed since it, and builds on its build/."""
    host = host_factory(carry=("build",), build=(
        "sh", "-c", 'mkdir -p build; if [ -e build/made-in ]; then echo "on $(cat build/made-in)"; '
                    'else echo fresh; fi; echo "$KDTREE_RELEASE" > build/made-in'))
    results = tmp_path / "results"
    good = run_deploy(host, project, results)
    assert good.ok, good.error
    write_version(project, "broken-without-newline", rng)  # a new blob, and the tiny test fails
    (project / "app" / "version.txt").write_text("broken")
    bad = run_deploy(host, project, results)
    assert not bad.ok and "test failed" in bad.error and bad.base == good.release
    rdir = remote_dir(sshd, host)
    assert current_name(rdir) == good.release

    dry = run_deploy(host, project, results, dry_run=True)
    assert dry.ok, dry.error
    assert dry.base == bad.release and dry.previous == good.release
    assert dry.plan["upload"] == []  # everything is in the failed release already
    assert any(f"reuse {dry.plan['unchanged']} from {bad.release} (the newest release; current is "
               f"{good.release})" in n for n in notes(dry))

    (project / "app" / "version.txt").write_text("v3\n")  # fixed: one file differs from the failed release
    fixed = run_deploy(host, project, results)
    assert fixed.ok, fixed.error
    assert fixed.base == bad.release and fixed.uploaded == 1
    bad_release = str(rdir / "releases" / bad.release)
    assert [t for (_h, s, t, _e) in fixed.reporter.lines if s == "build"] == [f"on {bad_release}"]
    assert current_name(rdir) == fixed.release


def test_the_env_step_says_what_it_installs_first_and_is_timed(sshd, host_factory, project, tmp_path, seed):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = make_wheel(wheels, "kdtree_probe_pkg", "0.1", f"VALUE = {seed % 1000}\n")
    size = human_bytes(wheel.stat().st_size)
    # the host's env reaches pip: here it finds the package in a local folder, no index
    host = host_factory(venv=True, requirements=("kdtree_probe_pkg==0.1",), build=None,
                        test=("{python}", "-c", "import kdtree_probe_pkg as m; print(m.VALUE)"),
                        env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)})

    dry = run_deploy(host, project, tmp_path / "results", dry_run=True, build=False)
    assert dry.ok, dry.error
    assert f"pip installs 1 package(s), {size} to download: kdtree_probe_pkg 0.1 ({size})" in dry.plan["env"]
    assert dry.plan["env_download_bytes"] == wheel.stat().st_size
    assert any(n.startswith("would set up the environment: new ") for n in notes(dry))
    check = check_host(host, project_root=project)
    assert check.env == f"{size}, 1 pkg(s)" and check.env_plan == dry.plan["env"]

    r = run_deploy(host, project, tmp_path / "results", build=False)
    assert r.ok, r.error
    said = [i for i, n in enumerate(notes(r)) if "pip installs 1 package(s)" in n and "kdtree_probe_pkg 0.1" in n]
    installing = [i for i, n in enumerate(notes(r)) if n.startswith("environment: installing")]
    assert said and installing and said[0] < installing[0]
    (env,) = [s for s in r.steps if s.name == "env"]
    assert env.ok and env.seconds > 0 and any(n.startswith("env: ok (") for n in notes(r))
    assert [t for (_h, s, t, _e) in r.reporter.lines if s == "test"] == [str(seed % 1000)]

    again = check_host(host, project_root=project)
    assert again.env == "up to date" and "nothing to install" in again.env_plan


def test_a_gpu_less_host_with_a_profile_rehearses_the_engine_check_emulated(sshd, host_factory, project, tmp_path):
    """gpus = 0 and profile = "rtx-pro-6000": the check runs `kdtree engine-check --emulated`, every
    step under KDTREE_DEVICE_PROFILE, and the plan says why."""
    project.joinpath(*ENGINE_CHECK[:-1]).mkdir(exist_ok=True)
    project.joinpath(*ENGINE_CHECK).write_text('"""kdtree engine-check"""\n')
    host = host_factory(gpus=0, build=None, test=None, profile="rtx-pro-6000")
    r = run_deploy(host, project, tmp_path / "results")
    assert r.ok, r.error
    assert step_argv(r, "check") == ["engine-check", "--emulated"] and r.skipped == {}
    for step in ("build", "test", "check"):
        (line,) = [t for (_h, s, t, _e) in r.reporter.lines if s == step]
        assert json.loads(line)["env"]["KDTREE_DEVICE_PROFILE"] == "rtx-pro-6000", step
    plan = next(n for n in notes(r) if n.startswith("steps: "))
    assert "engine-check --emulated, as gpus = 0 with profile rtx-pro-6000" in plan

