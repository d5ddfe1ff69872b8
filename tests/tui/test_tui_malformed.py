"""Malformed lines are counted, logged with their line numbers and skipped; they never
change the figures and never stop the monitor."""

from __future__ import annotations

import json
import random
import re

from tui_helpers import SNAPSHOT_FILE, panel_text, run, run_to_end, screen_text
from tui_oracle import expected

from kdtree_cli.tui.app import make_app
from kdtree_cli.tui.sources.file_replay import ReplaySource


def junk_lines(rng: random.Random, a_round: dict) -> list[bytes]:
    """Lines that break the contract in different ways (each must be skipped)."""
    zero = dict(a_round, accept_len=0)
    no_verify = dict(a_round, times_us={k: v for k, v in a_round["times_us"].items() if k != "verify"})
    cut = json.dumps(a_round)
    return [
        b"this is not json",
        cut[: rng.randrange(5, len(cut) - 1)].encode(),  # a line cut short
        b"[1, 2, 3]",
        b'{"t": 3.0}',
        b'{"event": "round", "t": 2.0, "request": 0}',
        json.dumps(zero).encode(),
        json.dumps(no_verify).encode(),
        b"\x00\x01 binary \xff\xfe garbage",
        b'{"event": "run_end", "t": "late"}',
        b'{"event": "run_start", "t": 0.5, "engine": "torch"}',
        b'{"event": "error", "t": 1.0}',
    ]


def test_malformed_lines_are_counted_and_skipped(tmp_path, seed):
    rng = random.Random(seed)
    clean = SNAPSHOT_FILE.read_bytes().splitlines()
    a_round = json.loads(clean[1])
    kinds = junk_lines(rng, a_round)
    junk = [rng.choice(kinds) for _ in range(rng.randrange(15, 40))]
    lines = list(clean)
    for bad in junk:
        lines.insert(rng.randrange(1, len(lines) + 1), bad)
    for _ in range(5):
        lines.insert(rng.randrange(1, len(lines)), b"   ")  # blank lines are not malformed
    path = tmp_path / "corrupted.jsonl"
    tail = b'{"event": "round", "t": 99.0, "request"'  # the writer died mid-line
    path.write_bytes(b"\n".join(lines) + b"\n" + tail)
    junk_linenos = [i + 1 for i, ln in enumerate(lines) if ln in set(kinds)] + [len(lines) + 1]
    exp = expected(SNAPSHOT_FILE)

    async def scenario():
        app = make_app(ReplaySource(path, speed=0))
        async with app.run_test(size=(150, 50)) as pilot:
            await run_to_end(app, pilot)
            screen = screen_text(app)
            assert f"{len(junk) + 1} malformed" in screen, screen
            assert f"{exp.events_in_stream} events" in screen
            # the figures are those of the clean file
            assert f"τ {exp.tau:.2f}  last 100: {exp.tau_rolling:.2f}" in panel_text(app, "#acceptance")
            lo, hi = exp.tps_min_max
            assert f"now {exp.tps_now:.1f}  min {lo:.1f}  max {hi:.1f}" in panel_text(app, "#throughput")
            # each skipped line is logged with its number and a reason
            logged = [int(m) for e in app.stats.log
                      for m in re.findall(r"^skipped line (\d+): \S", e.text)]
            assert logged == junk_linenos
            assert app.stats.malformed == len(junk) + 1

    run(scenario())
