"""tools/tui_capture.py, the headless `kdtree tui` that scripts/gpu_deploy_selftest.sh uses
where no terminal exists: two screenshots (mid-run and end) of a replayed run, whose JSON
summaries agree with the oracle's totals, and an exit status that says whether the run
ended."""

from __future__ import annotations

import json

from tui_helpers import SNAPSHOT_FILE
from tui_oracle import expected

from tools.tui_capture import main


def test_two_screenshots_of_a_replayed_run(tmp_path, capsys):
    assert main(["--replay", str(SNAPSHOT_FILE), "--out", str(tmp_path), "--at-rounds", "40",
                 "--size", "120x40"]) == 0
    svgs = sorted(tmp_path.glob("*.svg"))
    summaries = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]
    assert len(svgs) == 2 and all(p.read_text().startswith("<svg") for p in svgs)
    exp = expected(SNAPSHOT_FILE)
    assert 40 <= summaries[0]["rounds"] <= len(exp.rounds)
    assert summaries[1]["rounds"] == len(exp.rounds) and summaries[1]["source_state"] == "ended"
    assert "source ended" in capsys.readouterr().out


def test_a_run_that_does_not_end_is_a_failure(tmp_path):
    half = tmp_path / "half.jsonl"
    lines = SNAPSHOT_FILE.read_text().splitlines(keepends=True)
    half.write_text("".join(lines[: len(lines) // 2]))  # no run_end
    assert main(["--replay", str(half), "--out", str(tmp_path / "shots"), "--at-rounds", "5"]) == 1
