"""`kdtree run --tui/--host` forwards the rest of its arguments unchanged to the child run."""

from __future__ import annotations

from kdtree_cli.commands.run import forwarded_args


def test_forwarded_args_drop_only_tui_and_host():
    argv = ["kdtree", "run", "--model", "m dir", "--host", "ct200", "--tui", "--prompt", "a --tui b",
            "--host=other", "--budget", "64"]
    assert forwarded_args(argv) == ["--model", "m dir", "--prompt", "a --tui b", "--budget", "64"]
