"""--host on `kdtree run`, `kdtree bench kernels`, `kdtree bench all` and `kdtree test`: one
helper (kdtree_cli/host_forwarding.py) rebuilds the command for the host. The oracle is click:
the remote command line, parsed by the same command, holds the values the local one was given,
except the options that only mean something here (--host, local output folders), which are left
to their defaults."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from kdtree_cli.app import app


def run_remotely(monkeypatch, argv: list[str]) -> tuple[str, list[str]]:
    """The (host, arguments) the command hands to remote.exec.run_kdtree."""
    seen = []
    monkeypatch.setattr("remote.exec.run_kdtree", lambda host, args, **kw: seen.append((host, args)) or 0)
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    [call] = seen
    return call


def parse(argv: list[str], defaults_only: bool = False) -> tuple[list[str], dict]:
    """(subcommand names, parameter values) as the kdtree command line parses `argv`, nothing
    run; defaults_only: the values of a bare command, required options unchecked."""
    cmd, words, names = typer.main.get_command(app), list(argv), []
    while hasattr(cmd, "commands"):
        names.append(words.pop(0))
        cmd = cmd.commands[names[-1]]
    return names, cmd.make_context(names[-1], words, resilient_parsing=defaults_only).params


def check_forwarded(monkeypatch, argv: list[str], stays_local: set[str]) -> list[str]:
    host, remote_argv = run_remotely(monkeypatch, argv)
    names, local = parse(argv)
    remote_names, remote = parse(remote_argv)
    _, defaults = parse(names, defaults_only=True)
    assert host == local["host"] and remote_names == names
    for name, value in local.items():
        expected = defaults[name] if name in stays_local | {"host"} else value
        assert remote[name] == expected, f"{' '.join(names)}: {name} {remote[name]!r} != {expected!r}"
    return remote_argv


def test_bench_kernels_forwards_what_it_was_given(monkeypatch, rng, tmp_path):
    suites = ",".join(rng.choice(["ceilings", "attn", "topk", "tree", "accept"], size=2, replace=False))
    argv = ["bench", "kernels", "--suite", suites, "--out", str(tmp_path), "--host", f"box{rng.integers(100)}",
            "--arch", f"sm_{rng.integers(80, 130)}"] + (["--quick"] if rng.random() < 0.5 else [])
    check_forwarded(monkeypatch, argv, stays_local={"out"})


def test_bench_all_forwards_what_it_was_given(monkeypatch, rng, tmp_path):
    argv = ["bench", "all", "--host", "box", "--out", str(tmp_path), "--budget-s", f"{rng.uniform(10, 900):.3f}",
            "--seed", str(rng.integers(1 << 31))]
    check_forwarded(monkeypatch, argv, stays_local={"out"})


@pytest.mark.parametrize("flags", [["--native", "--sanitize", "memcheck", "--large"], ["--all", "--profile", "debug"]])
def test_test_forwards_its_options_and_the_pytest_arguments(monkeypatch, rng, tmp_path, flags):
    pytest_args = ["-k", f"tree and not case{rng.integers(1000)}", "-x"]
    argv = ["test", *flags, "--host", "box", "--seed", str(rng.integers(1 << 31)), "--jobs", str(rng.integers(1, 9)),
            "--log-dir", str(tmp_path), "--", *pytest_args]
    if "--all" in flags:  # --log-dir goes with --native
        argv.remove("--log-dir"), argv.remove(str(tmp_path))
    remote_argv = check_forwarded(monkeypatch, argv, stays_local={"log_dir"})
    assert remote_argv[remote_argv.index("--") + 1:] == pytest_args


def test_run_forwards_what_it_was_given(monkeypatch, rng):
    argv = ["run", "--model", "m dir", "--prompt", "a --host b", "--prompt", "second", "--host", "box",
            "--budget", str(rng.integers(1, 257)), "--temperature", f"{rng.uniform(0, 2):.4f}", "--ar"]
    check_forwarded(monkeypatch, argv, stays_local=set())
