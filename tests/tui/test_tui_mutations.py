"""10,000 random mutations of a recorded real run (bytes flipped, fields replaced with
values of other types, huge and non-finite numbers, fields dropped, lines cut): the
monitor survives every line, and its totals equal the independent oracle's, which
recounts the valid lines (all the untouched ones, and mutated ones that stay valid).

All mutations go through the stats model in-process (the figures, exactly), then all of
them again through `kdtree tui --replay` on a pseudo-terminal (the real app: sources,
parser, panels), with its peak memory and time bounded."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

from mutations import mutated_stream
from tui_helpers import DATA_DIR, assert_matches, kdtree_in_pty
from tui_oracle import expected, expected_lines, read_lines

from kdtree_cli.tui.stats import RunStats

REAL_RUN = DATA_DIR / "torch_tiny_random_pair.jsonl"  # recorded from `kdtree run` on the torch engine
MUTATIONS = 10_000
PER_STREAM = 25  # mutated lines per copy of the run (of its 113); the rest stay untouched
MEMORY_LIMIT_MB = 500


def corpus(seed: int) -> list[tuple[list[str], set[int]]]:
    rng = random.Random(seed)
    lines = read_lines(REAL_RUN)
    return [mutated_stream(lines, PER_STREAM, rng) for _ in range(MUTATIONS // PER_STREAM)]


def test_every_mutation_survives_and_the_totals_equal_the_oracle(seed):
    began = time.perf_counter()
    streams = corpus(seed)
    for i, (lines, untouched) in enumerate(streams):
        stats = RunStats()
        stats.ingest_lines(lines)
        exp = expected_lines(lines)
        try:
            assert stats.events >= len(untouched), "every untouched line counts"
            assert_matches(stats, exp)
            stats.summary()
        except AssertionError:
            print(f"stream {i} (of corpus seed {seed}):\n" + "\n".join(lines))
            raise
    assert time.perf_counter() - began < 120


def test_kdtree_tui_replays_all_mutations_within_memory_and_time(seed, tmp_path):
    path = tmp_path / "mutated.jsonl"
    streams = corpus(seed)
    with path.open("w", encoding="utf-8") as f:
        for lines, _ in streams:
            f.write("\n".join(lines) + "\n")
    exp = expected(path)
    began = time.monotonic()
    status, out, peak_kb = _replay_until_ended(path)
    took = time.monotonic() - began
    assert status == 0, out[-3000:]
    closing = re.search(r"kdtree tui: (\d+) rounds, tau (\S+), .* (\d+) malformed lines", out)
    assert closing, out[-3000:]
    assert int(closing[1]) == len(exp.rounds)
    assert closing[2] == (f"{exp.tau:.2f}" if exp.rounds else "—")
    assert int(closing[3]) == exp.malformed
    assert 0 < peak_kb / 1024 < MEMORY_LIMIT_MB, f"peak memory {peak_kb / 1024:.0f} MB"
    assert took < 180, f"{took:.0f} s"


def _replay_until_ended(path: Path) -> tuple[int, str, int]:
    """`kdtree tui --replay PATH --speed 0` on a pty, quitting once the replay has ended
    (as `q` does). Returns the exit status, the output and the child's peak memory (KB)."""
    prelude = (
        "from kdtree_cli.tui import app as tui_app\n"
        "done = tui_app.MonitorApp.on_source_status\n"
        "def on_status(self, message):\n"
        "    done(self, message)\n"
        "    if message.state.value in ('ended', 'dropped', 'failed'):\n"
        "        self.set_timer(0.5, self.exit)\n"  # as the `q` key does
        "tui_app.MonitorApp.on_source_status = on_status\n"
    )
    return kdtree_in_pty(["tui", "--replay", str(path), "--speed", "0"], prelude=prelude, timeout_s=170)
