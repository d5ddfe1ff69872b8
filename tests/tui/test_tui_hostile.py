"""Hostile input for the monitor: each case feeds a line that a broken writer or an
attacker could produce, inside a recorded run, and names what must come out. Every case
checks the same property: the monitor survives the line, counts it as the independent
oracle (tui_oracle.py) does, its figures equal the oracle's on the valid lines, and every
panel draws in bounded time with nothing a terminal would act on."""

from __future__ import annotations

import copy
import json
import math
import random
import time

import pytest
from tui_helpers import SNAPSHOT_FILE, assert_matches
from tui_oracle import expected_lines, read_lines

from kdtree_cli.tui.stats import ACCEPT_CAP, DEPTH_CAP, RunStats
from kdtree_cli.tui.widgets.acceptance import AcceptancePanel
from kdtree_cli.tui.widgets.depth_rates import DepthRatesPanel
from kdtree_cli.tui.widgets.gpus import GpuPanel
from kdtree_cli.tui.widgets.run_facts import RunFactsPanel
from kdtree_cli.tui.widgets.run_summary import RunSummaryPanel
from kdtree_cli.tui.widgets.stage_times import StageTimesPanel
from kdtree_cli.tui.widgets.throughput import ThroughputPanel
from kdtree_cli.tui.widgets.tree_view import DRAWN_NODES_MAX, TreePanel
from python_engine.events import LINE_MAX_CHARS

CLEAN = read_lines(SNAPSHOT_FILE)  # a run with trees and GPU figures
START = json.loads(CLEAN[0])
ROUND = json.loads(CLEAN[1])
PANELS = (AcceptancePanel, DepthRatesPanel, GpuPanel, RunFactsPanel, RunSummaryPanel,
          StageTimesPanel, ThroughputPanel, TreePanel)
DRAW_BUDGET_S = 0.5  # one panel's draw at the largest size: far above the ~ms it takes
DRAW_TRIES = 3  # a loaded CI machine has stalled one draw past the budget (0.61 s, a 1 MB model name)


def a_round(**changes) -> str:
    return json.dumps(dict(ROUND, **changes))


def a_start(**changes) -> str:
    return json.dumps(dict(START, **changes))


def times(**changes) -> dict:
    return dict(ROUND["times_us"], **changes)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def big_tree(n: int) -> dict:
    rng = random.Random(n)
    parent = [-1] + [rng.randrange(i) for i in range(1, n)]
    path = [n - 1]
    while path[-1]:
        path.append(parent[path[-1]])
    return {"parent": parent, "tokens": [rng.randrange(50000) for _ in range(n)], "accepted": path[::-1]}


NAN, INF = float("nan"), float("inf")
MALFORMED, COUNTED = "malformed", "counted"

