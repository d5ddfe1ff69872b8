"""The commands: `kdtree deploy`, `kdtree hosts`, `kdtree test --host`, run in a tmp copy
of a project whose kdtree.toml points at the test sshd (results land in its results/)."""

from __future__ import annotations

import json
import sys
import uuid

import pytest
from typer.testing import CliRunner

from kdtree_cli.app import app

from kdtree_sshd import ALIAS


def toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


@pytest.fixture
def cli_project(sshd, project, monkeypatch, tmp_path):
    remote_dir = f"~/kd-cli-{uuid.uuid4().hex[:8]}"
    (project / "kdtree.toml").write_text(
        "[hosts.sshd-test]\n"
        f"ssh = {toml_str(ALIAS)}\n"
        f"ssh_config = {toml_str(str(sshd.ssh_config))}\n"
        f"dir = {toml_str(remote_dir)}\n"
        f"python = {toml_str(sys.executable)}\n"
        "venv = false\narch = [120]\ngpus = 0\ncarry = []\n"
        'build = ["sh", "-c", "echo building for sm_$KDTREE_ARCH"]\n'
        'test = ["{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests_remote", '
        '"--junitxml={results}/junit.xml"]\n'
        "\n[hosts.nowhere]\nhost = \"127.0.0.1\"\nport = 1\nconnect_timeout = 2\n"
        f"known_hosts = {toml_str(str(tmp_path / 'kh'))}\n"
    )
    monkeypatch.chdir(project)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user hosts.toml
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # failed deploys' logs
    monkeypatch.delenv("KDTREE_CONFIG", raising=False)
    return project


def test_deploy_command_streams_and_fills_results(cli_project):
    result = CliRunner().invoke(app, ["deploy", "sshd-test"])
    assert result.exit_code == 0, result.output
    assert "[sshd-test] building for sm_120" in result.output
    assert "[sshd-test] ==> current -> " in result.output
    out = cli_project / "results" / "sshd-test"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "deploy.json", "junit.xml", "logs/build.log", "logs/deploy.log", "logs/env.log", "logs/test.log",
    ]
    assert json.loads((out / "deploy.json").read_text())["ok"] is True
    assert (out / "logs" / "build.log").read_text() == "building for sm_120\n"


def test_deploy_several_hosts_reports_each_failure(cli_project):
    result = CliRunner().invoke(app, ["deploy", "sshd-test", "nowhere", "--no-test"])
    assert result.exit_code == 1
    assert "deploy failed on 1 of 2 host(s)" in result.output
    assert "nowhere (" in result.output and "unreachable" in result.output
    assert (cli_project / "results" / "sshd-test" / "logs" / "build.log").is_file()  # the other one went on


def test_failed_deploy_writes_no_results_folder_and_says_where_its_logs_are(cli_project, tmp_path):
    result = CliRunner().invoke(app, ["deploy", "nowhere"])
    assert result.exit_code == 1
    assert not (cli_project / "results" / "nowhere").exists()
    (kept,) = (tmp_path / "state" / "kdtree" / "deploy").iterdir()
    assert kept.name.startswith("nowhere-") and (kept / "deploy.json").is_file()
    assert str(kept) in result.output.replace("\n", "")


def test_unknown_host_name_lists_the_known_ones(cli_project):
    result = CliRunner().invoke(app, ["deploy", "ct201"])
    assert result.exit_code == 1
    assert "unknown host 'ct201'" in result.output and "nowhere, sshd-test" in result.output


def test_hosts_command(cli_project):
    result = CliRunner().invoke(app, ["hosts", "sshd-test", "--json"])
    assert result.exit_code == 0, result.output
    (check,) = json.loads(result.output)
    assert check["reachable"] and check["ok"] and check["python"].startswith("3.")
    listing = CliRunner().invoke(app, ["hosts", "--no-check", "--json"])
    assert [h["name"] for h in json.loads(listing.output)] == ["sshd-test", "nowhere"]
    bad = CliRunner().invoke(app, ["hosts", "nowhere"])
    assert bad.exit_code == 1 and "unreachable" in bad.output


def test_hosts_shows_an_unconfigured_project_host_as_an_example_not_a_failure(cli_project, sshd, tmp_path, rng):
    """A fresh clone's kdtree.toml names ct200, which this machine cannot resolve: `kdtree
    hosts` says how to configure it and passes; once the user's hosts.toml names it, or it is
    asked for by name, it is a host like any other and its failure counts."""
    name = f"example-{rng.integers(1 << 30)}"
    project_file = tmp_path / "project-hosts.toml"
    project_file.write_text(
        (cli_project / "kdtree.toml").read_text().split("\n[hosts.nowhere]")[0]
        + f"\n[hosts.{name}]\nssh = \"{name}.invalid\"\nssh_config = {toml_str(str(sshd.ssh_config))}\n")
    listing = CliRunner().invoke(app, ["hosts", "--config", str(project_file), "--json"])
    assert listing.exit_code == 0, listing.output
    checks = {c["name"]: c for c in json.loads(listing.output)}
    assert checks["sshd-test"]["ok"] and checks["sshd-test"]["env"] == "host python"
    assert checks[name]["example"] and not checks[name]["ok"] and not checks[name]["reachable"]
    table = CliRunner().invoke(app, ["hosts", "--config", str(project_file)])
    assert table.exit_code == 0, table.output
    said = " ".join(table.output.split())
    assert f"example: {name} is an example host from {project_file}" in said and "problem:" not in said
    assert f"[hosts.{name}] table" in said and "~/.ssh/config" in said

    asked = CliRunner().invoke(app, ["hosts", name, "--config", str(project_file)])
    assert asked.exit_code == 1 and "cannot resolve host name" in asked.output
    user_file = tmp_path / "xdg" / "kdtree" / "hosts.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text(f"[hosts.{name}]\nconnect_timeout = 3\n")  # the user took it on
    configured = CliRunner().invoke(app, ["hosts", "--config", str(project_file)])
    assert configured.exit_code == 1 and "problem:" in configured.output


def test_test_command_with_host_runs_there(cli_project):
    deployed = CliRunner().invoke(app, ["deploy", "sshd-test", "--no-build", "--no-test"])
    assert deployed.exit_code == 0, deployed.output
    result = CliRunner().invoke(app, ["test", "--host", "sshd-test", "--", "-k", "a b"])
    assert result.exit_code == 0, result.output
    line = next(l for l in result.output.splitlines() if l.startswith("[sshd-test] {"))
    assert json.loads(line[len("[sshd-test] "):])["argv"] == ["test", "--", "-k", "a b"]
