"""The committed synthetic files are what make_events.py writes, and every line of every
recorded file (synthetic or from an engine) is a valid event."""

from __future__ import annotations

import make_events
from tui_helpers import each_event_file

from python_engine.events import iter_events


def test_synthetic_files_are_reproducible(tmp_path):
    for path in make_events.write_all(tmp_path):
        committed = make_events.DATA / path.name
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed} differs from make_events.py's output: rerun "
            "python tests/tui/make_events.py")


@each_event_file
def test_recorded_files_hold_only_valid_events(event_file):
    bad = [p.warning for p in iter_events(event_file.read_text().splitlines()) if p.event is None]
    assert not bad, bad[:5]
    kinds = {p.event["event"] for p in iter_events(event_file.read_text().splitlines())}
    assert "round" in kinds
