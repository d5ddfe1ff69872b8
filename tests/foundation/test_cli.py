"""The command line as a user meets it: help, unknown commands, bad options, refs --check."""

from __future__ import annotations

import shutil
import subprocess
import sys

from typer.testing import CliRunner

from kdtree_cli.app import COMMAND_MODULES, app
from python_engine.refgen.sync import DEFAULT_REFS_DIR

runner = CliRunner()


def kdtree(*args: str) -> subprocess.CompletedProcess:
    """Run the real entry point in a subprocess (exit codes and stderr as a user sees them)."""
    return subprocess.run([sys.executable, "-m", "kdtree_cli", *args],
                          capture_output=True, text=True, timeout=300)


def test_help_lists_every_command_with_a_line():
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    for name in COMMAND_MODULES:
        name = name.replace("_", "-")
        line = next((l for l in result.output.splitlines() if f" {name} " in l), None)
        assert line is not None, f"{name} missing from --help"
        assert len(line.split(name, 1)[1].strip(" │")) > 5, f"{name} has no help line"


def test_unknown_command_and_bad_option_fail_clearly():
    proc = kdtree("frobnicate")
    assert proc.returncode == 2 and "No such command" in proc.stderr
    proc = kdtree("refs", "--no-such-option")
    assert proc.returncode == 2 and "No such option" in proc.stderr


def test_refs_check_passes_on_the_committed_bundles():
    proc = kdtree("refs", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "up to date" in proc.stdout


def test_refs_check_fails_on_a_changed_bundle(tmp_path):
    work = tmp_path / "refs"
    shutil.copytree(DEFAULT_REFS_DIR, work)
    target = work / "tree_accept.kdtr"
    blob = bytearray(target.read_bytes())
    blob[-1] ^= 0xFF
    target.write_bytes(bytes(blob))
    proc = kdtree("refs", "--check", "--only", "ddtree", "--refs-dir", str(work))
    assert proc.returncode == 1
    assert "would change" in proc.stdout and "tree_accept.kdtr" in proc.stdout
    assert "error:" in proc.stderr
    # regenerating repairs it
    assert kdtree("refs", "--only", "ddtree", "--refs-dir", str(work)).returncode == 0
    assert target.read_bytes() == (DEFAULT_REFS_DIR / "tree_accept.kdtr").read_bytes()


def test_refs_unknown_generator():
    proc = kdtree("refs", "--only", "nope")
    assert proc.returncode == 1 and "unknown generator" in proc.stderr


def test_native_tests_refuse_pytest_arguments_instead_of_dropping_them(monkeypatch):
    """`kdtree test --native -- -k x` ran the native programs and ignored `-k x`."""
    import kdtree_cli.commands.test as test_command

    ran = []
    monkeypatch.setattr(test_command, "run_native", lambda *a: ran.append(a))
    result = runner.invoke(app, ["test", "--native", "--", "-k", "tree"])
    assert result.exit_code != 0 and ran == []
    assert "-k tree" in result.output and "--all" in result.output
    assert runner.invoke(app, ["test", "--native"]).exit_code == 0 and len(ran) == 1


def test_pytest_runs_spread_over_the_cores_unless_told_otherwise(monkeypatch):
    """`kdtree test` (CI's command) runs pytest-xdist on the cores it may use; -j 1, or -n
    given to pytest, leaves the choice to the user."""
    import kdtree_cli.commands.test as test_command

    calls = []
    monkeypatch.setattr(test_command.subprocess, "call", lambda cmd, cwd: calls.append(cmd) or 0)
    monkeypatch.setattr(test_command.os, "sched_getaffinity", lambda pid: set(range(3)))
    assert runner.invoke(app, ["test", "--", "-k", "tree"]).exit_code == 0
    assert calls[-1][3:] == ["-n", "3", "-k", "tree"]
    monkeypatch.setattr(test_command.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert runner.invoke(app, ["test"]).exit_code == 0
    assert calls[-1][3:] == ["-n", str(test_command.MAX_DEFAULT_JOBS)]
    assert runner.invoke(app, ["test", "-j", "1", "--", "-x"]).exit_code == 0
    assert calls[-1][3:] == ["-x"]
    for own in (["-n", "4"], ["-n4"], ["--numprocesses=4"], ["-p", "no:xdist"]):
        assert runner.invoke(app, ["test", "--", *own]).exit_code == 0
        assert calls[-1][3:] == own
    assert runner.invoke(app, ["test", "-j", "0"]).exit_code != 0


def test_help_paragraphs_render_as_whole_sentences():
    """typer's rich mode keeps a line break inside a help paragraph after the first, so a
    docstring wrapped in the source breaks mid-sentence on the screen; each such paragraph
    must be one line in the source, for every command and subcommand."""
    import inspect

    import typer

    def commands(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from commands(sub, f"{path} {name}")

    broken = {}
    for path, command in commands(typer.main.get_command(app), "kdtree"):
        later = inspect.cleandoc(command.help or "").partition("\f")[0].split("\n\n")[1:]
        broken.update({path: p for p in later if "\n" in p.strip()})
    assert not broken, f"help paragraphs broken across lines: {broken}"
    result = runner.invoke(app, ["demo", "--help"], env={"COLUMNS": "400"})
    assert "the command says so and exits with status 1." in result.output


def test_seed_sweep_goes_to_pytest_and_not_with_native_alone(monkeypatch):
    import kdtree_cli.commands.test as test_command

    calls = []
    monkeypatch.setattr(test_command.subprocess, "call", lambda cmd, cwd: calls.append(cmd) or 0)
    assert runner.invoke(app, ["test", "-j", "1", "--seed-sweep", "7", "--", "tests/model"]).exit_code == 0
    assert calls[-1][3:] == ["--seed-sweep", "7", "tests/model"]
    result = runner.invoke(app, ["test", "--native", "--seed-sweep", "7"])
    assert result.exit_code != 0 and calls[-1][3:] == ["--seed-sweep", "7", "tests/model"]
    assert "--seed-sweep" in str(result.exception)
