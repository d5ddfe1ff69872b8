"""`kdtree tui --url`: the monitor's source that follows a running server's events stream
hands on the server's run_start and then every round event of a request, as lines the
events parser accepts; a server with a key refuses it without one."""

from __future__ import annotations

import queue
import time

import openai
from conftest import completion_with_rounds, ended_request_rounds, served, wait_idle

from kdtree_cli.tui.messages import SourceBatch, SourceState, SourceStatus
from kdtree_cli.tui.sources.server_url import ServerSource
from python_engine.events import parse

WAIT_S = 60.0


def _follow(source: ServerSource) -> queue.Queue:
    got: queue.Queue = queue.Queue()

    def post(message) -> None:
        got.put(message)
        if isinstance(message, SourceBatch):
            source.ack()

    source.start(post)
    return got


def _next_status(got: queue.Queue, wanted: set[SourceState]) -> SourceStatus:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        m = got.get(timeout=WAIT_S)
        if isinstance(m, SourceStatus) and m.state in wanted:
            return m
    raise AssertionError(f"no status in {wanted}")


def test_url_source_follows_a_request(demo_server, rng):
    url, serving = demo_server
    wait_idle(serving)  # the rounds that follow are this test's request's only
    source = ServerSource(url)
    got = _follow(source)
    try:
        _next_status(got, {SourceState.STREAMING})
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        done = completion_with_rounds(c, rng, max_tokens=int(rng.integers(4, 40)))
        lines: list[str] = []
        deadline = time.monotonic() + WAIT_S
        events: list[dict] = []
        while ended_request_rounds(events) is None and time.monotonic() < deadline:
            m = got.get(timeout=WAIT_S)
            if isinstance(m, SourceBatch):
                events += [parse(line)[0] for line in m.lines]
        assert events[0]["event"] == "run_start" and events[0]["model"] == "demo-target"
        rounds = ended_request_rounds(events)
        assert rounds and rounds[-1]["tokens"] == done.usage.completion_tokens
        assert [r["round"] for r in rounds] == list(range(len(rounds)))
    finally:
        source.stop()


def test_url_source_without_the_key_fails_clearly(rng):
    with served(api_key=f"k{rng.integers(0, 2**40)}", max_slots=1) as (url, _):
        source = ServerSource(url)
        got = _follow(source)
        try:
            status = _next_status(got, {SourceState.FAILED, SourceState.STREAMING})
            assert status.state == SourceState.FAILED and "--api-key" in status.detail
        finally:
            source.stop()


def test_tui_url_is_one_source_and_an_address(tmp_path):
    import pytest

    from kdtree_cli.tui.launch import build_source
    from python_engine.errors import KdtreeError

    assert isinstance(build_source(url="http://127.0.0.1:8000"), ServerSource)
    with pytest.raises(KdtreeError, match="http://127.0.0.1:8000"):
        build_source(url="127.0.0.1:8000")
    with pytest.raises(KdtreeError, match="--follow and --url"):
        build_source(url="http://127.0.0.1:8000", follow=tmp_path / "events.jsonl")
