"""SVG snapshots of the main layouts (pytest-textual-snapshot). The events are fed
synchronously (no source thread) and nothing on screen reads a clock, so the pictures are
deterministic; the app's wall clock (used only for snapshot file names) is pinned anyway.

After an intended change of the look: pytest tests/tui/test_tui_snapshots.py --snapshot-update,
then look at the new SVGs under tests/tui/__snapshots__/ before committing them.
"""

from __future__ import annotations

import pytest
import textual
from tui_helpers import SNAPSHOT_FILE

from kdtree_cli.tui.app import make_app
from kdtree_cli.tui.messages import SourceState
from kdtree_cli.tui.sources.base import EventSource

LINES = SNAPSHOT_FILE.read_text().splitlines()
RECORDED_WITH = "8.2.8"  # textual's version when the SVGs were recorded: its drawing is in them

pytestmark = pytest.mark.skipif(
    textual.__version__ != RECORDED_WITH,
    reason=f"snapshots recorded with textual {RECORDED_WITH}, this is {textual.__version__}: "
    "check the look, then rerun with --snapshot-update and bump RECORDED_WITH",
)


class RecordedRun(EventSource):
    """Stands in for a replay in the labels; the test feeds the events itself."""

    kind = "replay"

    def describe(self) -> str:
        return f"replay {SNAPSHOT_FILE.name} (x1)"

    def produce(self) -> None:
        pass

    def start(self, post) -> None:
        pass


def loaded_app(n_lines: int | None = None):
    app = make_app(RecordedRun(), clock=lambda: 0.0)
    lines = LINES if n_lines is None else LINES[:n_lines]
    ended = n_lines is None

    async def feed(pilot) -> None:
        app.ingest_lines(lines)
        app.source_state = SourceState.ENDED if ended else SourceState.STREAMING
        app.source_detail = f"end of {SNAPSHOT_FILE.name}" if ended else ""
        app.redraw()
        await pilot.pause()

    return app, feed


def test_wide_finished_run(snap_compare):
    app, feed = loaded_app()
    assert snap_compare(app, terminal_size=(150, 45), run_before=feed)


def test_wide_mid_run(snap_compare):
    app, feed = loaded_app(300)
    assert snap_compare(app, terminal_size=(150, 45), run_before=feed)


def test_compact_80x24_mid_run(snap_compare):
    app, feed = loaded_app(300)
    assert snap_compare(app, terminal_size=(80, 24), run_before=feed)


def test_compact_80x24_finished_run(snap_compare):
    app, feed = loaded_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=feed)


def test_help_screen_80x24(snap_compare):
    app, feed = loaded_app(300)
    assert snap_compare(app, terminal_size=(80, 24), run_before=feed, press=["question_mark"])
