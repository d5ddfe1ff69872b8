"""`kdtree tui`: one source, the right arguments for each, errors a person can act on."""

from __future__ import annotations

import pytest
import typer
from tui_helpers import SNAPSHOT_FILE
from typer.testing import CliRunner

from kdtree_cli.commands import tui as tui_command
from kdtree_cli.tui import launch
from kdtree_cli.tui.sources.file_follow import FollowSource
from kdtree_cli.tui.sources.file_replay import ReplaySource
from kdtree_cli.tui.sources.local_run import LocalRunSource
from kdtree_cli.tui.sources.ssh_host import HostSource
from kdtree_cli.tui.stats import RunStats
from python_engine.errors import KdtreeError


@pytest.fixture
def cli(monkeypatch):
    """The command on its own typer app, with the app run replaced by a recorder."""
    app = typer.Typer()
    tui_command.register(app)

    @app.command("other")
    def other() -> None:  # a second command keeps `tui` a subcommand
        pass

    seen = {}

    def fake_run_monitor(source, **options):
        seen.update(source=source, **options)
        return RunStats()

    monkeypatch.setattr(launch, "run_monitor", fake_run_monitor)

    def invoke(*args):
        result = CliRunner().invoke(app, ["tui", *args])
        return result, seen

    return invoke


def test_replay_follow_run_and_host_build_their_sources(cli, tmp_path):
    result, seen = cli("--replay", str(SNAPSHOT_FILE), "--speed", "4", "--interval", "0.05")
    assert result.exit_code == 0, result.output
    assert isinstance(seen["source"], ReplaySource) and seen["source"].speed == 4.0
    assert seen["interval"] == 0.05 and "rounds" in result.output
    result, seen = cli("--follow", str(tmp_path / "live.jsonl"))
    assert isinstance(seen["source"], FollowSource)
    result, seen = cli("--run", "--window", "20", "--", "--budget", "32", "--prompt", "hi")
    assert result.exit_code == 0, result.output
    src = seen["source"]
    assert isinstance(src, LocalRunSource) and seen["window"] == 20
    assert src.command[-6:] == ["--budget", "32", "--prompt", "hi", "--metrics", "-"]
    result, seen = cli("--host", "ct200", "--", "--budget", "64")
    assert isinstance(seen["source"], HostSource)
    assert (seen["source"].host, seen["source"].args) == ("ct200", ["--budget", "64"])


@pytest.mark.parametrize("args,message", [
    ((), "choose one event source (got none)"),
    (("--replay", "x.jsonl", "--follow", "y.jsonl"), "got --follow and --replay"),
    (("--follow", "y.jsonl", "--speed", "2"), "--speed only applies to --replay"),
    (("--follow", "y.jsonl", "--", "extra"), "only --run and --host take arguments"),
    (("--run",), "--run needs the run's arguments"),
    (("--replay", "missing.jsonl"), "no event file at missing.jsonl"),
])
def test_bad_combinations_say_what_to_do(cli, args, message):
    result, _ = cli(*args)
    assert result.exit_code != 0
    assert isinstance(result.exception, KdtreeError) and message in str(result.exception)


def test_closing_line_reports_the_run():
    from python_engine.events import iter_events

    stats = RunStats()
    for p in iter_events(SNAPSHOT_FILE.read_text().splitlines()):
        stats.ingest(p)
    line = launch.closing_line(stats)
    assert f"tau {stats.tau:.2f}" in line and "run_end: 1500 tokens" in line
