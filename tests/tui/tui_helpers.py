"""Helpers for the TUI tests: the recorded event files, what the app shows (the whole
screen as text, or one panel), and waiting for a source to finish.

Every *.jsonl under tests/tui/data/ is a recorded run; tests marked `each_event_file` run
on each, so a file recorded from an engine is picked up by dropping it there. (Not a
conftest.py: other test folders import helpers from their conftest by module name, and a
second module called `conftest` would shadow theirs.)
"""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import pytest

from kdtree_cli.tui.messages import SourceState

DATA_DIR = Path(__file__).resolve().parent / "data"
DATA_FILES = sorted(DATA_DIR.glob("*.jsonl"))
SNAPSHOT_FILE = DATA_DIR / "synthetic_tree_gpus.jsonl"  # fixed: snapshots need fixed input
FINAL_STATES = (SourceState.ENDED, SourceState.DROPPED, SourceState.FAILED)


# decorate a test taking `event_file` to run it on every recorded file
each_event_file = pytest.mark.parametrize("event_file", DATA_FILES, ids=[p.name for p in DATA_FILES])


def screen_text(app) -> str:
    """The screen as plain text, as a terminal would show it (incl. hidden = absent)."""
    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      force_terminal=True, color_system=None, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


def panel_text(app, selector: str) -> str:
    """One panel's content as plain text, drawn at its size on screen."""
    return app.query_one(selector).render().plain


async def wait_for(pilot, condition, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.02)


async def run_to_end(app, pilot, timeout: float = 20.0) -> None:
    """Wait until the app's source is done, then let the last redraw land."""
    await wait_for(pilot, lambda: app.source_state in FINAL_STATES, timeout, "the source to end")
    app.redraw()
    await pilot.pause()


def run(coro):
    return asyncio.run(coro)
