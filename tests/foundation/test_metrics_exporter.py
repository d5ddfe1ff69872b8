"""The Prometheus exporter as a long-running server feeds it: requests that end without a final
round (a client hung up) are forgotten past a bound while the live ones keep counting exactly,
and a rank share's null collective time is not a stage sample."""

from __future__ import annotations

from python_engine.metrics_exporter import TRACKED_REQUESTS_MAX, PrometheusExporter


def round_event(request: int, tokens: int, accept: int, collective=0.0) -> dict:
    return {"event": "round", "request": request, "round": 0, "accept_len": accept, "tree_size": 8,
            "tree_depth": accept, "tokens": tokens, "done": False,
            "times_us": {"draft": 10.0, "tree_build": 1.0, "verify": 20.0, "commit": 1.0, "collective": collective}}


def counter(exporter: PrometheusExporter, name: str, labels: dict | None = None) -> float:
    return exporter.registry.get_sample_value(name, labels or {}) or 0.0


def test_abandoned_requests_are_forgotten_and_live_ones_still_count(rng):
    exp = PrometheusExporter(None)
    live, live_tokens, expected = 10**6, 0, 0
    abandoned = TRACKED_REQUESTS_MAX + int(rng.integers(1, 500))
    for r in range(abandoned):
        if r % 97 == 0:  # the live request's rounds, interleaved
            accept = int(rng.integers(1, 9))
            live_tokens += accept
            expected += accept
            exp.observe(round_event(live, live_tokens, accept))
        first = int(rng.integers(1, 9))
        expected += first
        exp.observe(round_event(r, first, first))  # a request's one round, then it is gone
    assert len(exp._last_tokens) <= TRACKED_REQUESTS_MAX
    assert counter(exp, "kdtree_generation_tokens_total") == expected
    exp.close()


def test_a_rank_share_round_with_no_collective_time():
    exp = PrometheusExporter(None)
    exp.observe(round_event(0, 3, 3, collective=None))
    assert counter(exp, "kdtree_round_stage_seconds_count", {"stage": "verify"}) == 1
    assert counter(exp, "kdtree_round_stage_seconds_count", {"stage": "collective"}) == 0
    exp.close()