# (what it feeds, the line, what must come out)
CASES = [
    ("round_t_NaN", a_round(t=NAN), MALFORMED),
    ("round_t_Infinity", a_round(t=INF), MALFORMED),
    ("round_t_negative", a_round(t=-1.0), MALFORMED),
    ("round_t_integer_of_300_digits", a_round(t=10**300), MALFORMED),
    ("round_t_a_string", a_round(t="3.5"), MALFORMED),
    ("round_stage_time_Infinity", a_round(times_us=times(verify=INF)), MALFORMED),
    ("round_stage_time_NaN", a_round(times_us=times(draft=NAN)), MALFORMED),
    ("round_stage_time_negative", a_round(times_us=times(commit=-5.0)), MALFORMED),
    ("round_stage_time_1e308", a_round(times_us=times(verify=1e308)), MALFORMED),
    ("round_accept_len_integer_of_300_digits", a_round(accept_len=10**300), MALFORMED),
    ("round_tokens_integer_of_5000_digits", a_round(tokens=7).replace('"tokens": 7', '"tokens": ' + "9" * 5000),
     MALFORMED),
    ("round_accept_len_true", a_round(accept_len=True), MALFORMED),
    ("round_accept_len_a_float", a_round(accept_len=3.0), MALFORMED),
    ("round_request_a_list", a_round(request=[1]), MALFORMED),
    ("round_request_an_object", a_round(request={"id": 1}), MALFORMED),
    ("round_times_us_a_list", a_round(times_us=[1, 2, 3, 4]), MALFORMED),
    ("run_end_rounds_a_string", json.dumps({"event": "run_end", "t": 9.0, "tokens": 10, "decode_s": 1.0,
                                            "tokens_per_s": 10.0, "tau": 2.0, "rounds": "40"}), MALFORMED),
    ("run_end_tau_NaN", json.dumps({"event": "run_end", "t": 9.0, "tokens": 10, "decode_s": 1.0,
                                    "tokens_per_s": 10.0, "tau": NAN, "rounds": 4}), MALFORMED),
    ("run_start_model_an_object", a_start(model={"name": "x"}), MALFORMED),
    ("run_start_temperature_Infinity", a_start(temperature=INF), MALFORMED),
    ("error_message_a_list", json.dumps({"event": "error", "t": 1.0, "message": ["a"]}), MALFORMED),
    ("warning_without_message", json.dumps({"event": "warning", "t": 1.0}), MALFORMED),
    ("event_kind_a_number", json.dumps({"event": 5, "t": 1.0}), MALFORMED),
    ("json_nested_100000_deep", nested(100_000), MALFORMED),
    ("json_object_nested_5000_deep_in_a_round", a_round()[:-1] + ', "x": ' + nested(5000) + "}", MALFORMED),
    ("top_level_array", "[1, 2, 3]", MALFORMED),
    ("top_level_null", "null", MALFORMED),
    ("empty_object", "{}", MALFORMED),
    ("bytes_that_are_not_json", "\ufffd\ufffd\x00\x01 binary", MALFORMED),
    ("line_over_the_limit", a_round(pad="x" * (LINE_MAX_CHARS + 10)), MALFORMED),
    # valid lines with a bad optional field: the event counts, the field is dropped
    ("gpu_id_an_object", a_round(gpus=[{"id": {"a": 1}, "util": 5.0}]), COUNTED),
    ("gpu_util_NaN", a_round(gpus=[{"id": 0, "util": NAN}]), COUNTED),
    ("gpus_list_of_100000", a_round(gpus=[{"id": i} for i in range(100_000)]), COUNTED),
    ("tree_parent_a_string", a_round(tree={"parent": "x", "tokens": [1], "accepted": [0]}), COUNTED),
    ("tree_parent_cycle", a_round(tree={"parent": [-1, 2, 1], "tokens": [1, 2, 3], "accepted": [0]}), COUNTED),
    # valid but absurd values: counted, bounded in memory and drawing time, said so
    ("accept_len_10e9", a_round(accept_len=10**9), COUNTED),
    ("tree_depth_10e9", a_round(tree_depth=10**9, accept_len=10**9), COUNTED),
    ("tree_of_200000_nodes", a_round(tree=big_tree(200_000)), COUNTED),
    ("stage_time_of_an_hour", a_round(times_us=times(verify=3.6e9)), COUNTED),
    ("t_far_in_the_future", a_round(t=1e9 - 1), COUNTED),
    ("request_id_a_1MB_string", a_round(request="r" * 1_000_000), MALFORMED),
    ("request_id_with_escape_codes", a_round(request="\x1b[2J"), MALFORMED),
    ("model_name_with_escape_codes", a_start(model="\x1b[2J\x1b[31mpwned\x07"), COUNTED),
    ("model_name_of_1MB", a_start(model="m" * 1_000_000), COUNTED),
    ("message_with_a_lone_surrogate", json.dumps({"event": "error", "t": 2.0, "message": "bad \ud800 byte"}),
     COUNTED),
    ("unknown_field_nested_900_deep", a_round()[:-1] + ', "x": ' + nested(900) + "}", COUNTED),
    ("unknown_kind_with_NaN_elsewhere", json.dumps({"event": "sample", "t": 4.0, "x": NAN}), COUNTED),
]


def feed_with(line: str, seed: int) -> tuple[list[str], int]:
    """The clean run with `line` inserted at a random place after the run_start."""
    at = random.Random(seed).randrange(1, len(CLEAN) + 1)
    return CLEAN[:at] + [line] + CLEAN[at:], at


def draw_everything(stats: RunStats) -> dict[str, str]:
    """Every panel drawn at a large size; the time each takes is bounded."""
    out = {}
    for cls in PANELS:
        panel = cls()
        took = []
        for _ in range(DRAW_TRIES):  # the quickest: a draw that is slow is slow every time
            began = time.perf_counter()
            text = panel.draw(stats, 160, 48).plain
            took.append(time.perf_counter() - began)
            if took[-1] < DRAW_BUDGET_S:
                break
        assert min(took) < DRAW_BUDGET_S, f"{cls.__name__} took {min(took):.2f} s to draw ({len(took)} tries)"
        assert "\x1b" not in text and "\x07" not in text, f"{cls.__name__} draws control codes"
        text.encode("utf-8")  # a lone surrogate would fail here, as in a terminal
        out[cls.__name__] = text + "\n" + panel.note(stats)
    return out


