"""`kdtree run --tui/--host` forwards the rest of its arguments unchanged to the child run,
built from what the command line parser understood (never by re-reading sys.argv, which
holds something else when kdtree is called from Python)."""

from __future__ import annotations

from typer.testing import CliRunner

import kdtree_cli.commands.run as run_command
from kdtree_cli.app import app


def forwarded(monkeypatch, *args: str):
    seen = {}
    monkeypatch.setattr(run_command, "_delegate",
                        lambda forwarded, *, tui, host: seen.update(args=forwarded, tui=tui, host=host))
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 0, result.output
    return seen


def test_forwarded_args_drop_only_tui_and_host(monkeypatch):
    seen = forwarded(monkeypatch, "--model", "m dir", "--host", "ct200", "--tui", "--prompt", "a --tui b",
                     "--budget", "64", "--prompt", "second", "--ar", "--temperature", "0.5")
    assert (seen["tui"], seen["host"]) == (True, "ct200")
    assert seen["args"] == ["--model", "m dir", "--prompt", "a --tui b", "--prompt", "second",
                            "--budget", "64", "--temperature", "0.5", "--ar"]


def test_forwarded_args_parse_back_to_the_same_values(monkeypatch):
    """What the child gets means the same to the child's parser (the oracle: click)."""
    seen = forwarded(monkeypatch, "--model=m", "--drafter", "d", "--prompt-ids", "1,2,3", "--host=box",
                     "--max-tokens", "7", "--ignore-eos", "--device", "cpu", "--metrics", "-")
    parsed = {}
    monkeypatch.setattr(run_command, "_delegate", lambda *a, **k: None)
    monkeypatch.setattr("python_engine.run.run_command",
                        lambda req, **kw: parsed.update(vars(req)))
    result = CliRunner().invoke(app, ["run", *seen["args"]])
    assert result.exit_code == 0, result.output
    assert (str(parsed["model"]), str(parsed["drafter"]), parsed["prompt_ids"], parsed["max_tokens"],
            parsed["ignore_eos"], parsed["device"], parsed["metrics"]) == \
        ("m", "d", ["1,2,3"], 7, True, "cpu", "-")
