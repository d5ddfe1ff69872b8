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
