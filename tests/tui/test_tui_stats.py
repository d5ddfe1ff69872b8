"""The stats model on its own: its figures against the oracle on every recorded file and on
random streams, and the awkward cases (a second run, a user reset, time going backwards, a
request restarting its counter, bad optional fields, unknown kinds)."""

from __future__ import annotations

import json
import math
import random

import pytest
from tui_helpers import SNAPSHOT_FILE, assert_matches, each_event_file
from tui_oracle import STAGES, expected

from kdtree_cli.tui.stats import RunStats
from python_engine.events import iter_events, validate


def feed(stats: RunStats, lines) -> RunStats:
    stats.ingest_lines(list(lines))
    return stats


@each_event_file
def test_figures_match_the_oracle_on_recorded_files(event_file):
    lines = event_file.read_text().splitlines()
    stats = feed(RunStats(), lines)
    assert_matches(stats, expected(event_file))
    json.dumps(stats.summary())  # the summary is plain JSON
    parsed_one_by_one = RunStats()
    for parsed in iter_events(lines):
        parsed_one_by_one.ingest(parsed)
    assert parsed_one_by_one.summary() == stats.summary()


def random_run(rng: random.Random, n: int) -> list[str]:
    """A random but valid stream: several requests interleaved, uneven times, gaps."""
    lines = [json.dumps(validate({
        "event": "run_start", "t": 0.0, "engine": "native", "model": "m", "drafter": "d",
        "device": "cuda:0", "host": "h", "dtype": "bf16", "block_size": 8, "budget": 16,
        "temperature": 0.0}))]
    t, tokens = 0.0, {}
    for i in range(n):
        req = rng.randrange(3)
        depth = rng.randrange(0, 8)
        a = rng.randint(1, depth + 1)
        t += rng.choice([0.001, 0.02, 0.05, 0.3, 1.7])
        tokens[req] = tokens.get(req, rng.randrange(0, 3)) + a
        lines.append(json.dumps(validate({
            "event": "round", "t": round(t, 6), "request": req, "round": i, "accept_len": a,
            "tree_size": rng.randrange(depth, 20), "tree_depth": depth,
            "times_us": {s: rng.uniform(1, 5e4) for s in STAGES}, "tokens": tokens[req]})))
    return lines


@pytest.mark.parametrize("window,bucket_s", [(100, None), (7, 0.1), (1, 2.0)])
def test_figures_match_the_oracle_on_random_streams(tmp_path, seed, window, bucket_s):
    rng = random.Random(seed)
    lines = random_run(rng, rng.randrange(50, 400))
    path = tmp_path / "random.jsonl"
    path.write_text("\n".join(lines) + "\n")
    stats = feed(RunStats(window=window, bucket_s=bucket_s), lines)
    assert_matches(stats, expected(path, window=window, bucket_s=bucket_s))


@each_event_file
def test_a_second_run_starts_fresh_figures_but_keeps_stream_counts(event_file):
    lines = event_file.read_text().splitlines()
    stats = feed(RunStats(), lines + ["not json"] + lines)
    one = expected(event_file)
    assert stats.rounds == len(one.rounds)
    assert math.isclose(stats.tau, one.tau)
    assert stats.events == 2 * one.events_in_stream and stats.malformed == 1
    assert any("new run started" in e.text for e in stats.log)


def test_user_reset_keeps_facts_and_log_and_restarts_buckets():
    lines = SNAPSHOT_FILE.read_text().splitlines()
    stats = feed(RunStats(), lines[:150])
    facts, log_len = stats.facts, len(stats.log)
    stats.reset()
    assert stats.facts is facts and len(stats.log) == log_len
    assert stats.rounds == 0 and math.isnan(stats.tau) and not stats.history
    feed(stats, lines[150:])
    assert stats.rounds == sum('"event":"round"' in ln for ln in lines[150:])


def test_time_going_backwards_and_counter_restarts_are_absorbed():
    base = {"event": "round", "request": 7, "round": 0, "tree_size": 4, "tree_depth": 2,
            "times_us": dict.fromkeys(STAGES, 1000.0)}
    stats = RunStats(bucket_s=1.0)
    for t, a, tok in [(0.1, 2, 10), (1.5, 3, 13), (1.2, 1, 14), (2.5, 2, 3)]:
        stats.ingest_event(validate(dict(base, t=t, accept_len=a, tokens=tok)))
    # the first round of a request counts accept_len (not the prefill token); the restart
    # (13 -> 3) counts accept_len too; t=1.2 after t=1.5 lands in the open bucket
    assert stats.tokens == 2 + 3 + 1 + 2
    assert list(stats.history) == [2.0, 4.0]


def test_bad_tree_fields_are_warned_about_and_ignored():
    ev = {"event": "round", "t": 1.0, "request": 0, "round": 3, "accept_len": 2, "tree_size": 2,
          "tree_depth": 2, "times_us": dict.fromkeys(STAGES, 1.0), "tokens": 5}
    good = dict(ev, tree={"parent": [-1, 0, 1], "tokens": [5, 6, 7], "accepted": [0, 1]})
    stats = feed(RunStats(), [json.dumps(good)])
    assert stats.last_tree.accepted == [0, 1] and stats.last_tree.text is None
    bad_trees = ({"parent": [-1, 0], "tokens": [5, 6, 7], "accepted": [0]},  # lengths differ
                 {"parent": [-1, 2, 0], "tokens": [5, 6, 7], "accepted": [0]},  # parent >= i
                 {"parent": [-1, 0, 0], "tokens": [5, 6, 7], "accepted": [0, 1, 2]},  # not a path
                 {"parent": [-1, 0, 1], "tokens": [5, 6, 7]},  # no accepted
                 "a string")
    for bad in bad_trees:
        stats = feed(RunStats(), [json.dumps(dict(ev, tree=bad))])
        assert stats.rounds == 1 and stats.malformed == 0, "the round still counts"
        assert stats.last_tree.parent is None
        assert any('line 1: round: optional field ignored: "tree' in e.text for e in stats.log), list(stats.log)


def test_gpus_unknown_kinds_and_warning_events():
    stats = feed(RunStats(), map(json.dumps, [
        {"event": "gpu_sample", "t": 1.0, "gpus": [{"id": 0, "util": 91.5, "mem_gb": 70.25}]},
        {"event": "gpu_sample", "t": 1.5, "gpus": [{"id": 1, "util": 10.0}, {"nope": 1}, 3]},
        {"event": "warning", "t": 2.0, "message": "drafter cache evicted"}]))
    assert stats.unknown_kinds == 2 and stats.malformed == 0
    assert stats.gpus[0].util == 91.5 and stats.gpus[0].mem_gb == 70.25
    assert 1 not in stats.gpus, "a gpus list with a bad entry is ignored whole"
    assert any('ignored: "gpus[1]" must be an object with an id' in e.text for e in stats.log)
    assert stats.log[-1].level == "warning" and stats.log[-1].text == "drafter cache evicted"