@pytest.mark.parametrize("case,line,outcome", CASES, ids=[c[0] for c in CASES])
def test_hostile_line_in_a_recorded_run(case, line, outcome, seed):
    lines, at = feed_with(line, seed)
    stats = RunStats()
    began = time.perf_counter()
    stats.ingest_lines(lines)
    assert time.perf_counter() - began < 5.0
    exp = expected_lines(lines)
    assert_matches(stats, exp)  # the figures of the valid lines, the oracle's counts
    assert stats.malformed == (1 if outcome == MALFORMED else 0)
    if outcome == MALFORMED:
        skipped = [e.text for e in stats.log if e.text.startswith("skipped")]
        assert skipped and skipped[0].startswith(f"skipped line {at + 1}: "), skipped
        assert len(skipped[0]) < 400, "the warning names the problem, not the whole line"
    drawn = draw_everything(stats)
    json.dumps(stats.summary())  # the summary the `s` key writes is plain JSON
    copy.deepcopy(stats)  # what the `p` key does
    if case == "accept_len_10e9":
        assert stats.hist[ACCEPT_CAP] == 1 and f"≥{ACCEPT_CAP}" in drawn["AcceptancePanel"]
    if case == "tree_depth_10e9":
        assert stats.too_deep == 1 and max(r.depth for r in stats.depth_rates) == DEPTH_CAP
        assert f"deeper than {DEPTH_CAP}" in drawn["DepthRatesPanel"]
    if case == "tree_of_200000_nodes" and at == len(lines) - 1:  # the newest tree is the big one
        rows = drawn["TreePanel"].splitlines()
        shown = sum(1 for r in rows if "●" in r or "○" in r)  # a header line may take one row
        assert len(rows) <= 48 and shown >= 46 and rows[-1] == f"… {200_000 - shown} more nodes"
    if case.startswith("model_name"):
        shown = drawn["RunFactsPanel"]
        assert "\ufffd[2J" in shown or "m" * 150 in shown
        assert len(stats.facts["model"]) <= 200
    if case.startswith(("gpu", "tree_parent")):
        assert any("optional field ignored" in e.text for e in stats.log), "a dropped field is logged"


def test_tree_view_draws_a_bounded_part_of_a_huge_tree():
    stats = RunStats()
    stats.ingest_lines([CLEAN[0], a_round(tree=big_tree(200_000))])
    from kdtree_cli.tui.widgets.tree_view import drawn_nodes, tree_lines

    tree = stats.last_tree
    nodes = drawn_nodes(tree)
    assert len(nodes) <= DRAWN_NODES_MAX + len(tree.accepted)
    assert set(tree.accepted) <= set(nodes)
    assert all(tree.parent[i] in set(nodes) for i in nodes[1:]), "the drawn nodes form a tree"
    assert [n for n, _, on in tree_lines(tree) if on] == tree.accepted, "the path reads straight down"


def test_rolling_means_recover_once_a_huge_stage_time_leaves_the_window(seed):
    rng = random.Random(seed)
    window = 10
    stats = RunStats(window=window)
    lines = [CLEAN[0]]
    for i in range(200):
        verify = 3.6e9 if i == 50 else rng.uniform(1.0, 100.0)
        lines.append(a_round(t=1.0 + i * 0.01, round=i, times_us=times(verify=verify)))
    stats.ingest_lines(lines)
    last = [json.loads(x)["times_us"]["verify"] for x in lines[-window:]]
    assert stats.stage_means_us["verify"] == pytest.approx(sum(last) / window, rel=1e-12, abs=1e-9)
    assert math.isfinite(stats.tps_avg)


def test_tokens_per_second_recovers_after_a_far_future_t():
    """Rounds every 0.1 s with 2 tokens each (20 tokens/s); one round claims t = 1e9 - 1."""
    lines = [a_start(t=0.0)]
    tokens = 0
    for i in range(400):
        tokens += 2
        t = 1e9 - 1 if i == 100 else 0.05 + 0.1 * i
        lines.append(a_round(t=t, round=i, request=0, accept_len=2, tokens=tokens))
    stats = RunStats(bucket_s=1.0)
    stats.ingest_lines(lines)
    assert stats.tps_now == pytest.approx(20.0), "tokens/s now follows the rounds after the bad t"
    assert_matches(stats, expected_lines(lines, bucket_s=1.0))
    zeros = sum(1 for r in stats.history if r == 0.0)
    assert zeros <= 60, "the jump costs at most a minute of empty buckets"


def test_a_nan_stage_time_never_reaches_the_means():
    lines = [CLEAN[0], a_round(t=5.0, times_us=times(verify=NAN)), a_round(t=5.1, times_us=times(verify=-1.0))]
    lines += CLEAN[1:]
    stats = RunStats()
    stats.ingest_lines(lines)
    assert stats.malformed == 2
    assert all(math.isfinite(v) and v > 0 for v in stats.stage_means_us.values())
    assert_matches(stats, expected_lines(lines))
