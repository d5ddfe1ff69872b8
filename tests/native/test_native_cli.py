"""The native engine behind the CLI, on the CPU through the emulated build: `kdtree run
--engine native` with a prompts file (several requests decoded together) writes the same
metrics contract as the torch engine (run_start, round events with trees, run_end whose
rounds equal the round events), and its tokens equal the torch engine's AR tokens; the
Prometheus endpoint serves the metrics the events imply while a run goes on."""

from __future__ import annotations

import json
import socket
import sys
import urllib.request

import pytest
from native_cases import DEMO_DRAFTER, DEMO_TARGET

from python_engine.events import EventWriter, iter_events
from python_engine.metrics_exporter import PrometheusExporter
from python_engine.native import library as L


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(args: list[str], monkeypatch, capsys) -> str:
    from typer.testing import CliRunner

    from kdtree_cli.app import app

    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_run_engine_native_writes_the_contract(native_variant, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(L.ENV_LIBRARY, str(L.library_path(native_variant)))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text('def add(a, b):\n{"prompt": "import os\\n"}\n{"ids": [5, 6, 7, 8]}\n')
    metrics = tmp_path / "m.jsonl"
    out = run_cli(["run", "--engine", "native", "--model", str(DEMO_TARGET), "--drafter", str(DEMO_DRAFTER),
                   "--prompts", str(prompts), "--max-tokens", "12", "--dtype", "float32", "--metrics", str(metrics),
                   "--ignore-eos"], monkeypatch, capsys)
    assert "summary native DDTree" in out and "request 2" in out
    events = [p.event for p in iter_events(metrics.read_text().splitlines())]
    assert all(e is not None for e in events), "a malformed metrics line"
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and events[0]["engine"] == "native"
    rounds = [e for e in events if e["event"] == "round"]
    assert len(rounds) == events[-1]["rounds"], "run_end.rounds must count the round events"
    assert {e["request"] for e in rounds} == {0, 1, 2}
    assert any("tree" in e for e in rounds), "no round carried a tree sample"
    for e in rounds:
        if "tree" in e:
            t = e["tree"]
            assert len(t["parent"]) == e["tree_size"] + 1 and t["parent"][0] == -1
            assert len(t["accepted"]) == e["accept_len"]
    assert events[-1]["tokens"] == 3 * 12
    ends = {e["request"]: (i, e) for i, e in enumerate(events) if e["event"] == "request_end"}
    assert sorted(ends) == [0, 1, 2] and len(ends) == kinds.count("request_end")
    for r, (at, end) in ends.items():
        own = [i for i, e in enumerate(events) if e["event"] == "round" and e["request"] == r]
        assert (end["tokens"], end["reason"], end["rounds"]) == (12, "length", len(own))
        assert at > max(own), "a request_end before its request's last round"


def test_requests_that_their_prefill_ends_have_a_request_end(native_variant, tmp_path, monkeypatch, capsys):
    """--max-tokens 1: every request ends at its prefill, with no round; each still gets its
    request_end (what counts it for the Prometheus exporter and the server's readers)."""
    monkeypatch.setenv(L.ENV_LIBRARY, str(L.library_path(native_variant)))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text('def add(a, b):\nimport os\n{"ids": [5, 6, 7, 8]}\n')
    metrics = tmp_path / "m.jsonl"
    run_cli(["run", "--engine", "native", "--model", str(DEMO_TARGET), "--drafter", str(DEMO_DRAFTER),
             "--prompts", str(prompts), "--max-tokens", "1", "--dtype", "float32", "--metrics", str(metrics),
             "--ignore-eos"], monkeypatch, capsys)
    events = [p.event for p in iter_events(metrics.read_text().splitlines())]
    assert [e["event"] for e in events if e["event"] == "round"] == []
    ends = sorted((e["request"], e["tokens"], e["reason"], e["rounds"]) for e in events if e["event"] == "request_end")
    assert ends == [(0, 1, "length", 0), (1, 1, "length", 0), (2, 1, "length", 0)]


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_prometheus_endpoint_follows_the_events():
    port = free_port()
    exporter = PrometheusExporter(port, addr="127.0.0.1")
    try:
        w = EventWriter(None, listeners=[exporter.observe])
        times = {"draft": 100.0, "tree_build": 10.0, "verify": 300.0, "commit": 5.0}
        rounds = [(0, 3, 4, 3), (0, 1, 2, 4), (1, 5, 5, 5), (1, 2, 3, 7)]  # request, accept_len, depth, tokens
        for req, acc, depth, tokens in rounds:
            w.emit("round", request=req, round=0, accept_len=acc, tree_size=8, tree_depth=depth, times_us=times,
                   tokens=tokens, done=tokens == 7)
        w.emit("request_end", request=1, tokens=7, reason="length", rounds=2, ttft_s=0.03, e2e_s=0.4)
        w.emit("request_end", request=2, tokens=1, reason="stop", rounds=0, e2e_s=0.02)  # its prefill ended it
        m = scrape(port)
    finally:
        exporter.close()
    assert m["kdtree_spec_decode_num_drafts_total"] == 4
    assert m["kdtree_spec_decode_num_accepted_tokens_total"] == (3 - 1) + (1 - 1) + (5 - 1) + (2 - 1)
    # depth 1 reached by all 4 rounds, accepted in 3 (accept_len - 1 >= 1)
    assert m['kdtree_spec_decode_num_drafted_per_pos_total{position="1"}'] == 4
    assert m['kdtree_spec_decode_num_accepted_tokens_per_pos_total{position="1"}'] == 3
    assert m['kdtree_spec_decode_num_accepted_tokens_per_pos_total{position="4"}'] == 1
    assert m["kdtree_spec_accept_length_count"] == 4 and m["kdtree_spec_accept_length_sum"] == 11
    # tokens: first round of a request counts its accept_len; later ones the growth
    assert m["kdtree_generation_tokens_total"] == 3 + 1 + 5 + 2
    assert m['kdtree_requests_finished_total{reason="length"}'] == 1
    assert m['kdtree_requests_finished_total{reason="stop"}'] == 1
    assert m["kdtree_time_to_first_token_seconds_count"] == 1 and m["kdtree_time_to_first_token_seconds_sum"] == 0.03
    assert m["kdtree_e2e_request_latency_seconds_count"] == 2
    assert m['kdtree_e2e_request_latency_seconds_bucket{le="0.02"}'] == 1
    assert m['kdtree_round_stage_seconds_count{stage="verify"}'] == 4


def test_prometheus_refuses_a_bad_port():
    from python_engine.errors import KdtreeError

    with pytest.raises(KdtreeError, match="1..65535"):
        PrometheusExporter(70000)


def test_run_dummy_rank_share_says_what_it_is(native_variant, tmp_path, monkeypatch, capsys):
    """--load-format dummy --world-size 2 --rank 1: one rank's share on dummy weights; the
    summary and the events say so, and the collectives are reported as not run (null)."""
    from typer.testing import CliRunner

    from kdtree_cli.app import app

    monkeypatch.setenv(L.ENV_LIBRARY, str(L.library_path(native_variant)))
    metrics = tmp_path / "m.jsonl"
    base = ["run", "--engine", "native", "--model", str(DEMO_TARGET), "--drafter", str(DEMO_DRAFTER),
            "--prompt-ids", "5,6,7", "--max-tokens", "4", "--dtype", "float32", "--load-format", "dummy"]
    out = run_cli([*base, "--world-size", "2", "--rank", "1", "--metrics", str(metrics), "--gpu-memory-limit", "4"],
                  monkeypatch, capsys)
    assert "DUMMY weights" in out and "rank 1 of 2 alone" in out
    events = [p.event for p in iter_events(metrics.read_text().splitlines())]
    start = events[0]
    assert (start["weights"], start["world_size"], start["rank"], start["collectives"]) == ("dummy", 2, 1, "not run")
    rounds = [e for e in events if e["event"] == "round"]
    assert rounds and all(e["times_us"]["collective"] is None for e in rounds)

    refused = CliRunner().invoke(app, [*base, "--gpu-memory-limit", "0.001"])
    assert refused.exit_code != 0 and "the weights alone are over it" in str(refused.exception)
    torch = CliRunner().invoke(app, [*base[:2], "torch", *base[3:]])
    assert torch.exit_code != 0 and "--load-format dummy: the native engine's" in str(torch.exception)
